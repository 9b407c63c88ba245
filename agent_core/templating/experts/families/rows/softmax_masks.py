"""How softmax rows read a mask: the broadcasts of a mask of fewer rows (``_mask_inners``), the names its index is
computed from (``_mask_index_names``), the causal masks over attention scores (``_causal_forms``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import ArgUse, Evidence, SizeExpr, div, feeding, flows, statements


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
