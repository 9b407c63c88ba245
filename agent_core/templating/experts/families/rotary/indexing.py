"""Index arithmetic the rotary readings share: a product's factors, the bracketed parts of an expression, the
subscript of one read, and the strides by which a buffer's index multiplies a varying term
(``_index_strides``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import Evidence, index_sites, term_values, unparen


def _index_strides(ev: Evidence, name: str) -> set:
    """The strides (values on every size set) by which the indices of ``name`` multiply a varying term (a thread,
    block or loop index): ``s_id * d2`` gives the values of ``d2``."""
    strides = set()
    for site in index_sites(ev, name):
        for _, t in site:
            factors = _factors(unparen(t))
            known = [f for f in factors if term_values(ev, f) is not None]
            if known and len(known) < len(factors):
                v = term_values(ev, " * ".join(f"({f})" for f in known))
                if v is not None:
                    strides.add(v)
    return strides


def _factors(term: str) -> list[str]:
    """The top-level factors of a product (``(pos) * half`` → ``['(pos)', 'half']``)."""
    out, depth, cur = [], 0, ""
    for ch in term:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "*" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def _groups(text: str) -> list[str]:
    """Every bracketed or parenthesized part of ``text`` (the expressions a sum may sit in: an index, a call's
    arguments, a factor)."""
    out, opens = [], []
    for i, ch in enumerate(text):
        if ch in "([":
            opens.append(i)
        elif ch in ")]" and opens:
            out.append(text[opens.pop() + 1:i])
    return out


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_MEMBER = re.compile(r"(?<=\w)\s*\.\s*[A-Za-z_]\w*")


def _subscript_of(term: str, name: str) -> str | None:
    """The subscript of ``term`` where it is exactly one read ``name[...]``, else None."""
    m = re.match(rf"{re.escape(name)}\s*\[", term)
    if m is None:
        return None
    depth = 1
    for i in range(m.end(), len(term)):
        depth += term[i] in "(["
        depth -= term[i] in ")]"
        if depth == 0:
            return term[m.end():i] if i == len(term) - 1 else None
    return None
