"""Per-token-group quantization: groups of a float input scaled by their absolute maximum into int8 or fp8 bytes.

Evidence: one float input, one byte output of the same count, one fp32 output of one scale per group.
Enumerated: the group size (an int argument or an expression of two), eps (a float argument, a small literal
of the body, a named constant (constexpr, #define) a maximum takes with the group's maximum), qmin/qmax arguments
or the type's range, the int8 rounding (the body's conversion first: to nearest even, toward zero, half away from
zero), whether values are divided by the scale, multiplied by its reciprocal, or multiplied by the factor qmax /
absmax computed directly (DeepGEMM's per_token_cast_to_fp8, vLLM's dynamic int8: first, and only, where the body
divides qmax by the group's maximum), the scale as computed or rounded up to a power of two
(UE8M0, DeepGEMM's block-scaled fp8: first where the body calls exp2f/ldexpf with ceilf/log2f), and the scales'
layout: one per group in order, or column-major [groups per token, tokens] (SGLang's column-major scales: first
where the body's write of the scales multiplies by an int argument, which is then the token count).

The stored scale's own type and factor (KT_EXPERT_SCALE_OUT: OpenPPL's i8i8 minmax_quantize, half(scale * up_scale)):
scales of a 16-bit float output the body writes, or fp32 scales the body's write multiplies by a float argument used
nowhere else; that argument is then the factor (no bound, no eps), 1 where there is none, and the values are still
quantized by the unmultiplied scale (row-major scales, divided or times 1 / scale, no power of two). The floor on the
scale (KT_EXPERT_SCALE_FLOOR: max(absmax / qmax, eps), OpenPPL's QTHRESHOLD) first where the body takes a maximum of
the absmax over the type's largest value and a small constant or a float argument below 1; only there.

UE8M0 scales packed four to an int32 (DeepGEMM / SGLang / vLLM ``scale_ue8m0``): instead of the fp32 scales, one
int32 output the body builds with shifts (or writes through a byte pointer), whose count is the tokens times a
token's words, cdiv(groups per token, 4) (row-major, or column-major with the tokens as columns), or the words
times a stride a little above the tokens (TMA-aligned columns). Enumerated: the groups per token (an int argument
that holds them, or one holding a token's elements over a group size), the tokens and the group size they imply,
the layouts the counts allow (column-major first where the body multiplies by the stride argument), the power of
two on the bits (first where the body builds a float from bits) or through log2f, and, for padded columns,
whether the padding columns are written 0.

The quantization range as a power of two (KT_EXPERT_SCALE_QRANGE: DeepSpeed's quantize::Params<Symmetric, q_bits>,
ZeroQuant / ZeRO++ int8 groups): int8 values multiplied by the factor 2^bits / (2 * absmax) (+absmax maps to 128,
clamped to 127), read where the body divides a constant 2^8 (a literal, a named constant, a shift of the
instantiation's template argument) by twice a value of the group's absolute maximum, or 2^7 by that value itself.
Enumerated: the stored scale 1 / factor (first where the body writes a 1 / of something to the scales) or the factor,
no eps first (an all-zero group's factor 1) where the body compares the maximum with 0, the clamp's lower bound
(-127 where the body's clamp takes it, else the type's), the rounding; before the other symmetric bindings, which are
still offered.

Asymmetric min/max quantization (KT_EXPERT_ASYM: KIVI / lmdeploy's float zero point = the group's minimum, vLLM's
azp and AWQ's integer zero point round(qmin - min / scale)): read only where the body reduces a minimum as well as a
maximum of the input (fminf/fmaxf, min/max calls or comparisons feeding a local from itself) and either subtracts a
value of the minimum alone from the input (x - min: a float zero) or adds a rounded value of the minimum (an integer
zero point); an 8-bit output (unsigned; signed only with an integer zero point), the (scale, zero) pairs either
interleaved in one fp32 buffer of twice the group count (the group size is then the input over half of it, not over
all of it) or in two buffers of the group count, the scales fp32 and the zeros of any type (which is which from what
the body writes to each: the scale from the maximum, the zero from the minimum alone or through a rounding).
Enumerated: the group size, eps (float arguments below 1, a named constant or literal a maximum takes with the
range max - min; none: 0), the rounding, divided by the scale or multiplied by 1 / scale, the zero's kind where the
body does not say. These come before the symmetric bindings, which are still offered.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter

from agent_core import expr
from agent_core.templating.experts.binding import Binding
# vLLM's least scale (min_scaling_factor) as the norm quantizers read it: the floor on the scale or on the absmax
from agent_core.templating.experts.families.quant_codebook import codebook_bindings
from agent_core.templating.experts.families.rows.norm_quant import _dynamic_floors, _dynamic_ops, _scale_names
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, SizeExpr, call_arguments,
                                                    div, feeding, flows, fp8_formats, number, prod, statements,
                                                    assignments, uncast, unparen)

ROUNDS = {0: "rounded to nearest even", 1: "rounded toward zero (a cast)", 2: "rounded half away from zero"}
# a kernel with no count of its groups at all (no size argument): the expert's launch carries it
LAUNCH_WORDS = ("groups=the launch's (no group-count argument: cdiv(groups, ROWS) blocks, the last block's groups in "
                "its dynamic shared memory size)")
UE8M0_WORDS = "scales rounded up to powers of two (UE8M0)"
# the power-of-two scales the symmetric words name apart (1 and 2 keep the words they had)
POW2_WORDS = {3: "MX scales 2^(floor(log2(absmax)) - emax of qmax), the floor from the exponent field, the biased "
                 "exponent clamped to [0, 254]",
              4: "MX scales 2^(floorf(log2f(absmax)) - emax of qmax), the biased exponent clamped to [0, 254]",
              # exponent bytes of scales rounded up (only these name the two apart)
              11: "scales rounded up to powers of two (exp2f(ceilf(log2f)))",
              12: "scales rounded up to powers of two on the bits (exponent field, + 1 with any mantissa bit)"}
RECIPS = {0: "divided by the scale", 1: "multiplied by 1 / scale", 2: "multiplied by the factor qmax / absmax",
          3: "multiplied by the factor qmax / absmax, the factor stored as the scale (1 for an all-zero group)",
          4: "times qmax, then divided by the absmax (the product first)"}
ABS_CALLS = {"fabsf", "fabs", "abs", "__habs", "__habs2"}


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


_MIN_CALLS = r"(?:std::)?(?:fminf|fmin|min|__hmin)"
_MAX_CALLS = r"(?:std::)?(?:fmaxf|fmax|max|__hmax)"


def _bound_of(ev: Evidence, args, calls: str):
    """The first of ``args`` (float arguments) the body passes whole to one of ``calls`` (a clamp's bound: the lower
    one to a max, the upper one to a min), else the first of them; None where there is none. Which argument is
    which is read from what the body does with it, never from its name."""
    passed = {re.sub(r"\s+", "", uncast(a)).strip("()") for _, xs in call_arguments(ev.body, calls) for a in xs}
    return next((a for a in args if a.name in passed), args[0] if args else None)


def _eps_first(ev: Evidence, args) -> list:
    """Float arguments for eps, those the body floors a maximum with (``fmaxf(absmax, eps)``) or adds (``absmax +
    eps``) first, else in the arguments' order; never by their names."""
    flow = flows(ev.body)
    floors = {re.sub(r"\s+", "", uncast(k)).strip("()")
              for _, xs in call_arguments(ev.body, _MAX_CALLS) if len(xs) == 2
              for k, other in (xs, xs[::-1]) if feeding(flow, other) & ABS_CALLS}
    return sorted(args, key=lambda a: not (a.name in floors or re.search(
        rf"(?<![\w.+])\+\(*{re.escape(a.name)}\b(?![\[(])|(?<![\w.]){re.escape(a.name)}\)*\+(?![+=])", ev.flat)))


def _token_counts(ev: Evidence, scales, group_size) -> list[tuple[int, SizeExpr]]:
    """Column-major scale layouts: (support, token count) for each int argument that divides the scale count
    into whole columns (not the group size). Support 0 for the argument the body's write of the scales multiplies
    by (``scales[col * tokens + token]``), -3 for the others (a layout the screening may still find)."""
    writes = re.findall(rf"\b{re.escape(scales.name)}\[([^\]]*)\]=[^=]", ev.flat)
    out = []
    for a in ev.ints():
        if not a.counts or f"(int)({a.name})" == group_size.c:
            continue
        if any(v <= 0 or n % v for v, n in zip(a.counts, scales.counts)) or a.counts == scales.counts:
            continue
        mul = any(re.search(rf"\*\(?\w*\)?{re.escape(a.name)}\b|\b{re.escape(a.name)}\*", w) for w in writes)
        out.append((0 if mul else -3, SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`")))
    return sorted(out, key=lambda t: -t[0])


def _padded_columns(ev: Evidence, x, scales) -> list[tuple[SizeExpr, SizeExpr, SizeExpr, SizeExpr]]:
    """Column-major scales whose columns are longer than the token count (DeepGEMM's TMA-aligned scales: columns of
    the tokens rounded up, the padding never written): (group size, group count, token count, column stride), each
    as the wrapper computes it, for an int argument holding the group count and one the scales' length is a
    multiple of (the stride), where the tokens (the groups over the groups per token) fall short of the stride by
    less than 64 on every size set."""
    out = []
    for g in ev.ints():
        if not g.counts or g.counts == scales.counts or div(x.counts, g.counts) is None:
            continue
        gs = [s for s in ev.sizes(div(x.counts, g.counts)) if not s.c[0].isdigit()] or \
            ev.sizes(div(x.counts, g.counts))
        for st in ev.ints():
            per_token = div(scales.counts, st.counts) if st.counts and st is not g else None
            tokens = div(g.counts, per_token) if per_token else None
            if not tokens or tokens == st.counts or any(not 0 <= s - t < 64 for t, s in zip(tokens, st.counts)):
                continue
            ts = [t for t in ev.sizes(tokens) if not t.c[0].isdigit()]
            if gs and ts:
                out.append((gs[0], SizeExpr(f"(int)({g.name})", str(g.spec.value), f"`{g.name}`"), ts[0],
                            SizeExpr(f"(int)({st.name})", str(st.spec.value), f"`{st.name}`")))
    if out:
        return out
    # no group-count argument (TurboMind's quant_symm_row: tokens, the row length and the scales' leading dimension,
    # the group size a constant): the tokens an int argument the stride exceeds by less than 64, the group size the
    # input over the tokens' groups (an argument or a constant), the group count the input's elements over it
    totals = [t for t in ev.sizes(x.counts) if not t.c[0].isdigit()]
    if not totals:
        return out
    total = totals[0].c.replace("(int)(", "(long long)(")
    for st in ev.ints():
        if not st.counts or st.counts == scales.counts or div(scales.counts, st.counts) is None:
            continue
        per_token = div(scales.counts, st.counts)
        for t in ev.ints():
            if t is st or not t.counts or t.counts == st.counts or \
                    any(not 0 <= s - v < 64 for v, s in zip(t.counts, st.counts)):
                continue
            gs_v = div(x.counts, tuple(a * b for a, b in zip(t.counts, per_token)))
            if not gs_v or any(v < 2 for v in gs_v):
                continue
            gs = [s for s in ev.sizes(gs_v) if not s.c[0].isdigit()] or ev.sizes(gs_v)
            if gs:
                groups = SizeExpr(f"(int)(({total}) / ({gs[0].c}))", f"({totals[0].spec}) / ({gs[0].spec})",
                                  f"{totals[0].words} / {gs[0].words}")
                out.append((gs[0], groups, SizeExpr(f"(int)({t.name})", str(t.spec.value), f"`{t.name}`"),
                            SizeExpr(f"(int)({st.name})", str(st.spec.value), f"`{st.name}`")))
    return out


def _groups_per_token(ev: Evidence, x, gs_fp: tuple | None, gs: SizeExpr) -> tuple[str, str, tuple] | None:
    """(C, words, values) of one token's group count where an int argument holds a token's elements (the hidden
    size) and the input is a whole number of such tokens: the argument over the group size."""
    if gs_fp is None:
        return None
    for a in ev.ints():
        if a.counts and f"(int)({a.name})" != gs.c and div(a.counts, gs_fp) and div(x.counts, a.counts) \
                and all(v > 1 for v in div(x.counts, a.counts) or ()):
            size = gs.c if gs.c[0].isdigit() else gs.words.strip("`")
            return f"(int)({a.name}) / ({gs.c})", f"`{a.name} / {size}`", div(a.counts, gs_fp)
    return None


def _floors(ev: Evidence) -> list[tuple[str, str]]:
    """eps read from a named constant (``constexpr float kAmaxFloor = 1e-4f;``, ``#define MIN_AMAX 1e-6f``): a small
    positive number (at most 1e-3, as the body's eps literals) that a maximum (fmaxf, fmax, max) takes together with
    a value computed from an absolute value, the group's maximum, in either order. (C text, words) each, the value
    written as its literal (the shortest decimal of the double: the constant's own digits up to 15 of them)."""
    flow = flows(ev.body)
    out = []
    maxima = set()  # the names a maximum takes beside an absolute value: the group's running maximum
    for _, args in call_arguments(ev.body, r"(std::)?(fmaxf|fmax|max)"):
        if len(args) != 2:
            continue
        for k, other in (args, args[::-1]):
            if not feeding(flow, other) & ABS_CALLS:
                continue
            if re.fullmatch(r"[A-Za-z_]\w*", k.strip()):
                maxima.add(k.strip())
            # a name set to one number and computed from nothing else (a local the body also assigns, the running
            # maximum started at a literal, is no constant)
            v = number(k, ev.constants) if re.fullmatch(r"[A-Za-z_]\w*", k) and not flow.get(k) else None
            if v is None or not 0 < v <= 1e-3:
                continue
            c = (f"(float)({v!r}f)", f"eps=`{k}` ({v!r})")
            if c not in out:
                out.append(c)
    # the running maximum started at such a number (DeepEP's `float amax = kFP8Margin;` then `amax = fmaxf(amax,
    # fabsf(v))`): the group's maximum floored by it, as fmaxf(absmax, eps) floors it
    # (a literal start is among the body's literals already)
    for m in re.finditer(r"\b(?:const\s+)?(?:float|double)\s+([A-Za-z_]\w*)\s*=\s*([A-Za-z_]\w*)\s*[,;]", ev.body):
        name, k = m.groups()
        v = number(k, ev.constants) if not flow.get(k) else None
        if name not in maxima or v is None or not 0 < v <= 1e-3:
            continue
        c = (f"(float)({v!r}f)", f"eps=`{k}` ({v!r}), the maximum started at it")
        if c not in out:
            out.append(c)
    return out


def _factor(ev: Evidence, qmax, Q: str, text: str | None = None) -> bool:
    """Whether the body (or ``text`` of it) divides the type's largest value (a literal, a named constant, or the qmax
    argument) by something that is no constant, the group's maximum: the values are quantized by the factor qmax /
    absmax (DeepGEMM's ``x * (448 / amax)``, vLLM's dynamic int8 ``127 / absmax``), not by the scale."""
    return bool(_factor_dens(ev, qmax, Q, text))


def _factor_dens(ev: Evidence, qmax, Q: str, text: str | None = None) -> set[str]:
    """What ``_factor`` finds the type's largest value divided by (the names)."""
    dens = set()
    top = {"int8_t": 127.0, "__nv_fp8_e5m2": 57344.0}.get(Q, 448.0)
    again = Counter(t for t, _ in assignments(ev.body))  # a running maximum set to 0 first is no constant
    for num, den in re.findall(r"(?<![\w.])\(?((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|[A-Za-z_]\w*)\)?/"
                               r"\(?(?:\(float\))?\(?([A-Za-z_]\w*)", ev.flat if text is None else text):
        if (den in ev.constants and again[den] < 2) or (qmax is not None and den == qmax.name):
            continue
        if num.startswith("return") and number(num, ev.constants) is None and num != "return":
            num = num[len("return"):]  # a quotient returned: `returnqmax/absmax` in the whitespace-free body
        if (qmax is not None and num == qmax.name) or number(num, ev.constants) == top:
            dens.add(den)
    return dens


def _product_first(ev: Evidence, qmax, Q: str) -> bool:
    """Whether the body multiplies a value by the type's largest value and then divides by the group's maximum, left
    to right (``x * MAX_VALUE / amax``: (x * 448) / amax, not x * (448 / amax)): a ``_factor`` division whose
    numerator is itself the right operand of a product, with no parenthesis between."""
    top = {"int8_t": 127.0, "__nv_fp8_e5m2": 57344.0}.get(Q, 448.0)
    dens = _factor_dens(ev, qmax, Q)
    for num, den in re.findall(r"(?<=\*)((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?|[A-Za-z_]\w*)/\(?(?:\(float\))?\(?"
                               r"([A-Za-z_]\w*)", ev.flat):
        if (qmax is not None and num == qmax.name) or number(num, ev.constants) == top:
            if den in dens:
                return True
    return False


def _factor_stored(ev: Evidence, sc, qmax, Q: str) -> bool:
    """Whether what the body writes to the scales is the factor qmax / absmax itself (CTranslate2's ``scale = max !=
    0 ? 127 / max : 1; scales[row] = scale``): a written value, or the value of the local written, that divides the
    type's largest value by the group's maximum."""
    values: dict[str, list[str]] = {}
    for t, v in assignments(ev.body):
        values.setdefault(t, []).append(re.sub(r"\s+", "", v))
    for w in re.findall(rf"\b{re.escape(sc.name)}\)?\[[^\]]*\]=(?!=)([^;]*)", ev.flat):
        if any(_factor(ev, qmax, Q, t) for t in [w] + values.get(unparen(w), [])):
            return True
    return False


def _numerics(ev: Evidence, q, skip: tuple[str, ...] = ()):
    """What both scale kinds read alike: qmin and qmax (arguments or the type's), eps (arguments, then the body's
    small literals, then named floors; the floors before an assumed 1e-10 where there is none of those), the output
    type, the int8 roundings in order, divided by the scale or multiplied by 1 / scale in order. The float arguments
    named in ``skip`` (the stored scale's factor) are none of these."""
    fl = [a for a in ev.floats() if a.name not in skip]
    # a float argument's values say what it is: negative, the lower bound; at least 1, the upper bound; else eps
    # (among arguments of one kind, the one a clamp or a floor takes first, else the first)
    neg = [a for a in fl if a.counts and all(v is not None and v < 0 for v in a.counts)]
    big = [a for a in fl if a.counts and all(v is not None and v >= 1 for v in a.counts)]
    qmin = _bound_of(ev, neg, _MAX_CALLS)
    qmax = _bound_of(ev, big, _MIN_CALLS)
    rest = [a for a in fl if a not in (qmin, qmax)]
    eps_c = [(f"(float)({a.name})", f"eps=`{a.name}`") for a in _eps_first(ev, rest)]
    eps_c += [(f"(float)({v if v[-1] in 'fF' else v + 'f'})", f"eps={v}") for v in ev.literals]
    # a named constant the group's maximum is floored at: after the arguments and literals (their bindings keep
    # their places), before the assumed eps where there is none
    eps_c = eps_c + _floors(ev) if eps_c else _floors(ev) + [("1e-10f", "eps=1e-10 (assumed)")]
    Q = "int8_t" if q[0].dtype == "i8" else "uint8_t"
    kind = "int8" if Q == "int8_t" else "fp8 e4m3 (bytes)"
    if Q == "uint8_t" and fp8_formats(ev, q[0]) == ["__nv_fp8_e5m2"]:  # only e5m2 shows (KT_EXPERT_FP8_E5M2)
        Q, kind = "__nv_fp8_e5m2", "fp8 e5m2"
    if Q == "int8_t":
        if ev.has("__float2int_rn", "rintf", "lrintf", "nearbyintf", "__float2int_rn") or ev.mentions(r"cvt\.rni"):
            rounds = [0, 2, 1]
        elif ev.has("roundf", "lroundf"):
            rounds = [2, 0, 1]
        else:
            rounds = [1, 0, 2]
    else:
        rounds = [0]
    recip_first = ev.mentions(r"1\.0?f?/") or ev.mentions(r"\*inv") or ev.mentions(r"\*\(1\.")
    recips = [1, 0] if recip_first else [0, 1]
    return qmin, qmax, eps_c, Q, kind, rounds, recips


def _group_count(ev: Evidence, e, b: Binding, x, gs: SizeExpr, gs_v: tuple | None, rows_xs: list, totals: list,
                 total: str | None, free: bool = True) -> tuple[str, str, bool, bool]:
    """The group count a binding passes, symmetric or asymmetric: (C, words, from the grid, from the launch). An int
    argument that holds it, else the input's elements over the group size (any block shape stays free), else (only
    where ``free``: row-major scales) the grid over a token's groups (KT_EXPERT_GROUPS_FROM_GRID: ROWS at most those)
    or the launch (KT_EXPERT_GROUPS_FROM_LAUNCH: any ROWS), else the grid itself with one group a block. Sets the
    binding's fixed ROWS where the count bounds them."""
    if rows_xs:
        return rows_xs[0].c, f"groups={rows_xs[0].words}", False, False
    if totals:
        return f"(int)(({total}) / ({gs.c}))", f"groups={totals[0].words} / {gs.words}", False, False
    if free and "KT_EXPERT_GROUPS_FROM_GRID" in e.conventions and \
            (per := _groups_per_token(ev, x, gs_v, gs)) is not None:
        # no count of all the groups, but one of a token's: the expert reads the count back from its grid
        b.fixed["ROWS"] = [r for r in e.params["ROWS"].values if r <= min(per[2])]
        return per[0], f"groups=the grid, {per[1]} a token", True, False
    if free and "KT_EXPERT_GROUPS_FROM_LAUNCH" in e.conventions:
        return "0", LAUNCH_WORDS, False, True  # the count comes back from the launch: any ROWS
    b.fixed["ROWS"] = [1]
    return "(int)gridDim.x", "groups=the grid (no group-count argument)", False, False


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get("per_token_group_quant")
    long = lib.get("per_token_group_quant_long")
    # a 4-bit codebook (KT_EXPERT_CODEBOOK, quant_codebook.py): a byte output of half the input's count, which no
    # other reading takes
    codebook = codebook_bindings(ev, e)
    asym = _asym_bindings(ev, e, long if long is not None and "KT_EXPERT_ASYM" in long.conventions else None) \
        if e is not None and "KT_EXPERT_ASYM" in e.conventions else []
    return codebook + asym + _symmetric_bindings(ev, e)


def _floor_pow2(ev: Evidence) -> list[int]:
    """OCP MX scales (KT_EXPERT_SCALE_POW2 3 and 4): the body takes floor(log2) of the group's maximum and makes a
    power of two of it, never rounding up: floorf with log2f (4 first), or ilogbf / frexpf / the exponent field of a
    float's bits (a shift by 23 of its bits: 3 first), with a power of two made by exp2f / ldexpf or by bits shifted
    back by 23 or stored as a byte. None where the body rounds up (ceilf, a mantissa mask: UE8M0's ceil, DeepGEMM's
    fast_log2_ceil) or divides by the type's largest value before the logarithm (absmax / 448)."""
    if ev.has("ceilf", "ceil") or ev.mentions(r"(?i)0x0*7fffff\b|8388607|\(1u?<<23\)-1"):
        return []
    logf = ev.has("floorf", "floor") and ev.has("log2f", "log2")
    bits = ev.has("ilogbf", "ilogb", "frexpf", "frexp") or (
        ev.mentions(r">>\(?23\b") and (ev.has("__float_as_uint", "__float_as_int") or
                                       ev.mentions(r"reinterpret_cast<(const)?u?int(32_t)?\*>")))
    if not (ev.has("exp2f", "exp2", "ldexpf", "ldexp") or ev.mentions(r"<<\(?23\b")):
        return []
    return [4, 3] if logf else [3, 4] if bits else []


def _upper_bound(ev: Evidence, e, ins) -> ArgUse | None:
    """vLLM's scale_ub (dynamic_per_token_scaled_fp8_quant): one of the two float inputs a one-element fp32 input the
    body takes a minimum with (``fminf(block_max, *scale_ub)``), where the expert has KT_EXPERT_SCALE_UB."""
    if e is None or "KT_EXPERT_SCALE_UB" not in e.conventions:
        return None
    ones = [a for a in ins if a.dtype == "f32" and a.counts and all(c == 1 for c in a.counts)]
    if len(ones) != 1 or len(ins) != 2:
        return None
    n = ones[0].name
    for _, args in call_arguments(ev.body, r"(?:std::)?(?:fminf|fmin|min)"):
        if len(args) == 2 and any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", a) for a in args):
            return ones[0]
    return None


def _byte_scales(ev: Evidence, e, x, outs) -> tuple[list, list] | None:
    """(q, scales) where the kernel has two byte outputs: the quantized values (the input's count) and one uint8
    buffer of fewer elements, the biased exponent bytes of power-of-two scales (E8M0 / UE8M0, KT_EXPERT_SCALE_BYTES);
    None otherwise."""
    if e is None or "KT_EXPERT_SCALE_BYTES" not in e.conventions or len(outs) != 2 or not x.counts:
        return None
    full = [a for a in outs if a.counts == x.counts]
    rest = [a for a in outs if a.dtype == "u8" and a.counts and a.counts != x.counts]
    return (full, rest) if len(full) == 1 and len(rest) == 1 else None


def _scale_factor(ev: Evidence, sc) -> ArgUse | None:
    """KT_EXPERT_SCALE_OUT's factor: the float argument the value the body writes to the scales is multiplied by
    (``scale_output[row] = __float2half(scale * up_scale)``: OpenPPL's up_scale "for precision"), directly or through
    a local it writes, and that the body uses nowhere else (no bound, no eps, nothing the values are quantized by).
    None where there is none."""
    values: dict[str, list[str]] = {}
    for t, v in assignments(ev.body):
        values.setdefault(t, []).append(re.sub(r"\s+", "", v))
    texts = []
    for w in re.findall(rf"\b{re.escape(sc.name)}\)?\[[^\]]*\]=(?!=)([^;]*)", ev.flat):
        texts.append(w)
        for n in set(re.findall(r"\b[A-Za-z_]\w*\b", w)):
            texts += values.get(n, [])
    for a in ev.floats():
        n = re.escape(a.name)
        use = rf"(?<![\w.]){n}(?![\w\[(])"
        times = rf"\*\(*(?:\(float\))?{n}(?![\w\[(])|(?<![\w.]){n}\)*\*(?![*=])"
        if any(re.search(times, t) for t in texts) and \
                len(re.findall(use, ev.flat)) <= sum(len(re.findall(use, t)) for t in texts):
            return a
    return None


def _scale_floor(ev: Evidence, qmax, Q: str, skip: tuple[str, ...] = ()) -> bool:
    """KT_EXPERT_SCALE_FLOOR's reading: eps floors the scale, not the absmax. A maximum (fmaxf, fmax, max) of a value
    of the group's absolute maximum divided by the type's largest value (a literal, a named constant, the qmax
    argument) and a small positive constant or a float argument below 1 (``max(absmax / INT8_QLEVEL, QTHRESHOLD)``)."""
    flow = flows(ev.body)
    top = {"int8_t": 127.0, "__nv_fp8_e5m2": 57344.0}.get(Q, 448.0)
    small = {a.name for a in ev.floats() if a.name not in skip and a.counts and
             all(v is not None and 0 < v < 1 for v in a.counts)}
    for _, args in call_arguments(ev.body, _MAX_CALLS):
        if len(args) != 2:
            continue
        for k, other in (args, args[::-1]):
            k = unparen(uncast(re.sub(r"\s+", "", k)))
            c = number(k, ev.constants) if re.fullmatch(r"[\w.+-]+", k) and not flow.get(k) else None
            if not (k in small or (c is not None and 0 < c <= 1e-3)):
                continue
            m = re.fullmatch(r"\(*(.+?)\)*/\(*(?:\(float\))?([\w.]+)\)*", unparen(uncast(re.sub(r"\s+", "", other))))
            if m is None or not feeding(flow, m.group(1)) & ABS_CALLS:
                continue
            if number(m.group(2), ev.constants) == top or (qmax is not None and m.group(2) == qmax.name):
                return True
    return False


def _symmetric_bindings(ev: Evidence, e, scale_out: bool | None = None) -> list[Binding]:
    """The symmetric bindings. ``scale_out`` (KT_EXPERT_SCALE_OUT): None reads it from the body (16-bit scales, or
    fp32 scales the body multiplies by a factor argument: those bindings first, then the fp32 ones without the
    factor); True or False binds with or without it."""
    ins = ev.bufs("in", FLOATS)
    q = [a for a in ev.bufs("out") if a.dtype in ("i8", "u8")]
    sc = ev.bufs("out", ("f32",))
    byte_scales = False
    if not sc and len(ins) == 1 and (split := _byte_scales(ev, e, ins[0], q)) is not None:
        (q, sc), byte_scales = split, True
    # scales stored in a 16-bit float type (KT_EXPERT_SCALE_OUT), written by the body
    if not sc and e is not None and "KT_EXPERT_SCALE_OUT" in e.conventions and scale_out is not False:
        sc = [a for a in ev.bufs("out", ("f16", "bf16")) if a.written]
        scale_out = True if sc else None
    mult = _scale_factor(ev, sc[0]) if len(sc) == 1 and e is not None and "KT_EXPERT_SCALE_OUT" in e.conventions \
        else None
    if scale_out is None and mult is not None and not byte_scales:  # fp32 scales times a factor: the factor first
        rest = _symmetric_bindings(ev, e, False)
        for b in rest:
            b.support -= 10
        return _symmetric_bindings(ev, e, True) + rest
    if not scale_out or byte_scales:
        scale_out, mult = False, None
    skip = (mult.name,) if mult is not None else ()
    ub = _upper_bound(ev, e, ins) if len(ins) == 2 else None  # vLLM's nullable scale_ub (KT_EXPERT_SCALE_UB)
    if ub is not None:
        ins = [a for a in ins if a is not ub]
    if e is None or len(ins) != 1 or len(q) != 1 or len(ev.bufs()) != 3 + (ub is not None):
        return []
    x = ins[0]
    if not sc and "KT_EXPERT_SCALE_PACKED" in e.conventions:
        return _packed_bindings(ev, e, x, q[0])
    if len(sc) != 1:
        return []
    if not x.counts or x.counts != q[0].counts or not sc[0].counts:
        return []
    gs_all = [s for s in ev.sizes(div(x.counts, sc[0].counts)) if not s.c[0].isdigit()] or \
        ev.sizes(div(x.counts, sc[0].counts))
    padded = _padded_columns(ev, x, sc[0]) if "KT_EXPERT_SCALE_COLUMNS" in e.conventions and not byte_scales else []
    # rows the group size does not divide, the last group of each shorter (KT_EXPERT_ROW_TAIL): where no whole
    # number of elements makes a group on every size set
    tail = _row_tail(ev, x, sc[0]) if not gs_all and not padded and "KT_EXPERT_ROW_TAIL" in e.conventions \
        and not byte_scales and ub is None and not scale_out else None
    if tail is not None:
        gs_all = [tail[2]]
    if not gs_all and not padded:
        return []
    if scale_out and (len(ins) != 1 or len(ev.bufs()) != 3):
        return []  # a 16-bit or multiplied scale: symmetric row-major scales only (no upper bound)
    qmin, qmax, eps_c, Q, kind, rounds, recips = _numerics(ev, q, skip)
    # the factor qmax / absmax (KT_EXPERT_SCALE_RECIP 2): first, and only, where the body divides qmax by the group's
    # maximum (offered to every kernel, it would add a binding to kernels whose recorded screenings CI replays)
    factor = _factor(ev, qmax, Q)
    recips = [2] + recips if factor else recips
    if factor and _product_first(ev, qmax, Q):  # `x * MAX / amax`: (x * qmax) / absmax, first
        recips = [4] + recips
    if factor and _factor_stored(ev, sc[0], qmax, Q):
        # the factor itself stored (KT_EXPERT_SCALE_RECIP 3): first; no eps first where the body compares the
        # maximum with 0 (an all-zero group's factor 1)
        recips = [3] + recips
        flow = flows(ev.body)

        def the_max(n: str) -> bool:  # the group's maximum: computed from an absolute value, or what qmax is divided by
            return bool(feeding(flow, n) & ABS_CALLS) or n in _factor_dens(ev, qmax, Q)

        if any(the_max(m.group(1) or m.group(2)) for m in re.finditer(
                r"([A-Za-z_]\w*)(?:\[[^\]]*\])?\)?[!=]=\(?0(?:\.0*)?[fF]?\)?(?![\w.])|"
                r"(?<![\w.])0(?:\.0*)?[fF]?[!=]=\(?([A-Za-z_]\w*)", ev.flat)):
            eps_c = [("0.f", "no eps (an all-zero group: the factor 1)")] + \
                [c for c in eps_c if not c[1].endswith("(assumed)")][:2]
    pow2s = [1, 0] if ev.has("exp2f", "ldexpf", "exp2") and ev.has("ceilf", "log2f", "ilogbf", "frexpf") else [0, 1]
    # OCP MX floor scales where the body says so (fp8 only), with no eps but 0 (an all-zero group: the byte 0) first;
    # exponent bytes hold a power of two only: rounded up (on the bits first where the body reads a float's bits)
    floors = _floor_pow2(ev) if Q in ("uint8_t", "__nv_fp8_e5m2") else []
    if floors:
        pow2s = floors
        eps_c = [("0.f", "no eps (an all-zero group: the biased exponent 0)")] + \
            [c for c in eps_c if not c[1].endswith("(assumed)")][:2]
    elif byte_scales:
        bits = ev.has("__uint_as_float", "__int_as_float", "__float_as_uint", "__float_as_int") or \
            ev.mentions(r"(?i)0x0*7fffff\b|8388607")
        pow2s = [2, 1] if bits else [1, 2]
    # (KT_EXPERT_SCALE_UB, the least scale's C, its words) per eps: the body's floor on the scale (vLLM's
    # min_scaling_factor) or on the absmax where there is an upper bound; 0 (eps on the absmax) where there is none
    modes = [(0, c, w) for c, w in eps_c[:3]]
    if ub is not None:
        O = "__nv_fp8_e4m3" if Q == "uint8_t" else Q
        modes = [(mode, c, w) for mode, c, w, _ in _dynamic_floors(ev, O)]
        # divided by the token's scale or times its reciprocal: the body's use of the local it stores, first
        recips = [0 if op == 2 else 1 for op, _ in _dynamic_ops(ev, _scale_names(ev, sc[0]))]
        pow2s, floors = [0], []
    # eps on the scale (KT_EXPERT_SCALE_FLOOR 1: max(absmax / qmax, eps)) first where the body floors the absmax over
    # qmax, then on the absmax; only there (offered to every kernel, it would add bindings to kernels whose recorded
    # screenings CI replays)
    eps_on = [1, 0] if ub is None and not byte_scales and not floors and "KT_EXPERT_SCALE_FLOOR" in e.conventions \
        and _scale_floor(ev, qmax, Q, skip) else [0]
    if scale_out:  # symmetric row-major scales, the scale absmax / qmax as computed
        recips = [r for r in recips if r < 2] or [0]
        pow2s, padded = [0], []
    columns = _token_counts(ev, sc[0], gs_all[0]) if gs_all and not byte_scales and ub is None and not scale_out \
        and tail is None else []
    # row-major first, unless the body's write of the scales multiplies by a token count; then padded columns
    # (their own group size and count)
    # (support, column-major token count or None, padded columns or None)
    layouts = ([(-3 if columns and columns[0][0] == 0 else 0, None, None)] + [(sup, t, None) for sup, t in columns]
               if gs_all else []) + [(0, None, pad) for pad in padded if ub is None]
    qm = f"kt::QuantOut<{Q}>"
    # the group count: an argument that holds it, else the elements over the group size, else the grid
    rows_xs = ev.held(sc[0].counts)
    totals = [t for t in ev.sizes(x.counts) if not t.c[0].isdigit()]
    total = totals[0].c.replace("(int)(", "(long long)(") if totals else None
    # the scale's encodings: (support, KT_EXPERT_SCALE_RECIP, KT_EXPERT_SCALE_POW2, further conventions, words)
    encodings = [(-ci - 2 * pi, recip, pow2, {}, [RECIPS[recip]] + (
        [POW2_WORDS.get(pow2 + 10 * byte_scales, POW2_WORDS.get(pow2, UE8M0_WORDS))] if pow2 else []))
        for (ci, recip), (pi, pow2) in itertools.product(enumerate(recips), enumerate(pow2s))
        if not (recip >= 2 and pow2)]  # a power-of-two scale is not absmax / qmax: its values take 1 / scale (exact)
    # readings: (support, the reason's words before the store, eps modes, encodings, qmin and qmax as (C, words));
    # DeepSpeed's quantization range (KT_EXPERT_SCALE_QRANGE) first where the body computes it
    readings = [(20, "", modes, encodings,
                 (f"(float)({qmin.name})", f"qmin={qmin.name}") if qmin else (f"{qm}::qmin", "qmin of the type"),
                 (f"(float)({qmax.name})", f"qmax={qmax.name}") if qmax else (f"{qm}::qmax", "qmax of the type"))]
    if Q == "int8_t" and not byte_scales and "KT_EXPERT_SCALE_QRANGE" in e.conventions and not scale_out:
        readings = _qrange_readings(ev, sc[0], eps_c) + readings
    S = CTYPE[sc[0].dtype]
    # the scale's division written as PTX div.full.f32 (Triton's fp32 division, approximate): the expert divides so
    div_full = "KT_EXPERT_SCALE_DIV" in e.conventions and re.search(r"\bdiv\.full\.f32\b", ev.body) is not None
    store = "one biased exponent byte per group" if byte_scales else \
        f"one {'fp32' if S == 'float' else 'fp16' if sc[0].dtype == 'f16' else 'bf16'} scale per group"
    if scale_out and mult is not None:
        store += f" times `{mult.name}`"
    out = []
    for base, what, eps_modes, encs, (qmin_c, qmin_w), (qmax_c, qmax_w) in readings:
        combos = itertools.product(enumerate(gs_all[:2] or [None]), enumerate(eps_modes), enumerate(rounds), encs,
                                   layouts, enumerate(eps_on))
        for (gi, gs), (ei, (ub_mode, eps, eps_words)), (ri, rnd), (csup, recip, pow2, conv, enc_words), \
                (lsup, tokens, pad), (fi, on_scale) in combos:
            if on_scale and (what or recip >= 2 or pow2):
                continue  # the floor on the scale: of the scale absmax / qmax only
            if pad is not None:
                if gi:
                    continue  # a padded layout brings its own group size
                gs, groups, tokens, stride = pad
            elif gs is None:
                continue
            b = Binding(e, 0.85, f"groups of `{gs.words.strip('`')}` elements: absolute maximum (fabsf, "
                        f"max reduction), {what}{store}, {kind} output → per-token-group "
                        "quantization", ev.kernel.name)
            from_grid = from_launch = False
            b.sizes = {"group_size": gs.spec, "rows": sc[0].spec.size if pad is None else groups.spec}
            if pad is not None:
                rows, rows_words = groups.c, f"groups={groups.words}"
            elif tail is not None:  # every group of every row: tokens * cdiv(row_len, group_size)
                row_len, tok = tail[0], tail[1]
                rows = f"({tok.c}) * ((({row_len.c}) + ({gs.c}) - 1) / ({gs.c}))"
                rows_words = (f"groups={tok.words} rows of {row_len.words}, each cut into groups of {gs.words} (the "
                              "last perhaps shorter)")
            else:
                rows, rows_words, from_grid, from_launch = _group_count(
                    ev, e, b, x, gs, div(x.counts, sc[0].counts), rows_xs, totals, total, tokens is None)
            b.template_args = [CTYPE[x.dtype], Q] + ([S] if scale_out else [])
            b.call_args = [_cast(x.dtype, x.name, True), f"({Q}*)({q[0].name})",
                           f"({S if scale_out else 'float'}*)({sc[0].name})", gs.c, rows, eps, qmin_c, qmax_c]
            b.defines = {"KT_EXPERT_ROUND": rnd}
            b.conventions = {"KT_EXPERT_SCALE_RECIP": recip, "KT_EXPERT_SCALE_POW2": pow2,
                             "KT_EXPERT_SCALE_COLUMNS": 2 if pad else int(tokens is not None), **conv}
            if on_scale:
                b.conventions["KT_EXPERT_SCALE_FLOOR"] = 1
            if div_full and recip < 2 and not pow2 and not on_scale and not ub_mode and not what:
                b.conventions["KT_EXPERT_SCALE_DIV"] = 1  # the body's own division instruction
            if scale_out:
                b.conventions["KT_EXPERT_SCALE_OUT"] = 1
                b.call_args.append(f"(float)({mult.name})" if mult is not None else "1.f")
            if Q == "__nv_fp8_e5m2":
                b.conventions["KT_EXPERT_FP8_E5M2"] = 1
            if ub_mode:
                b.conventions["KT_EXPERT_SCALE_UB"] = ub_mode
                b.call_args.append(f"(const float*)({ub.name})")
            if byte_scales:
                b.conventions["KT_EXPERT_SCALE_BYTES"] = 1
            if from_grid:
                b.conventions["KT_EXPERT_GROUPS_FROM_GRID"] = 1
            if from_launch:
                b.conventions["KT_EXPERT_GROUPS_FROM_LAUNCH"] = 1
            if tokens is not None:
                b.call_args.append(tokens.c)
            if pad is not None:
                b.call_args.append(stride.c)
            if tail is not None:  # the row length last
                b.conventions["KT_EXPERT_ROW_TAIL"] = 1
                b.call_args.append(tail[0].c)
            b.consts = {"ESIZE": NBYTES[x.dtype]}
            b.words = [f"x={x.name}", f"q={q[0].name} ({kind})",
                       f"scales={sc[0].name}" + (" (biased exponent bytes)" if byte_scales else "") + (
                           f" ({S}(scale * {mult.name if mult is not None else '1'}), to nearest even)"
                           if scale_out else ""),
                       f"group_size={gs.words}", rows_words] + (
                [f"absmax bounded by *{ub.name} (nullable)"] if ub_mode else []) + [eps_words] + (
                ["eps floors the scale: max(absmax / qmax, eps)"] if on_scale else []) + [qmin_w, qmax_w] + (
                [ROUNDS[rnd]] if Q == "int8_t" else []) + enc_words + (
                [f"column-major scales [groups per token, tokens={tokens.words}]"] if tokens and not pad else []) + (
                [f"column-major scales [groups per token, columns of {stride.words}, tokens={tokens.words}]"]
                if pad else []) + (["the scale divided by div.full.f32"] if b.conventions.get("KT_EXPERT_SCALE_DIV")
                                   else [])
            b.support = base - 4 * gi - 3 * ei - 2 * ri + csup + lsup - 5 * fi
            out.append(b)
            if scale_out and mult is None and recip == 0 and x.dtype in ("f16", "bf16"):
                out.append(_quantized_by_the_stored_scale(ev, b, x.dtype))
    return out


def _row_tail(ev: Evidence, x, sc) -> tuple[SizeExpr, SizeExpr, SizeExpr] | None:
    """(row length, token count, group size) where the input is rows of a length some group size does not divide on
    every size set and the scales hold one a group of each row, the last shorter: x = tokens * row_len and scales =
    tokens * cdiv(row_len, group_size) on every size set, row_len % group_size != 0 on one at least (FastDeploy's
    per-token-per-block fp8 over a hidden size of 2001 in groups of 128). The row length an int argument, the token
    count one (or a size the arguments make), the group size an int argument or a power of two the family uses
    (PACKED_GROUP_SIZES); the first fit in the arguments' order, None where none fits."""
    if not x.counts or not sc.counts:
        return None
    ints = [a for a in ev.ints() if a.counts and all(v > 1 for v in a.counts)]
    group_sizes = [(a.counts, ev.sizes(a.counts)[0]) for a in ints if ev.sizes(a.counts)]
    group_sizes += [((g,) * len(x.counts), SizeExpr(str(g), str(g), str(g))) for g in PACKED_GROUP_SIZES]
    for a in ints:
        tokens = div(x.counts, a.counts)
        if tokens is None or not ev.sizes(a.counts):
            continue
        toks = ev.sizes(tokens)
        if not toks:
            continue
        for gv, gs in group_sizes:
            if gv == a.counts or any(g > r for g, r in zip(gv, a.counts)):
                continue
            if all(r % g == 0 for r, g in zip(a.counts, gv)):
                continue  # every row a whole number of groups: the plain reading's
            if tuple(t * -(-r // g) for t, r, g in zip(tokens, a.counts, gv)) == sc.counts:
                return ev.sizes(a.counts)[0], toks[0], gs
    return None


def _quantized_by_the_stored_scale(ev: Evidence, b: Binding, T: str) -> Binding:
    """The 16-bit-scales binding ``b`` with the values quantized by the scale as stored and the quotient rounded to
    T before the integer rounding (KT_EXPERT_SCALE_OUT 2: PyTorch's fp16 tensor arithmetic, ``(x / scale).round()``,
    SmoothQuant's torch-int); ahead of ``b`` where the body converts a quotient to T (``__float2half(x / sc)``)."""
    quotient = re.search(r"(?:__float2half(?:_rn)?|__float2bfloat16(?:_rn)?|__half|__nv_bfloat16)\([^;]*?/", ev.flat)
    b2 = b.copy()
    b2.conventions["KT_EXPERT_SCALE_OUT"] = 2
    b2.words.append(f"values divided by the stored scale, the quotient rounded to {T} before the integer rounding")
    b2.support = b.support + (1 if quotient else -1)
    return b2


# ----------------------------------------------------------------------------- the quantization range 2^bits
QRANGE_WORDS = {1: "multiplied by the factor 2^bits / (2 * absmax) (the quantization range as a power of two, 1 for "
                   "an all-zero group), stored 1 / factor",
                2: "multiplied by the factor 2^bits / (2 * absmax) (the quantization range as a power of two, 1 for "
                   "an all-zero group), the factor stored"}
_CMP_ZERO = r"==\(?0(?:\.0*)?[fF]?\)?(?![\w.])|(?<![\w.])0(?:\.0*)?[fF]?=="


def _body_values(ev: Evidence) -> dict[str, float]:
    """The numbers the names of a constant expression of the body stand for: the file's constants, the kernel's
    non-type template parameters as the instantiation gives them (the spec's template arguments, else those its
    launches name), and the body's locals assigned once, to a constant expression of those (``constexpr int32_t
    q_max = (1 << (q_bits - 1)) - 1;``)."""
    once: dict[str, list[str]] = {}
    for target, value in assignments(ev.body):
        once.setdefault(target, []).append(value)
    # a local the body sets again (a running maximum started at 0) is no constant
    vals = {k: v for k, v in ev.constants.items() if len(once.get(k, ())) < 2}
    targs = list(ev.spec.template_args or [])
    if not targs:
        named = {tuple(a.text for a in site.template_args) for site in ev.kernel.launch_sites if site.template_args}
        targs = list(next(iter(named))) if len(named) == 1 else []
    for tp, a in zip(ev.kernel.template_params, targs):
        if tp.kind != "type" and (v := _const(a, vals)) is not None:
            vals[tp.name] = v
    for _ in range(3):  # a local of locals
        for n, vs in once.items():
            if len(vs) == 1 and n not in vals and (v := _const(vs[0], vals)) is not None:
                vals[n] = v
    return vals


def _const(text: str, vals: dict[str, float]) -> float | None:
    """The value of a constant expression of numbers and known names (casts dropped; + - * / << >> and
    parentheses), None where it is anything else."""
    t = re.sub(r"\s+", "", uncast(text))
    if not t or not re.fullmatch(r"[\w.()+\-*/<>]+", t) or re.search(r"[<>](?![<>])", re.sub(r"<<|>>", "", t)):
        return None
    t = re.sub(r"(?<=[\d.])[fFuUlL]+\b", "", t)
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", t))
    if not names <= set(vals):
        return None
    try:
        return float(expr.evaluate(t, {n: int(vals[n]) if float(vals[n]).is_integer() else vals[n] for n in names}))
    except Exception:
        return None


def _operand_before(flat: str, i: int) -> str:
    """The operand that ends just before ``flat[i]``: a parenthesized group with the cast or call name before it,
    or a token."""
    if i > 0 and flat[i - 1] == ")":
        depth, j = 0, i - 1
        while j >= 0:
            depth += (flat[j] == ")") - (flat[j] == "(")
            if depth == 0:
                break
            j -= 1
        m = re.search(r"(?:static_cast<\w+>|\(\w+\))?$", flat[:j])
        return flat[m.start():i]
    m = re.search(r"[\w.]+$", flat[:i])
    return m.group(0) if m else ""


def _operand_after(flat: str, i: int) -> str:
    """The operand that starts just after ``flat[i]``: a C cast and a parenthesized group or a token."""
    m = re.match(r"(?:\((?:float|double|int)\)|static_cast<\w+>)?", flat[i + 1:])
    j = i + 1 + m.end()
    if flat[j:j + 1] == "(":
        depth, k = 0, j
        while k < len(flat):
            depth += (flat[k] == "(") - (flat[k] == ")")
            if depth == 0:
                break
            k += 1
        return flat[i + 1:k + 1]
    t = re.match(r"[\w.]+(?:\[[^\]]*\])?", flat[j:])
    return flat[i + 1:j] + (t.group(0) if t else "")


def _qrange(ev: Evidence, vals: dict[str, float]) -> bool:
    """Whether the body divides the int8 range 2^8 (a literal, a named constant, a shift of a template argument,
    ``static_cast<float>(1 << q_bits)``) by twice a value of the group's absolute maximum (``2 * max``), or 2^7 by
    that value itself: DeepSpeed's q_range / (2 * absmax)."""
    flow = flows(ev.body)
    flat = ev.flat
    for m in re.finditer(r"(?<![/*])/(?![/=*])", flat):
        num = _const(_operand_before(flat, m.start()), vals)
        if num not in (256.0, 128.0):
            continue
        den = unparen(uncast(_operand_after(flat, m.start())))
        if num == 256.0:
            twice = re.fullmatch(r"\(?2(?:\.0*)?[fF]?\)?\*(.+)|(.+)\*\(?2(?:\.0*)?[fF]?\)?", den)
            if twice is None:
                continue
            den = twice.group(1) or twice.group(2)
        if _const(den, vals) is None and feeding(flow, den) & ABS_CALLS:
            return True
    return False


def _clamp_low(ev: Evidence, vals: dict[str, float]) -> float | None:
    """-127 where the body's clamp (a max call) takes -127 and never -128 (a symmetric range [-127, 127]); None
    (the type's -128) otherwise."""
    lows = set()
    for _, args in call_arguments(ev.body, r"(std::)?(max|fmaxf|fmax)"):
        for a in args if len(args) == 2 else ():
            v = _const(a, vals)
            if v in (-127.0, -128.0):
                lows.add(v)
    return -127.0 if lows == {-127.0} else None


def _qrange_readings(ev: Evidence, sc, eps_c) -> list:
    """KT_EXPERT_SCALE_QRANGE's reading (int8) for ``_symmetric_bindings``, where ``_qrange`` reads the factor
    2^bits / (2 * absmax): [(support, words, eps modes, encodings, qmin, qmax)], else []."""
    vals = _body_values(ev)
    if not _qrange(ev, vals):
        return []
    n = re.escape(sc.name)
    written = re.findall(rf"\b{n}\)?\[[^\]]*\]=(?!=)([^;]*)", ev.flat)
    stores = [1, 2] if any(re.match(r"\(?1(?:\.0*)?[fF]?\)?/", w) for w in written) else [2, 1]
    # eps: none first where the body compares the maximum with 0 (an all-zero group's factor 1), then the body's
    floors = [c for c in eps_c if not c[1].endswith("(assumed)")]
    none = ("0.f", "no eps (an all-zero group: the factor 1)")
    epss = ([none] + floors[:1]) if ev.mentions(_CMP_ZERO) or not floors else (floors[:1] + [none])
    low = _clamp_low(ev, vals)
    qmin = ("-127.f", "qmin=-127 (the body's clamp)") if low is not None else \
        ("kt::QuantOut<int8_t>::qmin", "qmin of the type")
    encodings = [(-3 * si, 1, 0, {"KT_EXPERT_SCALE_QRANGE": store}, [QRANGE_WORDS[store]])
                 for si, store in enumerate(stores)]
    return [(30, "the range 2^8 over twice the maximum, ", [(0, eps, words) for eps, words in epss], encodings, qmin,
             ("kt::QuantOut<int8_t>::qmax", "qmax of the type"))]


# ----------------------------------------------------------------------------------------- asymmetric (min/max)
MIN_CALLS = ("fminf", "fmin", "min", "__hmin", "__hmin2")
MAX_CALLS = ("fmaxf", "fmax", "max", "__hmax", "__hmax2")
ROUND_CALLS = {"rintf", "rint", "nearbyintf", "nearbyint", "lrintf", "llrintf", "__float2int_rn", "__float2uint_rn",
               "roundf", "round", "lroundf", "llroundf", "__float2int_rz", "truncf"}
ASYM_WORDS = {1: "zero = the group's minimum (a float zero point), (x - zero) quantized",
              2: "an integer zero point round(qmin - min / scale) added to the rounded x / scale"}
LEVELS = (3, 7, 15, 31, 63, 127, 255)  # 2^bits - 1: what the range max - min is divided by
_TOKEN = r"[A-Za-z_][\w.]*(?:\[[^\]]*\])*"


def _accumulators(ev: Evidence, flow: dict[str, set[str]], x) -> tuple[set[str], set[str]]:
    """The locals the body reduces the input's minimum and maximum into: assigned a min (max) call that takes the
    local itself (``mn = fminf(mn, v)``, ``s_min[t] = fminf(s_min[t], s_min[t + k])``), or a comparison's winner
    (``if (v < mn) mn = v;``); each computed from the input buffer."""
    mins, maxs = set(), set()
    for target, at, stmt in statements(ev.body):
        if target is None:
            continue
        own = re.compile(rf"\(*(\(\w+\))?{re.escape(target)}(\[[^\]]*\])?\)*")
        for calls, acc in ((MIN_CALLS, mins), (MAX_CALLS, maxs)):
            for _, args in call_arguments(stmt[at + 1:], "|".join(calls)):
                if any(own.fullmatch(re.sub(r"\s+", "", a)) for a in args):
                    acc.add(target)
    for m in re.finditer(rf"if\(({_TOKEN})([<>])=?({_TOKEN})\)({_TOKEN})=({_TOKEN});", ev.flat):
        left, op, right, target, value = m.groups()
        base = re.match(r"[A-Za-z_]\w*", target).group(0)
        if target == right and value == left:  # if (v < mn) mn = v
            (mins if op == "<" else maxs).add(base)
        elif target == left and value == right:  # if (mn > v) mn = v
            (maxs if op == "<" else mins).add(base)
    fed = lambda n: x.name in feeding(flow, n)  # noqa: E731
    return {n for n in mins if fed(n)}, {n for n in maxs if fed(n)}


def _asym_modes(ev: Evidence, flow, mins: set[str], maxs: set[str]) -> list[int]:
    """KT_EXPERT_ASYM by what the body computes: 1 where it subtracts a value of the minimum alone (not of the
    maximum: the range max - min is no zero point) from a value that is neither (x - min, x - zero); 2 where it adds
    a value of the minimum that a rounding call computes (an integer zero point: rint(x / scale) + zp)."""
    def of(n: str, acc: set[str]) -> bool:
        return n in acc or bool(flow.get(n, set()) & acc)

    modes = []
    for m in re.finditer(r"(?<![-+>])-(?![-=>])\(*(?:\((?:float|int|double)\))?([A-Za-z_]\w*)(\[[^\]]*\])?\)*"
                         r"(?=[);,+\-?:\]]|$)", ev.flat):
        name = m.group(1)
        left = re.search(rf"({_TOKEN})\)*$", ev.flat[:m.start()])
        if left is None or not of(name, mins) or of(name, maxs):
            continue
        base = re.match(r"[A-Za-z_]\w*", left.group(1)).group(0)
        if not of(base, maxs) and not of(base, mins):
            modes.append(1)
            break
    for n in set(flow) | mins:
        if of(n, mins) and flow.get(n, set()) & ROUND_CALLS and (
                re.search(rf"(?<!\+)\+\(*(?:\((?:float|int)\))?{re.escape(n)}\b(?!\[)", ev.flat)
                or re.search(rf"(?<![\w.]){re.escape(n)}\)*\+(?![+=])", ev.flat)):
            modes.append(2)
            break
    return modes


def _written(ev: Evidence, name: str, flow) -> set[str]:
    """What the body's writes of ``name`` are computed from (``name[i] = value``, chained assignments too)."""
    out: set[str] = set()
    for v in re.findall(rf"\b{re.escape(name)}\[[^\]]*\]=(?!=)([^;]*)", ev.flat):
        out |= feeding(flow, v)
    return out


def _range_floors(ev: Evidence, flow, mins: set[str], maxs: set[str]) -> list[tuple[str, str]]:
    """eps of the range: a small positive number (at most 1e-3: a literal or a named constant) that a maximum takes
    together with a value of both the minimum and the maximum (``fmaxf(mx - mn, kMinRange)``, AWQ's clamp(min=1e-5)
    of max - min), in either order. (C text, words) each."""
    out = []
    for _, args in call_arguments(ev.body, r"(std::)?(fmaxf|fmax|max)"):
        if len(args) != 2:
            continue
        for k, other in (args, args[::-1]):
            literal = re.fullmatch(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?", k.strip())
            named = re.fullmatch(r"[A-Za-z_]\w*", k.strip()) and not flow.get(k.strip())
            v = number(k, ev.constants) if literal or named else None
            fed = feeding(flow, other)
            if v is None or not 0 < v <= 1e-3 or not (fed & mins and fed & maxs):
                continue
            c = (f"(float)({v!r}f)", f"eps=`{k.strip()}` ({v!r})") if named else \
                (f"(float)({k.strip() if k.strip()[-1] in 'fF' else k.strip() + 'f'})", f"eps={k.strip()}")
            if c not in out:
                out.append(c)
    return out


def _levels(ev: Evidence) -> int | None:
    """The levels 2^bits - 1 the body divides by (the range over 255, or 15 for 4 bits), a literal or a named
    constant; None when it divides by none of them."""
    for tok in re.findall(r"/\(*(?:\(float\))?((?:\d+\.?\d*|\.\d+)[fF]?|[A-Za-z_]\w*)(?![\w(\[])", ev.flat):
        v = number(tok, ev.constants)
        if v is not None and v in LEVELS:
            return int(v)
    return None


def _asym_bindings(ev: Evidence, e, long=None) -> list[Binding]:
    """Asymmetric (min/max, zero point) bindings (KT_EXPERT_ASYM), only where the body says so (``_asym_modes``)."""
    ins = ev.bufs("in", FLOATS)
    if len(ins) != 1 or not ins[0].counts:
        return []
    x = ins[0]
    qs = [a for a in ev.bufs("out") if a.dtype in ("u8", "i8") and a.counts == x.counts]
    if len(qs) != 1:
        return []
    q = qs[0]
    rest = [a for a in ev.bufs("out") if a is not q]
    if len(ev.bufs()) != 2 + len(rest) or not rest or len(rest) > 2 or any(not a.counts for a in rest):
        return []
    flow = flows(ev.body, declarators=True)  # `float mn = INFINITY, mx = -INFINITY;`: two locals
    mins, maxs = _accumulators(ev, flow, x)
    if not mins or not maxs:
        return []
    modes = _asym_modes(ev, flow, mins, maxs)
    if q.dtype == "i8":
        modes = [m for m in modes if m == 2]  # a signed output only with an integer zero point (vLLM's azp)
    if not modes:
        return []
    # where the (scale, zero) pairs go: [(scales, zeros or None for interleaved pairs, the groups' values, the
    # groups' spec, support)]
    stores = []
    if len(rest) == 1:
        sc = rest[0]
        n = re.escape(sc.name)
        pairs = len(re.findall(rf"\b{n}\[[^\]]*\]=(?!=)", ev.flat)) >= 2 or ev.mentions(rf"float2\*>?\(+{n}\b")
        if sc.dtype == "f32" and pairs and all(c % 2 == 0 for c in sc.counts):
            groups = tuple(c // 2 for c in sc.counts)
            stores.append((sc, None, groups, f"({sc.spec.size}) / 2", 0))
    elif rest[0].counts == rest[1].counts:
        # which is the scale: the one written from the maximum without a rounding; the zero: from the minimum
        # alone (a float zero) or through a rounding (an integer zero point). Both orders where the body does not say
        def scaleish(w: set[str]) -> bool:
            return bool(w & maxs) and not w & ROUND_CALLS

        def zeroish(w: set[str]) -> bool:
            return bool(w & mins) and (bool(w & ROUND_CALLS) or not w & maxs)

        orders = [tuple(rest), tuple(rest[::-1])]
        sure = [(s, z) for s, z in orders
                if scaleish(_written(ev, s.name, flow)) and zeroish(_written(ev, z.name, flow))]
        for i, (s, z) in enumerate(sure[:1] or orders):
            if s.dtype == "f32" and z.dtype in ("f32", "f16", "bf16", "i32", "u32", "i64", "u8", "i8", "i16"):
                stores.append((s, z, s.counts, s.spec.size, -3 * i))
    out = []
    cap = max(e.params["LANES"].values) * max(e.params["ITEMS"].values) * \
        min(max(e.params["VEC"].values), 16 // NBYTES[x.dtype])
    if long is not None:  # a longer group (a whole token: vLLM's per-token azp) is its long-row twin's
        cap = max(cap, max(long.params["THREADS"].values) * max(long.params["ITEMS"].values) *
                  min(max(long.params["VEC"].values), 16 // NBYTES[x.dtype]))
    Q = "uint8_t" if q.dtype == "u8" else "int8_t"
    levels = _levels(ev)
    fl = ev.floats()
    small = [a for a in fl if a.counts and all(v is not None and 0 < v < 1 for v in a.counts)]
    big = [a for a in fl if a.counts and all(v is not None and v >= 1 for v in a.counts)]
    low = [a for a in fl if a.counts and all(v is not None and v <= 0 for v in a.counts)]
    eps_c = [(f"(float)({a.name})", f"eps=`{a.name}`") for a in _eps_first(ev, small)]
    eps_c += _range_floors(ev, flow, mins, maxs)
    eps_c = eps_c or [("0.f", "no eps (the range as it is)")]
    if Q == "uint8_t":
        qmin_c, qmin_w = (f"(float)({low[0].name})", f"qmin=`{low[0].name}`") if low else ("0.f", "qmin=0")
        top = levels or 255
        qmax_c, qmax_w = (f"(float)({big[0].name})", f"qmax=`{big[0].name}`") if big else (f"{top}.f", f"qmax={top}")
    else:
        if levels not in (None, 255):
            return []
        qmin_c, qmin_w, qmax_c, qmax_w = "-128.f", "qmin=-128", "127.f", "qmax=127"
    if ev.has(*(ROUND_CALLS - {"roundf", "round", "lroundf", "llroundf", "truncf", "__float2int_rz"})) or \
            ev.mentions(r"cvt\.rni"):
        rounds = [0, 2, 1]
    elif ev.has("roundf", "round", "lroundf", "llroundf"):
        rounds = [2, 0, 1]
    else:
        rounds = [1, 0, 2]
    recip_first = ev.mentions(r"1\.0?f?/") or ev.mentions(r"\*inv") or ev.mentions(r"\*\(1\.")
    recips = [1, 0] if recip_first else [0, 1]
    totals = [t for t in ev.sizes(x.counts) if not t.c[0].isdigit()]
    total = totals[0].c.replace("(int)(", "(long long)(") if totals else None
    kind = "uint8" if Q == "uint8_t" else "int8"
    for sc, zr, groups, groups_spec, ssup in stores:
        gs_v = div(x.counts, groups)
        if gs_v is None or max(gs_v) > cap:
            continue  # a group longer than the expert holds in registers
        gs_all = [s for s in ev.sizes(gs_v) if not s.c[0].isdigit()] or ev.sizes(gs_v)
        rows_xs = ev.held(groups)
        for (gi, gs), (ei, (eps, eps_words)), (mi, mode), (ri, rnd), (ci, recip) in itertools.product(
                enumerate(gs_all[:2]), enumerate(eps_c[:2]), enumerate(modes), enumerate(rounds),
                enumerate(recips)):
            if zr is not None and mode == 1 and zr.dtype not in ("f32", "f16", "bf16"):
                continue  # a float zero point is no integer
            store = "a (scale, zero) pair per group" if zr is None else "a scale and a zero per group"
            b = Binding(e, 0.85, f"groups of `{gs.words.strip('`')}` elements: minimum and maximum (min and max "
                        f"reductions), {'x - min' if mode == 1 else 'a rounded zero point of the minimum'}, {store}, "
                        f"{kind} output → asymmetric per-token-group quantization", ev.kernel.name)
            b.sizes = {"group_size": gs.spec, "rows": groups_spec}
            rows, rows_words, from_grid, from_launch = _group_count(ev, e, b, x, gs, gs_v, rows_xs, totals, total)
            b.template_args = [CTYPE[x.dtype], Q] + ([CTYPE[zr.dtype]] if zr is not None else [])
            b.call_args = [_cast(x.dtype, x.name, True), f"({Q}*)({q.name})", f"(float*)({sc.name})"] + (
                [f"({CTYPE[zr.dtype]}*)({zr.name})"] if zr is not None else []) + [
                gs.c, rows, eps, qmin_c, qmax_c]
            b.defines = {"KT_EXPERT_ROUND": rnd}
            b.conventions = {"KT_EXPERT_SCALE_RECIP": recip, "KT_EXPERT_SCALE_POW2": 0, "KT_EXPERT_SCALE_COLUMNS": 0,
                             "KT_EXPERT_ASYM": mode, "KT_EXPERT_ZERO_STORE": int(zr is not None)}
            if from_grid:
                b.conventions["KT_EXPERT_GROUPS_FROM_GRID"] = 1
            if from_launch:
                b.conventions["KT_EXPERT_GROUPS_FROM_LAUNCH"] = 1
            b.consts = {"ESIZE": NBYTES[x.dtype]}
            b.words = [f"x={x.name}", f"q={q.name} ({kind}, asymmetric)",
                       f"scales={sc.name} ((scale, zero) fp32 pairs)" if zr is None else f"scales={sc.name}"] + (
                [f"zeros={zr.name} ({CTYPE[zr.dtype]})"] if zr is not None else []) + [
                f"group_size={gs.words}", rows_words, eps_words, qmin_w, qmax_w, ASYM_WORDS[mode], ROUNDS[rnd],
                RECIPS[recip]]
            b.support = 40 + ssup - 4 * gi - 3 * ei - 5 * mi - 2 * ri - ci
            out.append(b)
    return out


# ----------------------------------------------------------------------------------------- packed UE8M0 scales
PACKED_GROUP_SIZES = (16, 32, 64, 128, 256, 512)  # a group size no argument holds: the family's powers of two


def _cdiv4(v: tuple) -> tuple:
    return tuple((n + 3) // 4 for n in v)


def _packed_shapes(ev: Evidence, x, P: tuple) -> list[tuple[SizeExpr, SizeExpr, tuple, tuple]]:
    """(groups per token, group size, the groups' values, the tokens' values) where tokens * groups * group size is
    the input's count: an int argument holding a token's groups, with the tokens an argument or the packed words
    over a token's words (``P`` the int32 count), or one holding a token's elements over a group size (an argument,
    or a power of two of the family). An argument that holds the groups comes first; shapes of the same values
    once. The layouts check the packed count after."""
    ints = [a for a in ev.ints() if a.counts and all(v is not None and v > 0 for v in a.counts)]
    out, seen = [], set()

    def add(G: SizeExpr, gv: tuple, tv: tuple | None, gs: SizeExpr | None = None) -> None:
        gs_v = div(x.counts, prod(tv, gv)) if tv else None
        if not gs_v or any(v < 2 for v in gs_v) or any(v < 1 for v in tv) or (gv, gs_v) in seen:
            return
        if gs is None:
            sizes = ev.sizes(gs_v)
            gs = ([s for s in sizes if not s.c[0].isdigit()] or sizes or [None])[0]
        if gs is not None:
            seen.add((gv, gs_v))
            out.append((G, gs, gv, tv))

    for a in ints:  # a holds the groups of one token
        G = SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`")
        for b in ints:
            if b is not a:
                add(G, a.counts, b.counts)
        add(G, a.counts, div(P, _cdiv4(a.counts)))
    for a in ints:  # a holds the elements of one token
        tv = div(x.counts, a.counts)
        if not tv:
            continue
        gss = [(SizeExpr(f"(int)({b.name})", str(b.spec.value), f"`{b.name}`"), b.counts) for b in ints if b is not a]
        gss += [(SizeExpr(str(v), str(v), f"the constant {v}"), (v,) * len(tv)) for v in PACKED_GROUP_SIZES]
        for gs, gsv in gss:
            gv = div(a.counts, gsv)
            if gv:
                short = gs.c if gs.c[0].isdigit() else gs.words.strip("`")
                add(SizeExpr(f"(int)({a.name}) / ({gs.c})", f"({a.spec.value}) / ({gs.spec})",
                             f"`{a.name} / {short}`"), gv, tv, gs)
    return out


def _write_index(ev: Evidence, name: str) -> list[str]:
    """The index expressions of the body's writes of ``name`` (``name[i] =``, ``reinterpret_cast<uint8_t*>(name)[i]
    =``), whitespace-free, with the values of the locals they are computed from (three assignments deep)."""
    out = re.findall(rf"\b{re.escape(name)}\)?\[([^\]]*)\]=[^=]", ev.flat)
    values: dict[str, list[str]] = {}
    for target, at, stmt in statements(ev.body):
        if target is not None:
            values.setdefault(target, []).append(re.sub(r"\s+", "", stmt[at + 1:]))
    todo, seen = list(out), set()
    for _ in range(3):
        nxt = []
        for t in todo:
            for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", t)) - seen:
                seen.add(ident)
                nxt += values.get(ident, [])
        out += nxt
        todo = nxt
    return out


def _packed_bindings(ev: Evidence, e, x, q) -> list[Binding]:
    """UE8M0 exponent bytes packed four to an int32 (KT_EXPERT_SCALE_PACKED): the one int32 output the body builds
    with shifts or writes through a byte pointer; its count is the tokens times a token's words (row-major, or
    column-major with columns of the tokens), or the words times a stride argument a little above the tokens."""
    ps = [a for a in ev.bufs("out", ("i32", "u32"))]
    if len(ps) != 1 or not ps[0].written or not ps[0].counts or not x.counts or x.counts != q.counts:
        return []
    ps = ps[0]
    n = re.escape(ps.name)
    byte_view = ev.mentions(rf"(u?int8_t|char)\*>?\(+{n}\b") or ev.mentions(rf"\(u?int8_t\*\)\(?{n}\b")
    if not (ev.mentions(r"<<") or byte_view):
        return []
    P = ps.counts
    index = _write_index(ev, ps.name)
    # a write of 0 (or of a choice whose other side is 0): the padding is written, not left as it was
    zero_written = any(re.fullmatch(r"\(?0[uU]?\)?|.*:\(?(\w+\))?0[uU]?\)?", v)
               for v in re.findall(rf"\b{n}\)?\[[^\]]*\]=([^=;][^;]*);", ev.flat))
    ints = [a for a in ev.ints() if a.counts and all(v is not None and v > 0 for v in a.counts)]
    totals = [t for t in ev.sizes(x.counts) if not t.c[0].isdigit()]
    total = totals[0].c.replace("(int)(", "(long long)(") if totals else None
    # (support, groups per token, group size, their values, the tokens' values, the tokens (None: not computable),
    # KT_EXPERT_SCALE_PACKED, the column stride (mode 2), the slots cover every column of the stride (zeroed padding))
    layouts = []
    for hi, (G, gs, gv, tv) in enumerate(_packed_shapes(ev, x, P)):
        W = _cdiv4(gv)
        t_xs = [t for t in ev.sizes(tv, exclude=tuple(re.findall(r"\(int\)\((\w+)\)", G.c))) if not t.c[0].isdigit()]
        if t_xs:
            T = t_xs[0]
        elif total:
            T = SizeExpr(f"(int)(({total}) / ((long long)({G.c}) * ({gs.c})))",
                         f"({totals[0].spec}) / (({G.spec}) * ({gs.spec}))", f"{totals[0].words} / (groups * size)")
        else:
            T = None
        if prod(tv, W) == P:
            layouts.append((-hi, G, gs, gv, tv, T, 1, None, False))
        for st in ints:
            if prod(W, st.counts) != P or st.counts == W or T is None or \
                    any(not 0 <= s - t < 64 for s, t in zip(st.counts, tv)):
                continue
            S = SizeExpr(f"(int)({st.name})", str(st.spec.value), f"`{st.name}`")
            # the stride the index of the body's write multiplies by: the columns first
            mul = any(re.search(rf"\*\(?\w*\)?{re.escape(st.name)}\b|\b{re.escape(st.name)}\*", t) for t in index)
            sup = -hi + (3 if mul else -3)
            layouts.append((sup, G, gs, gv, tv, T, 2, S, False))
            if st.counts != tv:  # padding columns: left as they are, or written 0 (vLLM's packed kernel)
                layouts.append((sup + (1 if zero_written else -1), G, gs, gv, tv, T, 2, S, True))
    if not layouts:
        return []
    qmin, qmax, eps_c, Q, kind, rounds, recips = _numerics(ev, [q])
    # the power of two: on the bits first where the body builds a float from bits, through log2f where it calls it
    bits = ev.has("__uint_as_float", "__int_as_float", "__float_as_uint", "__float_as_int") or ev.mentions(
        r"(>>|<<)\(?23\b") or ev.mentions(r"(?i)0x0*7fffff\b|0x7f800000|8388607")
    logs = ev.has("log2f", "exp2f", "ldexpf", "exp2", "ilogbf", "frexpf")
    pow2s = [1, 2] if logs and not bits else [2, 1]
    qm = f"kt::QuantOut<{Q}>"
    rows_p = [s for s in ev.sizes(P) if not s.c[0].isdigit()]
    out = []
    for (sup, G, gs, gv, tv, T, mode, S, zero), (ei, (eps, eps_words)), (ri, rnd), (ci, recip), (pi, pow2) in \
            itertools.product(layouts, enumerate(eps_c[:3]), enumerate(rounds), enumerate(recips),
                              enumerate(pow2s)):
        b = Binding(e, 0.85, f"groups of `{gs.words.strip('`')}` elements: absolute maximum (fabsf, max reduction), "
                    f"UE8M0 exponent bytes of power-of-two scales packed four to an int32, {kind} output → "
                    "per-token-group quantization", ev.kernel.name)
        words_c = f"((({G.c}) + 3) / 4)"
        from_grid = False
        b.fixed["ROWS"] = [r for r in e.params["ROWS"].values if r % 4 == 0]
        if mode == 2:  # byte slots: 4 a word, over the tokens or over every column of the stride
            rows = f"4 * {words_c} * ({S.c if zero else T.c})"
            b.sizes = {"group_size": gs.spec, "rows": f"4 * ({ps.spec.size})" if zero else
                       f"4 * cdiv({G.spec}, 4) * ({T.spec})"}
            rows_words = f"slots=4 a word of {'every column' if zero else 'the tokens'}"
        else:
            b.sizes = {"group_size": gs.spec, "rows": f"4 * ({ps.spec.size})"}
            if rows_p:
                rows, rows_words = f"4 * ({rows_p[0].c})", f"slots=4 * {rows_p[0].words}"
            elif T is not None:
                rows, rows_words = f"4 * {words_c} * ({T.c})", f"slots=4 a word, tokens={T.words}"
            else:  # no count of the tokens: the expert reads the slots back from its grid
                rows, rows_words = "0", "slots=the grid"
                from_grid = True
                b.fixed["ROWS"] = [r for r in b.fixed["ROWS"] if r <= 4 * min(_cdiv4(gv))]
        b.template_args = [CTYPE[x.dtype], Q]
        b.call_args = [_cast(x.dtype, x.name, True), f"({Q}*)({q.name})", f"(int*)({ps.name})", gs.c, rows, eps,
                       f"(float)({qmin.name})" if qmin else f"{qm}::qmin",
                       f"(float)({qmax.name})" if qmax else f"{qm}::qmax", G.c]
        if mode == 2:
            b.call_args += [T.c, S.c]
        b.defines = {"KT_EXPERT_ROUND": rnd}
        b.conventions = {"KT_EXPERT_SCALE_RECIP": recip, "KT_EXPERT_SCALE_POW2": pow2, "KT_EXPERT_SCALE_COLUMNS": 0,
                         "KT_EXPERT_SCALE_PACKED": mode}
        if Q == "__nv_fp8_e5m2":
            b.conventions["KT_EXPERT_FP8_E5M2"] = 1
        if from_grid:
            b.conventions["KT_EXPERT_GROUPS_FROM_GRID"] = 1
        b.consts = {"ESIZE": NBYTES[x.dtype]}
        layout = (f"[tokens, cdiv({G.words}, 4)] words" if mode == 1 else
                  f"column-major words [cdiv({G.words}, 4), columns of {S.words}], tokens={T.words}"
                  + (", the padding columns written 0" if zero else ""))
        b.words = [f"x={x.name}", f"q={q.name} ({kind})",
                   f"scales={ps.name} (UE8M0 exponent bytes packed four to an int32, {layout})",
                   f"group_size={gs.words}", f"groups per token={G.words}", rows_words, eps_words,
                   f"qmin={qmin.name}" if qmin else "qmin of the type",
                   f"qmax={qmax.name}" if qmax else "qmax of the type"] + (
            [ROUNDS[rnd]] if Q == "int8_t" else []) + [
            "multiplied by 1 / scale" if recip else "divided by the scale",
            "scales rounded up to powers of two on the bits (exponent field, + 1 with any mantissa bit)" if pow2 == 2
            else "scales rounded up to powers of two (exp2f(ceilf(log2f)))"]
        b.support = 20 + sup - 3 * ei - 2 * ri - ci - 2 * pi
        out.append(b)
    return out
