"""Index arithmetic the rotary readings share: the bracketed parts of an expression, the subscript of one read, and
the head sizes first by the strides a buffer's index multiplies a varying term by (``index_reading.index_strides``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import Evidence, feeding, flows, index_sites, plain
from agent_core.templating.experts.index_reading import index_strides as _index_strides


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
    flow = flows(ev.body)
    fed = set().union(set(), *(feeding(flow, t) for t in terms))
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
