"""How softmax rows read a mask: the broadcasts of a mask of fewer rows (``_mask_inners``), the names its index is
computed from (``_mask_index_names``), the causal masks over attention scores (``_causal_forms``)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import ArgUse, Evidence, SizeExpr, closing, div, feeding, flows, statements


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


# the fill value of Megatron's / Transformer Engine's masked_fill(mask, -10000): a literal not multiplied by anything
_FILL = r"-\s*10000(?:\.0*)?[fF]?(?![\w.])"


def _condition_polarity(cond: str, names: set[str]) -> int | None:
    """Whether a condition on a mask value holds where the value is nonzero (1) or where it is zero (-1), for 0/1
    values: ``m``, ``m != 0``, ``m == 1``, ``m > 0`` hold where it is nonzero; ``!m``, ``m == 0``, ``m != 1`` where it
    is zero. None where ``cond`` is not one comparison of one name of ``names`` (a local the mask's value is read
    into, or a read of the mask) with 0 or 1."""
    c = re.sub(r"\s+", "", cond)
    while c.startswith("(") and closing_paren(c) == len(c) - 1:
        c = c[1:-1]
    neg = c.startswith("!") and not c.startswith("!=")
    c = c[1:] if neg else c
    while c.startswith("(") and closing_paren(c) == len(c) - 1:
        c = c[1:-1]
    m = re.fullmatch(r"(?:\(\w+\))?(.+?)(?:(==|!=|>)(0|1)(?:\.0*)?[fF]?)?", c)
    if m is None:
        return None
    subject = re.sub(r"^(?:static_cast<\w+>|\(\w+\)|__half2float|__bfloat162float|float)(?=\()|^\(\w+\)", "",
                     m.group(1))  # a conversion of the value read: the value itself
    if not any(re.fullmatch(rf"\(?{re.escape(n)}(?:\[[^\]]+\])*\)?", subject) for n in names):
        return None
    op, val = m.group(2), m.group(3)
    nonzero = op is None or (op == "!=" and val == "0") or (op == "==" and val == "1") or (op == ">" and val == "0")
    if op is not None and not nonzero and not ((op == "==" and val == "0") or (op == "!=" and val == "1")):
        return None
    return -1 if nonzero == neg else 1


def closing_paren(text: str) -> int:
    """The index of the parenthesis that closes ``text``'s first one (-1 where none does)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == ")":
            return i
    return -1


def _mask_conditionals(ev: Evidence, mask: ArgUse, names: set[str], flow: dict):
    """Each place the body chooses by a value read from ``mask``, as (the statement of a conditional expression, or
    None for an if / else; the condition's polarity (``_condition_polarity``: 1 where it holds for a nonzero value);
    the text taken where it holds; the other text, empty where an ``if`` has no ``else``). ``names``: the mask and the
    locals its value is read into."""
    for _, at, stmt in statements(ev.body):
        m = re.search(r"=\s*(.+?)\?(.+?):(.+)$", stmt[max(at, 0):].strip().rstrip(";"), re.S)
        if m and mask.name in feeding(flow, m.group(1)):
            pol = _condition_polarity(m.group(1), names)
            if pol is not None:
                yield stmt, pol, m.group(2), m.group(3)
    for m in re.finditer(r"\bif\s*\(", ev.body):
        i = closing(ev.body, m.end())
        cond = ev.body[m.end():i - 1]
        if mask.name not in feeding(flow, cond):
            continue
        pol = _condition_polarity(cond, names)
        branch = re.match(r"\s*(\{[^{}]*\}|[^;{}]*;)\s*(?:else\s*(\{[^{}]*\}|[^;{}]*;))?", ev.body[i:])
        if pol is not None and branch is not None:
            yield None, pol, branch.group(1), branch.group(2) or ""


def _masked_fill_forms(ev: Evidence, mask: ArgUse) -> list[int]:
    """Megatron's and Transformer Engine's scaled_masked_softmax reading of a byte mask: the logit REPLACED by the
    literal -10000 where the mask's value is nonzero (``m != 0 ? -10000.f : x * scale``, ``if (m != 1) v = x *
    scale; else v = -10000.0;``): the softmax expert's KT_EXPERT_MASK forms, the one that writes a row whose max is
    the fill value as 0 (5) first where the body compares a value with -10000 (their scale_value), else the one that
    does not (6) first; empty where the body shows no such replacement, or shows the fill where the value is zero (a
    keep-mask: the expert's 4)."""
    flow = flows(ev.body)
    names = {mask.name} | {t for t, _, stmt in statements(ev.body)
                           if t is not None and mask.name in feeding(flow, stmt) and not re.search(_FILL, stmt)}
    seen = set()
    for stmt, pol, then, other in _mask_conditionals(ev, mask, names, flow):
        if stmt is not None:  # a conditional expression: the fill (not a multiple of it) in its true or false branch
            if not re.search(_FILL, stmt) or re.search(r"\*\s*" + _FILL, stmt):
                continue
            where = 1 if re.search(_FILL, then) else -1 if re.search(_FILL, other) else 0
            if where:
                seen.add(pol * where)
        elif re.search(r"=\s*" + _FILL, then):  # an if / else whose one branch assigns the fill
            seen.add(pol)
        elif other and re.search(r"=\s*" + _FILL, other):
            seen.add(-pol)
    if seen != {1}:
        return []
    return [5, 6] if re.search(r"==\s*" + _FILL, ev.flat) or re.search(_FILL + r"\s*==", ev.flat) else [6, 5]


def _numeric(text: str) -> float | None:
    """The value of a constant expression of number literals (float suffixes allowed), or None."""
    t = re.sub(r"(?<=[\d.])[fF]\b", "", text.strip().rstrip(";"))
    if not t or not re.fullmatch(r"[-+*/().\deE\s]+", t):
        return None
    try:
        v = eval(t, {"__builtins__": {}}, {})  # digits, operators and parentheses only (checked above)
    except (SyntaxError, ZeroDivisionError, TypeError, NameError, ValueError, OverflowError):
        return None  # not a number (a lone `e`, ...)
    return float(v) if isinstance(v, (int, float)) else None


def _keep_fill(ev: Evidence, mask: ArgUse) -> float | None:
    """A keep-mask of any type whose ZERO values replace the logit by a constant (AlphaFold's Evoformer softmax:
    ``if (mask[k] == 0) buf = -1 * 10e9; else buf = x + bias;``, ``v = m ? x : -1e9f``): the constant, or None where
    the body shows no such replacement of a value it reads from ``mask`` (or where the replacement is where the value
    is nonzero: Megatron's masked_fill, ``_masked_fill_forms``)."""
    flow = flows(ev.body)
    names = {mask.name} | {t for t, _, stmt in statements(ev.body) if t is not None and mask.name in feeding(flow, stmt)}
    found = set()
    for stmt, pol, then, other in _mask_conditionals(ev, mask, names, flow):
        taken = then if pol == -1 else other  # the text where the value is zero
        if stmt is not None:
            v = _numeric(taken)
        else:  # a branch assigning the constant
            a = re.fullmatch(r"\{?\s*[\w\[\]\s.+*]+?=\s*([^;=]+);\s*\}?", taken.strip())
            v = _numeric(a.group(1)) if a else None
        if v is not None:
            found.add(v)
    return found.pop() if len(found) == 1 else None
