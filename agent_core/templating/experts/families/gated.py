"""Gated activations (SiLU/GELU-and-mul): one float input of twice the output's elements, one output.

Enumerated: which int argument (or product) is the output row length ``d`` (an argument that appears as
``2 * d`` in the body first), the activation (the math the body calls first: erf → GELU, tanh → GELU tanh,
exp → SiLU; the others after it), the layout of the gate and up halves ([gate | up], [up | gate], or
interleaved pairs either way) and, for 16-bit storage, whether the activation is rounded to the storage type
before the multiply. The output may be of a type of its own (an fp32 GEMM output in, bf16 out).

gpt-oss's clamped SwiGLU (vLLM's swigluoai_and_mul, TensorRT-LLM's and ONNX Runtime's MoE activation) is read from
what the body computes: a limit L that bounds values from above and from below at -L (min/max calls or
conditionals), an exponential whose argument is fed by the gate clamped at L and by a scale alpha (a float argument,
a literal or a named constant), and a number added to the other (clamped) half, beta; out = (clamp(up, -L, L) +
beta) * g * sigmoid(alpha * g) with g = min(gate, L). Which half is the gate is read from the index the exponential's
input is loaded at, where the body shows it; every layout is offered, that one first.

The output may be quantized to fp8 by a static per-tensor scale (vLLM's silu_and_mul_quant, the fp8 activation in
front of an fp8 down projection; KT_EXPERT_QUANT): a byte output (u8 / i8 storage) of half the input's elements whose
declared type or conversions show fp8, and a scale the body multiplies or divides by: a one-element fp32 input (a
device tensor) or a float argument. Offered are the body's use of it first (times its reciprocal taken once, divided
by it, times it) and the rounding points of a 16-bit input (the activation rounded to the storage type, the product
rounded to it before the scale: vLLM's product in scalar_t) ordered by the conversions the body makes. The fp8
bytes are compared exactly, so SiLU's exponential is the body's own there: expf, or __expf (FlashInfer, TensorRT-LLM;
KT_EXPERT_FAST_EXP) where the body calls it.

FasterTransformer / TensorRT-LLM's generic activation (the gated FFN of T5 v1.1 / Flan-T5 / UL2) is read where no
path above binds (``_generic``): the activation's input and the gate's operand two tensors of the output's shape,
the output written over the activation's input (in place, KT_EXPERT_INPLACE) or a tensor of its own, up to two
nullable bias vectors [d] (KT_EXPERT_BIAS) each tied to the tensor the body adds it to, and an element type that may
be a 16-bit pair (half2, __nv_bfloat162: every size argument then counts pairs, the row is twice the argument). The
activation may live in a functor's static member (``Activation::apply``, read through callees.py); its GELU (tanh)
is offered as the packed 16-bit form (KT_EXPERT_GELU_FORM: the cube and the cdf rounded to T, tanh.approx.f32 where
the body's asm has it) where the type is a pair or the body squares in 16 bits, else after the fp32 form.

A bias of the gated row's own width added to it (ONNX Runtime's BiasSplitGelu, the GEGLU of a diffusion UNet's
feed-forward after a projection GEMM without its bias, diffusers' GEGLU; KT_EXPERT_BIAS 2) is read where the kernel
has one input of twice the output's elements and one vector whose length is twice a row's: the body adds the vector
to that input (``input[i] + bias[i]``), each half's columns to that half. The row length is half the vector's (an
int argument that holds it, else the number it is on every size set: a width given only as a template argument);
the rows an int argument that holds them, else the spec's grid where it is the row count (one block a token, the
token count only in the grid), else the output over the row. Which half is the gate from the index its load adds to
the other's (ORT's value half first, the GELU on the second: [up | gate]), that one first; the erf GELU's argument
divided by sqrt(2) (``erff(v / 1.41421356237f)``: KT_EXPERT_ERF_DIV) where the body divides it so; the sums rounded
to the storage type as the 16-bit add does; the activation rounded before the product only where the body converts
a value the activation feeds, and the other half does not, to a 16-bit type.
"""

from __future__ import annotations

import itertools
import math
import re
import struct
from collections import Counter

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, HALF_TYPES, NBYTES, VECTOR_BYTES, Evidence, SizeExpr,
                                                    additive_terms, assignments, call_arguments, closing, counts_of,
                                                    div, feeding, flows, fp8_formats, instance_types, number,
                                                    scale_ops, unparen)
from agent_core.templating.experts.index_reading import index_strides
from agent_core.templating.experts.library import Expert

ACTS = {0: "SiLU", 1: "GELU (erf)", 2: "GELU (tanh)", 11: "ReLU", 12: "squared ReLU", 13: "quick GELU "
        "(v * sigmoid(1.702 v))", 14: "FATReLU (v > threshold ? v : 0)", 15: "sigmoid (GLU)"}
# activations of KT_EXPERT_GATE_FN: their ids in ACTS less 10
GATE_FNS = (11, 12, 13, 14, 15)
# the reciprocal of 1 plus an exponential of a negated value: a sigmoid (`1. / (1. + exp(-x2))`)
_SIGMOID = r"(?<![\w.])1(?:\.0*)?[fF]?/\(1(?:\.0*)?[fF]?\+(?:expf|__expf|exp|hexp)\(-"
LAYOUTS = {0: "gate and up halves [gate | up]", 1: "halves [up | gate]", 2: "interleaved pairs (gate, up)",
           3: "interleaved pairs (up, gate)", 4: "gate and up as two tensors"}
SIGMOIDS = {0: "g / (1 + expf(-alpha * g))", 1: "g * (1 / (1 + expf(-alpha * g)))", 2: "g / (1 + __expf(-alpha * g))",
            3: "g * (1 / (1 + __expf(-alpha * g)))"}
CLAMP_CALLS = r"fminf|fmaxf|fmin|fmax|min|max|__hmin|__hmax"
EXP_CALLS = r"expf|__expf|exp"
# a float literal (a decimal point, an exponent or an f suffix: not an index's integer)
FLOAT_LIT = r"(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)[fF]?|\d+[fF]"


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def _asm_tanh(ev: Evidence) -> bool:
    """Whether the body (its helpers too) computes a tanh as the PTX instruction tanh.approx.f32 in inline asm
    (ExLlamaV2 / V3's and FasterTransformer's tanh_opt)."""
    return re.search(r"tanh\.approx", ev.body) is not None


def _acts(ev: Evidence) -> list[tuple[int, str, int]]:
    """(KT_EXPERT_ACT, words of the old reason, support): what the body's math calls say first (a tanh.approx.f32
    of inline asm is a tanh)."""
    found = []
    if ev.has("erff", "erf", "normcdff", "erfcf"):
        found.append((1, "erff → GELU-and-mul"))
    if ev.has("tanhf", "tanh"):
        found.append((2, "tanhf → GELU(tanh)-and-mul"))
    elif _asm_tanh(ev):
        found.append((2, "tanh.approx.f32 → GELU(tanh)-and-mul"))
    if ev.has("expf", "__expf", "exp", "exp2f", "hexp", "__frcp_rn"):
        found.append((0, "x / (1 + expf(-x)) → SiLU-and-mul"))
    seen = {a for a, _ in found}
    rest = [(a, f"{ACTS[a]}-and-mul (assumed)") for a in (0, 1, 2) if a not in seen]
    return [(a, w, 4) for a, w in found] + [(a, w, 0) for a, w in rest]


_TRANSCENDENTAL = ("erff", "erf", "normcdff", "erfcf", "tanhf", "tanh", "expf", "__expf", "exp", "exp2f", "hexp",
                   "h2exp", "__frcp_rn", "h2rcp", "hrcp")
_ZERO = r"\(?(?:0(?:\.0*)?|\.0+)[fF]?\)?"
QUICK_GELU = 1.702


def _zero(ev: Evidence, text: str, zeros: set[str]) -> bool:
    """Whether ``text`` is a zero: a literal (``0``, ``0.f``, ``(T)0.0f``) or a local set to one (``zero``)."""
    t = unparen(re.sub(r"\s+", "", text))
    t = re.sub(r"^(?:\((?:const)?\w+\)|static_cast<\w+>)", "", t)
    return re.fullmatch(_ZERO, t) is not None or unparen(t) in zeros


def _gate_fns(ev: Evidence) -> list[tuple[int, str, int]]:
    """The activations of KT_EXPERT_GATE_FN the body computes, as ``_acts`` gives them (ACTS id, words, support):
    quick GELU where an exponential's input holds 1.702 (a literal, a named constant, a local set to it:
    x * sigmoid(1.702 x)) or a tanh's holds 0.851 (the same sigmoid as 0.5 (1 + tanh(0.851 x))); where the body
    calls no transcendental at all, ReLU (a maximum with zero, or a value compared with zero that chooses it or zero,
    of a value an input buffer feeds), squared where the body also multiplies a value by itself, and FATReLU where
    the value is compared with a float argument instead. None otherwise."""
    fl = flows(ev.body, declarators=True)
    values = assignments(ev.body)
    once: dict[str, list[str]] = {}
    for t, v in values:
        once.setdefault(t, []).append(v)
    if ev.has(*_TRANSCENDENTAL) or _asm_tanh(ev):
        # sigmoid(1.702 x) as 1 / (1 + exp(-1.702 x)), or as 0.5 (1 + tanh(0.851 x)): sigmoid(z) = (1 + tanh(z / 2)) / 2
        for calls, k, words in ((r"expf|__expf|exp|hexp", QUICK_GELU, "expf of 1.702 x"),
                                (r"tanhf|tanh", QUICK_GELU / 2, "tanhf of 0.851 x (sigmoid(1.702 x) as tanh)")):
            for _, args in call_arguments(ev.body, calls):
                arg = re.sub(r"\s+", "", args[0]) if args else ""
                texts = [arg] + [vs[0] for t, vs in once.items() if len(vs) == 1 and t in feeding(fl, arg)]
                for t in texts:
                    for tok in re.findall(rf"(?<![\w.])(?:{FLOAT_LIT}|[A-Za-z_]\w*)(?![\w.(])", re.sub(r"\s+", "", t)):
                        v = number(tok, ev.constants)
                        if v is None and len(once.get(tok, ())) == 1:
                            v = number(unparen(re.sub(r"\s+", "", once[tok][0])).lstrip("-"), ev.constants)
                        if v is not None and abs(abs(v) - k) < 1e-6:
                            return [(13, f"{words} → quick-GELU-and-mul", 5)]
        # GLU's sigmoid: 1 / (1 + exp(-g)) of a value the body uses nowhere else (SiLU uses its gate twice:
        # g / (1 + exp(-g)), g * sigmoid(g))
        if re.search(_SIGMOID, ev.flat):
            for _, args in call_arguments(ev.body, r"expf|__expf|exp|hexp"):
                m = re.fullmatch(r"-\(?([A-Za-z_]\w*)\)?", unparen(re.sub(r"\s+", "", args[0])) if args else "")
                if m and len(re.findall(rf"(?<![\w.]){m.group(1)}(?![\w(])(?!=[^=])", ev.flat)) == 1:
                    return [(15, "1 / (1 + exp(-g)) of one half times the other → GLU (sigmoid gate)", 5)]
        return []
    inputs = {a.name for a in ev.bufs("in", FLOATS)}
    zeros = {t for t, vs in once.items() if len(vs) == 1 and _zero(ev, re.sub(
        r"^(?:__float2half(?:_rn)?|__float2bfloat16(?:_rn)?|__int2half_rn)\((.*)\)$", r"\1",
        re.sub(r"\s+", "", vs[0])), set())}
    fed = lambda t: bool(feeding(fl, t) & inputs)  # noqa: E731
    floats = {a.name for a in ev.floats()}
    relu = threshold = False
    for _, args in call_arguments(ev.body, r"(?:std::)?(?:fmaxf|fmax|max|__hmax|__hmax2)"):
        if len(args) == 2 and any(_zero(ev, a, zeros) and fed(b) for a, b in (args, args[::-1])):
            relu = True
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)(>=?)(\(?[\w.]+\)?)\?([^:;?]+):([^;)]+)", ev.flat):
        v, op, bound, _, other = m.groups()
        if not fed(v) or not _zero(ev, other, zeros):
            continue
        if _zero(ev, bound, zeros):
            relu = True  # v >= 0 ? v : 0 is the same ReLU
        elif unparen(bound) in floats and op == ">":
            threshold = True  # strictly above (vLLM's f > threshold): v == threshold gives 0
    for _, args in call_arguments(ev.body, r"__hgt|__hge|__hgt2|__hge2"):
        if len(args) == 2 and fed(args[0]) and _zero(ev, args[1], zeros):
            relu = True
    if not (relu or threshold):
        return []
    squared = bool(re.search(r"(?<![\w.])([A-Za-z_]\w*)\*\1(?![\w(\[.])", ev.flat)) or any(
        len(args) == 2 and unparen(re.sub(r"\s+", "", args[0])) == unparen(re.sub(r"\s+", "", args[1]))
        for _, args in call_arguments(ev.body, r"__hmul|__hmul2|__hmul_rn|__hmul2_rn|powf|pow"))
    out = []
    if threshold and len(_thresholds(ev)) == 1:
        out.append((14, "a value compared with a float argument, else 0 → FATReLU-and-mul", 5))
    if squared:
        out.append((12, "a maximum with 0, squared → squared-ReLU-and-mul", 5))
    out.append((11, "a maximum with 0 → ReLU-and-mul (ReGLU)", 4 if out else 5))
    return out


def _reduces(ev: Evidence) -> bool:
    """Whether the body reduces across threads (barriers, shuffles, atomics, cub's block reductions): no elementwise
    gated product does."""
    return ev.has("__syncthreads", "__syncwarp", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_sync", "__shfl_up_sync",
                  "atomicAdd", "atomicMax") or re.search(r"\bBlockReduce\b|\bWarpReduce\b", ev.body) is not None


def _fast_silu(ev: Evidence, e: Expert) -> tuple[dict[str, int], str] | None:
    """SiLU written with the fast intrinsics alone: the body calls ``__expf`` and no accurate exponential, so the
    expert's SiLU takes ``__expf`` too (KT_EXPERT_FAST_EXP), and the body's ``__fdividef`` for its division
    (KT_EXPERT_FAST_DIV: 2 where it divides 1 by the sum, a reciprocal it multiplies by; else 1). (conventions,
    words), or None where the body shows an accurate exponential (or the expert has no such conventions)."""
    if "KT_EXPERT_FAST_DIV" not in e.conventions or not ev.has("__expf") or ev.has("expf", "exp"):
        return None
    conv = {"KT_EXPERT_FAST_EXP": 1}
    words = "SiLU with __expf"
    divs = [args for _, args in call_arguments(ev.body, "__fdividef") if len(args) == 2]
    if divs:
        one = any(re.fullmatch(r"\(*1(?:\.0*)?[fF]?\)*", re.sub(r"\s+", "", a[0])) for a in divs)
        conv["KT_EXPERT_FAST_DIV"] = 2 if one else 1
        words += ", v * __fdividef(1, 1 + e)" if one else ", __fdividef(v, 1 + e)"
    return conv, words


def _thresholds(ev: Evidence) -> list[str]:
    """The float arguments a value is compared with (``v > threshold ? v : 0``): FATReLU's threshold."""
    return [a.name for a in ev.floats() if re.search(rf">\(?{re.escape(a.name)}\)?\?", ev.flat)]


def _binding_acts(ev: Evidence, plain: bool) -> list[tuple[int, str, int]]:
    """The activations ``_bindings`` enumerates: ``_acts``'s, after quick GELU where the body shows it, or the ReLU
    family alone where the body computes one and no transcendental (FATReLU only for a ``plain`` kernel: one gated
    row of the output's type)."""
    fns = _gate_fns(ev)
    if fns and fns[0][0] in (13, 15):
        return fns + _acts(ev)
    return [f for f in fns if f[0] != 14 or plain] or _acts(ev)


def enumerate_bindings(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    e = lib.get("act_and_mul")
    ins, outs = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS)
    if e is not None and not outs and "KT_EXPERT_QUANT" in e.conventions:
        return _fp8_quant(ev, e) or _generic(ev, e)  # an fp8 output, bytes: no float output; or one in place
    if e is None:
        return []
    if len(ins) not in (1, 2) or len(outs) != 1 or len(ev.bufs()) != len(ins) + 1:
        return _generic(ev, e)  # in place, or bias vectors beside the two tensors
    o = outs[0]
    if len(ins) == 2:  # gate and up as two tensors of the output's shape; or one gated row and its bias
        return _two_tensors(ev, e, ins, o) or _row_bias(ev, e, ins, o)
    x = ins[0]
    if not x.counts or not o.counts or any(a != 2 * b for a, b in zip(x.counts, o.counts)):
        return []
    if x.dtype != o.dtype and "KT_EXPERT_OUT_TYPE" not in e.conventions:
        return []
    ds = _row_lengths(ev, o)
    if not ds and _flat_activation(ev, e):
        # no row length: the gate and up halves of the whole tensor (ColossalAI's [2, tokens, d] stacked along its
        # first dimension, `x[i]` and `x[i + numel]`): one row of all of them, as two tensors read flat
        ds = _whole_count(ev, o, x)
    ds = ds or _constant_rows(ev, o)  # or a length compiled in
    if not ds:
        return []
    T = x.dtype
    interleaved = ev.mentions(r"\[2\*") or ev.mentions(r"\*2\+1\]") or ev.mentions(r"\[\w+\*2\]")
    layouts = [2, 3, 0, 1] if interleaved else [0, 1, 2, 3]
    clamp = _clamped_swiglu(ev, x) if "KT_EXPERT_CLAMP" in e.conventions else None
    if clamp is not None:  # the clamps, the scale and the offset leave no plain activation possible
        first = clamp["layout"]
        return _clamped_bindings(ev, e, x, o, ds, [first] + [a for a in layouts if a != first] if first is not None
                                 else layouts, clamp)
    return _bindings(ev, e, [x], o, ds, layouts, T, O=o.dtype)


def _two_tensors(ev: Evidence, e: Expert, ins, o) -> list[Binding]:
    """Gate and up as two tensors of the output's shape (KT_EXPERT_GATE_LAYOUT 4), the output of x's type or, where
    the expert has KT_EXPERT_OUT_TYPE, of a type of its own (ExLlamaV3's fp32 GEMM outputs in, fp16 out); the gate
    first as the arguments come, after it the other way round, unless the activation's math reads only the
    second."""
    a, b = ins
    if a.dtype != b.dtype or not o.counts or a.counts != o.counts or b.counts != o.counts:
        return []
    if o.dtype != a.dtype and ("KT_EXPERT_OUT_TYPE" not in e.conventions or o.dtype not in FLOATS):
        return []
    ds = _row_lengths(ev, o)
    if not ds and _flat_activation(ev, e):
        # no row length: a flat elementwise kernel over the element count (ik_llama.cpp's fused_mul_silu(x, y, dst,
        # k), llama.cpp's flat GLU): one row of all of them
        ds = _whole_count(ev, o)
    ds = ds or _constant_rows(ev, o)
    if not ds:
        return []
    ds = _longest_first(ev, o, ds)
    if a.dtype != o.dtype:  # an output of a type of its own: the activation's math tells the gate where it can
        if _act_fed(ev, {a.name, b.name}) == {b.name}:
            a, b = b, a
        return _bindings(ev, e, [a, b], o, ds, [4], a.dtype, O=o.dtype) + \
            _bindings(ev, e, [b, a], o, ds, [4], a.dtype, -3, O=o.dtype)
    return _bindings(ev, e, [a, b], o, ds, [4], o.dtype) + _bindings(ev, e, [b, a], o, ds, [4], o.dtype, -3)


def _longest_first(ev: Evidence, o, ds: list) -> list:
    """The row lengths ``ds`` ((SizeExpr, support) each) of gate and up as two tensors of one shape, the longest rows
    first, each's support its rank: the product is elementwise, so every row length that divides them computes the
    same values (a block takes a chunk of a row; rows of 4 elements would each take a block of their own)."""
    ds = [d for _, d in sorted(enumerate(ds), key=lambda x: (-_shortest(ev, o, x[1][0]), x[0]))]
    return [(d, 2 * (len(ds) - i)) for i, (d, _) in enumerate(ds)]


def _shortest(ev: Evidence, o, d: SizeExpr) -> int:
    """The row length ``d`` on the size set where it is shortest (the output's count where it does not evaluate)."""
    from agent_core import expr as _expr
    try:
        return min(int(_expr.evaluate(d.spec, s)) for s in ev.spec.sizes)
    except Exception:  # noqa: BLE001
        return min(o.counts)


def _flat_activation(ev: Evidence, e: Expert) -> bool:
    """The body computes an activation's math (a plain product is no gated activation), so a kernel with no row
    length may be a flat one over the element count."""
    return "KT_EXPERT_GATE_FN" in e.conventions and (ev.has(*_TRANSCENDENTAL) or _asm_tanh(ev) or bool(_gate_fns(ev)))


def _whole_count(ev: Evidence, o, x=None) -> list:
    """(the output's element count as an int argument holds it, support 0): the row length of one row of all of
    them. Where none holds it, the half of an argument holding the gated input's count ``x`` (twice the output's)
    that the body halves (Meeex2's GeGLU: `num_elements / 2`, the gate half then the value half of one buffer)."""
    out = [(s, 0) for s in ev.held(o.counts)]
    if not out and x is not None:
        for s in ev.held(x.counts):
            n = re.escape(s.c[len("(int)("):-1])
            # halved by a 2 or a shift by 1, literal or named (`#define HALF 2`)
            ops = re.findall(rf"(?<![\w.]){n}(/|>>)\(?([\w.]+)\)?(?![\w.(\[])", ev.flat)
            if any(number(k, ev.constants) == (2 if op == "/" else 1) for op, k in ops):
                out.append((SizeExpr(f"{s.c} / 2", f"({s.spec}) / 2", f"`{s.words.strip('`')} / 2`"), 0))
    return out


def _row_lengths(ev: Evidence, o) -> list:
    """(the output row length as the wrapper computes it, support): int arguments (or products) that divide the
    output and are not all of it; one used as `2 * d` in the body first."""
    targets = []
    for a in ev.ints():
        if a.counts and div(o.counts, a.counts) and a.counts != o.counts and a.counts not in targets:
            targets.append(a.counts)
    for a, b in itertools.combinations(ev.ints(), 2):
        if a.counts and b.counts:
            t = tuple(p * q for p, q in zip(a.counts, b.counts))
            if div(o.counts, t) and t != o.counts and t not in targets:
                targets.append(t)
    ds = []
    for t in targets:
        xs = [s for s in ev.sizes(t) if not s.c[0].isdigit()]
        if xs:
            ds.append((xs[0], (8 if _doubled(ev, xs[0].words.strip("`").split(" * ")) else 0) + 2 * ev.uses(xs[0])))
    return ds


def _constant_rows(ev: Evidence, o) -> list:
    """(the row length, support 0) where no argument holds one: a length the kernel has at compile time (a template
    argument, a #define, a constexpr: NeMo's DIM_LAST), the largest constant the file names that the output's index
    steps by and that divides the output, every other such stride dividing it (a vector's lanes)."""
    named = {int(v) for v in ev.constants.values() if float(v).is_integer() and v > 1}
    consts = sorted({c[0] for c in index_strides(ev, o.name) if len(set(c)) == 1 and c[0] > 1
                     and div(o.counts, c) and c != o.counts}, reverse=True)
    if not consts or consts[0] not in named or any(consts[0] % c for c in consts[1:]):
        return []
    c = consts[0]
    return [(SizeExpr(str(c), str(c), f"the constant {c} (the rows the index steps by)"), 0)]


def _doubled(ev: Evidence, names: list[str]) -> bool:
    """Whether the body writes twice the product of ``names`` (one name or two): ``2 * d``, ``d * 2``, and for two
    ``2 * split * N`` in either order (Caffe2's row of 2 * split_dim_size * N); a name doubled and then multiplied
    by another (``2 * split * N``) is not that name doubled alone."""
    if len(names) == 1:
        n = re.escape(names[0])
        return ev.mentions(rf"\b2\*\(?{n}\b(?!\)?\*[A-Za-z_(])") or ev.mentions(rf"\b{n}\)?\*2\b")
    return any(ev.mentions(rf"\b2\*\(?{re.escape(a)}\*{re.escape(b)}\b(?!\)?\*[A-Za-z_(])")
               for a, b in itertools.permutations(names))


def _rounds(ev: Evidence, T: str) -> list[tuple[int | None, str]]:
    """Whether the activation is rounded to the 16-bit storage type T before the multiply: both, the kernel's
    likelier first (two conversions or more: rounded)."""
    rounds = [(None, "")]
    if T != "f32":
        rounds = [(1, f"activation rounded to {T} before the multiply"), (0, "activation kept in fp32")]
        if len(re.findall(r"__float2half(_rn)?\(|__float2bfloat16(_rn)?\(|static_cast<", ev.body)) < 2:
            rounds.reverse()
    return rounds


def _bindings(ev: Evidence, e: Expert, xs: list, o, ds: list, layouts: list[int], T: str,
              extra: int = 0, O: str | None = None) -> list[Binding]:
    """Every (row length, activation, layout, rounding) binding of the inputs ``xs`` (one gated row, or the gate
    and the up tensors) and the output (of type O where it is not T's)."""
    x = xs[0]
    mixed = O is not None and O != T
    rounds = _rounds(ev, T)
    out = []
    gate_fn = "KT_EXPERT_GATE_FN" in e.conventions
    acts = _binding_acts(ev, len(xs) == 1 and not mixed) if gate_fn else _acts(ev)
    limit = _act_limit(ev) if "KT_EXPERT_ACT_LIMIT" in e.conventions else None
    saturate = "KT_EXPERT_SATURATE" in e.conventions and _saturates(ev, O or T)
    tanhs = _tanh_forms(ev) if "KT_EXPERT_TANH" in e.conventions else [None]
    fast = _fast_silu(ev, e)
    for di, (d, dsup) in enumerate(ds):
        dname = d.words.strip("`")
        for act, act_words, asup in acts:
            # ReLU and FATReLU give a value of T itself: rounding it to T changes nothing
            if act in (11, 14):
                act_rounds = [(None, "")]
            elif act in (12, 13) and ev.has(*_HALF_MULS):  # products in T: the activation's value rounded first
                act_rounds = sorted(rounds, key=lambda r: r[0] != 1)
            else:
                act_rounds = rounds
            for (li, layout), (ri, (rnd, rwords)), (ti, tanh) in itertools.product(
                    enumerate(layouts), enumerate(act_rounds), enumerate(tanhs if act == 2 else [None])):
                if True:  # one binding
                    b = Binding(e, 0.85, (f"reads two halves of a `2 * {dname}` row and writes one of `{dname}`, "
                                          if len(xs) == 1 else f"reads a gate and an up row of `{dname}` and writes "
                                          "one, ") + act_words, ev.kernel.name)
                    b.sizes = {"rows": f"({o.spec.size}) / ({d.spec})", "d": d.spec}
                    b.defines = {"KT_EXPERT_ACT": act if act < 10 else 0}
                    b.conventions = {"KT_EXPERT_GATE_LAYOUT": layout}
                    if act >= 10:
                        b.conventions["KT_EXPERT_GATE_FN"] = act - 10
                    if act == 0 and fast is not None:
                        b.conventions.update(fast[0])
                    if rnd is not None:
                        b.conventions["KT_EXPERT_ROUND_ACT"] = rnd
                    b.template_args = [CTYPE[T]]
                    b.call_args = [_cast(T, o.name, False)] + [_cast(T, a.name, True) for a in xs] + [d.c]
                    if act == 14:
                        b.call_args.append(f"(float)({_thresholds(ev)[0]})")
                    b.consts = {"ESIZE": NBYTES[T]}
                    if mixed:  # an output of a type of its own
                        b.conventions["KT_EXPERT_OUT_TYPE"] = 1
                        b.template_args.append(CTYPE[O])
                        b.call_args[0] = _cast(O, o.name, False)
                        b.consts["ESIZE"] = max(NBYTES[T], NBYTES[O])
                    roles = [f"x={x.name}"] if len(xs) == 1 else [f"gate={xs[0].name}", f"up={xs[1].name}"]
                    b.words = [f"out={o.name}" + (f" ({O}, x {T})" if mixed else ""), *roles, f"d={d.words}",
                               ACTS[act] + (f", threshold=`{_thresholds(ev)[0]}`" if act == 14 else ""),
                               LAYOUTS[layout]] + ([rwords] if rwords else [])
                    if act == 0 and fast is not None:
                        b.words.append(fast[1])
                    if tanh is not None:
                        b.conventions["KT_EXPERT_TANH"] = tanh
                        b.words.append(TANHS[tanh])
                    if limit is not None and act != 14:
                        b.conventions["KT_EXPERT_ACT_LIMIT"] = 1
                        b.call_args.append(f"(float)({limit})")
                        b.words.append(f"act_limit=`{limit}` (0: off; up clamped to [-limit, limit], the activation "
                                       "from above)")
                    if saturate:
                        b.conventions["KT_EXPERT_SATURATE"] = 1
                        b.words.append(f"the result clamped to {O or T}'s finite range")
                    b.support = dsup + asup + (2 if li == 0 else 0) + (1 if ri == 0 else 0) - di + extra - ti
                    out.append(b)
    return out


TANHS = {0: "tanhf", 1: "tanh.approx.f32, 0.5 v (1 + t) in fp32",
         2: "tanh.approx.f32, 1 + t and its product with 0.5 v in double (the double literal 1.0)"}


def _tanh_forms(ev: Evidence) -> list[int | None]:
    """KT_EXPERT_TANH for the fp32 GELU (tanh), the body's first: where the body's inline asm computes tanh.approx.f32,
    1 + t in double first where the body adds a double literal 1 (``1.0 + t``, no f suffix: ExLlamaV2 / V3's
    ``0.5f * x * (1.0 + tanh_opt(...))``), else in fp32 first; tanhf last. [None] without such asm (the expert's
    tanhf, as it always was)."""
    if not _asm_tanh(ev):
        return [None]
    one = r"(?<![\w.])1\.0*(?![\w.])"
    double = re.search(rf"{one}\+|\+\(?{one}", ev.flat) is not None
    return [2, 1, 0] if double else [1, 2, 0]


def _bound(text: str, name: str) -> int:
    """+1 where ``text`` is the float argument ``name`` (casts and parentheses aside), -1 where it is its negation,
    else 0."""
    t = _operand(text)
    if t == name:
        return 1
    if t.startswith("-") and _operand(t[1:]) == name:
        return -1
    return 0


def _clamp_target(text: str, name: str) -> str:
    """The value a min / max call bounds, without the calls around it that bound it by ``name`` too."""
    t = _operand(text)
    while True:
        m = re.fullmatch(rf"(?:std::)?(?:{CLAMP_CALLS})\((.*)\)", t)
        if m is None:
            return t
        args = [a for _, args in call_arguments(t, rf"(?:{CLAMP_CALLS})") for a in args][:2]
        rest = [a for a in args if not _bound(a, name)]
        if len(args) != 2 or len(rest) != 1:
            return t
        t = _operand(rest[0])


def _act_limit(ev: Evidence) -> str | None:
    """ExLlamaV3's act_limit: the float argument L the body compares with zero (the clamps are off at 0) and bounds
    values by, from above at L and from below at -L, one value both ways (the up half) and another from above only
    (the activation): as statements (``if (v > L) v = L;``), conditionals (``v > L ? L : v``) or min / max calls
    (``fminf(v, L)``). None where no float argument does (gpt-oss's clamp has no off switch)."""
    flat = ev.flat
    for a in ev.floats():
        n = re.escape(a.name)
        if not re.search(rf"(?<![\w.]){n}\)?(?:!=|>)\(?{_ZERO}(?![\w.])|(?<![\w.]){_ZERO}\)?(?:!=|<)\(?{n}(?![\w.])",
                         flat):
            continue
        lim = rf"\(?(?:\(float\))?(-?)\(?{n}\)?"
        sides: dict[str, set[int]] = {}
        for m in re.finditer(rf"if\(([\w.\[\]]+)([<>])=?{lim}\)\1={lim};", flat):  # if (v > L) v = L;
            v, op, s1, s2 = m.groups()
            if s1 == s2 and (op, s1) in ((">", ""), ("<", "-")):
                sides.setdefault(v, set()).add(1 if op == ">" else -1)
        for m in re.finditer(rf"([\w.\[\]]+)([<>])=?{lim}\?{lim}:\1(?![\w.\[])", flat):  # v > L ? L : v
            v, op, s1, s2 = m.groups()
            if s1 == s2 and (op, s1) in ((">", ""), ("<", "-")):
                sides.setdefault(v, set()).add(1 if op == ">" else -1)
        for fn, args in call_arguments(ev.body, rf"(?:{CLAMP_CALLS})"):
            if len(args) != 2:
                continue
            for x, y in (args, args[::-1]):
                sign = _bound(y, a.name)
                if sign and not _bound(x, a.name) and (sign > 0) == ("min" in fn):
                    sides.setdefault(_clamp_target(x, a.name), set()).add(sign)
        both = [v for v, ss in sides.items() if ss == {1, -1}]
        above = [v for v, ss in sides.items() if ss == {1}]
        if both and above:
            return a.name
    return None


_FINITE = {"f16": 65504.0, "bf16": 3.3895313892515355e38}  # the largest finite value of each 16-bit type


def _saturates(ev: Evidence, O: str) -> bool:
    """Whether the body clamps a value to the 16-bit output type ``O``'s finite range: a min / max call (16-bit ones
    too) bounding it by that type's largest finite value, given as a literal, a named constant or a local set to a
    conversion of one (ExLlamaV3's clamp_half2_to_finite: ``__hmin2(v, __float2half2_rn(65504.0f))``)."""
    top = _FINITE.get(O)
    if top is None:
        return False
    once: dict[str, list[str]] = {}
    for t, v in assignments(ev.body):
        once.setdefault(t, []).append(v)

    def holds(text: str, depth: int = 0) -> bool:
        for tok in re.findall(rf"(?<![\w.])(?:{FLOAT_LIT}|\d+|[A-Za-z_]\w*)(?![\w.(])", re.sub(r"\s+", "", text)):
            v = number(tok, ev.constants)
            if v is not None and abs(abs(v) - top) <= top * 1e-6:
                return True
            if v is None and depth < 2 and len(once.get(tok, ())) == 1 and holds(once[tok][0], depth + 1):
                return True
        return False

    return any(holds(a) for _, args in call_arguments(ev.body, rf"(?:std::)?(?:{CLAMP_CALLS}|__hmin2|__hmax2)")
               for a in args)


# ----------------------------------------------------------------------------------- a bias of the gated row
def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


SQRT2_F32 = _f32(math.sqrt(2.0))  # the float nearest sqrt(2): 1.41421356237f, sqrtf(2.f), (float)M_SQRT2


def _erf_divided(ev: Evidence) -> bool:
    """Whether the body's erf takes its argument divided by the float nearest sqrt(2) (``erff(v / 1.41421356237f)``,
    ``erff(v / sqrtf(2.f))``, a float constant of that value, or a local assigned such a quotient): one float
    division, where the usual form multiplies by 1 / sqrt(2)."""
    values = dict(assignments(ev.body))
    for _, args in call_arguments(ev.body, r"erff|erf"):
        if len(args) != 1:
            continue
        arg = unparen(re.sub(r"\s+", "", args[0]))
        if re.fullmatch(r"[A-Za-z_]\w*", arg) and arg in values:
            arg = unparen(re.sub(r"\s+", "", values[arg]))
        m = re.fullmatch(r"(.+)/(sqrtf\(2(?:\.0*)?[fF]?\)|[\w.]+)", arg)
        if m is None or len(additive_terms(m.group(1))) != 1:
            continue  # not a quotient of the whole argument
        den = m.group(2)
        if den.startswith("sqrtf("):
            return True
        if re.fullmatch(FLOAT_LIT, den) and den[-1] not in "fF":
            continue  # a double literal: a double division, neither float form
        v = number(den, ev.constants)
        if v is not None and _f32(v) == SQRT2_F32:
            return True
    return False


def _act_rounded(ev: Evidence, x: str, up: str | None) -> bool:
    """Whether the body converts a value the activation's math feeds, and the other half does not (its local ``up``,
    or, with none, no read of ``x`` in the converted text), to a 16-bit type (``__float2bfloat16(act)`` before a
    16-bit product): the activation rounded before the multiply."""
    half = {n for n, a in instance_types(ev).items() if re.fullmatch(rf"(?:const\s+)?(?:{HALF_TYPES})", a)}
    types = "|".join([HALF_TYPES] + [re.escape(h) for h in sorted(half)])
    casts = rf"__float2(?:half|bfloat16)(?:_rn)?\(|static_cast<(?:{types})>\(|\((?:{types})\)\(|(?<![\w:])(?:{types})\("
    fl = flows(ev.body, declarators=True)
    for m in re.finditer(casts, ev.flat):
        arg = ev.flat[m.end():closing(ev.flat, m.end()) - 1]
        fed = feeding(fl, arg)
        if not (_ACT_CALLS.search(arg) or fed & {"erff", "erf", "tanhf", "tanh", "expf", "__expf", "exp"}):
            continue
        if up not in fed if up is not None else not re.search(rf"(?<![\w.]){re.escape(x)}\[", arg):
            return True
    return False


def _row_bias(ev: Evidence, e: Expert, ins, o) -> list[Binding]:
    """One gated row input of twice the output's elements and a bias of the row's width (twice the output row) that
    the body adds to it (ONNX Runtime's BiasSplitGelu, diffusers' GEGLU after a GEMM without its bias): the
    KT_EXPERT_BIAS 2 bindings over the halves, the layout the loads show first."""
    if not {"KT_EXPERT_BIAS", "KT_EXPERT_ERF_DIV"} <= set(e.conventions):
        return []
    if not o.counts:
        return []
    rows2 = [a for a in ins if a.counts and all(p == 2 * q for p, q in zip(a.counts, o.counts))]
    if len(rows2) != 1:
        return []
    x = rows2[0]
    b = ins[1] if x is ins[0] else ins[0]
    T = o.dtype
    if not (x.dtype == b.dtype == T) or not b.counts or any(c % 2 for c in b.counts):
        return []
    dc = tuple(c // 2 for c in b.counts)
    if not div(o.counts, dc) or dc == o.counts:
        return []
    if _added_to(ev, b.name, {x.name}) != x.name:
        return []  # not a bias the body adds to the row
    ds = [s for s in ev.sizes(dc) if "/" not in s.c and "*" not in s.c]
    if not ds:
        return []
    rows_fp = div(o.counts, dc)
    held = [s for s in ev.sizes(rows_fp) if re.fullmatch(r"\(int\)\(\w+\)", s.c)]
    if held:
        rows_spec, rows_words = held[0].spec, f"rows={held[0].words}"
    elif all(g.strip() == "1" for g in ev.spec.grid[1:]) and counts_of(ev.spec.grid[0], ev.spec) == rows_fp:
        rows_spec, rows_words = ev.spec.grid[0], "rows=the grid (one block a row)"
    else:
        rows_spec, rows_words = None, "rows=the output over the row"
    # the gate: the half the activation's math reads (its loads' indices)
    fl = flows(ev.body, declarators=True)
    values = assignments(ev.body)
    gate_feed: set[str] = set()
    for _, args in call_arguments(ev.body, _ACT_MATH):
        for a in args:
            gate_feed |= feeding(fl, a)
    layout = _gate_layout(x.name, values, gate_feed)
    ups = [t for t, v in values if t not in gate_feed and re.search(rf"(?<![\w.]){re.escape(x.name)}\[", v)]
    layouts = [layout, 1 - layout] if layout in (0, 1) else [0, 1]
    acts = [a for a in _acts(ev) if a[2]] or _acts(ev)
    erf_forms = [1, 0] if _erf_divided(ev) else [0]
    rounds = [(None, "")]
    if T != "f32":
        rounded = _act_rounded(ev, x.name, ups[0] if len(ups) == 1 else None)
        rounds = [(0, "activation kept in fp32"), (1, f"activation rounded to {T} before the multiply")]
        if rounded:
            rounds.reverse()
    out = []
    for (di, d), (act, act_words, asup), (li, lay), (ri, (rnd, rwords)) in itertools.product(
            enumerate(ds), acts, enumerate(layouts), enumerate(rounds)):
        for fi, div_form in enumerate(erf_forms if act == 1 else [0]):
            dname = d.c if d.c.isdigit() else d.words.strip("`")
            bd = Binding(e, 0.85, f"reads two halves of a `2 * {dname}` row, adds the bias `{b.name}` of the row's "
                                  f"width to it, writes one of `{dname}`, " + act_words, ev.kernel.name)
            bd.sizes = {"rows": rows_spec or f"({o.spec.size}) / ({d.spec})", "d": d.spec}
            bd.defines = {"KT_EXPERT_ACT": act}
            bd.conventions = {"KT_EXPERT_GATE_LAYOUT": lay, "KT_EXPERT_BIAS": 2}
            if act == 1:
                bd.conventions["KT_EXPERT_ERF_DIV"] = div_form
            if rnd is not None:
                bd.conventions["KT_EXPERT_ROUND_ACT"] = rnd
            bd.template_args = [CTYPE[T]]
            bd.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(T, b.name, True), d.c]
            bd.consts = {"ESIZE": NBYTES[T]}
            bd.words = [f"out={o.name}", f"x={x.name}", f"bias={b.name} (of the row's 2 * d, added to each half, "
                        f"each sum rounded to {T})", f"d={d.words}", rows_words, ACTS[act]]
            if act == 1:
                bd.words.append("erf of v / sqrt(2) (a division)" if div_form else "erf of v * (1 / sqrt(2))")
            bd.words += [LAYOUTS[lay]] + ([rwords] if rwords else [])
            bd.support = 20 + asup - di - 4 * li - 2 * fi - ri
            out.append(bd)
    return out


# ----------------------------------------------------------------------------------- gpt-oss's clamped SwiGLU
def _operand(text: str) -> str:
    """An operand without its whitespace, outer parentheses and float casts: ``(float)(limit)`` is ``limit``."""
    t = re.sub(r"\s+", "", text)
    while True:
        u = re.sub(r"^(?:\(float\)|static_cast<float>|float)(?=\()", "", t)
        u = re.sub(r"^\(float\)(?=[-\w.])", "", u)
        u = unparen(u)
        if u == t:
            return t
        t = u


def _scalar(text: str, ev: Evidence) -> tuple[str, str, float | None, str] | None:
    """A float scalar of the body as (key, C text for the wrapper, its value where it is a number, words): a float
    argument (value None), a float literal, or an identifier the file sets to one number (``#define LIMIT 7.0f``)."""
    if text in {a.name for a in ev.floats()}:
        return text, f"(float)({text})", None, f"`{text}`"
    if re.fullmatch(FLOAT_LIT, text):
        v = float(text.rstrip("fF"))
        return repr(v), text, v, text
    v = number(text, ev.constants) if re.fullmatch(r"[A-Za-z_]\w*", text) else None
    return (repr(v), f"{v!r}f", v, f"`{text}` ({v!r}f)") if v is not None else None


def _mentions(texts, sc: tuple, consts: dict[str, float]) -> bool:
    """Whether any text names the scalar ``sc`` (a float argument) or holds its number (a literal of that value, or
    an identifier the file sets to it)."""
    key, _, value, _ = sc
    for t in texts:
        if value is None:
            if re.search(rf"\b{re.escape(key)}\b", t):
                return True
            continue
        for m in re.finditer(rf"(?<![\w.])(?:{FLOAT_LIT}|[A-Za-z_]\w*)(?![\w.])", re.sub(r"\s+", "", t)):
            w = m.group(0)
            if (float(w.rstrip("fF")) if re.fullmatch(FLOAT_LIT, w) else consts.get(w)) == value:
                return True
    return False


def _limit(ev: Evidence) -> tuple | None:
    """The clamp limit L: a float argument, literal or named constant the body bounds values by from above (L) and
    from below (-L), in min/max calls or conditionals (``x > L ? L : x``)."""
    bounds: list[tuple[int, str]] = []
    for _, args in call_arguments(ev.body, CLAMP_CALLS):
        if len(args) == 2:
            bounds += [(-1, _operand(t[1:])) if t.startswith("-") else (1, t) for t in map(_operand, args)]
    for m in re.finditer(r"[<>]=?(-?[\w.]+)\?(-?[\w.]+):", ev.flat):
        if m.group(1) == m.group(2):
            t = m.group(2)
            bounds.append((-1, _operand(t[1:])) if t.startswith("-") else (1, t))
    found: dict[str, tuple] = {}
    signs: dict[str, set[int]] = {}
    for sign, t in bounds:
        sc = _scalar(t, ev)
        if sc is None or (sc[2] is not None and sc[2] <= 0):
            continue
        found.setdefault(sc[0], sc)
        signs.setdefault(sc[0], set()).add(sign)
    both = [k for k, v in signs.items() if v == {1, -1}]
    return found[both[0]] if len(both) == 1 else None


EXPS = {"expf", "__expf", "exp", "hexp"}


def _exp_fed(fl: dict[str, set[str]], names) -> bool:
    return any(n in EXPS or fl.get(n, set()) & EXPS for n in names)


def _clamped_swiglu(ev: Evidence, x) -> dict | None:
    """gpt-oss's clamped SwiGLU as the body computes it, or None: the limit, alpha and beta (C text, words), the
    sigmoid's forms (the kernel's own where the body shows it) and the gate's layout where its loads tell it."""
    exps = call_arguments(ev.body, EXP_CALLS)
    if not exps:
        return None
    limit = _limit(ev)
    if limit is None:
        return None
    fl = flows(ev.body, declarators=True)
    values = assignments(ev.body)
    alpha = gate_feed = None
    for _, args in exps:
        arg = args[0]
        fed = feeding(fl, arg)
        texts = [arg] + [v for t, v in values if t in fed]
        if not _mentions(texts, limit, ev.constants):
            continue  # the exponential's input is not the gate clamped at the limit
        # alpha: a float argument the exponential's input is computed from (its own text first), else a number
        own = [a.name for a in ev.floats() if a.name != limit[0] and re.search(rf"\b{re.escape(a.name)}\b", arg)]
        fed_args = [a.name for a in ev.floats() if a.name != limit[0] and a.name in fed]
        if own or fed_args:
            alpha = _scalar((own or fed_args)[0], ev)
        for t in texts if alpha is None else ():
            for m in re.finditer(rf"(?<![\w.])(?:{FLOAT_LIT}|[A-Za-z_]\w*)(?![\w.(])", re.sub(r"\s+", "", t)):
                sc = _scalar(m.group(0), ev)
                if sc is not None and sc[2] is not None and sc[2] not in (0.0, 1.0, limit[2]):
                    alpha = sc
                    break
            if alpha is not None:
                break
        if alpha is not None:
            gate_feed = fed
            break
    if alpha is None:
        return None
    beta = _beta(ev, fl, values, limit, alpha)
    # the sigmoid's form: a reciprocal times the gate (1 / (1 + e)) or the gate divided by (1 + e)
    recip = "__frcp_rn" in ev.calls
    divided = False
    for m in re.finditer(r"/\(1(?:\.0*)?[fF]?\+", ev.flat):
        if re.search(r"(?<![\w.])1(?:\.0*)?[fF]?$", ev.flat[:m.start()]):
            recip = True
        else:
            divided = True
    forms = [1] if recip and not divided else [0] if divided and not recip else [0, 1]
    if ev.has("__expf") and not ev.has("expf", "exp"):
        forms = [f + 2 for f in forms]
    return {"limit": limit[1::2], "alpha": alpha[1::2], "beta": beta, "forms": forms,
            "layout": _gate_layout(x.name, values, gate_feed)}


def _beta(ev: Evidence, fl, values, limit: tuple, alpha: tuple) -> tuple[str, str]:
    """What is added to the clamped up half: a float argument, a literal or a named constant added to a value the
    limit bounds and no exponential feeds; 0 where nothing is."""
    flat = ev.flat
    ident = r"[A-Za-z_]\w*"
    for m in re.finditer(r"\+", flat):
        if flat[m.end():m.end() + 1] in ("+", "=") or flat[m.start() - 1:m.start()] == "+":
            continue
        left, right = flat[:m.start()], flat[m.end():]
        lm = re.search(rf"(?<![\w.])(?:{FLOAT_LIT}|{ident})$", left)
        rm = re.match(rf"(?:{FLOAT_LIT}|{ident})(?![\w.(])", right)
        for num, other in ((rm, _left_operand(left, lm)), (lm, _right_operand(right, rm))):
            if num is None or other is None:
                continue
            sc = _scalar(num.group(0), ev)
            if sc is None or sc[0] in (limit[0], alpha[0]) or sc[2] == 0.0:
                continue
            fed = feeding(fl, other)
            if _exp_fed(fl, fed):
                continue
            if _mentions([other] + [v for t, v in values if t in fed], limit, ev.constants):
                return sc[1], sc[3]
    return "0.0f", "0 (nothing added to up)"


def _left_operand(left: str, lm) -> str | None:
    """The operand that ends where ``left`` ends: an identifier (``up``) or a parenthesized expression."""
    if left.endswith(")"):
        depth = 0
        for i in range(len(left) - 1, -1, -1):
            depth += left[i] == ")"
            depth -= left[i] == "("
            if depth == 0:
                j = i
                while j > 0 and (left[j - 1].isalnum() or left[j - 1] == "_"):
                    j -= 1  # a call's name: fminf(...)
                return left[j:]
        return None
    return lm.group(0) if lm is not None and not re.fullmatch(FLOAT_LIT, lm.group(0)) else None


def _right_operand(right: str, rm) -> str | None:
    m = re.match(r"[A-Za-z_]\w*\(|\(", right)
    if m:
        depth = 0
        for i, ch in enumerate(right):
            depth += ch == "("
            depth -= ch == ")"
            if ch == ")" and depth == 0:
                return right[:i + 1]
        return None
    return rm.group(0) if rm is not None and not re.fullmatch(FLOAT_LIT, rm.group(0)) else None


def _terms(index: str) -> list[str]:
    """The top-level terms of a sum (an index), without whitespace and outer parentheses."""
    out, depth, cur = [], 0, ""
    for ch in re.sub(r"\s+", "", index):
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "+" and depth == 0:
            out.append(_operand(cur))
            cur = ""
        else:
            cur += ch
    out.append(_operand(cur))
    return [t for t in out if t]


def _gate_layout(x: str, values, gate_feed: set[str] | None) -> int | None:
    """The layout the gate's and up's loads show: each is a local assigned from x (or a local pointer into it)
    at an index; the gate's feeds the exponential. One more term ``+ 1`` on one of them: interleaved pairs, that one
    second; one more other term (the row length): halves, that one second. None where the loads do not tell."""
    if not gate_feed:
        return None
    ptrs = {x: ""}
    loads: dict[str, str] = {}
    for target, value in values:
        v = re.sub(r"\s+", "", value)
        hit = None
        for p in ptrs:
            m = re.search(rf"(?<![\w.]){re.escape(p)}\[", v)
            if m:
                depth, i = 1, m.end()
                while i < len(v) and depth:
                    depth += v[i] == "["
                    depth -= v[i] == "]"
                    i += 1
                hit = (p, v[m.end():i - 1])
                break
        if hit is not None:
            off = ptrs[hit[0]]
            loads.setdefault(target, f"{off}+{hit[1]}" if off else hit[1])
        elif target not in ptrs and any(re.search(rf"(?<![\w.]){re.escape(p)}(?![\w.\[])", v) for p in ptrs):
            p = next(p for p in ptrs if re.search(rf"(?<![\w.]){re.escape(p)}(?![\w.\[])", v))
            rest = "+".join(t for t in _terms(v) if t != p)
            ptrs[target] = "+".join(t for t in (ptrs[p], rest) if t)
    gates = [t for t in loads if t in gate_feed]
    ups = [t for t in loads if t not in gate_feed]
    if len(gates) != 1 or len(ups) != 1:
        return None
    g, u = Counter(_terms(loads[gates[0]])), Counter(_terms(loads[ups[0]]))
    g_extra, u_extra = g - u, u - g
    if not g_extra and list(u_extra.elements()) == ["1"]:
        return 2
    if not u_extra and list(g_extra.elements()) == ["1"]:
        return 3
    if not g_extra and sum(u_extra.values()) == 1:
        return 0
    if not u_extra and sum(g_extra.values()) == 1:
        return 1
    return None


def _clamped_bindings(ev: Evidence, e: Expert, x, o, ds: list, layouts: list[int], clamp: dict) -> list[Binding]:
    """Every (row length, layout, sigmoid form, rounding) binding of the clamped SwiGLU (KT_EXPERT_CLAMP 1): alpha,
    beta and limit passed after d as the body has them (an argument, or the number a literal or constant holds)."""
    T, O = x.dtype, o.dtype
    mixed = O != T
    (lc, lwords), (ac, awords), (bc, bwords) = clamp["limit"], clamp["alpha"], clamp["beta"]
    # the serving code bases keep the clamped gate's product in fp32 to the one rounding at the store: that first
    rounds = sorted(_rounds(ev, T), key=lambda r: r[0] == 1)
    out = []
    for di, (d, dsup) in enumerate(ds):
        dname = d.words.strip("`")
        for li, layout in enumerate(layouts):
            for si, form in enumerate(clamp["forms"]):
                for ri, (rnd, rwords) in enumerate(rounds):
                    b = Binding(e, 0.9, f"reads two halves of a `2 * {dname}` row and writes one of `{dname}`, "
                                        f"clamps at {lwords} and -{lwords}, an exponential of the clamped gate times "
                                        f"{awords} → gpt-oss's clamped SwiGLU", ev.kernel.name)
                    b.sizes = {"rows": f"({o.spec.size}) / ({d.spec})", "d": d.spec}
                    b.conventions = {"KT_EXPERT_GATE_LAYOUT": layout, "KT_EXPERT_CLAMP": 1, "KT_EXPERT_SIGMOID": form}
                    b.conventions["KT_EXPERT_ROUND_ACT"] = 0 if rnd is None else rnd  # fp32 x: nothing to round
                    if mixed:
                        b.conventions["KT_EXPERT_OUT_TYPE"] = 1
                    b.template_args = [CTYPE[T], CTYPE[O]]
                    b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), d.c, ac, bc, lc]
                    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
                    b.words = [f"out={o.name}" + (f" ({O}, x {T})" if mixed else ""), f"x={x.name}", f"d={d.words}",
                               "clamped SwiGLU (gpt-oss): (clamp(up, -limit, limit) + beta) * g * sigmoid(alpha * g), "
                               "g = min(gate, limit)", f"alpha={awords}", f"beta={bwords}", f"limit={lwords}",
                               SIGMOIDS[form], LAYOUTS[layout]] + ([rwords] if rwords else [])
                    b.support = dsup + 6 + (2 if li == 0 else 0) + (1 if si == 0 else 0) + (1 if ri == 0 else 0) - di
                    out.append(b)
    return out


# ----------------------------------------------------------------------------------- static fp8 output
_ACT_CALLS = re.compile(r"\b(?:expf|__expf|exp|exp2f|erff|erf|erfcf|normcdff|tanhf|tanh)\(")
_HALF_PRODUCTS = ("__hmul", "__hmul2", "__hmul_rn", "__hmul2_rn", "__hfma", "__hfma2")


def _fp8_quant(ev: Evidence, e: Expert) -> list[Binding]:
    """SiLU / GELU-and-mul whose output is quantized to fp8 by a static per-tensor scale (vLLM's silu_and_mul_quant;
    KT_EXPERT_QUANT with KT_EXPERT_OUT_TYPE 1): one float input of twice the output's elements, one byte output whose
    type or conversions show fp8, and the scale: the one other buffer, a one-element fp32 input, or, with no other
    buffer, the one float argument the body multiplies or divides by."""
    bufs = ev.bufs()
    outs = [a for a in bufs if a.role == "out"]
    if len(outs) != 1 or outs[0].dtype not in ("u8", "i8") or not outs[0].counts:
        return []
    o = outs[0]
    xs = [a for a in bufs if a.role == "in" and a.dtype in FLOATS and a.counts
          and all(p == 2 * q for p, q in zip(a.counts, o.counts))]
    if len(xs) != 1:
        return []
    x = xs[0]
    others = [a for a in bufs if a is not o and a is not x]
    if others:
        s = others[0]
        if len(others) != 1 or s.role != "in" or s.dtype != "f32" or not s.counts or any(c != 1 for c in s.counts):
            return []
        scale, pointer, scale_c = s.name, True, f"*(const float*)({s.name})"
    else:
        used = [a for a in ev.floats() if _scaled_by(ev, a.name)]
        if len(used) != 1:
            return []
        scale, pointer, scale_c = used[0].name, False, f"(float)({used[0].name})"
    formats = fp8_formats(ev, o)
    ds = _row_lengths(ev, o)
    if not formats or not ds:
        return []
    T = x.dtype
    acts = []  # the activations the body's math calls show; SiLU's exponential as the body calls it
    for act, act_words, asup in [a for a in _acts(ev) if a[2]] or _acts(ev):
        fast = ([1, 0] if not ev.has("expf", "exp") else [0, 1]) if act == 0 and ev.has("__expf") else [None]
        acts += [(act, act_words, asup - 3 * k, f) for k, f in enumerate(fast)]
    layouts = [2, 3, 0, 1] if _reads_pairs(ev, x.name) else [0, 1, 2, 3]
    ops = scale_ops(ev, scale, pointer)
    rounds = _quant_rounds(ev, T)
    out = []
    for (di, (d, dsup)), (act, act_words, asup, fast), (li, layout), (ri, (ra, qr, rwords)), (oi, (op, op_words)), \
            (fi, O) in itertools.product(enumerate(ds), acts, enumerate(layouts), enumerate(rounds), enumerate(ops),
                                         enumerate(formats)):
        dname = d.words.strip("`")
        b = Binding(e, 0.85, f"reads two halves of a `2 * {dname}` row and writes one of `{dname}` as fp8 bytes "
                             f"scaled by `{scale}`, " + act_words, ev.kernel.name)
        b.sizes = {"rows": f"({o.spec.size}) / ({d.spec})", "d": d.spec}
        b.defines = {"KT_EXPERT_ACT": act}
        b.conventions = {"KT_EXPERT_GATE_LAYOUT": layout, "KT_EXPERT_OUT_TYPE": 1, "KT_EXPERT_QUANT": op}
        if fast is not None:
            b.conventions["KT_EXPERT_FAST_EXP"] = fast
        if ra is not None:
            b.conventions.update({"KT_EXPERT_ROUND_ACT": ra, "KT_EXPERT_QUANT_ROUND": qr})
        else:  # fp32 input: nothing to round
            b.conventions["KT_EXPERT_QUANT_ROUND"] = 0
        b.template_args = [CTYPE[T], O]
        b.call_args = [f"({O}*)({o.name})", _cast(T, x.name, True), d.c, scale_c]
        b.consts = {"ESIZE": NBYTES[T]}
        b.words = [f"out={o.name} ({O.removeprefix('__nv_fp8_')} bytes)", f"x={x.name}", f"d={d.words}",
                   f"scale={scale} ({'one fp32 value' if pointer else 'a float argument'})",
                   ACTS[act] + (" with __expf" if fast else ""), LAYOUTS[layout]]
        b.words += ([rwords] if rwords else []) + [op_words]
        # the row length and activation the body shows, then the scale's use, the layout, the rounding points
        b.support = 40 + dsup + asup - di - 8 * oi - 3 * li - 2 * ri - 4 * fi
        out.append(b)
    return out


def _scaled_by(ev: Evidence, name: str) -> bool:
    """Whether the body multiplies or divides by the float argument ``name`` (or takes its reciprocal)."""
    n = re.escape(name)
    return re.search(rf"[*/]\(?{n}\b|(?<![\w.>]){n}\)?[*/](?!=)", ev.flat) is not None


def _reads_pairs(ev: Evidence, x: str) -> bool:
    """Whether the input ``x``, or a local pointer made from it, is read at interleaved pair indices (``[2 * i]``,
    ``[i * 2]``, ``[2 * i + 1]``): only the input's own subscripts count, not an output pack's."""
    names = {x}
    for target, value in assignments(ev.body):
        v = re.sub(r"\s+", "", value)
        if target not in names and any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w\[(])", v) for n in names):
            names.add(target)
    refs = "|".join(re.escape(n) for n in sorted(names))
    return re.search(rf"(?<![\w.])(?:{refs})\[(?:2\*|\w+\*2\b|[^\]]*\*2\+1\]|[^\]]*\+1\])", ev.flat) is not None


def _quant_rounds(ev: Evidence, T: str) -> list[tuple[int | None, int | None, str]]:
    """(KT_EXPERT_ROUND_ACT, KT_EXPERT_QUANT_ROUND, words) for a 16-bit input T, the body's form first: a conversion
    to a 16-bit type of the activation's math (an exponential, erf or tanh in its argument) rounds the activation;
    a 16-bit product (__hmul, __hmul2, __hfma), a conversion to a 16-bit type of a product without that math, or the
    activation rounded (the product then taken in T, as vLLM's ACT_FN(x) * y in scalar_t) rounds the product
    before the scale. The other rounding points after it, nearest first."""
    if T == "f32":
        return [(None, None, "")]
    half = {n for n, a in instance_types(ev).items() if re.fullmatch(rf"(?:const\s+)?(?:{HALF_TYPES})", a)}
    types = "|".join([HALF_TYPES] + [re.escape(h) for h in sorted(half)])
    casts = rf"__float2(?:half|bfloat16)(?:_rn)?\(|static_cast<(?:{types})>\(|\((?:{types})\)\(|(?<![\w:])(?:{types})\("
    act_rounded, prod_rounded = False, ev.has(*_HALF_PRODUCTS)
    for m in re.finditer(casts, ev.flat):
        i = closing(ev.flat, m.end())
        arg = ev.flat[m.end():i - 1]
        if _ACT_CALLS.search(arg):
            act_rounded = True
        elif "*" in arg:
            prod_rounded = True
    ra, qr = int(act_rounded), int(act_rounded or prod_rounded)
    words = {(1, 1): f"activation rounded to {T} before the multiply, the product rounded to {T} before the scale",
             (1, 0): f"activation rounded to {T} before the multiply, the product scaled in fp32",
             (0, 1): f"activation kept in fp32, the product rounded to {T} before the scale",
             (0, 0): "activation and product kept in fp32"}
    combos = sorted(words, key=lambda c: (c[0] != ra) + (c[1] != qr) + 0.5 * (c[0] != ra))
    return [(a, q, words[(a, q)]) for a, q in combos]


# ----------------------------------------------------------------------------------- generic activation, in place
# A 2-vector of a 16-bit float as the kernel's element type: the host passes the buffers as pairs and every size
# argument counts pairs (FasterTransformer / TensorRT-LLM's generic activation on half2 / __nv_bfloat162).
PACKED = re.compile(r"\b(?:__half2|half2|__nv_bfloat162|nv_bfloat162)\b")
GELU_FORMS = {0: "", 1: "the packed 16-bit GELU (v^3 and the cdf rounded to T, tanh.approx.f32, times v in T)",
              2: "the packed 16-bit GELU (v^3 and the cdf rounded to T, tanhf, times v in T)"}
_HALF_MULS = ("__hmul", "__hmul2", "__hmul_rn", "__hmul2_rn")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _packing(ev: Evidence, names) -> int:
    """How many elements of the spec's dtype one element of the kernel's buffers ``names`` holds, by their declared
    types (a type template parameter read as the instantiation gives it): 2 for half2 / __nv_bfloat162, the word's
    bytes over the element's for a buffer declared as words of another type (`const uint2*` over halves: 4), else 1;
    0 where the buffers disagree."""
    inst = instance_types(ev)
    params = {p.name: p for p in ev.kernel.params}
    packs = set()
    for n in names:
        p = params.get(n)
        if p is not None:
            ty = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: inst.get(m.group(0), m.group(0)), p.type)
            # a buffer declared as words of several elements (`const uint2*` over halves: four a word)
            words = [VECTOR_BYTES[t] for t in re.findall(r"\b[A-Za-z_]\w*\b", ty) if t in VECTOR_BYTES]
            size = NBYTES.get(next((a.dtype for a in ev.bufs() if a.name == n), None))
            if PACKED.search(ty):
                packs.add(2)
            elif words and size and words[0] % size == 0:
                packs.add(words[0] // size)
            else:
                packs.add(1)
    return packs.pop() if len(packs) == 1 else 0


def _lengths(ev: Evidence, target: tuple, pack: int) -> list[SizeExpr]:
    """Every way the wrapper computes the row length ``target`` (elements of the spec's dtype) from the int arguments,
    which count ``pack``-element pairs; no literal."""
    t = div(target, (pack,) * len(target)) if pack > 1 else target
    xs = [s for s in ev.sizes(t) if not s.c[0].isdigit()] if t else []
    if pack == 1:
        return xs
    unit = "pairs" if pack == 2 else "words"
    return [SizeExpr(f"{pack} * {s.c}", f"{pack} * ({s.spec})", f"`{pack} * {s.words.strip('`')}` ({s.words} counts "
                     f"{pack}-element {unit})") for s in xs]


def _first_tensors(ev: Evidence, tensors: set[str]) -> dict[str, set[str]]:
    """Local → the tensors its first assignment that reads one reads (``T val = out[id]`` → out)."""
    first: dict[str, set[str]] = {}
    for target, value in assignments(ev.body):
        if target in first or target in tensors:
            continue
        hit = {t for t in tensors if re.search(rf"(?<![\w.]){re.escape(t)}(?!\w)", value)}
        for ident in set(_IDENT_RE.findall(value)) - {target}:  # a local pointer or value made from one
            hit |= first.get(ident, set())
        if hit:
            first[target] = hit
    return first


def _multiplied(ev: Evidence, g: str, tensors: set[str]) -> bool:
    """Whether the body multiplies the tensor ``g`` (an element of it, or a local first assigned from it): an operand
    of ``*`` or of a 16-bit product (__hmul, __hmul2, __hfma)."""
    first = _first_tensors(ev, tensors)
    names = [g] + [n for n, ts in first.items() if ts == {g}]
    for n in names:
        v = rf"{re.escape(n)}(?:\[[^\]]*\])?"
        # (`val *= up[i]` too, and through a conversion: `g *= __half2float(up[i])`)
        if re.search(rf"\*=?\(?(?:[A-Za-z_]\w*\()?{v}(?![\w(\[])|(?<![\w.]){v}\)?\*(?!=)", ev.flat):
            return True
    for _, args in call_arguments(ev.body, "|".join(_HALF_MULS + ("__hfma", "__hfma2"))):
        if any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", a) for a in args for n in names):
            return True
    return False


def _segments(text: str) -> list[tuple[int, int]]:
    """The (start, end) of the top-level terms of ``text`` split at ``+`` and ``,`` (a sum, or a call's arguments)."""
    out, depth, at = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and ch in "+," and text[i + 1:i + 2] not in ("+", "=") and text[i - 1:i] not in ("+", "e", "E"):
            out.append((at, i))
            at = i + 1
    out.append((at, len(text)))
    return out


def _added_to(ev: Evidence, v: str, tensors: set[str]) -> str | None:
    """The tensor the vector ``v`` (a bias) is added to, by what the body adds: the other terms of the innermost sum
    or add call (``__hadd2(val, bias[c])``, ``x + (float)b[c]``) around ``v[...]`` that read a tensor, directly or
    through a local first assigned from it; None where that is not one tensor."""
    first = _first_tensors(ev, tensors)
    flat = ev.flat
    found: set[str] = set()
    for m in re.finditer(rf"(?<![\w.]){re.escape(v)}\[", flat):
        lo, hi = m.start(), closing(flat, m.end(), "([", ")]")
        while True:
            depth, i = 0, lo - 1
            while i >= 0:
                c = flat[i]
                if c in ")]":
                    depth += 1
                elif c in "([":
                    if depth == 0:
                        break
                    depth -= 1
                elif c in ";{}" and depth == 0:
                    break
                i -= 1
            top = i < 0 or flat[i] in ";{}"
            if not top and flat[i] == "(":
                g0, g1 = i + 1, closing(flat, i + 1, "([", ")]") - 1
            elif top:  # the statement: its value after the top-level `=`
                end = flat.find(";", hi)
                stmt = flat[i + 1:end if end >= 0 else len(flat)]
                eq = re.search(r"(?<![=<>!+\-*/%&|^])=(?!=)", stmt)
                g0, g1 = i + 1 + (eq.end() if eq else 0), i + 1 + len(stmt)
            else:
                break  # inside an index
            text = flat[g0:g1]
            other = "".join(text[a:b] + " " for a, b in _segments(text) if not (a <= lo - g0 < b))
            hit = {t for t in tensors if re.search(rf"(?<![\w.]){re.escape(t)}(?!\w)", other)}
            for ident in set(re.findall(r"[A-Za-z_]\w*", other)):
                hit |= first.get(ident, set())
            if hit or top:
                found |= hit
                break
            lo, hi = g0 - 1, g1 + 1
    return found.pop() if len(found) == 1 else None


_ACT_MATH = r"tanhf|tanh|erff|erf|erfcf|normcdff|expf|__expf|exp|exp2f|hexp|h2exp"


def _act_fed(ev: Evidence, tensors: set[str]) -> set[str]:
    """The tensors the activation's math (its tanh, erf or exponential calls, or a float asm operand: tanh.approx)
    is computed from, through the locals that feed it."""
    fl = flows(ev.body, declarators=True)
    texts = [a for _, args in call_arguments(ev.body, _ACT_MATH) for a in args]
    texts += [ev.body[m.end():closing(ev.body, m.end()) - 1] for m in re.finditer(r'"f"\s*\(', ev.body)]
    fed: set[str] = set()
    for t in texts:
        fed |= feeding(fl, t)
    return fed & tensors


def _generic_acts(ev: Evidence, T: str, pack: int) -> list[tuple[int, int, int | None, str, int]]:
    """(KT_EXPERT_ACT, KT_EXPERT_GELU_FORM, KT_EXPERT_FAST_EXP or None, words, support), the body's first: its GELU
    (tanh) as FasterTransformer's packed form where the element type is a 16-bit pair or the body squares a value
    in 16 bits (``__hmul2(v, v)``: the cube in T), tanh.approx.f32 where the body's asm has it, else the fp32 form;
    SiLU's exponential as the body calls it."""
    approx = re.search(r"tanh\.approx", ev.body) is not None
    tanh = approx or ev.has("tanhf", "tanh")
    forms = [1, 2] if approx else [2, 1]
    squared = any(len(args) == 2 and unparen(re.sub(r"\s+", "", args[0])) == unparen(re.sub(r"\s+", "", args[1]))
                  for _, args in call_arguments(ev.body, "|".join(_HALF_MULS)))  # v * v in T: a 16-bit cube
    if T == "f32" or not (pack > 1 or squared):
        forms = [1, 0, 2] if approx else [0, 2, 1]
    else:
        forms.append(0)
    if not tanh:
        forms = [0]  # a GELU (tanh) the body does not show: the fp32 form only
    out = []
    for act, words, sup in _acts(ev):
        if act == 0 and not sup and ev.has("h2exp", "h2rcp", "hrcp"):  # packed half math: exp and reciprocal
            words, sup = "h2exp / h2rcp → SiLU-and-mul", 4
        if act == 2 or (act, sup) == (2, 0):
            sup = 4 if tanh else sup
            out += [(2, f, None, ("tanh.approx.f32 → " if approx else words.split(" → ")[0] + " → ") +
                     (GELU_FORMS[f] or ACTS[2]) if sup else f"{ACTS[2]} (assumed)", sup - k) for k, f in enumerate(forms)]
        elif act == 0 and ev.has("__expf"):
            fast = [1, 0] if not ev.has("expf", "exp") else [0, 1]
            out += [(0, 0, x, words + (" (__expf)" if x else ""), sup - k) for k, x in enumerate(fast)]
        else:
            out.append((act, 0, None, words, sup))
    return sorted(out, key=lambda a: -a[4])


def _generic(ev: Evidence, e: Expert) -> list[Binding]:
    """FasterTransformer / TensorRT-LLM's generic activation (invokeGenericActivation, the gated FFN of T5 v1.1 /
    Flan-T5 / UL2): the activation's input and the gate operand two tensors of the output's shape, the output written
    over the activation's input (in place, KT_EXPERT_INPLACE) or a tensor of its own, and up to two bias vectors [d]
    (KT_EXPERT_BIAS; each nullable) added to them before the activation and the product; the element type may be a
    16-bit pair (half2, __nv_bfloat162) whose size arguments count pairs. Which bias goes with which tensor is read
    from what the body adds it to; the other way is offered after it."""
    if not {"KT_EXPERT_INPLACE", "KT_EXPERT_GELU_FORM"} <= set(e.conventions):
        return []
    bufs = ev.bufs()
    written = [a for a in bufs if a.written or a.role in ("out", "inout")]
    if len(written) != 1 or written[0].dtype not in FLOATS or not written[0].counts:
        return []
    o = written[0]
    T = o.dtype
    if any(a.dtype != T for a in bufs):
        return []
    full = [a for a in bufs if a is not o and a.role == "in" and a.counts == o.counts]
    vecs = [a for a in bufs if a is not o and a not in full]
    if len(vecs) > 2 or any(a.role != "in" or not a.counts or a.counts == o.counts for a in vecs):
        return []
    inplace = o.role == "inout"
    if inplace and len(full) == 1:
        # written over the activation's input (KT_EXPERT_INPLACE 1) or over the operand it multiplies (2)
        # (the latter only for an elementwise body: a reduction's in-place row, a softmax's, is no gated product)
        over_up = e.conventions.get("KT_EXPERT_INPLACE") is not None and not _reduces(ev)
        pairs = [(o, full[0])] + ([(full[0], o)] if over_up else [])
    elif o.role == "out" and len(full) == 2:
        pairs = [(full[0], full[1]), (full[1], full[0])]
    else:
        return []
    if not inplace and not vecs:
        return []  # two tensors in, one out: _two_tensors's
    # a gated activation by evidence: the activation's math reads its input, the other tensor is multiplied, each
    # vector is added to one of the two (a bias)
    tensors = {a.name for a, _ in pairs} | {g.name for _, g in pairs}
    fed = _act_fed(ev, tensors)
    pairs = [(a, g) for a, g in pairs if a.name in fed and _multiplied(ev, g.name, tensors)]
    if not pairs or any(_added_to(ev, v.name, tensors) is None for v in vecs):
        return []
    pack = _packing(ev, [a.name for a in bufs])
    if not pack:
        return []
    if vecs:
        if len({a.counts for a in vecs}) != 1 or not div(o.counts, vecs[0].counts):
            return []
        ds = [(s, 4) for s in _lengths(ev, vecs[0].counts, pack)]
    else:
        ds = []
        for a in ev.ints():  # an argument the body multiplies another by (`row * width`) first: a row's stride
            t = tuple(pack * c for c in a.counts) if a.counts else None
            if t and div(o.counts, t) and t != o.counts and t not in [x for x, _ in ds]:
                n = re.escape(a.name)
                ds.append((t, 2 if ev.mentions(rf"(?<![\w.])[A-Za-z_]\w*\)?\*\(?{n}(?![\w(\[])") else 0))
        ds.sort(key=lambda x: -x[1])
        elems = []  # words of several elements whose sizes count elements (web-rwkv's C over uint2 words of 4)
        if pack > 1:
            for a in ev.ints():
                if a.counts and div(o.counts, a.counts) and a.counts != o.counts and \
                        a.counts not in [x for x, _ in ds] + [x for x, _ in elems]:
                    elems.append((a.counts, 0))
        ds = [(s, sup) for t, sup in ds for s in _lengths(ev, t, pack)] + \
            [(s, sup - 1) for t, sup in elems for s in _lengths(ev, t, 1)]
        ds = _longest_first(ev, o, ds)  # (x updated in place by its gate: two tensors of one shape too)
        if not ds and _flat_activation(ev, e):
            # no row length: a flat elementwise kernel over the element count (llama3.cuda's in-place SwiGLU over
            # hb with hb2; words of several elements whose count argument counts elements): one row of all of them
            ds = _whole_count(ev, o)
    if not ds:
        return []
    acts = _generic_acts(ev, T, pack)
    # the activation rounded to T before the multiply (first where the product is a 16-bit one: its operands are T)
    rounds = [r for r, _ in _rounds(ev, T)]
    if ev.has(*_HALF_MULS, "__hfma", "__hfma2"):
        rounds.sort(key=lambda r: r != 1)
    out = []
    for pi, (a, g) in enumerate(pairs):
        names = {a.name, g.name}
        if vecs:
            tied = {v.name: _added_to(ev, v.name, names) for v in vecs}
            options = []
            for perm in itertools.permutations(vecs + [None] * (2 - len(vecs)), 2):
                bx, by = perm
                if perm in [p for p, _ in options]:
                    continue
                fit = sum((tied[v.name] == t) - (tied[v.name] not in (None, t)) for v, t in ((bx, a.name), (by, g.name))
                          if v is not None)
                options.append((perm, fit))
            options.sort(key=lambda p: -p[1])
        else:
            options = [((None, None), 0)]
        for di, (d, dsup) in enumerate(ds):
            dname = d.words.strip("`").split("`")[0]
            # the rows as the int argument that holds them where there is one (FasterTransformer's `m`): a launch in
            # the host's terms then needs no size the host only passes transformed (`n / 2` of a packed type)
            held = [x for x in ev.sizes(div(o.counts, counts_of(d.spec, ev.spec)) if o.counts else None)
                    if re.fullmatch(r"\(int\)\(\w+\)", x.c)]
            rows_spec = held[0].spec if held else f"({o.spec.size}) / ({d.spec})"
            for oi, ((bx, by), fit) in enumerate(options):
                for (act, form, fast, act_words, asup), (ri, rnd) in itertools.product(acts, enumerate(rounds)):
                    if form and ri:
                        continue  # the packed GELU rounds its own
                    b = Binding(e, 0.85, f"reads the activation's input `{a.name}` and the gate operand `{g.name}` "
                                         f"of `{dname}` a row" + ((" and writes over the first" if a is o else
                                                                  " and writes over the second") if inplace else "")
                                + (", adds bias vectors" if vecs else "") + ", " + act_words, ev.kernel.name)
                    b.sizes = {"rows": rows_spec, "d": d.spec}
                    b.defines = {"KT_EXPERT_ACT": act}
                    b.conventions = {"KT_EXPERT_GATE_LAYOUT": 4}
                    if inplace:
                        b.conventions["KT_EXPERT_INPLACE"] = 1 if a is o else 2
                    if vecs:
                        b.conventions["KT_EXPERT_BIAS"] = 1
                    if form:
                        b.conventions["KT_EXPERT_GELU_FORM"] = form
                    if fast is not None:
                        b.conventions["KT_EXPERT_FAST_EXP"] = fast
                    if rnd is not None and not form:
                        b.conventions["KT_EXPERT_ROUND_ACT"] = rnd
                    b.template_args = [CTYPE[T]]
                    b.call_args = [_cast(T, o.name, False), _cast(T, a.name, True), _cast(T, g.name, True)]
                    if vecs:
                        b.call_args += [_cast(T, v.name, True) if v is not None else "nullptr" for v in (bx, by)]
                    b.call_args.append(d.c)
                    b.consts = {"ESIZE": NBYTES[T]}
                    b.words = [f"out={o.name}" + ((" (in place over x)" if a is o else " (in place over gate)")
                                                  if inplace else ""), f"x={a.name}", f"gate={g.name}"]
                    if vecs:
                        b.words += [f"bias of x={bx.name if bx is not None else 'none'}",
                                    f"bias of gate={by.name if by is not None else 'none'}"]
                    b.words += [f"d={d.words}", ACTS[act] + (" with __expf" if fast else "")]
                    b.words += [GELU_FORMS[form]] if form else [w for r, w in _rounds(ev, T) if r == rnd and w]
                    # written over the multiplied operand (INPLACE 2) after every binding written over the activation's
                    # input: the body's flows seldom tell the two apart, and the usual in-place form is the latter
                    b.support = dsup + asup + 3 * fit - 2 * oi - 6 * pi - di - ri - (20 if inplace and a is not o else 0)
                    out.append(b)
    return out
