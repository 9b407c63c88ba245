"""RMSNorm (and fused add + RMSNorm) with the normalized row quantized: by a static scale read from the device, to
fp8 (or, RMSNorm, to int8) (``_static_fp8``), or by a scale per row it computes and stores, fp8 or int8
(``_dynamic_quant``)."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, HALF_TYPES, NBYTES, ArgUse, Evidence, assignments,
                                                    call_arguments, closing, const_value, div, feeding, flows,
                                                    fp8_formats, instance_types, number, scale_ops, statements, unparen)
from agent_core.templating.experts.families.rows.common import ROOTS, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.norm_conventions import _eps_candidates, _eps_outside
from agent_core.templating.experts.library import Expert


def _quant_roundings(ev: Evidence, T: str, w: ArgUse) -> list[tuple[int, int, str]]:
    """(KT_EXPERT_ROUND_BEFORE_WEIGHT, KT_EXPERT_QUANT_ROUND, words) for a row quantized from a 16-bit type T, the
    body's form first: a cast to a 16-bit type (a template parameter as instantiated too) of something the root's
    result multiplies shows the normalized value rounded before the weight (vLLM: ``(scalar_t)(x * rstd) * w``); the
    weight product is then rounded to T as well where the weight is of type T and not converted to float first (T
    times T is a T), else not. Without such a cast: fp32 throughout first."""
    if T == "f32":
        return [(0, 0, "")]
    half = {n for n, a in instance_types(ev).items() if re.fullmatch(rf"(?:const\s+)?(?:{HALF_TYPES})", a)}
    types = "|".join([HALF_TYPES] + [re.escape(h) for h in sorted(half)])
    casts = rf"static_cast<(?:{types})>\(|\((?:{types})\)\(|(?<![\w:])(?:{types})\(|__float2(?:half|bfloat16)(?:_rn)?\("
    roots = {t for t, _, st in statements(ev.body) if t and re.search(r"\b(?:" + "|".join(ROOTS) + r")\s*\(", st)}
    rounded = False
    for m in re.finditer(casts, ev.flat):
        i = closing(ev.flat, m.end())
        arg = ev.flat[m.end():i - 1]
        if "*" in arg and any(re.search(rf"\b{re.escape(r)}\b", arg) for r in roots):
            rounded = True
    n = re.escape(w.name)  # the weight converted to fp32 before the multiply: the product is fp32
    w_float = re.search(rf"__(?:half|bfloat16)2float\({n}\[|static_cast<float>\({n}\[|\(float\)\(?{n}\[|"
                        rf"float\({n}\[", ev.flat) is not None
    product_rounded = w.dtype == T and not w_float
    before = [(1, int(product_rounded), f"rounded to {T} before the weight multiply"
               + (f", the product rounded to {T}" if product_rounded else ", the product in fp32")),
              (1, int(not product_rounded), f"rounded to {T} before the weight multiply"
               + (f", the product rounded to {T}" if not product_rounded else ", the product in fp32"))]
    fp32 = [(0, 0, "weight multiplied in fp32, not rounded"), (0, 1, f"weight multiplied in fp32, rounded to {T}")]
    return before + fp32 if rounded else fp32 + before


def _static_fp8(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm and fused add + RMSNorm whose normalized row is quantized to fp8 by a static per-tensor scale read
    from the device (vLLM's rms_norm_static_fp8_quant and fused_add_rms_norm_static_fp8_quant; TensorRT-LLM's
    per-tensor scale): one byte output of the rows' size whose element type or conversion shows fp8, one
    one-element fp32 input (the scale), one weight of the row length; the rows read (x) or, fused, x read and the
    residual read and rewritten with the sum (KT_EXPERT_QUANT on the general form). RMSNorm also to int8 by the
    static scale (TensorRT-LLM's SmoothQuant RMSNorm: an int8 output where the body shows 127 or a saturating
    conversion to s8; KT_EXPERT_QUANT_INT8)."""
    if not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if any(not a.counts for a in bufs):
        return []
    outs = [a for a in bufs if a.role == "out" and a.dtype in ("u8", "i8")]
    scales = [a for a in bufs if a.role == "in" and a.dtype == "f32" and all(c == 1 for c in a.counts)]
    if len(outs) != 1 or len(scales) != 1:
        return []
    o, scale = outs[0], scales[0]
    rest = [a for a in bufs if a is not o and a is not scale]
    if any(a.dtype not in FLOATS for a in rest):
        return []
    big = o.counts
    small = [a for a in rest if a.counts != big]
    ins = [a for a in rest if a.counts == big and a.role == "in"]
    ios = [a for a in rest if a.counts == big and a.role == "inout"]
    if len(small) != 1 or small[0].role != "in" or div(big, small[0].counts) is None or len(ins) != 1 \
            or len(ios) > 1 or len(rest) != 2 + len(ios):
        return []
    fused = bool(ios)
    e = lib.get("fused_add_rms_norm" if fused else "rms_norm")
    if e is None or "KT_EXPERT_QUANT" not in e.conventions or (fused and "KT_EXPERT_GENERAL" not in e.conventions):
        return []
    if o.dtype == "i8":  # int8 by the static scale (TensorRT-LLM's SmoothQuant RMSNorm): RMSNorm's own convention
        formats = ["int8_t"] if not fused and "KT_EXPERT_QUANT_INT8" in e.conventions and _int8_shown(ev) else []
    else:
        formats = fp8_formats(ev, o)
    if not formats:
        return []
    x, w = ins[0], small[0]
    r = ios[0] if fused else None
    T, W = x.dtype, w.dtype
    R = r.dtype if r else T
    eps_forms = [(1, "eps inside the root"), (0, "eps outside the root (1 / (sqrt + eps))")]
    if _eps_outside(ev.flat):
        eps_forms.reverse()
    ops = scale_ops(ev, scale.name)
    rounds = _quant_roundings(ev, T, w)
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, small)):
        hname = hidden.words.strip("`")
        for (fi, O), (ei, (eps_c, eps_words, eps_support)), (pi, (inside, inside_words)), (oi, (op, op_words)), \
                (ri, (rbw, qr, round_words)) in itertools.product(enumerate(formats), enumerate(_eps_candidates(ev)),
                                                                 enumerate(eps_forms), enumerate(ops),
                                                                 enumerate(rounds)):
            what = (f"adds `{x.name}` ({T}) into the residual `{r.name}` ({R}), rsqrtf, one weight" if fused else
                    "rsqrtf, one weight")
            int8 = O == "int8_t"
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, {what}, the normalized "
                        f"row quantized by the one-element `{scale.name}` into "
                        f"{'int8' if int8 else 'fp8 bytes'} `{o.name}` → "
                        f"{'fused add + RMSNorm' if fused else 'RMSNorm'} with static {'int8' if int8 else 'fp8'} "
                        "quantization", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = ([f"x={x.name} ({T})", f"residual={r.name} ({R})"] if fused else [f"x={x.name}"]) + \
                [f"out={o.name} (int8)" if int8 else f"out={o.name} ({O.removeprefix('__nv_fp8_')} bytes)",
                 f"weight={w.name}",
                 f"scale={scale.name} (one fp32 value)", f"hidden={hidden.words}", eps_words]
            rows = _rows(ev, div(big, hfp), f"({o.spec.size}) / ({hidden.spec})", hidden, b)
            b.words += [inside_words] + ([round_words] if round_words else []) + [op_words]
            if fused:
                b.template_args = [CTYPE[T], CTYPE[R], CTYPE[W], O]
                b.call_args = [_cast(T, x.name, True), _cast(R, r.name, False), _cast(W, w.name, True),
                               f"({O}*)({o.name})", eps_c, rows, hidden.c, f"(const float*)({scale.name})"]
                b.conventions = {"KT_EXPERT_GENERAL": 1}
            else:
                b.template_args = [CTYPE[T], CTYPE[W], O]
                b.call_args = [f"({O}*)({o.name})", _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c, f"(const float*)({scale.name})"]
            b.conventions.update({"KT_EXPERT_EPS_INSIDE": inside, "KT_EXPERT_ROUND_BEFORE_WEIGHT": rbw,
                                  "KT_EXPERT_QUANT": op, "KT_EXPERT_QUANT_ROUND": qr})
            if int8:
                b.conventions["KT_EXPERT_QUANT_INT8"] = 1
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[R], NBYTES[W])}
            # the body's eps position, then the scale's use, then the rounding points
            b.support = 20 + 2 * ev.uses(hidden) - hi - 4 * fi - ei + eps_support - 8 * pi - 2 * oi - ri
            out.append(b)
    return out


ABS = ("fabsf", "fabs", "abs", "__habs")
QMAX = {"__nv_fp8_e4m3": 448.0, "__nv_fp8_e5m2": 57344.0, "int8_t": 127.0}
# vLLM's min_scaling_factor<T>::val() where the body shows no floor of its own: 1 / (qmax * 512) for fp8, FLT_EPSILON
# for int8
FLOOR_DEFAULT = {"__nv_fp8_e4m3": "1.0f / (448.0f * 512.0f)", "__nv_fp8_e5m2": "1.0f / (57344.0f * 512.0f)",
                 "int8_t": "1.1920928955078125e-07f"}


def _scale_names(ev: Evidence, scales: ArgUse) -> set[str]:
    """The locals that hold the row's scale: what the body stores to the scales output (a local), and the locals
    copied from it (a shared-memory hand-over, a helper's parameter as inlined)."""
    held = {unparen(v.strip()) for t, v in assignments(ev.body) if t == scales.name}
    held = {h for h in held if re.fullmatch(r"[A-Za-z_]\w*", h)}
    while True:
        more = {t for t, v in assignments(ev.body) if unparen(v.strip()) in held and t not in held
                and t != scales.name}
        if not more:
            return held
        held |= more


def _dynamic_ops(ev: Evidence, names: set[str]) -> list[tuple[int, str]]:
    """KT_EXPERT_QUANT for a row scale held in ``names``: times its reciprocal taken once (``1.f / scale``,
    ``__frcp_rn(scale)``), divided by it; the body's form first."""
    recip = divide = False
    for n in names:
        v = re.escape(n) + r"\b"
        recip |= re.search(rf"(?<![\w.])1(?:\.0*)?[fF]?/\(?{v}|__frcp_rn\(\(?{v}", ev.flat) is not None
        divide |= any(not re.search(r"(?<![\w.])1(?:\.0*)?[fF]?$", ev.flat[:m.start()])
                      for m in re.finditer(rf"/\(?{v}", ev.flat))
    ops = [(2, "divided by the row's scale"), (1, "times 1 / the row's scale (taken once)")]
    return ops[::-1] if recip and not divide else ops


def _abs_fed(ev: Evidence, flow: dict[str, set[str]], text: str) -> bool:
    """Whether an expression is computed from an absolute value: through the locals it names (``flows``), or a local
    it names assigned from one (``for (...; i += 32) amax = fmaxf(amax, fabsf(v))``, a loop header's statement that
    ``flows`` reads as the loop variable's)."""
    names = feeding(flow, text)
    if names & set(ABS):
        return True
    calls = "|".join(ABS)
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\s*=(?!=)[^;]*\b(?:{calls})\s*\(", ev.body)
               for n in names if re.fullmatch(r"[A-Za-z_]\w*", n))


def _dynamic_floors(ev: Evidence, O: str) -> list[tuple[int, str, str, int]]:
    """(KT_EXPERT_QUANT_DYNAMIC, C float, words, support) for the least scale: a maximum (fmaxf, fmax, max) of a
    constant in (0, 1) (a literal, a named constant, an expression of them: vLLM's ``1.0f / (448 * 512)``, FLT_EPSILON)
    and a value of the absolute maximum; divided by qmax there (the floor on the scale, 1) or not (the floor on the
    absmax, 2). Where the body shows none, vLLM's own floor for O, then none."""
    flow = flows(ev.body)
    qmax = QMAX[O]
    out: list[tuple[int, str, str, int]] = []
    for _, args in call_arguments(ev.body, r"(?:std::)?(?:fmaxf|fmax|max)"):
        if len(args) != 2:
            continue
        for k, other in (args, args[::-1]):
            c = const_value(k, ev)
            if c is None or not 0 < c[1] < 1 or not _abs_fed(ev, flow, other):
                continue
            flat = re.sub(r"\s+", "", other)
            by_qmax = any(number(d, ev.constants) == qmax
                          for d in re.findall(rf"/\(?((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|[A-Za-z_]\w*)", flat))
            mode = 1 if by_qmax else 2
            f = (mode, f"(float)({unparen(c[0])})", f"floor=`{k.strip()}` ({c[1]:.9g}) on the "
                 + ("scale" if mode == 1 else "absmax"), 2)
            if f[:2] not in [x[:2] for x in out]:
                out.append(f)
    if not out:
        out = [(1, f"(float)({FLOOR_DEFAULT[O]})", "floor=vLLM's min scaling factor (assumed)", 0),
               (1, "0.f", "no floor", 0)]
    return out


def _dynamic_roundings(ev: Evidence, T: str, w: ArgUse) -> list[tuple[int, int, str]]:
    """``_quant_roundings``, with the root's result also read through the locals copied from it (a shared-memory
    hand-over from thread 0: ``s_rms = rsqrtf(...); const float rms = s_rms;``): a cast to T of a product with
    such a local shows the normalized value rounded before the weight, those forms first."""
    rounds = _quant_roundings(ev, T, w)
    if T == "f32" or rounds[0][0] == 1:
        return rounds
    half = {n for n, a in instance_types(ev).items() if re.fullmatch(rf"(?:const\s+)?(?:{HALF_TYPES})", a)}
    types = "|".join([HALF_TYPES] + [re.escape(h) for h in sorted(half)])
    casts = rf"static_cast<(?:{types})>\(|\((?:{types})\)\(|(?<![\w:])(?:{types})\(|__float2(?:half|bfloat16)(?:_rn)?\("
    flow = flows(ev.body)
    roots = {t for t, _, st in statements(ev.body) if t and re.search(r"\b(?:" + "|".join(ROOTS) + r")\s*\(", st)}
    held = roots | {n for n, fed in flow.items() if fed & roots}
    for m in re.finditer(casts, ev.flat):
        arg = ev.flat[m.end():closing(ev.flat, m.end()) - 1]
        if "*" in arg and any(re.search(rf"\b{re.escape(r)}\b", arg) for r in held):
            return [r for r in rounds if r[0] == 1] + [r for r in rounds if r[0] != 1]
    return rounds


def _int8_shown(ev: Evidence) -> bool:
    """An int8 output quantized to +-127: the body shows 127 (a literal or a named constant) or a saturating
    conversion to s8."""
    if re.search(r"(?<![\w.])127(?:\.0*)?[fF]?(?![\w.])", ev.body) or "s8.f32" in ev.body:
        return True
    return any(v == 127.0 and re.search(rf"\b{re.escape(n)}\b", ev.body) for n, v in ev.constants.items())


def _dynamic_quant(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm whose normalized row is quantized by a scale of its own (vLLM's rms_norm_dynamic_per_token_quant, fp8
    or int8; TensorRT-LLM's and SGLang's fused RMSNorm + per-token quant): one byte output of the rows' size whose
    element type or conversion shows fp8 (or an int8 output and 127), one fp32 output of one value per row (the
    scales), the rows read (x), one weight of the row length, optionally one one-element fp32 input (the upper bound
    on the absmax); the body takes a root, an absolute value and a maximum (KT_EXPERT_QUANT_DYNAMIC)."""
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_QUANT_DYNAMIC" not in e.conventions or not ev.has(*ROOTS) or not ev.has(*ABS) \
            or not ev.has("fmaxf", "fmax", "max"):
        return []
    bufs = ev.bufs()
    if any(not a.counts for a in bufs):
        return []
    qs = [a for a in bufs if a.role == "out" and a.dtype in ("u8", "i8")]
    scs = [a for a in bufs if a.role == "out" and a.dtype == "f32"]
    ubs = [a for a in bufs if a.role == "in" and a.dtype == "f32" and all(c == 1 for c in a.counts)]
    if len(qs) != 1 or len(scs) != 1 or len(ubs) > 1:
        return []
    o, sc = qs[0], scs[0]
    ub = ubs[0] if ubs else None
    rest = [a for a in bufs if a not in (o, sc, ub)]
    big = o.counts
    ins = [a for a in rest if a.role == "in" and a.counts == big and a.dtype in FLOATS]
    small = [a for a in rest if a.role == "in" and a.counts != big and a.dtype in FLOATS]
    if len(ins) != 1 or len(small) != 1 or len(rest) != 2 or div(big, small[0].counts) != sc.counts:
        return []
    formats = fp8_formats(ev, o) if o.dtype == "u8" else ["int8_t"] if _int8_shown(ev) else []
    names = _scale_names(ev, sc)
    if not formats or not names:
        return []
    x, w = ins[0], small[0]
    T, W = x.dtype, w.dtype
    eps_forms = [(1, "eps inside the root"), (0, "eps outside the root (1 / (sqrt + eps))")]
    if _eps_outside(ev.flat):
        eps_forms.reverse()
    ops = _dynamic_ops(ev, names)
    rounds = _dynamic_roundings(ev, T, w)
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, small)):
        if div(big, hfp) != sc.counts:
            continue
        hname = hidden.words.strip("`")
        for (fi, O), (ei, (eps_c, eps_words, eps_support)), (pi, (inside, inside_words)), (oi, (op, op_words)), \
                (ri, (rbw, qr, round_words)) in itertools.product(enumerate(formats), enumerate(_eps_candidates(ev)),
                                                                 enumerate(eps_forms), enumerate(ops),
                                                                 enumerate(rounds)):
            kind = "int8" if O == "int8_t" else f"fp8 {O.removeprefix('__nv_fp8_')}"
            for li, (mode, floor_c, floor_words, floor_support) in enumerate(_dynamic_floors(ev, O)):
                b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, rsqrtf, one weight, "
                            f"the absolute maximum of the normalized row, one fp32 scale per row into `{sc.name}`, "
                            f"{kind} bytes `{o.name}` → RMSNorm with dynamic per-token quantization", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words = [f"x={x.name}", f"out={o.name} ({kind})", f"scales={sc.name} (one per row)",
                           f"weight={w.name}",
                           f"upper bound={ub.name} (nullable)" if ub else "no upper bound", f"hidden={hidden.words}",
                           eps_words]
                rows = _rows(ev, div(big, hfp), f"({o.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += [inside_words] + ([round_words] if round_words else []) + [op_words, floor_words]
                b.template_args = [CTYPE[T], CTYPE[W], O]
                b.call_args = [f"({O}*)({o.name})", f"(float*)({sc.name})", _cast(T, x.name, True),
                               _cast(W, w.name, True), eps_c, rows, hidden.c,
                               f"(const float*)({ub.name})" if ub else "nullptr", floor_c]
                b.conventions = {"KT_EXPERT_EPS_INSIDE": inside, "KT_EXPERT_ROUND_BEFORE_WEIGHT": rbw,
                                 "KT_EXPERT_QUANT": op, "KT_EXPERT_QUANT_ROUND": qr, "KT_EXPERT_QUANT_DYNAMIC": mode}
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                # the body's eps position, then the scale's use, the rounding points, the floor
                b.support = (20 + 2 * ev.uses(hidden) - hi - 4 * fi - ei + eps_support - 8 * pi - 2 * oi - ri
                             - li + floor_support)
                out.append(b)
    return out
