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

Rows reached by moving the pointers (CTranslate2's rotary: ``x += blockIdx.x * depth; sin += time * ndims;``, then
element i of the row with ``sin[i]``; KT_EXPERT_POSITIONS 3 with KT_EXPERT_POS_DIV): where the element indexing above
reads no layout, the query's and the tables' moves (statements of their own at the body's top level) are sampled over
the block indices and fitted as table row = offset + (query row / div) % seq; a flag argument that chooses the table
row (``time = transpose ? r % max_time : r / heads``) is read on both of its values and the binding passes div and
seq as the flag chooses them at run time (``_bumped_positions``).

A tensor of angles (Transformer Engine's fused_rope and Megatron: fp32 ``freqs`` = position * inv_freq, no cos/sin
cache, no positions): one float input whose values feed a sine or cosine (sincosf, __sincosf, sinf, ...). Its rows
are the tokens, as many as the index multiplies the varying term by (rows of rot_dim / 2, one angle a pair:
KT_EXPERT_CACHE 5; rows of rot_dim, each NeoX element its own: 6), and a token must be a row the query's index
steps by (SBHD: one position's b * h heads, stride_s); the head size the query's head stride first; the fast
intrinsic where the kernel calls it (KT_EXPERT_FAST_ANGLE), GPT-J first where an element is read at + 1. Where the
query's index also steps inside a position's row by a stride that divides it (SBHD's stride_b: one batch entry's
heads), each such part is a token at position token / batch (KT_EXPERT_POSITIONS 4, sequence-major), offered first.

A q / k RMSNorm before the rotation (Qwen3's q_norm / k_norm fused into the rope: vLLM's and SGLang's
fused_qk_norm_rope, TensorRT-LLM's fusedQKNormRope, MNN's ropeC4 behind run-time flags; KT_EXPERT_QK_NORM): where
more float inputs than a cos and a sin cache are read, two of them may be the weights of a norm the body shows
(``qk_norm``: one rsqrt of sum / n + eps, each value read multiplied in place by the root times a weight element, a
sum of squares feeding the root); the weights, eps and flags paired with the query and the key by the condition that
picks them. The kernel's flags are passed to the expert, which checks them at run time: nothing is assumed of their
values in the spec, and a norm that cannot be read exactly gets no binding (never one that drops it). A rotary width
that is twice an int argument (the pair offset the tables' index adds) and a token count from the tables' index
stride are read for it.

One module per job: ``buffers`` (which buffers are the query, key and caches, their heads and token counts),
``indexing`` (the index arithmetic the others read), ``angles`` (angles computed in the kernel, or read from a
tensor of them), ``views`` (strided views), ``sequences`` (one position offset per sequence), ``implicit_positions``
(no positions: each token's index in its sequence), ``qk_norm`` (a q / k RMSNorm before the rotation), ``bind`` (the bindings for one token count);
``enumerate_bindings`` here reads which of those forms the kernel has.
"""

from __future__ import annotations

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import FLOATS, Evidence, div, prod
from agent_core.templating.experts.families.rotary.angles import _angle_table
from agent_core.templating.experts.families.rotary.bind import _bind
from agent_core.templating.experts.families.rotary.buffers import _gathered_tokens, _pairs
from agent_core.templating.experts.families.rotary.computed_positions import _computed_positions
from agent_core.templating.experts.families.rotary.implicit_positions import (_Implicit, _bumped_positions,
                                                                               _head_major, _implicit_positions,
                                                                               _query_adds)
from agent_core.templating.experts.index_reading import index_strides as _index_strides
from agent_core.templating.experts.families.rotary.qk_norm import _qk_norm
from agent_core.templating.experts.families.rotary.sequences import _sequence_offsets


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
    norm = None
    if len(caches) > 2 and e.conventions.get("KT_EXPERT_QK_NORM") is not None:
        # more float inputs than a cos and a sin cache: the weights of a q / k RMSNorm before the rotation, where the
        # body shows one (the caches are the others)
        got = _qk_norm(ev, qi, ki, q, k, caches)
        if got is not None:
            norm, caches = got
    n_bufs = (1 if p else 0) + len(caches) + (2 if oop else 1) * (1 + (k is not None)) + (2 if norm else 0)
    if len(caches) > 2 or len(ev.bufs()) != n_bufs:
        return []
    if len(caches) == 2 and (caches[0].counts != caches[1].counts or caches[0].dtype != caches[1].dtype):
        return []
    if q.dtype != (k.dtype if k else q.dtype) or (caches and caches[0].dtype not in FLOATS):
        return []
    if p is not None:
        hm = _head_major(ev, qi, q, p, positions=True) \
            if norm is None and e.conventions.get("KT_EXPERT_HEAD_MAJOR") is not None else []
        if len(hm) == 1:  # head-major query and key, a position a (batch entry, position): read so, no other
            return _bind(ev, e, p, p.counts, p.spec.size, qi, q, ki, k, oop, caches, head_major=hm[0])
        out = _bind(ev, e, p, p.counts, p.spec.size, qi, q, ki, k, oop, caches, norm=norm)
        if e.conventions.get("KT_EXPERT_POSITIONS") is not None and norm is None:  # one offset per sequence: first
            # where it reads so
            names = [qi.name] + ([q.name] if q is not qi else [])
            for seq in _sequence_offsets(ev, p, names, q, k, caches):
                out += _bind(ev, e, p, seq.tokens, seq.tokens_spec, qi, q, ki, k, oop, caches, seq)
        return out
    if norm is not None and len(caches) != 2:
        return []  # a norm with a cos and a sin gathered per token (one table of angles or none: not read)
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
    if not caches and e.conventions.get("KT_EXPERT_KEY_ROWS") is not None:
        # no cache and no positions: each token's position computed in the body from its index in its sequence (the
        # keys, where they sit in a KV cache, at rows of their own; or the query alone)
        comp = _computed_positions(ev, [(qi, q), (ki, k)] if k is not None else [(qi, q)])
        if comp is None:
            return []
        (qi, q), (ki, k) = comp.q, comp.k or (None, None)
        # the values the query's index adds to a row (`off + 1`: GPT-J pairs; `i + half`: NeoX) order the pairings
        imp = _Implicit(comp.tokens, comp.tokens_spec, comp.seq, comp.offset, (), _query_adds(ev, qi))
        return _bind(ev, e, None, comp.tokens, comp.tokens_spec, qi, q, ki, k, oop, caches, implicit=imp,
                     computed=comp)
    if len(caches) != 2 or "KT_EXPERT_POSITIONS" not in e.conventions:
        return []  # without positions: a cos and a sin tensor, gathered per token (one float input is a scale)
    if e.conventions.get("KT_EXPERT_POSITIONS") is not None:
        # each row's position its index in its sequence ([b, h, t, d] or [b, t, h, d]): where the query's indexing
        # says so (the key's rows are the same tokens': the binding's own check)
        read, implicit = _implicit_positions(ev, qi, caches)
        if read and implicit:
            imp = implicit[0]
            return _bind(ev, e, None, imp.tokens, imp.tokens_spec, qi, q, ki, k, oop, caches, implicit=imp)
        # head-major query and key ([b, h, s, d]) with a table row per (batch entry, position) (Hugging Face's cos
        # and sin [b, s, d])
        hm = _head_major(ev, qi, q, caches[0]) if e.conventions.get("KT_EXPERT_HEAD_MAJOR") is not None else []
        if len(hm) == 1:
            return _bind(ev, e, None, hm[0].tokens, hm[0].tokens_spec, qi, q, ki, k, oop, caches, head_major=hm[0])
        # the rows reached by moving the pointers themselves (CTranslate2), the table row perhaps a flag's choice
        imp = _bumped_positions(ev, qi, q, caches) if e.conventions.get("KT_EXPERT_POS_DIV") is not None else None
        if imp is not None:
            got = _bind(ev, e, None, imp.tokens, imp.tokens_spec, qi, q, ki, k, oop, caches, implicit=imp)
            if got:
                return got
    out = []
    for tokens, spec in _gathered_tokens(ev, q, k, caches):
        out += _bind(ev, e, None, tokens, spec, qi, q, ki, k, oop, caches, norm=norm)
    return out
