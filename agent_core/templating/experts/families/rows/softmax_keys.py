"""Softmax over a key range per batch read from int32 buffers (``KT_EXPERT_KEYS``; ONNX Runtime's 1-D mask
index): the range (``_key_bounds``), an empty one widened to every key (``_key_fallback``), the causal limits
put on it (``_key_causal``), the bindings (``_softmax_key_forms``)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, INTS, NBYTES, ArgUse, Evidence, SizeExpr,
                                                    assignments, div, feeding, flows, loop_variables, statements,
                                                    unparen)
from agent_core.templating.experts.families.rows.common import (_bounds_a_loop, _cast, _guarding_flag,
                                                                _hidden_candidates, _rows)
from agent_core.templating.experts.families.rows.softmax_masks import _mask_index_names, _mask_inners
from agent_core.templating.experts.library import Expert


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
    for v in loop_variables(ev.body):
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


def _key_inners(ev: Evidence, end: ArgUse) -> list[ArgUse]:
    """The int arguments that can be the query extent of a key range per (batch, query) (lengths [batch, q_len] over
    scores [batch, heads, q_len, keys]: tcop's masked softmax): each divides the key buffers' length on every size set
    and lies strictly between 1 and it on some (a decode step's single query is still one); the arguments the body
    uses most first. The cheap check tells which, if any, the kernel reads."""
    if not end.counts:
        return []
    fits = [a for a in ev.ints() if a.counts and all(1 <= v <= n and n % v == 0 for v, n in zip(a.counts, end.counts))
            and any(1 < v < n for v, n in zip(a.counts, end.counts))]
    return sorted(fits, key=lambda a: -ev.uses(SizeExpr(f"(int)({a.name})", "", "")))


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
    # the batch count as the wrapper computes it: an int argument that holds the key buffers' length, else the
    # expert's grid (exact up to 65535 batches, where its z is 1)
    out = []
    # where the key buffer's index is computed from a query extent, the range per (batch, query) comes first
    index = _mask_index_names(ev, end)
    inners = sorted(_key_inners(ev, end), key=lambda a: a.name not in index)
    for (hi, (hidden, hfp)), kin in itertools.product(enumerate(_hidden_candidates(ev, big, [])), [None] + inners):
        # the per-(batch, query) forms: before the per-batch one where the index reads their extent, else after all
        ki = 0 if kin is None else (-3 - inners.index(kin) if kin.name in index else 8 + inners.index(kin))
        hname = hidden.words.strip("`")
        rows_fp = div(big, hfp)
        # the batches: the buffers' length, or that over the queries of a range per (batch, query)
        nb = end.counts if kin is None else div(end.counts, kin.counts)
        per = div(rows_fp, nb) if nb is not None else None  # the rows of one batch
        if per is None or (kin is not None and div(per, kin.counts) is None):
            continue
        held = ev.held(nb)
        batches_c = held[0].c if held else "(int)(gridDim.y * gridDim.z)"
        # the key buffers' entry a row reads, in words
        batch = f"batch b = row / (rows / batches), batches `{end.name}`'s length"
        at, entry = ("b", batch) if kin is None else (
            "i", f"entry i = b * `{kin.name}` + row % `{kin.name}` (a range per batch and query, {batch} / `{kin.name}`)")
        # (mask rows as the wrapper computes it, {rows} the row count; inner extent; words): the rows of one batch
        # (a bias shared by the batches) from the grid, else the mask's rows from the arguments, read as in the
        # general form
        forms: list[tuple[str | None, str | None, str]] = [(None, None, "")]
        if mask is not None:
            mask_rows = div(mask.counts, hfp)
            if mask_rows is None or mask_rows == rows_fp or div(rows_fp, mask_rows) is None:
                continue
            forms = [("({rows}) / ({batches})", None, "[the rows of a batch], shared by the batches")] \
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
            b.sizes["batches"] = end.spec.size if kin is None else f"({end.spec.size}) / ({kin.spec.value})"
            b.words = [f"out=x={x.name} ({T}, in place)" if x is o else f"out={o.name} ({O})"] + \
                ([] if x is o else [f"x={x.name} ({T})"]) + [f"hidden={hidden.words}"]
            rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
            grid_rows = rows == "(int)gridDim.x"
            if grid_rows:  # one row a block on the expert's grid [rows of a batch, batches]
                rows = f"(int)gridDim.x * {batches_c}"
            if scale_words:
                b.words.append(scale_words)
            b.words.append(f"keys [{f'`{start.name}`[{at}]' if start else '0'}, `{end.name}`[{at}]) of {entry}, an "
                           "empty range " + ("widened to every key" if fallback else "written 0"))
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
                mrc = "(int)gridDim.x" if mr == "({rows}) / ({batches})" and grid_rows \
                    else mr.replace("{rows}", rows).replace("{batches}", batches_c)
                b.call_args += [_cast(mask.dtype, mask.name, True), mrc, mrc if inner is None else inner]
                b.consts["ESIZE"] = max(b.consts["ESIZE"], NBYTES[mask.dtype])
                b.conventions["KT_EXPERT_MASK"] = 1
            b.call_args += [_cast("i32", end.name, True),
                            _cast("i32", start.name, True) if start else "(const int*)nullptr", q_len, batches_c]
            if kin is not None:
                b.call_args.append(f"(int)({kin.name})")
                b.conventions["KT_EXPERT_KEYS_INNER"] = 1
            if causal_words:
                b.words.append(causal_words)
            b.support = 10 + 2 * ev.uses(hidden) - hi - si - mi - ci - ki + causal_support + divides + (
                4 if _bounds_a_loop(ev, hidden) else 0)  # a row length the kernel walks first
            out.append(b)
    return out
