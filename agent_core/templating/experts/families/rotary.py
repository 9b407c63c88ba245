"""Rotary position embedding, applied in place to query heads (and key heads, where the kernel has them).

Evidence: an int input of ``tokens`` positions, one or two float in/out buffers of ``tokens * heads *
head_size``, one or two float inputs (the cos/sin cache). Enumerated: which int arguments are the heads and
the head size, the rotary width (an argument, or the head size), one cache [max_pos, rot_dim] (cos half then
sin half) or two caches (cos and sin, either order, rows of rot_dim / 2 or of rot_dim), NeoX pairs (i, i +
rot/2) or GPT-J pairs (2i, 2i + 1); one cache may also hold (cos, sin) pairs interleaved (Llama's complex
``freqs_cis``: first where the kernel declares it a buffer of two-element vectors).

With no cache (llama.cpp, FlashInfer): the angles computed in the kernel. Evidence: a ``pow`` of a float argument
(the frequency base) that feeds the argument of a sine or cosine; a float argument that also feeds it is the
frequency scale, one that does not (but is read) multiplies cos and sin (attention factor). Enumerated: how the
inverse frequency is formed from the base (by the base's value: above one, ``base^(-2i/rot)`` or ``1 /
base^(2i/rot)``; below one, ``base^(2i/rot)`` or ``base^i``), and the fast intrinsics where the kernel uses them.

Strided views (DeepSeek MLA as vLLM and SGLang rotate it: q_pe = q[..., qk_nope_head_dim:], k_pe = kv_a[...,
kv_lora_rank:]): the kernel's index arithmetic adds a uniform offset (an int argument, a difference of two, a file
constant) to the query's head base or the key's row base wherever it indexes them (``evidence.pointer_offsets``).
The query's rotary channels are then the tail of each head, the key one head at its offset into rows of their own
stride; the expert gets each pointer moved to its rotary channels and the token strides (KT_EXPERT_TOKEN_STRIDE),
offered first.

Implicit positions (KT_EXPERT_POSITIONS 3: candle's rope over head-major [b, h, t, d] and rope_thd over [b, t, h,
d], FlashAttention's rotary with an int seqlen_offset): no positions, a cos and a sin table, and the body derives
each pair's table row from its indices and the size arguments. The query and cos indices it computes for one thread
are sampled (thread and block indices, loop variables drawn at random) and each layout tried: the table row is
``offset + (query index / row) % seq`` for a row length and a sequence length the arguments make, the offset an int
argument or 0. Where exactly one such layout fits (and not the token-major gathered one), it replaces the gathered
bindings; a 16-bit kernel that never converts to float then rotates in T's arithmetic (KT_EXPERT_STORAGE_MATH).

A tensor of angles (Transformer Engine's fused_rope and Megatron: fp32 ``freqs`` = position * inv_freq, no cos/sin
cache, no positions): one float input whose values feed a sine or cosine (sincosf, __sincosf, sinf, ...). Its rows
are the tokens, as many as the index multiplies the varying term by (rows of rot_dim / 2, one angle a pair:
KT_EXPERT_CACHE 5; rows of rot_dim, each NeoX element its own: 6), and a token must be a row the query's index
steps by (SBHD: one position's b * h heads, stride_s); the head size the query's head stride first; the fast
intrinsic where the kernel calls it (KT_EXPERT_FAST_ANGLE), GPT-J first where an element is read at + 1. Where the
query's index also steps inside a position's row by a stride that divides it (SBHD's stride_b: one batch entry's
heads), each such part is a token at position token / batch (KT_EXPERT_POSITIONS 4, sequence-major), offered first.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, SizeExpr, additive_terms,
                                                    assignments, call_arguments, counts_of, div, feeding, flows,
                                                    index_sites, offset_values, pointer_offsets, prod, term_values,
                                                    uncast, unparen)
from agent_core.templating.experts.evidence import _expand, _once as _ONCE
from agent_core.templating.experts.evidence import index_terms, pointer_aliases


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


_VEC2 = re.compile(r"\b(float2|double2|half2|__half2|nv_bfloat162|__nv_bfloat162)\b")


def _pairs_type(ev: Evidence, name: str) -> bool:
    """Whether the kernel declares the cache a buffer of two-element vectors (``const float2*``): evidence that
    each cos sits beside its sin."""
    return any(p.name == name and _VEC2.search(p.type) for p in ev.kernel.params)


def _heads(ev: Evidence, per_token: tuple, hs: SizeExpr, hs_fp: tuple) -> SizeExpr | None:
    nh = div(per_token, hs_fp)
    if nh is None:
        return None
    xs = [s for s in ev.sizes(nh) if s.c != hs.c]
    return xs[0] if xs else None


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


class _Layout(NamedTuple):
    """Where a binding's cos and sin come from: the expert's KT_EXPERT_CACHE, the cos and sin row pointers and the
    cache's row stride (C; empty with no cache), words, the max_position size (None with no cache), the support it
    adds, and with no cache the inverse-frequency form (KT_EXPERT_ANGLE) and whether fast intrinsics."""
    cache: int
    cos: str
    sin: str
    stride: str
    words: list[str]
    max_position: str | None
    support: int
    angle: int = 0
    fast: bool = False
    stride_fp: tuple | None = None  # the cos/sin row stride on every size set


_TRIG = r"(?:__)?(?:sin|cos|sincos)f?"
_POW = r"(?:__)?powf?"


def _angles(ev: Evidence) -> tuple[ArgUse, ArgUse | None, ArgUse | None, list[int], bool] | None:
    """(base, frequency scale or None, attention factor or None, the inverse-frequency forms to try (the rotary
    expert's KT_EXPERT_ANGLE), fast intrinsics) of a kernel that computes its angles; None when it does not (no
    sine or cosine fed by a ``pow`` of a float argument) or its float arguments have no one reading."""
    trig = call_arguments(ev.body, _TRIG)
    pows = call_arguments(ev.body, _POW)
    if not trig or not pows:
        return None
    flow = flows(ev.body)
    floats = {a.name: a for a in ev.floats() if re.search(rf"\b{re.escape(a.name)}\b", ev.body)}  # the ones used
    fed = set().union(*(feeding(flow, args[0]) for _, args in trig if args and args[0]))
    base = exponent = None
    for fname, args in pows:
        src = feeding(flow, args[0]) & set(floats) if len(args) == 2 else set()
        if fname in fed and len(src) == 1:
            base, exponent = floats[src.pop()], args[1]
            break
    if base is None or not base.counts or any(not isinstance(v, (int, float)) for v in base.counts):
        return None
    scale = [a for n, a in floats.items() if n in fed and a is not base]
    attn = [a for n, a in floats.items() if n not in fed and a is not base]
    if len(scale) > 1 or len(attn) > 1:
        return None  # more float arguments than the expert's angle has roles for
    if all(v > 1 for v in base.counts):
        inverse = re.search(r"\b1(\.0*)?[fF]?\s*/\s*\(?\s*(__)?powf?\s*\(", ev.body) is not None
        forms = [2, 0] if inverse else [0, 2]
    elif all(0 < v < 1 for v in base.counts):
        forms = [3, 1] if "/" in exponent else [1, 3]
    else:
        return None
    fast = any(n.startswith("__") for n, _ in trig)
    return base, scale[0] if scale else None, attn[0] if attn else None, forms, fast


_ANGLE_WORDS = {0: "pos * {b}^(-2i/rot)", 1: "pos * {b}^i", 2: "pos / {b}^(2i/rot)", 3: "pos * {b}^(2i/rot)"}


class _AngleTable(NamedTuple):
    """A float input that holds the angles themselves (Transformer Engine's and Megatron's ``freqs``, position *
    inv_freq): the body takes the sine and cosine of values read from it. Whether through the fast intrinsics, and
    the row strides its index multiplies a varying term by (values on every size set; empty: not read)."""
    fast: bool
    strides: set


def _angle_table(ev: Evidence, c: ArgUse) -> _AngleTable | None:
    """The cache ``c`` as a tensor of angles: a sine or cosine (sincosf, __sincosf, sinf, __cosf, ...) whose argument
    is computed from a value read from ``c``; None when none is."""
    flow = flows(ev.body)
    fed = [n for n, args in call_arguments(ev.body, _TRIG) if args and c.name in feeding(flow, args[0])]
    if not fed:
        return None
    return _AngleTable(all(n.startswith("__") for n in fed), _index_strides(ev, c.name))


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
    return out


class _View(NamedTuple):
    """Query and key as strided views of their rotary channels (vLLM's rotary over query_stride / key_stride /
    head_stride; DeepSeek MLA's q_pe = q[..., qk_nope_head_dim:] and k_pe = kv_a[..., kv_lora_rank:], as vLLM and
    SGLang rotate them in place): each pointer moved by the offset the kernel adds to it (None: none), the token
    strides in C (long long), and words."""
    q_off: SizeExpr | None
    k_off: SizeExpr | None
    q_stride: str
    k_stride: str
    words: list[str]


def _offset(ev: Evidence, buf: ArgUse) -> tuple[tuple, SizeExpr] | None:
    """The uniform offset the kernel adds to a buffer wherever it indexes it (``pointer_offsets``), on every size set
    and as C, spec and words; None when it adds none."""
    terms = pointer_offsets(ev, buf.name)
    vals = offset_values(ev, terms) if terms else None
    if not vals or not any(vals):
        return None
    ints = {a.name: a for a in ev.ints()}

    def text(form) -> str:
        out = ""
        for sign, t in terms:
            t = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: form(m.group(0)), t)
            out += ("-" if sign < 0 else "") + t if not out else (" - " if sign < 0 else " + ") + t
        return f"({out})"

    c = text(lambda n: f"(long long)({n})" if n in ints else str(int(ev.constants[n])))
    spec = text(lambda n: f"({ints[n].spec.value})" if n in ints else str(int(ev.constants[n])))
    words = text(lambda n: n)[1:-1]
    return vals, SizeExpr(c, spec, f"`{words}`")


def _long(c: str) -> str:
    return re.sub(r"\(int\)\((\w+)\)", r"(long long)(\1)", c)


def _views(ev: Evidence, q: ArgUse, k: ArgUse | None, q_tok: tuple, k_tok: tuple
           ) -> list[tuple[SizeExpr, tuple, SizeExpr, SizeExpr, list, _View]]:
    """The head layouts of a kernel that rotates strided views in place (DeepSeek MLA, partial rotary of each head's
    tail): its index arithmetic adds a uniform offset (an int argument, a difference of two, a constant of the file)
    to the query's head base, or to the key's row base. The query's rotary channels are then the tail of each head
    (rot_dim = head_size - offset); the key is one head at its offset into rows of a stride of their own (k_pe inside
    kv_a), or heads like the query's where it has the same offset and a whole number of them. (head size, its
    values, q heads, kv heads, rotary widths, the view)."""
    qo, ko = _offset(ev, q), _offset(ev, k) if k else None
    if (qo is None and ko is None) or (qo and any(v <= 0 for v in qo[0])) or (ko and any(v < 0 for v in ko[0])):
        return []  # no offset, or one that is not an offset into every size set's rows
    q_off = qo[0] if qo else (0,) * len(q_tok)
    k_off = ko[0] if ko else (0,) * len(q_tok)
    hss = []
    for a in ev.ints():
        if a.counts and div(q_tok, a.counts) and all(h > max(o, 1) for h, o in zip(a.counts, q_off)):
            hss.append((ev.sizes(a.counts)[0], a.counts))
    for a in ev.ints():  # a head size the kernel has at compile time: a token's elements over a head-count argument
        c = div(q_tok, a.counts) if a.counts else None
        if c and len(set(c)) == 1 and c[0] > max(2, *q_off) and all(h[1] != c for h in hss):
            hss.append((SizeExpr(str(c[0]), str(c[0]), f"the constant {c[0]}"), c))
    # the head size the query's index multiplies first (its head stride), then by the likelier names
    hss.sort(key=lambda h: not re.search(r"head_?(size|dim)|hs|dim", h[0].words, re.I))
    q_stride = next((f"(long long)({a.name})" for a in ev.ints() if a.counts == q_tok), None)
    k_stride = None
    if k:
        ks = ev.sizes(k_tok)
        if not ks:
            return []
        k_stride = _long(ks[0].c) if ks[0].c.startswith("(int)") else f"(long long)({ks[0].c})"
    out = []
    for hs, hs_fp in hss:
        nh = _heads(ev, q_tok, hs, hs_fp)
        if nh is None:
            continue
        if qo:  # the tail of each head
            rot_fp = tuple(h - o for h, o in zip(hs_fp, q_off))
            if any(r % 2 for r in rot_fp):
                continue
            held = [s for s in ev.sizes(rot_fp) if re.fullmatch(r"\(int\)\(\w+\)", s.c) or s.c.isdigit()]
            rot = held[0] if held else SizeExpr(f"(int)({hs.c}) - (int){qo[1].c}", f"({hs.spec}) - {qo[1].spec}",
                                                f"`{hs.words.strip('`')} - {qo[1].words.strip('`')}`")
            rots = [(rot, rot_fp)]
        else:
            rots = [(ev.sizes(a.counts)[0], a.counts) for a in ev.ints()
                    if a.counts and all(r <= h and r % 2 == 0 for r, h in zip(a.counts, hs_fp))]
            if not any(r[1] == hs_fp for r in rots):
                rots.append((hs, hs_fp))
        words = [f"query rotary channels from {qo[1].words} to the end of each head" if qo else
                 "query rotary channels at the start of each head"]
        if k is None:
            kv = SizeExpr("0", "0", "none (no key)")
        elif k_off == q_off and div(k_tok, hs_fp):
            kv = _heads(ev, k_tok, hs, hs_fp) or SizeExpr("1", "1", "1")
            words.append(f"key heads like the query's, rows of {ev.sizes(k_tok)[0].words}")
        else:  # one head (k_pe) at its offset into each row of the key's own stride
            rots = [r for r in rots if all(o + v <= t for o, v, t in zip(k_off, r[1], k_tok))]
            kv = SizeExpr("1", "1", f"one head (`{k.name}` rows of {ev.sizes(k_tok)[0].words})")
            words.append(f"key rotary channels {'from ' + ko[1].words if ko else 'at the start'} of each row of "
                         f"{ev.sizes(k_tok)[0].words}")
        if not rots:
            continue
        words.append("strided views of the rotary channels (MLA's q_pe and k_pe)")
        view = _View(qo[1] if qo else None, ko[1] if ko else None,
                     q_stride or f"(long long)({nh.c}) * ({hs.c})", k_stride or "0", words)
        out.append((hs, hs_fp, nh, kv, rots, view))
    return out


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


def _sequence_offsets(ev: Evidence, p: ArgUse, q_names: list[str], q: ArgUse, k: ArgUse | None,
                      caches: list[ArgUse]) -> list[_Sequences]:
    """Positions as one offset per sequence plus the token's index in its sequence (flash-attn's ``seqlen_offsets``,
    the KV cache length of each sequence while decoding): the body adds a value read from ``p`` to something else
    (the index in the sequence), the sum reaches the cos/sin tables' index, and an int argument is the sequence
    length: the index in the sequence is computed from it (``t % seqlen``) or bounded by it (``m >= seqlen``), or the
    offsets' index is computed from it (``t / seqlen``); ``p`` holds one value per sequence (tokens = its count times
    the sequence length, dividing the query). Empty when the body shows no such sum."""
    if not caches or not p.counts:
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
    # the sum feeds the tables' index: a term of some cos/sin index is computed from the read offsets
    pos_terms = [t for c in caches for site in index_sites(ev, c.name) for _, t in site if fed(t)]
    if not pos_terms:
        return []
    strides = set()
    for t in pos_terms:
        rest = [f for f in _factors(unparen(t)) if not fed(f)]
        strides.add(term_values(ev, " * ".join(f"({f})" for f in rest)) if rest else tuple(1 for _ in p.counts))
    stride = strides.pop() if len(strides) == 1 else None
    # the sequence length: an int argument the index in the sequence (or the offsets' index) is computed from, one
    # step away, or one that bounds it in a comparison
    idents = set()
    for _, t in others:
        idents |= set(_IDENT.findall(_MEMBER.sub("", t)))
    near = set(idents)
    for n in list(idents) + [x for sub in subscripts for x in _IDENT.findall(_MEMBER.sub("", sub))]:
        near |= direct.get(n, set()) | {n}
    ints = {a.name: a for a in ev.ints() if a.counts}
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
    once = _ONCE(text)
    text = " + ".join(f"({t})" if sign > 0 else f"-({t})" for sign, t in sites[0]) or "0"
    for _ in range(12):
        new = _IDENT.sub(lambda m: f"({once[m.group(0)]})" if m.group(0) in once else m.group(0),
                         _THREAD.sub(lambda m: "kt_" + re.sub(r"\W+", "_", m.group(0)), text))
        if new == text:
            break
        text = new
    text = re.sub(r"(?<![\w.])(\d+)[uUlL]+\b", r"\1", text)
    if not re.fullmatch(r"[\w\s()+\-*/%]+", text) or len(text) > 4000:
        return None
    return text


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


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get("rotary_neox")
    if e is None:
        return []
    pos = [a for a in ev.bufs("in") if a.dtype in ("i32", "i64")]
    if len(pos) > 1 or (pos and not pos[0].counts):
        return []
    p = pos[0] if pos else None
    found = _pairs(ev, p.counts if p else None)
    if found is None:
        return []
    (qi, q), kpair, oop, caches = found
    ki, k = kpair if kpair else (None, None)
    n_bufs = (1 if p else 0) + len(caches) + (2 if oop else 1) * (1 + (k is not None))
    if len(caches) > 2 or len(ev.bufs()) != n_bufs:
        return []
    if len(caches) == 2 and (caches[0].counts != caches[1].counts or caches[0].dtype != caches[1].dtype):
        return []
    if q.dtype != (k.dtype if k else q.dtype) or (caches and caches[0].dtype not in FLOATS):
        return []
    if p is not None:
        out = _bind(ev, e, p, p.counts, p.spec.size, qi, q, ki, k, oop, caches)
        if e.conventions.get("KT_EXPERT_POSITIONS") is not None:  # one offset per sequence: first where it reads so
            names = [qi.name] + ([q.name] if q is not qi else [])
            for seq in _sequence_offsets(ev, p, names, q, k, caches):
                out += _bind(ev, e, p, seq.tokens, seq.tokens_spec, qi, q, ki, k, oop, caches, seq)
        return out
    if len(caches) == 1 and "KT_EXPERT_POSITIONS" in e.conventions and "KT_EXPERT_CACHE" in e.conventions:
        # no positions and one float input of angles (Transformer Engine's fused_rope: freqs [s, rot_dim]): a row of
        # angles per token (a token: every head at one position)
        table = _angle_table(ev, caches[0])
        if table is None:
            return []
        out, q_strides = [], _index_strides(ev, qi.name)
        for tokens, spec in _gathered_tokens(ev, q, k, caches):
            row = div(q.counts, tokens)
            if row not in q_strides:
                continue  # the query's index steps by a position's row: a row of angles each
            # sequence-major (Megatron's SBHD [s, b, h, d]): the query's index also steps by a stride that divides a
            # position's row (a batch entry's heads): each such part a token, at position token / batch; first the
            # widest part
            if e.conventions.get("KT_EXPERT_POSITIONS") is not None and k is None:
                inner = sorted((v for v in q_strides if v != row and all(1 < x < r and r % x == 0
                                                                         for x, r in zip(v, row))), reverse=True)
                for rank, v in enumerate(inner):
                    bv = tuple(r // x for x, r in zip(v, row))
                    bs = ev.sizes(bv)
                    if bs:
                        got = _bind(ev, e, None, prod(tokens, bv), f"({spec}) * ({bs[0].spec})", qi, q, ki, k, oop,
                                    caches, table=table, batch=bs[0], batch_fp=bv)
                        for b in got:
                            b.support += 1 - rank
                        out += got
            out += _bind(ev, e, None, tokens, spec, qi, q, ki, k, oop, caches, table=table)
        return out
    if len(caches) != 2 or "KT_EXPERT_POSITIONS" not in e.conventions:
        return []  # without positions: a cos and a sin tensor, gathered per token (one float input is a scale)
    if k is None and e.conventions.get("KT_EXPERT_POSITIONS") is not None:
        # each row's position its index in its sequence ([b, h, t, d] or [b, t, h, d]): where the indexing says so
        read, implicit = _implicit_positions(ev, qi, caches)
        if read and implicit:
            imp = implicit[0]
            return _bind(ev, e, None, imp.tokens, imp.tokens_spec, qi, q, ki, k, oop, caches, implicit=imp)
    out = []
    for tokens, spec in _gathered_tokens(ev, q, k, caches):
        out += _bind(ev, e, None, tokens, spec, qi, q, ki, k, oop, caches)
    return out


def _bind(ev: Evidence, e, p: ArgUse | None, tokens: tuple, tokens_spec: str, qi, q, ki, k, oop: bool,
          caches: list[ArgUse], seq: _Sequences | None = None, implicit: _Implicit | None = None,
          table: _AngleTable | None = None, batch: SizeExpr | None = None,
          batch_fp: tuple | None = None) -> list[Binding]:
    """The bindings for one token count: ``p`` the positions (None: the cos/sin rows are the tokens' own; with
    ``seq``, one offset per sequence of ``seq.seq`` tokens: only the layouts and pairs the body's indexing allows)."""
    pos_words = f"`{p.name}[token]`" if p else "the token index (cos and sin gathered per token)"
    if table and not p:
        pos_words = "the token index (a row of angles a token)"
        if batch:
            pos_words = f"the token index / {batch.words} (sequence-major: a row of angles a position)"
    if seq:
        pos_words = f"`{p.name}[token / {seq.seq.name}] + token % {seq.seq.name}`"
    if implicit:
        pos_words = (f"{'`' + implicit.offset.name + '` + ' if implicit.offset else ''}the token's index in its "
                     f"sequence of {implicit.seq.words} tokens")
    pos_arg = _cast(p.dtype, p.name, True) if p else "(const int*)nullptr"
    angles = _angles(ev) if not caches else None
    # a 16-bit kernel that never converts to float rotates in T's own arithmetic (candle's templated rope); read for
    # the implicit positions only: the bindings other layouts had before stay as they were
    storage = (implicit is not None and q.dtype in ("f16", "bf16")
               and e.conventions.get("KT_EXPERT_STORAGE_MATH") is not None
               and not re.search(r"\bfloat|2float|\bto_f", ev.body))
    if not caches and angles is None:
        return []
    q_tok, k_tok = div(q.counts, tokens), div(k.counts, tokens) if k else (1,) * len(tokens)
    if q_tok is None or k_tok is None:
        return []
    T, C, P = q.dtype, caches[0].dtype if caches else "f32", p.dtype if p else "i32"
    # head size: an int argument that divides a token's query (and key) elements, the likelier ones first
    hss = []
    for a in ev.ints():
        if a.counts and div(q_tok, a.counts) and (k is None or div(k_tok, a.counts)) and all(v > 1 for v in a.counts):
            hss.append((ev.sizes(a.counts)[0], a.counts))
    hss.sort(key=lambda h: not re.search(r"head_?(size|dim)|hs|dim", h[0].words, re.I))
    # or a constant (a head size the kernel has at compile time): a token's elements over a head-count argument
    for a in ev.ints():
        c = div(q_tok, a.counts) if a.counts else None
        if c and len(set(c)) == 1 and c[0] > 1 and c[0] % 2 == 0 and (k is None or div(k_tok, c)) \
                and all(h[1] != c for h in hss):
            hss.append((SizeExpr(str(c[0]), str(c[0]), f"the constant {c[0]}"), c))
    if table:  # a tensor of angles: first the head sizes the query's index strides a varying index by (its heads)
        q_strides = _index_strides(ev, qi.name)
        hss.sort(key=lambda h: h[1] not in q_strides)
    gptj_first = ev.mentions(r"\[2\*") or ev.mentions(r"\*2\+1\]") or ev.mentions(r"\*2\]")
    pairings = [1, 0] if gptj_first else [0, 1]
    if table and ev.mentions(r"\[\w+\+1\]"):  # a tensor of angles: an element read at + 1 says GPT-J first
        pairings = [1, 0]
    if seq and not caches:
        return []  # angles computed in the kernel from offsets per sequence: not read
    out = []

    def emit(hi: int, hs: SizeExpr, hs_fp: tuple, nh: SizeExpr, kv: SizeExpr, fused, row_len, rots: list,
             view: "_View | None" = None) -> None:
        """The bindings of one head layout: each rotary width of ``rots``, cache layout and pairing."""
        for ri, (rot, rot_fp) in enumerate(rots):
            if seq and any(r % 2 for r in rot_fp):
                continue  # a rotary width is even
            layouts: list[_Layout] = []
            if angles is not None:
                base, scale, attn, forms, fast = angles
                for fi, form in enumerate(forms):
                    layouts.append(_Layout(4, "", "", "", [
                        "no cache: angles from " + _ANGLE_WORDS[form].format(b=base.name)
                        + f" * {scale.name if scale else 1}" + (f", cos and sin * {attn.name}" if attn else "")
                        + (" (fast intrinsics)" if fast else "")], None, -fi, form, fast))
            elif table is not None:  # a tensor of angles: rows of rot_dim / 2 (a pair's), or of rot_dim (NeoX halves)
                c = caches[0]
                for cache, stride_fp, stride_c, stride_spec, words in (
                        (5, tuple(r // 2 for r in rot_fp), f"({rot.c}) / 2", f"({rot.spec}) / 2", "rot_dim / 2"),
                        (6, rot_fp, rot.c, rot.spec, "rot_dim, each element its own")):
                    rows = div(c.counts, stride_fp)
                    if any(r % 2 for r in rot_fp) or rows is None or (prod(rows, batch_fp) if batch else rows) != tokens:
                        continue  # a row of angles per token (sequence-major: per position)
                    if table.strides and stride_fp not in table.strides:
                        continue  # the rows as long as the index multiplies the position by
                    layouts.append(_Layout(cache, _cast(C, c.name, True), "", stride_c,
                                           [f"angles={c.name} [{'positions' if batch else 'tokens'}, {words}] (cos and sin by "
                                            f"{'__sincosf' if table.fast else 'sincosf'})"],
                                           f"({c.spec.size}) / ({stride_spec})", 0, fast=table.fast,
                                           stride_fp=stride_fp))
            elif len(caches) == 1:
                c = caches[0]
                if div(c.counts, rot_fp) is None or (p is None and not implicit and div(c.counts, rot_fp) != tokens):
                    continue  # without positions, a row per token
                paired = _pairs_type(ev, c.name)
                layouts.append(_Layout(0, _cast(C, c.name, True), f"{_cast(C, c.name, True)} + ({rot.c}) / 2", rot.c,
                                       [f"cache={c.name} [max_pos, rot_dim] (cos half, then sin half)"],
                                       f"({c.spec.size}) / ({rot.spec})", -1 if paired else 0, stride_fp=rot_fp))
                layouts.append(_Layout(3, _cast(C, c.name, True), _cast(C, c.name, True), rot.c,
                                       [f"cache={c.name} [max_pos, rot_dim] ((cos, sin) pairs interleaved)"],
                                       f"({c.spec.size}) / ({rot.spec})", 0 if paired else -1, stride_fp=rot_fp))
            else:
                c0, c1 = caches
                orders = [(c0, c1), (c1, c0)]
                if re.search("sin", c0.name, re.I) and not re.search("sin", c1.name, re.I):
                    orders.reverse()
                for oi, (cc, ss) in enumerate(orders):
                    for si, words in enumerate(("rot_dim / 2", "rot_dim")):
                        stride_fp = tuple(r // 2 for r in rot_fp) if si == 0 else rot_fp
                        if div(cc.counts, stride_fp) is None or (p is None and not implicit
                                                                 and div(cc.counts, stride_fp) != tokens):
                            continue
                        stride_c = f"({rot.c}) / 2" if si == 0 else rot.c
                        stride_spec = f"({rot.spec}) / 2" if si == 0 else rot.spec
                        layouts.append(_Layout(1, _cast(C, cc.name, True), _cast(C, ss.name, True), stride_c,
                                               [f"cos={cc.name}", f"sin={ss.name}", f"rows of {words}"],
                                               f"({cc.spec.size}) / ({stride_spec})", -oi - si, stride_fp=stride_fp))
                        if si == 1:  # rows of rot_dim: each element of a pair may have its own cos and sin
                            layouts.append(_Layout(2, _cast(C, cc.name, True), _cast(C, ss.name, True), stride_c,
                                                   [f"cos={cc.name}", f"sin={ss.name}",
                                                    "rows of rot_dim, each half for its element (Hugging Face)"],
                                                   f"({cc.spec.size}) / ({stride_spec})", -oi, stride_fp=stride_fp))
            pairs = pairings
            if seq or implicit:  # NeoX where the query's indexing adds rot_dim / 2 (and nothing says GPT-J), GPT-J
                # the reverse
                neox = tuple(r // 2 for r in rot_fp) in (seq or implicit).adds
                # (implicit positions: a pair's second element read at + 1 says GPT-J too)
                gptj = gptj_first or bool(implicit and tuple(1 for _ in rot_fp) in implicit.adds)
                pairs = [0] if neox and not gptj else [1] if gptj and not neox else pairings
            for lay in layouts:
                cache, cos_c, sin_c, stride_c, cache_words, maxpos, lsup = lay[:7]
                if (fused or row_len or view) and cache >= 4:
                    continue  # a fused buffer's views take a cache
                if seq and seq.strides is not None and lay.stride_fp != seq.strides:
                    continue  # the tables' rows are as long as the position is multiplied by
                if implicit and lay.stride_fp != implicit.stride:
                    continue  # the tables' rows as long as the indexing read
                for pi, pairing in enumerate(pairs):
                    if cache in (2, 6) and pairing == 1:
                        continue  # full rows are a NeoX (rotate_half) layout
                    style = "NeoX" if pairing == 0 else "GPT-J"
                    kname = f"`{k.name}`" if k else "no key"
                    moved = (f"rotates `{qi.name}`{' and `' + ki.name + '`' if k else ''} "
                             f"{'into `' + q.name + '`' + (' and `' + k.name + '`' if k else '') if oop else 'in place'}")
                    if cache == 4:
                        reason = (f"{moved} by angles computed from {pos_words} and a power of "
                                  f"`{angles[0].name}`, {style} pairs → rotary embedding")
                    elif pairing == 0 and not oop:
                        reason = (f"rotates `{q.name}` and {kname} in place by a cos/sin row of `{caches[0].name}` "
                                  f"chosen by {pos_words}, pairs half of `{rot.words.strip('`')}` apart → "
                                  f"rotary embedding (NeoX)")
                    else:
                        reason = f"{moved} by cos/sin chosen by {pos_words}, {style} pairs → rotary embedding"
                    b = Binding(e, 0.85, reason, ev.kernel.name)
                    b.sizes = {"tokens": tokens_spec, "num_heads": nh.spec, "num_kv_heads": kv.spec,
                               "head_size": hs.spec, "rot_dim": rot.spec, "max_position": maxpos}
                    b.conventions = {"KT_EXPERT_CACHE": cache, "KT_EXPERT_PAIRING": pairing,
                                     "KT_EXPERT_OUT_OF_PLACE": int(oop)}
                    if storage and cache != 4:
                        b.conventions["KT_EXPERT_STORAGE_MATH"] = 1
                    if implicit:
                        b.conventions["KT_EXPERT_POSITIONS"] = 3
                    elif batch:
                        b.conventions["KT_EXPERT_POSITIONS"] = 4
                    elif p is None:
                        b.conventions["KT_EXPERT_POSITIONS"] = 0
                    elif seq:
                        b.conventions["KT_EXPERT_POSITIONS"] = 2
                    b.template_args = [CTYPE[P], CTYPE[T], CTYPE[C]]
                    null = f"({CTYPE[T]}*)nullptr"
                    if cache == 4:  # no cache: the angle's form and calls instead
                        del b.sizes["max_position"]
                        b.conventions.update({"KT_EXPERT_ANGLE": lay.angle, "KT_EXPERT_FAST_ANGLE": int(lay.fast)})
                        b.call_args = [pos_arg, _cast(T, qi.name, True),
                                       _cast(T, ki.name, True) if k else f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), _cast(T, k.name, False) if k else null,
                                       f"(float)({base.name})", f"(float)({scale.name})" if scale else "1.0f",
                                       f"(float)({attn.name})" if attn else "1.0f", rot.c, nh.c, kv.c, hs.c]
                    elif cache >= 5:  # a tensor of angles and its row length
                        b.conventions["KT_EXPERT_FAST_ANGLE"] = int(lay.fast)
                        b.call_args = [pos_arg, _cast(T, qi.name, True),
                                       _cast(T, ki.name, True) if k else f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), _cast(T, k.name, False) if k else null,
                                       cos_c, stride_c, rot.c, nh.c, kv.c, hs.c]
                    elif view:  # each pointer moved to its rotary channels, tokens (and the key's rows) a stride apart
                        qb_c, qb = (f"{_cast(T, q.name, c)}{' + ' + view.q_off.c if view.q_off else ''}"
                                    for c in (True, False))
                        kb_c, kb = ((f"{_cast(T, k.name, c)}{' + ' + view.k_off.c if view.k_off else ''}" for c in
                                     (True, False)) if k else (f"(const {CTYPE[T]}*)nullptr", null))
                        b.call_args = [pos_arg, qb_c, kb_c, qb, kb, cos_c, sin_c, stride_c, rot.c, nh.c, kv.c, hs.c,
                                       view.q_stride, view.k_stride]
                        b.conventions["KT_EXPERT_TOKEN_STRIDE"] = 1
                        b.reason += " (strided views of its rotary channels)"
                    elif row_len:  # the first heads of each token's row, as many as the block's y extent
                        row = re.sub(r"\(int\)\((\w+)\)", r"(long long)(\1)", row_len.c)
                        b.call_args = [pos_arg, _cast(T, q.name, True), f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), null, cos_c, sin_c, stride_c, rot.c, nh.c, kv.c,
                                       hs.c, row, "0"]
                        b.conventions.update({"KT_EXPERT_TOKEN_STRIDE": 1, "KT_EXPERT_BLOCK_HEADS": 1})
                        # the block's THREADS / heads by heads threads stay within its __launch_bounds__(THREADS)
                        b.fixed["THREADS"] = [t for t in e.params["THREADS"].values
                                              if all(t >= v for v in counts_of(nh.spec, ev.spec))]
                    elif fused:  # one buffer: the key heads after the query heads, tokens a row of all the heads
                        buf_c, buf = _cast(T, q.name, True), _cast(T, q.name, False)
                        kofs = f"(long long)({nh.c}) * ({hs.c})"
                        row = f"(long long)({fused[2]}) * ({hs.c})"
                        b.call_args = [pos_arg, buf_c, f"{buf_c} + {kofs}", buf, f"{buf} + {kofs}",
                                       cos_c, sin_c, stride_c, rot.c, nh.c, kv.c, hs.c, row, row]
                        b.conventions["KT_EXPERT_TOKEN_STRIDE"] = 1
                    elif cache == 0 and pairing == 0 and not oop and not seq and not implicit and not storage:
                        # the expert's default code
                        b.call_args = [pos_arg, _cast(T, q.name, False),
                                       _cast(T, k.name, False) if k else null, cos_c, rot.c, nh.c, kv.c, hs.c]
                    else:
                        b.call_args = [pos_arg, _cast(T, qi.name, True),
                                       _cast(T, ki.name, True) if k else f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), _cast(T, k.name, False) if k else null,
                                       cos_c, sin_c, stride_c, rot.c, nh.c, kv.c, hs.c]
                    if batch:  # the batch last
                        b.call_args.append(batch.c)
                        if all(v == 1 for v in counts_of(nh.spec, ev.spec) or ()):  # a token of one head
                            b.fixed["THREADS"] = [t for t in e.params["THREADS"].values if t <= 64]
                    if seq:  # the sequence length last
                        b.call_args.append(f"(int)({seq.seq.name})")
                    if implicit:  # the sequence length, then the start position
                        b.call_args += [implicit.seq.c, f"(long long)({implicit.offset.name})" if implicit.offset
                                        else "0LL"]
                        if nh.c == "1" and not k:  # a block a row of one head: no more threads than a warp or two
                            b.fixed["THREADS"] = [t for t in e.params["THREADS"].values if t <= 64]
                    # no cache: the angle table is in shared memory, read as wide as the head
                    b.consts = {"ESIZE": NBYTES[T], "CSIZE": NBYTES[C] if cache != 4 else NBYTES[T]}
                    b.words = [(f"positions={p.name}[sequence] + the token's index in its sequence of "
                                f"`{seq.seq.name}` tokens" if seq else f"positions={p.name}") if p else
                               f"positions={pos_words}" if implicit or table else
                               "positions=the token index (cos and sin gathered per token)"] + (
                        [f"query={qi.name} -> {q.name}", f"key={ki.name} -> {k.name}" if k else "no key"] if oop else
                        [f"query={q.name}", f"key={k.name}" if k else f"key={q.name} after the query heads" if fused
                         else "no key"]) + [
                        *cache_words, f"rot_dim={rot.words}", f"num_heads={nh.words}",
                        f"num_kv_heads={kv.words}", f"head_size={hs.words}", f"{style} pairs",
                        "out of place" if oop else "in place"] + ([fused[3]] if fused else []) + (
                        [f"those heads at the start of each token's row of {row_len.words} elements rotated, the "
                         "rest untouched"] if row_len else []) + (view.words if view else [])
                    if b.conventions.get("KT_EXPERT_STORAGE_MATH"):
                        b.words.append(f"{T} arithmetic (each product and sum rounded to {T})")
                    # strided views: the kernel itself moves its pointers to the rotary channels, first
                    b.support = (24 if view else 20) - 3 * hi - 2 * ri + lsup - pi
                    if seq:  # the offsets are added to the index in the sequence: before reading them per token
                        b.support += 10 - seq.rank
                    out.append(b)

    for hi, (hs, hs_fp) in enumerate(hss):
        nh0 = _heads(ev, q_tok, hs, hs_fp)
        kv0 = _heads(ev, k_tok, hs, hs_fp) if k else SizeExpr("0", "0", "none (no key)")
        # (q heads, kv heads, fused): query and key as views of one fused buffer first where two int arguments make
        # a token's heads (even if a quotient also gives its head count: that one would rotate the v heads too)
        options = []
        if k is None and not oop and e.conventions.get("KT_EXPERT_TOKEN_STRIDE") is not None:
            fused = _fused_heads(ev, q_tok, hs_fp)
            if fused:
                options.append((fused[0], fused[1], fused, None))
            # or the heads rotated at the start of each token's row counted only by the launch (the expert reads
            # them back from its block): before a quotient's head count, which would rotate the v heads too
            if e.conventions.get("KT_EXPERT_BLOCK_HEADS") is not None:
                most = max(e.params["THREADS"].values)
                for heads, row in _launch_heads(ev, tokens, q_tok, hs_fp, most):
                    options.append((heads, SizeExpr("0", "0", "none (no key)"), None, row))
        if nh0 is not None and kv0 is not None:
            options.append((nh0, kv0, None, None))
        for nh, kv, fused, row_len in options:
            # rotary width: an int argument no wider than the head whose rows the cache holds, or the head size
            rots = []
            for a in ev.ints():
                if a.counts and all(r <= h and r % 2 == 0 for r, h in zip(a.counts, hs_fp)):
                    rots.append((ev.sizes(a.counts)[0], a.counts))
            if not any(r[1] == hs_fp for r in rots):
                rots.append((hs, hs_fp))
            rots.sort(key=lambda r: (not re.search("rot", r[0].words, re.I), r[1] != hs_fp))
            emit(hi, hs, hs_fp, nh, kv, fused, row_len, rots)
    if not oop and caches and e.conventions.get("KT_EXPERT_TOKEN_STRIDE") is not None:
        for vi, (hs, hs_fp, nh, kv, rots, view) in enumerate(_views(ev, q, k, q_tok, k_tok)):
            emit(vi, hs, hs_fp, nh, kv, None, None, rots, view)
    return out
