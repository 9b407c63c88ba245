"""Reading a kernel's index arithmetic as values: an element's index with every local assigned once replaced by its
value, down to thread and block indices, loop variables and the int arguments (``resolved``), and evaluated together
on sampled unknowns (``draw_pairs``). Shared by the binders that read a layout from how the body indexes a buffer
(the rotary positions, the strided softmax's channel stride)."""

from __future__ import annotations

import re

from agent_core.templating.experts.evidence import _assignments, ternary
from agent_core.templating.experts.evidence import _once as _ONCE
from agent_core.templating.experts.evidence import (Evidence, additive_terms, assignments, branch_view, closing, factors,
                                                    for_headers, index_sites, index_terms, known_factors, modified, pointer_aliases,
                                                    uncast, unparen)

_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_IF = re.compile(r"\bif\s*\(")
_THREAD = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*[xyz]\b")


def bare(ev: Evidence) -> str:
    """The body without casts, a called function's arguments without their parentheses (`(src)[i1]`)."""
    return re.sub(r"(?<![\w\])])\(\s*([A-Za-z_]\w*)\s*\)(?![\w(])", r"\1", uncast(ev.body))


_MOVE = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*\+=\s*([^;{}]+);")
_CHANGE = r"(?<![\w.>]){n}\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)|(?:\+\+|--)\s*{n}\b"


def inline_moves(text: str, names: set[str], pointers: set[str] = frozenset()) -> str:
    """``text`` with each of ``names`` (the kernel's arguments) that one statement ``name += step;`` moves, outside any
    loop or condition and changed nowhere else (a row's pointer ``q += token * row;``, a start position ``pos +=
    token;``: llama2.c-style code), read as moved where it is used after it: the statement dropped, a later subscript
    ``q[i]`` read as ``q[step + i]`` and any other later use as ``(pos + step)`` (a pointer's, ``pointers``, without
    the parentheses: ``kh = k + step + h * d``, a pointer made from it)."""
    for m in reversed(list(_MOVE.finditer(text))):
        n, step = m.group(1), m.group(2).strip()
        if n not in names or len(re.findall(_CHANGE.format(n=re.escape(n)), text)) != 1 or _conditional(text, m.start()):
            continue
        step = step if re.fullmatch(r"[A-Za-z_][\w.]*|\d+", step) else f"({step})"
        after = re.sub(rf"(?<![\w.>]){re.escape(n)}\s*\[", f"{n}[{step} + ", text[m.end():])
        # a pointer's other uses as a sum (`kh = k + step + h * d`: still a pointer made from k), a value's in
        # parentheses
        after = re.sub(rf"(?<![\w.>]){re.escape(n)}\b(?!\s*\[)", f"{n} + {step}" if n in pointers else f"({n} + {step})",
                       after)
        text = text[:m.start()] + after
    return text


def _conditional(text: str, at: int) -> bool:
    """Whether position ``at`` sits in a loop's or a condition's block (a block opened after ``)``, ``else`` or
    ``do``) or right after a loop's or condition's header without braces."""
    depth = 0
    for i in range(at - 1, -1, -1):
        c = text[i]
        if c == "}":
            depth += 1
        elif c == "{":
            if depth == 0:
                head = text[:i].rstrip()
                if head.endswith(")") or re.search(r"\b(?:else|do)$", head):
                    return True
            else:
                depth -= 1
    prev = text[:at].rstrip()
    return prev.endswith(")") or re.search(r"\b(?:else|do)$", prev) is not None


def sites(text: str, name: str) -> list[list[tuple[int, str]]]:
    """The additive terms of every index of ``name`` (or a local pointer made from it) in ``text``, a bare pass of
    the pointer (an argument of a call: no terms) left out; a pointer chosen between buffers by a conditional read
    as its branch made from ``name`` (``evidence.branch_view``)."""
    return _sites_in(branch_view(text, name), name)


def sum_text(terms: list[tuple[int, str]]) -> str:
    """Signed additive terms as one C sum ("0" for none)."""
    return " + ".join(f"({t})" if sign > 0 else f"-({t})" for sign, t in terms) or "0"


def _sites_in(text: str, name: str) -> list[list[tuple[int, str]]]:
    """``sites`` of a text already given ``name``'s branch view."""
    names = pointer_aliases(text, name)
    # a local pointer declared from it (`__half* v = x + off;`) that is then written through (`v[1] = ...`)
    names += [m.group(1) for m in re.finditer(rf"\*\s*(?:const\s+|__restrict__\s+)*([A-Za-z_]\w*)\s*=\s*"
                                              rf"{re.escape(name)}\s*\+", text) if m.group(1) not in names]
    return [t for n in names for t in index_terms(text, n) if t]


def resolved(ev: Evidence, name: str) -> str | None:
    """The first index of the buffer ``name`` with every local assigned once replaced by its value, down to the
    thread and block indices (each of ``threadIdx.x``, ``blockIdx.y``, ... a name of its own), loop variables and
    the int arguments; casts and literal suffixes dropped. None where it is not plain integer arithmetic."""
    text = branch_view(bare(ev), name)
    found = _sites_in(text, name)
    if not found:
        return None
    return resolve(_ONCE(text), sum_text(found[0]))


def element_resolved(ev: Evidence, name: str) -> str | None:
    """The first element the body reads or writes of the buffer ``name``, resolved as ``resolved`` does, where
    the body indexes it through a local pointer made from it (``float* vec = q + token * hidden; vec[h * d + i]``):
    the pointer's move and the subscript together, the element's index in the buffer (``resolved`` gives the first
    index or move: the move alone there). None where no subscript of it or its pointers resolves."""
    text = branch_view(bare(ev), name)
    once = _ONCE(text)
    moves: dict[str, list[tuple[int, str]]] = {name: []}
    for a in pointer_aliases(text, name)[1:]:
        if a not in once:
            continue
        terms = additive_terms(unparen(once[a].strip()))
        base = next((t for sign, t in terms if sign == 1 and t in moves), None)
        if base is not None:
            moves[a] = moves[base] + [(sign, t) for sign, t in terms if (sign, t) != (1, base)]
    found = []
    for a, mv in moves.items():
        for m in re.finditer(rf"(?<![\w.>]){re.escape(a)}\s*\[", text):
            found.append((m.start(), mv + additive_terms(text[m.end():closing(text, m.end(), "([", ")]") - 1])))
    for _, terms in sorted(found, key=lambda f: f[0]):
        r = resolve(once, sum_text(terms))
        if r is not None:
            return r
    return None


def all_resolved(ev: Evidence, name: str) -> list[str]:
    """``resolved`` of every index of the buffer ``name`` (or a local pointer made from it: relative to that pointer),
    the ones that are not plain integer arithmetic left out."""
    text = branch_view(bare(ev), name)
    once = _ONCE(text)
    out = []
    for site in _sites_in(text, name):
        r = resolve(once, sum_text(site))
        if r is not None and r not in out:
            out.append(r)
    return out


def resolve(once: dict[str, str], expr: str) -> str | None:
    """``expr`` with every local assigned once (``once``) replaced by its value, down to thread and block indices,
    loop variables and arguments; literal suffixes dropped. None where it is not plain integer arithmetic."""
    for _ in range(12):
        new = _IDENT.sub(lambda m: f"({once[m.group(0)]})" if m.group(0) in once else m.group(0),
                         _THREAD.sub(lambda m: "kt_" + re.sub(r"\W+", "_", m.group(0)), expr))
        if new == expr:
            break
        expr = new
    expr = re.sub(r"(?<![\w.])(\d+)[uUlL]+\b", r"\1", expr)
    if not re.fullmatch(r"[\w\s()+\-*/%]+", expr) or len(expr) > 4000:
        return None
    return expr


def size_env(ev: Evidence, size: int) -> dict[str, int]:
    """The names an index is evaluated over on size set ``size``: the file's integer constants and the kernel's int
    arguments at their values. A name the body changes (a loop's variable: ``for (int h = 0; ...; ++h)`` sets it to a
    number once) is no constant: it stays unknown, drawn like the other loop variables."""
    moved = modified(bare(ev))
    env = {n: int(v) for n, v in ev.constants.items() if float(v).is_integer() and n not in moved}
    env.update({x.name: x.counts[size] for x in ev.ints() if x.counts})
    return env


def launch_bounds(ev: Evidence, size: int) -> dict[str, int]:
    """How far each thread and block index reaches in the spec's launch on size set ``size``: ``kt_threadIdx_x`` ->
    the block's x extent, ``kt_blockIdx_y`` -> the grid's y extent, ... (the names ``resolve`` gives them), an axis the
    launch does not give 1; where the launch cannot be evaluated whole (a grid over a template's own parameters), the
    axes the sizes alone give (the others stay unbounded)."""
    from agent_core import expr as _expr
    from agent_core.source import spec as spec_mod
    try:
        ln = spec_mod.launch(ev.spec, ev.spec.sizes[size])
    except Exception:  # noqa: BLE001 (a launch over names of a template: axis by axis below)
        ln = None
    out = {}
    if ln is not None:
        for axis, g, b in zip("xyz", ln.grid, ln.block):
            out[f"kt_blockIdx_{axis}"], out[f"kt_threadIdx_{axis}"] = max(1, int(g)), max(1, int(b))
        return out
    for kind, dims in (("blockIdx", ev.spec.grid), ("threadIdx", ev.spec.block)):
        for axis, d in zip("xyz", dims or []):
            try:
                v = int(_expr.evaluate(str(d), ev.spec.sizes[size]))
            except Exception:  # noqa: BLE001 (a configuration's parameter: not bounded here)
                continue
            if v > 0:
                out[f"kt_{kind}_{axis}"] = v
    return out


def exits(text: str, once: dict[str, str], name: str, continues: bool = False) -> tuple[str, ...]:
    """The conditions of the early returns (``if (blockIdx.x >= n_kv_heads) return;``; with ``continues`` the
    iterations skipped too: ``if (b >= batch || t >= seq_len) continue;``) before the body's first access of ``name``
    (or of a pointer made from it), resolved as an index is and written in the expression language; those it cannot
    read are left out (a sample is then kept as before)."""
    names = "|".join(re.escape(a) for a in pointer_aliases(text, name))
    first = re.search(rf"(?<![\w.])(?:{names})\s*\[", text)
    out = []
    for m in _IF.finditer(text, 0, first.start() if first else 0):
        end = closing(text, m.end())
        if not re.match(r"\s*return\s*;" if not continues else r"\s*(?:return|continue)\s*;", text[end:]):
            continue
        r = resolve_condition(once, text[m.end():end - 1])
        if r is not None:
            out.append(r)
    return tuple(out)


def choices(text: str, once: dict[str, str], name: str) -> tuple[str, ...]:
    """The conditions under which a local pointer chosen by a conditional between buffers (``x = h < n_q ? q + a : k +
    b;``, one loop over the query's heads and then the key's) is not the one made from ``name`` (``not (h < n_q)``
    for q, ``h < n_q`` for k), resolved as ``exits`` gives them: the samples of ``branch_view``'s indices where the
    branch is the other buffer's are left out with them."""
    out = []
    for _, value, element in _assignments(text):
        c = None if element else ternary(value)
        if c is None:
            continue
        mine = [i for i, b in enumerate(c[1:]) if (1, name) in additive_terms(b) or b == name]
        if len(mine) != 1:
            continue
        r = resolve_condition(once, c[0])
        if r is not None:
            out.append(f"not ({r})" if mine[0] == 0 else f"({r})")
    return tuple(out)


def resolve_condition(once: dict[str, str], cond: str) -> str | None:
    """A C condition in the expression language (``&&``, ``||``, ``!`` as and, or, not) with its index arithmetic
    resolved (``_resolve`` on each side of its comparisons)."""
    cond = re.sub(r"!(?!=)", " not ", cond.replace("&&", " and ").replace("||", " or "))
    parts = re.split(r"(\s(?:and|or|not)\s|>=|<=|==|!=|<|>)", cond)
    out = []
    for p in parts:
        if p is None:
            continue
        if re.fullmatch(r"\s(?:and|or|not)\s|>=|<=|==|!=|<|>", p):
            out.append(p)
        elif p.strip():
            r = resolve(once, p)
            if r is None:
                return None
            out.append(r)
    return "".join(out) or None


def loop_bounds(ev: Evidence, text: str, size: int) -> dict[str, int]:
    """How far each loop variable of ``text`` runs on size set ``size`` where its loop starts at 0 and its condition
    bounds it by what the sizes give (``for (int h = 0; h < q_heads; ++h)``: h below q_heads's value); a variable
    of two such loops with different bounds is left out (draw in one scope's view: ``branch_view``)."""
    from agent_core import expr as _expr
    env = size_env(ev, size)
    once = _ONCE(text)
    found: dict[str, set[int]] = {}
    for init, cond, _ in for_headers(text):
        m = re.fullmatch(r"\s*(?:[\w:<>]+\s+)?([A-Za-z_]\w*)\s*=\s*0\s*", init)
        c = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(<=?)\s*(.+?)\s*", cond)
        if m is None or c is None or c.group(1) != m.group(1):
            continue
        bound = resolve(once, c.group(3))
        try:
            v = _expr.evaluate_int(bound, env) + (c.group(2) == "<=") if bound is not None else None
        except Exception:  # noqa: BLE001
            v = None
        if v is not None and v > 0:
            found.setdefault(m.group(1), set()).add(v)
    return {n: next(iter(v)) for n, v in found.items() if len(v) == 1}


def draw_pairs(ev: Evidence, a: str, b: str, size: int, seed: int, ranges: tuple[int, ...], draws: int,
               keep, guards: tuple[str, ...] = (), loops: dict[str, int] | None = None
               ) -> list[tuple[int, int]] | None:
    """(a, b) evaluated together ``draws`` times on size set ``size`` (the int arguments at its values, the file's
    integer constants), every other name drawn below a range chosen at random from ``ranges`` (``seed + size``
    seeds it), a thread or block index below its extent in the spec's launch on that size set (``launch_bounds``);
    the pairs ``keep`` accepts, where no early exit (``guards``: ``exits``) ends the thread first; a loop variable of
    ``loops`` (``loop_bounds``) below its bound. None where the names cannot be read."""
    import random
    from agent_core import expr as _expr
    env = size_env(ev, size)
    try:
        unknown = sorted((_expr.names(a) | _expr.names(b) | set().union(set(), *(_expr.names(g) for g in guards)))
                         - set(env))
    except Exception:  # noqa: BLE001
        return None
    rng = random.Random(seed + size)
    bounds = {**launch_bounds(ev, size), **(loops or {})}
    out = []
    for _ in range(draws):
        at = dict(env)
        for n in unknown:
            at[n] = rng.randrange(bounds[n]) if n in bounds else rng.randrange(rng.choice(ranges))
        try:
            ai, bi = _expr.evaluate_int(a, at), _expr.evaluate_int(b, at)
            if any(_expr.evaluate(g, at) for g in guards):
                continue  # the thread leaves (or skips this iteration) before it gets there
        except Exception:  # noqa: BLE001
            continue
        if keep(ai, bi):
            out.append((ai, bi))
    return out


def index_strides(ev: Evidence, name: str, every_value: bool = False) -> set:
    """The strides (values on every size set) by which the indices of ``name`` multiply a varying term (a thread,
    block or loop index): ``s_id * d2`` gives the values of ``d2``. ``every_value``: a local the body assigns more
    than once (``token_head`` of the query's loop and of the key's) stands for each of its values in turn."""
    values: dict[str, list[str]] = {}
    if every_value:
        text = uncast(ev.body)
        for target, value in assignments(text):
            values.setdefault(target, []).append(value)
        moved = modified(text)
        values = {n: v for n, v in values.items() if len(v) > 1 and n not in moved}
    strides = set()
    for site in index_sites(ev, name):
        site, seen = list(site), set()
        while any(unparen(t) in values and unparen(t) not in seen for _, t in site):
            t = next(unparen(t) for _, t in site if unparen(t) in values and unparen(t) not in seen)
            seen.add(t)
            site = [x for x in site if unparen(x[1]) != t] + [x for v in values[t] for x in additive_terms(unparen(v))]
        for _, t in site:
            v = known_factors(ev, factors(unparen(t)))
            if v is not None:
                strides.add(v)
    return strides
