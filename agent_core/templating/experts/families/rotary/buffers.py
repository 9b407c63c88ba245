"""The rotary kernel's buffers and the sizes read from them: the query and key, in place or out of place
(``_pairs``), the heads (``_heads``; q and kv heads of one fused buffer: ``_fused_heads``; heads only the launch
counts: ``_launch_heads``), which of two tables is the sine (``_sine``), the token counts of cos and sin gathered
per token (``_gathered_tokens``), a count as C (``_count_c``), a cache declared as two-element vectors
(``_pairs_type``), one cache read as a cos and a sin table back to back in each row (``_split_tables``)."""

from __future__ import annotations

import itertools
import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import _once as _ONCE
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, ArgUse, Evidence, SizeExpr, additive_terms, counts_of,
                                                    div, pointer_aliases, term_values, unparen, value_operands)
from agent_core.templating.experts.index_reading import index_strides as _index_strides


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


_VEC2 = re.compile(r"\b(float2|double2|half2|__half2|nv_bfloat162|__nv_bfloat162)\b")


def _pairs_type(ev: Evidence, name: str) -> bool:
    """Whether the kernel declares the cache a buffer of two-element vectors (``const float2*``): evidence that
    each cos sits beside its sin."""
    return any(p.name == name and _VEC2.search(p.type) for p in ev.kernel.params)


def _sine(ev: Evidence, c: ArgUse) -> bool:
    """Whether the values of the table ``c`` multiply what the rotation subtracts: a product taken with a minus (``x *
    cos - y * sin``) or with a negated partner (``(i % 2 == 0 ? -x[i + 1] : x[i - 1]) * sin[i]``): the sine. Read from
    the arithmetic, never from the table's name."""
    return any(op == "*" and (term.startswith("-") or re.search(r"[?:(,]-", term))
               for op, term in value_operands(ev, c.name))


def _twice(a: ArgUse) -> SizeExpr:
    """Twice the int argument ``a`` as the wrapper computes it (a rotary half given as the argument, rows of a cos and
    a sin table)."""
    return SizeExpr(f"2 * (int)({a.name})", f"2 * ({a.spec.value})", f"`2 * {a.name}`")


def _heads(ev: Evidence, per_token: tuple, hs: SizeExpr, hs_fp: tuple) -> SizeExpr | None:
    nh = div(per_token, hs_fp)
    if nh is None:
        return None
    xs = [s for s in ev.sizes(nh) if s.c != hs.c]
    return xs[0] if xs else None


def _rotary_widths(ev: Evidence, hs: SizeExpr, hs_fp: tuple) -> list[tuple[SizeExpr, tuple]]:
    """The rotary widths a head of ``hs`` may have: each int argument no wider than the head and even on every size
    set, in the arguments' order, then the head size itself where no argument holds it."""
    rots = [(ev.sizes(a.counts)[0], a.counts) for a in ev.ints()
            if a.counts and all(r <= h and r % 2 == 0 for r, h in zip(a.counts, hs_fp))]
    if not any(r[1] == hs_fp for r in rots):
        rots.append((hs, hs_fp))
    return rots


def _pairs(ev: Evidence, tokens: tuple):
    """(query, key or None, out of place, the float inputs left (the caches)): in place, one or two in/out buffers;
    out of place, each output with the input of the same count (the nearest in the argument list)."""
    io = [a for a in ev.bufs("inout", FLOATS) if a.counts]
    outs = [a for a in ev.bufs("out", FLOATS) if a.counts]
    ins = [a for a in ev.bufs("in", FLOATS) if a.counts]
    if io and not outs:
        if len(io) > 2:
            return None
        q = max(io, key=lambda a: a.counts) if len(io) == 2 and io[0].counts != io[1].counts else io[0]
        k = next((a for a in io if a is not q), None)
        return (q, q), (k, k) if k else None, False, ins
    if outs and not io and len(outs) <= 2:
        order = [a.name for a in ev.args]
        pairs, left = [], list(ins)
        for o in outs:
            same = [a for a in left if a.counts == o.counts and a.dtype == o.dtype]
            if not same:
                return None
            src = min(same, key=lambda a: abs(order.index(a.name) - order.index(o.name)))
            left.remove(src)
            pairs.append((src, o))
        pairs.sort(key=lambda p: p[1].counts, reverse=True)
        return pairs[0], pairs[1] if len(pairs) == 2 else None, True, left
    return None


def _fused_heads(ev: Evidence, per_token: tuple, hs_fp: tuple) -> tuple[SizeExpr, SizeExpr, str, str] | None:
    """Query and key heads inside one buffer of ``per_token`` elements a token (TensorRT-LLM's and vLLM's fused
    qkv): two int arguments, q heads and kv heads, with (q + 2 kv) heads of the head size a token (the v heads left
    as they are) or (q + kv) (a fused qk buffer); (q heads, kv heads, a token's heads in C, words)."""
    heads = div(per_token, hs_fp)
    if heads is None:
        return None
    ints = [a for a in ev.ints() if a.counts]
    for extra, words in ((2, "q, k and v heads of one fused buffer (v untouched)"), (1, "q and k heads of one buffer")):
        for a in ints:
            for b in ints:
                if a is not b and all(x + extra * y == h and x >= y for x, y, h in zip(a.counts, b.counts, heads)):
                    return (SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`"),
                            SizeExpr(f"(int)({b.name})", str(b.spec.value), f"`{b.name}`"),
                            f"(int)({a.name}) + {extra} * (int)({b.name})", words)
    return None


def _launch_heads(ev: Evidence, tokens: tuple, per_token: tuple, hs_fp: tuple, most: int
                  ) -> list[tuple[SizeExpr, SizeExpr]]:
    """Heads rotated at the start of each token's row that only the launch counts (a partial rotary in place in a
    fused qkv buffer, launched over (tokens, q heads + k heads): the v heads after them untouched): a dimension of
    the spec's grid that the body reads (``blockIdx.y``), is not the token count, no int argument holds, and gives
    fewer heads of the head size than a token's row holds (the row length an int argument: its stride). (the heads
    as the expert reads them back from its block, blockDim.y; the row length); at most ``most`` heads (the block)."""
    rows = [r for r in ev.sizes(per_token) if r.c.startswith("(int)(")]
    if not rows:
        return []
    out = []
    for axis, g in zip("xyz", ev.spec.grid):
        h = counts_of(str(g), ev.spec)
        if not h or h == tokens or not re.search(rf"\bblockIdx\.{axis}\b", ev.body) \
                or any(a.counts == h for a in ev.ints()):
            continue
        if all(isinstance(v, int) and 1 <= v <= most and v * s <= t for v, s, t in zip(h, hs_fp, per_token)) \
                and any(v * s < t for v, s, t in zip(h, hs_fp, per_token)):
            out.append((SizeExpr("(int)blockDim.y", str(g), f"the launch grid's `{g}` (blockIdx.{axis})"), rows[0]))
    return out


def _gathered_tokens(ev: Evidence, q: ArgUse, k: ArgUse | None, caches: list[ArgUse]) -> list[tuple[tuple, str]]:
    """(token count per size set, its size expression) a kernel without positions may have, its cos and sin
    gathered per token by the caller (Hugging Face's ``apply_rotary_pos_emb(q, k, cos, sin)``): a cache's rows, of
    half an int argument or of the argument (a head size or rotary width), where they divide the query (and key)
    elements."""
    out, seen = [], set()
    for a in ev.ints():
        if not a.counts or any(v < 2 or v % 2 for v in a.counts):
            continue
        for stride, stride_spec in ((tuple(v // 2 for v in a.counts), f"({a.spec.value}) / 2"), (a.counts, a.spec.value)):
            t = div(caches[0].counts, stride)
            if t and t not in seen and div(q.counts, t) and (k is None or div(k.counts, t)):
                seen.add(t)
                out.append((t, f"({caches[0].spec.size}) / ({stride_spec})"))
    # or rows as long as the cache's index multiplies a varying term by, twice an int argument (the rotary half an
    # argument, the rows of rot_dim: MNN's ropeHalfDim), where neither reading above gives that count
    for stride in sorted(_index_strides(ev, caches[0].name, True)):
        half = next((a for a in ev.ints() if a.counts and all(2 * v == s for v, s in zip(a.counts, stride))), None)
        t = div(caches[0].counts, stride)
        if half and t and t not in seen and div(q.counts, t) and (k is None or div(k.counts, t)):
            seen.add(t)
            out.append((t, f"({caches[0].spec.size}) / (2 * ({half.spec.value}))"))
        elif t and t not in seen and len(set(stride)) == 1 and stride[0] % 2 == 0 and div(q.counts, t) \
                and (k is None or div(k.counts, t)):
            # a row length the kernel has at compile time (a head size as a template argument: Mirage's HEAD_DIM)
            seen.add(t)
            out.append((t, f"({caches[0].spec.size}) / ({stride[0]})"))
    return out


def _count_c(ev: Evidence, target: tuple) -> str | None:
    """A C expression of the kernel's int arguments that is ``target`` on every size set: ``Evidence.sizes`` (an
    argument, a product or quotient of two), else a product of two over a third (candle's ``bh * td / d`` rows)."""
    got = ev.sizes(target)
    if got:
        return got[0].c
    ints = [a for a in ev.ints() if a.counts]
    for a, b, c in itertools.permutations(ints, 3):
        if all(z and (x * y) % z == 0 and (x * y) // z == t for x, y, z, t in zip(a.counts, b.counts, c.counts, target)):
            return f"(long long)({a.name}) * ({b.name}) / ({c.name})"
    return None


class _Split(NamedTuple):
    """One cache read as two tables in each of its rows: the cos at the row's start, the sin ``offset`` elements on
    (values, and as the wrapper computes it), rows ``stride`` elements apart (values, and in C)."""
    offset: tuple
    offset_c: SizeExpr
    stride: tuple
    stride_c: SizeExpr


def _split_tables(ev: Evidence, c: ArgUse) -> _Split | None:
    """The cache ``c`` read through two pointers into one row, the second an int size further on (libllm's
    ``cos = cache; sin = cache + rotaryDim``, ``cache = rotaryCache + position * cacheStride``): a cos and a sin table
    back to back, each subscripted; the rows as long as the cache's index steps the position by. None otherwise."""
    text = ev.body
    once = _ONCE(text)
    aliases = pointer_aliases(text, c.name)
    subscripted = {a for a in aliases if re.search(rf"(?<![\w.]){re.escape(a)}\s*\[", text)}
    same = lambda a: {a} | {x for x in aliases if unparen(once.get(x, "").strip()) == a}  # noqa: E731
    strides = list(_index_strides(ev, c.name))
    if len(strides) != 1:
        return None
    st = ev.sizes(strides[0]) or [_twice(a) for a in ev.ints()
                                  if a.counts and tuple(2 * v for v in a.counts) == strides[0]]
    for b in aliases[1:]:
        terms = additive_terms(unparen(once.get(b, "").strip())) if once.get(b) else []
        base = [unparen(t) for sign, t in terms if sign > 0 and unparen(t) in aliases]
        rest = [(sign, t) for sign, t in terms if not (sign > 0 and unparen(t) in aliases)]
        if len(base) != 1 or base[0] == c.name or len(rest) != 1 or rest[0][0] < 0 or b not in subscripted \
                or not same(base[0]) & subscripted:
            continue
        off = term_values(ev, rest[0][1])
        xs = ev.sizes(off) if off else []
        if xs and st and all(0 < o < r for o, r in zip(off, strides[0])):
            return _Split(off, xs[0], strides[0], st[0])
    return None
