"""Softmax over a strided dimension (``softmax_channels``: x [outer, C, inner], softmax over C for every (outer,
inner) column: NCHW's channels, Caffe's / cunn's / MIOpen's channel softmax, dim=1 of a contiguous tensor).

Read by evidence, as the values the body computes: a loop ``for (c = ...; c < BOUND; ...)`` whose bound is a size the
arguments make (the channels, C) and whose variable the logits' index steps by a size S > 1 (the index at c + 1 less
the index at c, on sampled thread and block indices, the same on every sample and every index of the logits that
reads c: the channel stride, inner = S, which may be 1 on some size sets but not on all), C * S dividing the logits
(outer = the rest, a size the arguments make). A row softmax walks its row at stride 1 and is the row binders'."""

from __future__ import annotations

import random
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, Evidence, SizeExpr, _once as _ONCE,
                                                    closing, div, pointer_aliases, prod)
from agent_core.templating.experts.families.rows.common import EXPS, _cast
from agent_core.templating.experts.index_reading import all_resolved, bare, resolve, size_env
from agent_core.templating.experts.library import Expert

_LOOP = re.compile(r"\bfor\s*\(\s*(?:(?:const\s+)?(?:unsigned\s+|signed\s+)?[A-Za-z_]\w*\s+)?([A-Za-z_]\w*)\s*=[^;]*;"
                   r"\s*\1\s*<\s*([^;]+?)\s*;")


def _strides(ev: Evidence, index: str, var: str, draws: int = 200) -> tuple | None:
    """The step of ``index`` per unit of the loop variable ``var`` on every size set: index(var + 1) - index(var) with
    the other unknowns drawn at random (fixed seed); None where it is not one value on a size set."""
    from agent_core import expr as _expr
    try:
        names = _expr.names(index)
    except Exception:  # noqa: BLE001
        return None
    if var not in names:
        return None
    out = []
    for size in range(len(ev.spec.sizes)):
        env = size_env(ev, size)
        rng = random.Random(97 + size)
        seen = set()
        for _ in range(draws):
            at = dict(env)
            for n in names - set(env):
                at[n] = rng.randrange(rng.choice((2, 8, 64, 512)))
            try:
                a = _expr.evaluate_int(index, at)
                at[var] += 1
                b = _expr.evaluate_int(index, at)
            except Exception:  # noqa: BLE001
                continue
            seen.add(b - a)
        if len(seen) != 1:
            return None
        out.append(seen.pop())
    return tuple(out)


def _softmax_channels(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    e = lib.get("softmax_channels")
    if e is None or not ev.has(*EXPS):
        return []
    ins, outs, ios = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS), ev.bufs("inout", FLOATS)
    if len(ev.bufs()) != len(ins) + len(outs) + len(ios):
        return []
    if len(ins) == 1 and len(outs) == 1 and not ios:
        x, o = ins[0], outs[0]
    elif len(ios) == 1 and not ins and not outs:
        x = o = ios[0]
    else:
        return []
    if not x.counts or x.counts != o.counts:
        return []
    indices = all_resolved(ev, x.name)
    if not indices:
        return []
    text = bare(ev)
    once = _ONCE(text)
    names = pointer_aliases(text, x.name)
    found, walks = [], []
    for m in _LOOP.finditer(text):
        var, bound = m.group(1), resolve(once, m.group(2))
        if bound is None or _encloses_a_row_walk(text, m, names):
            continue
        channels = _values(ev, bound)
        # the logits' index the loop variable steps (through a local pointer to the column: relative to it)
        steps = {st for ix in indices for st in [_strides(ev, ix, var)] if st} if channels else set()
        walks.append((channels, steps.pop() if len(steps) == 1 else None))
    walks += _index_walks(ev, text, once, names, indices)
    for channels, stride in walks:
        # the stride is a size: 1 on some size sets (inner = 1, a channel softmax that is a row softmax there) but
        # not on all (a walk along the row at stride 1 is the row binders')
        if not stride or any(s < 1 for s in stride) or all(s == 1 for s in stride) or any(c <= 1 for c in channels):
            continue
        outer = div(x.counts, prod(channels, stride))
        if outer is None:
            continue
        c_ex = [x_ for x_ in ev.sizes(channels) if not x_.c[0].isdigit()]
        s_ex = [x_ for x_ in ev.sizes(stride) if not x_.c[0].isdigit()]
        o_ex = ev.sizes(outer)  # (a literal where it is the same on every size set: one image)
        from_grid = bool(c_ex and s_ex and not o_ex)
        if from_grid:
            o_ex = _outer_from_the_grid(x, c_ex[0], s_ex[0])
        if c_ex and s_ex and o_ex and (channels, stride) not in [(f[0], f[1]) for f in found]:
            found.append((channels, stride, o_ex[0], c_ex[0], s_ex[0], from_grid))
    out = []
    T, O = x.dtype, o.dtype
    fast = [1, 0] if ev.has("__expf") else [0, 1]
    for fi, (channels, stride, outer, c, s, from_grid) in enumerate(found):
        for ki, f in enumerate(fast):
            b = Binding(e, 0.85, f"walks `{c.words.strip('`')}` channels {s.words.strip('`')} elements apart (the "
                        "logits' index steps by it), a max and a sum of exp over them → softmax over the channels",
                        ev.kernel.name)
            b.sizes = {"outer": outer.spec, "channels": c.spec, "inner": s.spec}
            b.template_args = [CTYPE[T], CTYPE[O]]
            b.call_args = [_cast(O, o.name, False), _cast(T, x.name, True), outer.c, c.c, s.c]
            b.conventions = {"KT_EXPERT_FAST_EXP": f}
            b.consts = {"ESIZE": max(NBYTES[T], NBYTES[O])}
            if from_grid or 1 not in stride:  # rows a block at inner = 1: none of the spec's, or outer read from
                b.fixed = {"RB": [1]}        # the grid, which counts a block an (outer, tile)
            b.words = ([f"out=x={x.name} (in place)"] if x is o else [f"out={o.name} ({O})", f"x={x.name} ({T})"]) + [
                f"outer={outer.words}", f"channels={c.words}", f"inner={s.words} (the channel stride)",
                "__expf" if f else "expf"]
            b.support = 20 - 2 * fi - ki
            out.append(b)
    return out


# a loop whose variable is the logits' index itself, stepped by a stride from a start to an end (EDDL's
# `for (int i = start_b; i <= end_b; i += inner_stride)`)
_STEP_LOOP = re.compile(r"\bfor\s*\(\s*(?:(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+)?[A-Za-z_]\w*\s+)?"
                        r"([A-Za-z_]\w*)\s*=\s*([^;]+?)\s*;\s*\1\s*(<=?)\s*([^;]+?)\s*;\s*\1\s*\+=\s*([^;)]+?)\s*\)")


def _index_walks(ev: Evidence, text: str, once: dict, names: list[str], indices: list[str]) -> list[tuple]:
    """(channels, stride) of each loop whose variable is the logits' index itself (the logits read at it: their index
    steps by 1 a unit of it), stepped by a size S from a start to an end whose difference D is the same for every
    thread (`for (i = start; i <= start + (C - 1) * S; i += S)`): S the channel stride, D / S + 1 channels (an
    inclusive end) or ceil(D / S) (`<`), on every size set; None where one of them is not."""
    out = []
    for m in _STEP_LOOP.finditer(text):
        var, start, op, end, step = m.groups()
        if _encloses_a_row_walk(text, m, names):
            continue
        stride = _values(ev, resolve(once, step) or "")
        span = resolve(once, f"({end}) - ({start})")
        span = _strides(ev, f"kt_walk * ({span})", "kt_walk") if span else None  # the same for every thread
        steps = {st for ix in indices for st in [_strides(ev, ix, var)] if st}
        if not stride or not span or steps != {(1,) * len(stride)} or any(s < 1 for s in stride):
            continue
        channels = tuple(d // s + 1 if op == "<=" else -(-d // s) for d, s in zip(span, stride))
        out.append((channels, stride))
    return out


def _outer_from_the_grid(x, c: SizeExpr, s: SizeExpr) -> list[SizeExpr]:
    """The outer count where no argument holds it (the launch's grid does: a block row per image): the logits'
    length over channels * inner in the spec's words; in the wrapper, the expert's own grid (outer * tiles blocks,
    tiles = cdiv(inner, TX * VEC)) over its tiles."""
    if not x.spec.size:
        return []
    tile = "(KT_TX * KT_VEC)"
    return [SizeExpr(f"(int)(gridDim.x / (({s.c} + {tile} - 1) / {tile}))",
                     f"({x.spec.size}) / (({c.spec}) * ({s.spec}))", "the grid (no argument holds it)")]


def _body(text: str, m: re.Match) -> tuple[int, int]:
    """(start, end) of the statement the loop ``m`` repeats (its braces' block, or one statement)."""
    at = closing(text, text.index("(", m.start()) + 1)  # past the for's header
    rest = text[at:].lstrip()
    start = len(text) - len(rest)
    return start, (closing(text, start + 1, "{", "}") if rest.startswith("{") else text.find(";", start) + 1)


def _encloses_a_row_walk(text: str, m: re.Match, names: list[str]) -> bool:
    """Whether the loop ``m`` holds another loop that reads the logits (``names``: the buffer and the local pointers
    made from it): a loop over rows (a grid-stride walk of whole rows) around the walk of each row, not a walk of the
    channels."""
    start, end = _body(text, m)
    for inner in _LOOP.finditer(text, start, end):
        a, b = _body(text, inner)
        if any(re.search(rf"(?<![\w.]){re.escape(n)}\s*\[", text[a:b]) for n in names):
            return True
    return False


def _values(ev: Evidence, text: str) -> tuple | None:
    """``text`` (over the int arguments and the file's constants) on every size set; None where it is not."""
    from agent_core import expr as _expr
    vals = []
    for size in range(len(ev.spec.sizes)):
        try:
            vals.append(_expr.evaluate_int(text, size_env(ev, size)))
        except Exception:  # noqa: BLE001
            return None
    return tuple(vals)
