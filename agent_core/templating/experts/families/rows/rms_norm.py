"""RMSNorm of rows read at a stride of their own into contiguous rows (``KT_EXPERT_X_STRIDE``), and RMSNorm to an
output of a type of its own (``KT_EXPERT_OUT_TYPE``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, div
from agent_core.templating.experts.families.rows.common import ROOTS, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.norm_conventions import _eps_candidates, _norm_conventions
from agent_core.templating.experts.library import Expert


def _strided_rms(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm of rows read at a stride of their own (vLLM's rms_norm on a non-contiguous input: each row the first
    ``hidden`` elements of a wider one) into contiguous output rows: one float input longer than the output by a
    whole factor per row, the stride an int argument that holds the input's length over the rows."""
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_X_STRIDE" not in e.conventions or not ev.has(*ROOTS):
        return []
    ins, outs = ev.bufs("in"), ev.bufs("out")
    if len(outs) != 1 or len(ins) != 2 or ev.bufs("inout") or any(a.dtype not in FLOATS or not a.counts
                                                                     for a in ins + outs):
        return []
    o = outs[0]
    xs = [a for a in ins if a.dtype == o.dtype and all(x > y for x, y in zip(a.counts, o.counts))]
    ws = [a for a in ins if a not in xs and div(o.counts, a.counts)]
    if len(xs) != 1 or len(ws) != 1:
        return []
    x, w = xs[0], ws[0]
    T, W = o.dtype, w.dtype
    out = []
    for hidden, hfp in _hidden_candidates(ev, o.counts, [w]):
        rows_fp = div(o.counts, hfp)
        stride_fp = div(x.counts, rows_fp)
        strides = [s for s in ev.sizes(stride_fp) if s.c.startswith("(int)(") and "*" not in s.c and "/" not in s.c] \
            if stride_fp else []
        if not strides or any(st < h for st, h in zip(stride_fp, hfp)):
            continue
        st = strides[0]
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for conv, conv_words, conv_support in _norm_conventions(ev, e, T):
                b = Binding(e, 0.85, f"reads rows of `{hidden.words.strip('`')}` elements {st.words} apart from "
                            f"`{x.name}`, {ev.reduction_words()}, rsqrtf, one weight, contiguous rows out → RMSNorm "
                            "of a strided input", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words = [f"out={o.name}", f"x={x.name} (rows {st.words} apart)", f"weight={w.name}",
                           f"hidden={hidden.words}", eps_words]
                rows = _rows(ev, rows_fp, f"({o.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += conv_words
                b.template_args = [CTYPE[T], CTYPE[W]]
                b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c, f"(long long)({st.c.replace('(int)', '')})"]
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                b.conventions = dict(conv, KT_EXPERT_X_STRIDE=1)
                b.support = 10 + 2 * ev.uses(hidden) - ei + eps_support + conv_support
                out.append(b)
    return out


def _rms_norm_out_type(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm whose output is of a type of its own (KT_EXPERT_OUT_TYPE): fp32 activations in and 16-bit out, or
    16-bit in and fp32 out (ONNX Runtime's SimplifiedLayerNorm<float, float, half>, Transformer Engine's itype /
    otype, ExLlamaV2's input_fp32 / output_fp32). One row read (x), one row written of another float type (out), one
    weight of the row length, nothing else; no mean taken off the row (a LayerNorm: ``_layer_norm_general`` binds
    that). Where the output is 16-bit, the normalized value rounded to it before the weight multiply or not."""
    from agent_core.templating.experts.families.rows.add_norm import _subtracts_mean
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_OUT_TYPE" not in e.conventions or not ev.has(*ROOTS):
        return []
    ins, outs = ev.bufs("in"), ev.bufs("out")
    if ev.bufs("inout") or len(outs) != 1 or len(ins) != 2 or any(a.dtype not in FLOATS or not a.counts
                                                                  for a in ins + outs):
        return []
    o = outs[0]
    xs = [a for a in ins if a.counts == o.counts]
    ws = [a for a in ins if a.counts != o.counts and div(o.counts, a.counts)]
    if len(xs) != 1 or len(ws) != 1 or xs[0].dtype == o.dtype:
        return []
    x, w = xs[0], ws[0]
    hiddens = _hidden_candidates(ev, o.counts, [w])
    if re.search(r"-\(?\w*(mean|mu)\b", ev.flat, re.I) or any(_subtracts_mean(ev, h) for h, _ in hiddens):
        return []  # a mean taken off the row: a LayerNorm without a shift
    T, W, O = x.dtype, w.dtype, o.dtype
    out = []
    for hi, (hidden, hfp) in enumerate(hiddens):
        hname = hidden.words.strip("`")
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for conv, conv_words, conv_support in _norm_conventions(ev, e, O):
                b = Binding(e, 0.85, f"reads rows of `{hname}` elements of `{x.name}` ({T}), {ev.reduction_words()}, "
                            f"rsqrtf, one weight, the normalized row into `{o.name}` ({O}) → RMSNorm to a type of "
                            "its own", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words = [f"out={o.name} ({O}, x {T})", f"x={x.name}", f"weight={w.name}", f"hidden={hidden.words}",
                           eps_words]
                rows = _rows(ev, div(o.counts, hfp), f"({o.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += [cw.replace(f"to {O} before", f"to {O} (the output's type) before") for cw in conv_words]
                b.template_args = [CTYPE[T], CTYPE[W], CTYPE[O]]
                b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c]
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W], NBYTES[O])}
                b.conventions = dict(conv, KT_EXPERT_OUT_TYPE=1)
                b.support = 10 + 2 * ev.uses(hidden) - hi - ei + eps_support + conv_support
                out.append(b)
    return out
