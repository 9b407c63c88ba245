"""No positions, each token's position its index in its sequence (KT_EXPERT_POSITIONS 3: candle's rope,
FlashAttention's rotary with an int seqlen_offset): the query and cos indices the body computes, sampled and
tried against each layout (``_implicit_positions``); or, where the rows are reached by moving the pointers
themselves, those moves sampled and fitted, a flag's choice of layout read on both its values
(``_bumped_positions``)."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import (ArgUse, Evidence, SizeExpr, _expand, _once as _ONCE, div,
                                                    index_terms, prod, term_values)
from agent_core.templating.experts.evidence import branch_view as _branch_view
from agent_core.templating.experts.index_reading import bare as _bare, draw_pairs as _draw_pairs, \
    choices as _choices, element_resolved as _element_resolved, exits as _exits, loop_bounds as _loop_bounds, resolve as _resolve, \
    resolved as _resolved, sites as _sites


class _Implicit(NamedTuple):
    """No positions, each token's position its index in its sequence (KT_EXPERT_POSITIONS 3: candle's rope, rope_i
    and rope_thd; FlashAttention's rotary with an int seqlen_offset): the query's elements in rows of ``row``
    elements (a token: its heads, one head where the layout is head-major [b, h, t, d]), ``seq`` rows a sequence,
    the cos/sin row of row r being ``offset + r % seq``; the tables' row length ``stride`` (values on every size
    set), C and words."""
    tokens: tuple
    tokens_spec: str
    seq: SizeExpr
    offset: ArgUse | None
    stride: tuple
    adds: set
    div: str | None = None  # KT_EXPERT_POS_DIV: the rows a position spans (C), the position (row / div) % seq
    words: str | None = None  # the positions in words where they are so read


UNBOUNDED = 2147483647  # a sequence length no token count reaches: position = offset + token


def _size_terms(ev, ints, c, n: int):
    """(values, strides, offsets) the position fits try: each int argument's value tuple and the products and
    quotients of two (value tuple -> its SizeExpr), the row strides of the cache ``c`` (an argument or its half),
    and the offsets (none, or a positive int argument)."""
    values = {}  # value tuple -> its SizeExpr (an int argument, a product or quotient of two)
    for a in ints:
        for s in ev.sizes(a.counts):
            values.setdefault(a.counts, s)
    for a in ints:
        for b in ints:
            if a is not b:
                for t in (tuple(x * y for x, y in zip(a.counts, b.counts)),
                          tuple(x // y if y and x % y == 0 else None for x, y in zip(a.counts, b.counts))):
                    if None not in t and all(v > 0 for v in t) and t not in values:
                        xs = ev.sizes(t)
                        if xs:
                            values[t] = xs[0]
    strides = []
    for a in ints:
        for st in (tuple(v // 2 for v in a.counts if v % 2 == 0), a.counts):
            if len(st) == n and all(v > 0 for v in st) and div(c.counts, st) and st not in strides:
                strides.append(st)
    return values, strides, [None] + [a for a in ints if all(v > 0 for v in a.counts)]


def _index_samples(ev: Evidence, q: ArgUse, c: ArgUse, size: int, draws: int = 400,
                   guards: tuple[str, ...] = (), loops: dict[str, int] | None = None) -> list[tuple[int, int]] | None:
    """(query index, cos index) pairs the body computes for the same thread on size set ``size``: every unknown
    (thread and block indices, loop variables) drawn at random (fixed seed), only pairs inside both buffers kept,
    and none an early exit (``guards``) ends first; loop variables of ``loops`` below their bounds."""
    qt, ct = _element_resolved(ev, q.name) or _resolved(ev, q.name), _resolved(ev, c.name)
    if qt is None or ct is None:
        return None
    return _draw_pairs(ev, qt, ct, size, 1234, (2, 8, 64, 512, 4096, 32768), draws,
                       lambda qi, ci: 0 <= qi < q.counts[size] and 0 <= ci < c.counts[size], guards, loops)


def _implicit_positions(ev: Evidence, qi: ArgUse, caches: list[ArgUse]) -> tuple[bool, list[_Implicit]]:
    """Where a kernel without positions takes each token's cos/sin row from (candle's rope over [b, h, t, d],
    rope_thd over [b, t, h, d]; Hugging Face's gathered cos and sin): the query and cos indices the body computes
    for one thread, on sampled thread and block indices, tried against each layout: the cos row (index over a row
    length: half an int argument or one) is ``offset + (query index / row) % seq`` for a row length of the query
    (a size the arguments make) and a sequence length (the tables' rows, or with an offset argument, one the
    arguments make), the offset an int argument or 0. (whether the body's indexing was read, the implicit layouts
    it fits); token-major rows with the tables' rows as the tokens (the caller gathered them) fit no implicit
    layout, and where the body does not tell (no index read, more than one layout fits) none is offered: the
    gathered rows stay (the bindings a kernel without positions had before)."""
    c = caches[0]
    n = len(ev.spec.sizes)
    samples = []
    for size in range(n):
        got = _index_samples(ev, qi, c, size)
        if got is None or len(got) < 24:
            return False, []
        samples.append(got)
    ints = [a for a in ev.ints() if a.counts]
    values, strides, offsets = _size_terms(ev, ints, c, n)

    def fits(row, seq, stride, off) -> bool:
        return all((ci // stride[i]) == (off.counts[i] if off else 0) + (qx // row[i]) % seq[i]
                   for i in range(n) for qx, ci in samples[i])

    found: dict[tuple, _Implicit] = {}
    gathered = False
    for stride in strides:
        rows = div(c.counts, stride)
        if all(r == 1 for r in rows):
            continue  # one row: every layout reads it
        for off in offsets:
            seqs = [rows] if off is None else [t for t in values if all(
                x + o <= r for x, o, r in zip(t, off.counts, rows))]
            for seq in seqs:
                for row in values:
                    if div(qi.counts, prod(row, seq)) is None or not fits(row, seq, stride, off):
                        continue
                    if prod(row, seq) == qi.counts and off is None:
                        gathered = True  # token-major: the tables' rows are the tokens (gathered per token)
                        continue
                    seq_c = values.get(seq) or (ev.sizes(seq) or [None])[0]
                    if seq_c is None:
                        continue
                    tokens = div(qi.counts, row)
                    spec = f"({qi.spec.size}) / ({values[row].spec})"
                    found.setdefault((tokens, seq, stride, off.name if off else None),
                                     _Implicit(tokens, spec, seq_c, off, stride, set()))
    if not found and not gathered:
        # no sequence wraps the positions: an offset argument plus the token itself (SimpleLLMInference's `pos +
        # token`, the token only in the launch grid), read as a sequence no token reaches
        endless = tuple(UNBOUNDED for _ in range(n))
        for stride in strides:
            for off in offsets[1:]:
                for row in values:
                    tokens = div(qi.counts, row)
                    if tokens is None or all(t == 1 for t in tokens) or not fits(row, endless, stride, off):
                        continue
                    if any(t + o > r for t, o, r in zip(tokens, off.counts, div(c.counts, stride))):
                        continue  # the last token's row past the tables
                    seq_c = SizeExpr(str(UNBOUNDED), str(UNBOUNDED), f"unbounded (`{off.name}` + the token)")
                    found.setdefault((tokens, endless, stride, off.name),
                                     _Implicit(tokens, f"({qi.spec.size}) / ({values[row].spec})", seq_c, off,
                                               stride, set(), words=f"`{off.name}` + the token's index"))
    if gathered or len(found) != 1:
        return False, []
    imp = next(iter(found.values()))
    adds = set()
    text = _bare(ev)
    once = _ONCE(text)
    for site in _sites(text, qi.name):
        for _, t in _expand(site, once):
            v = term_values(ev, t)
            if v is not None:
                adds.add(v)
    return True, [imp._replace(adds=adds)]


# ------------------------------------------------------------------------------ rows reached by moving the pointers
_NO_WRAP = "0x7fffffff"  # a sequence length no row index reaches: the position is not wrapped


def _bumps(text: str, name: str) -> list[str] | None:
    """The offsets by which the body moves the pointer argument ``name`` itself, as statements of its own at the top
    level of the body (``x += blockIdx.x * depth;``, ``x = x + off;``: CTranslate2's way to reach a block's row); None
    where it is never so moved, or moved anywhere else too (in a loop, under a condition)."""
    n = re.escape(name)
    out = []
    for m in re.finditer(rf"(?<![\w.>]){n}\s*(?:\+=|=\s*{n}\s*\+)(?!=)\s*([^;]+);", text):
        before = text[:m.start()]
        depth = before.count("{") - before.count("}")
        parens = before.count("(") - before.count(")")
        lead = before.rstrip()[-1:]
        if depth != 1 or parens != 0 or lead not in (";", "{", "}"):
            return None
        out.append(m.group(1).strip())
    if re.search(rf"(?<![\w.>]){n}\s*(?:-=|\+\+|--)|(?:\+\+|--)\s*{n}\b", text):
        return None
    return out or None


def _flag_locals(ev: Evidence, once: dict[str, str]) -> tuple[str, bool, dict[str, tuple[str, str]]] | None:
    """Locals set by one flag (a scalar argument whose spec value is the same on every size set) choosing between two
    values (``time = transpose ? row % max_time : row / heads``): (the flag, its spec value's truth, local -> (its
    value where the flag is set, where it is not)); None where there are none (or two flags)."""
    scalars = {a.name: a for a in ev.args if a.role == "scalar" and a.counts and len(set(a.counts)) == 1}
    found: dict[str, tuple[str, str]] = {}
    flag = None
    for local, value in once.items():
        m = re.fullmatch(r"\s*\(?\s*(!?)\s*([A-Za-z_]\w*)\s*\)?\s*\?(.*)", value, re.S)
        if m is None or m.group(2) not in scalars:
            continue
        rest, depth, cut = m.group(3), 0, -1
        for i, ch in enumerate(rest):  # the `:` of this conditional (outside brackets and nested conditionals)
            depth += ch in "([?"
            depth -= ch in ")]" or (ch == ":" and depth > 0 and rest[:i].count("?") > rest[:i].count(":"))
            if ch == ":" and depth == 0:
                cut = i
                break
        if cut < 0 or (flag is not None and flag != m.group(2)):
            return None
        flag = m.group(2)
        a, b = rest[:cut].strip(), rest[cut + 1:].strip()
        found[local] = (b, a) if m.group(1) else (a, b)
    if flag is None:
        return None
    return flag, bool(scalars[flag].counts[0]), found


def _bump_samples(ev: Evidence, q: ArgUse, qexpr: str, cexpr: str, size: int, draws: int = 400
                  ) -> list[tuple[int, int]] | None:
    """(query offset, table offset) pairs the body's pointer moves give for the same block on size set ``size``: every
    unknown (thread and block indices) drawn at random (fixed seed), only pairs inside the query kept."""
    return _draw_pairs(ev, qexpr, cexpr, size, 4321, (2, 8, 64, 512, 4096, 32768, 1 << 20), draws,
                       lambda qi, ci: 0 <= qi < q.counts[size] and ci >= 0)


def _row_adds(ev: Evidence, text: str, once: dict[str, str], qi: ArgUse) -> set:
    """The values the query's indices add to a row (``x[i + middle]``: NeoX's half, ``x[i + 1]``: GPT-J's pair)."""
    adds = set()
    for site in _sites(text, qi.name):
        for _, t in _expand(site, once):
            v = term_values(ev, t)
            if v is not None:
                adds.add(v)
    return adds


def _query_adds(ev: Evidence, qi: ArgUse) -> set:
    """``_row_adds`` of the body as the position readings read it."""
    text = _bare(ev)
    return _row_adds(ev, text, _ONCE(text), qi)


def _bumped_positions(ev: Evidence, qi: ArgUse, q: ArgUse, caches: list[ArgUse]) -> _Implicit | None:
    """No positions, the rows reached by moving the pointers (CTranslate2's rotary: ``x += blockIdx.x * depth; sin +=
    time * ndims;``, then each element i of the row with ``sin[i]``): the query's (and the output's) moves and the
    tables' (the same for both) are sampled over the block indices and fitted as table row = offset + ((query row) /
    div) % seq, a query row of an argument's length (one head), div 1 or a size the arguments make, seq the tables'
    rows, a size, or none (no wrap). Where a flag argument chooses the table row (CTranslate2's ``transpose``: row %
    max_time of [b, h, t, d], else row / heads of [t, h, d]), each of its two values is fitted over the same rows
    and the binding passes div and seq as the flag chooses them at run time (KT_EXPERT_POS_DIV); the spec's value
    is the one verified. The elements the rows' indices add must be the same for the query and the tables."""
    text = _bare(ev)
    once = _ONCE(text)
    qb, cb = _bumps(text, qi.name), [_bumps(text, c.name) for c in caches]
    if qb is None or any(c is None for c in cb) or len({" + ".join(c) for c in cb}) != 1:
        return None
    if q is not qi and " + ".join(_bumps(text, q.name) or []) != " + ".join(qb):
        return None
    # the elements of a row: every table index (after the move) one the query is read at
    q_sites = [sorted(t) for t in index_terms(text, qi.name) if t]
    if not all(sorted(t) in q_sites for c in caches for t in index_terms(text, c.name) if t):
        return None
    flag = _flag_locals(ev, once)
    branches = [(None, once)]
    if flag is not None:
        name, truth, chosen = flag
        spec_once = {**once, **{n: v[0] if truth else v[1] for n, v in chosen.items()}}
        other_once = {**once, **{n: v[1] if truth else v[0] for n, v in chosen.items()}}
        branches = [(truth, spec_once), (not truth, other_once)]
    c = caches[0]
    n = len(ev.spec.sizes)
    # sizes: the int arguments (not the flag), their products and quotients, all positive
    ints = [a for a in ev.ints() if a.counts and all(v > 0 for v in a.counts) and (flag is None or a.name != flag[0])]
    values, strides, offsets = _size_terms(ev, ints, c, n)
    fitted = []
    for truth, bonce in branches:
        qx = _resolve(bonce, " + ".join(f"({t})" for t in qb))
        cx = _resolve(bonce, " + ".join(f"({t})" for t in cb[0]))
        if qx is None or cx is None:
            return None
        samples = []
        for size in range(n):
            got = _bump_samples(ev, q, qx, cx, size)
            if not got or len(got) < 24:
                return None
            samples.append(got)
        fitted.append(samples)

    def fits(samples, row, stride, off, dv, seq) -> bool:
        return all(ci % stride[i] == 0 and qx % row[i] == 0 and ci // stride[i] == (off.counts[i] if off else 0) + (
            (qx // row[i]) // (dv[i] if dv else 1)) % (seq[i] if seq else 1 << 62)
                   for i in range(n) for qx, ci in samples[i])

    def first_fit(samples, row, stride, off):
        rows_t = div(c.counts, stride)
        for dv in [None] + list(values):
            # the tables' rows (where the arguments make them), no wrap, a size
            for seq in ([rows_t] if rows_t in values or ev.sizes(rows_t) else []) + [None] + [
                    v for v in values if v != rows_t]:
                if fits(samples, row, stride, off, dv, seq):
                    return dv, seq
        return None

    found = []
    for stride in strides:
        for row in values:
            if div(qi.counts, row) is None:
                continue
            for off in offsets:
                got = first_fit(fitted[0], row, stride, off)
                if got is None:
                    continue
                other = first_fit(fitted[1], row, stride, off) if len(fitted) > 1 else None
                if len(fitted) > 1 and other is None:
                    continue
                found.append((row, stride, off, got, other))
                break
    # the reading with the fewest divisions (a row whose own index is the position's, not a part of one divided back
    # by a size), and one reading only
    def divisions(f) -> int:
        return (f[3][0] is not None) + (f[4] is not None and f[4][0] is not None)
    best = [f for f in found if divisions(f) == min(map(divisions, found))] if found else []
    if len({(f[0], f[1]) for f in best}) != 1:
        return None
    row, stride, off, (dv, seq), other = best[0]
    if other is None and dv is None and seq is not None and prod(row, seq) == qi.counts and off is None:
        return None  # token-major, the tables' rows the tokens: gathered per token (not read here)

    def c_of(x, wrap: bool) -> str:
        if x is None:
            return _NO_WRAP if wrap else "1LL"
        s = values.get(x) or (ev.sizes(x) or [None])[0]
        return s.c if wrap else f"(long long)({s.c})"

    def words_of(dv, seq) -> str:
        d = f"r / {(values.get(dv) or ev.sizes(dv)[0]).words}" if dv is not None else "r"
        return d if seq is None else f"({d}) % {(values.get(seq) or ev.sizes(seq)[0]).words}" if dv is not None \
            else f"r % {(values.get(seq) or ev.sizes(seq)[0]).words}"
    tokens = div(qi.counts, row)
    spec = f"({qi.spec.size}) / ({values[row].spec})"
    if flag is None and dv is None and seq is not None:  # the plain form: the row's index in its sequence
        s = values.get(seq) or ev.sizes(seq)[0]
        return _Implicit(tokens, spec, s, off, stride, _row_adds(ev, text, once, qi))
    name = flag[0] if flag is not None else None
    if name is not None:  # (dv, seq) the spec's value's, other the other value's: in C and words by the flag's truth
        (sd, ss), (od, os_) = (dv, seq), other
        true_d, true_s, false_d, false_s = (sd, ss, od, os_) if flag[1] else (od, os_, sd, ss)
        seq_c = f"(({name}) ? {c_of(true_s, True)} : {c_of(false_s, True)})"
        div_c = f"(({name}) ? {c_of(true_d, False)} : {c_of(false_d, False)})"
        words = (f"row r of one head at {words_of(true_d, true_s)} where `{name}`, else at "
                 f"{words_of(false_d, false_s)}")
    else:
        seq_c, div_c = c_of(seq, True), c_of(dv, False)
        words = f"row r of one head at {words_of(dv, seq)}"
    return _Implicit(tokens, spec, SizeExpr(seq_c, "0", words), off, stride, _row_adds(ev, text, once, qi), div_c,
                     words)


# ------------------------------------------------------------------------ head-major rows, tables per (batch, position)
class _HeadMajor(NamedTuple):
    """Query and key head-major [batch, heads, seq, head_size] (KT_EXPERT_HEAD_MAJOR: Hugging Face's
    apply_rotary_pos_emb over q and k of [b, h, s, d] and its ports), each token (batch entry, position) a row of
    the tables (or of the positions): ``tokens`` of them (batch * seq), ``seq`` the sequence length (a size of the
    arguments), ``head`` the head size the fit read (values)."""
    tokens: tuple
    tokens_spec: str
    seq: SizeExpr
    head: tuple


def _head_major(ev: Evidence, qi: ArgUse, q: ArgUse, c: ArgUse, positions: bool = False) -> list[_HeadMajor]:
    """Where the query is head-major and the rows of ``c`` (a cos table, or the positions: rows of one) are its
    tokens (batch entry, position): the query and ``c`` indices the body computes for one thread, sampled as for
    ``_implicit_positions``, fit ``c`` row = (r / (heads * seq)) * seq + r % seq for every query row r (the query index
    over a head size), heads the query's elements over the tokens and the head size. A fit the token-major gathered
    reading (``c`` row = r / heads) also makes on every size set says nothing (one position a sequence everywhere):
    none then. ``positions``: ``c`` is the positions, an element a token. The fits, the longest head first."""
    n = len(ev.spec.sizes)
    text = _bare(ev)
    once = _ONCE(text)
    # `if (t >= seq_len) continue;` before the reads; the key's branch of a pointer chosen between the two
    guards = _exits(text, once, qi.name, continues=True) + _choices(text, once, qi.name)
    samples = []
    for size in range(n):
        got = _index_samples(ev, qi, c, size, guards=guards,
                             loops=_loop_bounds(ev, _branch_view(text, qi.name), size))  # the query's loops
        if got is None or len(got) < 24:
            return []
        samples.append(got)
    ints = [a for a in ev.ints() if a.counts and all(v > 0 for v in a.counts)]
    values, row_strides, _ = _size_terms(ev, ints, c, n)
    if positions:
        row_strides = [(1,) * n]
    out = []
    for stride in row_strides:
        tokens = div(c.counts, stride)
        if tokens is None:
            continue
        for head in sorted(values, reverse=True):
            if any(h < 2 or h % 2 for h in head) or not positions and stride not in (head, tuple(h // 2 for h in head)):
                continue  # an even head size, the tables' rows as long as it or half
            heads = div(q.counts, prod(tokens, head))
            if heads is None or any(h < 1 for h in heads):
                continue
            for seq in values:
                if seq == tokens or div(tokens, seq) is None or all(s == 1 for s in seq):
                    continue

                def row_of(qx: int, i: int) -> int:
                    r = qx // head[i]
                    return (r // (heads[i] * seq[i])) * seq[i] + r % seq[i]
                if all(ci // stride[i] == row_of(qx, i) for i in range(n) for qx, ci in samples[i]) and not all(
                        ci // stride[i] == (qx // head[i]) // heads[i] for i in range(n) for qx, ci in samples[i]):
                    out.append(_HeadMajor(tokens, f"({c.spec.size}) / ({values[stride].spec})" if stride in values
                                          else c.spec.size, values[seq], head))
    return out
