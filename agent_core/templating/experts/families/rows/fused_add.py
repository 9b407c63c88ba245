"""Fused add + RMSNorm in its general form (a residual of a type of its own, the normalized row to a buffer of its
own, the sum to a buffer of its own, each row's reciprocal RMS stored), in place on rows at a stride of their own
(``_strided_fused_add``), and what its add-then-normalize form shares with it: which of two rows is the residual
(``_fused_orders``), the buffers' words (``_fused_add_words``)."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, _assignments,
                                                    additive_terms, declared_type, div, feeding, flows, unparen)
from agent_core.templating.experts.families.rows.common import (ROOTS, _cast, _hidden_candidates, _indexed_before_root,
                                                                 _rows)
from agent_core.templating.experts.families.rows.norm_conventions import (_eps_candidates, _norm_conventions,
                                                                          _weight_offsets)
from agent_core.templating.experts.families.rows.norm_stats import _stat_is_reciprocal_root
from agent_core.templating.experts.families.rows.rms_norm import _strided_row_bindings
from agent_core.templating.experts.library import Expert


def _fused_add_words(x, T: str, r, R: str, r_in, o, O: str, w, hidden, eps_words: str) -> list[str]:
    """The words of a fused add + RMSNorm binding's buffers (x, the residual and where the sum goes, the output, the
    weight), its row length and eps: the general form's and the add-then-normalize form's alike; a residual only read
    is a skip RMSNorm's (the sum stored nowhere)."""
    skip = ", read only: the sum stored nowhere" if r.role == "in" else ""
    return [f"x={x.name} ({T})", f"residual={r.name} ({R}{skip})" if r_in is None else
            f"residual={r_in.name} ({R}), the sum into `{r.name}`",
            f"out={o.name} ({O})" if o is not x else f"out={o.name} (in place)", f"weight={w.name}",
            f"hidden={hidden.words}", eps_words]


def _fused_add_general(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """Fused add + RMSNorm in its general form: the residual of a type of its own (an fp32 residual stream beside
    16-bit activations) and/or the normalized row written to a buffer of its own. Rows: x read (in, or in/out when
    normalized in place), the residual read and written, out written; one weight. The residual is the in/out row
    (of two in/out rows: either, the one written first before the other). Each row's reciprocal RMS may
    be stored too, for the backward pass (llm.c's fused residual RMSNorm ``rrms``, Liger's and flash-attn's ``rstd``:
    an fp32 output of one value per row whose stored value is computed from a reciprocal root; KT_EXPERT_STATS, no
    weight offset). The one-type in-place form is bound with the other row families."""
    e = lib.get("fused_add_rms_norm")
    if e is None or "KT_EXPERT_GENERAL" not in e.conventions or not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if any(a.dtype not in FLOATS or not a.counts for a in bufs):
        return []
    big = max(a.counts for a in bufs)
    rows_ = [a for a in bufs if a.counts == big]
    small = [a for a in bufs if a.counts != big]
    # each row's reciprocal RMS, where the expert can store it: an fp32 output the stored value of which is a
    # reciprocal root (its count, one per row, is checked against each row length below)
    stats = [a for a in small if a.role == "out" and a.dtype == "f32" and "KT_EXPERT_STATS" in e.conventions
             and _stat_is_reciprocal_root(ev, a.name)]
    small = [a for a in small if a not in stats]
    if len(stats) > 1 or len(small) != 1 or small[0].role != "in" or div(big, small[0].counts) is None:
        return []
    st = stats[0] if stats else None
    ins = [a for a in rows_ if a.role == "in"]
    ios = [a for a in rows_ if a.role == "inout"]
    outs = [a for a in rows_ if a.role == "out"]
    if len(ins) == 1 and len(ios) == 1 and len(outs) == 1:
        forms = [(ins[0], ios[0], outs[0], None)]  # x, residual, out
    elif len(ins) == 1 and len(ios) == 1 and not outs and "KT_EXPERT_SKIP" in e.conventions and st is None \
            and all(_indexed_before_root(ev, a.name) for a in ins + ios):
        # a skip (post-norm) RMSNorm: the in/out row plus the read one normalized over the in/out row, the sum
        # stored nowhere (EET's add_input_RMSnorm); the residual is the row only read; both summed before the root
        # (a row read after it is added after the weight: the RMSNorm's post-add)
        forms = [(ios[0], ins[0], ios[0], None)]
    elif len(ins) == 2 and len(outs) == 1 and not ios and ins[0].dtype == ins[1].dtype \
            and "KT_EXPERT_SKIP" in e.conventions and st is None and all(_indexed_before_root(ev, a.name) for a in ins):
        # a skip RMSNorm into an output of its own (ONNX Runtime's SkipSimplifiedLayerNormalization without its sum
        # output): x + skip normalized into out, the sum stored nowhere; x + skip is one sum either way
        forms = [(ins[0], ins[1], outs[0], None)]
    elif len(ios) == 2 and not ins and not outs and ios[0].dtype != ios[1].dtype:
        forms = [(x, r, x, None) for x, r in _fused_orders(ev, ios)]  # in place, two types
    elif len(ins) == 2 and len(outs) == 2 and not ios and "KT_EXPERT_RESIDUAL_IN" in e.conventions:
        # out of place (TensorRT-LLM's residual out): x and the residual read, their sum written to a buffer of its
        # own and the normalized row to another; the sum's buffer is the one written first
        forms = [(x, r, o, r_in) for o, r in _fused_orders(ev, outs) for x, r_in in _fused_orders(ev, ins)
                 if r_in.dtype == r.dtype]
        if ins[0].dtype == ins[1].dtype:
            forms = forms[::2]  # x + residual is one sum either way
    else:
        return []
    w = small[0]
    out = []
    fp32_sums: dict[tuple[str, str], bool] = {}
    for hi, (hidden, hfp) in enumerate(_hidden_candidates(ev, big, small)):
        hname = hidden.words.strip("`")
        if st is not None and div(big, hfp) != st.counts:
            continue  # the statistic is one value per row
        for fi, (x, r, o, r_in) in enumerate(forms):
            T, R, W, O = x.dtype, r.dtype, w.dtype, o.dtype
            for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
                for (conv, conv_words, conv_support), (off_c, off_words, off_support) in itertools.product(
                        _norm_conventions(ev, e, O),
                        _weight_offsets(ev, e) if r_in is None and st is None else [(None, "", 0)]):
                    if off_c == eps_c:
                        continue  # one argument is not both
                    b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {ev.reduction_words()}, adds `{x.name}` "
                                f"({T}) into the residual `{r.name}` ({R}), rsqrtf, one weight, the normalized row "
                                f"{'in place' if o is x else 'into `' + o.name + '`'} ({O}) → fused add + RMSNorm",
                                ev.kernel.name)
                    b.sizes["hidden"] = hidden.spec
                    b.words = _fused_add_words(x, T, r, R, r_in, o, O, w, hidden, eps_words)
                    rows = _rows(ev, div(big, hfp), f"({x.spec.size}) / ({hidden.spec})", hidden, b)
                    b.words += conv_words + ([off_words] if off_c else []) + \
                        ([f"rstd={st.name} (each row's reciprocal RMS, fp32)"] if st is not None else [])
                    b.template_args = [CTYPE[T], CTYPE[R], CTYPE[W], CTYPE[O]]
                    b.call_args = [_cast(T, x.name, True), _cast(R, r.name, False), _cast(W, w.name, True),
                                   _cast(O, o.name, False), eps_c, rows, hidden.c] + ([off_c] if off_c else []) + \
                        ([_cast(R, r_in.name, True)] if r_in is not None else []) + \
                        ([f"(float*)({st.name})"] if st is not None else [])
                    # the 16-bit rows move 16 bytes a step; a wider residual takes two
                    b.consts = {"ESIZE": min(NBYTES[T], NBYTES[O])}
                    b.conventions = dict(conv, KT_EXPERT_GENERAL=1)
                    if r_in is not None:
                        b.conventions["KT_EXPERT_RESIDUAL_IN"] = 1
                    if off_c:
                        b.conventions["KT_EXPERT_WEIGHT_OFFSET"] = 1
                    if st is not None:
                        b.conventions["KT_EXPERT_STATS"] = 1
                    if r.role == "in":  # the residual only read: the sum is stored nowhere
                        b.conventions["KT_EXPERT_SKIP"] = 1
                    b.support = 10 + 2 * ev.uses(hidden) - hi - fi - ei + eps_support + conv_support + off_support
                    out.append(b)
                    summed = r_in if r_in is not None else r  # the residual read into the sum
                    fp32_sum = fp32_sums.setdefault((x.name, summed.name), _squares_fp32_sum(ev, x, summed))
                    if NBYTES[R] < 4 and r.role != "in" and (st is not None or O == "f32" or fp32_sum) \
                            and "KT_EXPERT_SUM_FP32" in e.conventions:
                        # the sum squared and normalized as computed in fp32, rounded only where it is stored
                        # (QuACK; a torch port's x.float() + residual.float()): told apart from the rounded sum by
                        # an fp32 output, checked after it; first where the body squares an fp32 sum of the two
                        f = b.copy()
                        f.conventions["KT_EXPERT_SUM_FP32"] = 1
                        f.words = b.words + ["the sum kept in fp32 (rounded only where stored)"]
                        f.support = b.support + 1 if fp32_sum else b.support - 3
                        out.append(f)
    return out


# the declared types a local on an fp32 sum's way may have (indices, masks, floats): no 16-bit value, nothing unknown
_FP32_PATH = ("float", "int", "int32_t", "int64_t", "uint32_t", "uint64_t", "long", "size_t", "unsigned", "bool")


def _squares_fp32_sum(ev: Evidence, x: ArgUse, r: ArgUse) -> bool:
    """Whether the body squares the sum of ``x`` and the residual as fp32: a square ``v * v`` (``s[i] * s[i]``) of
    a local declared float assigned a sum of two terms computed from both buffers, through locals every one of
    which is declared float or an index type (``evidence.declared_type``) (nano-vllm's torch port: ``s[i] = a + b`` of two converted floats, the residual stored rounded from it). A
    16-bit local on the way (vLLM's ``scalar_t z = x + residual; float v = (float)z;``) is the rounded sum."""
    flow = flows(ev.body, declarators=True)
    sums = {t for t, value, _ in _assignments(ev.body) if len(additive_terms(unparen(value))) == 2}
    for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)(\[[^\]]*\])?\*\1(\[[^\]]*\])?(?![\w(\[])", ev.flat):
        v = m.group(1)
        fed = feeding(flow, v)
        if declared_type(ev.body, v) != "float" or not {x.name, r.name} <= fed or v not in sums:
            continue  # (a float read back from a stored row, `diff = (float)out[i]`, is the rounded sum)
        types = [declared_type(ev.body, n) for n in fed - {x.name, r.name}]
        if all(t in _FP32_PATH for t in types if t is not None):
            return True
    return False


def _fused_orders(ev: Evidence, io: list[ArgUse]) -> list[tuple[ArgUse, ArgUse]]:
    """(x, residual) both ways, the likelier first: the residual is the one the body writes first (the sum is stored
    before the normalized row), else the later argument; not what either is called."""
    a, b = io
    if 0 <= a.first_write and (b.first_write < 0 or a.first_write < b.first_write):
        first = (b, a)
    else:
        first = (a, b)
    return [first, (first[1], first[0])]


def _strided_fused_add(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """Fused add + RMSNorm in place, x's rows at a stride of their own (vLLM's fused_add_rms_norm on a
    non-contiguous input, FlashInfer's stride_input): two in/out rows of one type, x longer than the residual by a
    whole factor per row (each row the first ``hidden`` elements of a wider one), the stride an int argument that
    holds x's length over the rows; the residual contiguous; one weight of the row length (KT_EXPERT_X_STRIDE)."""
    e = lib.get("fused_add_rms_norm")
    if e is None or "KT_EXPERT_X_STRIDE" not in e.conventions or not ev.has(*ROOTS):
        return []
    bufs = ev.bufs()
    if any(a.dtype not in FLOATS or not a.counts for a in bufs):
        return []
    ios, ins = ev.bufs("inout"), ev.bufs("in")
    if len(ios) != 2 or len(ins) != 1 or ev.bufs("out") or ios[0].dtype != ios[1].dtype:
        return []
    xs = [a for a in ios if all(c > d for c, d in zip(a.counts, (ios[1] if a is ios[0] else ios[0]).counts))]
    if len(xs) != 1:
        return []
    x = xs[0]
    r = ios[1] if x is ios[0] else ios[0]
    w = ins[0]
    if div(r.counts, w.counts) is None:
        return []
    T, W = x.dtype, w.dtype
    return _strided_row_bindings(
        ev, e, r, x, w, T, W,
        lambda hidden, st: (f"reads rows of `{hidden.words.strip('`')}` elements {st.words} apart from `{x.name}`, "
                            f"{ev.reduction_words()}, adds them into the contiguous residual `{r.name}` (both "
                            "written), rsqrtf, one weight → fused add + RMSNorm of a strided input"),
        lambda hidden, st, eps_words: [f"x={x.name} (rows {st.words} apart, in place)", f"residual={r.name}",
                                       f"weight={w.name}", f"hidden={hidden.words}", eps_words],
        lambda eps_c, rows, hidden, stride: [_cast(T, x.name, False), _cast(T, r.name, False), _cast(W, w.name, True),
                                             eps_c, rows, hidden.c, stride],
        rank_hidden=True)
