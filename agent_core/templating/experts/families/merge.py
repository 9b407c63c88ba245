"""Merging two partial attention states (values and their log-sum-exps).

Evidence: two float value inputs and one value output of one size, two fp32 lse inputs (and optionally one
lse output) of ``tokens * heads``, ``exp`` and ``log`` calls. Enumerated: which lse goes with which value
input, which int arguments are tokens, heads and head size (the value rows are walked in the order the
arguments give: [tokens, heads] or [heads, tokens]), the lse layout ([tokens, heads] or [heads, tokens]) and
natural or base-2 log-sum-exps. A kernel with no token count among its arguments (one block per token) gets
the expert launched so that its grid gives the count back.

States kept as a running max m and a sum of exponentials l apart (``KT_EXPERT_STATE`` 1: FlashAttention's loop
state, vLLM's paged-attention ``max_logits`` and ``exp_sums``): four fp32 inputs of ``tokens * heads`` (and none
or two such outputs). The maxima are the two that feed an exponential's argument, the sums the two that do not;
the sum that multiplies the exponential of a max's own difference is that max's (else both pairings); the
output fed by a sum is the merged l, the other the merged max (else both). The exponential as the kernel takes
it first: ``expf``, ``exp2f(x * log2(e))`` (a log2(e) multiplied under ``exp2f``, or ``__expf``) or ``exp2f`` of
base-2 maxima.

In place (``KT_EXPERT_INPLACE`` 1: FlashInfer's ``merge_state_in_place``): the first state's values and fp32 lse
both read and written by the body (inout), the other state's read only, no output, and at most one more buffer:
an integer (or bool) one of one entry a token whose reads the body takes as truth values (compared with 0, or
alone) in a condition, the per-token mask. The mask's length tells the tokens from the heads.

N-way (``KT_EXPERT_NWAY``: FlashInfer's ``MergeStates``, the split-KV combines of FlashAttention and SGLang): one
values input holding every state (its length the state count times the output's) and one fp32 lse input (the
state count times the merged lse's, or the rows'), a values output and optionally a merged lse; the state count an
int argument (else a number the same on every size set) that bounds a loop of the body. The states' layout is
what the lse index shows: how far it moves from one state to the next (``evidence.index_stride``) is the heads
([tokens, sets, heads]), tokens * heads ([sets, tokens, heads]) or 1 ([tokens, heads, sets]); all three where
the body does not tell.

Flash-decoding's per-sequence split count (``KT_EXPERT_NWAY_COUNT``: lightllm's and SGLang's decode stage 2, vLLM's
v2 layout with lse states): one more input, an integer buffer of one entry a token (the sequence lengths), whose
read bounds the loop over the states through a ceiling division (``(len + S - 1) / S``, ``cdiv``,
``DIVIDE_ROUND_UP``) by a file constant or an int argument (the keys a state covers); the int argument of the state
count is then the states' stride. Where the arguments hold neither the tokens nor the heads (lightllm's grid (batch,
head_num)), the expert is launched [tokens, heads], one warp a block, and reads both back from its grid
(``KT_EXPERT_NWAY_GRID``).

Unnormalized parts (``KT_EXPERT_NWAY_ML``: llama.cpp's flash_attn_combine_results, split-KV decode combines that keep
each split's accumulator unnormalized with its running max and row sum): one values input of the state count times
the output, its metas either one fp32 input of two floats a state (a pair: a float2 argument, or reads of its .x and
.y, or of [2 * i] and [2 * i + 1]) or two fp32 inputs of one each; the max is what the exponentials' arguments are
computed from, the sum the other; the values are multiplied by weights the sums do not feed (unnormalized) and the
output is a quotient whose denominator the sums feed. The flush of small weights (``KT_EXPERT_NWAY_FTZ``) where the
body compares an exponential's argument with a negative constant, the threshold as written; the states' layout from
a meta index, else the values' (a value template argument known: ggml's D); the rows from the arguments, else from
the expert's launch (``KT_EXPERT_NWAY_ROWS_FROM_LAUNCH``).

Unnormalized parts folded in their own 16-bit type (``KT_EXPERT_NWAY_FOLD``: PaddleNLP's and FastDeploy's
append-attention merge_multi_chunks): one 16-bit values input, two fp32 arrays (the max under the exponentials, the
sum the other), a running max set to a max the maxima feed, a running accumulator of the values' type updated as
``o * T(s1) + v * T(s2)`` (T's operators or ``__hadd(__hmul(..), __hmul(..))``; each scale an exponential rounded to
T to nearest, s1 of the previous max less the new one, s2 of the state's) and a running fp32 sum ``d * s1 + d_k * s2``
(each with its running term first), the accumulator divided by the sum in T's division; the constants both start
at, as the instantiation compiles them (``if constexpr (std::is_same<T, half>::value)``). The count of a row's states
a ceiling division of a per-request length, the request of a token through its padding offsets
(``(t + offsets[t]) / seq``), the rows of a request whose guards are <= 0 left as they are. Any other rounding (an
explicit ``__hfma``, values widened to fp32, another order of the terms, a conversion toward zero) gets no such
binding.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, INTS, NBYTES, Evidence, SizeExpr, _once,
                                                    additive_terms, declared_type, assignments, call_arguments, closing,
                                                    const_value, counts_of, div, feeding, flows, index_parts,
                                                    index_stride, instance_types, number, plain, pointer_aliases,
                                                    loop_headers, loop_variable, modified, prod, statements,
                                                    uncast, unparen)

EXPS = ("expf", "__expf", "exp", "exp2f", "exp2", "__exp2f")
EXP_CALL = r"(?:__)?exp2?f?"
LOG2E = 1.4426950408889634
LOGS = ("logf", "log", "__logf", "log2f", "log2", "__log2f")


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get("merge_attn_states")
    if e is None or not ev.has(*EXPS):
        return []
    if ev.bufs("inout"):  # one state merged into the other in place
        return _in_place_bindings(ev, e)
    vals_in = [a for a in ev.bufs("in", FLOATS) if a.counts]
    big = max((a.counts for a in vals_in), default=None)
    if big is None:
        return []
    pv = [a for a in vals_in if a.counts == big]
    if len(pv) == 1:  # one values input holding every state: an N-way merge (two states need two)
        return _nway_bindings(ev, e, pv[0])
    lse = [a for a in vals_in if a.dtype == "f32" and a.counts != big]
    outs = ev.bufs("out")
    ov = [a for a in outs if a.counts == big]
    olse = [a for a in outs if a.dtype == "f32" and a.counts != big]
    # four fp32 state inputs (and none or two outputs): each state a running max and a sum of exponentials apart
    ml = len(lse) == 4 and len(olse) in (0, 2) and "KT_EXPERT_STATE" in e.conventions
    if len(pv) != 2 or len(lse) != (4 if ml else 2) or len(ov) != 1 or len(olse) > (2 if ml else 1) \
            or len(outs) != len(ov) + len(olse) or len(ev.bufs()) != len(pv) + len(lse) + len(outs):
        return []
    T, O = pv[0].dtype, ov[0].dtype
    # fp32 partials merged into a 16-bit output: the expert's output type of its own, no wider than the values'
    # (its vector checks are made for the values' type)
    mixed = O != T
    if pv[1].dtype != T or (mixed and ("KT_EXPERT_OUT_TYPE" not in e.conventions or O not in FLOATS
                                       or NBYTES[O] > NBYTES[T])) or any(a.counts != lse[0].counts for a in lse):
        return []
    L = lse[0].counts
    if any(a.counts != L for a in olse):
        return []
    # each state's running max and sum as interleaved pairs (a float2 a row) in one fp32 array: read beside the
    # log-sum-exp readings of the same arrays, first where the body indexes them at twice a row plus one
    paired = _paired_stats_bindings(ev, e, pv, lse, ov[0], olse, big) if not ml else []
    found = _tokens_heads(ev, big, L, lse[0])
    if found is None:
        return paired
    hs, pairs, from_grid = found
    if ml:
        return _max_sum_bindings(ev, e, pv, lse, ov[0], olse, hs, pairs, from_grid)
    if paired:
        return paired + _lse_bindings(ev, e, pv, lse, ov[0], olse, hs, pairs, from_grid)
    return _lse_bindings(ev, e, pv, lse, ov[0], olse, hs, pairs, from_grid)


def _nearer_pairings(ev: Evidence, pv: list, states: list) -> list:
    """Which state (an lse, or an array of (max, sum) pairs) goes with which value input, both ways: the one next to
    it in the argument list first (not what either is called)."""
    order = [a.name for a in ev.args]
    p0, p1 = pv
    s0, s1 = states
    near = abs(order.index(p0.name) - order.index(s0.name)) + abs(order.index(p1.name) - order.index(s1.name))
    far = abs(order.index(p0.name) - order.index(s1.name)) + abs(order.index(p1.name) - order.index(s0.name))
    pairings = [((p0, s0), (p1, s1)), ((p0, s1), (p1, s0))]
    return pairings[::-1] if far < near else pairings


def _lse_bindings(ev: Evidence, e, pv: list, lse: list, ov, olse: list, hs, pairs: list,
                  from_grid: int) -> list[Binding]:
    """The two-state merge with one log-sum-exp a state: which lse goes with which values, the lse layout and
    base."""
    T, O = pv[0].dtype, ov.dtype
    mixed = O != T
    pairings = _nearer_pairings(ev, pv, lse)
    base2_first = ev.has("exp2f", "exp2", "__exp2f", "log2f", "log2", "__log2f")
    bases = [1, 0] if base2_first else [0, 1]
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
        token_major_first = _token_major_first(ev, tname, hname, from_grid)
        for gi, ((pa, pl), (sa, sl)) in enumerate(pairings):
            for mi, tm in enumerate([token_major_first, 1 - token_major_first]):
                for bi, base in enumerate(bases):
                    b = Binding(e, 0.9, f"two value buffers and two fp32 log-sum-exps of `{tname} * {hname}`, "
                                "weights from expf(lse - max) and the merged lse from logf → merge attention states",
                                ev.kernel.name)
                    _common(b, ev, tok, heads, hs, tm, from_grid, T, O)
                    b.conventions["KT_EXPERT_LSE_BASE2"] = base
                    b.call_args = [_cast(O, ov.name, False),
                                   f"(float*)({olse[0].name})" if olse else "(float*)nullptr",
                                   _cast(T, pa.name, True), f"(const float*)({pl.name})", _cast(T, sa.name, True),
                                   f"(const float*)({sl.name})", tok.c, heads.c, hs.c]
                    lay = f"[{tname}, {hname}]" if tm else f"[{hname}, {tname}]"
                    b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if mixed else "")] + ([f"out_lse={olse[0].name}"] if olse else []) + [
                        f"p={pa.name} with p_lse={pl.name}", f"s={sa.name} with s_lse={sl.name}",
                        f"tokens={tok.words}", f"heads={heads.words}", f"head_size={hs.words}",
                        f"values [{tname}, {hname}, head_size]", f"lse {lay}",
                        "base-2 lse" if base else "natural lse"]
                    b.support = 20 - 4 * pi - 3 * gi - 2 * mi - bi
                    out.append(b)
    return out


def _paired_stats_bindings(ev: Evidence, e, pv: list, stats: list, ov, outs: list, big: tuple) -> list[Binding]:
    """The two-state merge whose states are a running max and a sum of exponentials interleaved as pairs in one fp32
    array each, [rows, 2] (TensorRT-LLM's MLA chunked-prefill softmax stats; KT_EXPERT_STATE 2): the rows half the
    arrays' length, the maxima at 2r and the sums at 2r + 1 (or the reverse), the merged pair written to the output
    array alike. Proposed where the arrays' length is even and the body indexes at twice a row plus one, above the
    log-sum-exp readings of the same arrays."""
    if "2: the same states, each state's (m, l) interleaved" not in e.convention_words.get("KT_EXPERT_STATE", "") \
            or len(stats) != 2 or len(outs) > 1 or any(v % 2 for a in stats + outs for v in a.counts):
        return []
    half = tuple(v // 2 for v in stats[0].counts)
    found = _tokens_heads(ev, big, half, stats[0], states_size=f"({stats[0].spec.size}) / 2")
    if found is None:
        return []
    hs, pairs, from_grid = found
    if not re.search(r"\*2\)*\+1\b|\b2\*\(?\w+\)?\+1\b", ev.flat):
        return []  # no index at twice a row plus one: no pair's second element is read
    pairings = _nearer_pairings(ev, pv, stats)
    forms = _exp_forms(ev)
    T, O = pv[0].dtype, ov.dtype
    om = outs[0] if outs else None
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
        # pairs a row in the values' row order (token-major) first, unless the body indexes them head-major
        token_major_first = _token_major_first(ev, tname, hname, from_grid, unknown=1)
        for gi, ((pa, ps), (qa, qs)) in enumerate(pairings):
            for oi, (m_at, l_at) in enumerate([(0, 1), (1, 0)]):  # (max, sum) pairs first
                for mi, tm in enumerate([token_major_first, 1 - token_major_first]):
                    for xi, (base2, via) in enumerate(forms):
                        b = Binding(e, 0.9, f"two value buffers, each with an fp32 array of (max, sum) pairs of "
                                    f"`{tname} * {hname}` rows → merge attention states", ev.kernel.name)
                        _common(b, ev, tok, heads, hs, tm, from_grid, T, O)
                        b.conventions.update({"KT_EXPERT_STATE": 2, "KT_EXPERT_LSE_BASE2": base2,
                                              "KT_EXPERT_EXP2_LOG2E": via})

                        def at(a, k: int, const: bool) -> str:
                            ptr = f"({'const ' if const else ''}float*)({a.name})"
                            return f"{ptr} + 1" if k else ptr
                        b.call_args = [_cast(O, ov.name, False), at(om, m_at, False) if om else "(float*)nullptr",
                                       _cast(T, pa.name, True), at(ps, m_at, True), _cast(T, qa.name, True),
                                       at(qs, m_at, True), tok.c, heads.c, hs.c,
                                       at(om, l_at, False) if om else "(float*)nullptr", at(ps, l_at, True),
                                       at(qs, l_at, True)]
                        lay = f"[{tname}, {hname}]" if tm else f"[{hname}, {tname}]"
                        pair = "(max, sum)" if m_at == 0 else "(sum, max)"
                        exp = ("base-2 m, exp2f(m - max)" if base2 else
                               "natural m, exp2f((m - max) * log2e)" if via else "natural m, expf(m - max)")
                        b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if O != T else "")] + (
                            [f"out_stats={om.name}"] if om else []) + [
                            f"p={pa.name} with stats={ps.name}", f"s={qa.name} with stats={qs.name}",
                            f"tokens={tok.words}", f"heads={heads.words}", f"head_size={hs.words}",
                            f"values [{tname}, {hname}, head_size]", f"{pair} pairs {lay}",
                            "values normalized by their own sum", exp]
                        b.support = 32 - 4 * pi - 3 * gi - 3 * oi - 2 * mi - xi  # above the lse readings' 20
                        out.append(b)
    return out


def _tokens_heads(ev: Evidence, big: tuple, L: tuple, state, exclude: tuple[str, ...] = (),
                  states_size: str | None = None) -> tuple | None:
    """The head size (the values' length over the states') and every (tokens, heads) pair of sizes whose product
    is the states' length, likeliest first; whether the token count comes from the expert's own grid. ``exclude``:
    int arguments that are neither (an N-way merge's state count); ``states_size``: the states' length as the spec
    writes it where ``state`` is no buffer of that length (an N-way merge with no merged lse)."""
    hs_all = [s for s in ev.sizes(div(big, L), exclude) if not s.c[0].isdigit()] or ev.sizes(div(big, L), exclude)
    if not hs_all:
        return None
    hs = hs_all[0]
    # (tokens, heads) pairs whose product is the lse's length: int arguments, or one derived from another
    pairs = []
    ints = [a for a in ev.ints() if a.counts and f"(int)({a.name})" != hs.c and a.name not in exclude]
    for a, b in itertools.permutations(ints, 2):
        if tuple(x * y for x, y in zip(a.counts, b.counts)) == L:
            pairs.append((ev.sizes(a.counts)[0], ev.sizes(b.counts)[0]))
    if not pairs:  # one of the two only as a quotient (a flat element count over the other and the head size)
        for a in ints:
            rest = div(L, a.counts)
            xs = [s for s in ev.sizes(rest, exclude) if s.c != f"(int)({a.name})" and not s.c[0].isdigit()] \
                if rest else []
            if xs:
                pairs += [(ev.sizes(a.counts)[0], xs[0]), (xs[0], ev.sizes(a.counts)[0])]
    from_grid = 0
    if not pairs:  # no token count among the arguments (FlashInfer's MergeState: a block per position): the expert
        # reads it from its own grid, launched as tokens times the blocks one token needs
        for a in ints:
            if div(L, a.counts):
                size = states_size if states_size is not None else state.spec.size
                pairs.append((SizeExpr("(int)gridDim.x", f"({size}) / ({a.spec.value})", "the grid"),
                              ev.sizes(a.counts)[0]))
        from_grid = int(bool(pairs))
    if not pairs:
        return None

    # the pairs whose head count the values' index multiplies a token's index by first (``(t * H + h) * D``: the
    # values [tokens, heads, head_size]), else in the arguments' order; what the two are called says nothing
    parts = [p for v in ev.bufs() if v.counts == big for p in index_parts(ev, v.name)]

    def inner(s) -> bool:
        return any(re.search(rf"\*\(?{re.escape(n)}\)?\+", p) for n in re.findall(r"\(int\)\((\w+)\)", s.c)
                   for p in parts)
    pairs.sort(key=lambda p: not inner(p[1]))
    return hs, pairs, from_grid


def _token_major_first(ev: Evidence, tname: str, hname: str, from_grid: int = 0, unknown: int = 0) -> int:
    """1 where the body indexes the states token-major (``token * heads + head``) and nowhere head-major, 0 where it
    indexes them head-major, ``unknown`` where it shows neither. A token count from the grid is ``gridDim.x`` or a
    local that holds it (whatever the local is called)."""
    t = re.escape(tname)
    if from_grid:
        held = [n for n, v in assignments(ev.body) if re.fullmatch(r"\(*gridDim\.x\)*", plain(v))]
        t = "|".join([r"gridDim\.x"] + [re.escape(n) for n in sorted(set(held))])
        t = rf"(?:{t})(?![\w.])"
    head_major = ev.mentions(rf"\b{re.escape(hname)}\*{t}\+") or ev.mentions(rf"\*{t}\+")
    if head_major:
        return 0
    return 1 if ev.mentions(rf"\*{re.escape(hname)}\+") else unknown


def _common(b: Binding, ev: Evidence, tok, heads, hs, tm: int, from_grid: int, T: str, O: str) -> None:
    """What every binding of the merge sets alike: sizes, layout, types."""
    b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
    b.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": tm}
    b.conventions = {}
    if from_grid:
        b.conventions["KT_EXPERT_TOKENS_FROM_GRID"] = 1
    b.template_args = [CTYPE[T]] + ([CTYPE[O]] if O != T else [])
    if O != T:
        b.conventions["KT_EXPERT_OUT_TYPE"] = 1
    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}


# ------------------------------------------------------------------------------------- (max, sum) states
def _singly(flow: dict[str, set[str]], text: str, names: set[str]) -> set[str]:
    """The ``names`` an expression reads through an identifier that one of them alone feeds (``row_max_a`` of
    ``row_max_a - max``, not the max of both)."""
    out = set()
    for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", text)):
        fed = ({ident} | flow.get(ident, set())) & names
        if len(fed) == 1:
            out |= fed
    return out


def _state_roles(ev: Evidence, states: list, outs: list):
    """The maxima (the states under an exponential's argument) and the sums, each sum paired with a max where the
    body multiplies it by the exponential of that max's own difference (None: not told); the merged (max, sum)
    outputs in that order where the body tells them (the one a sum feeds is the sum), else None."""
    flow = flows(ev.body, declarators=True)
    names = {a.name for a in states}
    under = set()
    for _, args in call_arguments(ev.body, EXP_CALL):
        if args:
            under |= feeding(flow, args[0]) & names
    ms = [a for a in states if a.name in under]
    ls = [a for a in states if a.name not in under]
    if len(ms) != 2 or len(ls) != 2:
        return None
    mnames, lnames = {a.name for a in ms}, {a.name for a in ls}
    exps: dict[str, str] = {}  # a local set from one exponential -> the max it is of
    pair: dict[str, set[str]] = {}  # sum -> the maxima it is seen with
    pieces = assignments(ev.body)
    for target, value in pieces:
        calls = call_arguments(value, EXP_CALL)
        if len(calls) != 1 or not calls[0][1]:
            continue
        own = _singly(flow, calls[0][1][0], mnames)
        if len(own) != 1:
            continue
        m = next(iter(own))
        rest = value.replace(calls[0][1][0], " ")
        got = _singly(flow, rest, lnames)
        if len(got) == 1:
            pair.setdefault(next(iter(got)), set()).add(m)
        elif not got and target:
            exps[target] = m
    for target, value in pieces:  # one step on: `w = l * e` where `e = exp(m - max)` was its own statement
        for x in set(re.findall(r"\b[A-Za-z_]\w*\b", value)) & set(exps):
            got = _singly(flow, value, lnames)
            if len(got) == 1:
                pair.setdefault(next(iter(got)), set()).add(exps[x])
    told = None
    if len(pair) == 2 and all(len(v) == 1 for v in pair.values()) and \
            {next(iter(v)) for v in pair.values()} == mnames:
        told = {next(iter(v)): lname for lname, v in pair.items()}  # max -> its sum
    out_order = None
    if outs:
        fed = [bool(flow.get(a.name, set()) & lnames) for a in outs]
        if fed.count(True) == 1:
            out_order = [outs[fed.index(False)], outs[fed.index(True)]]
    return ms, ls, told, out_order


def _exp_forms(ev: Evidence) -> list[tuple[int, int]]:
    """(KT_EXPERT_LSE_BASE2, KT_EXPERT_EXP2_LOG2E) of each way to take the exponentials, as the kernel takes them
    first: exp2f of a difference times log2(e) (or ``__expf``, which is that) natural maxima through exp2f,
    exp2f alone base-2 maxima, expf natural maxima."""
    log2e = False
    for name, args in call_arguments(ev.body, EXP_CALL):
        if "2" in name and args:
            for tok in re.findall(r"[A-Za-z_]\w*|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?", args[0]):
                v = number(tok, ev.constants)
                if v is not None and abs(v - LOG2E) < 1e-6:
                    log2e = True
    natural, via_exp2, base2 = (0, 0), (0, 1), (1, 0)
    if log2e or ev.has("__expf"):
        return [via_exp2, natural, base2]
    if ev.has("exp2f", "exp2", "__exp2f"):
        return [base2, via_exp2, natural]
    return [natural, via_exp2, base2]


def _max_sum_bindings(ev: Evidence, e, pv: list, states: list, ov, outs: list, hs, pairs: list,
                      from_grid: int) -> list[Binding]:
    roles = _state_roles(ev, states, outs)
    if roles is None:
        return []
    ms, ls, told, out_order = roles
    order = [a.name for a in ev.args]

    def dist(x, y) -> int:
        return abs(order.index(x.name) - order.index(y.name))
    # which sum goes with which max: the body's, else both, the nearer in the argument list first
    m0, m1 = ms
    if told is not None:
        states_of = [[(m0, next(a for a in ls if a.name == told[m0.name])),
                      (m1, next(a for a in ls if a.name == told[m1.name]))]]
    else:
        states_of = _nearer_pairings(ev, ms, ls)
    # which state goes with which value input: the nearer in the argument list first
    p0, p1 = pv
    out_orders = [out_order] if out_order is not None else ([outs, outs[::-1]] if outs else [[]])
    forms = _exp_forms(ev)
    T, O = pv[0].dtype, ov.dtype
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
        token_major_first = _token_major_first(ev, tname, hname, from_grid)
        for li, (sa, sb) in enumerate(states_of):
            pairings = [((p0, sa), (p1, sb)), ((p0, sb), (p1, sa))]
            near = dist(p0, sa[0]) + dist(p0, sa[1]) + dist(p1, sb[0]) + dist(p1, sb[1])
            far = dist(p0, sb[0]) + dist(p0, sb[1]) + dist(p1, sa[0]) + dist(p1, sa[1])
            if far < near:
                pairings.reverse()
            for gi, ((pa, (pm, pl)), (qa, (qm, ql))) in enumerate(pairings):
                for oi, oo in enumerate(out_orders):
                    for mi, tm in enumerate([token_major_first, 1 - token_major_first]):
                        for xi, (base2, via) in enumerate(forms):
                            b = Binding(e, 0.9, f"two value buffers, each with an fp32 running max and sum of "
                                        f"exponentials of `{tname} * {hname}` (the maxima under the exponentials, "
                                        "the sums multiplied by them) → merge attention states", ev.kernel.name)
                            _common(b, ev, tok, heads, hs, tm, from_grid, T, O)
                            b.conventions.update({"KT_EXPERT_STATE": 1, "KT_EXPERT_LSE_BASE2": base2,
                                                  "KT_EXPERT_EXP2_LOG2E": via})
                            om, ol = oo if oo else (None, None)
                            b.call_args = [_cast(O, ov.name, False),
                                           f"(float*)({om.name})" if om else "(float*)nullptr",
                                           _cast(T, pa.name, True), f"(const float*)({pm.name})",
                                           _cast(T, qa.name, True), f"(const float*)({qm.name})", tok.c, heads.c,
                                           hs.c, f"(float*)({ol.name})" if ol else "(float*)nullptr",
                                           f"(const float*)({pl.name})", f"(const float*)({ql.name})"]
                            lay = f"[{tname}, {hname}]" if tm else f"[{hname}, {tname}]"
                            exp = ("base-2 m, exp2f(m - max)" if base2 else
                                   "natural m, exp2f((m - max) * log2e)" if via else "natural m, expf(m - max)")
                            b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if O != T else "")] + (
                                [f"out_m={om.name}", f"out_l={ol.name}"] if om else []) + [
                                f"p={pa.name} with m={pm.name}, l={pl.name}", f"s={qa.name} with m={qm.name}, l={ql.name}",
                                f"tokens={tok.words}", f"heads={heads.words}", f"head_size={hs.words}",
                                f"values [{tname}, {hname}, head_size]", f"m and l {lay}",
                                "values normalized by their own l", exp]
                            b.support = 40 - 6 * pi - 3 * li - 3 * gi - 3 * oi - 2 * mi - xi
                            out.append(b)
    return out


# ------------------------------------------------------------------------------------------------- in place
MASKS = ("u8", "i8", "i16", "i32", "u32", "i64", "u64")
_ZERO = r"(?:0[uUlL]*|false|0\.0*[fF]?)"
# rows a warp merges in place (ITEMS): at 8, two 16-byte vectors of 8 rows held at once spill at 512 threads and more
IN_PLACE_ROWS = [1, 2, 4]


def _conditions(body: str) -> list[str]:
    """The conditions of the body's ``if``/``while`` statements and of its conditional expressions."""
    out = []
    for m in re.finditer(r"\b(?:if|while)\s*\(", body):
        i = closing(body, m.end())
        out.append(body[m.end():i - 1])
    for m in re.finditer(r"\?", body):
        left = max(body.rfind(ch, 0, m.start()) for ch in "=(,;{}")
        out.append(body[left + 1:m.start()])
    return out


def _mask_read(ev: Evidence, name: str) -> bool:
    """Whether the body reads ``name`` as a per-token truth value: each of its reads (casts aside) compared with 0
    (``==``, ``!=``) or used alone (negated, in a logical expression, a condition of its own, a local's value), and
    some condition computed from it."""
    body = uncast(ev.body)
    reads = list(re.finditer(rf"(?<![\w.>]){re.escape(name)}\s*\[", body))
    if not reads:
        return False
    for m in reads:
        i = closing(body, m.end(), "([", ")]")
        before, after = body[:m.start()], body[i:]
        if not re.search(r"(?:(?<![=!<>+\-*/%&|^])=|!|\(|,|\?|:|&&|\|\|)\s*$", before) or \
                not re.match(rf"\s*(?:(?:==|!=)\s*{_ZERO}(?![\w.])|\)|&&|\|\||\?|;|,)", after):
            return False
    flow = flows(ev.body, declarators=True)
    return any(name in feeding(flow, c) for c in _conditions(ev.body))


def _in_place_bindings(ev: Evidence, e) -> list[Binding]:
    """The first state (values and lse, both read and written) merged in place with the other (read only), where
    a per-token mask, if any, is nonzero."""
    if "KT_EXPERT_INPLACE" not in e.conventions or ev.bufs("out"):
        return []
    io = ev.bufs("inout")
    if len(io) != 2 or not all(a.read and a.written and a.counts for a in io):
        return []
    big = max(a.counts for a in io)
    vs = [a for a in io if a.counts == big and a.dtype in FLOATS]
    ls = [a for a in io if a.counts != big and a.dtype == "f32"]
    if len(vs) != 1 or len(ls) != 1:
        return []
    v, vl = vs[0], ls[0]
    T, L = v.dtype, vl.counts
    ins = ev.bufs("in")
    os_ = [a for a in ins if a.counts == big and a.dtype == T and not a.written]
    ols = [a for a in ins if a.counts == L and a.dtype == "f32" and not a.written]
    if len(os_) != 1 or len(ols) != 1:
        return []
    o, ol = os_[0], ols[0]
    rest = [a for a in ins if a is not o and a is not ol]
    if len(rest) > 1 or any(a.dtype not in MASKS or a.written or not a.counts or not _mask_read(ev, a.name)
                            for a in rest):
        return []
    mask = rest[0] if rest else None
    found = _tokens_heads(ev, big, L, vl)
    if found is None:
        return []
    hs, pairs, from_grid = found
    if mask is not None:  # one mask entry a token: which size is the tokens
        pairs = [(t, h) for t, h in pairs if counts_of(t.spec, ev.spec) == mask.counts]
        if not pairs:
            return []
    bases = [1, 0] if ev.has("exp2f", "exp2", "__exp2f", "log2f", "log2", "__log2f") else [0, 1]
    M = CTYPE[mask.dtype] if mask is not None else "uint8_t"
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
        token_major_first = _token_major_first(ev, tname, hname, from_grid)
        for mi, tm in enumerate([token_major_first, 1 - token_major_first]):
            for bi, base in enumerate(bases):
                b = Binding(e, 0.9, "two value buffers and two fp32 log-sum-exps of "
                            f"`{tname} * {hname}`, the first state's read and written (in place), weights from "
                            "exponentials of lse - max and the merged lse from a log → merge attention states in place",
                            ev.kernel.name)
                b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
                b.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": tm}
                b.conventions = {"KT_EXPERT_INPLACE": 1, "KT_EXPERT_LSE_BASE2": base}
                b.template_args = [CTYPE[T], M]
                b.consts = {"ESIZE": NBYTES[T]}
                b.fixed = {"ITEMS": IN_PLACE_ROWS}
                b.call_args = [_cast(T, v.name, False), f"(float*)({vl.name})", _cast(T, o.name, True),
                               f"(const float*)({ol.name})", tok.c, heads.c, hs.c,
                               f"(const {M}*)({mask.name})" if mask is not None else f"(const {M}*)nullptr"]
                lay = f"[{tname}, {hname}]" if tm else f"[{hname}, {tname}]"
                b.words = [f"v={v.name} with v_lse={vl.name} merged in place", f"o={o.name} with o_lse={ol.name}",
                           f"mask={mask.name} (one a token, 0: left as it is)" if mask is not None else "no mask",
                           f"tokens={tok.words}", f"heads={heads.words}", f"head_size={hs.words}",
                           f"values [{tname}, {hname}, head_size]", f"lse {lay}",
                           "base-2 lse" if base else "natural lse"]
                b.support = 20 - 4 * pi - 2 * mi - bi
                out.append(b)
    return out


# ------------------------------------------------------------------------------------------------- N-way
# the N-way layouts of the states (KT_EXPERT_NWAY): the lse of state k of row (token, head) at s0 + k * stride
NWAY_LAYOUTS = {1: "[tokens, sets, heads]", 2: "[sets, tokens, heads]", 3: "[tokens, heads, sets]"}


def _set_loops(ev: Evidence, bound) -> list[str]:
    """The variables of the body's ``for`` loops that the state count bounds: their condition compares the variable
    with ``bound`` (an int argument, through the locals computed from it) or, ``bound`` a number, with a literal, a
    file constant or a value template argument of that value."""
    flow = flows(ev.body, declarators=True)
    values = {}
    if not isinstance(bound, str):
        targs = list(ev.spec.template_args or [])
        if not targs:
            named = {tuple(a.text for a in site.template_args) for site in ev.kernel.launch_sites
                     if site.template_args}
            targs = list(next(iter(named))) if len(named) == 1 else []
        values = {tp.name: a.strip() for tp, a in zip(ev.kernel.template_params, targs) if tp.kind != "type"}
    direct: list[str] = []
    through: list[str] = []
    for init, cond, incr in loop_headers(ev.body):
        if not re.search(r"<|>|!=", cond):
            continue
        if isinstance(bound, str):
            if bound not in feeding(flow, cond):
                continue
        elif not any(number(values.get(t, t), ev.constants) == bound
                     for t in re.findall(r"[A-Za-z_]\w*|\d+", re.sub(r"(\d)[uUlL]+\b", r"\1", cond))):
            continue
        var = loop_variable(init, incr)
        if var and var in re.findall(r"[A-Za-z_]\w*", cond) and var not in direct + through:
            named = not isinstance(bound, str) or re.search(rf"\b{re.escape(bound)}\b", cond) is not None
            (direct if named else through).append(var)
    return direct + through  # the loops whose condition names the count itself first


_CEIL_FORMS = (r"\(\s*(?P<x>\w+(?:\s*\[[^\]\[]*\])?)\s*\+\s*(?P<s>\w+)\s*-\s*1\s*\)\s*/\s*(?P=s)\b",
               r"\b\w*(?:cdiv|ceil_?div|div_?up|DIVIDE_ROUND_UP|ceildiv|CEIL_DIV|DIV_UP)\w*\s*\(\s*(?P<x>\w+)\s*,\s*(?P<s>\w+)\s*\)")


def _split_size(ev: Evidence, lens) -> tuple[str, str | None, str] | None:
    """The keys one state covers where the body counts a row's states from its sequence's length: a ceiling division
    (``(len + S - 1) / S``, ``cdiv(len, S)``, ``DIVIDE_ROUND_UP(len, S)``) of a value read from ``lens`` by S, a
    file constant or an int argument. (S in C, the argument's name or None, words); None where the body has none."""
    flow = flows(ev.body, declarators=True)
    ints = {a.name: a for a in ev.ints() if a.counts}
    text = uncast(ev.body)
    for form in _CEIL_FORMS:
        for m in re.finditer(form, text):
            x, s = m.group("x"), m.group("s")
            if lens.name not in feeding(flow, x) and not re.search(rf"\b{re.escape(lens.name)}\b", x):
                continue
            if s in ints:
                return f"(long long)({s})", s, f"`{s}`"
            v = number(s, ev.constants)
            if v is not None and float(v).is_integer() and v > 0:
                return f"(long long){int(v)}", None, f"{s} = {int(v)}" if not s.isdigit() else s
    return None


def _sums_roles(ev: Evidence, vin, arrays: list) -> tuple | None:
    """Two fp32 arrays of one entry a state beside NORMALIZED partial values (vLLM's paged-attention v2 reduce:
    max_logits and exp_sums): (the maxima, the sums, eps as C, __fdividef), or None. Read by evidence: the maxima
    are the array an exponential's argument reads (through a local it alone feeds), the sums the other; the values
    are normalized where the statement that reads them takes a sum times an exponential (inline, or through the
    locals and arrays that hold such a product: vLLM's ``rescaled_exp_sum`` kept in ``shared_exp_sums``): each
    weighted by its own sum, not by the exponential alone (llama.cpp's unnormalized parts are
    ``KT_EXPERT_NWAY_ML``, their sums only in the denominator); eps a literal added to a value the sums feed
    (``global_exp_sum + 1e-6f``), __fdividef where the body takes the inverse so."""
    flow = flows(ev.body, declarators=True)
    names = {a.name for a in arrays}
    under = set()
    for _, args in call_arguments(ev.body, EXP_CALL):
        if args:
            under |= _singly(flow, args[0], names)
    maxima = [a for a in arrays if a.name in under]
    sums = [a for a in arrays if a.name not in under]
    if len(maxima) != 1 or len(sums) != 1:
        return None
    mx, sm = maxima[0], sums[0]
    text = uncast(ev.body)

    def reads(a, t: str) -> bool:  # a direct read of the array or of a local pointer into it
        return any(re.search(rf"\b{re.escape(n)}\s*\[", t) for n in set(pointer_aliases(text, a.name)) | {a.name})

    def weighted(t: str) -> bool:  # a sum times an exponential
        return reads(sm, t) and bool(call_arguments(t, EXP_CALL))

    held = set()  # the locals (and arrays) that hold a sum times an exponential, and their copies
    pieces = assignments(text)
    for target, value in pieces:
        if weighted(value):
            held.add(target)
    for _ in range(3):
        for target, value in pieces:
            ident = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*", value)
            if ident and ident.group(1) in held:
                held.add(target)
    value_reads = [stmt for _, _, stmt in statements(text) if reads(vin, stmt)]
    if not any(weighted(stmt) or set(re.findall(r"\b[A-Za-z_]\w*\b", stmt)) & held for stmt in value_reads):
        return None
    eps = "0.f"
    for m in re.finditer(r"([A-Za-z_]\w*)\+((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)(?![\w.])", ev.flat):
        v = number(m.group(2), ev.constants)
        if v is not None and 0 < v < 1e-2 and m.group(1) in held:
            eps = f"(float)({m.group(2)})"
            break
    fast = "__fdividef(" in ev.flat
    return mx, sm, eps, fast


def _nway_bindings(ev: Evidence, e, vin) -> list[Binding]:
    """An N-way merge (FlashInfer's MergeStates; the split-KV combines of SGLang and FlashAttention): one values
    input and one fp32 lse input holding the ``sets`` states of every row, merged into one values output (and
    optionally one fp32 merged lse), the states counted by an int argument (else a number the same on every size
    set) that bounds a loop of the body; the values input is that many times the output, the lse input that many
    times the rows. The layout of the states from how far the lse index moves from one state to the next
    (``index_stride``): the heads (between the token and the heads), tokens * heads (split-major) or 1 (after the
    heads); all three where the body does not tell."""
    if "KT_EXPERT_NWAY" not in e.conventions or vin.dtype not in FLOATS:
        return []
    ins, outs = ev.bufs("in"), ev.bufs("out")
    lins = [a for a in ins if a is not vin]
    if "KT_EXPERT_NWAY_FOLD" in e.conventions:
        # unnormalized parts folded in their own 16-bit type (PaddleNLP's merge_multi_chunks): read where the body
        # computes that fold, every rounding point of it
        fold = _nway_fold_bindings(ev, e, vin, lins, outs)
        if fold:
            return fold
    if len(outs) == 1 and outs[0].counts and len(ev.bufs()) == len(ins) + 1 and (
            len(lins) in (1, 2) or (len(lins) == 3 and sum(a.dtype in INTS for a in lins) == 1)):
        # unnormalized parts with (max, sum) metas (and perhaps a count of states per token): read from what the body
        # computes, where it shows them
        ml = _nway_ml_bindings(ev, e, vin, lins, outs[0])
        if ml:
            return ml
    # flash-decoding's per-sequence split count: an integer input (the sequence lengths, one a token) whose read
    # bounds the loop over the states through a ceiling division by the keys a state covers
    lens = None
    ibufs = [a for a in lins if a.dtype in ("i32", "i64") and a.counts]
    if len(ibufs) == 1 and "KT_EXPERT_NWAY_COUNT" in e.conventions:
        lens = ibufs[0]
        lins = [a for a in lins if a is not lens]
    # normalized parts with their maxima and sums in two arrays (vLLM's paged-attention v2 reduce)
    sums = None
    if len(lins) == 2 and len(outs) == 1 and "KT_EXPERT_NWAY_SUMS" in e.conventions \
            and all(a.dtype == "f32" and a.counts for a in lins) and lins[0].counts == lins[1].counts:
        sums = _sums_roles(ev, vin, lins)
        if sums is None:
            return []
        lins = [sums[0]]
    if len(lins) != 1 or lins[0].dtype != "f32" or not lins[0].counts or len(outs) not in (1, 2) \
            or len(ev.bufs()) != len(ins) + len(outs) or not all(a.counts for a in outs):
        return []
    lin = lins[0]
    outs = sorted(outs, key=lambda a: a.counts[0], reverse=True)
    ov, olse = outs[0], (outs[1] if len(outs) == 2 else None)
    if ov.dtype not in FLOATS or (olse is not None and olse.dtype != "f32"):
        return []
    n = div(vin.counts, ov.counts)
    if n is None:
        return []
    # the state count: an int argument holding it whose value bounds a loop, else a number that does
    counts = []
    for a in ev.ints():
        if a.counts == n:
            counts += [(SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`"), v, (a.name,))
                       for v in _set_loops(ev, a.name)[:1]]
    if not counts and len(set(n)) == 1:
        counts += [(SizeExpr(str(n[0]), str(n[0]), f"the constant {n[0]}"), v, ()) for v in _set_loops(ev, n[0])[:1]]
    split = None
    if lens is not None:
        # the count a row merges from its sequence's length (the states' count then only their stride)
        split = _split_size(ev, lens)
        loops = _set_loops(ev, lens.name)[:1] if split else []
        if not loops:
            return []
        held = [a for a in ev.ints() if a.counts == n]
        stride = (SizeExpr(f"(int)({held[0].name})", str(held[0].spec.value), f"`{held[0].name}`"), (held[0].name,)) \
            if held else (SizeExpr(str(n[0]), str(n[0]), f"the constant {n[0]}"), ()) if len(set(n)) == 1 else None
        if stride is None:
            return []
        counts = [(stride[0], loops[0], stride[1] + ((split[1],) if split[1] else ()))]
    T, O = vin.dtype, ov.dtype
    base2_first = ev.has("exp2f", "exp2", "__exp2f", "log2f", "log2", "__log2f")
    bases = [1, 0] if base2_first else [0, 1]
    if sums is not None:  # (KT_EXPERT_LSE_BASE2, KT_EXPERT_EXP2_LOG2E) as the kernel takes its exponentials
        bases = _exp_forms(ev)
    out = []
    for sets, var, exclude in counts:
        rows = olse.counts if olse is not None else div(lin.counts, n)
        if rows is None or prod(n, rows) != lin.counts or div(ov.counts, rows) is None:
            continue
        rows_size = olse.spec.size if olse is not None else f"({lin.spec.size}) / ({sets.spec})"
        found = _tokens_heads(ev, ov.counts, rows, olse, exclude, rows_size)
        nway_grid = 0
        if found is None and lens is not None:
            # neither a token nor a head count among the arguments (lightllm's grid (batch, head_num)): the tokens
            # are the lengths', the heads the rest of the rows; the expert launched [tokens, heads], one warp a block
            heads_fp = div(rows, lens.counts)
            hs_all = [x for x in ev.sizes(div(ov.counts, rows), exclude) if not x.c[0].isdigit()] or \
                ev.sizes(div(ov.counts, rows), exclude)
            if heads_fp is None or not hs_all or "KT_EXPERT_NWAY_GRID" not in e.conventions:
                continue
            found = (hs_all[0], [(SizeExpr("(int)gridDim.x", str(lens.spec.size), "the grid's x"),
                                  SizeExpr("(int)gridDim.y", f"({rows_size}) / ({lens.spec.size})", "the grid's y"))],
                     0)
            nway_grid = 1
        if found is None:
            continue
        hs, pairs, from_grid = found
        stride = index_stride(ev, lin.name, var)
        if stride is None and lens is not None:  # the lse read through a local pointer to the row's states
            local = {index_stride(ev, n, var) for n in pointer_aliases(uncast(ev.body), lin.name)[1:]}
            stride = local.pop() if len(local) == 1 else None
        for tok, heads in pairs:
            tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
            hcounts = counts_of(heads.spec, ev.spec)
            layouts = [1, 2, 3] if not stride or not any(stride) else \
                [k for k, want in ((1, hcounts), (2, rows), (3, tuple(1 for _ in rows))) if stride == want]
            token_major_first = _token_major_first(ev, tname, hname, from_grid)
            majors = [token_major_first, 1 - token_major_first] if olse is not None else [token_major_first]
            for layout in layouts:
                for base in bases:
                    for tm in majors:
                        b = Binding(e, 0.9, f"one values input of {sets.words} states a row and one fp32 log-sum-exp "
                                    f"input of {sets.words} states of `{tname} * {hname}` rows, a loop over the "
                                    "states, exponentials of lse differences → merge attention states (N-way)",
                                    ev.kernel.name)
                        b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
                        b.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": tm}
                        b.conventions = {"KT_EXPERT_NWAY": layout, "KT_EXPERT_LSE_BASE2": base}
                        b.template_args = [CTYPE[T], CTYPE[O]]
                        if sums is not None:
                            b.conventions = {"KT_EXPERT_NWAY": layout, "KT_EXPERT_NWAY_SUMS": 2 if sums[3] else 1,
                                             "KT_EXPERT_LSE_BASE2": base[0]}
                            if base[1]:
                                b.conventions["KT_EXPERT_EXP2_LOG2E"] = 1
                            b.template_args.append(CTYPE[lens.dtype] if lens is not None else "int")
                        elif lens is not None:
                            b.conventions["KT_EXPERT_NWAY_COUNT"] = 1
                            b.template_args.append(CTYPE[lens.dtype])
                        if nway_grid:
                            b.conventions["KT_EXPERT_NWAY_GRID"] = 1
                            # one warp a block: the block size is not the expert's THREADS (kept at its least)
                            b.fixed["THREADS"] = [min(e.params["THREADS"].values)]
                        b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
                        b.call_args = [_cast(O, ov.name, False),
                                       f"(float*)({olse.name})" if olse is not None else "(float*)nullptr",
                                       _cast(T, vin.name, True), f"(const float*)({lin.name})", sets.c, tok.c,
                                       heads.c, hs.c]
                        if sums is not None:  # values, maxima, sums; the lengths (or none), the split, eps
                            b.call_args = [_cast(O, ov.name, False), _cast(T, vin.name, True),
                                           f"(const float*)({sums[0].name})", f"(const float*)({sums[1].name})",
                                           sets.c, tok.c, heads.c, hs.c,
                                           _cast(lens.dtype, lens.name, True) if lens is not None
                                           else "(const int*)nullptr", split[0] if lens is not None else "1LL",
                                           sums[2]]
                        elif lens is not None:
                            b.call_args += [_cast(lens.dtype, lens.name, True), split[0]]
                        names = {"tokens": tname, "heads": hname,
                                 "sets": sets.c if sets.c.isdigit() else sets.words.strip("`")}
                        lay = re.sub(r"\w+", lambda m: names.get(m.group(0), m.group(0)), NWAY_LAYOUTS[layout])
                        b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if O != T else "")] + (
                            [f"out_lse={olse.name}"] if olse is not None else []) + [
                            f"v={vin.name} with v_lse={lin.name}" if sums is None else
                            f"v={vin.name} normalized, with maxima {sums[0].name} and sums {sums[1].name}",
                            f"sets={sets.words}", f"tokens={tok.words}",
                            f"heads={heads.words}", f"head_size={hs.words}",
                            f"states {lay[:-1]}, head_size]"] + (
                            [f"merged lse [{tname}, {hname}]" if tm else f"merged lse [{hname}, {tname}]"]
                            if olse is not None else []) + (["base-2 lse" if base else "natural lse", "merged online"]
                                                            if sums is None else [
                            ("exp2f" if base[0] else "exp2f(x * log2 e)" if base[1] else "expf")
                            + f" weights times the sums, out = sum v * w * inv, inv = "
                            + ("__fdividef(1, W + " if sums[3] else "1 / (W + ") + f"{sums[2]})"])
                        if lens is not None:
                            b.words.insert(4, f"token b's states ceil({lens.name}[b] / {split[2]}), at most sets")
                        b.support = 100 - len(out)
                        out.append(b)
        if lens is None and sums is None and not nway_grid and 2 in layouts and "KT_EXPERT_NWAY_SEQ" in e.conventions:
            out += _nway_seq_bindings(ev, e, vin, lin, ov, olse, sets, exclude, hs, rows, bases)
    return out


def _nway_seq_bindings(ev: Evidence, e, vin, lin, ov, olse, sets, exclude, hs, rows, bases) -> list[Binding]:
    """The split-major N-way merge whose lse is laid out [batch, heads, seq] while its values are [batch, seq,
    heads, head_size] (FlashAttention's softmax_lse beside its output; xFormers' merge_attentions): three int
    arguments whose product is the rows, and a part of the lse's index of the shape ``(b * H + h) * S + s`` (the
    heads count times something, plus something, all times the sequence count: ``evidence.index_parts``); tokens are then batch * seq
    (``KT_EXPERT_NWAY_SEQ``). Likelier than the [tokens, heads] readings of the same kernel, which are kept."""
    lse_at = index_parts(ev, lin.name)
    ints = [a for a in ev.ints() if a.counts and a.name not in exclude and f"(int)({a.name})" != hs.c]
    T, O = vin.dtype, ov.dtype
    out = []
    for bt, hd, sq in itertools.permutations(ints, 3):
        if tuple(x * y * z for x, y, z in zip(bt.counts, hd.counts, sq.counts)) != tuple(rows):
            continue
        H, S = re.escape(hd.name), re.escape(sq.name)
        if not any(re.search(rf"\*\(?{H}\)?\+[^*()]+\)\*\(?{S}\)?(?![\w*])", t) for t in lse_at):
            continue
        tok = SizeExpr(f"(int)({bt.name}) * (int)({sq.name})", f"({bt.spec.value}) * ({sq.spec.value})",
                       f"`{bt.name} * {sq.name}`")
        heads = SizeExpr(f"(int)({hd.name})", str(hd.spec.value), f"`{hd.name}`")
        for base in bases:
            b = Binding(e, 0.9, f"one values input of {sets.words} states a row [{bt.name}, {sq.name}, {hd.name}] and "
                        f"one fp32 log-sum-exp input of {sets.words} states [{bt.name}, {hd.name}, {sq.name}], a loop "
                        "over the states, exponentials of lse differences → merge attention states (N-way)",
                        ev.kernel.name)
            b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
            b.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": 1}
            b.conventions = {"KT_EXPERT_NWAY": 2, "KT_EXPERT_NWAY_SEQ": 1, "KT_EXPERT_LSE_BASE2": base}
            b.template_args = [CTYPE[T], CTYPE[O]]
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
            b.call_args = [_cast(O, ov.name, False),
                           f"(float*)({olse.name})" if olse is not None else "(float*)nullptr",
                           _cast(T, vin.name, True), f"(const float*)({lin.name})", sets.c, tok.c, heads.c, hs.c,
                           f"(int)({sq.name})"]
            sn = sets.c if sets.c.isdigit() else sets.words.strip("`")
            b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if O != T else "")] + (
                [f"out_lse={olse.name}"] if olse is not None else []) + [
                f"v={vin.name} with v_lse={lin.name}", f"sets={sets.words}", f"tokens={tok.words}",
                f"heads={heads.words}", f"head_size={hs.words}",
                f"states [{sn}, {bt.name}, {sq.name}, {hd.name}, head_size]",
                f"lse [{sn}, {bt.name}, {hd.name}, {sq.name}]"] + (
                [f"merged lse [{bt.name}, {hd.name}, {sq.name}]"] if olse is not None else []) + [
                "base-2 lse" if base else "natural lse", "merged online"]
            b.support = 120 - len(out)
            out.append(b)
    return out


# ------------------------------------------------------------------------------- N-way, unnormalized (m, l) parts
_PAIR_MEMBER = re.compile(r"\b([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*\.\s*([xy])\b")


def _closure(pieces: list[tuple[str, str]], text: str) -> str:
    """``text`` and the values of every assignment to a local it names, transitively (all of a name's assignments:
    ``kqmax = m[0].x`` and ``kqmax = fmaxf(kqmax, m[l].x)``), joined: what an expression is computed from, as written."""
    texts, seen, todo = [text], set(), list(re.findall(r"\b[A-Za-z_]\w*\b", text))
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for target, value in pieces:
            if target == n:
                texts.append(value)
                todo += re.findall(r"\b[A-Za-z_]\w*\b", value)
    return " ; ".join(texts)


def _pair_reads(text: str, fed: set[str]) -> set[int]:
    """Which floats of a (m, l) pair ``text`` reads through the names in ``fed`` (the pair buffer and what it feeds):
    0 for ``.x`` or an index ``2 * i``, 1 for ``.y`` or ``2 * i + 1``."""
    out = set()
    for m in _PAIR_MEMBER.finditer(text):
        if m.group(1) in fed:
            out.add(0 if m.group(3) == "x" else 1)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\[", text):
        if m.group(1) not in fed:
            continue
        idx = re.sub(r"\s+", "", uncast(text[m.end():closing(text, m.end(), "([", ")]") - 1]))
        if re.search(r"(?<![\w.])2\*|\*2(?![\w.])|<<1(?!\d)", idx):
            out.add(1 if re.search(r"\+1(?![\w.])", idx) else 0)
    return out


def _quotients(text: str) -> list[tuple[str, str]]:
    """The (numerator, denominator) operands of every division ``a / b`` in ``text`` (each an identifier, a literal,
    an indexed or called name, or a bracketed group)."""
    out = []
    for m in re.finditer(r"(?<![/*])/(?![/=*])", text):
        i = m.start() - 1
        while i >= 0 and text[i].isspace():
            i -= 1
        end = i + 1
        while i >= 0:
            if text[i] in ")]":
                depth = 0
                while i >= 0:
                    depth += text[i] in ")]"
                    depth -= text[i] in "(["
                    i -= 1
                    if depth == 0:
                        break
            elif re.match(r"[\w.]", text[i]):
                i -= 1
            else:
                break
        j = m.end()
        while j < len(text) and text[j].isspace():
            j += 1
        start = j
        while j < len(text):
            if text[j] in "([":
                j = closing(text, j + 1, "([", ")]")
            elif re.match(r"[\w.]", text[j]):
                j += 1
            else:
                break
        num, den = text[i + 1:end].strip(), text[start:j].strip()
        if num and den:
            out.append((num, den))
    return out


def _ftz(ev: Evidence, args: list[str]) -> tuple[int, str, float] | None:
    """The flush of small weights to zero where the body compares an exponential's argument with a negative
    constant (ggml's ``diff > SOFTMAX_FTZ_THRESHOLD``): (KT_EXPERT_NWAY_FTZ, the threshold as C float text, its
    value). A test true for the larger differences keeps the weight where it holds (``diff > C``: 1, ``diff >= C``:
    2; a NaN difference flushed), one true for the smaller flushes it (``diff <= C``: 3, ``diff < C``: 4; a NaN
    kept). None where there is no such comparison."""
    text = uncast(ev.body)
    operand = r"\(?\s*[-+]?\s*[A-Za-z_0-9.]+\s*\)?"
    form = {">": 1, ">=": 2, "<=": 3, "<": 4}
    mirror = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
    for a in dict.fromkeys(re.sub(r"\s+", " ", uncast(x).strip()) for x in args if x.strip()):
        pat = re.escape(a).replace(r"\ ", r"\s*")
        for m in re.finditer(rf"(?<![\w.])(?:{pat})\s*(>=|<=|>|<)(?!=)\s*({operand})", text):
            op, c = m.group(1), m.group(2)
            got = const_value(c.strip().strip("()").replace(" ", ""), ev)
            if got is not None and got[1] < 0:
                return form[op], got[0], got[1]
        for m in re.finditer(rf"({operand})\s*(>=|<=|>|<)(?!=)\s*(?:{pat})(?![\w.(\[])", text):
            c, op = m.group(1), m.group(2)
            got = const_value(c.strip().strip("()").replace(" ", ""), ev)
            if got is not None and got[1] < 0:  # C < diff is diff > C
                return form[mirror[op]], got[0], got[1]
    return None


def _written_from(body: str, pieces: list[tuple[str, str]], name: str) -> set[str]:
    """``name`` and the locals the body points into it (``dst = out + row * D``, even where ``dst[i] = ...`` later
    writes through it): the names through which the output is written."""
    out = set(pointer_aliases(body, name))
    for target, value in pieces:
        if (1, name) in additive_terms(unparen(value)):
            out.add(target)
    return out


def _exp_scale(ev: Evidence, exps: list[str]):
    """The float argument every exponential's argument is multiplied by, as written or through the locals it is
    computed from (TurboMind's ``exp2f((m - M) * exp_scale)``), or None."""
    pieces = assignments(uncast(ev.body))
    found = []
    for a in ev.floats():
        n = re.escape(a.name)
        if all(re.search(rf"\*\s*\(?\s*{n}\b|\b{n}\s*\)?\s*\*", _closure(pieces, x)) for x in exps):
            found.append(a)
    return found[0] if len(found) == 1 else None


def _state_parts(ev: Evidence, bound: str) -> int | None:
    """P where a loop over the states that ``bound`` bounds starts at an index of the thread's own (a warp's, read
    from threadIdx) and steps by a number P > 1 (a literal, a file constant or a value template argument): the states
    taken P apart by P warps (TurboMind's ``for (k = warp_id; k < split_cnt; k += WarpCnt)``), each with a partial
    sum of its own; None where no loop does."""
    flow = flows(ev.body, declarators=True)
    targs = list(ev.spec.template_args or [])
    values = {tp.name: a.strip() for tp, a in zip(ev.kernel.template_params, targs) if tp.kind != "type"}
    for init, cond, incr in loop_headers(ev.body):
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*\+=\s*([A-Za-z_]\w*|\d+)\s*", incr)
        # the loop variable's start: its init-statement's value, or (declared before the loop) what feeds it
        start = init.split("=", 1)[1] if "=" in init else (m.group(1) if m is not None else "")
        if m is None or bound not in feeding(flow, cond) or "threadIdx" not in feeding(flow, start):
            continue
        step = number(values.get(m.group(2), m.group(2)), ev.constants)
        if step is not None and float(step).is_integer() and step > 1:
            return int(step)
    return None


def _null_count(ev: Evidence, name: str) -> tuple[str | None, str]:
    """The number of states a row merges where the count buffer ``name`` is a null pointer, as the body writes it
    (``cnt != nullptr ? cnt[q] : 1``, ``cnt ? cnt[q] : max_splits``, ``cnt == nullptr ? 1 : cnt[q]``: a literal or
    an int argument): (C, words); where the body never tests it, None (every state: the original reads it, a null
    pointer is no input it takes)."""
    text = re.sub(r"\s+", "", uncast(ev.body))
    n, null, val = re.escape(name), r"(?:nullptr|NULL|0)", r"\(?(-?\d+|[A-Za-z_]\w*)\)?"
    ints = {a.name for a in ev.ints()}
    for pat in (rf"\(?{n}!={null}\)?\?[^:;?]*:{val}(?![\w.\[(])", rf"\(?{null}!={n}\)?\?[^:;?]*:{val}(?![\w.\[(])",
                rf"\(?{n}=={null}\)?\?{val}:", rf"\(?{null}=={n}\)?\?{val}:", rf"!\(?{n}\)?\?{val}:",
                rf"(?<![\w.])(?<![!=<>]=)\(?{n}\)?\?[^:;?]*:{val}(?![\w.\[(])"):
        m = re.search(pat, text)
        if m and (m.group(1)[0] in "-0123456789" or m.group(1) in ints):
            c = m.group(1) if m.group(1) not in ints else f"(int)({m.group(1)})"
            return c, f"nullptr: {m.group(1) if m.group(1) not in ints else '`' + m.group(1) + '`'}"
    return None, "no null test"


def _written_values(body: str, pieces: list[tuple[str, str]], name: str) -> list[str]:
    """The values the body writes to the buffer ``name``: assigned through it or a local pointed into it
    (``_written_from``), or through a cast of an address in it (``*reinterpret_cast<V*>(out + i) = v``)."""
    wide = _written_from(body, pieces, name)
    out = [v for t, v in pieces if t in wide]
    for target, at, stmt in statements(body):
        if at > 0 and target not in wide and stmt[at - 1] not in "+-*/%&|^<>!=" and \
                set(re.findall(r"\b[A-Za-z_]\w*\b", stmt[:at])) & wide:
            out.append(stmt[at + 1:])
    return out


def _ml_metas(ev: Evidence, vin, ov, metas: list, sets_counts: tuple, scaled: bool = False):
    """The (m, l) metas of an unnormalized N-way merge, read from what the body computes: the max is what an
    exponential's argument is computed from (the pair's float, or the array), the sum the other; each value is
    multiplied by weights the sums do not feed (the values are unnormalized), and the output is a quotient whose
    denominator the sums feed. With ``scaled`` (the expert has KT_EXPERT_NWAY_ML_NORM), where the output is no such
    quotient: each state's scale a quotient of its weight (an exponential of its max, neither the values nor the sums
    feeding it) over a sum the sums feed, the values multiplied by that scale (TurboMind's s_scale). Returns
    (KT_EXPERT_NWAY_ML, m call argument, l call argument, words, exp arguments, KT_EXPERT_NWAY_ML_NORM) or None."""
    body = uncast(ev.body)
    pieces = assignments(body)
    flow = flows(ev.body, declarators=True)
    exps = [args[0] for _, args in call_arguments(ev.body, EXP_CALL) if args]
    if not exps:
        return None
    # the value the output is written from, and its quotients
    outs = set(pointer_aliases(body, ov.name))
    written = [_closure(pieces, v) for t, v in pieces if t in outs]
    quots = [q for w in written for q in _quotients(w)]
    # the scaled form: the quotients of what the output is written from, through a local pointed into it too
    squots = [q for v in _written_values(body, pieces, ov.name) for q in _quotients(_closure(pieces, v))] \
        if scaled else []

    def weight(text: str) -> bool:  # an exponential's value, the values not feeding it
        return vin.name not in feeding(flow, text) and re.search(rf"\b{EXP_CALL}\s*\(", _closure(pieces, text)) \
            is not None
    if len(metas) == 1:  # pairs: which float of the pair the exponentials take
        meta = metas[0]
        param = next((p for p in ev.kernel.params if p.name == meta.name), None)
        fed = {meta.name} | {n for n, src in flow.items() if meta.name in src}
        under = set()
        for a in exps:
            under |= _pair_reads(_closure(pieces, a), fed)
        if len(under) != 1:
            return None
        mi = next(iter(under))
        paired = (param is not None and re.search(r"\bfloat2\b", param.type)) or \
            _pair_reads(body, fed) == {0, 1}
        if not paired:
            return None
        ok = any(vin.name in feeding(flow, n) and 1 - mi not in _pair_reads(_closure(pieces, n), fed)
                 and 1 - mi in _pair_reads(_closure(pieces, d), fed) for n, d in quots)
        norm = 0
        if not ok and any(weight(n) and _pair_reads(_closure(pieces, n), fed) == {mi} and vin.name not in
                          feeding(flow, d) and 1 - mi in _pair_reads(_closure(pieces, d), fed) for n, d in squots):
            ok, norm = True, 1
        if not ok:
            return None
        base = f"(const float*)({meta.name})"
        return (1, base if mi == 0 else f"{base} + 1", f"{base} + 1" if mi == 0 else base,
                [f"m=.{'xy'[mi]}, l=.{'xy'[1 - mi]} of {meta.name}'s pairs"], exps, norm)
    under = [a for a in metas if any(a.name in feeding(flow, x) for x in exps)]
    if len(under) != 1:
        return None
    m = under[0]
    l = next(a for a in metas if a is not m)
    ok = any(vin.name in feeding(flow, n) and l.name not in feeding(flow, n) and l.name in feeding(flow, d)
             for n, d in quots)
    norm = 0
    if not ok and any(weight(n) and m.name in feeding(flow, n) and l.name not in feeding(flow, n)
                      and vin.name not in feeding(flow, d) and l.name in feeding(flow, d) for n, d in squots):
        ok, norm = True, 1
    if not ok:
        return None
    return 2, f"(const float*)({m.name})", f"(const float*)({l.name})", [f"m={m.name}, l={l.name}"], exps, norm


def _nway_ml_bindings(ev: Evidence, e, vin, lins: list, ov) -> list[Binding]:
    """An N-way merge of UNNORMALIZED partial values with their (max, sum) metas (llama.cpp's
    flash_attn_combine_results and its float2 VKQ_meta; split-KV decode combines that keep the accumulator
    unnormalized): out = sum_k w_k v_k / sum_k w_k l_k with w_k = e^(m_k - max). The metas either one fp32 input of
    two floats a state (pairs) or two fp32 inputs of one each; the state count an int argument (else a number the
    same on every size set) bounding a loop of the body; the states' layout from how far an index moves from one
    state to the next (the metas', else the values' over the head size); the rows from the arguments, else from the
    expert's own launch (KT_EXPERT_NWAY_ROWS_FROM_LAUNCH).

    TurboMind's split-K reduce (its conventions read where the body shows them): a count of states per token
    (KT_EXPERT_NWAY_ML_COUNT: one integer input of one entry a token whose read bounds the loops over the states,
    nullable where the body tests it: the number it takes then; the int argument of the state count is their stride),
    each state's scale its weight over the weighted sum of the sums (KT_EXPERT_NWAY_ML_NORM, ``_ml_metas``), and the
    weight's exponent scaled by a float argument (KT_EXPERT_NWAY_ML_ESCALE: a float argument every exponential's
    argument is multiplied by, TurboMind's exp_scale of raw-score maxima)."""
    if "KT_EXPERT_NWAY_ML" not in e.conventions or ov.dtype not in FLOATS or vin.dtype not in FLOATS:
        return []
    cnt = None  # a count of states per token
    ibufs = [a for a in lins if a.dtype in INTS]
    if ibufs:
        if len(ibufs) != 1 or "KT_EXPERT_NWAY_ML_COUNT" not in e.conventions or not ibufs[0].counts \
                or not _set_loops(ev, ibufs[0].name):
            return []
        cnt = ibufs[0]
        lins = [a for a in lins if a is not cnt]
    if not all(a.dtype == "f32" and a.counts for a in lins) or len(lins) not in (1, 2):
        return []
    if len(lins) == 2 and lins[0].counts != lins[1].counts:
        return []
    n = div(vin.counts, ov.counts)
    if n is None:
        return []
    per = 2 if len(lins) == 1 else 1  # floats a state
    rows = div(lins[0].counts, tuple(per * x for x in n))
    if rows is None or prod(n, rows, tuple(per for _ in n)) != lins[0].counts or div(ov.counts, rows) is None:
        return []
    read = _ml_metas(ev, vin, ov, lins, n, "KT_EXPERT_NWAY_ML_NORM" in e.conventions)
    if read is None:
        return []
    ml, mc, lc, mwords, exps, norm = read
    counts = []  # the state count and the variables of the loops it bounds
    if cnt is None:
        for a in ev.ints():
            if a.counts == n and _set_loops(ev, a.name):
                counts.append((SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`"),
                               _set_loops(ev, a.name), (a.name,)))
        if not counts and len(set(n)) == 1 and _set_loops(ev, n[0]):
            counts.append((SizeExpr(str(n[0]), str(n[0]), f"the constant {n[0]}"), _set_loops(ev, n[0]), ()))
    else:  # the count bounds the loops; the int argument of the state count (else the number) is their stride
        held = [a for a in ev.ints() if a.counts == n]
        if held:
            counts.append((SizeExpr(f"(int)({held[0].name})", str(held[0].spec.value), f"`{held[0].name}`"),
                           _set_loops(ev, cnt.name), (held[0].name,)))
        elif len(set(n)) == 1:
            counts.append((SizeExpr(str(n[0]), str(n[0]), f"the constant {n[0]}"), _set_loops(ev, cnt.name), ()))
    if not counts:
        return []
    sets, loop_vars, exclude = counts[0]
    escale = _exp_scale(ev, exps) if "KT_EXPERT_NWAY_ML_ESCALE" in e.conventions else None
    null = _null_count(ev, cnt.name) if cnt is not None else None
    parts = None  # a scaled sum taken in P partial sums, P apart (TurboMind's warps), added by a halving tree
    if norm and "KT_EXPERT_NWAY_ML_PARTS" in e.conventions:
        parts = _state_parts(ev, cnt.name if cnt is not None else exclude[0] if exclude else "")
        if parts is not None and (parts & (parts - 1) or parts not in e.params["ITEMS"].values):
            parts = None
    rows_size = f"({lins[0].spec.size}) / (2 * ({sets.spec}))" if per == 2 else f"({lins[0].spec.size}) / ({sets.spec})"
    found = _tokens_heads(ev, ov.counts, rows, None, exclude, rows_size)
    hs_all = [x for x in ev.sizes(div(ov.counts, rows), exclude) if not x.c[0].isdigit()] or \
        ev.sizes(div(ov.counts, rows), exclude)
    if not hs_all:
        return []
    from_launch = 0
    if cnt is not None:  # one count a token: the tokens are the count's length (read from the arguments)
        if found is None or found[2]:
            return []
        found = (found[0], [(t, h) for t, h in found[1] if counts_of(t.spec, ev.spec) == cnt.counts], 0)
        if not found[1]:
            return []
    if found is None or found[2]:  # no row count among the arguments: the rows from the expert's launch
        if "KT_EXPERT_NWAY_ROWS_FROM_LAUNCH" not in e.conventions:
            return []
        heads = [h for _, h in found[1]] if found is not None else [SizeExpr("1", "1", "1 (the rows flat)")]
        tok_of = lambda h: SizeExpr("0", f"({rows_size}) / ({h.spec})", "the launch")  # noqa: E731
        found = (found[0] if found is not None else hs_all[0], [(tok_of(h), h) for h in heads], 0)
        from_launch = 1
    hs, pairs, _ = found
    # the layout: how far a meta index moves from one state to the next, else a values index over the head size
    hsv = div(ov.counts, rows)
    targs = {tp.name: int(v) for tp, a in zip(ev.kernel.template_params, list(ev.spec.template_args or []))
             if tp.kind != "type" and (v := number(a.strip(), ev.constants)) is not None and float(v).is_integer()}
    stride = None
    for var in loop_vars:  # the first loop over the states whose indices step with it
        for a in lins:
            st = index_stride(ev, a.name, var)
            if st is not None and any(st) and div(st, tuple(per for _ in st)) is not None:
                stride = div(st, tuple(per for _ in st))
                break
        if stride is None:
            st = index_stride(ev, vin.name, var, known=targs, stepping=True)
            if st is not None and any(st) and div(st, hsv) is not None:
                stride = div(st, hsv)
        if stride is not None:
            break
    T, O = vin.dtype, ov.dtype
    ftz = _ftz(ev, exps)
    forms = _exp_forms(ev)
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = tok.words.strip("`"), heads.words.strip("`")
        hcounts = counts_of(heads.spec, ev.spec)
        layouts = [3, 1, 2] if not stride else \
            [k for k, want in ((1, hcounts), (2, rows), (3, tuple(1 for _ in rows))) if stride == want]
        if heads.c == "1":  # one head a token: [tokens, sets, heads] is [tokens, heads, sets]
            layouts = list(dict.fromkeys(3 if k == 1 else k for k in layouts))
        for layout in layouts:
            if layout == 3 and pi > 0 and not from_launch:
                continue  # [tokens, heads, sets]: the rows in either order are the same rows
            for base2, via in forms:
                b = Binding(e, 0.9, f"one values input of {sets.words} unnormalized states a row, their running "
                            f"maxima and row sums ({mwords[0]}), weights e^(m - max) of the values, the output "
                            "divided by the weighted sums → merge attention states (N-way, unnormalized parts)",
                            ev.kernel.name)
                b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
                b.defines = {}
                b.conventions = {"KT_EXPERT_NWAY": layout, "KT_EXPERT_NWAY_ML": ml, "KT_EXPERT_LSE_BASE2": base2,
                                 "KT_EXPERT_EXP2_LOG2E": via}
                if ftz is not None:
                    b.conventions["KT_EXPERT_NWAY_FTZ"] = ftz[0]
                if from_launch:
                    b.conventions["KT_EXPERT_NWAY_ROWS_FROM_LAUNCH"] = 1
                b.template_args = [CTYPE[T], CTYPE[O]]
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
                b.call_args = [_cast(O, ov.name, False), _cast(T, vin.name, True), mc, lc, sets.c, tok.c, heads.c,
                               hs.c, ftz[1] if ftz is not None else "0.f"]
                if norm or escale is not None or cnt is not None:  # TurboMind's conventions: three more arguments
                    for name, on in (("KT_EXPERT_NWAY_ML_NORM", norm), ("KT_EXPERT_NWAY_ML_ESCALE", escale),
                                     ("KT_EXPERT_NWAY_ML_COUNT", cnt)):
                        if on:
                            b.conventions[name] = 1
                    if parts:  # one partial sum a state of a step: ITEMS states a step
                        b.conventions["KT_EXPERT_NWAY_ML_PARTS"] = parts
                        b.fixed["ITEMS"] = [parts]
                    C = CTYPE[cnt.dtype] if cnt is not None else "int"
                    b.template_args.append(C)
                    b.call_args += [f"(float)({escale.name})" if escale is not None else "1.f",
                                    _cast(cnt.dtype, cnt.name, True) if cnt is not None else f"(const {C}*)nullptr",
                                    null[0] if null is not None and null[0] is not None else sets.c]
                names = {"tokens": tname, "heads": hname, "sets": sets.c if sets.c.isdigit() else sets.words.strip("`")}
                if heads.c == "1":  # the rows flat: [rows, sets] or [sets, rows]
                    names.update(tokens="rows", heads="heads")
                lay = re.sub(r"\w+", lambda mo: names.get(mo.group(0), mo.group(0)), NWAY_LAYOUTS[layout])
                if heads.c == "1":
                    lay = lay.replace(", heads]", "]").replace("[rows, heads, ", "[rows, ")
                exp = ("base-2 m, exp2f(m - max)" if base2 else
                       "natural m, exp2f((m - max) * log2e)" if via else "natural m, expf(m - max)")
                b.words = [f"out={ov.name}" + (f" ({O}, the values {T})" if O != T else ""),
                           f"v={vin.name} (unnormalized)", *mwords, f"sets={sets.words}",
                           *([f"rows={tok.words} (no row count among the arguments)"] if heads.c == "1" else
                             [f"tokens={tok.words}", f"heads={heads.words}"]),
                           f"head_size={hs.words}", f"states {lay[:-1]}, head_size]", exp,
                           f"weights flushed to 0 where m - max {('<=', '<')[ftz[0] % 2 == 0]} {ftz[1]}"
                           + ("" if ftz[0] <= 2 else " (a NaN difference kept)") if ftz is not None else "no flush",
                           "out = sum (w / L) v, L = sum w l (a scale a state)" if norm else "out = sum w v / sum w l"]
                if parts:
                    b.words.append(f"the states in {parts} partial sums (state k in sum k % {parts}), added by a "
                                   "halving tree")
                if escale is not None:
                    b.words.insert(b.words.index(exp) + 1, f"the exponent (m - max) * `{escale.name}`")
                if cnt is not None:
                    b.words.insert(b.words.index(f"sets={sets.words}") + 1,
                                   f"token t's states the first `{cnt.name}`[t] (at most sets; {null[1]})")
                b.support = 100 - len(out)
                out.append(b)
    return out



# ------------------------------------------------------------------------- N-way, folded in the values' own type
# the 16-bit types a type name of the kernel may stand for (its instantiation's, or written)
_HALF_NAMES = {"f16": ("__half", "half", "nv_half", "c10::Half", "at::Half"),
               "bf16": ("__nv_bfloat16", "nv_bfloat16", "c10::BFloat16", "at::BFloat16")}
# the conversions of a float to a 16-bit type that round to nearest, as a kernel writes them
_RN_CALLS = {"__float2bfloat16": "bf16", "__float2bfloat16_rn": "bf16", "__float2half": "f16", "__float2half_rn": "f16"}
_INFINITE = {"INFINITY": float("inf"), "HUGE_VALF": float("inf"), "CUDART_INF_F": float("inf"),
             "std::numeric_limits<float>::infinity()": float("inf"),
             "FLT_MAX": 3.4028234663852886e38, "std::numeric_limits<float>::max()": 3.4028234663852886e38}


def _dtype_of(ev: Evidence, name: str) -> str | None:
    """The dtype a type name of the kernel stands for (a type template parameter as the instantiation gives it)."""
    t = re.sub(r"\s+", "", name).removeprefix("const")
    t = re.sub(r"\s+", "", instance_types(ev).get(t, t))
    for dt, names in _HALF_NAMES.items():
        if t in names:
            return dt
    return "f32" if t == "float" else None


def _rounded_to(ev: Evidence, text: str) -> tuple[str, str] | None:
    """(dtype, the converted expression) where ``text`` is a whole conversion of a float to a 16-bit type that rounds
    to nearest: ``static_cast<T>(x)``, ``T(x)``, ``(T)x``, ``__float2bfloat16(x)``, ``__float2half_rn(x)``."""
    t = text.strip()
    m = re.match(r"static_cast\s*<\s*([\w:\s]+?)\s*>\s*\(", t) or re.match(r"([A-Za-z_][\w:]*)\s*\(", t)
    if m is not None:
        if closing(t, m.end()) != len(t):
            return None  # `f(a) + g(b)`: no one call
        ty, inner = m.group(1), t[m.end():-1]
    else:
        m = re.fullmatch(r"\(\s*([A-Za-z_][\w:]*)\s*\)\s*(.+)", t, re.S)
        if m is None:
            return None
        ty, inner = m.group(1), m.group(2)
    dt = _RN_CALLS.get(ty.strip()) or _dtype_of(ev, ty)
    return (dt, inner.strip()) if dt in _HALF_NAMES else None


def _top_split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def _two_products(value: str, intrinsics: bool) -> list[list[str]] | None:
    """The factors of ``a * b + c * d`` (two products added, as written: the first product first), or with
    ``intrinsics`` of ``__hadd(__hmul(a, b), __hmul(c, d))`` (the same operations: what T's operators call)."""
    v = unparen(value.strip())
    if intrinsics:
        m = re.fullmatch(r"__hadd\s*\((.*)\)", v, re.S)
        if m and closing(v, v.index("(") + 1) == len(v):
            args = _top_split(m.group(1), ",")
            out = []
            for a in args:
                k = re.fullmatch(r"\s*__hmul\s*\((.*)\)\s*", a, re.S)
                if k is None:
                    break
                out.append([x.strip() for x in _top_split(k.group(1), ",")])
            if len(args) == 2 and len(out) == 2 and all(len(f) == 2 for f in out):
                return out
    terms = additive_terms(v)
    if len(terms) != 2 or any(sign < 0 for sign, _ in terms):
        return None
    out = [[x.strip() for x in _top_split(t, "*")] for _, t in terms]
    return out if all(len(f) == 2 and all(f) for f in out) else None


def _is(name: str, text: str) -> bool:
    """``text`` is ``name`` or an element or member of it (``acc[j]``, ``acc.v[j]``)."""
    return re.fullmatch(rf"\(?\s*{re.escape(name)}\s*(?:\[[^\]]*\]|\.\s*\w+)*\s*\)?", text.strip()) is not None


def _norm_expr(text: str) -> str:
    return re.sub(r"\s+", "", unparen(text.strip()))


def _float_starts(ev: Evidence, names: set[str]) -> list[tuple[str, str]]:
    """The constant a running value starts at: the constant assignments to ``names`` that hold for the kernel's
    instantiation (those under ``if constexpr (std::is_same<T, X>::value)`` whose T is not X left out; the last
    that holds first, those whose condition cannot be read after it): [(C float text, as written)]."""
    body = ev.body
    held, unknown = [], []
    for n in sorted(names):
        for m in re.finditer(rf"(?<![\w.>]){re.escape(n)}\s*=(?!=)\s*([^;,{{}}]+?)\s*[;,]", body):
            c = _float_const(ev, m.group(1))
            if c is None:
                continue
            truth = _constexpr_truth(ev, body, m.start())
            if truth is False:
                continue
            (held if truth else unknown).append((m.start(), c, m.group(1).strip()))
    held.sort()
    return [(c, w) for _, c, w in held[::-1][:1] + sorted(unknown)]


def _float_const(ev: Evidence, text: str) -> str | None:
    """A float constant as C text (``-3.0e+30f``, ``-INFINITY``, ``-FLT_MAX``, a name the file sets to a number)."""
    t = re.sub(r"\s+", "", text)
    t = re.sub(r"^\(float\)|^static_cast<float>", "", t)
    t = unparen(t)
    sign = "-" if t.startswith("-") else ""
    bare = t.lstrip("-+")
    if bare in _INFINITE:
        return f"{sign}INFINITY" if _INFINITE[bare] == float("inf") else f"{sign}3.40282346638528859812e+38f"
    got = const_value(t, ev)
    return f"(float)({got[0]})" if got is not None else None


def _angle_args(text: str, start: int) -> tuple[list[str], int] | None:
    """The comma-separated arguments of the ``<...>`` opened just before ``start``, and the index past its ``>``."""
    depth, cur, out = 1, "", []
    for i in range(start, len(text)):
        ch = text[i]
        depth += ch in "<(["
        depth -= ch in ">)]"
        if depth == 0:
            return out + [cur.strip()], i + 1
        if ch == "," and depth == 1:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return None


def _is_same(ev: Evidence, cond: str) -> bool | None:
    """The value of ``std::is_same<A, B>::value`` (``std::is_same_v<A, B>``, negated with ``!``) for the kernel's
    instantiation; None where it is no such test or a side is not known."""
    c = cond.strip()
    neg = False
    while c.startswith("!"):
        neg, c = not neg, unparen(c[1:].strip())
    m = re.match(r"(?:std\s*::\s*)?is_same(_v)?\s*<", c)
    got = _angle_args(c, m.end()) if m else None
    if got is None or len(got[0]) != 2:
        return None
    rest = re.sub(r"\s+", "", c[got[1]:])
    if rest not in (("",) if m.group(1) else ("::value", "{}", "()", "{}()", "()()")):
        return None
    a, b = (_dtype_of(ev, x) for x in got[0])
    if a is None or b is None:
        return None
    return (a == b) != neg


def _constexpr_truth(ev: Evidence, body: str, pos: int) -> bool | None:
    """Whether the code at ``pos`` is compiled for the kernel's instantiation as far as the ``if constexpr`` chains
    around it tell (an ``else`` block where every test before it is false): True, False, or None where a test
    cannot be read."""
    truth: bool | None = True
    for m in re.finditer(r"\bif\s+constexpr\s*\(", body):
        if re.search(r"\belse\s*$", body[:m.start()]):
            continue  # read as part of its chain
        tests: list[bool | None] = []
        at = m.start()
        while True:
            k = re.compile(r"\bif\s+constexpr\s*\(").match(body, at)
            if k is None:
                break
            c_end = closing(body, k.end())
            tests.append(_is_same(ev, body[k.end():c_end - 1]))
            b = re.compile(r"\s*\{").match(body, c_end)
            if b is None:
                return None
            b_end = closing(body, b.end(), "{", "}")
            if b.end() <= pos < b_end:
                here = tests[-1] if all(t is False for t in tests[:-1]) else \
                    (False if any(t is True for t in tests[:-1]) else None)
                truth = False if here is False or truth is False else (None if here is None or truth is None else True)
                break
            e = re.compile(r"\s*else\s*").match(body, b_end)
            if e is None:
                break
            at = e.end()
            if re.compile(r"\{").match(body, at):
                e_end = closing(body, at + 1, "{", "}")
                if at < pos < e_end:
                    here = False if any(t is True for t in tests) else (True if all(t is False for t in tests) else None)
                    truth = False if here is False or truth is False else (None if here is None or truth is None else True)
                break
    return truth


def _fold_reading(ev: Evidence, vin, arrays: list, T: str):
    """The fold of a kernel whose values' running sum is kept in their own 16-bit type (PaddleNLP's
    merge_multi_chunks), read from what the body computes: the maxima (the array under the exponentials), the sums
    (the other), a running max (a local set to a max the maxima feed), the accumulator updated as ``o * T(s1) + v *
    T(s2)`` (T's operators, or ``__hadd(__hmul(..), __hmul(..))``, the running one first; each scale a conversion of
    an exponential to T that rounds to nearest, s1 of the previous max less the new, s2 of the state's), declared of
    a 16-bit type that is T, the running sum ``d * s1 + d_k * s2`` (fp32, the running one first, the same s1 and s2),
    the accumulator divided by it (T's division: by the sum, or by its conversion to T), and the constants both
    running values start at. None where the body shows anything else (another order of the terms, a fused
    ``__hfma``, the values widened to fp32: other rounding points). (maxima, sums, m0 alternatives, d0)."""
    body = ev.body
    pieces = assignments(body)
    flow = flows(body, declarators=True)
    values: dict[str, list[str]] = {}
    for t, v in pieces:
        values.setdefault(t, []).append(v)

    def one(name: str) -> str:  # a local's one value, else the text itself
        got = values.get(name.strip(), [])
        return got[0] if len(got) == 1 and re.fullmatch(r"\s*[A-Za-z_]\w*\s*", name) else name
    exps = [args[0] for _, args in call_arguments(body, EXP_CALL) if args]
    under = [a for a in arrays if any(a.name in feeding(flow, x) for x in exps)]
    if len(under) != 1:
        return None
    mx = under[0]
    sm = next(a for a in arrays if a is not mx)
    maxes = {t for t, v in pieces if re.fullmatch(r"\s*(?:std::|::)?(?:fmaxf|fmax|max)\s*\(.*\)\s*", v, re.S)
             and mx.name in feeding(flow, v)}
    held = maxes | {t for t, v in pieces if v.strip() in maxes}  # the running max and its copies
    if not maxes:
        return None

    def exp_of(text: str) -> tuple[str, str] | None:  # (a, b) of an exponential of a - b
        calls = call_arguments(one(text), EXP_CALL)
        if len(calls) != 1 or not calls[0][1] or _norm_expr(one(text)) != _norm_expr(
                f"{calls[0][0]}({calls[0][1][0]})"):
            return None
        terms = additive_terms(unparen(calls[0][1][0].strip()))
        if len(terms) != 2 or terms[0][0] < 0 or terms[1][0] > 0:
            return None
        return terms[0][1].strip(), terms[1][1].strip()
    acc = None
    for t, v in pieces:
        prods = _two_products(v, True)
        if prods is None or not any(_is(t, f) for f in prods[0]):
            continue
        s1 = next(f for f in prods[0] if not _is(t, f))
        x = [f for f in prods[1] if vin.name in feeding(flow, f)]
        if len(x) != 1:
            continue
        s2 = next(f for f in prods[1] if f is not x[0])
        r1, r2 = _rounded_to(ev, one(s1)), _rounded_to(ev, one(s2))
        if r1 is None or r2 is None or r1[0] != T or r2[0] != T:
            continue
        e1, e2 = exp_of(r1[1]), exp_of(r2[1])
        if e1 is None or e2 is None or e1[1] != e2[1] or not (e1[0] in held and e1[1] in held) \
                or e2[0] in held or mx.name not in feeding(flow, e2[0]) or e2[1] not in held:
            continue
        acc = (t, r1[1], r2[1])
        break
    if acc is None:
        return None
    o, i1, i2 = acc
    decl = declared_type(body, o)
    if decl is None or not any(_dtype_of(ev, w) == T for w in re.findall(r"[A-Za-z_][\w:]*", decl)) \
            or re.search(r"\b(?:float|double)\b", decl):
        return None
    d = None
    for t, v in pieces:
        prods = _two_products(v, False)
        if prods is None or t == o or not any(_is(t, f) for f in prods[0]):
            continue
        f1 = next(f for f in prods[0] if not _is(t, f))
        if _norm_expr(f1) != _norm_expr(i1) or not any(_norm_expr(f) == _norm_expr(i2) for f in prods[1]):
            continue
        dk = next((f for f in prods[1] if _norm_expr(f) != _norm_expr(i2)), prods[1][0])
        if sm.name in feeding(flow, dk) and mx.name not in feeding(flow, dk):
            d = t
            break
    if d is None:
        return None
    # out = o / T(d): a division of the accumulator by the running sum (T's: by the sum itself or its conversion)
    den = [m.group(1) for m in re.finditer(rf"(?<![\w.]){re.escape(o)}\s*(?:\[[^\]]*\]|\.\s*\w+)*\s*/=\s*([^;]+);", body)]
    den += [q for n, q in _quotients(body) if _is(o, n)]
    den += [a[1] for _, a in call_arguments(body, r"__hdiv") if len(a) == 2 and _is(o, a[0])]
    if not den or not all(_is(d, x) or ((r := _rounded_to(ev, x)) is not None and r[0] == T and _is(d, r[1]))
                          for x in den):
        return None
    m0 = _float_starts(ev, held)
    d0 = _float_starts(ev, {d})
    if not m0 or not d0:
        return None
    return mx, sm, m0, d0[0]


def _versioned(body: str, names: set[str]) -> str:
    """``body`` with each of ``names`` (locals assigned more than once) renamed at each assignment (``offset__1``,
    ``offset__2``, ...) and at the reads that follow it, up to the next (the reads in an assignment's own value
    name the one before): the order of the text, enough for an index computed anew (PaddleNLP's ``offset`` of the
    metas, then of the values)."""
    for n in sorted(names):
        found = list(re.finditer(rf"(?<![\w.>]){re.escape(n)}\b", body))
        ends = []  # (where the assignment's value ends, the target's start)
        for m in found:
            if re.match(r"\s*=(?!=)", body[m.end():]):
                ends.append((body.find(";", m.end()), m.start()))
        if len(ends) < 2:
            continue
        out, at = [], 0
        for m in found:
            k = next((i + 1 for i, (_, s) in enumerate(ends) if s == m.start()), None)
            if k is None:
                k = sum(1 for e, _ in ends if e < m.start())
            out.append(body[at:m.start()] + (f"{n}__{k}" if k else n))
            at = m.end()
        body = "".join(out) + body[at:]
    return body


def _request_of(ev: Evidence, idx: str, once: dict[str, str], ibufs: dict[str, object], ints: set[str]):
    """How a token's request is computed where a per-request buffer is read at ``idx``: (offsets buffer or None,
    the tokens a request holds as an int argument's name or None) for ``(t + offsets[t]) / seq`` (PaddleNLP's
    padding offsets), ``t / seq`` or ``t`` (one entry a token); None for anything else."""
    text = idx
    for _ in range(8):
        new = re.sub(r"(?<![\w.>])[A-Za-z_]\w*\b(?!\s*\()",
                     lambda m: f"({once[m.group(0)]})" if m.group(0) in once and m.group(0) not in ints
                     and m.group(0) not in ibufs else m.group(0), text)
        if new == text:
            break
        text = new
    text = _norm_expr(re.sub(r"\(\s*([\w.]+)\s*\)", r"\1", text))
    for _ in range(4):
        text = re.sub(r"\(([\w.]+)\)", r"\1", text)
    parts = _top_split(unparen(text), "/")
    seq = None
    if len(parts) == 2:
        seq = unparen(parts[1])
        if seq not in ints:
            return None
        text = unparen(parts[0])
    elif len(parts) != 1:
        return None
    terms = additive_terms(text)
    if len(terms) == 1:
        return (None, seq) if re.fullmatch(r"[\w.]+", terms[0][1].strip()) else None
    if len(terms) != 2 or any(s < 0 for s, _ in terms):
        return None
    for a, b in (terms, terms[::-1]):
        m = re.fullmatch(r"([A-Za-z_]\w*)\[(.+)\]", b[1].strip())
        if m and m.group(1) in ibufs and _norm_expr(m.group(2)) == _norm_expr(a[1]):
            return ibufs[m.group(1)], seq
    return None


def _fold_requests(ev: Evidence, ibufs: list):
    """The per-request reading of a fold (PaddleNLP's merge_multi_chunks): the state count a ceiling division of a
    value read from an integer buffer (the lengths) by the keys a state covers (an int argument or a constant), the
    loops over the states bounded by it; the request of a token as that read's index shows it (``_request_of``);
    the guards: the integer buffers read at the same index and compared ``<= 0`` (or ``< 1``) in a condition whose
    statement returns (the row left as it is), nothing else read there. Every integer buffer one of those. (lens,
    split (C, argument name or None, words), loop variables, guards, offsets, seq argument) or None."""
    text = uncast(ev.body)
    bare = text
    for _ in range(4):
        bare = re.sub(r"\(\s*([A-Za-z_]\w*)\s*\)", r"\1", bare)
    once = _once(text)
    names = {a.name: a for a in ibufs}
    ints = {a.name for a in ev.ints()}

    def read_of(x: str) -> tuple[object, str] | None:  # (buffer, index) of `B[i]`, or of a local set once to it
        x = x.strip()
        for t in (x, once.get(x, "")):
            m = re.fullmatch(r"\s*\(?\s*([A-Za-z_]\w*)\s*\[(.+)\]\s*\)?\s*", t or "", re.S)
            if m and m.group(1) in names:
                return names[m.group(1)], m.group(2)
        return None
    found = None
    for form in _CEIL_FORMS[:1]:
        for m in re.finditer(form, bare):
            got = read_of(m.group("x"))
            if got is None:
                continue
            s = m.group("s")
            if s in ints:
                split = (f"(long long)({s})", s, f"`{s}`")
            else:
                v = number(s, ev.constants)
                if v is None or not float(v).is_integer() or v <= 0:
                    continue
                split = (f"(long long){int(v)}", None, f"{s} = {int(v)}" if not s.isdigit() else s)
            found = (got[0], got[1], split)
            break
        if found:
            break
    if found is None:
        return None
    lens, idx, split = found
    loops = _set_loops(ev, lens.name)
    if not loops:
        return None
    req = _request_of(ev, idx, once, names, ints)
    if req is None:
        return None
    offsets, seq = req
    key = _norm_expr(idx)
    guards = []
    for m in re.finditer(r"\bif\s*\(", text):
        c_end = closing(text, m.end())
        if not re.match(r"\s*(?:\{\s*)?return\s*;", text[c_end:]):
            continue
        cond = text[m.end():c_end - 1]
        if not any(re.search(rf"\b{re.escape(n)}\b", " ".join([cond] + [once.get(w, "") for w in
                   re.findall(r"[A-Za-z_]\w*", cond)])) for n in names):
            continue  # a bound of the row (`head >= heads`): no request's
        for part in _top_split(unparen(cond.strip()), "|"):
            part = part.strip()
            if not part:
                continue
            g = re.fullmatch(r"(.+?)\s*(<=\s*0|<\s*1)", part)
            got = read_of(g.group(1)) if g else None
            if got is None or _norm_expr(got[1]) != key:
                return None
            if got[0] not in guards:
                guards.append(got[0])
    if len(guards) > 2 or any(a is not lens and a is not offsets and a not in guards for a in ibufs):
        return None
    if any(g.dtype != lens.dtype for g in guards):
        return None
    return lens, split, loops, guards, offsets, seq


def _nway_fold_bindings(ev: Evidence, e, vin, lins: list, outs: list) -> list[Binding]:
    """An N-way fold of UNNORMALIZED partial values in their own 16-bit type with fp32 (m, d) states in two arrays
    (PaddleNLP's and FastDeploy's append-attention merge_multi_chunks): the fold as the body computes it
    (``_fold_reading``: the rounding points, the starting values), the count of a row's states from a per-request
    length and the request of a token through its padding offsets, the rows left as they are where a request's
    guard is <= 0 (``_fold_requests``); the states' layout from how far the maxima's index moves from one state to
    the next (a local index computed anew read in the order of the text), all three where the body does not tell.
    The expert folds as the kernel does (KT_EXPERT_NWAY_FOLD): every rounding the kernel's."""
    T = vin.dtype
    if T not in _HALF_NAMES or len(outs) != 1 or outs[0].dtype != T or not outs[0].counts \
            or len(ev.bufs()) != len(lins) + 2 or not all(a.counts for a in lins):
        return []
    ov = outs[0]
    arrays = [a for a in lins if a.dtype == "f32"]
    ibufs = [a for a in lins if a.dtype in INTS]
    if len(arrays) != 2 or len(arrays) + len(ibufs) != len(lins) or arrays[0].counts != arrays[1].counts:
        return []
    n = div(vin.counts, ov.counts)
    rows = div(arrays[0].counts, n) if n is not None else None
    if rows is None or prod(n, rows) != arrays[0].counts or div(ov.counts, rows) is None:
        return []
    fold = _fold_reading(ev, vin, arrays, T)
    if fold is None:
        return []
    mx, sm, m0s, d0 = fold
    held = [a for a in ev.ints() if a.counts == n]
    sets = SizeExpr(f"(int)({held[0].name})", str(held[0].spec.value), f"`{held[0].name}`") if held else \
        SizeExpr(str(n[0]), str(n[0]), f"the constant {n[0]}") if len(set(n)) == 1 else None
    if sets is None:
        return []
    exclude = (held[0].name,) if held else ()
    lens = split = offsets = seq = None
    guards: list = []
    if ibufs:
        req = _fold_requests(ev, ibufs)
        if req is None:
            return []
        lens, split, loops, guards, offsets, seq = req
        exclude += tuple(x for x in (split[1], seq) if x)
    else:  # every row folds `sets` states: the count bounds the loop
        loops = _set_loops(ev, held[0].name if held else n[0])
        if not loops:
            return []
    rows_size = f"({arrays[0].spec.size}) / ({sets.spec})"
    found = _tokens_heads(ev, ov.counts, rows, None, exclude, rows_size)
    if found is None:
        return []
    hs, pairs, _ = found
    # the layout: how far the maxima's index moves from one state to the next (an index local computed anew, as
    # PaddleNLP's `offset` of the metas and then of the values, read in the order of the text)
    text = uncast(ev.body)
    counted: dict[str, int] = {}
    for t, _ in assignments(text):
        counted[t] = counted.get(t, 0) + 1
    indices = set()  # the names the states' indices are made of
    for a in (mx, sm, vin):
        for m in re.finditer(rf"(?<![\w.>]){re.escape(a.name)}\s*\[", text):
            indices |= set(re.findall(r"[A-Za-z_]\w*", text[m.end():closing(text, m.end(), "([", ")]")]))
    again = {t for t, c in counted.items() if c > 1 and t in indices} - modified(text)
    view = dataclasses.replace(ev, body=_versioned(ev.body, again))
    stride = None
    for var in loops:  # the maxima indexed, or a local pointer to the row's maxima (`ms = m + row * sets; ms[s]`)
        got = {index_stride(view, x, var) for x in pointer_aliases(uncast(view.body), mx.name)}
        got = {st for st in got if st is not None and any(st)}
        if len(got) == 1:
            stride = got.pop()
            break
    T_c, L = CTYPE[T], CTYPE[lens.dtype] if lens is not None else "int"
    P = CTYPE[offsets.dtype] if offsets is not None else "int"
    forms = _exp_forms(ev)
    out = []
    for tok, heads in pairs:
        tname, hname = tok.words.strip("`") if tok.c != "(int)gridDim.x" else "tokens", heads.words.strip("`")
        hcounts = counts_of(heads.spec, ev.spec)
        layouts = [1, 2, 3] if not stride else \
            [k for k, want in ((1, hcounts), (2, rows), (3, tuple(1 for _ in rows))) if stride == want]
        for layout in layouts:
            for base2, via in forms:
                for m0, m0w in m0s:
                    b = Binding(e, 0.9, f"one {T} values input of {sets.words} unnormalized states a row and two fp32 "
                                f"arrays of their maxima and sums, folded in state order with a running max whose "
                                f"exponentials rescale a running {T} sum (the scales rounded to {T}) → merge attention "
                                "states (N-way, folded in the values' type)", ev.kernel.name)
                    b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
                    b.defines = {}
                    b.conventions = {"KT_EXPERT_NWAY": layout, "KT_EXPERT_NWAY_FOLD": 1,
                                     "KT_EXPERT_LSE_BASE2": base2, "KT_EXPERT_EXP2_LOG2E": via}
                    b.template_args = [T_c, L, P]
                    b.consts = {"ESIZE": NBYTES[T]}
                    g = [_cast(x.dtype, x.name, True) for x in guards] + [f"(const {L}*)nullptr"] * (2 - len(guards))
                    b.call_args = [_cast(T, ov.name, False), _cast(T, vin.name, True), f"(const float*)({mx.name})",
                                   f"(const float*)({sm.name})", sets.c, tok.c, heads.c, hs.c,
                                   _cast(lens.dtype, lens.name, True) if lens is not None else f"(const {L}*)nullptr",
                                   split[0] if split is not None else "1LL", *g,
                                   _cast(offsets.dtype, offsets.name, True) if offsets is not None
                                   else f"(const {P}*)nullptr", f"(long long)({seq})" if seq else "1LL",
                                   m0, d0[0]]
                    names = {"tokens": tname, "heads": hname,
                             "sets": sets.c if sets.c.isdigit() else sets.words.strip("`")}
                    lay = re.sub(r"\w+", lambda mo: names.get(mo.group(0), mo.group(0)), NWAY_LAYOUTS[layout])
                    exp = ("base-2 m, exp2f(m - max)" if base2 else
                           "natural m, exp2f((m - max) * log2e)" if via else "natural m, expf(m - max)")
                    b.words = [f"out={ov.name}", f"v={vin.name} (unnormalized)", f"m={mx.name}, d={sm.name}",
                               f"sets={sets.words}", f"tokens={tok.words}", f"heads={heads.words}",
                               f"head_size={hs.words}", f"states {lay[:-1]}, head_size]"]
                    if lens is not None:
                        b.words.append(
                            ("request b = (t + " + offsets.name + "[t])" if offsets is not None else "request b = t")
                            + (f" / `{seq}`" if seq else "") + f", its states ceil({lens.name}[b] / {split[2]}), at "
                            "most sets" + (", rows left as they are where " + " or ".join(
                                f"{x.name}[b] <= 0" for x in guards) if guards else ""))
                    b.words += [exp, f"folded in state order from m = {m0w}, d = {d0[1]}: d = d * s1 + d_k * s2, "
                                f"o = o * {T}(s1) + v * {T}(s2) in {T} operators, out = o / {T}(d)"]
                    b.support = 100 - len(out)
                    out.append(b)
    return out
