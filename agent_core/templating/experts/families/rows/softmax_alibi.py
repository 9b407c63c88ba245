"""FasterTransformer's / TensorRT-LLM's masked softmax with ALiBi (``KT_EXPERT_ALIBI``), or with an additive bias tensor
in the slopes' place (``KT_EXPERT_ALIBI_BIAS``: ByteTransformer's relative-position bias)."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, Evidence, div, feeding, flows,
                                                    pointer_aliases, statements, uncast)
from agent_core.templating.experts.families.rows.common import _bounds_a_loop, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.softmax_masks import _mask_index_names, _mask_inners
from agent_core.templating.experts.library import Expert


# FasterTransformer's keep-mask as it adds it: the complement of a 0/1 value times -10000
_KEEP_TIMES_MINUS_10000 = re.compile(
    r"\(\s*1(?:\.0*)?[fF]?\s*-\s*[^()]*(?:\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*)*\)\s*\*\s*-\s*10000(?:\.0*)?[fF]?(?![\w.])")
# a value times the difference of two indices: `slope * static_cast<float>(ki - qi)`, `slope * (float)(k - q)`
_TIMES_INDEX_DIFFERENCE = re.compile(
    r"(\w+)\s*\*\s*(?:static_cast<float>|\(\s*float\s*\))?\s*\(\s*(\w+)\s*-\s*(\w+)\s*\)")

_TYPE_NAMES = {"float", "double", "int", "long", "unsigned", "size_t", "int64_t", "int32_t", "half"}


def _bare_names(stmt: str) -> str:
    """``stmt`` with the parentheses around a lone name dropped (``(slope) * (float)((k) - (q))`` → ``slope *
    (float)(k - q)``: a helper's body with the call's arguments for its parameters), casts and calls kept."""
    while True:
        new = re.sub(r"(?<![\w\]])\(\s*(\w+)\s*\)",
                     lambda m: m.group(0) if m.group(1) in _TYPE_NAMES else m.group(1), stmt)
        if new == stmt:
            return stmt
        stmt = new


def _softmax_alibi(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """FasterTransformer's / TensorRT-LLM's masked softmax with ALiBi (BLOOM, MPT; ``KT_EXPERT_ALIBI``): scores x
    [batch, heads, q_len, k_len] times a float scale, plus slopes[h] * (k - q) and a 0/1 keep-mask [batch, q_len,
    k_len] added as (1 - m) * -10000, one output. Read by evidence: the statement that multiplies the complement of
    a value by -10000 is fed by the mask; one that multiplies a value by the difference of two indices is fed by
    the slopes (one value per head), the key index first (from the lanes, not the block), the query (from the
    block's row, or the grid's stride over rows) second. The mask's rows broadcast over the
    heads as the general form's middle dimension (inner extent q_len, an int argument).

    Without a slopes input (FasterTransformer's masked softmax before ALiBi, TensorRT-LLM's unfused attention with
    null linear-bias slopes: BERT / GPT encoders) the same keep-mask complement times -10000 is read alone: the
    expert's slopes are null (no bias term), the heads any count the mask's rows divide the rows by. With an input
    of the mask's type whose element the body adds to the logit instead of slopes (ByteTransformer's bias [head,
    seq, seq]), that tensor in the slopes' place, its rows broadcast as the kernel may read them (``_mask_inners``,
    an extent its index is computed from first); the scores may be softmaxed in place."""
    e = lib.get("softmax")
    # the exponential the kernel takes: FasterTransformer's __expf (1), or the accurate expf (2)
    exp_fn = "__expf" if ev.has("__expf") else "expf" if ev.has("expf") else None
    if e is None or "KT_EXPERT_ALIBI" not in e.conventions or exp_fn is None:
        return []
    ins, outs, ios = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS), ev.bufs("inout", FLOATS)
    if len(outs) + len(ios) != 1 or len(ev.bufs()) != len(ins) + 1 or not (outs or ios)[0].counts:
        return []
    o = (outs or ios)[0]
    big = o.counts
    xs = [o] if ios else [a for a in ins if a.counts == big]  # in place: the scores are the output
    if len(xs) != 1 or len(ins) + len(ios) not in (2, 3):
        return []
    x = xs[0]
    flow = flows(ev.body)
    stmts = [stmt for _, _, stmt in statements(ev.body)]
    # what the complement times -10000 is computed from, and what multiplies an index difference (key - query)
    keep_feeds = [feeding(flow, m.group(0)) for st in stmts for m in _KEEP_TIMES_MINUS_10000.finditer(st)]
    slope_feeds = [feeding(flow, d.group(1)) for st in stmts for d in _TIMES_INDEX_DIFFERENCE.finditer(_bare_names(st))
                   if "threadIdx" in feeding(flow, d.group(2)) and "blockIdx" not in feeding(flow, d.group(2))
                   and {"blockIdx", "gridDim"} & feeding(flow, d.group(3))]
    others = [a for a in ins if a is not x]
    masks = [a for a in others if any(a.name in f for f in keep_feeds)]
    slopes = [a for a in others if a.counts and div(big, a.counts) is not None and any(a.name in f for f in slope_feeds)]
    added = [a for a in others if a not in masks and a.counts and a.counts != big and div(big, a.counts) is not None
             and _added_element(ev, a.name)]
    tensor = None  # an additive bias tensor in the slope term's place (KT_EXPERT_ALIBI_BIAS)
    if len(others) == 1:  # no slopes: the keep-mask alone (FasterTransformer's softmax before ALiBi)
        if len(masks) != 1 or slopes:
            return []
        slopes = [None]
    elif len(masks) == 1 and not slopes and len(added) == 1 and added[0].dtype == masks[0].dtype \
            and "KT_EXPERT_ALIBI_BIAS" in e.conventions:
        tensor, slopes = added[0], [None]  # ByteTransformer's relative-position bias [head, seq, seq]
    elif len(masks) != 1 or len(slopes) != 1 or masks[0] is slopes[0] or masks[0].dtype != slopes[0].dtype:
        return []
    mask, slope = masks[0], slopes[0]
    T, O = x.dtype, o.dtype
    body = _bare_names(ev.body)
    scales = [(f"(float)({a.name})", f"logits times `{a.name}`") for a in ev.floats()
              if re.search(rf"\b{re.escape(a.name)}\s*\*", body)]
    if not scales:  # the scale written after the logit (`qk * qk_scale + mask_val`)
        scales = [(f"(float)({a.name})", f"logits times `{a.name}`") for a in ev.floats()
                  if re.search(rf"\*\s*{re.escape(a.name)}\b", body)]
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
        if slope is not None and heads != slope.counts:  # one slope per head: the rows of a batch over the mask's
            continue
        mrs = [m for m in ev.sizes(mask_rows) if not m.c[0].isdigit()] or ev.sizes(mask_rows)
        # no argument holds the mask's rows (the batch only in the grid): the rows over the heads, one slope each
        per_head = [h for h in ev.sizes(heads) if not h.c[0].isdigit()][:1] if not mrs and slope is not None else []
        # the query count: the middle dimension's inner extent, an argument the mask's index is computed from (with
        # a bias tensor, every broadcast the mask's rows may take: scores [head, batch, q, k] over a mask [batch, q, k]
        # broadcast over the leading heads)
        inners = [(inner, words) for inner, words in _mask_inners(ev, mask_rows)
                  if tensor is not None or _arg_of(inner) in index_names]
        inners.sort(key=lambda f: _arg_of(f[0]) not in index_names)  # an extent the mask's index is computed from first
        bias_forms = [(None, None, "", "")]  # (its rows, its inner extent, words, the rows' words)
        if tensor is not None:
            bias_rows = div(tensor.counts, hfp)
            brs = [m for m in ev.sizes(bias_rows) if not m.c[0].isdigit()] or ev.sizes(bias_rows) \
                if bias_rows is not None and div(rows_fp, bias_rows) is not None else []
            bias_names = _mask_index_names(ev, tensor)  # an inner extent its index is computed from first
            bias_forms = sorted([(brs[0], binner, bwords, brs[0].words) for binner, bwords in _mask_inners(ev, bias_rows)],
                                key=lambda f: _arg_of(f[1]) not in bias_names) if brs else []
        for mi, (mr, (inner, inner_words), (br, binner, bwords, br_words)) in enumerate(
                itertools.product(mrs[:1] or per_head, inners, bias_forms)):
            hname = hidden.words.strip("`")
            b = Binding(e, 0.85, f"reads rows of `{hname}` elements, {red}, a max and a sum of exponentials over the "
                        f"row → softmax, plus {'a per-head ALiBi bias and ' if slope else ''}a 0/1 keep-mask as -10000",
                        ev.kernel.name)
            b.sizes["hidden"] = hidden.spec
            b.words = ([f"out=x={x.name} ({T}, in place)"] if x is o else [f"out={o.name} ({O})", f"x={x.name} ({T})"]) \
                + [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            mr_c, mr_words = (mr.c, mr.words) if mrs else (f"({rows}) / {mr.c}", f"rows / {mr.words}")
            if scale_words:
                b.words.append(scale_words)
            words = (f"plus `{slope.name}`[head] * (k - q) and " if slope else
                     f"plus the bias `{tensor.name}` [{br_words} rows], {bwords}, and " if tensor else "plus ")
            b.words.append(words + f"(1 - `{mask.name}`) * -10000 [{mr_words} rows], {inner_words}"
                           + ("" if tensor else " (q the row within it)")
                           + f"; {exp_fn}, the sum + 1e-6 inverted by __fdividef")
            b.template_args = [CTYPE[T], CTYPE[O], CTYPE[mask.dtype]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), rows, hidden.c, scale,
                           "(const float*)nullptr", _cast(mask.dtype, mask.name, True), mr_c,
                           mr_c if inner is None else inner,
                           _cast(slope.dtype, slope.name, True) if slope else
                           _cast(tensor.dtype, tensor.name, True) if tensor else
                           f"(const {CTYPE[mask.dtype]}*)nullptr"]
            if tensor is not None:
                b.call_args += [br.c, br.c if binner is None else binner]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O], NBYTES[mask.dtype])}
            b.conventions = {"KT_EXPERT_GENERAL": 1, "KT_EXPERT_MASK": 1,
                             "KT_EXPERT_ALIBI": 1 if exp_fn == "__expf" else 2}
            if tensor is not None:
                b.conventions["KT_EXPERT_ALIBI_BIAS"] = 1
            b.support = 14 + 2 * ev.uses(hidden) + 2 * (tensor is not None and _bounds_a_loop(ev, hidden)) - hi - mi
            out.append(b)
    return out


def _added_element(ev: Evidence, name: str) -> bool:
    """Whether the body adds an element of ``name`` to something (``qk += (float)bias[i]``, ``x + bias[i]``): an
    additive term of the logit, not a mask compared or multiplied."""
    text = uncast(ev.body)
    return any(re.search(rf"(?:\+=|[^+]\+)\s*(?:\(\s*)?{re.escape(n)}\s*\[", text) for n in pointer_aliases(text, name))


def _arg_of(c: str | None) -> str:
    """The argument a wrapper expression ``(int)(name)`` reads ('' for anything else)."""
    m = re.fullmatch(r"\(int\)\((\w+)\)", c or "")
    return m.group(1) if m else ""
