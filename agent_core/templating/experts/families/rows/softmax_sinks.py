"""A sink logit per head in a softmax's max and denominator (gpt-oss attention sinks): whether an input is one
and which argument counts the heads (``_sink_heads``), how a row finds its head (``_sink_inners``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import FLOATS, ArgUse, Evidence, SizeExpr, assignments, call_arguments, div
from agent_core.templating.experts.families.rows.common import EXPS
from agent_core.templating.experts.families.rows.softmax_masks import _mask_index_names


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
