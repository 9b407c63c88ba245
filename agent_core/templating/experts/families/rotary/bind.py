"""The rotary bindings for one token count (``_bind``): where cos and sin come from (``_Layout``), the heads, the
rotary width, the pairs, the conventions."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, NBYTES, ArgUse, Evidence, SizeExpr, assignments,
                                                    call_arguments, counts_of, div, feeding, flows, index_sites, plain,
                                                    prod, unparen)
from agent_core.templating.experts.families.rotary.angles import (_ANGLE_WORDS, _POW, _AngleTable, _angle_table,
                                                                  _angles, _smooth_angles)
from agent_core.templating.experts.families.rotary.buffers import (_cast, _count_c, _fused_heads, _heads, _launch_heads,
                                                                   _pairs_type, _rotary_widths, _sine, _split_tables,
                                                                   _twice)
from agent_core.templating.experts.families.rotary.computed_positions import _Computed
from agent_core.templating.experts.families.rotary.implicit_positions import _HeadMajor, _Implicit
from agent_core.templating.experts.families.rotary.indexing import _head_sizes_first
from agent_core.templating.experts.index_reading import index_strides as _index_strides
from agent_core.templating.experts.families.rotary.qk_norm import _Norm, _row_strides
from agent_core.templating.experts.families.rotary.sequences import _Sequences
from agent_core.templating.experts.families.rotary.views import _views


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


def _bind(ev: Evidence, e, p: ArgUse | None, tokens: tuple, tokens_spec: str, qi, q, ki, k, oop: bool,
          caches: list[ArgUse], seq: _Sequences | None = None, implicit: _Implicit | None = None,
          table: _AngleTable | None = None, batch: SizeExpr | None = None,
          batch_fp: tuple | None = None, computed: "_Computed | None" = None, norm: "_Norm | None" = None,
          head_major: "_HeadMajor | None" = None) -> list[Binding]:
    """The bindings for one token count: ``p`` the positions (None: the cos/sin rows are the tokens' own; with
    ``seq``, one offset per sequence of ``seq.seq`` tokens: only the layouts and pairs the body's indexing allows;
    with ``norm``, each query and key head RMS-normalized first (KT_EXPERT_QK_NORM): the head sizes its weights and its
    divisor are, a token's rows as the index shows them (``_row_strides``); with ``head_major``, query and key
    head-major [batch, heads, seq, head_size], a token (batch entry, position) a row of the tables or of the
    positions (KT_EXPERT_HEAD_MAJOR))."""
    seq_offsets = False
    if seq and not caches and e.conventions.get("KT_EXPERT_SEQ_OFFSETS") is not None:
        # one offset per sequence with the angles computed: the index in the sequence form (KT_EXPERT_POSITIONS 3)
        # plus each sequence's offset read from the positions (KT_EXPERT_SEQ_OFFSETS)
        implicit = _Implicit(tokens, tokens_spec, SizeExpr(f"(int)({seq.seq.name})", str(seq.seq.spec.value),
                                                           f"`{seq.seq.name}`"), None, None, seq.adds)
        seq, seq_offsets = None, True
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
        if implicit.div is not None:  # a row of one head a token, its position (row / div) % seq
            pos_words = f"{'`' + implicit.offset.name + '` + ' if implicit.offset else ''}{implicit.words}"
        elif implicit.words:  # no sequence: the offset plus the token itself
            pos_words = implicit.words
        if seq_offsets:
            pos_words = (f"`{p.name}[token / {implicit.seq.words.strip('`')}]` + the token's index in its sequence of "
                         f"{implicit.seq.words} tokens")
    if head_major:
        pos_words = (f"`{p.name}[token]`" if p else "the token index (cos and sin gathered per token)") + (
            f", a token (batch entry, position) of head-major [batch, heads, {head_major.seq.words}, head_size] "
            "query and key")
    pos_arg = _cast(p.dtype, p.name, True) if p else "(const int*)nullptr"
    angles = _angles(ev) if not caches else None
    smooth = None  # Llama 3.1's smoothed frequencies (smooth_a, smooth_b), read where no other angle reading fits
    if angles is None and not caches and p is not None and not (seq or implicit or computed) \
            and e.conventions.get("KT_EXPERT_ANGLE_SMOOTH") is not None:
        got = _smooth_angles(ev)
        if got is not None:
            angles, smooth = got[:5], got[5:]
    if computed and angles and 2 in angles[3] and re.search(r"(?<![\w.])1\.0*\s*/\s*\(?\s*(__)?powf?\s*\(", ev.body):
        # a double literal over the power (no f suffix): the reciprocal and the angle in double, rounded once
        angles = (*angles[:3], [4] + angles[3], angles[4])
    # a 16-bit kernel that never converts to float rotates in T's own arithmetic (candle's templated rope); read for
    # the implicit positions only: the bindings other layouts had before stay as they were
    storage = (implicit is not None and q.dtype in ("f16", "bf16")
               and e.conventions.get("KT_EXPERT_STORAGE_MATH") is not None
               and not re.search(r"\bfloat|2float|\bto_f", ev.body))
    if not caches and angles is None:
        return []
    # one fp32 input whose values the body takes the sine or cosine of, times the position, with positions given:
    # a table of inverse frequencies, one a pair (Hugging Face's inv_freq kept as a model weight), where the expert
    # has that cache (KT_EXPERT_CACHE 7); its rows are checked against the rotary width below
    inv = (_angle_table(ev, caches[0]) if p is not None and table is None and len(caches) == 1
           and caches[0].dtype == "f32" and not (seq or implicit or computed) and norm is None
           and "7: an fp32 table of inverse frequencies" in e.convention_words.get("KT_EXPERT_CACHE", "") else None)
    split = _split_tables(ev, caches[0]) if len(caches) == 1 else None  # one cache as two tables a row
    q_tok, k_tok = div(q.counts, tokens), div(k.counts, tokens) if k else (1,) * len(tokens)
    if computed:  # the key's rows as the body indexes them (a KV cache: more rows than tokens)
        k_tok = computed.krow
    if q_tok is None or k_tok is None:
        return []
    T, C, P = q.dtype, caches[0].dtype if caches else "f32", p.dtype if p else "i32"
    # head size: an int argument that divides a token's query (and key) elements, the likelier ones first
    hss = []
    for a in ev.ints():
        if a.counts and div(q_tok, a.counts) and (k is None or div(k_tok, a.counts)) and all(v > 1 for v in a.counts):
            hss.append((ev.sizes(a.counts)[0], a.counts))
    # or twice an int argument that the query's (and the key's) index steps a varying term by, where no argument
    # holds it (the kernel takes the rotary half as its argument: CPM.cu's half_dim, a head `row * half_dim * 2`)
    q_steps = _index_strides(ev, qi.name, True)
    if k is not None:
        q_steps &= _index_strides(ev, ki.name, True)
    for a in ev.ints():
        twice = tuple(2 * v for v in a.counts) if a.counts else None
        if twice and twice in q_steps and div(q_tok, twice) and (k is None or div(k_tok, twice)) \
                and all(h[1] != twice for h in hss):
            hss.append((_twice(a), twice))
    _head_sizes_first(ev, hss, qi, ki if k else None, q_tok, k_tok)  # head strides first, never by names
    if head_major:  # the head size the layout was read with
        hss = [h for h in hss if h[1] == head_major.head]
    strides = None
    if norm is not None:  # the head size the norm's weights and divisor are; a token's rows as the index shows them
        hss = [h for h in hss if h[1] == norm.q_gamma.counts == norm.divisor.counts]
        strides = _row_strides(ev, qi, ki, q_tok, k_tok)
    def constant_head(c: tuple | None, least: int) -> None:
        """``c`` as a head size the kernel has at compile time: one even number above ``least`` on every size set
        that divides a token's query (and key) elements."""
        if c and len(set(c)) == 1 and c[0] > least and c[0] % 2 == 0 and div(q_tok, c) \
                and (k is None or div(k_tok, c)) and all(h[1] != c for h in hss):
            hss.append((SizeExpr(str(c[0]), str(c[0]), f"the constant {c[0]}"), c))
    # or a constant: a token's elements over a head-count argument
    for a in ev.ints():
        constant_head(div(q_tok, a.counts) if a.counts else None, 1)
    # or a constant the query's index steps a varying term by, where no argument gives the head count either (the head
    # count and size both template arguments: Mirage's NUM_HEAD and HEAD_DIM)
    for c in sorted(_index_strides(ev, qi.name, True)) if not hss else []:
        constant_head(c, 2)
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
                        + (f" smoothed by clamp(f * {smooth[0].name} + {smooth[1].name}, 0, 1) between f * {scale.name}"
                           " and f (Llama 3.1)" if smooth else f" * {scale.name if scale else 1}")
                        + (f", cos and sin * {attn.name}" if attn else "")
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
            elif inv is not None and caches[0].counts == tuple(r // 2 for r in rot_fp) \
                    and not any(r % 2 for r in rot_fp):
                c = caches[0]  # theta = pos * inv_freq[i]: one row for every position, rot_dim / 2 long
                layouts.append(_Layout(7, _cast(C, c.name, True), "", f"({rot.c}) / 2",
                                       [f"inv_freq={c.name} [rot_dim / 2] (theta = pos * {c.name}[i], cos and sin by "
                                        f"{'__sincosf' if inv.fast else 'sincosf'})"], None, 0, fast=inv.fast,
                                       stride_fp=tuple(r // 2 for r in rot_fp)))
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
                if split is not None and split.offset in (rot_fp, tuple(r // 2 for r in rot_fp)) \
                        and split.stride != rot_fp:
                    # a cos and a sin table back to back in each row (libllm's cos row then sin row, full width):
                    # two tables, the sin pointer moved to its place, rows of the cache's row length; the cos the
                    # table at the row's start, then the other way round
                    full = split.offset == rot_fp
                    base = _cast(C, c.name, True)
                    for oi, (cc, ss) in enumerate(((base, f"{base} + ({split.offset_c.c})"),
                                                   (f"{base} + ({split.offset_c.c})", base))):
                        layouts.append(_Layout(
                            2 if full else 1, cc, ss, split.stride_c.c,
                            [f"cos={c.name}{'' if oi == 0 else ' + ' + split.offset_c.words}",
                             f"sin={c.name}{' + ' + split.offset_c.words if oi == 0 else ''}",
                             f"rows of {split.stride_c.words}" + (", each half for its element (Hugging Face)"
                                                                  if full else "")],
                            f"({c.spec.size}) / ({split.stride_c.spec})", 1 - oi, stride_fp=split.stride))
            else:
                c0, c1 = caches
                orders = [(c0, c1), (c1, c0)]
                if _sine(ev, c0) and not _sine(ev, c1):  # the table the rotation subtracts a product of is sin
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
                if head_major and (cache >= 4 or row_len or view or fused):
                    continue  # head-major: a cos/sin cache, each token's heads as the expert walks them
                if (row_len or view) and cache >= 4 or fused and (cache > 4 or smooth):
                    continue  # strided views take a cache (a fused buffer's heads angles computed in the kernel too,
                    # not smoothed ones: the expert's smoothing takes a token's heads apart)
                if seq and seq.strides is not None and lay.stride_fp != seq.strides:
                    continue  # the tables' rows are as long as the position is multiplied by
                if implicit and not computed and lay.stride_fp != implicit.stride:
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
                        if seq_offsets:
                            b.conventions["KT_EXPERT_SEQ_OFFSETS"] = 1
                    elif batch:
                        b.conventions["KT_EXPERT_POSITIONS"] = 4
                    elif p is None:
                        b.conventions["KT_EXPERT_POSITIONS"] = 0
                    elif seq:
                        b.conventions["KT_EXPERT_POSITIONS"] = 2
                    b.template_args = [CTYPE[P], CTYPE[T], CTYPE[C]]
                    if norm is not None:  # the weights' type too
                        b.template_args.append(CTYPE[norm.q_gamma.dtype])
                    null = f"({CTYPE[T]}*)nullptr"
                    if cache in (4, 7):  # no cache (or one row for every position): no max_position
                        del b.sizes["max_position"]
                    if cache == 4:  # no cache: the angle's form and calls instead
                        b.conventions.update({"KT_EXPERT_ANGLE": lay.angle, "KT_EXPERT_FAST_ANGLE": int(lay.fast)})
                        b.call_args = [pos_arg, _cast(T, qi.name, True),
                                       _cast(T, ki.name, True) if k else f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), _cast(T, k.name, False) if k else null,
                                       f"(float)({base.name})", f"(float)({scale.name})" if scale else "1.0f",
                                       f"(float)({attn.name})" if attn else "1.0f", rot.c, nh.c, kv.c, hs.c]
                        if fused:  # views of one fused row: the key heads after the query heads, tokens a row apart
                            buf_c, buf = _cast(T, q.name, True), _cast(T, q.name, False)
                            kofs = f"(long long)({nh.c}) * ({hs.c})"
                            row = f"(long long)({fused[2]}) * ({hs.c})"
                            b.call_args[1:5] = [buf_c, f"{buf_c} + {kofs}", buf, f"{buf} + {kofs}"]
                            b.call_args += [row, row]
                            b.conventions["KT_EXPERT_TOKEN_STRIDE"] = 1
                        if smooth:  # the smoothing's two coefficients last
                            b.conventions["KT_EXPERT_ANGLE_SMOOTH"] = 1
                            b.call_args += [f"(float)({smooth[0].name})", f"(float)({smooth[1].name})"]
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
                    elif cache == 0 and pairing == 0 and not oop and not seq and not implicit and not storage \
                            and norm is None and not head_major:
                        # the expert's default code
                        b.call_args = [pos_arg, _cast(T, q.name, False),
                                       _cast(T, k.name, False) if k else null, cos_c, rot.c, nh.c, kv.c, hs.c]
                    else:
                        b.call_args = [pos_arg, _cast(T, qi.name, True),
                                       _cast(T, ki.name, True) if k else f"(const {CTYPE[T]}*)nullptr",
                                       _cast(T, q.name, False), _cast(T, k.name, False) if k else null,
                                       cos_c, sin_c, stride_c, rot.c, nh.c, kv.c, hs.c]
                    if norm is not None:  # the token strides the index shows, then the norm's weights, eps and
                        # flags (each checked at run time by the expert), last
                        b.conventions["KT_EXPERT_QK_NORM"] = 1
                        if strides:
                            b.conventions["KT_EXPERT_TOKEN_STRIDE"] = 1
                            b.call_args += [strides[0], strides[1]]
                        G = norm.q_gamma.dtype
                        b.call_args += [_cast(G, norm.q_gamma.name, True), _cast(G, norm.k_gamma.name, True),
                                        norm.q_eps, norm.k_eps, norm.q_flag, norm.k_flag]
                    if head_major:  # head-major: the sequence length last
                        b.conventions["KT_EXPERT_HEAD_MAJOR"] = 1
                        b.call_args.append(head_major.seq.c)
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
                            n_c = _count_c(ev, implicit.tokens) if cache < 4 else None
                            if n_c:  # a warp a row, THREADS / 32 rows a block (a 32-thread block a row is
                                # launch-bound)
                                b.conventions["KT_EXPERT_ROW_TOKENS"] = 1
                                b.call_args.append(f"(long long)({n_c})")
                            else:
                                b.fixed["THREADS"] = [t for t in e.params["THREADS"].values if t <= 64]
                        if implicit.div is not None:  # the rows a position spans, last
                            b.conventions["KT_EXPERT_POS_DIV"] = 1
                            b.call_args.append(implicit.div)
                    if computed and computed.heads is not None and nh is computed.heads:
                        # the heads only the launch counts: a block of (THREADS / heads, heads), read back from its y
                        b.conventions["KT_EXPERT_BLOCK_HEADS"] = 1
                        b.fixed["THREADS"] = [t for t in e.params["THREADS"].values
                                              if all(t >= v for v in counts_of(nh.spec, ev.spec))]
                    if computed:  # positions computed in the body: the key's rows a sequence, a warp a row of one head
                        if computed.key_seq:
                            b.conventions["KT_EXPERT_KEY_ROWS"] = 1
                            b.call_args.append(f"(long long)({computed.key_seq.c})")
                        n_c = _count_c(ev, computed.tokens) if nh.c == "1" else None
                        if n_c:
                            b.conventions["KT_EXPERT_ROW_TOKENS"] = 1
                            b.call_args.append(f"(long long)({n_c})")
                        elif nh.c == "1":  # a block a row of one head: no more threads than a warp or two
                            b.fixed["THREADS"] = [t for t in e.params["THREADS"].values if t <= 64]
                    # no cache: the angle table is in shared memory, read as wide as the head
                    b.consts = {"ESIZE": NBYTES[T], "CSIZE": NBYTES[C] if cache != 4 else NBYTES[T]}
                    b.words = [(f"positions={p.name}[sequence] + the token's index in its sequence of "
                                f"`{seq.seq.name}` tokens" if seq else f"positions={pos_words}" if seq_offsets
                                else f"positions={p.name}") if p else
                               f"positions={pos_words}" if implicit or table else
                               "positions=the token index (cos and sin gathered per token)"] + (
                        [f"query={qi.name} -> {q.name}", f"key={ki.name} -> {k.name}" if k else "no key"] if oop else
                        [f"query={q.name}", f"key={k.name}" if k else f"key={q.name} after the query heads" if fused
                         else "no key"]) + [
                        *cache_words, f"rot_dim={rot.words}", f"num_heads={nh.words}",
                        f"num_kv_heads={kv.words}", f"head_size={hs.words}", f"{style} pairs",
                        "out of place" if oop else "in place"] + ([fused[3]] if fused else []) + (
                        (norm.words + ([strides[2]] if strides else [])) if norm is not None else []) + (
                        [f"those heads at the start of each token's row of {row_len.words} elements rotated, the "
                         "rest untouched"] if row_len else []) + (view.words if view else [])
                    if head_major:
                        b.words[0] = f"positions={pos_words}"
                    if b.conventions.get("KT_EXPERT_STORAGE_MATH"):
                        b.words.append(f"{T} arithmetic (each product and sum rounded to {T})")
                    if b.conventions.get("KT_EXPERT_ROW_TOKENS"):
                        b.words.append("a warp a row, THREADS / 32 rows a block")
                    if b.conventions.get("KT_EXPERT_KEY_ROWS"):
                        b.words.append(f"key rows of a sequence {computed.key_seq.words} apart (a KV cache)")
                    # strided views: the kernel itself moves its pointers to the rotary channels, first
                    b.support = (24 if view else 20) - 3 * hi - 2 * ri + lsup - pi
                    if seq:  # the offsets are added to the index in the sequence: before reading them per token
                        b.support += 10 - seq.rank
                    if seq_offsets:  # (the same, with the angles computed)
                        b.support += 10
                    if cache == 4 and exponent and _table_row(rot, rot_fp) == 2:
                        b.support -= 3  # the angles' exponent divides by another width than this rotary width
                    out.append(b)

    # the rotary widths the tables' rows are as long as (their index strides: rot_dim, or rot_dim / 2 a table of
    # each), or with the angles computed, those the power's exponent is computed from (2i / rot_dim), first; then
    # the head size, then in the arguments' order
    table_strides = set().union(*(_index_strides(ev, c.name, True) for c in caches)) if caches else set()
    pair_offsets = {unparen(t) for c in caches for site in index_sites(ev, c.name) for sign, t in site if sign > 0}
    flow = flows(ev.body)
    exps = [args[1] for _, args in call_arguments(ev.body, _POW) if len(args) == 2]
    fed = set().union(*(feeding(flow, x) for x in exps))
    exponent = {n for t in exps + [v for n, v in assignments(ev.body) if n in fed]
                for n in re.findall(r"/[(]*([A-Za-z_]\w*)\b", plain(t))}  # what the exponent divides by
    # the int arguments twice of which a local the exponent divides by is assigned (`rope_dim = 2 * n_rope_pairs`,
    # perhaps in one branch of a choice: the rotary half an argument, the angles over the rotated width)
    halves = {n for d, v in assignments(ev.body) if d in exponent
              for n in re.findall(r"(?<![\w.])2\s*\*\s*\(?([A-Za-z_]\w*)\b(?!\s*[\[(])|\b([A-Za-z_]\w*)\)?\s*\*\s*2\b(?![.\w])",
                                  plain(v)) for n in n if n}

    def _table_row(rot: SizeExpr, rot_fp: tuple) -> int:
        """0: the tables' rows are as long (or the exponent divides by it); 1: half as long; 2: neither."""
        if split is not None and split.offset == rot_fp:
            return 0  # a cos and a sin table back to back in each row, each rot_dim long
        if caches:
            return 0 if rot_fp in table_strides else 1 if tuple(r // 2 for r in rot_fp) in table_strides else 2
        names = set(re.findall(r"\(int\)\((\w+)\)", rot.c))
        return 0 if names & (halves if rot.c.startswith("2 * ") else exponent) else 2

    for hi, (hs, hs_fp) in enumerate(hss):
        nh0 = _heads(ev, q_tok, hs, hs_fp)
        if nh0 is None and computed is not None and computed.heads is not None \
                and div(q_tok, hs_fp) == counts_of(computed.heads.spec, ev.spec) \
                and e.conventions.get("KT_EXPERT_BLOCK_HEADS") is not None:
            nh0 = computed.heads  # only the launch counts the heads: the expert's block holds them (blockDim.y)
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
            rots = _rotary_widths(ev, hs, hs_fp)
            # or twice an int argument where no argument holds it (the rotary half an argument): that the tables'
            # index adds (a pair's second element) where their rows are that long (their index strides: MNN's
            # ropeHalfDim), or, with no cache, twice of which a local the angles' exponent divides by is assigned
            for a in ev.ints():
                twice = tuple(2 * v for v in a.counts) if a.counts else None
                if twice and all(r <= h for r, h in zip(twice, hs_fp)) and not any(x.counts == twice for x in ev.ints()) \
                        and (twice in table_strides and a.name in pair_offsets if caches else a.name in halves):
                    rots.append((_twice(a), twice))
            rots.sort(key=lambda r: (_table_row(*r), r[1] != hs_fp))
            emit(hi, hs, hs_fp, nh, kv, fused, row_len, rots)
    if not oop and caches and e.conventions.get("KT_EXPERT_TOKEN_STRIDE") is not None and norm is None:
        for vi, (hs, hs_fp, nh, kv, rots, view) in enumerate(_views(ev, q, k, q_tok, k_tok)):
            emit(vi, hs, hs_fp, nh, kv, None, None, rots, view)
    return out
