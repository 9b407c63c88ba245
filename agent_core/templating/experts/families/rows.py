"""The row families: RMSNorm, fused add + RMSNorm, LayerNorm, softmax (one row of ``hidden`` elements at a time).

Evidence: float buffers, the largest ones (the rows) of one dtype, the smaller inputs (weights) one row long;
the row length from an int argument (or two, or a constant) that divides the rows; the row count from an
argument that holds it, else the grid (one row per block). Enumerated: which argument is the row length,
which float argument or literal is eps, the order of two weights (gamma, beta) or two in/out rows (x,
residual), in place or out of place; conventions: eps inside or outside the root, the normalized value
rounded to the storage type before the weight multiply or not. The user's kernel may walk the rows one per
block, several per block or grid-stride: the expert brings its own launch, only the row count matters.
RMSNorm and fused add + RMSNorm also with the normalized row quantized to fp8 by a static scale read from the
device (a byte output of the rows' size whose type or conversion shows fp8, a one-element fp32 input); RMSNorm also
with a dynamic scale per row (an fp32 output of one value per row beside the fp8 or int8 output, the floor and the
nullable upper bound of the scale read from the body: ``_dynamic_quant``).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, HALF_TYPES, INTS, NBYTES, ArgUse, Evidence,
                                                    SizeExpr, assignments, call_arguments, closing, const_value, div,
                                                    feeding, flows, fp8_formats, instance_types, number, scale_ops,
                                                    statements, unparen)
from agent_core.templating.experts.library import Expert

ROOTS = ("rsqrtf", "sqrtf", "rsqrt", "sqrt", "__frsqrt_rn", "__fsqrt_rn", "hrsqrt", "h2rsqrt", "hsqrt", "powf", "pow")
EXPS = ("expf", "__expf", "exp", "exp2f", "exp2", "hexp", "h2exp", "__exp2f")
_TO_T = r"__float2half(_rn)?\(|__float2bfloat16(_rn)?\(|__floats2half2_rn\(|static_cast<(__half|__nv_bfloat16|half|T)>"


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


# a float literal one added to something (Gemma's `1.0f + w`); an integer 1 is index arithmetic
_ONE_ADDED = re.compile(r"(?<![\w.])(?:1\.0*|1\.?0*[fF])\+|\+(?:1\.0*|1\.?0*[fF])(?![\w.])")


def _root_statements(ev: Evidence) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The body's statements (whitespace removed) that take a root (``rsqrtf(ms + eps)``, ``1 / (sqrtf(ms) +
    eps)``) or assign a local the root's argument names (``var = ms + eps; inv = rsqrtf(var)``), and the others.
    One step, not the whole data flow: a row read and rewritten in place feeds the root and is written from the
    weight too."""
    return _split_root_statements(ev.body)


@functools.lru_cache(maxsize=64)
def _split_root_statements(body: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``_root_statements`` of one body, split once: every eps and weight-offset enumeration of a kernel reads it."""
    named = {n for _, args in call_arguments(body, "|".join(ROOTS)) for a in args for n in re.findall(r"\w+", a)}
    root, rest = [], []
    for target, _, stmt in statements(body):
        flat = re.sub(r"\s+", "", stmt)
        if re.search(r"\b(?:" + "|".join(ROOTS) + r")\(", flat) or target in named:
            root.append(flat)
        else:
            rest.append(flat)
    return tuple(root), tuple(rest)


def _only_multiplies(flat: str, lit: str) -> bool:
    """Every use of the literal ``lit`` in the body (whitespace removed) is an operand of ``*``."""
    uses = [m for m in re.finditer(rf"(?<![\w.]){re.escape(lit)}(?![\w.])", flat)]
    return bool(uses) and all(flat[max(m.start() - 1, 0)] == "*" or flat[m.end():m.end() + 1] == "*" for m in uses)


def _eps_candidates(ev: Evidence) -> list[tuple[str, str, int]]:
    """(C expression, words, support) for eps: float arguments (those the root's statements use first), then small
    float literals of the body; the usual defaults only when the kernel shows neither."""
    root = "".join(_root_statements(ev)[0])
    out = [(f"(float)({a.name})", f"eps=`{a.name}`", (2 if re.search("eps", a.name, re.I) else 1)
            + (2 if re.search(rf"\b{re.escape(a.name)}\b", root) else 0)) for a in ev.floats()]
    lit = [(f"(float)({x if x[-1] in 'fF' else x + 'f'})", f"eps={x}", 1) for x in ev.literals]
    # a literal that only ever multiplies (TVM's `sum * 2.441406e-04f`, the mean as a product by 1 / hidden) is a
    # factor, not eps: after the literals something is added to (both verify at the tolerances: eps is too small
    # to show, so the order decides)
    lit.sort(key=lambda c: _only_multiplies(ev.flat, c[1][4:]))
    return out + lit if out or lit else [("1e-5f", "eps=1e-5 (assumed)", 0), ("1e-6f", "eps=1e-6 (assumed)", 0)]


def _weight_offsets(ev: Evidence, e: Expert | None) -> list[tuple[str | None, str, int]]:
    """(C expression or None, words, support) for what the weight is offset by before the multiply: nothing, then
    where the body shows it, a float argument added to something outside the root's statements (FlashInfer's
    ``weight_bias + w``) and a float literal one added to something there (Gemma's weight stored as its offset
    from 1: ``1.0f + w``), those first. Only for an expert with the KT_EXPERT_WEIGHT_OFFSET convention."""
    out: list[tuple[str | None, str, int]] = [(None, "", 0)]
    if e is None or "KT_EXPERT_WEIGHT_OFFSET" not in e.conventions:
        return out
    rest = "\n".join(_root_statements(ev)[1])
    for a in ev.floats():
        n = re.escape(a.name)
        if re.search(rf"\+{n}\b|\b{n}\+", rest):
            out.append((f"(float)({a.name})", f"weight plus `{a.name}`", 3))
    if _ONE_ADDED.search(rest):
        out.append(("1.f", "weight plus 1 (stored as its offset from 1)", 3))
    return out


def _hidden_candidates(ev: Evidence, big: tuple, small: list[ArgUse]) -> list[tuple[SizeExpr, tuple]]:
    """(the row length as the wrapper computes it, its value per size set): a weight's length where there is a
    weight (an int argument that holds it, or the constant it is on every size set), else every int argument (or
    product of two) that divides the rows and is not all of them."""
    if small:
        targets = [small[0].counts]
    else:
        targets = []
        for a in ev.ints():
            if a.counts and div(big, a.counts) and a.counts != big and all(v > 1 for v in a.counts):
                targets.append(a.counts)
        for a, b in itertools.combinations(ev.ints(), 2):
            if a.counts and b.counts:
                t = tuple(x * y for x, y in zip(a.counts, b.counts))
                if div(big, t) and t != big and all(v > 1 for v in t):
                    targets.append(t)
    out, seen = [], set()
    for t in targets:
        if t in seen:
            continue
        seen.add(t)
        if div(big, t) is None or t == big:
            continue
        xs = ev.sizes(t)
        # a constant only as a weight's length (a row length fixed at compile time, a template argument such as
        # a head size); without a weight a constant that divides the rows is no evidence of a row
        if xs and (not xs[0].c[0].isdigit() or small):
            out.append((xs[0], t))
    return out


def _rows(ev: Evidence, rows_fp: tuple, rows_spec: str, hidden: SizeExpr, b: Binding, factor: str = "") -> str:
    """The row count inside the wrapper: an int argument that holds it, else (``factor``: an argument the rows are
    a multiple of, a causal mask's query count) the product of it and another argument, else gridDim.x (one row per
    block: ROWS fixed to 1)."""
    b.sizes["rows"] = rows_spec
    xs = [x for x in ev.sizes(rows_fp) if x.c.startswith("(int)(") and "*" not in x.c and "/" not in x.c]
    if not xs and factor:
        xs = [x for x in ev.sizes(rows_fp) if " * " in x.c and f"(int)({factor})" in x.c.split(" * ")]
    if xs:
        b.words.append(f"rows={xs[0].words}")
        return xs[0].c
    b.fixed["ROWS"] = [1]
    b.words.append("rows=the grid (no row-count argument)")
    return "(int)gridDim.x"


def _round_evidence(ev: Evidence) -> int:
    return len(re.findall(_TO_T, ev.body))


def enumerate_bindings(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    return (_row_bindings(ev, lib) + _softmax_general(ev, lib) + _fused_add_general(ev, lib) + _strided_rms(ev, lib)
            + _layer_norm_general(ev, lib) + _static_fp8(ev, lib)
            + _add_norm_general(ev, lib) + _dynamic_quant(ev, lib) + _softmax_alibi(ev, lib) + _rms_norm_stats(ev, lib))


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
    residual read and rewritten with the sum (KT_EXPERT_QUANT on the general form)."""
    if not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if any(not a.counts for a in bufs):
        return []
    outs = [a for a in bufs if a.role == "out" and a.dtype == "u8"]
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
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, {what}, the normalized "
                        f"row quantized by the one-element `{scale.name}` into fp8 bytes `{o.name}` → "
                        f"{'fused add + RMSNorm' if fused else 'RMSNorm'} with static fp8 quantization", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = ([f"x={x.name} ({T})", f"residual={r.name} ({R})"] if fused else [f"x={x.name}"]) + \
                [f"out={o.name} ({O.removeprefix('__nv_fp8_')} bytes)", f"weight={w.name}",
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
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[R], NBYTES[W])}
            # the body's eps position, then the scale's use, then the rounding points
            b.support = 20 + 2 * ev.uses(hidden) - hi - 4 * fi - ei + eps_support - 8 * pi - 2 * oi - ri
            out.append(b)
    return out


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
    if len(ws) == 1 and not re.search(r"-\(?\w*(mean|mu)\b", ev.flat, re.I):
        return []  # one weight and no mean subtracted (x - mean): an RMSNorm (the row families bind it)
    T, O, W = x.dtype, o.dtype, ws[0].dtype
    orders = [ws] if len(ws) == 1 else [ws, ws[::-1]]
    if len(ws) == 2 and re.search(r"beta|bias|shift", ws[0].name, re.I) and not re.search(r"beta|bias|shift",
                                                                                           ws[1].name, re.I):
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


def _fused_add_words(x, T: str, r, R: str, r_in, o, O: str, w, hidden, eps_words: str) -> list[str]:
    """The words of a fused add + RMSNorm binding's buffers (x, the residual and where the sum goes, the output, the
    weight), its row length and eps: the general form's and the add-then-normalize form's alike."""
    return [f"x={x.name} ({T})", f"residual={r.name} ({R})" if r_in is None else
            f"residual={r_in.name} ({R}), the sum into `{r.name}`",
            f"out={o.name} ({O})" if o is not x else f"out={o.name} (in place)", f"weight={w.name}",
            f"hidden={hidden.words}", eps_words]


def _fused_add_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """Fused add + RMSNorm in its general form: the residual of a type of its own (an fp32 residual stream beside
    16-bit activations) and/or the normalized row written to a buffer of its own. Rows: x read (in, or in/out when
    normalized in place), the residual read and written, out written; one weight. The residual is the in/out row
    (of two in/out rows: either, the one named so or written first before the other). The one-type in-place form is
    bound with the other row families."""
    e = lib.get("fused_add_rms_norm")
    if e is None or "KT_EXPERT_GENERAL" not in e.conventions or not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if any(a.dtype not in FLOATS or not a.counts for a in bufs):
        return []
    big = max(a.counts for a in bufs)
    rows_ = [a for a in bufs if a.counts == big]
    small = [a for a in bufs if a.counts != big]
    if len(small) != 1 or small[0].role != "in" or div(big, small[0].counts) is None:
        return []
    ins = [a for a in rows_ if a.role == "in"]
    ios = [a for a in rows_ if a.role == "inout"]
    outs = [a for a in rows_ if a.role == "out"]
    if len(ins) == 1 and len(ios) == 1 and len(outs) == 1:
        forms = [(ins[0], ios[0], outs[0], None)]  # x, residual, out
    elif len(ios) == 2 and not ins and not outs and ios[0].dtype != ios[1].dtype:
        forms = [(x, r, x, None) for x, r in _fused_orders(ev, ios)]  # in place, two types
    elif len(ins) == 2 and len(outs) == 2 and not ios and "KT_EXPERT_RESIDUAL_IN" in e.conventions:
        # out of place (TensorRT-LLM's residual out): x and the residual read, their sum written to a buffer of its
        # own and the normalized row to another; the sum's buffer is the one written first (or named so)
        forms = [(x, r, o, r_in) for o, r in _fused_orders(ev, outs) for x, r_in in _fused_orders(ev, ins)
                 if r_in.dtype == r.dtype]
        if ins[0].dtype == ins[1].dtype:
            forms = forms[::2]  # x + residual is one sum either way
    else:
        return []
    w = small[0]
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, small)):
        hname = hidden.words.strip("`")
        for fi, (x, r, o, r_in) in enumerate(forms):
            T, R, W, O = x.dtype, r.dtype, w.dtype, o.dtype
            for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
                for (conv, conv_words, conv_support), (off_c, off_words, off_support) in itertools.product(
                        _norm_conventions(ev, e, O), _weight_offsets(ev, e) if r_in is None else [(None, "", 0)]):
                    if off_c == eps_c:
                        continue  # one argument is not both
                    b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, adds `{x.name}` "
                                f"({T}) into the residual `{r.name}` ({R}), rsqrtf, one weight, the normalized row "
                                f"{'in place' if o is x else 'into `' + o.name + '`'} ({O}) → fused add + RMSNorm",
                                ev.kernel.name)
                    b.sizes["hidden"] = hidden.spec
                    b.words = _fused_add_words(x, T, r, R, r_in, o, O, w, hidden, eps_words)
                    rows = _rows(ev, div(big, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
                    b.words += conv_words + ([off_words] if off_c else [])
                    b.template_args = [CTYPE[T], CTYPE[R], CTYPE[W], CTYPE[O]]
                    b.call_args = [_cast(T, x.name, True), _cast(R, r.name, False), _cast(W, w.name, True),
                                   _cast(O, o.name, False), eps_c, rows, hidden.c] + ([off_c] if off_c else []) + \
                        ([_cast(R, r_in.name, True)] if r_in is not None else [])
                    # the 16-bit rows move 16 bytes a step; a wider residual takes two
                    b.consts = {"ESIZE": min(NBYTES[T], NBYTES[O])}
                    b.conventions = dict(conv, KT_EXPERT_GENERAL=1)
                    if r_in is not None:
                        b.conventions["KT_EXPERT_RESIDUAL_IN"] = 1
                    if off_c:
                        b.conventions["KT_EXPERT_WEIGHT_OFFSET"] = 1
                    b.support = 10 + 2 * ev.uses(hidden) - hi - fi - ei + eps_support + conv_support + off_support
                    out.append(b)
    return out


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
    # a sink logit per head (an input the body reads as one value that joins the max and the sum): bound once as
    # what it is, after the readings of every input as before (a mask, a per-row divisor)
    sinks = [(a, h) for a in every_other if "KT_EXPERT_SINK" in e.conventions and a not in keeps
             for h in _sink_heads(ev, a)[:1]]
    out = []
    for sink, heads in [(None, None)] + sinks:
        others = [a for a in every_other if a is not sink]
        out += _softmax_general_forms(ev, e, x, o, others, keeps, sink, heads)
    return out


def _softmax_general_forms(ev: Evidence, e: Expert, x: ArgUse, o: ArgUse, others: list[ArgUse], keeps: list[ArgUse],
                           sink: ArgUse | None, heads: SizeExpr | None) -> list[Binding]:
    """The general form's bindings with ``others`` (the inputs besides the logits) read as a per-row divisor and/or
    a mask, and ``sink`` (None: none) as a sink logit per head, ``heads`` the argument its count is."""
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
            if len(masks) > 1 or (masks and not has_mask):
                continue
            mask = masks[0] if masks else None
            mask_rows = div(mask.counts, hfp) if mask else None
            if mask and (mask_rows is None or div(rows_fp, mask_rows) is None or mask_rows == rows_fp):
                continue
            mrs = [m for m in ev.sizes(mask_rows) if not m.c[0].isdigit()] or ev.sizes(mask_rows) if mask else [None]
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
                        b.call_args += [_cast(mask.dtype, mask.name, True), mr.c, mr.c if inner is None else inner]
                        b.consts["ESIZE"] = max(b.consts["ESIZE"], NBYTES[mask.dtype])
                        b.conventions["KT_EXPERT_MASK"] = 4 if mask in keeps else 1
                    if causal:
                        conv, q_len, q_words = causal
                        b.words.append(q_words)
                        b.call_args.append(f"(int)({q_len})")
                        b.conventions["KT_EXPERT_MASK"] = conv
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
    return out


# ------------------------------------------------------------------------- log-softmax, input rows at a stride
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
    ins, outs, ios = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS), ev.bufs("inout", FLOATS)
    log = _log_probs_out(ev)
    if len(ev.bufs()) != len(ins) + len(outs) + len(ios) or len(outs) + len(ios) != 1 \
            or len(ins) != (0 if ios else 1) or any(not a.counts for a in ev.bufs()):
        return [] if log else None
    o = (outs or ios)[0]
    x = o if ios else ins[0]
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
            strides = [s for s in ev.sizes(stride_fp) if s.c.startswith("(int)(") and "*" not in s.c
                       and "/" not in s.c] if stride_fp else []
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


@dataclass
class KeyBounds:
    """A key range per batch read from int32 buffers (ONNX Runtime's 1-D mask index): ``end`` the buffer whose value
    bounds the keys from above (``k < end``), ``start`` (or None) the one that bounds them from below (``k >=
    start``); ``locals_`` the body's names computed from ``end`` (the range's end as the kernel refines it)."""
    end: ArgUse
    start: ArgUse | None
    locals_: set[str]


_OPERAND = r"[A-Za-z_][\w.]*(?:\[[^\]]*\])?"


def _key_bounds(ev: Evidence) -> KeyBounds | None:
    """Where the kernel's int32 inputs (one or two, read, of one length: a value per batch) bound the keys of a row:
    compared with a loop's variable (the key index) as an exclusive upper bound (``k < end``, ``end > k``) or an
    inclusive lower one (``k >= start``, ``start <= k``), directly or through the locals computed from them (``end =
    min(keys, mask_end[b])`` kept in shared memory and read back). Each buffer must bound from one side only; one
    must bound from above. None where that is not what the body shows."""
    ibufs = [a for a in ev.bufs("in", INTS) if a.read]
    if not ibufs or len(ibufs) > 2 or any(a.dtype != "i32" or not a.counts or a.counts != ibufs[0].counts
                                          for a in ibufs):
        return None
    flow = flows(ev.body)
    names = {a.name for a in ibufs}
    upper, lower = set(), set()
    for v in set(re.findall(r"\bfor\s*\(\s*[^;]*?\b([A-Za-z_]\w*)\s*=(?!=)", ev.body)):
        var = re.escape(v)
        for pattern, side in ((rf"(?<![\w.]){var}<(?![<=])({_OPERAND})", upper),
                              (rf"({_OPERAND})>(?![>=]){var}(?![\w.\[])", upper),
                              (rf"(?<![\w.]){var}>=({_OPERAND})", lower),
                              (rf"({_OPERAND})<={var}(?![\w.\[])", lower)):
            for m in re.finditer(pattern, ev.flat):
                side |= feeding(flow, m.group(1)) & names
    ends = [a for a in ibufs if a.name in upper and a.name not in lower]
    starts = [a for a in ibufs if a.name in lower and a.name not in upper]
    if len(ends) != 1 or len(ends) + len(starts) != len(ibufs):
        return None
    end = ends[0]
    return KeyBounds(end, starts[0] if starts else None, {n for n, deps in flow.items() if end.name in deps})


def _key_fallback(ev: Evidence, keys: KeyBounds, hidden: SizeExpr) -> bool:
    """Whether an empty key range is widened to every key (ONNX Runtime: attend to none = attend to all): the range's
    end, once read from its buffer, assigned the row length itself afterwards."""
    h = re.fullmatch(r"\(int\)\((\w+)\)", hidden.c)
    if h is None:
        return False
    read = False
    for target, value in assignments(ev.body):
        if target not in keys.locals_:
            continue
        if re.search(rf"\b{re.escape(keys.end.name)}\b", value):
            read = True
        elif read and unparen(re.sub(r"\s+", "", value)) == h.group(1):
            return True
    return False


def _key_causal(ev: Evidence, keys: KeyBounds, hidden: SizeExpr, rows_fp: tuple,
                hfp: tuple) -> list[tuple[str, str]]:
    """The causal limits the kernel puts on its key range, bottom-right aligned (ONNX Runtime's unidirectional
    attention: ``end = min(end, keys - q_len + query + 1)``), as (q_len as the wrapper computes it, words): a statement
    that refines the range's end (names it, reads no key buffer) from the row length and an int argument q_len that
    divides the rows, at most the keys. Where a lone scalar argument's truth guards that statement (``if
    (is_unidirectional)``), q_len is passed only when it is true (0: no limit)."""
    h = re.fullmatch(r"\(int\)\((\w+)\)", hidden.c)
    if h is None:
        return []
    flow = flows(ev.body)
    bufs = {a.name for a in (keys.end, keys.start) if a is not None}
    out: list[tuple[str, str]] = []
    for target, at, stmt in statements(ev.body):
        if target not in keys.locals_ or at < 0:
            continue
        ids = set(re.findall(r"\b[A-Za-z_]\w*\b", stmt[at + 1:]))
        if ids & bufs or not ids & keys.locals_:
            continue
        named = ids | {d for n in ids - keys.locals_ for d in flow.get(n, ())}
        if h.group(1) not in named:
            continue
        for a in ev.ints():
            if a.name == h.group(1) or a.name not in named or not a.counts or a.counts == rows_fp \
                    or div(rows_fp, a.counts) is None or not all(1 <= q <= k for q, k in zip(a.counts, hfp)):
                continue
            flag = _guarding_flag(ev, stmt)
            words = (f"causal limit, bottom-right aligned: query row % `{a.name}` sees the keys below keys - q_len + "
                     "query + 1")
            if flag:
                out.append((f"(({flag}) ? (int)({a.name}) : 0)", f"{words}, where `{flag}`"))
            else:
                out.append((f"(int)({a.name})", words))
    return list(dict.fromkeys(out))


def _guarding_flag(ev: Evidence, stmt: str) -> str | None:
    """The scalar argument whose truth alone is the condition of an ``if`` around the statement ``stmt`` (text of
    the body), or None."""
    at = ev.body.find(stmt)
    scalars = {a.name for a in ev.args if a.role == "scalar"}
    for m in re.finditer(r"\bif\s*\(", ev.body[:max(at, 0)]):
        i = closing(ev.body, m.end())
        cond = re.fullmatch(r"\s*\(?\s*(\w+)\s*\)?\s*(?:!=\s*(?:0|false)|==\s*(?:1|true))?\s*", ev.body[m.end():i - 1])
        if cond is None or cond.group(1) not in scalars:
            continue
        rest = ev.body[i:]
        lead = len(rest) - len(rest.lstrip())
        if rest[lead:lead + 1] == "{":
            depth, j = 1, i + lead + 1
            while j < len(ev.body) and depth:
                depth += {"{": 1, "}": -1}.get(ev.body[j], 0)
                j += 1
        else:
            j = ev.body.find(";", i) + 1
        if i <= at < j:
            return cond.group(1)
    return None


def _softmax_key_forms(ev: Evidence, e: Expert, x: ArgUse, o: ArgUse, others: list[ArgUse],
                       keys: KeyBounds) -> list[Binding]:
    """The general form over a key range per batch (``KT_EXPERT_KEYS``; ONNX Runtime's 1-D mask index): rows
    [batches, rows / batches], batches the key buffers' length, on the expert's grid [rows of a batch, batches]; an
    empty range widened to every key where the body shows it (``_key_fallback``), else written 0; the causal limits
    the body puts on the range (``_key_causal``) first, then none; at most one additive mask (a relative-position
    bias) of whole rows, shared by the batches (the rows of one batch, counted from the grid) or read as the other
    masks are; a scale as in the general form."""
    big = o.counts
    T, O = x.dtype, o.dtype
    if len(others) > 1 or any(a.dtype not in FLOATS for a in others):
        return []
    mask = others[0] if others else None
    scales = []
    for a in ev.floats():
        times = (f"(float)({a.name})", f"logits times `{a.name}`", False)
        divided = (f"(float)({a.name})", f"logits divided by `{a.name}`", True)
        scales += [divided, times] if re.search(rf"/\(*{re.escape(a.name)}\b", ev.flat) else [times]
    scales.append(("1.f", "", False))
    red = ev.reduction_words()
    end, start = keys.end, keys.start
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, [])):
        hname = hidden.words.strip("`")
        rows_fp = div(big, hfp)
        per = div(rows_fp, end.counts)  # the rows of one batch
        if per is None:
            continue
        # (mask rows as the wrapper computes it, {rows} the row count; inner extent; words): the rows of one batch
        # (a bias shared by the batches) from the grid, else the mask's rows from the arguments, read as in the
        # general form
        forms: list[tuple[str | None, str | None, str]] = [(None, None, "")]
        if mask is not None:
            mask_rows = div(mask.counts, hfp)
            if mask_rows is None or mask_rows == rows_fp or div(rows_fp, mask_rows) is None:
                continue
            forms = [("({rows}) / (int)gridDim.y", None, "[the rows of a batch], shared by the batches")] \
                if mask_rows == per else []
            forms += [(mr.c, inner, f"[{mr.words} rows], {words}") for mr in
                      [m for m in ev.sizes(mask_rows) if not m.c[0].isdigit()][:2]
                      for inner, words in _mask_inners(ev, mask_rows)]
        fallback = _key_fallback(ev, keys, hidden)
        causal = [(c, w, 3) for c, w in _key_causal(ev, keys, hidden, rows_fp, hfp)] + [("0", "", 0)]
        for (ci, (q_len, causal_words, causal_support)), (mi, (mr, inner, mask_words)), (si, (
                scale, scale_words, divides)) in itertools.product(enumerate(causal), enumerate(forms),
                                                                   enumerate(scales)):
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {red}, a max and a sum of expf over a range of "
                        "keys a batch → softmax", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.sizes["batches"] = end.spec.size
            b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T})"]) + [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            if rows == "(int)gridDim.x":  # one row a block on the expert's grid [rows of a batch, batches]
                rows = "(int)gridDim.x * (int)gridDim.y"
            if scale_words:
                b.words.append(scale_words)
            b.words.append(f"keys [{f'`{start.name}`[b]' if start else '0'}, `{end.name}`[b]) of batch b = row / "
                           f"(rows / batches), batches `{end.name}`'s length, an empty range "
                           + ("widened to every key" if fallback else "written 0"))
            b.template_args = [CTYPE[T], CTYPE[O]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                           "(const float*)nullptr"]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
            b.conventions = {"KT_EXPERT_GENERAL": 1, "KT_EXPERT_KEYS": 1 if fallback else 2}
            if divides:
                b.conventions["KT_EXPERT_LOGIT_DIVIDE"] = 1
            if mask is not None:
                b.words.append(f"plus the mask `{mask.name}` {mask_words}")
                b.template_args.append(CTYPE[mask.dtype])
                mrc = "(int)gridDim.x" if mr == "({rows}) / (int)gridDim.y" and rows == "(int)gridDim.x * (int)gridDim.y" \
                    else mr.replace("{rows}", rows)
                b.call_args += [_cast(mask.dtype, mask.name, True), mrc, mrc if inner is None else inner]
                b.consts["ESIZE"] = max(b.consts["ESIZE"], NBYTES[mask.dtype])
                b.conventions["KT_EXPERT_MASK"] = 1
            b.call_args += [_cast("i32", end.name, True),
                            _cast("i32", start.name, True) if start else "(const int*)nullptr", q_len]
            if causal_words:
                b.words.append(causal_words)
            b.support = 10 + 2 * ev.uses(hidden) - hi - si - mi - ci + causal_support + divides + (
                4 if _bounds_a_loop(ev, hidden) else 0)  # a row length the kernel walks first
            out.append(b)
    return out


# a value as read from a buffer or a local: converted, cast or parenthesized (`__bfloat162float(sinks[h])`, `(float)s`)
_WIDEN = r"(?:(?:__bfloat162float|__half2float|__low2float|to_float|float|static_cast<\s*float\s*>)\s*\(\s*|\(\s*float\s*\)\s*|\(\s*)*"
_MAXES = r"fmaxf|fmax|max|__hmax|hmax"


def _held(names: set[str]) -> str:
    """A value that is one of ``names`` (or an element of one), widened or cast: nothing computed from it."""
    alt = "|".join(map(re.escape, sorted(names)))
    return rf"\s*{_WIDEN}(?:{alt})\b\s*(?:\[[^\]]*\]\s*)?\)*\s*"


def _sink_heads(ev: Evidence, a: ArgUse) -> list[SizeExpr]:
    """Where the input ``a`` is a sink logit per head (gpt-oss attention sinks, softmax(cat([scores, sink]))[...,
    :-1]): the int arguments its count is (the heads), those the statements that read it compute from first; empty
    where it is not. Evidence, not names: a float input whose count an int argument holds, its value (read, widened,
    or copied into a local) taken as a whole operand of a max (`fmaxf(block_max, sink)`, or the max started from
    it) and as the minuend of an exponential's argument (`expf(sink - m)`): one logit more in the row's max and in
    its sum, not a value the logits are scaled by or a mask added to them."""
    if a.role != "in" or a.dtype not in FLOATS or not a.counts:
        return []
    heads = [h for h in ev.sizes(a.counts) if re.fullmatch(r"\(int\)\((\w+)\)", h.c)]
    if not heads:
        return []
    held = {a.name}  # the buffer and the locals that hold its value as read
    grew = True
    while grew:
        grew = False
        for target, value in assignments(ev.body):
            if target not in held and re.fullmatch(_held(held), value):
                held.add(target)
                grew = True
    whole = _held(held)
    in_max = any(re.fullmatch(whole, arg) for _, args in call_arguments(ev.body, _MAXES) for arg in args)
    in_exp = any(args and re.match(whole + r"-", args[0]) for _, args in call_arguments(ev.body, "|".join(EXPS)))
    if not (in_max and in_exp):
        return []
    names = _mask_index_names(ev, a)
    return sorted(heads, key=lambda h: h.c[6:-1] not in names)


def _bounds_a_loop(ev: Evidence, hidden: SizeExpr) -> bool:
    """Whether the arguments of the row length are, all and only, those of some loop's bound (``k < k_len``, a
    row's keys): a row length the kernel walks, not a product of sizes it never walks as one."""
    args = set(re.findall(r"\(int\)\((\w+)\)", hidden.c))
    return any(set(re.findall(r"\b[A-Za-z_]\w*\b", bound)) - {"int", "long", "size_t", "int64_t"} == args
               for bound in re.findall(r"for\([^;]*;[\w.]+<([^;]+);", ev.flat))


def _sink_inners(ev: Evidence, sink: ArgUse, heads: SizeExpr, rows_fp: tuple) -> list[tuple[str, str, int]]:
    """How the rows [outer, heads, inner] find their head's sink, h = (r / inner) % heads, as (inner as the wrapper
    computes it, ``{rows}`` standing for the row count; words; support), likeliest first: an int argument that
    divides the rows of one head (a query count of scores [batch, heads, q_len, keys]; 1 on some size set, a decode
    step, allowed), those the sink's own index reads first (3 more); 1 (rows [tokens, heads]: h = r % heads; 3 more
    where the sink's index reads the head count and none of those arguments); every row of one head consecutive
    (h = r / (rows / heads))."""
    per = div(rows_fp, sink.counts)
    hname = heads.c[6:-1]
    names = _mask_index_names(ev, sink)
    ints = [a for a in ev.ints() if a.counts and a.name != hname and any(v > 1 for v in a.counts)
            and all(1 <= v <= p and p % v == 0 for v, p in zip(a.counts, per))]
    ints.sort(key=lambda a: (a.name not in names, -ev.uses(SizeExpr(f"(int)({a.name})", "", ""))))
    out = []
    for a in ints:
        words = (f"head = row / `{a.name}` (consecutive rows share one)" if a.counts == per
                 else f"head = (row / `{a.name}`) % `{hname}`")
        out.append((f"(int)({a.name})", words, 3 if a.name in names else 0))
    out.append(("1", f"head = row % `{hname}`", 3 if hname in names and not any(a.name in names for a in ints) else 0))
    if any(p > 1 for p in per) and not any(a.counts == per for a in ints):
        out.append((f"({{rows}}) / {heads.c}", f"head = row / (rows / `{hname}`) (consecutive rows share one)", 0))
    return out


def _causal_forms(ev: Evidence, rows_fp: tuple, hfp: tuple) -> list[tuple[int, str, str]]:
    """The causal masks a softmax over attention scores [outer, q_len, hidden keys] may apply, as (the expert's
    KT_EXPERT_MASK, the argument holding q_len, words): q_len any int argument that divides the rows (and is not
    their count: scores of more than one head or sequence), aligned bottom-right (query q sees keys 0 .. q + hidden
    - q_len: prefill, decode and chunked prefill alike; q_len at most the keys) or top-left (keys 0 .. q). The
    arguments the body uses most come first (a query count takes part in the mask as well as in the row offset; an
    outer count often only bounds the rows); the cheap check decides."""
    out = []
    qs = [a for a in ev.ints() if a.counts and a.counts != rows_fp and div(rows_fp, a.counts) is not None]
    for a in sorted(qs, key=lambda a: -ev.uses(SizeExpr(f"(int)({a.name})", "", ""))):
        if all(1 <= q <= h for q, h in zip(a.counts, hfp)):
            out.append((2, a.name, f"causal mask, bottom-right aligned: query row % `{a.name}` sees keys 0 .. query + "
                                   "keys - q_len (the rest written 0)"))
        out.append((3, a.name, f"causal mask, top-left aligned: query row % `{a.name}` sees keys 0 .. query (the rest "
                               "written 0)"))
    return out


def _mask_inners(ev: Evidence, mask_rows: tuple) -> list[tuple[str | None, str]]:
    """How the rows [outer, repeat, inner] read a mask of fewer rows [outer, inner], the inner extent as the
    wrapper computes it (None: all the mask's rows), likeliest first: broadcast over a leading dimension (the
    heads of scores [heads, q, k] over a mask [q, k]); consecutive rows sharing one (a padding mask per
    sequence); a middle dimension (scores [batch, heads, q, k] over a mask [batch, q, k]: inner an int argument
    that divides the mask's rows)."""
    out = [(None, "broadcast over a leading dimension (row r reads mask row r % mask rows)"),
           ("1", "consecutive rows share one (row r reads mask row r / (rows / mask rows))")]
    for a in ev.ints():
        if a.counts and all(1 < v < m and m % v == 0 for v, m in zip(a.counts, mask_rows)):
            out.append((f"(int)({a.name})", f"broadcast over a middle dimension, inner extent `{a.name}`"))
    # an inner extent that is 1 or all the mask's rows on some size set (a decode step's single query: scores [batch,
    # heads, 1, keys] over a mask [batch, 1, 1, keys]) is still a middle dimension where it lies between elsewhere;
    # the arguments the body uses most first
    edge = [a for a in ev.ints() if a.counts and all(1 <= v <= m and m % v == 0 for v, m in zip(a.counts, mask_rows))
            and any(1 < v < m for v, m in zip(a.counts, mask_rows))
            and not all(1 < v < m for v, m in zip(a.counts, mask_rows))]
    for a in sorted(edge, key=lambda a: -ev.uses(SizeExpr(f"(int)({a.name})", "", ""))):
        out.append((f"(int)({a.name})", f"broadcast over a middle dimension, inner extent `{a.name}`"))
    return out


def _mask_index_names(ev: Evidence, mask: ArgUse) -> set[str]:
    """The identifiers the statements that read the mask or make a pointer into it are computed from (``const
    float* m = mask + ((int64_t)b * q_len + q) * k_len``, through the locals they name: ``mrow = row / (heads *
    q_len) * q_len + row % q_len``): an int argument among them is how the kernel finds a row's mask row."""
    name = re.compile(rf"\b{re.escape(mask.name)}\b")
    flow = flows(ev.body)
    return {n for _, _, stmt in statements(ev.body) if name.search(stmt) for n in feeding(flow, stmt)}


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
    if stats and (len(stats) != 2 or stats[0].counts != stats[1].counts or div(big, stats[0].counts) is None):
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
        if stats and (div(big, hfp) != stats[0].counts or len(small) != 2):
            continue  # statistics: one per row, of a LayerNorm
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
            if re.search(r"beta|bias|shift", g.name, re.I) and not re.search(r"beta|bias|shift", bb.name, re.I):
                orders.reverse()
            stat_orders = [[]] if not stats else [list(stats), list(reversed(stats))]
            if stats and re.search(r"var|rstd|std|inv", stats[0].name, re.I) and \
                    not re.search(r"var|rstd|std|inv", stats[1].name, re.I):
                stat_orders.reverse()
            norms.append(("layer_norm", 0.85, f"{words} (mean and variance), rsqrtf, scale and shift of `{hname}` "
                          "→ LayerNorm",
                          [([f"out={o.name}", f"x={x.name}", f"gamma={gg.name}", f"beta={b2.name}"]
                            + ([f"mean={st[0].name}", f"rstd={st[1].name}"] if st else []),
                            [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, gg.name, True),
                             _cast(W, b2.name, True)], st) for gg, b2 in orders for st in stat_orders]))
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
                        b.call_args = args + [eps_c, rows, hidden.c] + [f"(float*)({a.name})" for a in st] + \
                            ([off_c] if off_c else [])
                        if st:
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
                            b.support += 3 if (expert == "layer_norm") == _centred(ev) else 0
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


def _centred(ev: Evidence) -> bool:
    """The kernel takes a mean off the row (``x - mean``, a variance): a LayerNorm rather than an RMSNorm."""
    return re.search(r"-\s*\(?\s*\w*mean|\bvar\b|variance|mean_var|\bmu\b", ev.flat, re.I) is not None


def _fused_orders(ev: Evidence, io: list[ArgUse]) -> list[tuple[ArgUse, ArgUse]]:
    """(x, residual) both ways, the likelier first: the residual is the one named so, else the one the body
    writes first (the sum is stored before the normalized row)."""
    a, b = io
    if re.search(r"resid", a.name, re.I) and not re.search(r"resid", b.name, re.I):
        first = (b, a)
    elif re.search(r"resid", b.name, re.I):
        first = (a, b)
    elif 0 <= a.first_write and (b.first_write < 0 or a.first_write < b.first_write):
        first = (b, a)
    else:
        first = (a, b)
    return [first, (first[1], first[0])]


def _eps_outside(flat: str) -> bool:
    """Whether a root call's result is what something is added to (``sqrtf(ms) + eps``) while nothing is added
    inside it (``rsqrtf(ms + eps)``)."""
    outside = inside = False
    for m in re.finditer(r"r?sqrtf?\(|__fsqrt_rn\(|__frsqrt_rn\(", flat):
        i = closing(flat, m.end())
        arg = flat[m.end():i - 1]
        if re.search(r"\+", arg):
            inside = True
        elif flat[i:i + 1] == "+":
            outside = True
    return outside and not inside


def _norm_conventions(ev: Evidence, e: Expert | None, T: str) -> list[tuple[dict, list[str], int]]:
    """The numeric conventions a normalization may follow, the likelier first: eps inside the root (rsqrt(ms +
    eps)) or outside (1 / (sqrt(ms) + eps)); for 16-bit storage, the normalized value rounded to the storage type
    before the weight multiply or not."""
    if e is None:
        return []
    inside_first = not _eps_outside(ev.flat)
    eps = [(1, "eps inside the root"), (0, "eps outside the root (1 / (sqrt + eps))")]
    if not inside_first:
        eps.reverse()
    if "KT_EXPERT_EPS_INSIDE" not in e.conventions:
        eps = [(None, "eps inside the root")]
    rnd: list[tuple[int | None, str]] = [(None, "")]
    if T != "f32" and "KT_EXPERT_ROUND_BEFORE_WEIGHT" in e.conventions:
        rnd = [(1, f"rounded to {T} before the weight multiply"), (0, f"weight multiplied in fp32, one rounding to {T}")]
        if _round_evidence(ev) < 2:
            rnd.reverse()
    out = []
    for i, (ev_, ew) in enumerate(eps):
        for j, (rv, rw) in enumerate(rnd):
            conv = {}
            if ev_ is not None:
                conv["KT_EXPERT_EPS_INSIDE"] = ev_
            if rv is not None:
                conv["KT_EXPERT_ROUND_BEFORE_WEIGHT"] = rv
            out.append((conv, [w for w in (ew, rw) if w], -2 * i - j))
    return out


# ------------------------------------------------------------------------------------------------ add, then normalize
def _add_norm_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """The add-then-normalize pattern of serving code (FasterTransformer / TensorRT-LLM add-bias-residual LayerNorm
    and RMSNorm, lmdeploy's BiasResidualRMSNorm): z = x + residual (+ a bias [hidden] added inside the sum), z stored
    back in the residual, its RMSNorm or LayerNorm written over x (in place) or to a buffer of its own. Read by
    evidence: the rows read (x), read and written (the residual; x too where normalized in place) and written (out);
    the [hidden] inputs added before the root (the bias: read before the root is taken) and those applied after it
    (weight, or gamma and beta); the family from whether a mean is taken off the row; where each add is rounded to the
    storage type (``_adds_in_storage_type``); the LayerNorm's mean from the unrounded sums (``_mean_before_rounding``);
    the mean of squares as a product with an inverse-count argument (a float argument that is 1 / hidden on every
    size set). Only what the other row binders leave: a fused add + RMSNorm with a bias, or a LayerNorm with a
    residual; the fused add + RMSNorm without a bias is theirs."""
    if not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if not bufs or any(a.dtype not in FLOATS or not a.counts for a in bufs):
        return []
    big = max(a.counts for a in bufs)
    rows_ = [a for a in bufs if a.counts == big]
    small = [a for a in bufs if a.counts != big]
    if not small or len(small) > 3 or any(a.role != "in" or a.counts != small[0].counts for a in small) \
            or div(big, small[0].counts) is None:
        return []
    ins = [a for a in rows_ if a.role == "in"]
    ios = [a for a in rows_ if a.role == "inout"]
    outs = [a for a in rows_ if a.role == "out"]
    # (x, the residual the sum is stored in, the normalized row's buffer, the residual read when it is not that one)
    if len(ios) == 2 and not ins and not outs:
        layouts = [(x, r, x, None) for x, r in _fused_orders(ev, ios)]  # normalized in place over x
    elif len(ins) == 1 and len(ios) == 1 and len(outs) == 1:
        layouts = [(ins[0], ios[0], outs[0], None)]  # x read, the residual updated, the normalized row to out
    elif len(ins) == 2 and len(outs) == 2 and not ios:
        # the sum to a buffer of its own (ONNX Runtime's SkipLayerNorm sum output, TensorRT-LLM's residual out): the
        # one written first (or named so); x + residual is one sum either way where the two read are of one type
        layouts = [(x, r, o, r_in) for o, r in _fused_orders(ev, outs) for x, r_in in _fused_orders(ev, ins)
                   if r_in.dtype == r.dtype]
        if ins[0].dtype == ins[1].dtype:
            layouts = layouts[::2]
    else:
        return []
    pre = [a for a in small if _read_before_root(ev, a.name)]
    biases = [a for a in small if any(a.dtype == lay[0].dtype for lay in layouts)]  # a bias of x's type
    if len(pre) == 1 and pre[0] in biases:
        biases = pre  # the one [hidden] input read before the root: added into the sum
    rounded_adds = _adds_in_storage_type(ev)
    out: list[Binding] = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, small)):
        centred = _subtracts_mean(ev, hidden)
        inv = [a for a in ev.floats() if a.counts and all(v and abs(v * h - 1) < 1e-6 for v, h in zip(a.counts, hfp))]
        eps_all = [c for c in _eps_candidates(ev) if not inv or c[0] != f"(float)({inv[0].name})"]
        # the inputs read before the root first, then (a LayerNorm) no bias at all, then the others
        options = [a for a in biases if a in pre] + ([None] if centred else []) + [a for a in biases if a not in pre]
        for bi, bias in enumerate(options):
            weights = [a for a in small if a is not bias]
            if centred:
                out += _add_layer_norm(ev, lib, hidden, hfp, hi, layouts, bias, bi, weights, eps_all, rounded_adds)
            elif bias is not None and len(weights) == 1:
                out += _add_bias_rms_norm(ev, lib, hidden, hfp, hi, layouts, bias, bi, weights[0], eps_all,
                                          inv[0] if inv else None, rounded_adds)
    return out


def _bias_forms(bias: ArgUse | None, T: str, rounded_adds: bool) -> list[tuple[int, str]]:
    """(KT_EXPERT_BIAS, words) for a bias added inside the sum, the body's form first: in fp32 with one rounding, or
    each add rounded to the 16-bit storage type (where the body adds values of that type)."""
    if bias is None:
        return [(0, "")]
    fp32 = (1, f"plus the bias `{bias.name}` (nullable) in fp32, one rounding to {T}")
    each = (2, f"plus the bias `{bias.name}` (nullable), each add rounded to {T}")
    if T == "f32":
        return [fp32]
    return [each, fp32] if rounded_adds else [fp32, each]


def _add_bias_rms_norm(ev: Evidence, lib: dict[str, Expert], hidden: SizeExpr, hfp: tuple, hi: int, layouts: list,
                       bias: ArgUse, bi: int, w: ArgUse, eps_all: list, inv: ArgUse | None,
                       rounded_adds: bool) -> list[Binding]:
    """Fused add + RMSNorm with a bias inside the sum (``KT_EXPERT_BIAS`` on the general form), the mean of squares
    times an inverse-count argument where there is one (``KT_EXPERT_INV_COUNT``)."""
    e = lib.get("fused_add_rms_norm")
    if e is None or "KT_EXPERT_BIAS" not in e.conventions or "KT_EXPERT_GENERAL" not in e.conventions:
        return []
    out = []
    hname = hidden.words.strip("`")
    if "KT_EXPERT_RESIDUAL_IN" not in e.conventions:
        layouts = [lay for lay in layouts if lay[3] is None]
    for li, (x, r, o, r_in) in enumerate(layouts):
        T, R, W, O = x.dtype, r.dtype, w.dtype, o.dtype
        if bias.dtype != T:
            continue  # the expert's bias is of x's type
        for (ei, (eps_c, eps_words, eps_support)), (ci, (conv, conv_words, conv_support)), (fi, (form, form_words)) \
                in itertools.product(enumerate(eps_all), enumerate(_add_rms_conventions(ev, e, O)),
                                     enumerate(_bias_forms(bias, R, rounded_adds))):
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, adds `{x.name}` ({T}) and "
                        f"the bias `{bias.name}` into the residual `{r.name}` ({R}), rsqrtf, one weight, the normalized "
                        f"row {'in place' if o is x else 'into `' + o.name + '`'} ({O}) → fused add + RMSNorm",
                        ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = _fused_add_words(x, T, r, R, r_in, o, O, w, hidden, eps_words)
            rows = _rows(ev, div(x.counts, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            b.words += [form_words] + conv_words + ([f"mean of squares times `{inv.name}` (1 / hidden)"] if inv else [])
            b.template_args = [CTYPE[T], CTYPE[R], CTYPE[W], CTYPE[O]]
            b.call_args = [_cast(T, x.name, True), _cast(R, r.name, False), _cast(W, w.name, True),
                           _cast(O, o.name, False), eps_c, rows, hidden.c] + \
                ([_cast(R, r_in.name, True)] if r_in is not None else []) + \
                [_cast(T, bias.name, True), f"(float)({inv.name})" if inv else "0.f"]
            b.consts = {"ESIZE": min(NBYTES[T], NBYTES[O])}
            b.conventions = dict(conv, KT_EXPERT_GENERAL=1, KT_EXPERT_BIAS=form)
            if r_in is not None:
                b.conventions["KT_EXPERT_RESIDUAL_IN"] = 1
            if inv:
                b.conventions["KT_EXPERT_INV_COUNT"] = 1
            b.support = 10 + 2 * ev.uses(hidden) - hi - bi - li - ei - fi + eps_support + conv_support
            out.append(b)
    return out


def _add_rms_conventions(ev: Evidence, e: Expert, T: str) -> list[tuple[dict, list[str], int]]:
    """``_norm_conventions`` with the normalized value's rounding ordered by ``_rounded_before_weight``."""
    convs = _norm_conventions(ev, e, T)
    if T == "f32" or not convs:
        return convs
    first = 1 if _rounded_before_weight(ev) else 0
    eps_first = convs[0][0].get("KT_EXPERT_EPS_INSIDE")
    out = [(conv, words, -2 * (conv.get("KT_EXPERT_EPS_INSIDE") != eps_first)
            - (conv.get("KT_EXPERT_ROUND_BEFORE_WEIGHT", first) != first)) for conv, words, _ in convs]
    return sorted(out, key=lambda c: -c[2])


def _add_layer_norm(ev: Evidence, lib: dict[str, Expert], hidden: SizeExpr, hfp: tuple, hi: int, layouts: list,
                    bias: ArgUse | None, bi: int, weights: list[ArgUse], eps_all: list,
                    rounded_adds: bool) -> list[Binding]:
    """LayerNorm of a residual sum (``KT_EXPERT_RESIDUAL``), with or without a bias inside the sum (``KT_EXPERT_BIAS``),
    gamma and beta in either order or gamma alone (``KT_EXPERT_AFFINE`` 2); the mean from the rounded or the
    unrounded sums, the body's first."""
    e = lib.get("layer_norm")
    if e is None or "KT_EXPERT_RESIDUAL" not in e.conventions or not weights or len(weights) > 2 \
            or len({a.dtype for a in weights}) != 1:
        return []
    orders = [weights] if len(weights) == 1 else [weights, weights[::-1]]
    if len(weights) == 2 and re.search(r"beta|bias|shift", weights[0].name, re.I) and not re.search(
            r"beta|bias|shift", weights[1].name, re.I):
        orders.reverse()
    out = []
    hname = hidden.words.strip("`")
    for li, (x, r, o, r_in) in enumerate(layouts):
        T, O, W = x.dtype, o.dtype, weights[0].dtype
        if r.dtype != T or (bias is not None and bias.dtype != T):
            continue  # the expert's residual and bias are of x's type
        if r_in is not None and "KT_EXPERT_RESIDUAL_IN" not in e.conventions:
            continue
        if O != T and NBYTES[O] > NBYTES[T]:
            continue  # an output wider than the rows: the expert's vector checks are made for the rows' type
        stats = [(2, "the mean from the unrounded sums"), (1, "the mean from the rounded sum")]
        if not _mean_before_rounding(ev, r):
            stats.reverse()
        for (oi, order), (ei, (eps_c, eps_words, eps_support)), (conv, conv_words, conv_support), \
                (si, (st, st_words)), (fi, (form, form_words)) in itertools.product(
                    enumerate(orders), enumerate(eps_all), _norm_conventions(ev, e, O), enumerate(stats),
                    enumerate(_bias_forms(bias, T, rounded_adds))):
            g, bb = order[0], (order[1] if len(order) == 2 else None)
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, adds `{x.name}` into the "
                        f"residual `{r.name}`{f' with the bias `{bias.name}`' if bias else ''}, mean and variance, "
                        f"rsqrtf, {'gamma and beta' if bb else 'one weight (no shift)'}, the normalized row "
                        f"{'in place' if o is x else 'into `' + o.name + '`'} → add + LayerNorm", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = [f"out={o.name}" + (" (in place)" if o is x else f" ({O})" if O != T else ""),
                       f"x={x.name}", f"residual={r.name} (the sum stored)" if r_in is None else
                       f"residual={r_in.name}, the sum into `{r.name}` (unless null)", f"gamma={g.name}",
                       f"beta={bb.name}" if bb else "no beta", f"hidden={hidden.words}", eps_words]
            rows = _rows(ev, div(x.counts, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            b.words += ([form_words] if form_words else []) + [st_words] + conv_words
            b.template_args = [CTYPE[T], CTYPE[W]] + ([CTYPE[O]] if O != T else [])
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), _cast(W, g.name, True),
                           _cast(W, bb.name, True) if bb else f"(const {CTYPE[W]}*)nullptr", eps_c, rows, hidden.c,
                           _cast(T, r.name, False), _cast(T, bias.name, True) if bias else f"(const {CTYPE[T]}*)nullptr"] \
                + ([_cast(T, r_in.name, True)] if r_in is not None else [])
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W], NBYTES[O])}
            b.conventions = dict(conv, KT_EXPERT_RESIDUAL=st)
            if form:
                b.conventions["KT_EXPERT_BIAS"] = form
            if r_in is not None:
                b.conventions["KT_EXPERT_RESIDUAL_IN"] = 1
            if not bb:
                b.conventions["KT_EXPERT_AFFINE"] = 2
            if O != T:
                b.conventions["KT_EXPERT_OUT_TYPE"] = 1
            b.support = 10 + 2 * ev.uses(hidden) - hi - bi - li - oi - ei - si - fi + eps_support + conv_support
            out.append(b)
    return out


def _subtracts_mean(ev: Evidence, hidden: SizeExpr) -> bool:
    """Whether the body subtracts a mean from something: a local assigned a quantity divided by the row length (or
    one computed from such a local: ``s_mean = mean / n``, ``const float mu = red[0] / dim``) is the right operand of
    a subtraction. An RMSNorm divides its sum of squares by the row length too, but subtracts nothing of it."""
    names = re.findall(r"\(int\)\((\w+)\)", hidden.c)
    if not names:
        return False
    count = "|".join(map(re.escape, names))
    means = {t for t, value in assignments(ev.body)
             if re.search(rf"/\s*(?:\(\s*float\s*\)\s*|static_cast<float>\s*)?\(?\s*(?:{count})\b", value)}
    if not means:
        return False
    flow = flows(ev.body)
    means |= {n for n, deps in flow.items() if deps & means}
    alt = "|".join(map(re.escape, sorted(means)))
    return re.search(rf"-\(*(?:{alt})\b(?!\[)", ev.flat) is not None


_ROOT_CALL = re.compile(r"\b(?:" + "|".join(ROOTS) + r")\s*\(")


def _read_before_root(ev: Evidence, name: str) -> bool:
    """Whether the body names the buffer ``name`` before its first root call: an input used in the sum, before the
    statistics, rather than a weight applied after them."""
    root = _ROOT_CALL.search(ev.body)
    use = re.search(rf"(?<![\w.]){re.escape(name)}\b", ev.body)
    return root is not None and use is not None and use.start() < root.start()


def _half_locals(ev: Evidence) -> set[str]:
    """The body's locals declared with a 16-bit float type (a template parameter as instantiated too; an array or
    vector of one: ``Array<T, 8> r_vec``, ``__half2 h``)."""
    inst = instance_types(ev)
    out = set()
    for m in re.finditer(r"(?:^|[;{}(])\s*(?:const\s+)?([A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?)\s+([A-Za-z_]\w*)\s*(?=[;=\[{,)])",
                         ev.body):
        ty = re.sub(r"\b[A-Za-z_]\w*\b", lambda t: inst.get(t.group(0), t.group(0)), m.group(1))
        if re.search(rf"(?<![\w:])(?:{HALF_TYPES}|__half2|half2|__nv_bfloat162|nv_bfloat162)(?![\w:])", ty):
            out.add(m.group(2))
    return out


def _adds_in_storage_type(ev: Evidence) -> bool:
    """Whether the body adds rows in their 16-bit storage type (each add rounded): a 16-bit add intrinsic, or a
    local of a 16-bit type assigned a sum of values not converted to float (``r_vec = r_vec + h_vec`` on arrays of
    half, ``z += residual[i]``; not ``z = __float2half(a + b)``)."""
    if ev.has("__hadd", "__hadd2", "__hadd_rn", "hadd"):
        return True
    halves = _half_locals(ev)
    for target, at, stmt in statements(ev.body):
        value = stmt[at + 1:]
        if target in halves and at >= 0 and (stmt[at - 1:at] == "+" or "+" in value) \
                and not re.search(r"float", value):  # a sum in fp32 converted once is not a 16-bit add
            return True
    return False


def _mean_before_rounding(ev: Evidence, r: ArgUse) -> bool:
    """Whether the mean comes from the sums before they are rounded (FasterTransformer: ``output[i] = (T)local_out;
    local_sum += local_out;``): a float local stored, converted, into the residual and added as it is to an
    accumulator."""
    halves = _half_locals(ev)
    stored = set()
    for target, at, stmt in statements(ev.body):
        if target != r.name or at < 0:
            continue
        m = re.fullmatch(r"[\s(]*(?:\(\s*[\w:]+\s*\)|static_cast\s*<[^>]*>|[\w:]+)?[\s(]*([A-Za-z_]\w*)[\s)]*",
                         stmt[at + 1:])
        if m and m.group(1) not in halves:
            stored.add(m.group(1))
    for target, at, stmt in statements(ev.body):
        if at > 0 and stmt[at - 1:at] == "+" and target not in stored and stmt[at + 1:].strip() in stored:
            return True
    return False


def _rounded_before_weight(ev: Evidence) -> bool:
    """Whether the normalized value is converted to a 16-bit type before the weight multiplies it: a cast to one (a
    template parameter as instantiated too) of a product with something computed from a root's result
    (``static_cast<T>(static_cast<float>(r[c]) * s) * w[c]``, ``s`` holding the rsqrt published through shared
    memory)."""
    half = {n for n, a in instance_types(ev).items() if re.fullmatch(rf"(?:const\s+)?(?:{HALF_TYPES})", a)}
    types = "|".join([HALF_TYPES] + [re.escape(h) for h in sorted(half)])
    casts = rf"static_cast<(?:{types})>\(|\((?:{types})\)\(|(?<![\w:])(?:{types})\(|__float2(?:half|bfloat16)(?:_rn)?\("
    flow = flows(ev.body)
    roots = {t for t, _, st in statements(ev.body) if t and _ROOT_CALL.search(st)}
    fed = roots | {n for n, deps in flow.items() if deps & roots}
    for m in re.finditer(casts, ev.flat):
        i = closing(ev.flat, m.end())
        arg = ev.flat[m.end():i - 1]
        if "*" in arg and any(re.search(rf"\b{re.escape(n)}\b", arg) for n in fed):
            return True
    return False


# ------------------------------------------------------------------------------- RMSNorm + dynamic per-row quant
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


# ------------------------------------------------------------------------------------------------ per-row statistics
# Norm kernels of training code bases also store one fp32 value per row for the backward pass: RMSNorm its
# reciprocal RMS (Transformer Engine's rsigma, Apex's invvar), LayerNorm its mean and either the reciprocal standard
# deviation or (PaddlePaddle) the variance itself. Which one is read from what the kernel stores: a value computed
# from a root is the reciprocal; a value the root's argument adds eps to is the variance.
_SQRT_CALL = re.compile(r"\b(\w*sqrt\w*)\s*\(")
_RECIP_ROOT = re.compile(r"rsqrt|(?<![\w.])1(?:\.0*)?[fF]?/\(?(?:\w*sqrt)")


def _stat_store(ev: Evidence, name: str) -> tuple[str, set[str]] | None:
    """The value the kernel stores to ``name[...]`` (text) and the locals a chained assignment also gives it
    (``var[i] = var_share = ...``); None when the body stores it nowhere (or only by a compound assignment)."""
    for _, at, stmt in statements(ev.body):
        if at <= 0 or stmt[at - 1] in "+-*/%&|^<>" \
                or not re.search(rf"\b{re.escape(name)}\s*\[[^\]]*\]\s*$", stmt[:at]):
            continue
        value, aliases = stmt[at + 1:], set()
        while (m := re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", value)) is not None:
            aliases.add(m.group(1))
            value = value[m.end():]
        return value, aliases
    return None


def _stat_definition(ev: Evidence, value: str) -> str:
    """The stored value's text, a local it names alone replaced by what it is assigned (the last such)."""
    v = value.strip()
    if re.fullmatch(r"[A-Za-z_]\w*", v):
        defs = [val for t, val in assignments(ev.body) if t == v]
        if defs:
            return defs[-1]
    return v


def _stat_is_reciprocal_root(ev: Evidence, name: str) -> bool:
    """The value stored to ``name`` is computed from a reciprocal root (``rsqrtf(ms + eps)``, ``1.f / sqrtf(...)``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    value, _ = st
    flow = flows(ev.body)
    texts = [re.sub(r"\s+", "", t) for t in [value] + [val for t, val in assignments(ev.body)
                                                        if t in feeding(flow, value)]]
    if any(_RECIP_ROOT.search(t) for t in texts):
        return True
    # one over a local a root computes (rms = sqrtf(ms + eps); inv = 1.f / rms)
    return any("sqrt" in n for t in texts for m in re.finditer(r"(?<![\w.])1(?:\.0*)?[fF]?/\(?([A-Za-z_]\w*)", t)
               for n in feeding(flow, m.group(1)))


def _stat_is_variance(ev: Evidence, name: str) -> bool:
    """The value stored to ``name`` is the variance: computed from no root, and what a root's argument adds eps to
    (``var[row] = var_share = ...; rsqrt(var_share + eps)``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    value, aliases = st
    if any("sqrt" in n for n in feeding(flows(ev.body), value)) or _SQRT_CALL.search(value):
        return False
    names = set(aliases)
    if re.fullmatch(r"\s*[A-Za-z_]\w*\s*", value):
        names.add(value.strip())
    flat_value = re.sub(r"\s+", "", value)
    for m in _SQRT_CALL.finditer(ev.body):
        arg = re.sub(r"\s+", "", ev.body[m.end():closing(ev.body, m.end()) - 1])
        if "+" not in arg:
            continue
        if names & set(re.findall(r"\b[A-Za-z_]\w*\b", arg)) or (len(flat_value) > 3 and flat_value in arg):
            return True
    return False


def _one_pass_variance(ev: Evidence, name: str) -> bool:
    """The stored variance is mean(x^2) - mean^2: its expression subtracts a square last (``... - m * m``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    flat = re.sub(r"\s+", "", _stat_definition(ev, st[0]))
    return re.search(r"-\(?([A-Za-z_][\w.]*)\)?\*\(?\1\)?$", flat) is not None


def _layer_norm_stats(ev: Evidence, st: list[ArgUse], b: Binding) -> dict:
    """The statistics conventions of a LayerNorm binding whose per-row outputs are ``st`` (mean first): the second
    one the variance where the kernel stores that (KT_EXPERT_STATS_VAR, its words say var=), computed in one pass
    where the stored expression shows it (KT_EXPERT_VAR_ONEPASS); else nothing (1 / sqrt(var + eps))."""
    if not st or any(_stat_is_reciprocal_root(ev, a.name) for a in st) \
            or not any(_stat_is_variance(ev, a.name) for a in st):
        return {}
    b.words = [f"var={st[1].name}" if w == f"rstd={st[1].name}" else w for w in b.words]
    conv = {"KT_EXPERT_STATS_VAR": 1}
    if _stat_is_variance(ev, st[1].name) and _one_pass_variance(ev, st[1].name):
        conv["KT_EXPERT_VAR_ONEPASS"] = 1
        b.words.append("variance as mean(x^2) - mean^2")
    return conv


def _flag_offsets(ev: Evidence, weights: list[ArgUse]) -> list[tuple[str, str, int]]:
    """(C expression, words, support) for a weight offset by 1 only where a bool or integer argument says so
    (Transformer Engine's zero_centered_gamma: ``if (flag) g += 1.f``, or ``flag ? w + 1.f : w``): the offset is
    ``flag ? 1 : 0``, so the expert does what the original does for the flag's value."""
    flags = {a.name for a in ev.args if a.role == "scalar" and a.dtype not in ("f32", "f64", "f16", "bf16")}
    if not flags or not weights:
        return []
    flow = flows(ev.body)
    wn = {w.name for w in weights}
    one = r"(?:1\.0*|1\.?0*[fF])"
    out: list[tuple[str, str, int]] = []
    for target, at, stmt in statements(ev.body):
        if target is None or at <= 0:
            continue
        rhs = re.sub(r"\s+", "", stmt[at + 1:])
        t = re.escape(target)
        if not (stmt[at - 1] == "+" and re.fullmatch(one, rhs)
                or re.fullmatch(rf"{t}\+{one}|{one}\+{t}", rhs)):
            continue
        if not (feeding(flow, target) & wn):
            continue
        pos = stmt.rfind(target, 0, at)
        flag = _guarding_flag(ev, stmt[pos:]) if pos >= 0 else None
        if flag in flags:
            out.append((f"(({flag}) ? 1.f : 0.f)", f"weight plus 1 where `{flag}` (zero-centered)", 3))
    for n in flags:
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\)?\?", ev.flat):
            i = m.end()
            branch = ev.flat[i:ev.flat.find(":", i)] if ":" in ev.flat[i:] else ""
            if (_ONE_ADDED.search(branch) and set(re.findall(r"\b[A-Za-z_]\w*\b", branch)) & (wn | set(flow))) \
                    or re.fullmatch(r"\(?" + one + r"\)?", branch):
                out.append((f"(({n}) ? 1.f : 0.f)", f"weight plus 1 where `{n}` (zero-centered)", 3))
    return list(dict.fromkeys(out))


def _flagged_offsets(ev: Evidence, e: Expert | None, weights: list[ArgUse]) -> list[tuple[str | None, str, int]]:
    """``_weight_offsets`` and, for an expert with the offset convention, the offsets a flag selects
    (``_flag_offsets``): a literal 1 added under a flag is then no unconditional offset."""
    base = _weight_offsets(ev, e)
    if e is None or "KT_EXPERT_WEIGHT_OFFSET" not in e.conventions:
        return base
    flagged = _flag_offsets(ev, weights)
    if e.family == "layer_norm":
        # a LayerNorm body adds 1 for other reasons (Welford counts): only a 1 added to the weight under a flag,
        # which _flag_offsets reads through the weight's data flow
        return [(None, "", 0)] + flagged
    return [o for o in base if not (flagged and o[0] == "1.f")] + flagged


def _rms_norm_stats(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm that also stores each row's reciprocal RMS (fp32, one per row) for the backward pass: one row input,
    one row output of its type, one weight, the statistic an fp32 output the rows' count long whose stored value
    comes from a reciprocal root (KT_EXPERT_STATS). The weight possibly offset by 1 where a flag says so."""
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_STATS" not in e.conventions or not ev.has(*ROOTS) \
            or any(a.dtype not in FLOATS for a in ev.bufs()):
        return []
    sized = [a for a in ev.bufs() if a.counts]
    if len(sized) != len(ev.bufs()) or not sized:
        return []
    big = max(a.counts for a in sized)
    main = [a for a in sized if a.counts == big]
    in_main = [a for a in main if a.role == "in"]
    out_main = [a for a in main if a.role == "out"]
    small = [a for a in ev.bufs("in") if a.counts != big]
    stats = [a for a in ev.bufs("out", ("f32",)) if a.counts != big]
    if len(in_main) != 1 or len(out_main) != 1 or len(main) != 2 or in_main[0].dtype != out_main[0].dtype \
            or len(small) != 1 or len(stats) != 1 or len(small) + len(stats) + 2 != len(ev.bufs()):
        return []
    x, o, w, st = in_main[0], out_main[0], small[0], stats[0]
    if not _stat_is_reciprocal_root(ev, st.name):
        return []
    T, W = x.dtype, w.dtype
    out: list[Binding] = []
    for hidden, hfp in _hidden_candidates(ev, big, small):
        rows_fp = div(big, hfp)
        if rows_fp != st.counts:
            continue
        hname = hidden.words.strip("`")
        offsets = _flagged_offsets(ev, e, small)
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for (conv, conv_words, conv_support), (off_c, off_words, off_support) in itertools.product(
                    _norm_conventions(ev, e, T), offsets):
                if off_c == eps_c:
                    continue
                b = Binding(e, 0.9, f"reads rows of `{hname}` elements, {ev.reduction_words()}, rsqrtf, one weight "
                            f"of `{hname}`, each row's reciprocal RMS stored to `{st.name}` → RMSNorm with its "
                            "statistic", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words += [f"out={o.name}", f"x={x.name}", f"weight={w.name}", f"rstd={st.name}",
                            f"hidden={hidden.words}", eps_words]
                rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += conv_words + ([off_words] if off_c else [])
                b.template_args = [CTYPE[T], CTYPE[W]]
                b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c, f"(float*)({st.name})"] + ([off_c] if off_c else [])
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                b.conventions = dict(conv, KT_EXPERT_STATS=1)
                if off_c:
                    b.conventions["KT_EXPERT_WEIGHT_OFFSET"] = 1
                b.support = 10 + 2 * ev.uses(hidden) - ei + eps_support + conv_support + off_support
                out.append(b)
    return out


# FasterTransformer's keep-mask as it adds it: the complement of a 0/1 value times -10000
_KEEP_TIMES_MINUS_10000 = re.compile(
    r"\(\s*1(?:\.0*)?[fF]?\s*-\s*[^()]*(?:\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*)*\)\s*\*\s*-\s*10000(?:\.0*)?[fF]?(?![\w.])")
# a value times the difference of two indices: `slope * static_cast<float>(ki - qi)`, `slope * (float)(k - q)`
_TIMES_INDEX_DIFFERENCE = re.compile(
    r"(\w+)\s*\*\s*(?:static_cast<float>|\(\s*float\s*\))?\s*\(\s*(\w+)\s*-\s*(\w+)\s*\)")


def _softmax_alibi(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """FasterTransformer's / TensorRT-LLM's masked softmax with ALiBi (BLOOM, MPT; ``KT_EXPERT_ALIBI``): scores x
    [batch, heads, q_len, k_len] times a float scale, plus slopes[h] * (k - q) and a 0/1 keep-mask [batch, q_len,
    k_len] added as (1 - m) * -10000, one output. Read by evidence: the statement that multiplies the complement of
    a value by -10000 is fed by the mask; one that multiplies a value by the difference of two indices is fed by
    the slopes (one value per head), the key index first (from the lanes, not the block), the query (from the
    block's row, or the grid's stride over rows) second. The mask's rows broadcast over the
    heads as the general form's middle dimension (inner extent q_len, an int argument)."""
    e = lib.get("softmax")
    if e is None or "KT_EXPERT_ALIBI" not in e.conventions or not ev.has("__expf"):  # the family's exponential
        return []
    ins, outs = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS)
    if len(outs) != 1 or len(ins) != 3 or len(ev.bufs()) != 4 or not outs[0].counts:
        return []
    o = outs[0]
    big = o.counts
    xs = [a for a in ins if a.counts == big]
    if len(xs) != 1:
        return []
    x = xs[0]
    flow = flows(ev.body)
    stmts = [stmt for _, _, stmt in statements(ev.body)]
    # what the complement times -10000 is computed from, and what multiplies an index difference (key - query)
    keep_feeds = [feeding(flow, m.group(0)) for st in stmts for m in _KEEP_TIMES_MINUS_10000.finditer(st)]
    slope_feeds = [feeding(flow, d.group(1)) for st in stmts for d in _TIMES_INDEX_DIFFERENCE.finditer(st)
                   if "threadIdx" in feeding(flow, d.group(2)) and "blockIdx" not in feeding(flow, d.group(2))
                   and {"blockIdx", "gridDim"} & feeding(flow, d.group(3))]
    others = [a for a in ins if a is not x]
    masks = [a for a in others if any(a.name in f for f in keep_feeds)]
    slopes = [a for a in others if a.counts and div(big, a.counts) is not None and any(a.name in f for f in slope_feeds)]
    if len(masks) != 1 or len(slopes) != 1 or masks[0] is slopes[0] or masks[0].dtype != slopes[0].dtype:
        return []
    mask, slope = masks[0], slopes[0]
    T, O = x.dtype, o.dtype
    scales = [(f"(float)({a.name})", f"logits times `{a.name}`") for a in ev.floats()
              if re.search(rf"\b{re.escape(a.name)}\s*\*", ev.body)]
    if len(scales) > 1:
        return []
    scale, scale_words = scales[0] if scales else ("1.f", "")
    red = ev.reduction_words()
    index_names = _mask_index_names(ev, mask)
    out = []
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, [])):
        if not ev.uses(hidden):  # the row length is what the body bounds its keys by
            continue
        rows_fp = div(big, hfp)
        mask_rows = div(mask.counts, hfp)
        if rows_fp is None or mask_rows is None or mask_rows == rows_fp or div(rows_fp, mask_rows) is None:
            continue
        heads = div(rows_fp, mask_rows)
        if heads != slope.counts:  # one slope per head: the rows of a batch over the mask's
            continue
        mrs = [m for m in ev.sizes(mask_rows) if not m.c[0].isdigit()] or ev.sizes(mask_rows)
        # the query count: the middle dimension's inner extent, an argument the mask's index is computed from
        inners = [(inner, words) for inner, words in _mask_inners(ev, mask_rows)
                  if re.fullmatch(r"\(int\)\((\w+)\)", inner or "")
                  and re.fullmatch(r"\(int\)\((\w+)\)", inner).group(1) in index_names]
        for mi, (mr, (inner, inner_words)) in enumerate(itertools.product(mrs[:1], inners)):
            hname = hidden.words.strip("`")
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {red}, a max and a sum of exponentials over the "
                        "row → softmax, plus a per-head ALiBi bias and a 0/1 keep-mask as -10000", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = [f"out={o.name} ({O})", f"x={x.name} ({T})", f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            if scale_words:
                b.words.append(scale_words)
            b.words.append(f"plus `{slope.name}`[head] * (k - q) and (1 - `{mask.name}`) * -10000 [{mr.words} rows], "
                           f"{inner_words} (q the row within it); __expf, the sum + 1e-6 inverted by __fdividef")
            b.template_args = [CTYPE[T], CTYPE[O], CTYPE[mask.dtype]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                           "(const float*)nullptr", _cast(mask.dtype, mask.name, True), mr.c, inner,
                           _cast(slope.dtype, slope.name, True)]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O], NBYTES[mask.dtype])}
            b.conventions = {"KT_EXPERT_GENERAL": 1, "KT_EXPERT_MASK": 1, "KT_EXPERT_ALIBI": 1}
            b.support = 14 + 2 * ev.uses(hidden) - hi - mi
            out.append(b)
    return out
