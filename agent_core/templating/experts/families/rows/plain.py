"""The plain form of each row family, read together from one layout of the buffers (``_row_bindings``): RMSNorm
(out of place, in place, without a weight), LayerNorm (gamma and beta, with per-row statistics or without,
in place where the body takes a mean off the row; neither gamma nor beta), fused add + RMSNorm of one type in place,
softmax of one type."""

from __future__ import annotations

import itertools

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, div
from agent_core.templating.experts.families.rows.add_norm import _subtracts_mean, _takes_mean_off
from agent_core.templating.experts.families.rows.common import EXPS, ROOTS, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.fused_add import _fused_orders
from agent_core.templating.experts.families.rows.norm_conventions import (_eps_candidates, _flagged_offsets,
                                                                          _norm_conventions, _shift_first)
from agent_core.templating.experts.families.rows.norm_stats import (_layer_norm_stats, _stat_is_reciprocal_root,
                                                                     _stat_is_variance)
from agent_core.templating.experts.families.rows.softmax_log import _log_probs_out
from agent_core.templating.experts.library import Expert


def _row_bindings(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    if any(a.dtype not in FLOATS for a in ev.bufs()):
        return []
    sized = [a for a in ev.bufs() if a.counts]
    if not sized:
        return []
    big = max(a.counts for a in sized)
    main = [a for a in sized if a.counts == big]
    small = [a for a in ev.bufs("in") if a.counts and a.counts != big]
    # per-row statistics a LayerNorm may write (mean, rstd): fp32 outputs of one value per row
    stats = [a for a in ev.bufs("out", ("f32",)) if a.counts and a.counts != big]
    if len(small) + len(stats) != len([a for a in ev.bufs() if a.counts != big]) or len({a.dtype for a in main}) != 1:
        return []  # every buffer is a row buffer, a one-row input or a per-row statistic
    # or one array of a (mean, statistic) pair a row (haste's cache [rows, 2]): the pair's halves as the two
    ln = lib.get("layer_norm")
    pair = len(stats) == 1 and ln is not None and "KT_EXPERT_STATS_PAIR" in ln.conventions and all(
        v % 2 == 0 for v in stats[0].counts)
    if stats and not pair and (len(stats) != 2 or stats[0].counts != stats[1].counts
                               or div(big, stats[0].counts) is None):
        return []
    if small and len({a.counts for a in small}) != 1:
        return []
    T = main[0].dtype
    W = small[0].dtype if small else T
    in_main = [a for a in main if a.role == "in"]
    out_main = [a for a in main if a.role == "out"]
    io_main = [a for a in main if a.role == "inout"]
    x0 = next((a for a in main if a.role in ("in", "inout")), None)
    if x0 is None:
        return []
    root = ev.has(*ROOTS)
    exp = ev.has(*EXPS)
    red = ev.reduction_words()
    out: list[Binding] = []
    for hidden, hfp in _hidden_candidates(ev, big, small):
        rows_fp = div(big, hfp)
        hname = hidden.words.strip("`")
        words = f"reads rows of `{hname}` elements, {red}"
        rows_spec = f"({x0.spec.size}) / ({hidden.spec})"
        hsup = 2 * ev.uses(hidden)

        def new(expert: str, score: float, reason: str) -> Binding | None:
            if expert not in lib:
                return None
            b = Binding(lib[expert], score, reason, ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words.append(f"hidden={hidden.words}")
            return b

        esize = max(NBYTES[T], NBYTES[W])
        norms = []  # (expert, score, reason, [(roles in words, call args before eps), ...])
        if stats and (div(big, hfp) != (tuple(v // 2 for v in stats[0].counts) if pair else stats[0].counts)
                      or len(small) != 2):
            continue  # statistics: one per row (or a pair a row), of a LayerNorm
        if root and len(small) == 1 and len(in_main) == 1 and len(out_main) == 1 and not io_main:
            x, o, w = in_main[0], out_main[0], small[0]
            norms.append(("rms_norm", 0.9, f"{words}, rsqrtf, one weight of `{hname}` → RMSNorm",
                          [([f"out={o.name}", f"x={x.name}", f"weight={w.name}"],
                            [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True)])]))
        if root and len(small) == 1 and len(io_main) == 1 and not in_main and not out_main:
            x, w = io_main[0], small[0]  # in place: out is x
            norms.append(("rms_norm", 0.85, f"{words}, rsqrtf, one weight of `{hname}`, in place → RMSNorm",
                          [([f"out=x={x.name} (in place)", f"weight={w.name}"],
                            [_cast(T, x.name, False), _cast(T, x.name, True), _cast(W, w.name, True)])]))
        if root and not small and len(in_main) + len(io_main) == 1 and len(out_main) + len(io_main) == 1:
            x = (in_main or io_main)[0]  # no weight (a separate multiply follows, as in llama.cpp)
            o = (out_main or io_main)[0]
            norms.append(("rms_norm", 0.8, f"{words}, rsqrtf, no weight → RMSNorm",
                          [([f"out={o.name}", f"x={x.name}" + (" (in place)" if x is o else ""), "no weight"],
                            [_cast(T, o.name, False), _cast(T, x.name, True), f"(const {CTYPE[T]}*)nullptr"])]))
            # or a LayerNorm with neither gamma nor beta (llama.cpp's norm): which one, the cheap check decides
            null = f"(const {CTYPE[T]}*)nullptr"
            norms.append(("layer_norm", 0.75, f"{words}, rsqrtf, no scale or shift → LayerNorm without affine",
                          [([f"out={o.name}", f"x={x.name}" + (" (in place)" if x is o else ""),
                             "no gamma or beta"], [_cast(T, o.name, False), _cast(T, x.name, True), null, null])]))
        if root and len(small) == 1 and len(io_main) == 2 and not in_main and not out_main:
            pairs = _fused_orders(ev, io_main)
            norms.append(("fused_add_rms_norm", 0.9, f"{words}, adds two in/out rows (both written), rsqrtf, one "
                          "weight → fused add + RMSNorm",
                          [([f"x={x.name}", f"residual={r.name}", f"weight={small[0].name}"],
                            [_cast(T, x.name, False), _cast(T, r.name, False), _cast(W, small[0].name, True)])
                           for x, r in pairs]))
        if root and len(small) == 2 and len(in_main) == 1 and len(out_main) == 1 and not io_main \
                and small[0].dtype == small[1].dtype:
            o, x = out_main[0], in_main[0]
            g, bb = small
            orders = [(g, bb), (bb, g)]
            if _shift_first(ev, g, bb):  # the shift added, the scale multiplied: gamma second
                orders.reverse()
            stat_orders = [[]] if not stats else [list(stats), list(reversed(stats))]
            if stats and not pair and _spread(ev, stats[0]) and not _spread(ev, stats[1]):
                stat_orders.reverse()  # the mean first: the other stores a reciprocal root or the variance
            if pair:  # the mean at 2 * row and the statistic at 2 * row + 1, then the other way
                stat_orders = [[stats[0], _SECOND_HALF], [_SECOND_HALF, stats[0]]]
            norms.append(("layer_norm", 0.85, f"{words} (mean and variance), rsqrtf, scale and shift of `{hname}` "
                          "→ LayerNorm",
                          [([f"out={o.name}", f"x={x.name}", f"gamma={gg.name}", f"beta={b2.name}"]
                            + (_stat_words(st) if st else []),
                            [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, gg.name, True),
                             _cast(W, b2.name, True)], st) for gg, b2 in orders for st in stat_orders]))
        if root and len(small) == 2 and len(io_main) == 1 and not in_main and not out_main and not stats \
                and small[0].dtype == small[1].dtype and _takes_mean_off(ev, io_main[0], [(hidden, hfp)]):
            # in place (LightSeq's ker_norm_layer: a post-norm's hidden states normalized where they are): out is x,
            # the expert holds the row in registers before it writes it; offered where the body takes a mean off the
            # row (two weights and a root of one in/out row are no evidence of a LayerNorm by themselves)
            x = io_main[0]
            g, bb = small
            orders = [(g, bb), (bb, g)]
            if _shift_first(ev, g, bb):
                orders.reverse()
            norms.append(("layer_norm", 0.85, f"{words} (mean and variance), rsqrtf, scale and shift of `{hname}`, "
                          "in place → LayerNorm",
                          [([f"out=x={x.name} (in place)", f"gamma={gg.name}", f"beta={b2.name}"],
                            [_cast(T, x.name, False), _cast(T, x.name, True), _cast(W, gg.name, True),
                             _cast(W, b2.name, True)]) for gg, b2 in orders]))
        for expert, score, reason, role_sets in norms:
            for ri, role_set in enumerate(role_sets):
                role_words, args = role_set[0], role_set[1]
                st = role_set[2] if len(role_set) > 2 else []
                no_weight = "no weight" in role_words
                no_affine = "no gamma or beta" in role_words
                offsets = [(None, "", 0)] if no_weight or no_affine else _flagged_offsets(ev, lib.get(expert), small)
                for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
                    for (conv, conv_words, conv_support), (off_c, off_words, off_support) in itertools.product(
                            _norm_conventions(ev, lib.get(expert), "f32" if no_weight else T), offsets):
                        if off_c == eps_c:
                            continue  # one argument is not both
                        b = new(expert, score, reason)
                        if b is None:
                            continue
                        b.words[:0] = role_words
                        b.words.append(eps_words)
                        rows = _rows(ev, rows_fp, rows_spec, hidden, b)
                        b.words += conv_words + ([off_words] if off_c else [])
                        b.template_args = [CTYPE[T], CTYPE[W]]
                        b.call_args = args + [eps_c, rows, hidden.c] + _stat_args(st) + ([off_c] if off_c else [])
                        if _SECOND_HALF in st:  # a pair a row
                            b.conventions = dict(conv, KT_EXPERT_STATS=1, KT_EXPERT_STATS_PAIR=1)
                        elif st:
                            b.conventions = dict(conv, KT_EXPERT_STATS=1, **_layer_norm_stats(ev, st, b))
                        b.consts = {"ESIZE": esize}
                        b.conventions = dict(b.conventions or conv, KT_EXPERT_WEIGHT=0) if no_weight else \
                            (b.conventions or conv)
                        if no_affine:
                            b.conventions = dict(b.conventions, KT_EXPERT_AFFINE=0)
                        if off_c:
                            b.conventions = dict(b.conventions, KT_EXPERT_WEIGHT_OFFSET=1)
                        b.support = 10 + hsup - ri - ei + eps_support + conv_support + off_support
                        if no_weight or no_affine:  # a mean taken off the row tells a LayerNorm
                            b.support += 3 if (expert == "layer_norm") == _subtracts_mean(ev, hidden) else 0
                        out.append(b)
        if exp and not small and ((len(in_main) == 1 and len(out_main) == 1 and not io_main)
                                  or (len(io_main) == 1 and not in_main and not out_main)) \
                and not _log_probs_out(ev):  # log-probabilities: _softmax_log_strided
            b = new("softmax", 0.85, f"{words}, a max and a sum of expf over the row → softmax")
            if b is not None:
                if io_main:
                    x = o = io_main[0]
                    b.words[:0] = [f"out=x={x.name} (in place)"]
                else:
                    x, o = in_main[0], out_main[0]
                    b.words[:0] = [f"out={o.name}", f"x={x.name}"]
                rows = _rows(ev, rows_fp, rows_spec, hidden, b)
                b.template_args = [CTYPE[T]]
                b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), rows, hidden.c]
                b.consts = {"ESIZE": NBYTES[T]}
                b.support = 10 + hsup
                out.append(b)
    return out


def _spread(ev: Evidence, a) -> bool:
    """The per-row statistic ``a`` stores the spread (a reciprocal root, or the variance eps is added to), not the
    mean."""
    return _stat_is_reciprocal_root(ev, a.name) or _stat_is_variance(ev, a.name)

_SECOND_HALF = "+1"  # in a statistics order: the second element of each pair of the one statistics array


def _pair_array(st: list):
    """The one statistics array of a statistics order with ``_SECOND_HALF`` in it."""
    return next(a for a in st if a is not _SECOND_HALF)


def _stat_words(st: list) -> list[str]:
    """The statistics in words: two arrays (mean=, rstd=), or the halves of one array of a pair a row."""
    if _SECOND_HALF in st:
        arr = _pair_array(st)
        first = st[0] is arr
        return [f"mean={arr.name}[2 * row{'' if first else ' + 1'}]",
                f"rstd={arr.name}[2 * row{' + 1' if first else ''}] (a pair a row)"]
    return [f"mean={st[0].name}", f"rstd={st[1].name}"]


def _stat_args(st: list) -> list[str]:
    """The mean_out and rstd_out pointers: two arrays, or one array of pairs and its second element."""
    if _SECOND_HALF in st:
        arr = _pair_array(st)
        return [f"(float*)({arr.name})" if a is arr else f"(float*)({arr.name}) + 1" for a in st]
    return [f"(float*)({a.name})" for a in st]
