"""Merging two partial attention states (values and their log-sum-exps).

Evidence: two float value inputs and one value output of one size, two fp32 lse inputs (and optionally one
lse output) of ``tokens * heads``, ``exp`` and ``log`` calls. Enumerated: which lse goes with which value
input, which int arguments are tokens, heads and head size (the value rows are walked in the order the
arguments give: [tokens, heads] or [heads, tokens]), the lse layout ([tokens, heads] or [heads, tokens]) and
natural or base-2 log-sum-exps. A kernel with no token count among its arguments (one block per token) gets
the expert launched so that its grid gives the count back.
"""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, SizeExpr, div

EXPS = ("expf", "__expf", "exp", "exp2f", "exp2", "__exp2f")
LOGS = ("logf", "log", "__logf", "log2f", "log2", "__log2f")


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get("merge_attn_states")
    if e is None or not ev.has(*EXPS):
        return []
    vals_in = [a for a in ev.bufs("in", FLOATS) if a.counts]
    big = max((a.counts for a in vals_in), default=None)
    if big is None:
        return []
    pv = [a for a in vals_in if a.counts == big]
    lse = [a for a in vals_in if a.dtype == "f32" and a.counts != big]
    outs = ev.bufs("out")
    ov = [a for a in outs if a.counts == big]
    olse = [a for a in outs if a.dtype == "f32" and a.counts != big]
    if len(pv) != 2 or len(lse) != 2 or len(ov) != 1 or len(olse) > 1 or len(outs) != len(ov) + len(olse) \
            or len(ev.bufs()) != len(pv) + len(lse) + len(outs):
        return []
    T, O = pv[0].dtype, ov[0].dtype
    # fp32 partials merged into a 16-bit output: the expert's output type of its own, no wider than the values'
    # (its vector checks are made for the values' type)
    mixed = O != T
    if pv[1].dtype != T or (mixed and ("KT_EXPERT_OUT_TYPE" not in e.conventions or O not in FLOATS
                                       or NBYTES[O] > NBYTES[T])) or lse[0].counts != lse[1].counts:
        return []
    L = lse[0].counts
    if olse and olse[0].counts != L:
        return []
    hs_all = [s for s in ev.sizes(div(big, L)) if not s.c[0].isdigit()] or ev.sizes(div(big, L))
    if not hs_all:
        return []
    hs = hs_all[0]
    # (tokens, heads) pairs whose product is the lse's length: int arguments, or one derived from another
    pairs = []
    ints = [a for a in ev.ints() if a.counts and f"(int)({a.name})" != hs.c]
    for a, b in itertools.permutations(ints, 2):
        if tuple(x * y for x, y in zip(a.counts, b.counts)) == L:
            pairs.append((ev.sizes(a.counts)[0], ev.sizes(b.counts)[0]))
    if not pairs:  # one of the two only as a quotient (a flat element count over the other and the head size)
        for a in ints:
            rest = div(L, a.counts)
            xs = [s for s in ev.sizes(rest) if s.c != f"(int)({a.name})" and not s.c[0].isdigit()] if rest else []
            if xs:
                pairs += [(ev.sizes(a.counts)[0], xs[0]), (xs[0], ev.sizes(a.counts)[0])]
    from_grid = 0
    if not pairs:  # no token count among the arguments (FlashInfer's MergeState: a block per position): the expert
        # reads it from its own grid, launched as tokens times the blocks one token needs
        for a in ints:
            if div(L, a.counts):
                pairs.append((SizeExpr("(int)gridDim.x", f"({lse[0].spec.size}) / ({a.spec.value})", "the grid"),
                              ev.sizes(a.counts)[0]))
        from_grid = int(bool(pairs))
    if not pairs:
        return []

    def tokish(s) -> bool:
        return bool(re.search("tok|seq|len|batch|^n$|num_tokens", s.words.strip("`"), re.I))
    pairs.sort(key=lambda p: (not tokish(p[0]), tokish(p[1])))
    # which lse goes with which value input: the one next to it in the argument list (or sharing its name's start)
    order = [a.name for a in ev.args]
    p0, p1 = pv
    l0, l1 = lse
    near = abs(order.index(p0.name) - order.index(l0.name)) + abs(order.index(p1.name) - order.index(l1.name))
    far = abs(order.index(p0.name) - order.index(l1.name)) + abs(order.index(p1.name) - order.index(l0.name))
    pairings = [((p0, l0), (p1, l1)), ((p0, l1), (p1, l0))]
    if far < near:
        pairings.reverse()
    base2_first = ev.has("exp2f", "exp2", "__exp2f", "log2f", "log2", "__log2f")
    bases = [1, 0] if base2_first else [0, 1]
    out = []
    for pi, (tok, heads) in enumerate(pairs):
        tname, hname = "tokens" if from_grid else tok.words.strip("`"), heads.words.strip("`")
        head_major = ev.mentions(rf"\b{re.escape(hname)}\*{re.escape(tname)}\+") or \
            ev.mentions(rf"\*{re.escape(tname)}\+")
        token_major_first = 0 if head_major or not ev.mentions(rf"\*{re.escape(hname)}\+") else 1
        for gi, ((pa, pl), (sa, sl)) in enumerate(pairings):
            for mi, tm in enumerate([token_major_first, 1 - token_major_first]):
                for bi, base in enumerate(bases):
                    b = Binding(e, 0.9, f"two value buffers and two fp32 log-sum-exps of `{tname} * {hname}`, "
                                "weights from expf(lse - max) and the merged lse from logf → merge attention states",
                                ev.kernel.name)
                    b.sizes = {"tokens": tok.spec, "heads": heads.spec, "head_size": hs.spec}
                    b.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": tm}
                    b.conventions = {"KT_EXPERT_LSE_BASE2": base}
                    if from_grid:
                        b.conventions["KT_EXPERT_TOKENS_FROM_GRID"] = 1
                    b.template_args = [CTYPE[T]] + ([CTYPE[O]] if mixed else [])
                    if mixed:
                        b.conventions["KT_EXPERT_OUT_TYPE"] = 1
                    b.call_args = [_cast(O, ov[0].name, False),
                                   f"(float*)({olse[0].name})" if olse else "(float*)nullptr",
                                   _cast(T, pa.name, True), f"(const float*)({pl.name})", _cast(T, sa.name, True),
                                   f"(const float*)({sl.name})", tok.c, heads.c, hs.c]
                    b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
                    lay = f"[{tname}, {hname}]" if tm else f"[{hname}, {tname}]"
                    b.words = [f"out={ov[0].name}" + (f" ({O}, the values {T})" if mixed else "")] + ([f"out_lse={olse[0].name}"] if olse else []) + [
                        f"p={pa.name} with p_lse={pl.name}", f"s={sa.name} with s_lse={sl.name}",
                        f"tokens={tok.words}", f"heads={heads.words}", f"head_size={hs.words}",
                        f"values [{tname}, {hname}, head_size]", f"lse {lay}",
                        "base-2 lse" if base else "natural lse"]
                    b.support = 20 - 4 * pi - 3 * gi - 2 * mi - bi
                    out.append(b)
    return out
