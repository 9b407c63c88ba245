"""RMSNorm of rows read at a stride of their own into contiguous rows (``KT_EXPERT_X_STRIDE``), and RMSNorm to an
output of a type of its own (``KT_EXPERT_OUT_TYPE``), and RMSNorm with a residual or a bias added after the
weight (``KT_EXPERT_POST_ADD``)."""

from __future__ import annotations

import itertools
import re
from typing import Callable

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, SizeExpr, additive_terms,
                                                    call_arguments, closing, div, feeding, flows, statements, uncast,
                                                    unparen)
from agent_core.templating.experts.families.rows.common import (ROOTS, _cast, _hidden_candidates, _row_stride,
                                                                _rows, _shorter_somewhere)
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
    return _strided_row_bindings(
        ev, e, o, x, w, T, W,
        lambda hidden, st: (f"reads rows of `{hidden.words.strip('`')}` elements {st.words} apart from `{x.name}`, "
                            f"{ev.reduction_words()}, rsqrtf, one weight, contiguous rows out → RMSNorm of a strided "
                            "input"),
        lambda hidden, st, eps_words: [f"out={o.name}", f"x={x.name} (rows {st.words} apart)", f"weight={w.name}",
                                       f"hidden={hidden.words}", eps_words],
        lambda eps_c, rows, hidden, stride: [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True),
                                             eps_c, rows, hidden.c, stride])


def _padded_rms(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm over the first ``hidden`` elements of rows at a stride longer than the row, in and out alike (Chitu's
    rms_norm over a strided view, written back into the same view; ``KT_EXPERT_X_STRIDE`` 2): a row buffer read and one
    written (or one in place) of one length, a weight of the row's length, the stride an int argument at least the
    row's length on every size set and more on one, the rows the buffers' length over it."""
    e = lib.get("rms_norm")
    if e is None or "2: the input AND output rows" not in e.convention_words.get("KT_EXPERT_X_STRIDE", "") \
            or not ev.has(*ROOTS):
        return []
    ins, outs, ios = ev.bufs("in"), ev.bufs("out"), ev.bufs("inout")
    if len(outs) + len(ios) != 1 or any(a.dtype not in FLOATS or not a.counts for a in ins + outs + ios):
        return []
    o = (outs or ios)[0]
    xs = [a for a in ins if a.counts == o.counts and a.dtype == o.dtype] or ([o] if ios else [])
    ws = [a for a in ins if a.counts != o.counts]
    if len(xs) != 1 or len(ws) != 1 or len(ins) != (1 if xs[0] is o else 2):
        return []
    x, w = xs[0], ws[0]
    T, W = o.dtype, w.dtype
    out = []
    # the row length: an int argument that holds the weight's length (the rows' total need not divide by it)
    for hi, (hidden, hfp) in enumerate([(h, w.counts) for h in ev.held(w.counts)]):
        for a in ev.ints():
            if not a.counts or any(v <= 0 for v in a.counts) or re.search(rf"\b{re.escape(a.name)}\b", hidden.c):
                continue
            if not (_shorter_somewhere(hfp, a.counts) and all(c % s == 0 for c, s in zip(o.counts, a.counts))):
                continue
            rows_fp = tuple(c // s for c, s in zip(o.counts, a.counts))
            st = SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`")
            for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
                for conv, conv_words, conv_support in _norm_conventions(ev, e, T):
                    b = Binding(e, 0.85, f"reads the first `{hidden.words.strip('`')}` elements of rows {st.words} "
                                f"apart, {ev.reduction_words()}, rsqrtf, one weight, written at the same stride → "
                                "RMSNorm of a strided view", ev.kernel.name)
                    b.sizes["hidden"] = hidden.spec
                    b.words = [f"out=x={o.name} (in place)" if x is o else f"out={o.name}", *([] if x is o else
                               [f"x={x.name}"]), f"weight={w.name}",
                               f"hidden={hidden.words} of rows {st.words} apart (the rest untouched)", eps_words]
                    rows = _rows(ev, rows_fp, f"({o.spec.size}) / ({a.spec.value})", hidden, b)
                    b.words += conv_words
                    b.template_args = [CTYPE[T], CTYPE[W]]
                    b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c,
                                   rows, hidden.c, f"(long long)({a.name})"]
                    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                    b.conventions = dict(conv, KT_EXPERT_X_STRIDE=2)
                    b.support = 10 + 2 * ev.uses(hidden) - hi - ei + eps_support + conv_support
                    out.append(b)
    return out


def _strided_row_bindings(ev: Evidence, e: Expert, contiguous: ArgUse, x: ArgUse, w: ArgUse, T: str, W: str,
                          what: Callable, words: Callable, call_args: Callable,
                          rank_hidden: bool = False) -> list[Binding]:
    """The bindings of a norm over rows of ``x`` at a stride of their own (``KT_EXPERT_X_STRIDE``) beside the
    ``contiguous`` rows the row count is read from: one per row length, eps and numeric convention. ``what(hidden,
    st)`` says what the kernel does, ``words(hidden, st, eps_words)`` names the buffers, ``call_args(eps_c, rows,
    hidden, stride)`` is the expert's call; ``rank_hidden``: a later row-length candidate has less support."""
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, contiguous.counts, [w])):
        rows_fp = div(contiguous.counts, hfp)
        st = _row_stride(ev, x.counts, rows_fp, hfp)
        if st is None:
            continue
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for conv, conv_words, conv_support in _norm_conventions(ev, e, T):
                b = Binding(e, 0.85, what(hidden, st), ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words = words(hidden, st, eps_words)
                rows = _rows(ev, rows_fp, f"({contiguous.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += conv_words
                b.template_args = [CTYPE[T], CTYPE[W]]
                b.call_args = call_args(eps_c, rows, hidden, f"(long long)({st.c.replace('(int)', '')})")
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                b.conventions = dict(conv, KT_EXPERT_X_STRIDE=1)
                b.support = (10 + 2 * ev.uses(hidden) - (hi if rank_hidden else 0) - ei + eps_support
                             + conv_support)
                out.append(b)
    return out


def _rms_norm_out_type(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm whose output is of a type of its own (KT_EXPERT_OUT_TYPE): fp32 activations in and 16-bit out, or
    16-bit in and fp32 out (ONNX Runtime's SimplifiedLayerNorm<float, float, half>, Transformer Engine's itype /
    otype, ExLlamaV2's input_fp32 / output_fp32). One row read (x), one row written of another float type (out), one
    weight of the row length, nothing else; no mean taken off the row (a LayerNorm: ``_layer_norm_general`` binds
    that). Where the output is 16-bit, the normalized value rounded to it before the weight multiply or not."""
    from agent_core.templating.experts.families.rows.add_norm import _takes_mean_off
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
    if _takes_mean_off(ev, x, hiddens):
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


def _unheaded(body: str) -> str:
    """The body as its data flow reads: each ``for (...)``, ``if (...)`` and ``while (...)`` header a statement of
    its own (a loop's step and the brace-less statement after it are no one statement: ``for (...; i += 32) y[i] =
    ...``), and member names gone (``threadIdx.y``, ``f.x`` name no buffer ``x`` or ``y``)."""
    out, at = [], 0
    for m in re.finditer(r"\b(?:for|if|while)\s*\(", body):
        if m.start() < at:
            continue
        out.append(body[at:m.start()] + ";")
        at = closing(body, m.end())
    return re.sub(r"(?<=[\w)\]])\s*(?:\.|->)\s*[A-Za-z_]\w*", "", "".join(out) + body[at:])


def _root_feeders(ev: Evidence) -> set[str]:
    """The identifiers the body's root calls are computed from, through the locals their arguments name: the rows
    that feed the sum of squares."""
    body = _unheaded(ev.body)
    flow = flows(body)
    return {n for _, args in call_arguments(body, "|".join(ROOTS)) for a in args for n in feeding(flow, a)}


def _operands(text: str, depth: int = 0) -> list[str]:
    """The operands of the sum an expression is, through conversions (a cast, or a call of one argument:
    ``__float2half(a * b + c)`` → ``['a * b', 'c']``, ``__half2float(y[i])`` → ``['y[i]']``)."""
    terms = additive_terms(unparen(uncast(text)))
    out = []
    for _, t in terms:
        t = unparen(t)
        m = re.fullmatch(r"[A-Za-z_][\w:]*(?:\s*<[^<>]*>)?\s*\((.*)\)", t, re.S)
        if m and depth < 4 and len((call_arguments(t, r"[A-Za-z_][\w:]*") or [("", [])])[0][1]) == 1:
            inner = _operands(m.group(1), depth + 1)
            out += inner if len(terms) == 1 or len(inner) == 1 else [t]
        else:
            out.append(t)
    return out


def _aliases(body: str, name: str) -> set[str]:
    """``name`` and the locals that stand for it: assigned (not an element of, ``y[i] = ...``) a row pointer made
    from it (``yr = y + off``, cast or not) or a value read from it (``float r = __half2float(yr[i])``), not a value
    computed from one (``n = x[i] * r``)."""
    names = {name}
    while True:
        alt = "|".join(sorted(map(re.escape, names)))
        more = set()
        for t, at, stmt in statements(body):
            if not t or at <= 0 or "[" in stmt[:at] or t in names or stmt[at - 1:at] in "+-*/%&|^<>":
                continue
            ops = _operands(stmt[at + 1:])
            if ops and re.fullmatch(rf"(?:{alt})(?:\s*\[[^\]]*\])?", unparen(uncast(ops[0])).strip()) \
                    and (len(ops) == 1 or "[" not in ops[0]):
                more.add(t)
        if not more:
            return names
        names |= more


def _added_after_root(ev: Evidence, name: str) -> bool:
    """Whether the buffer ``name`` (or a local made from it: a row pointer, a value read from it) is an operand of an
    addition after the body's first root call (``... * w[i] + res[i]``, ``y[i] += n``, ``__hadd2(y2, n2)``): an
    operand of the sum itself, not of a product inside it."""
    body = _unheaded(ev.body)
    root = re.search(r"\b(?:" + "|".join(ROOTS) + r")\s*\(", body)
    if root is None:
        return False
    names = _aliases(body, name)
    alt = "|".join(sorted(map(re.escape, names)))
    operand = re.compile(rf"(?:\(\s*[\w\s*]+\))?\s*(?:{alt})\s*(?:\[[^\]]*\])?(?:\.\w+)?")
    tail = body[root.start():]
    for target, at, stmt in statements(tail):
        if at < 0:
            continue
        if stmt[at - 1:at] == "+" and target in names:
            return True  # y[i] += n
        terms = _operands(stmt[at + 1:])
        if len(terms) > 1 and any(operand.fullmatch(t.strip()) for t in terms):
            return True
    return any(operand.fullmatch(unparen(uncast(arg)).strip())
               for _, args in call_arguments(tail, r"__hadd2?|__hadd_rn") for arg in args)


def _rms_norm_post_add(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm with something added after the weight (KT_EXPERT_POST_ADD): a residual row (post-norm: llama.cpp's
    fused rms_norm * mul + add, out written; ExLlamaV2's add_residual, out read and accumulated into) or a bias of the
    row's length (TensorRT-LLM's RMSNorm beta). Read by evidence: the row whose values feed the root is x; the
    addend is a row or a [hidden] input that does not feed it and is an operand of an addition after it; the weight
    the [hidden] input that is not added. No mean taken off the row (a LayerNorm). 16-bit rows: the add in fp32 with
    one rounding, or of the rounded weighted value (a 16-bit add: ``__hadd``), the body's form first."""
    from agent_core.templating.experts.families.rows.add_norm import _takes_mean_off
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_POST_ADD" not in e.conventions or not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if not bufs or any(a.dtype not in FLOATS or not a.counts for a in bufs):
        return []
    big = max(a.counts for a in bufs)
    rows_ = [a for a in bufs if a.counts == big]
    small = [a for a in bufs if a.counts != big]
    if not 1 <= len(small) <= 2 or any(a.role != "in" for a in small) or len({a.counts for a in small}) != 1 \
            or div(big, small[0].counts) is None or len({a.dtype for a in rows_}) != 1:
        return []
    feeders = _root_feeders(ev)
    ins = [a for a in rows_ if a.role == "in"]
    ios = [a for a in rows_ if a.role == "inout"]
    outs = [a for a in rows_ if a.role == "out"]
    xs = [a for a in ins if a.name in feeders]
    if len(xs) != 1:
        return []
    x = xs[0]
    added = [a for a in rows_ + small if a is not x and a.name not in feeders and _added_after_root(ev, a.name)]
    if len(small) == 1 and len(added) == 1 and added[0] in rows_:
        a, w = added[0], small[0]
        if len(ins) == 2 and len(outs) == 1 and not ios and a.role == "in":
            o, mode_words = outs[0], f"`{a.name}` added after the weight"
        elif len(ins) == 1 and len(ios) == 1 and not outs and a is ios[0]:
            o, mode_words = a, f"added into `{a.name}` (out += the normalized row)"
        else:
            return []
        modes = [1] if x.dtype == "f32" else ([2, 1] if re.search(r"__hadd2?\(", ev.body) else [1, 2])
    elif len(small) == 2 and len(added) == 1 and added[0] in small and len(ins) == 1 and len(outs) == 1 and not ios:
        a, w = added[0], next(s for s in small if s is not added[0])
        o, mode_words, modes = outs[0], f"bias `{a.name}` added after the weight", [3]
    else:
        return []
    hiddens = _hidden_candidates(ev, big, [w])
    if _takes_mean_off(ev, x, hiddens):
        return []  # a mean taken off the row: a LayerNorm
    T, W = x.dtype, w.dtype
    out = []
    for hi, (hidden, hfp) in enumerate(hiddens):
        hname = hidden.words.strip("`")
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for (conv, conv_words, conv_support), (mi, mode) in itertools.product(_norm_conventions(ev, e, T),
                                                                                  enumerate(modes)):
                b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, rsqrtf, one weight, "
                            f"{mode_words} → RMSNorm with an add after it", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words = [f"out={o.name}", f"x={x.name}", f"weight={w.name}",
                           f"bias={a.name}" if mode == 3 else f"addend={a.name}" + (" (out itself)" if a is o else ""),
                           f"hidden={hidden.words}", eps_words]
                rows = _rows(ev, div(big, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += conv_words + [{1: "added in fp32, one rounding", 2: f"rounded to {T}, then added in {T}",
                                          3: "added in fp32, one rounding"}[mode]]
                b.template_args = [CTYPE[T], CTYPE[W]]
                b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c, _cast(T, a.name, True)]
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                b.conventions = dict(conv, KT_EXPERT_POST_ADD=mode)
                b.support = 10 + 2 * ev.uses(hidden) - hi - ei + eps_support + conv_support - mi
                out.append(b)
    return out
