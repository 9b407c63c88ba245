"""What every normalization binder reads besides the buffers: eps (an argument, a literal or a constant of the file:
``_eps_candidates``), what the weight is offset by (``_weight_offsets``; under a flag: ``_flagged_offsets``), and the
numeric conventions (eps inside or outside the root, the normalized value rounded before the weight multiply or not:
``_norm_conventions``)."""

from __future__ import annotations

import functools
import re

from agent_core.templating.experts.evidence import (ArgUse, Evidence, call_arguments, closing, const_value, feeding,
                                                    flows, statements, value_operands)
from agent_core.templating.experts.families.rows.common import ROOTS, _guarding_flag
from agent_core.templating.experts.library import Expert


_TO_T = r"__float2half(_rn)?\(|__float2bfloat16(_rn)?\(|__floats2half2_rn\(|static_cast<(__half|__nv_bfloat16|half|T)>"


# a float literal one added to something (Gemma's `1.0f + w`); an integer 1 is index arithmetic
_ONE_ADDED = re.compile(r"(?<![\w.])(?:1\.0*|1\.?0*[fF])\+|\+(?:1\.0*|1\.?0*[fF])(?![\w.])")


def _root_statements(ev: Evidence) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The body's statements (whitespace removed) that take a root (``rsqrtf(ms + eps)``, ``1 / (sqrtf(ms) +
    eps)``) or assign a local the root's argument names (``var = ms + eps; inv = rsqrtf(var)``), and the others.
    One step, not the whole data flow: a row read and rewritten in place feeds the root and is written from the
    weight too."""
    return _split_root_statements(ev.body)


@functools.lru_cache(maxsize=64)
def _split_root_statements(body: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``_root_statements`` of one body, split once: every eps and weight-offset enumeration of a kernel reads it."""
    named = {n for _, args in call_arguments(body, "|".join(ROOTS)) for a in args for n in re.findall(r"\w+", a)}
    root, rest = [], []
    for target, _, stmt in statements(body):
        flat = re.sub(r"\s+", "", stmt)
        if re.search(r"\b(?:" + "|".join(ROOTS) + r")\(", flat) or target in named:
            root.append(flat)
        else:
            rest.append(flat)
    return tuple(root), tuple(rest)


def _only_multiplies(flat: str, lit: str) -> bool:
    """Every use of the literal ``lit`` in the body (whitespace removed) is an operand of ``*``."""
    uses = [m for m in re.finditer(rf"(?<![\w.]){re.escape(lit)}(?![\w.])", flat)]
    return bool(uses) and all(flat[max(m.start() - 1, 0)] == "*" or flat[m.end():m.end() + 1] == "*" for m in uses)


def _top_level_sum(text: str) -> bool:
    """Whether ``text`` (an expression) adds something at its top level (``ms + eps``; not inside a call or a
    bracket, not ``++``)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "+" and depth == 0 and text[i + 1:i + 2] != "+" and text[i - 1:i] != "+":
            return True
    return False


def _shows_no_eps(ev: Evidence) -> bool:
    """Whether nothing in the kernel could be an eps: no float argument, no small float literal, no name the file sets
    to a small number (``#define EPS 1e-5f``, ``constexpr float kEps = ...``) or a float limit in the body, and no
    root call's argument a sum at its top level (``rsqrtf(var + EPS)``). TensorRT's ``rsqrt(sumKV.value - mu * mu)``
    takes the root of the variance itself: no epsilon at all."""
    if ev.floats() or ev.literals or re.search(r"epsilon\s*\(|FLT_EPSILON|FLT_MIN", ev.body):
        return False
    for n in set(re.findall(r"\b[A-Za-z_]\w*\b", ev.body)):
        v = ev.constants.get(n)
        if v is None and n in ev.defs:
            cv = const_value(ev.defs[n], ev)
            v = cv[1] if cv else None
        if v is not None and 0 < abs(v) <= 1e-3:
            return False
    return not any(_top_level_sum(a) for _, args in call_arguments(ev.body, "|".join(ROOTS)) for a in args)


def _added(flat: str, name: str) -> bool:
    """Whether ``name`` is an operand of an addition in the (whitespace-free) text: ``+eps``, ``eps+``, ``+=eps``,
    widened or parenthesized (``+(float)eps``, ``(eps)+``), or an argument of an add intrinsic."""
    n = re.escape(name)
    return re.search(rf"(?<!\+)\+=?[(]*(?:\((?:float|double)\))?[(]*{n}\b(?![\[(.])"
                     rf"|(?<![\w.]){n}[)]*\+(?![+=])|__fadd_r[nzud]\([^;]*\b{n}\b", flat) is not None


def _eps_candidates(ev: Evidence) -> list[tuple[str, str, int]]:
    """(C expression, words, support) for eps: float arguments (those the root's statements use first, those they
    add first of all: ``rsqrtf(ms / n + eps)``, ``var = ms + eps``), then small float literals of the body, then the
    file's small constants the root's statements use (``_named_eps``); when the kernel shows none of them, no eps at
    all where nothing could be one (``_shows_no_eps``), then the usual defaults. What an argument is called says
    nothing."""
    root = "\n".join(_root_statements(ev)[0])
    out = [(f"(float)({a.name})", f"eps=`{a.name}`", (2 if _added(root, a.name) else 1)
            + (2 if re.search(rf"\b{re.escape(a.name)}\b", root) else 0)) for a in ev.floats()]
    lit = [(f"(float)({x if x[-1] in 'fF' else x + 'f'})", f"eps={x}", 1) for x in ev.literals]
    # a literal that only ever multiplies (TVM's `sum * 2.441406e-04f`, the mean as a product by 1 / hidden) is a
    # factor, not eps: after the literals something is added to (both verify at the tolerances: eps is too small
    # to show, so the order decides)
    lit.sort(key=lambda c: _only_multiplies(ev.flat, c[1][4:]))
    named = _named_eps(ev, root, {c[0] for c in lit})
    if out or lit or named:
        return out + lit + named
    none = [("0.f", "no eps (nothing an eps could be)", 1)] if ev.has(*ROOTS) and _shows_no_eps(ev) else []
    return none + [("1e-5f", "eps=1e-5 (assumed)", 0), ("1e-6f", "eps=1e-6 (assumed)", 0)]


def _named_eps(ev: Evidence, root: str, seen: set[str]) -> list[tuple[str, str, int]]:
    """(C expression, words, support) for eps held by a name the file sets to a small number outside the kernel
    (LightSeq's namespace ``const float epsilon = 0.000000000001;``, a ``#define EPS 1e-5f``, a ``constexpr float``)
    that the root's statements use (``rsqrtf(var / n + epsilon)``): its value, written into the wrapper as a float
    (the wrapper cannot see the file's namespaces). A name the body assigns is a local: its literal is the body's; a
    kernel argument of the same name is the argument (the file's name is the host code's)."""
    out = []
    params = {a.name for a in ev.args}
    for n in dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*\b", root)):
        if n in params or re.search(rf"(?<![\w.]){re.escape(n)}\s*=(?!=)", ev.body):
            continue  # a kernel argument of that name shadows the file's (Inferflow's launcher: `const float eps`)
        cv = const_value(n, ev) if n in ev.constants or n in ev.defs else None
        if cv is None or not 0 < abs(cv[1]) <= 1e-3:
            continue
        c = f"(float)({cv[0]})"
        if c in seen:
            continue
        seen.add(c)
        out.append((c, f"eps=`{n}` ({cv[0]})", 1 + (2 if _added(root, n) else 0) + 2))
    return out


def _weight_offsets(ev: Evidence, e: Expert | None) -> list[tuple[str | None, str, int]]:
    """(C expression or None, words, support) for what the weight is offset by before the multiply: nothing, then
    where the body shows it, a float argument added to something outside the root's statements (FlashInfer's
    ``weight_bias + w``) and a float literal one added to something there (Gemma's weight stored as its offset
    from 1: ``1.0f + w``), those first. Only for an expert with the KT_EXPERT_WEIGHT_OFFSET convention."""
    out: list[tuple[str | None, str, int]] = [(None, "", 0)]
    if e is None or "KT_EXPERT_WEIGHT_OFFSET" not in e.conventions:
        return out
    rest = "\n".join(_root_statements(ev)[1])
    for a in ev.floats():
        n = re.escape(a.name)
        if re.search(rf"\+{n}\b|\b{n}\+", rest):
            out.append((f"(float)({a.name})", f"weight plus `{a.name}`", 3))
    if _ONE_ADDED.search(rest):
        out.append(("1.f", "weight plus 1 (stored as its offset from 1)", 3))
    return out


def _round_evidence(ev: Evidence) -> int:
    return len(re.findall(_TO_T, ev.body))


def _eps_outside(flat: str) -> bool:
    """Whether a root call's result is what something is added to (``sqrtf(ms) + eps``) while nothing is added
    inside it (``rsqrtf(ms + eps)``)."""
    outside = inside = False
    for m in re.finditer(r"r?sqrtf?\(|__fsqrt_rn\(|__frsqrt_rn\(", flat):
        i = closing(flat, m.end())
        arg = flat[m.end():i - 1]
        if re.search(r"\+", arg):
            inside = True
        elif flat[i:i + 1] == "+":
            outside = True
    return outside and not inside


def _norm_conventions(ev: Evidence, e: Expert | None, T: str) -> list[tuple[dict, list[str], int]]:
    """The numeric conventions a normalization may follow, the likelier first: eps inside the root (rsqrt(ms +
    eps)) or outside (1 / (sqrt(ms) + eps)); for 16-bit storage, the normalized value rounded to the storage type
    before the weight multiply or not."""
    if e is None:
        return []
    inside_first = not _eps_outside(ev.flat)
    eps = [(1, "eps inside the root"), (0, "eps outside the root (1 / (sqrt + eps))")]
    if not inside_first:
        eps.reverse()
    if "KT_EXPERT_EPS_INSIDE" not in e.conventions:
        eps = [(None, "eps inside the root")]
    rnd: list[tuple[int | None, str]] = [(None, "")]
    if T != "f32" and "KT_EXPERT_ROUND_BEFORE_WEIGHT" in e.conventions:
        rnd = [(1, f"rounded to {T} before the weight multiply"), (0, f"weight multiplied in fp32, one rounding to {T}")]
        if _round_evidence(ev) < 2:
            rnd.reverse()
    out = []
    for i, (ev_, ew) in enumerate(eps):
        for j, (rv, rw) in enumerate(rnd):
            conv = {}
            if ev_ is not None:
                conv["KT_EXPERT_EPS_INSIDE"] = ev_
            if rv is not None:
                conv["KT_EXPERT_ROUND_BEFORE_WEIGHT"] = rv
            out.append((conv, [w for w in (ew, rw) if w], -2 * i - j))
    return out


def _flag_offsets(ev: Evidence, weights: list[ArgUse]) -> list[tuple[str, str, int]]:
    """(C expression, words, support) for a weight offset by 1 only where a bool or integer argument says so
    (Transformer Engine's zero_centered_gamma: ``if (flag) g += 1.f``, or ``flag ? w + 1.f : w``): the offset is
    ``flag ? 1 : 0``, so the expert does what the original does for the flag's value."""
    flags = {a.name for a in ev.args if a.role == "scalar" and a.dtype not in ("f32", "f64", "f16", "bf16")}
    if not flags or not weights:
        return []
    flow = flows(ev.body)
    wn = {w.name for w in weights}
    one = r"(?:1\.0*|1\.?0*[fF])"
    out: list[tuple[str, str, int]] = []
    for target, at, stmt in statements(ev.body):
        if target is None or at <= 0:
            continue
        rhs = re.sub(r"\s+", "", stmt[at + 1:])
        t = re.escape(target)
        if not (stmt[at - 1] == "+" and re.fullmatch(one, rhs)
                or re.fullmatch(rf"{t}\+{one}|{one}\+{t}", rhs)):
            continue
        if not (feeding(flow, target) & wn):
            continue
        pos = stmt.rfind(target, 0, at)
        flag = _guarding_flag(ev, stmt[pos:]) if pos >= 0 else None
        if flag in flags:
            out.append((f"(({flag}) ? 1.f : 0.f)", f"weight plus 1 where `{flag}` (zero-centered)", 3))
    for n in flags:
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\)?\?", ev.flat):
            i = m.end()
            branch = ev.flat[i:ev.flat.find(":", i)] if ":" in ev.flat[i:] else ""
            if (_ONE_ADDED.search(branch) and set(re.findall(r"\b[A-Za-z_]\w*\b", branch)) & (wn | set(flow))) \
                    or re.fullmatch(r"\(?" + one + r"\)?", branch):
                out.append((f"(({n}) ? 1.f : 0.f)", f"weight plus 1 where `{n}` (zero-centered)", 3))
    return list(dict.fromkeys(out))


def _flagged_offsets(ev: Evidence, e: Expert | None, weights: list[ArgUse]) -> list[tuple[str | None, str, int]]:
    """``_weight_offsets`` and, for an expert with the offset convention, the offsets a flag selects
    (``_flag_offsets``): a literal 1 added under a flag is then no unconditional offset."""
    base = _weight_offsets(ev, e)
    if e is None or "KT_EXPERT_WEIGHT_OFFSET" not in e.conventions:
        return base
    flagged = _flag_offsets(ev, weights)
    if e.family == "layer_norm":
        # a LayerNorm body adds 1 for other reasons (Welford counts): only a 1 added to the weight under a flag,
        # which _flag_offsets reads through the weight's data flow
        return [(None, "", 0)] + flagged
    return [o for o in base if not (flagged and o[0] == "1.f")] + flagged


def _value_ops(ev: Evidence, name: str) -> tuple[bool, bool]:
    """(added, multiplied): whether the values of the buffer ``name`` (``value_operands``: read directly or through a
    local pointer made from it alone, converted, or through a local that holds one read as it is) are an operand of an
    addition (a shift: ``* rs * g[i] + b[i]``, the addend of a fused multiply-add, ``__hadd``) and whether of a
    multiplication (a scale: ``* g[i]``). What the buffer is called says nothing."""
    ops = [op for op, _ in value_operands(ev, name)]
    return "+" in ops, "*" in ops

def _shift_first(ev: Evidence, first: ArgUse, second: ArgUse) -> bool:
    """Whether of two weights the first is the shift (beta: its values only ever added) and the second the scale
    (gamma: multiplied, never only added): then gamma is the second argument."""
    a_add, a_mul = _value_ops(ev, first.name)
    b_add, b_mul = _value_ops(ev, second.name)
    return a_add and not a_mul and b_mul and not (b_add and not b_mul)
