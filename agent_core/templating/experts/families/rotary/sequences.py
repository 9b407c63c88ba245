"""Positions as one offset per sequence plus the token's index in it (flash-attn's ``seqlen_offsets``;
KT_EXPERT_POSITIONS 2): ``_sequence_offsets``."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import (ArgUse, Evidence, additive_terms, assignments, call_arguments, div,
                                                    factors, feeding, flows, index_sites, term_values, uncast,
                                                    unparen)
from agent_core.templating.experts.families.rotary.angles import _TRIG
from agent_core.templating.experts.families.rotary.indexing import _IDENT, _MEMBER, _groups, _subscript_of


class _Sequences(NamedTuple):
    """Tokens in sequences of ``seq`` tokens, the positions one offset per sequence (flash-attn's ``seqlen_offsets``:
    token s of sequence b at ``offsets[b] + s``; the expert's KT_EXPERT_POSITIONS 2), with what the body says of the
    tables and the pairs: the stride the position is multiplied by in the tables' indexing (None: not read), the
    values of the terms the query's indexing adds (NeoX's second element at + rot_dim / 2), and the rank."""
    seq: ArgUse
    tokens: tuple
    tokens_spec: str
    strides: tuple | None
    adds: set
    rank: int


def _sequence_offsets(ev: Evidence, p: ArgUse, q_names: list[str], q: ArgUse, k: ArgUse | None,
                      caches: list[ArgUse]) -> list[_Sequences]:
    """Positions as one offset per sequence plus the token's index in its sequence (flash-attn's ``seqlen_offsets``,
    the KV cache length of each sequence while decoding): the body adds a value read from ``p`` to something else
    (the index in the sequence), the sum reaches the cos/sin tables' index, and an int argument is the sequence
    length: the index in the sequence is computed from it (``t % seqlen``) or bounded by it (``m >= seqlen``), or the
    offsets' index is computed from it (``t / seqlen``); ``p`` holds one value per sequence (tokens = its count times
    the sequence length, dividing the query). Empty when the body shows no such sum."""
    if not p.counts:
        return []
    text = uncast(ev.body)
    flow = flows(_MEMBER.sub("", text), declarators=True)  # `blockDim.x` is not the local `x`

    def fed(t: str) -> bool:  # computed from the read offsets
        return p.name in feeding(flow, _MEMBER.sub("", t))

    values = assignments(text)
    direct: dict[str, set[str]] = {}  # what each local is computed from, one step
    for target, value in values:
        direct.setdefault(target, set()).update(_IDENT.findall(_MEMBER.sub("", value)))
    # a read of the offsets (its subscript: the sequence's index), or a local that holds one
    held = {t: sub for t, v in values if (sub := _subscript_of(unparen(v), p.name)) is not None}

    def offset_read(term: str) -> str | None:
        sub = _subscript_of(term, p.name)
        return sub if sub is not None else held.get(term)

    others, subscripts = [], []  # the terms added to a read offset, the offsets' subscripts
    for expr_text in [v for _, v in values] + _groups(text):
        terms = additive_terms(unparen(expr_text))
        for sign, t in terms if len(terms) > 1 else ():
            sub = offset_read(unparen(t))
            if sign > 0 and sub is not None:
                others += [x for x in terms if x[1] != t]
                subscripts.append(sub)
    for m in re.finditer(r"\b(\w+)\s*\+=\s*([^;]*)", text):  # pos += offsets[b]
        sub = offset_read(unparen(m.group(2)))
        if sub is not None:
            others.append((1, m.group(1)))
            subscripts.append(sub)
    others = [t for t in others if term_values(ev, t[1]) is None]  # an index varies by token: no argument's value
    if not others:
        return []
    # the sum feeds the tables' index: a term of some cos/sin index is computed from the read offsets; with no
    # tables, the angle: the argument of a sine or cosine (grok-1's `(s + offset[b]) * inv_freq`)
    pos_terms = [t for c in caches for site in index_sites(ev, c.name) for _, t in site if fed(t)]
    if not caches:
        angle = [args[0] for _, args in call_arguments(ev.body, _TRIG) if args and args[0] and fed(args[0])]
        pos_terms = []
        if not angle:
            return []
    elif not pos_terms:
        return []
    strides = set()
    for t in pos_terms:
        rest = [f for f in factors(unparen(t)) if not fed(f)]
        strides.add(term_values(ev, " * ".join(f"({f})" for f in rest)) if rest else tuple(1 for _ in p.counts))
    stride = strides.pop() if len(strides) == 1 else None  # (no tables: None)
    # the sequence length: an int argument the index in the sequence (or the offsets' index) is computed from, one
    # step away, or one that bounds it in a comparison
    idents = set()
    for _, t in others:
        idents |= set(_IDENT.findall(_MEMBER.sub("", t)))
    near = set(idents)
    for n in list(idents) + [x for sub in subscripts for x in _IDENT.findall(_MEMBER.sub("", sub))]:
        near |= direct.get(n, set()) | {n}
    ints = {a.name: a for a in ev.ints() if a.counts}
    # or one that multiplies the offsets' subscript in a sum that adds the index in the sequence: the token's own
    # index `b * seq_len + s` (a 2-D grid (position in the sequence, sequence), ExLlamaV2's past_lens)
    squash = lambda t: re.sub(r"\s+", "", unparen(t))  # noqa: E731
    subs, adds_in_seq = {squash(x) for x in subscripts}, {squash(t) for _, t in others}
    for expr_text in [v for _, v in values] + _groups(text):
        terms = [squash(t) for sign, t in additive_terms(unparen(expr_text)) if sign > 0]
        if len(terms) < 2 or not set(terms) & adds_in_seq:
            continue
        for t in terms:
            parts = [squash(f) for f in factors(t)]
            if len(parts) == 2 and set(parts) & subs:
                near |= {f for f in parts if f in ints}
    compared = set()
    for n in idents:
        for m in re.finditer(rf"\b{re.escape(n)}\s*(?:<=|>=|<|>)\s*\(?\s*(\w+)\b|\b(\w+)\s*\)?\s*(?:<=|>=|<|>)\s*"
                             rf"{re.escape(n)}\b", text):
            compared.add(m.group(1) or m.group(2))
    adds = set()
    for name in q_names:
        for site in index_sites(ev, name):
            for _, t in site:
                v = term_values(ev, t)
                if v is not None:
                    adds.add(v)
    out = []
    for a in ev.ints():
        if a.name not in near | compared or a.name not in ints or all(v == 1 for v in a.counts):
            continue
        tokens = tuple(x * y for x, y in zip(p.counts, a.counts))
        if div(q.counts, tokens) is None or (k is not None and div(k.counts, tokens) is None):
            continue
        out.append(_Sequences(a, tokens, f"({p.spec.size}) * ({a.spec.value})", stride, adds, len(out)))
    return out
