"""LayerNorm in its general forms: gamma without beta and/or an output of a type of its own."""

from __future__ import annotations


from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, div
from agent_core.templating.experts.families.rows.add_norm import _takes_mean_off
from agent_core.templating.experts.families.rows.common import ROOTS, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.norm_conventions import (_eps_candidates, _norm_conventions,
                                                                          _shift_first)
from agent_core.templating.experts.library import Expert


def _layer_norm_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """LayerNorm in its general forms: gamma without beta (OLMo / StableLM ``bias=False``; offered beside the RMSNorm
    the same buffers suggest where the kernel takes a mean off the row) and/or an output of a type of its own
    (fp32 activations in, 16-bit out). The plain form is bound with the other row families."""
    e = lib.get("layer_norm")
    if e is None or "KT_EXPERT_OUT_TYPE" not in e.conventions or not ev.has(*ROOTS):
        return []
    ins, outs = ev.bufs("in"), ev.bufs("out")
    if ev.bufs("inout") or len(outs) != 1 or any(a.dtype not in FLOATS or not a.counts for a in ins + outs):
        return []
    o = outs[0]
    xs = [a for a in ins if a.counts == o.counts]
    ws = [a for a in ins if a.counts != o.counts]
    if len(xs) != 1 or len(ws) not in (1, 2) or len({(a.counts, a.dtype) for a in ws}) != 1:
        return []
    x = xs[0]
    mixed = x.dtype != o.dtype
    if mixed and NBYTES[o.dtype] > NBYTES[x.dtype]:
        return []  # an output wider than the input: the expert's vector checks are made for the input's type
    if len(ws) == 2 and not mixed:
        return []  # gamma and beta of one type in and out: the row families' LayerNorm
    if len(ws) == 1 and not _takes_mean_off(ev, x, _hidden_candidates(ev, o.counts, ws)):
        return []  # one weight and no mean subtracted (x - mean, whatever the mean's name): an RMSNorm (the row
        # families bind it)
    T, O, W = x.dtype, o.dtype, ws[0].dtype
    orders = [ws] if len(ws) == 1 else [ws, ws[::-1]]
    if len(ws) == 2 and _shift_first(ev, ws[0], ws[1]):  # the shift added, the scale multiplied: gamma second
        orders.reverse()
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, o.counts, ws)):
        rows_fp = div(o.counts, hfp)
        for oi, order in enumerate(orders):
            g, bb = order[0], (order[1] if len(order) == 2 else None)
            for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
                for conv, conv_words, conv_support in _norm_conventions(ev, e, O):
                    # gamma only is offered where a mean is subtracted: surer than the RMSNorm the same buffers suggest
                    b = Binding(e, 0.92 if not bb else 0.85, f"reads rows of `{hidden.words.strip('`')}` elements, "
                                f"{ev.reduction_words()}"
                                f", rsqrtf, {'gamma and beta' if bb else 'one weight (no shift)'}"
                                f"{f', out in {O}' if mixed else ''} → LayerNorm", ev.kernel.name)
                    b.sizes["hidden"] = hidden.spec
                    b.words = [f"out={o.name}" + (f" ({O}, x {T})" if mixed else ""), f"x={x.name}",
                               f"gamma={g.name}", f"beta={bb.name}" if bb else "no beta", f"hidden={hidden.words}",
                               eps_words]
                    rows = _rows(ev, rows_fp, f"({o.spec.size}) / ({hidden.spec})", hidden, b)
                    b.words += conv_words
                    b.template_args = [CTYPE[T], CTYPE[W]] + ([CTYPE[O]] if mixed else [])
                    b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), _cast(W, g.name, True),
                                   _cast(W, bb.name, True) if bb else f"(const {CTYPE[W]}*)nullptr", eps_c, rows,
                                   hidden.c]
                    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W], NBYTES[O])}
                    b.conventions = dict(conv)
                    if not bb:
                        b.conventions["KT_EXPERT_AFFINE"] = 2
                    if mixed:
                        b.conventions["KT_EXPERT_OUT_TYPE"] = 1
                    b.support = 10 + 2 * ev.uses(hidden) - hi - oi - ei + eps_support + conv_support
                    out.append(b)
    return out
