"""The add-then-normalize pattern of serving code (``_add_norm_general``): a fused add + RMSNorm with a bias inside
the sum, or a LayerNorm of a residual sum; where each add is rounded, the mean from the rounded or unrounded
sums, the normalized value rounded before the weight; the sum stored or not (a skip LayerNorm)."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, HALF_TYPES, NBYTES, ArgUse, Evidence, SizeExpr,
                                                    assignments, closing, div, flows, instance_types, plain,
                                                    pointer_aliases, statements, uncast, value_holders)
from agent_core.templating.experts.families.rows.common import (ROOTS, _ROOT_CALL, _cast, _hidden_candidates,
                                                                 _read_before_root, _rows)
from agent_core.templating.experts.families.rows.fused_add import _fused_add_words, _fused_orders
from agent_core.templating.experts.families.rows.norm_conventions import (_eps_candidates, _norm_conventions,
                                                                          _shift_first)
from agent_core.templating.experts.library import Expert


def _add_norm_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """The add-then-normalize pattern of serving code (FasterTransformer / TensorRT-LLM add-bias-residual LayerNorm
    and RMSNorm, lmdeploy's BiasResidualRMSNorm): z = x + residual (+ a bias [hidden] added inside the sum), z stored
    back in the residual, its RMSNorm or LayerNorm written over x (in place) or to a buffer of its own. Read by
    evidence: the rows read (x), read and written (the residual; x too where normalized in place) and written (out);
    the [hidden] inputs added before the root (the bias: read before the root is taken) and those applied after it
    (weight, or gamma and beta); the family from whether a mean is taken off the row; where each add is rounded to the
    storage type (``_adds_in_storage_type``); the LayerNorm's mean from the unrounded sums (``_mean_before_rounding``);
    the mean of squares as a product with an inverse-count argument (a float argument that is 1 / hidden on every
    size set). Two rows read and one written (a skip LayerNorm: TensorRT's skipLayerNorm, ONNX Runtime's SkipLayerNorm
    without its sum output): the sum is normalized and not stored (a null residual; the LayerNorm only). Only what the
    other row binders leave: a fused add + RMSNorm with a bias, or a LayerNorm with a residual; the fused add + RMSNorm
    without a bias is theirs."""
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
        # one written first; x + residual is one sum either way where the two read are of one type
        layouts = [(x, r, o, r_in) for o, r in _fused_orders(ev, outs) for x, r_in in _fused_orders(ev, ins)
                   if r_in.dtype == r.dtype]
        if ins[0].dtype == ins[1].dtype:
            layouts = layouts[::2]
    elif len(ins) == 1 and len(ios) == 1 and not outs and ins[0].dtype == ios[0].dtype:
        # the sum normalized in place over one of its addends and stored nowhere else (FasterTransformer's
        # add_bias_input_layernorm, TurboTransformers' AddBiasLayerNorm: out = LayerNorm(out + input + bias))
        layouts = [(ios[0], None, ios[0], ins[0])]
    elif len(ins) == 2 and len(outs) == 1 and not ios and ins[0].dtype == ins[1].dtype:
        # a skip LayerNorm: x + skip normalized into out, the sum stored nowhere (written to out first at most, then
        # overwritten): x + skip is one sum either way
        layouts = [(x, None, outs[0], r_in) for x, r_in in _fused_orders(ev, ins)][:1]
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


def _bias_after_store(ev: Evidence, r: ArgUse, bias: ArgUse) -> bool:
    """Whether the body stores into the residual ``r`` (or a pointer made from it) before it first reads an element
    of ``bias``: the bias joins the normalized row only, after the residual stream is written."""
    text = uncast(ev.body)
    stores = [m.start() for n in pointer_aliases(text, r.name)
              for m in re.finditer(rf"\b{re.escape(n)}\s*\[[^\]]*\](?:\.\w+)?\s*=(?!=)", text)]
    reads = [m.start() for n in pointer_aliases(text, bias.name) for m in re.finditer(rf"\b{re.escape(n)}\s*\[", text)]
    return bool(stores) and bool(reads) and min(stores) < min(reads)


def _bias_forms(bias: ArgUse | None, T: str, rounded_adds: bool, after: bool = False,
                after_first: bool = False) -> list[tuple[int, str]]:
    """(KT_EXPERT_BIAS, words) for a bias added inside the sum, the body's form first: in fp32 with one rounding, or
    each add rounded to the 16-bit storage type (where the body adds values of that type). ``after``: where the
    expert has it, also the bias added after the sum is stored (the residual stream without it, the row normalized
    with it): first where the body stores the residual before reading the bias (``after_first``), else last (a
    failed check costs one cheap run)."""
    if bias is None:
        return [(0, "")]
    fp32 = (1, f"plus the bias `{bias.name}` (nullable) in fp32, one rounding to {T}")
    each = (2, f"plus the bias `{bias.name}` (nullable), each add rounded to {T}")
    late = [(3, f"plus the bias `{bias.name}` (nullable) after the sum is stored (the residual without it)")] \
        if after else []
    if T == "f32":
        return late + [fp32] if after_first else [fp32] + late
    forms = [each, fp32] if rounded_adds else [fp32, each]
    return late + forms if after_first else forms + late


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
    after = "3: the bias added after the sum is stored" in e.convention_words.get("KT_EXPERT_BIAS", "")
    if "KT_EXPERT_RESIDUAL_IN" not in e.conventions:
        layouts = [lay for lay in layouts if lay[3] is None]
    layouts = [lay for lay in layouts if lay[1] is not None]  # the expert stores the sum
    for li, (x, r, o, r_in) in enumerate(layouts):
        T, R, W, O = x.dtype, r.dtype, w.dtype, o.dtype
        if bias.dtype != T:
            continue  # the expert's bias is of x's type
        late_first = after and _bias_after_store(ev, r, bias)
        for (ei, (eps_c, eps_words, eps_support)), (ci, (conv, conv_words, conv_support)), (fi, (form, form_words)) \
                in itertools.product(enumerate(eps_all), enumerate(_add_rms_conventions(ev, e, O)),
                                     enumerate(_bias_forms(bias, R, rounded_adds, after, late_first))):
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
            if form == 3 and not late_first:
                b.support -= 4  # no store before the bias is read: after every other reading of the layout
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
    if len(weights) == 2 and _shift_first(ev, weights[0], weights[1]):  # the shift added, the scale multiplied
        orders.reverse()
    out = []
    hname = hidden.words.strip("`")
    for li, (x, r, o, r_in) in enumerate(layouts):
        T, O, W = x.dtype, o.dtype, weights[0].dtype
        if (r or r_in).dtype != T or (bias is not None and bias.dtype != T):
            continue  # the expert's residual and bias are of x's type
        if r_in is not None and "KT_EXPERT_RESIDUAL_IN" not in e.conventions:
            continue
        if O != T and NBYTES[O] > NBYTES[T]:
            continue  # an output wider than the rows: the expert's vector checks are made for the rows' type
        stats = [(2, "the mean from the unrounded sums"), (1, "the mean from the rounded sum")]
        if not _mean_before_rounding(ev, r or o):  # the sum stored nowhere: where the body stores it first
            stats.reverse()
        for (oi, order), (ei, (eps_c, eps_words, eps_support)), (conv, conv_words, conv_support), \
                (si, (st, st_words)), (fi, (form, form_words)) in itertools.product(
                    enumerate(orders), enumerate(eps_all), _norm_conventions(ev, e, O), enumerate(stats),
                    enumerate(_bias_forms(bias, T, rounded_adds))):
            g, bb = order[0], (order[1] if len(order) == 2 else None)
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, adds `{x.name}` into the "
                        f"residual `{(r or r_in).name}`{f' with the bias `{bias.name}`' if bias else ''}, mean and "
                        "variance, "
                        f"rsqrtf, {'gamma and beta' if bb else 'one weight (no shift)'}, the normalized row "
                        f"{'in place' if o is x else 'into `' + o.name + '`'} → add + LayerNorm", ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = [f"out={o.name}" + (" (in place)" if o is x else f" ({O})" if O != T else ""),
                       f"x={x.name}", f"residual={r.name} (the sum stored)" if r_in is None else
                       f"residual={r_in.name}, the sum not stored" if r is None else
                       f"residual={r_in.name}, the sum into `{r.name}` (unless null)", f"gamma={g.name}",
                       f"beta={bb.name}" if bb else "no beta", f"hidden={hidden.words}", eps_words]
            rows = _rows(ev, div(x.counts, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            b.words += ([form_words] if form_words else []) + [st_words] + conv_words
            b.template_args = [CTYPE[T], CTYPE[W]] + ([CTYPE[O]] if O != T else [])
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), _cast(W, g.name, True),
                           _cast(W, bb.name, True) if bb else f"(const {CTYPE[W]}*)nullptr", eps_c, rows, hidden.c,
                           _cast(T, r.name, False) if r is not None else f"({CTYPE[T]}*)nullptr",
                           _cast(T, bias.name, True) if bias else f"(const {CTYPE[T]}*)nullptr"] \
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
    a subtraction. The row length may be converted to a float type first, the kernel's own template type too
    (TensorRT's ``const T rld = T(1) / T(ld)``, the mean then a sum of ``rld * x``). An RMSNorm divides its sum of
    squares by the row length too, but subtracts nothing of it."""
    names = re.findall(r"\(int\)\((\w+)\)", hidden.c)
    if not names:
        return False
    count = "|".join(map(re.escape, names))
    types = "|".join(["float", "double", HALF_TYPES] + [re.escape(t) for t in instance_types(ev)])
    conv = rf"(?:\(\s*(?:{types})\s*\)\s*|static_cast<\s*(?:{types})\s*>\s*|(?<![\w:])(?:{types})\s*(?=\())?"
    # a quotient written `/` or as the fast division (`__fdividef(mean, n)`: FasterTransformer's, ByteTransformer's)
    means = {t for t, value in assignments(ev.body)
             if re.search(rf"/\s*{conv}\(?\s*(?:{count})\b", value)
             or re.search(rf"\b__fdividef\s*\([^,()]*(?:\([^()]*\)[^,()]*)*,\s*{conv}\(?\s*(?:{count})\b", value)}
    if not means:
        return False
    flow = flows(ev.body)
    means |= {n for n, deps in flow.items() if deps & means}
    alt = "|".join(map(re.escape, sorted(means)))
    # a local, or an element of an array the quotient was stored in (a block's mean in shared `s_[0]`)
    return re.search(rf"-=?\(*(?:{alt})\b", ev.flat) is not None


def _centres_row(ev: Evidence, name: str) -> bool:
    """Whether the body subtracts from the row's values (read from the buffer ``name``, or a local holding one) a
    local computed from them (a running mean: Welford's ``v - mean`` where the mean is updated as ``mean += delta /
    count``, whatever the locals are called). An RMSNorm subtracts nothing computed from its row."""
    pointers, held = value_holders(ev, name)
    src = pointers | held
    flow = flows(ev.body)
    fed = {n for n, deps in flow.items() if deps & src} - src
    flat = plain(ev.body)
    for m in re.finditer(r"(?<=[\w)\]])\)*-\(*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?![\w(\[.])", flat):
        right = m.group(1).split(".")
        if not any(p in fed for p in right):
            continue
        left = flat[:m.start()]
        lm = re.search(r"(?<![\w.])([A-Za-z_]\w*)(?:\[[^\[\]]*\])?\)*$", left)
        value = lm is not None and (lm.group(1) in held or (lm.group(1) in pointers and "[" in lm.group(0)))
        if value and lm.group(1) not in right:
            return True  # a value of the row, less something computed from the row
    return False


def _takes_mean_off(ev: Evidence, x: ArgUse, hiddens) -> bool:
    """A mean taken off the row (a LayerNorm, not an RMSNorm): ``_subtracts_mean`` for one of the row lengths, or the
    row's values less something computed from them (``_centres_row``). Read from what the body computes, never from
    what a local is called."""
    return any(_subtracts_mean(ev, h) for h, _ in hiddens) or _centres_row(ev, x.name)


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
