"""Softmax with log-probabilities out (``_log_probs_out``) and/or the logits read at a row stride of their own
(``_softmax_log_strided``), and softmax over the live prefix of padded rows, in and out at one stride
(``_softmax_padded``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, SizeExpr, assignments, closing, div, feeding,
                                                    flows, statements, unparen)
from agent_core.templating.experts.families.rows.common import (EXPS, _bounds_a_loop, _cast, _hidden_candidates, _rows,
                                                                 _shorter_somewhere)
from agent_core.templating.experts.library import Expert


_NATURAL_LOGS = ("logf", "__logf", "log", "hlog")  # natural logs: a log2f form (base-2 log-probabilities or not) is not read
_LOG_CALL = re.compile(r"\b(?:" + "|".join(_NATURAL_LOGS) + r")\s*\(")
_STORE_CONVERT = re.compile(r"^(?:__float2(?:half|bfloat16)(?:_r[nzdu])?|\(\s*[A-Za-z_]\w*\s*\))\s*(?=\()")


def _stored_value(value: str) -> str:
    """A stored value without the conversion around all of it (``__float2half(v - lse)``, ``(T)(v - lse)``)."""
    from agent_core.templating.experts.evidence import uncast
    v = unparen(uncast(value))
    for _ in range(3):
        m = _STORE_CONVERT.match(v)
        if not m or closing(v, m.end() + 1) != len(v):
            break
        v = unparen(v[m.end():])
    return v


def _after_header(stmt: str) -> str:
    """A statement without the end of a loop or branch header before it (``i += 32) y[i] = v`` → ``y[i] = v``)."""
    depth = 0
    for i, ch in enumerate(stmt):
        depth += (ch in "([") - (ch in ")]")
        if depth < 0:
            return _after_header(stmt[i + 1:])
    return stmt


def _log_subtracted(ev: Evidence) -> bool:
    """Where the body subtracts a natural log from a value it keeps in a local and writes out through a helper or a
    register array (Jittor's rendered log-softmax: ``v[i][j] = v[i][j] - T(log(vsum))``, read as ``-=`` once
    compound assignments are normalized, then stored by a vector helper): a statement that subtracts, or ``-=``, a
    term holding a natural log call."""
    from agent_core.templating.experts.evidence import additive_terms, uncast
    if not _LOG_CALL.search(ev.body):
        return False
    logged = {t for t, v in assignments(ev.body) if _LOG_CALL.search(v)}  # a log-sum-exp kept in a local
    flow = flows(ev.body)

    def has_log(term: str) -> bool:
        return bool(_LOG_CALL.search(term) or feeding(flow, term) & logged)
    for target, at, stmt in statements(ev.body):
        if target is None or at < 1:
            continue
        value = stmt[at + 1:]
        if stmt[at - 1] == "-" and has_log(value):
            return True
        if stmt[at - 1] not in "+*/" and any(sign < 0 and has_log(t)
                                             for sign, t in additive_terms(unparen(uncast(value)))):
            return True
    return False


def _log_probs_out(ev: Evidence) -> bool:
    """Where the kernel writes log-probabilities: a store to a float output (or a local pointer made from it) whose
    value subtracts what a natural log computes (``x - max - logf(sum)``, ``x - s_log_sum`` with ``s_log_sum = m +
    __logf(d)``, through the locals it is computed from) or is a natural log (``logf(expf(x - m) / s)``); a stored
    local is read through its one assignment."""
    from agent_core.templating.experts.evidence import additive_terms, uncast
    if not _LOG_CALL.search(ev.body):
        return False
    assigns = assignments(ev.body)
    logged = {t for t, v in assigns if _LOG_CALL.search(v)}
    flow = flows(ev.body)
    values: dict[str, list[str]] = {}
    for t, v in assigns:
        values.setdefault(t, []).append(v)
    outs = [a.name for a in ev.bufs() if a.written and a.dtype in FLOATS]
    aliases = set(outs)
    for t, v in assigns:
        if any((1, n) in additive_terms(unparen(uncast(v))) for n in outs):
            aliases.add(t)
    for raw in re.split(r"[;{}]", ev.body):
        target, at, stmt = statements(_after_header(raw))[0]
        if target not in aliases or at < 1 or "[" not in stmt[:at] or stmt[at - 1] in "+-*/":
            continue  # a store `out[i] = value` (not a pointer's own assignment, not a compound one)
        v = _stored_value(stmt[at + 1:])
        for _ in range(3):  # a stored local: its one value
            if re.fullmatch(r"[A-Za-z_]\w*", v) and len(values.get(v, [])) == 1:
                v = _stored_value(values[v][0])
        if _LOG_CALL.match(v) and closing(v, _LOG_CALL.match(v).end()) == len(v):
            return True  # log(exp(x - m) / s)
        for sign, term in additive_terms(v):
            if sign < 0 and (_LOG_CALL.search(term) or feeding(flow, term) & logged):
                return True
    return False


def _softmax_log_strided(ev: Evidence, lib: dict[str, Expert]) -> list[Binding] | None:
    """Softmax's general form with log-probabilities out (KT_EXPERT_LOG: ``l - (m + logf(s))``, PyTorch's
    LogSoftMax, FasterTransformer / TensorRT-LLM's beam-search log-softmax, the log-probs vLLM and SGLang return:
    ``_log_probs_out``) and/or the logits read at a row stride of their own (KT_EXPERT_X_STRIDE: a vocabulary padded
    past its real columns, TensorRT-LLM's vocab_size_padded: one float input longer than the output by a whole
    factor per row, the stride an int argument that holds its length over the rows). None where the kernel shows
    neither (the other softmax binders read it); else its bindings, and the probability forms are not offered for
    a kernel that writes log-probabilities."""
    e = lib.get("softmax")
    if e is None or not {"KT_EXPERT_GENERAL", "KT_EXPERT_LOG", "KT_EXPERT_X_STRIDE"} <= set(e.conventions) \
            or not ev.has(*EXPS):
        return None
    log = _log_probs_out(ev) or _log_subtracted(ev)
    io = _one_row_io(ev)
    if io is None:
        return [] if log else None
    x, o = io
    strided = x.counts != o.counts
    if strided and not all(a >= b for a, b in zip(x.counts, o.counts)):
        return [] if log else None
    if not log and not strided:
        return None
    T, O = x.dtype, o.dtype
    scales = []  # (C expression, words, divides), as _softmax_general_forms reads them
    for a in ev.floats():
        times = (f"(float)({a.name})", f"logits times `{a.name}`", False)
        divided = (f"(float)({a.name})", f"logits divided by `{a.name}`", True)
        scales += [divided, times] if re.search(rf"/\(*{re.escape(a.name)}\b", ev.flat) else [times]
    scales.append(("1.f", "", False))
    red = ev.reduction_words()
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, o.counts, [])):
        hname = hidden.words.strip("`")
        rows_fp = div(o.counts, hfp)
        st = None
        if strided:
            stride_fp = div(x.counts, rows_fp)
            strides = ev.held(stride_fp)
            if not strides or any(s < h for s, h in zip(stride_fp, hfp)):
                continue
            st = strides[0]
        for si, (scale, scale_words, divides) in enumerate(scales):
            form = "log-softmax" if log else "softmax"
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements{f' {st.words} apart' if st else ''}, {red}, a "
                        f"max and a sum of expf over the row{', the log of the sum subtracted' if log else ''} → "
                        f"{form}", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T}{f', rows {st.words} apart' if st else ''})"]) + \
                [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({o.spec.size}) / ({hidden.spec})", hidden, b)
            if scale_words:
                b.words.append(scale_words)
            if log:
                b.words.append("log-probabilities: l - (max + logf(sum))")
            b.template_args = [CTYPE[T], CTYPE[O]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                           "(const float*)nullptr"]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
            b.conventions = {"KT_EXPERT_GENERAL": 1}
            if divides:
                b.conventions["KT_EXPERT_LOGIT_DIVIDE"] = 1
            if log:
                b.conventions["KT_EXPERT_LOG"] = 1
            if st:
                b.call_args.append(f"(long long)({st.c.replace('(int)', '')})")
                b.conventions["KT_EXPERT_X_STRIDE"] = 1
            b.support = 10 + 2 * ev.uses(hidden) - hi - si + divides
            out.append(b)
    return out


def _one_row_io(ev: Evidence) -> tuple[ArgUse, ArgUse] | None:
    """(x, out): the kernel's one float row input and one output, every buffer of a known length: an output beside
    its input, an output declared inout beside its input (the part of it the kernel does not write keeps what it
    held), or one buffer in place (x is out). None where the buffers are not that."""
    ins, outs, ios = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS), ev.bufs("inout", FLOATS)
    if len(ev.bufs()) != len(ins) + len(outs) + len(ios) or len(outs) + len(ios) != 1 or len(ins) > 1 \
            or (outs and not ins) or any(not a.counts for a in ev.bufs()):
        return None
    o = (outs or ios)[0]
    return (ins[0] if ins else o), o


def _softmax_padded(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """Softmax's general form over the live prefix of padded rows (KT_EXPERT_X_STRIDE 2; ``_padded_rows``): one
    output (or one buffer in place) of the input's length, beside the other readings of the kernel."""
    e = lib.get("softmax")
    if e is None or not {"KT_EXPERT_GENERAL", "KT_EXPERT_X_STRIDE"} <= set(e.conventions) or not ev.has(*EXPS) \
            or _log_probs_out(ev) or _log_subtracted(ev):
        return []
    io = _one_row_io(ev)
    if io is None or io[0].counts != io[1].counts:
        return []
    x, o = io
    padded = _padded_rows(ev, o)
    return _padded_bindings(ev, e, x, o, padded) if padded else []


def _padded_rows(ev: Evidence, o: ArgUse) -> list[tuple[SizeExpr, SizeExpr, tuple]]:
    """Rows at a stride longer than the row, in and out alike (llama2.c's decode attention scores [n_heads,
    max_seq_len], softmaxed over the first ``pos + 1`` of each row, the rest untouched): (the live row length, an int
    argument that bounds a loop of the body and is at most the stride on every size set and less on one; the stride,
    a row length of the whole buffer as ``_hidden_candidates`` reads them; the rows per size set)."""
    out = []
    for stride, sfp in _hidden_candidates(ev, o.counts, []):
        for a in ev.ints():
            if not a.counts or re.search(rf"\b{re.escape(a.name)}\b", stride.c) or any(v <= 0 for v in a.counts):
                continue
            if not _shorter_somewhere(a.counts, sfp):
                continue
            rows_fp = div(o.counts, sfp)
            if a.counts == rows_fp:  # the row count, not a row's live part
                continue
            live = next((h for h in ev.held(a.counts) if h.c == f"(int)({a.name})"), None)
            if live is not None and _bounds_a_loop(ev, live):
                out.append((live, stride, rows_fp))
    return out


def _padded_bindings(ev: Evidence, e, x: ArgUse, o: ArgUse, padded: list) -> list[Binding]:
    """The general form over rows at a stride of their own in and out (KT_EXPERT_X_STRIDE 2), each of
    ``_padded_rows``' readings, the logits as read (a float argument the kernel scales them by: both readings)."""
    T, O = x.dtype, o.dtype
    red = ev.reduction_words()
    scales = [(f"(float)({a.name})", f"logits times `{a.name}`") for a in ev.floats()] + [("1.f", "")]
    out = []
    for pi, (live, stride, rows_fp) in enumerate(padded):
        for si, (scale, scale_words) in enumerate(scales):
            b = Binding(e, 0.85, f"reads the first `{live.words.strip('`')}` elements of rows {stride.words} apart, "
                        f"{red}, a max and a sum of expf over them → softmax, the rest of each row untouched",
                        ev.kernel.name)
            b.sizes["hidden"] = live.spec
            b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T})"]) + \
                [f"hidden={live.words} of rows {stride.words} apart (the rest untouched)"]
            rows = _rows(ev, rows_fp, f"({o.spec.size}) / ({stride.spec})", stride, b)
            if scale_words:
                b.words.append(scale_words)
            b.template_args = [CTYPE[T], CTYPE[O]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, live.c, scale,
                           "(const float*)nullptr", f"(long long){stride.c.replace('(int)', '')}"]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
            b.conventions = {"KT_EXPERT_GENERAL": 1, "KT_EXPERT_X_STRIDE": 2}
            b.support = 12 - pi - si
            out.append(b)
    return out
