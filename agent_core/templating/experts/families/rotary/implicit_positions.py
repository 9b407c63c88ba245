"""No positions, each token's position its index in its sequence (KT_EXPERT_POSITIONS 3: candle's rope,
FlashAttention's rotary with an int seqlen_offset): the query and cos indices the body computes, sampled and
tried against each layout (``_implicit_positions``)."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import (ArgUse, Evidence, SizeExpr, _expand, _once as _ONCE, div,
                                                    index_terms, pointer_aliases, prod, term_values, uncast)
from agent_core.templating.experts.families.rotary.indexing import _IDENT


class _Implicit(NamedTuple):
    """No positions, each token's position its index in its sequence (KT_EXPERT_POSITIONS 3: candle's rope, rope_i
    and rope_thd; FlashAttention's rotary with an int seqlen_offset): the query's elements in rows of ``row``
    elements (a token: its heads, one head where the layout is head-major [b, h, t, d]), ``seq`` rows a sequence,
    the cos/sin row of row r being ``offset + r % seq``; the tables' row length ``stride`` (values on every size
    set), C and words."""
    tokens: tuple
    tokens_spec: str
    seq: SizeExpr
    offset: ArgUse | None
    stride: tuple
    adds: set


_THREAD = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*[xyz]\b")


def _bare(ev: Evidence) -> str:
    """The body without casts, a called function's arguments without their parentheses (`(src)[i1]`)."""
    return re.sub(r"(?<![\w\])])\(\s*([A-Za-z_]\w*)\s*\)(?![\w(])", r"\1", uncast(ev.body))


def _sites(text: str, name: str) -> list[list[tuple[int, str]]]:
    """The additive terms of every index of ``name`` (or a local pointer made from it) in ``text``, a bare pass of
    the pointer (an argument of a call: no terms) left out."""
    names = pointer_aliases(text, name)
    # a local pointer declared from it (`__half* v = x + off;`) that is then written through (`v[1] = ...`)
    names += [m.group(1) for m in re.finditer(rf"\*\s*(?:const\s+|__restrict__\s+)*([A-Za-z_]\w*)\s*=\s*"
                                              rf"{re.escape(name)}\s*\+", text) if m.group(1) not in names]
    return [t for n in names for t in index_terms(text, n) if t]


def _resolved(ev: Evidence, name: str) -> str | None:
    """The first index of the buffer ``name`` with every local assigned once replaced by its value, down to the
    thread and block indices (each of ``threadIdx.x``, ``blockIdx.y``, ... a name of its own), loop variables and
    the int arguments; casts and literal suffixes dropped. None where it is not plain integer arithmetic."""
    text = _bare(ev)
    sites = _sites(text, name)
    if not sites:
        return None
    return _resolve(_ONCE(text), " + ".join(f"({t})" if sign > 0 else f"-({t})" for sign, t in sites[0]) or "0")


def _resolve(once: dict[str, str], expr: str) -> str | None:
    """``expr`` with every local assigned once (``once``) replaced by its value, down to thread and block indices,
    loop variables and arguments; literal suffixes dropped. None where it is not plain integer arithmetic."""
    for _ in range(12):
        new = _IDENT.sub(lambda m: f"({once[m.group(0)]})" if m.group(0) in once else m.group(0),
                         _THREAD.sub(lambda m: "kt_" + re.sub(r"\W+", "_", m.group(0)), expr))
        if new == expr:
            break
        expr = new
    expr = re.sub(r"(?<![\w.])(\d+)[uUlL]+\b", r"\1", expr)
    if not re.fullmatch(r"[\w\s()+\-*/%]+", expr) or len(expr) > 4000:
        return None
    return expr


def _index_samples(ev: Evidence, q: ArgUse, c: ArgUse, size: int, draws: int = 400) -> list[tuple[int, int]] | None:
    """(query index, cos index) pairs the body computes for the same thread on size set ``size``: every unknown
    (thread and block indices, loop variables) drawn at random (fixed seed), only pairs inside both buffers kept."""
    import random
    qt, ct = _resolved(ev, q.name), _resolved(ev, c.name)
    if qt is None or ct is None:
        return None
    from agent_core import expr as _expr
    env = {n: int(v) for n, v in ev.constants.items() if float(v).is_integer()}
    env.update({a.name: a.counts[size] for a in ev.ints() if a.counts})
    try:
        unknown = sorted((_expr.names(qt) | _expr.names(ct)) - set(env))
    except Exception:  # noqa: BLE001
        return None
    rng = random.Random(1234 + size)
    out = []
    for _ in range(draws):
        at = dict(env)
        for n in unknown:
            at[n] = rng.randrange(rng.choice((2, 8, 64, 512, 4096, 32768)))
        try:
            qi, ci = _expr.evaluate_int(qt, at), _expr.evaluate_int(ct, at)
        except Exception:  # noqa: BLE001
            continue
        if 0 <= qi < q.counts[size] and 0 <= ci < c.counts[size]:
            out.append((qi, ci))
    return out


def _implicit_positions(ev: Evidence, qi: ArgUse, caches: list[ArgUse]) -> tuple[bool, list[_Implicit]]:
    """Where a kernel without positions takes each token's cos/sin row from (candle's rope over [b, h, t, d],
    rope_thd over [b, t, h, d]; Hugging Face's gathered cos and sin): the query and cos indices the body computes
    for one thread, on sampled thread and block indices, tried against each layout: the cos row (index over a row
    length: half an int argument or one) is ``offset + (query index / row) % seq`` for a row length of the query
    (a size the arguments make) and a sequence length (the tables' rows, or with an offset argument, one the
    arguments make), the offset an int argument or 0. (whether the body's indexing was read, the implicit layouts
    it fits); token-major rows with the tables' rows as the tokens (the caller gathered them) fit no implicit
    layout, and where the body does not tell (no index read, more than one layout fits) none is offered: the
    gathered rows stay (the bindings a kernel without positions had before)."""
    c = caches[0]
    n = len(ev.spec.sizes)
    samples = []
    for size in range(n):
        got = _index_samples(ev, qi, c, size)
        if got is None or len(got) < 24:
            return False, []
        samples.append(got)
    ints = [a for a in ev.ints() if a.counts]
    values = {}  # value tuple -> its SizeExpr
    for a in ints:
        for s in ev.sizes(a.counts):
            values.setdefault(a.counts, s)
    for a in ints:
        for b in ints:
            if a is not b:
                for t in (tuple(x * y for x, y in zip(a.counts, b.counts)),
                          tuple(x // y if y and x % y == 0 else None for x, y in zip(a.counts, b.counts))):
                    if None not in t and all(v > 0 for v in t) and t not in values:
                        xs = ev.sizes(t)
                        if xs:
                            values[t] = xs[0]
    strides = []
    for a in ints:
        for st in (tuple(v // 2 for v in a.counts if v % 2 == 0), a.counts):
            if len(st) == n and all(v > 0 for v in st) and div(c.counts, st) and st not in strides:
                strides.append(st)
    offsets = [None] + [a for a in ints if all(v > 0 for v in a.counts)]

    def fits(row, seq, stride, off) -> bool:
        return all((ci // stride[i]) == (off.counts[i] if off else 0) + (qx // row[i]) % seq[i]
                   for i in range(n) for qx, ci in samples[i])

    found: dict[tuple, _Implicit] = {}
    gathered = False
    for stride in strides:
        rows = div(c.counts, stride)
        if all(r == 1 for r in rows):
            continue  # one row: every layout reads it
        for off in offsets:
            seqs = [rows] if off is None else [t for t in values if all(
                x + o <= r for x, o, r in zip(t, off.counts, rows))]
            for seq in seqs:
                for row in values:
                    if div(qi.counts, prod(row, seq)) is None or not fits(row, seq, stride, off):
                        continue
                    if prod(row, seq) == qi.counts and off is None:
                        gathered = True  # token-major: the tables' rows are the tokens (gathered per token)
                        continue
                    seq_c = values.get(seq) or (ev.sizes(seq) or [None])[0]
                    if seq_c is None:
                        continue
                    tokens = div(qi.counts, row)
                    spec = f"({qi.spec.size}) / ({values[row].spec})"
                    found.setdefault((tokens, seq, stride, off.name if off else None),
                                     _Implicit(tokens, spec, seq_c, off, stride, set()))
    if gathered or len(found) != 1:
        return False, []
    imp = next(iter(found.values()))
    adds = set()
    text = _bare(ev)
    once = _ONCE(text)
    for site in _sites(text, qi.name):
        for _, t in _expand(site, once):
            v = term_values(ev, t)
            if v is not None:
                adds.add(v)
    return True, [imp._replace(adds=adds)]
