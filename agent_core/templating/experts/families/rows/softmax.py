"""Softmax in its general form (``_softmax_general``): a scale or a temperature, a per-row divisor, an additive
or keep mask, a causal mask (its masked keys written 0, or left as they were where the body writes an inout output
in part and never reads it: out of place, a reading of its own), a sink logit per head, an output of a type of its
own, the scaled logits rounded to the storage type (``_round_forms``); the log-probability and strided forms
(``softmax_log``) and the key range forms (``softmax_keys``) are read first."""

from __future__ import annotations

import dataclasses
import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, SizeExpr, closing, div,
                                                    pointer_aliases, statements)
from agent_core.templating.experts.families.rows.common import EXPS, _bounds_a_loop, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.softmax_keys import _key_bounds, _softmax_key_forms
from agent_core.templating.experts.families.rows.softmax_log import _softmax_log_strided
from agent_core.templating.experts.families.rows.softmax_masks import (_causal_forms, _keep_fill, _mask_index_names,
                                                                   _mask_inners, _masked_fill_forms)
from agent_core.templating.experts.families.rows.softmax_sinks import _sink_heads, _sink_inners
from agent_core.templating.experts.index_reading import all_resolved, draw_pairs
from agent_core.templating.experts.library import Expert


def _softmax_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """Softmax in its general form: the logits scaled by a float argument and/or divided by a per-row input (a
    temperature), an additive mask of whole rows added (attention scores: mask rows broadcast over the heads, or
    consecutive rows sharing one), the output of a type of its own (fp16 logits to fp32 probabilities), a sink logit
    per head in the max and the denominator (gpt-oss attention sinks; ``_sink_heads``). The plain form is bound
    with the other row families."""
    e = lib.get("softmax")
    if e is None or "KT_EXPERT_GENERAL" not in e.conventions or not ev.has(*EXPS):
        return []
    special = _softmax_log_strided(ev, lib)  # log-probabilities out, or the logits at a row stride of their own
    if special is not None:
        return special
    ins, outs, ios = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS), ev.bufs("inout", FLOATS)
    # a keep-mask of bytes (PyTorch's masked_fill(mask == 0, -inf)), where the expert has one
    keeps = [a for a in ev.bufs("in", ("u8", "i8")) if a.counts] if "keep-mask" in e.convention_words.get(
        "KT_EXPERT_MASK", "") else []
    # a key range per batch read from int buffers (ONNX Runtime's 1-D mask index), where the expert has one
    keys = _key_bounds(ev) if "KT_EXPERT_KEYS" in e.conventions else None
    key_bufs = [a for a in (keys.end, keys.start) if a is not None] if keys else []
    if len(outs) + len(ios) != 1 or len(keeps) > 1 or len(ev.bufs()) != len(ins) + len(keeps) + len(key_bufs) + 1 \
            or not (outs or ios)[0].counts or (keys and keeps):
        return []
    o = (outs or ios)[0]
    big = o.counts
    xs = [o] if ios else [a for a in ins if a.counts == big]  # in place: x is the output
    if len(ins) - (0 if ios else 1) > 2:
        return []
    every_other = [a for a in ins if a.counts != big and a is not o] + keeps
    if len(xs) != 1 or any(not a.counts or div(big, a.counts) is None for a in every_other):
        return []
    x = xs[0]
    if keys:
        return _softmax_key_forms(ev, e, x, o, every_other, keys)
    # an output declared inout that the body writes and never reads, with an input of its length that the body
    # reads: the kernel reads that input and writes the output only in part, the rest left as it was (llm.c's
    # causal attention softmax writes keys 0 .. query of each row): out of place, each causal form with the masked
    # keys not written (KT_EXPERT_CAUSAL_KEEP), a reading of its own beside the in-place one the spec's role gives
    keep = [a for a in ins if a.counts == big and a.read and a.dtype in FLOATS] \
        if x is o and o.written and not o.read and "KT_EXPERT_CAUSAL_KEEP" in e.conventions else []
    kept = _softmax_general_forms(ev, e, keep[0], o, every_other, keeps, None, None, keep=True) \
        if len(keep) == 1 else []
    # a sink logit per head (an input the body reads as one value that joins the max and the sum): bound once as
    # what it is, after the readings of every input as before (a mask, a per-row divisor)
    sinks = [(a, h) for a in every_other if "KT_EXPERT_SINK" in e.conventions and a not in keeps
             for h in _sink_heads(ev, a)[:1]]
    out = []
    for sink, heads in [(None, None)] + sinks:
        others = [a for a in every_other if a is not sink]
        out += _softmax_general_forms(ev, e, x, o, others, keeps, sink, heads)
    return kept + out


def _softmax_general_forms(ev: Evidence, e: Expert, x: ArgUse, o: ArgUse, others: list[ArgUse], keeps: list[ArgUse],
                           sink: ArgUse | None, heads: SizeExpr | None, keep: bool = False) -> list[Binding]:
    """The general form's bindings with ``others`` (the inputs besides the logits) read as a per-row divisor and/or
    a mask, and ``sink`` (None: none) as a sink logit per head, ``heads`` the argument its count is. ``keep``: the
    causal forms only, their masked keys not written (``KT_EXPERT_CAUSAL_KEEP``), a reading of their own
    (``Binding.reading``: capped apart from the in-place reading of the same output)."""
    big = o.counts
    T, O = x.dtype, o.dtype
    per_rows = [a for a in others if a.dtype == "f32"]
    hs = [(h, div(big, a.counts)) for a in per_rows for h in ev.sizes(div(big, a.counts))[:1] if not h.c[0].isdigit()]
    hs += [h for h in _hidden_candidates(ev, big, []) if h not in hs]
    # (C expression, words, divides): a float argument the logits are multiplied by, or divided by where the body
    # divides by it (a temperature), that form first
    scales = []
    for a in ev.floats():
        times = (f"(float)({a.name})", f"logits times `{a.name}`", False)
        divided = (f"(float)({a.name})", f"logits divided by `{a.name}`", True)
        scales += [divided, times] if re.search(rf"/\(*{re.escape(a.name)}\b", ev.flat) else [times]
    scales.append(("1.f", "", False))
    red = ev.reduction_words()
    converted = _converted(ev)  # the body's conversions to a 16-bit type: where it rounds its scaled logits
    has_mask = "KT_EXPERT_MASK" in e.conventions
    has_causal = has_mask and "causal" in e.convention_words.get("KT_EXPERT_MASK", "")
    out = []
    for hi, (hidden, hfp) in enumerate(hs):
        hname = hidden.words.strip("`")
        rows_fp = div(big, hfp)
        # each other input: the per-row divisor (one fp32 value a row) or the mask (whole rows, fewer of them)
        for per_row in [a for a in others if a.counts == rows_fp and a.dtype == "f32"] or [None]:
            masks = [a for a in others if a is not per_row]
            if len(masks) == 2 and not keeps and not per_row and not sink and not keep \
                    and "7: a keep-mask of the mask's type" in e.convention_words.get("KT_EXPERT_MASK", ""):
                # a keep-mask whose zeros replace the logit by a constant, and an additive bias (Evoformer)
                out += _keep_fill_bias_forms(ev, e, x, o, hidden, hfp, hi, masks, scales, converted)
            if len(masks) == 2 and not keeps and not per_row and not sink and not keep \
                    and "KT_EXPERT_MASK_BIAS" in e.conventions:
                # two additive tensors, each broadcast its own way (Swin's relative-position bias and window mask)
                out += _two_additive_forms(ev, e, x, o, hidden, hfp, hi, masks, scales)
            if len(masks) > 1 or (masks and not has_mask):
                continue
            mask = masks[0] if masks else None
            mask_rows = div(mask.counts, hfp) if mask else None
            if mask and (mask_rows is None or div(rows_fp, mask_rows) is None or mask_rows == rows_fp):
                continue
            mrs = [m for m in ev.sizes(mask_rows) if not m.c[0].isdigit()] or ev.sizes(mask_rows) if mask else [None]
            if mask and not mrs and _bounds_a_loop(ev, hidden):  # no argument holds the mask's rows (its batch only
                # in the grid), the row a loop walks: the rows over a count they are a multiple of (scores [batch,
                # heads, q, k] over a mask [batch, q, k]: rows / heads)
                mrs = [SizeExpr(f"{{rows}} / (int)({a.name})", "", f"rows / `{a.name}`") for a in ev.ints()
                       if a.counts and div(rows_fp, a.counts) == mask_rows]
            # a byte mask whose nonzero values replace the logit by -10000 (Megatron's scaled_masked_softmax)
            fills = _masked_fill_forms(ev, mask) if mask in keeps and "masked_fill(mask, -10000)" in \
                e.convention_words.get("KT_EXPERT_MASK", "") else []
            if fills and sink is not None:
                continue
            # (mask rows, inner extent, words, causal form): an additive mask's ways of broadcasting; without one,
            # no mask and then each causal mask
            forms = [(mr, inner, words, None) for mr, (inner, words) in
                     itertools.product(mrs[:2], _mask_inners(ev, mask_rows) if mask else [(None, "")])]
            if not mask and has_causal and not sink:  # the expert's sink is not in its causal form
                forms += [(None, None, "", c) for c in _causal_forms(ev, rows_fp, hfp)]
            index_names = _mask_index_names(ev, mask) if mask else set()
            sink_forms = [(None, "", 0)]
            if sink is not None:
                if f"({heads.c[6:-1]})" in hidden.c or div(rows_fp, sink.counts) is None:
                    continue  # the rows of one head: a row within a head, the head count dividing the rows
                sink_forms = _sink_inners(ev, sink, heads, rows_fp)
                bounds = 4 if _bounds_a_loop(ev, hidden) else 0
            if keep:  # the output written in part: the causal forms, nothing else leaves keys unwritten
                forms = [f for f in forms if f[3]]
            for mi, ((mr, inner, inner_words, causal), (ni, sink_form)) in enumerate(
                    itertools.product(forms, enumerate(sink_forms))):
                # a middle dimension whose inner extent the mask's own index reads
                inner_arg = re.fullmatch(r"\(int\)\((\w+)\)", inner or "")
                seen_inner = 3 if inner_arg and inner_arg.group(1) in index_names else 0
                for (si, (scale, scale_words, divides)), (rv, round_words, round_support) in (
                        (x, r) for x in enumerate(scales)
                        for r in [(0, "", 0)] + _round_forms(e, T, x[1][0], None if keeps else mask, converted)):
                    if scale == "1.f" and not per_row and not mask and not causal and T == O and not sink:
                        continue  # the plain softmax: bound with the row families
                    b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {red}, a max and a sum of expf over the "
                                "row → softmax", ev.kernel.name)
                    b.sizes["hidden"] = hidden.spec
                    b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                        ([] if x is o else [f"x={x.name} ({T})"]) + [f"hidden={hidden.words}"]
                    rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b,
                                 causal[1] if causal else "")
                    if scale_words:
                        b.words.append(scale_words)
                    if per_row:
                        b.words.append(f"logits divided by `{per_row.name}`[row]")
                    b.template_args = [CTYPE[T], CTYPE[O]]
                    b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                                   f"(const float*)({per_row.name})" if per_row else "(const float*)nullptr"]
                    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
                    b.conventions = {"KT_EXPERT_GENERAL": 1}
                    if divides:
                        b.conventions["KT_EXPERT_LOGIT_DIVIDE"] = 1
                    if mask:
                        b.words.append(f"{'keeping the keys where' if mask in keeps else 'plus'} the mask "
                                       f"`{mask.name}` [{mr.words} rows]{' is not 0' if mask in keeps else ''}, "
                                       f"{inner_words}")
                        b.template_args.append(CTYPE[mask.dtype])
                        mr_c = mr.c.replace("{rows}", rows)
                        b.call_args += [_cast(mask.dtype, mask.name, True), mr_c, mr_c if inner is None else inner]
                        b.consts["ESIZE"] = max(b.consts["ESIZE"], NBYTES[mask.dtype])
                        b.conventions["KT_EXPERT_MASK"] = 4 if mask in keeps else 1
                    if causal:
                        conv, q_len, q_words = causal
                        b.words.append(q_words.replace("(the rest written 0)", "(the rest left as it is)")
                                       if keep else q_words)
                        b.call_args.append(f"(int)({q_len})")
                        b.conventions["KT_EXPERT_MASK"] = conv
                        if keep:
                            b.conventions["KT_EXPERT_CAUSAL_KEEP"] = 1
                            b.reading = "out of place, written in part"
                    if rv:
                        b.words.append(round_words)
                        b.conventions["KT_EXPERT_ROUND_SCALED"] = rv
                    b.support = 10 + 2 * ev.uses(hidden) - hi - si - mi - (3 if mr and mr.c[0].isdigit() else 0) + divides
                    b.support += seen_inner + round_support
                    if sink is not None:
                        sink_inner, sink_words, sink_support = sink_form
                        b.words.append(f"a sink logit `{sink.name}` ({sink.dtype}) per head in the max and the "
                                       f"denominator (no output column), {sink_words}")
                        b.template_args.append(CTYPE[sink.dtype])
                        b.call_args += [_cast(sink.dtype, sink.name, True), heads.c, sink_inner.replace("{rows}", rows)]
                        b.conventions["KT_EXPERT_SINK"] = 1
                        # the sink read as what it is comes before its readings as a mask or a divisor
                        b.support += 6 + bounds + sink_support + mi - mi // len(sink_forms) - ni
                        if mask is not None:  # the mask's broadcast its own index shows: the argument it reads
                            mr_arg = re.fullmatch(r"\(int\)\((\w+)\)", mr.c)
                            shared = div(rows_fp, mask_rows)
                            b.support += 2 if (inner is None and mr_arg and mr_arg.group(1) in index_names) or (
                                inner == "1" and any(a.counts == shared and a.name in index_names
                                                     for a in ev.ints())) else 0
                    out.append(b)
                    keep_words = list(b.words)
                    for fi, fill in enumerate(fills):  # the byte mask read as Megatron's masked_fill instead
                        c = b if fi == 0 else dataclasses.replace(
                            b, call_args=list(b.call_args), template_args=list(b.template_args), sizes=dict(b.sizes),
                            consts=dict(b.consts), conventions=dict(b.conventions), fixed=dict(b.fixed),
                            support=b.support - fi)
                        c.conventions["KT_EXPERT_MASK"] = fill
                        c.words = [w.replace(" is not 0, ", " is not 0 replaced by -10000 (masked_fill), " + (
                            "a row with every key masked written 0, " if fill == 5 else
                            "a row with every key masked uniform, ")).replace("keeping the keys where", "the logits where")
                                   for w in keep_words]
                        if fi:
                            out.append(c)
    return out


FLT_MAX = 3.4028234663852886e38  # a fill past it is no float: -inf


def _mask_rows_forms(ev: Evidence, rows_fp: tuple, hfp: tuple, m: ArgUse) -> list[tuple[SizeExpr, str | None, str]]:
    """(rows of ``m`` as the wrapper computes them, inner extent, words) of a mask or bias of whole rows of the
    row length ``hfp``: the count an argument holds (or the rows over an expression that holds the repeat), each way
    of broadcasting it (``_mask_inners``)."""
    m_rows = div(m.counts, hfp)
    if m_rows is None or div(rows_fp, m_rows) is None:
        return []
    mrs = [r for r in ev.sizes(m_rows) if not r.c[0].isdigit()] or ev.sizes(m_rows)
    if not mrs:  # the rows over what repeats them (scores [n_seq, heads, q, k] over a mask [n_seq, k]: heads * q)
        mrs = [SizeExpr(f"{{rows}} / ({q.c})", "", f"rows / ({q.words})") for q in ev.sizes(div(rows_fp, m_rows))[:1]]
    return [(mr, inner, words) for mr in mrs[:1] for inner, words in _mask_inners(ev, m_rows)]


def _keep_fill_bias_forms(ev: Evidence, e: Expert, x: ArgUse, o: ArgUse, hidden: SizeExpr, hfp: tuple, hi: int,
                          masks: list[ArgUse], scales: list, converted: list[str]) -> list[Binding]:
    """Softmax with a keep-mask whose zero values replace the logit by a constant (``_keep_fill``) after an additive
    bias is added (KT_EXPERT_MASK 7: AlphaFold's Evoformer attention, FastFold's / OpenFold's fused mask + pair-bias
    softmax): which of the two inputs is the mask is what the body compares with 0; each is broadcast over the rows
    its own way (the cheap check decides); the sum with a bias of the scores' 16-bit type rounded to it or not."""
    T, O = x.dtype, o.dtype
    rows_fp = div(o.counts, hfp)
    out = []
    for keep_mask, bias in (masks, masks[::-1]):
        fill = _keep_fill(ev, keep_mask)
        if fill is None or keep_mask.dtype != bias.dtype:
            continue
        mforms = _mask_rows_forms(ev, rows_fp, hfp, keep_mask)
        bforms = _mask_rows_forms(ev, rows_fp, hfp, bias)
        rounds = [(0, "", 0)] + _round_forms(e, T, "1.f", bias, converted)
        for (mi, (mr, minner, mwords)), (bi, (br, binner, bwords)), (si, (scale, scale_words, divides)), \
                (ri, (rv, round_words, round_support)) in itertools.product(
                    enumerate(mforms), enumerate(bforms), enumerate(scales), enumerate(rounds)):
            if rv == 1:
                continue  # the scaled logit alone rounded: not this kernel's order (the bias sum is what it rounds)
            b = Binding(e, 0.85, f"reads rows of `{hidden.words.strip('`')}` elements, {ev.reduction_words()}, a max "
                        f"and a sum of expf over the row, the logit plus a bias replaced by {fill:g} where a mask is 0 "
                        "→ softmax", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T})"]) + [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b, "")
            if scale_words:
                b.words.append(scale_words)
            b.words += [f"plus the bias `{bias.name}` [{br.words} rows], {bwords}",
                        f"the keys where the mask `{keep_mask.name}` [{mr.words} rows] is 0 given the logit {fill:g}, "
                        f"{mwords}"]
            if rv:
                b.words.append(round_words)
                b.conventions["KT_EXPERT_ROUND_SCALED"] = rv
            mr_c, br_c = mr.c.replace("{rows}", rows), br.c.replace("{rows}", rows)
            b.template_args = [CTYPE[T], CTYPE[O], CTYPE[keep_mask.dtype]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                           "(const float*)nullptr", _cast(keep_mask.dtype, keep_mask.name, True), mr_c,
                           mr_c if minner is None else minner, f"{fill!r}f" if abs(fill) <= FLT_MAX else "-INFINITY",
                           _cast(bias.dtype, bias.name, True), br_c, br_c if binner is None else binner]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O], NBYTES[keep_mask.dtype])}
            b.conventions.update({"KT_EXPERT_GENERAL": 1, "KT_EXPERT_MASK": 7})
            if divides:
                b.conventions["KT_EXPERT_LOGIT_DIVIDE"] = 1
            b.support = 12 + 2 * ev.uses(hidden) - hi - mi - bi - si - ri + round_support
            out.append(b)
    return out


def _two_additive_forms(ev: Evidence, e: Expert, x: ArgUse, o: ArgUse, hidden: SizeExpr, hfp: tuple, hi: int,
                        masks: list[ArgUse], scales: list) -> list[Binding]:
    """Softmax of the logits plus two additive tensors of one type (KT_EXPERT_MASK 1 with KT_EXPERT_MASK_BIAS: Swin's
    window attention adds a relative-position bias [heads, N, N] and a shifted-window mask [windows, N, N]), each
    broadcast over the rows its own way (the cheap check decides), added in the order the body reads them first."""
    T, O = x.dtype, o.dtype
    a, b = masks
    if a.dtype != b.dtype or a.dtype not in FLOATS or not all(_added(ev, m) for m in masks):
        return []
    first = {n: min((m.start() for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\s*\[", ev.body)), default=1 << 30)
             for n in (a.name, b.name)}
    orders = [(a, b), (b, a)] if first[a.name] <= first[b.name] else [(b, a), (a, b)]
    rows_fp = div(o.counts, hfp)

    def forms(m: ArgUse) -> list[tuple]:
        """(rows, inner, words, mid): the one-dimension broadcasts (mid "0"), then a broadcast over a leading and a
        middle dimension at once (the tensor's outer index wrapped; mid an int argument between its two dimensions)."""
        one = [(r, inner, words, "0") for r, inner, words in _mask_rows_forms(ev, rows_fp, hfp, m)]
        m_rows = div(m.counts, hfp)
        rep = div(rows_fp, m_rows) if m_rows else None
        two = []
        for r, inner, words, _ in one:
            if inner is None or inner == "1" or rep is None:
                continue
            for a in ev.ints():
                if a.counts and all(1 <= v <= p and p % v == 0 for v, p in zip(a.counts, rep)) \
                        and any(1 < v < p for v, p in zip(a.counts, rep)):  # (a size set may have one of either)
                    two.append((r, inner, f"{words}, its outer index wrapped, middle extent `{a.name}` (a leading and a "
                                f"middle dimension broadcast)", f"(int)({a.name})"))
        return read_rows(m, one + two)

    def read_rows(m: ArgUse, fs: list[tuple]) -> list[tuple]:
        """The forms whose row the body reads for ``m`` where its index and the logits' are read as values (both on
        the same sampled thread and block indices: the logits' row r and the tensor's row fit the form's
        broadcast_row on every sample); every form where they are not read."""
        xs, ms = all_resolved(ev, x.name), all_resolved(ev, m.name)
        fitting = []
        for f in fs:
            for xi, mi in itertools.product(xs, ms):
                # (the same index of two row pointers, `a[j]` and `m[j]`, tells nothing of their rows)
                if xi != mi and _fits_rows(ev, xi, mi, x, m, hfp, f):
                    fitting.append(f)
                    break
        if fitting:
            read.add(m.name)
        return fitting or fs

    read: set[str] = set()  # the tensors whose broadcast the body's indices were read to fit
    out = []
    for oi, (m1, m2) in enumerate(orders):
        f1, f2 = forms(m1), forms(m2)
        for (i1, (r1, in1, w1, mid1)), (i2, (r2, in2, w2, mid2)), (si, (scale, scale_words, divides)) in \
                itertools.product(enumerate(f1), enumerate(f2), enumerate(scales)):
            bd = Binding(e, 0.85, f"reads rows of `{hidden.words.strip('`')}` elements, {ev.reduction_words()}, a max "
                         f"and a sum of exp over the row of the logit plus two tensors → softmax", ev.kernel.name)
            bd.sizes["hidden"] = hidden.spec
            bd.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T})"]) + [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, bd, "")
            if scale_words:
                bd.words.append(scale_words)
            bd.words += [f"plus `{m1.name}` [{r1.words} rows], {w1}", f"then plus `{m2.name}` [{r2.words} rows], {w2}"]
            c1, c2 = r1.c.replace("{rows}", rows), r2.c.replace("{rows}", rows)
            bd.template_args = [CTYPE[T], CTYPE[O], CTYPE[m1.dtype]]
            bd.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                            "(const float*)nullptr", _cast(m1.dtype, m1.name, True), c1, c1 if in1 is None else in1,
                            mid1, _cast(m2.dtype, m2.name, True), c2, c2 if in2 is None else in2, mid2]
            bd.consts = {"ESIZE": max(NBYTES[T], NBYTES[O], NBYTES[m1.dtype])}
            bd.conventions.update({"KT_EXPERT_GENERAL": 1, "KT_EXPERT_MASK": 1, "KT_EXPERT_MASK_BIAS": 1})
            if divides:
                bd.conventions["KT_EXPERT_LOGIT_DIVIDE"] = 1
            bd.support = 12 + 2 * ev.uses(hidden) - hi - 2 * oi - i1 - i2 - si + 3 * len(read & {m1.name, m2.name})
            out.append(bd)
    return out


def _added(ev: Evidence, m: ArgUse) -> bool:
    """Whether the body adds an element of ``m`` (or of a local pointer made from it) as it is: a term of a sum
    (``a[j] + bias[j] + m[j]``), not a keep-mask turned into a fill or a (1 - m) * -10000."""
    for n in pointer_aliases(ev.body, m.name):
        v = rf"(?<![\w.]){re.escape(n)}\[[^\[\]]*\]"
        if re.search(rf"\+\(*{v}(?![\w*/])|{v}\)*\+", ev.flat):
            return True
    return False


def _fits_rows(ev: Evidence, xi: str, mi: str, x: ArgUse, m: ArgUse, hfp: tuple, form: tuple) -> bool:
    """Whether the logits' index ``xi`` and the tensor's index ``mi`` (resolved, as values) put the tensor's row at
    the form's broadcast row of the logits' row on every size set: ((r / (mid * inner)) % (t_rows / inner)) * inner
    + r % inner (mid 0: rows / t_rows)."""
    _, inner, _, mid = form

    def value(c: str | None, size: int, default: int) -> int | None:
        if c is None:
            return default
        got = re.fullmatch(r"\(int\)\((\w+)\)", c)
        if got:
            a = next((a for a in ev.ints() if a.name == got.group(1)), None)
            return a.counts[size] if a is not None and a.counts else None
        return int(c) if c.isdigit() else None

    for size in range(len(ev.spec.sizes)):
        h, rows, t_rows = hfp[size], x.counts[size] // hfp[size], m.counts[size] // hfp[size]
        inner_v, mid_v = value(inner, size, t_rows), value(mid, size, 0)
        if not inner_v or mid_v is None or t_rows % inner_v:
            return False
        mm = mid_v or rows // t_rows
        pairs = draw_pairs(ev, xi, mi, size, 31, (2, 8, 64, 512, 4096), 300,
                           lambda a, b, s=size: 0 <= a < x.counts[s] and 0 <= b < m.counts[s])
        if not pairs or len(pairs) < 24 or len({a // h for a, _ in pairs}) < 8:
            return False  # (an index within a row, relative to a row pointer: no row read)
        if any(b // h != ((a // h) // (mm * inner_v)) % (t_rows // inner_v) * inner_v + (a // h) % inner_v
               for a, b in pairs):
            return False
    return True


_CONVERT = re.compile(r"(?:__float2half(?:_rn)?|__float2bfloat16(?:_rn)?|__hadd|static_cast<\s*(?:__half|half|"
                      r"__nv_bfloat16|nv_bfloat16|T|scalar_t)\s*>)\s*\(")


_EXP_CALL = re.compile(r"\b(?:" + "|".join(EXPS) + r")\s*\(")


def _converted(ev: Evidence) -> list[str]:
    """The arguments (text) of the body's conversions to a 16-bit type (and of ``__hadd``, a 16-bit sum) that take no
    exponential (those are the output's), each with the direct right-hand sides of the locals it names (``s = x *
    scale; __float2half(s)``, ``m = mask + off; __hadd(s, m[k])``), of those never assigned an exponential (a
    register array that holds the scaled logits and then their exponentials is the output's)."""
    direct = {}
    for target, at, stmt in statements(ev.body):
        if target is not None and at >= 0:
            direct.setdefault(target, []).append(stmt[at + 1:])
    out = []
    for m in _CONVERT.finditer(ev.body):
        i = closing(ev.body, m.end())
        arg = ev.body[m.end():i - 1]
        if _EXP_CALL.search(arg):
            continue
        out.append(" ".join([arg] + [x for n in dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*\b", arg))
                                     if not any(_EXP_CALL.search(y) for y in direct.get(n, []))
                                     for x in direct.get(n, [])]))
    return out


def _round_forms(e: Expert, T: str, scale: str, mask: ArgUse | None, conv: list[str]) -> list[tuple[int, str, int]]:
    """Where a 16-bit softmax rounds its scaled logits to the storage type before the softmax (Hugging Face's eager
    attention: ``attn_weights * scaling`` is a bf16 tensor, then ``+ attention_mask``): (KT_EXPERT_ROUND_SCALED,
    words, support), after the unrounded form. A conversion to a 16-bit type whose argument multiplies by the scale
    (not an exponential: that is the output's) is evidence for the rounding; without it the rounded forms come
    after every other binding (the cap keeps them where there is room). Rounding again after a mask of the same
    16-bit type is added is offered only where a conversion (or a 16-bit add) reads the mask. ``conv``: the body's
    conversions (``_converted``)."""
    if "KT_EXPERT_ROUND_SCALED" not in e.conventions or T not in ("f16", "bf16"):
        return []
    out = []
    arg = re.match(r"\(float\)\((\w+)\)$", scale)
    if arg:
        seen = any(re.search(rf"\b{re.escape(arg.group(1))}\b", a) for a in conv)
        out.append((1, f"the scaled logits rounded to {T}" + (" before the mask is added" if mask else ""),
                    1 if seen else -20))
    if mask is not None and mask.dtype == T and any(re.search(rf"\b{re.escape(mask.name)}\b", a) for a in conv):
        out.append((2, f"the scaled logits rounded to {T}, their sum with the mask rounded to {T} again", 2))
    return out
