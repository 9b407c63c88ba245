"""Index arithmetic the rotary readings share: the bracketed parts of an expression, the subscript of one read, and
the strides by which a buffer's index multiplies a varying term
(``_index_strides``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import (Evidence, additive_terms, assignments, factors, feeding, flows,
                                                    index_sites, known_factors, modified, plain, uncast, unparen)


def _index_strides(ev: Evidence, name: str, every_value: bool = False) -> set:
    """The strides (values on every size set) by which the indices of ``name`` multiply a varying term (a thread,
    block or loop index): ``s_id * d2`` gives the values of ``d2``. ``every_value``: a local the body assigns more
    than once (``token_head`` of the query's loop and of the key's) stands for each of its values in turn."""
    values: dict[str, list[str]] = {}
    if every_value:
        text = uncast(ev.body)
        for target, value in assignments(text):
            values.setdefault(target, []).append(value)
        moved = modified(text)
        values = {n: v for n, v in values.items() if len(v) > 1 and n not in moved}
    strides = set()
    for site in index_sites(ev, name):
        site, seen = list(site), set()
        while any(unparen(t) in values and unparen(t) not in seen for _, t in site):
            t = next(unparen(t) for _, t in site if unparen(t) in values and unparen(t) not in seen)
            seen.add(t)
            site = [x for x in site if unparen(x[1]) != t] + [x for v in values[t] for x in additive_terms(unparen(v))]
        for _, t in site:
            v = known_factors(ev, factors(unparen(t)))
            if v is not None:
                strides.add(v)
    return strides


def _head_sizes_first(ev: Evidence, hss: list, q, k, q_tok: tuple, k_tok: tuple) -> None:
    """Sorts head-size candidates (SizeExpr, values) in place: first those the query's (and the key's) index
    multiplies a varying term by (a head stride: not a token's whole row, unless a token is one head), then the
    others, a token's whole row last, each kind in the arguments' order. What an argument is called says nothing."""
    strides = _index_strides(ev, q.name, True)
    if k is not None:
        strides &= _index_strides(ev, k.name, True)
    heads = strides - {q_tok, k_tok} or strides
    # where the strides say nothing (a flat index over every element): the size the query's index is reduced modulo
    # (`h = idx % head_dim`, an element's place in its head) first
    moduli = _index_moduli(ev, q.name)
    hss.sort(key=lambda h: (0 if h[1] in heads else 2 if h[1] in strides else 1,
                            not set(re.findall(r"\(int\)\((\w+)\)", h[0].c)) & moduli))


def _index_moduli(ev: Evidence, name: str) -> set[str]:
    """The names a value feeding the indices of ``name`` is taken modulo anywhere in the body (``h = idx % d`` beside
    ``x[idx - h + j]``, or ``x[e]`` beside ``d = e % head_size``: ``d``): the row an element's flat index runs in."""
    terms = [t for site in index_sites(ev, name) for _, t in site]
    fed = set().union(set(), *(feeding(flows(ev.body), t) for t in terms))
    flat = plain(ev.body)
    return {m for n in fed for m in re.findall(rf"(?<![\w.]){re.escape(n)}\)*%\(*([A-Za-z_]\w*)\b", flat)}


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
