"""Angles without a cos/sin cache: computed in the kernel from a frequency base (``_angles``; the inverse
frequency's forms in words: ``_ANGLE_WORDS``), or read from a tensor of angles (``_angle_table``)."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.model import ArgSpec
from agent_core.templating.experts.evidence import (ArgUse, Evidence, additive_terms, assignments, call_arguments, feeding,
                                                    flows, number, plain, unparen)
from agent_core.templating.experts.index_reading import index_strides as _index_strides


_TRIG = r"(?:__)?(?:sin|cos|sincos)f?"
_POW = r"(?:__)?powf?"


def _angles(ev: Evidence) -> tuple[ArgUse, ArgUse | None, ArgUse | None, list[int], bool] | None:
    """(base, frequency scale or None, attention factor or None, the inverse-frequency forms to try (the rotary
    expert's KT_EXPERT_ANGLE), fast intrinsics) of a kernel that computes its angles; None when it does not (no
    sine or cosine fed by a ``pow`` of a float argument) or its float arguments have no one reading."""
    p = _powered(ev)
    if p is None:
        return None
    scale = [a for n, a in p.floats.items() if n in p.fed and a is not p.base]
    attn = [a for n, a in p.floats.items() if n not in p.fed and a is not p.base]
    if len(scale) > 1 or len(attn) > 1:
        return None  # more float arguments than the expert's angle has roles for
    forms = _forms(ev, p)
    if forms is None:
        return None
    return p.base, scale[0] if scale else None, attn[0] if attn else None, forms, p.fast


class _Powered(NamedTuple):
    """A kernel's angle computed from the power of a float argument: the body's data flow, its float arguments in
    use, the names a sine or cosine's argument is fed by, the base (the argument the power raises) and the power's
    exponent, and whether the sine or cosine is the fast intrinsic."""
    flow: dict
    floats: dict
    fed: set
    base: ArgUse
    exponent: str
    fast: bool


def _powered(ev: Evidence) -> _Powered | None:
    """The angle's power of an argument (``_Powered``): a float one, or an int one; None without a sine or cosine fed
    by a ``pow`` of one argument whose values are known numbers."""
    trig = call_arguments(ev.body, _TRIG)
    pows = call_arguments(ev.body, _POW)
    if not trig or not pows:
        return None
    flow = flows(ev.body)
    floats = {a.name: a for a in ev.floats() if re.search(rf"\b{re.escape(a.name)}\b", ev.body)}  # the ones used
    fed = set().union(*(feeding(flow, args[0]) for _, args in trig if args and args[0]))
    base = exponent = None
    # the base a float argument, or an int one (Gemma's `base_frequency: int`, converted where it is raised)
    bases = {**floats, **{a.name: a for a in ev.ints() if a.name not in floats}}
    for fname, args in pows:
        src = feeding(flow, args[0]) & set(bases) if len(args) == 2 else set()
        if fname in fed and len(src) == 1:
            base, exponent = bases[src.pop()], args[1]
            break
    if base is None:  # a base the code fixes: a literal (llama2.c's `powf(10000.0f, ...)`) or a constant of the file
        for fname, args in pows:
            if fname in fed and len(args) == 2 and not (feeding(flow, args[0]) & set(floats)):
                base, exponent = _fixed_base(ev, args[0]), args[1]
                if base is not None:
                    break
    if base is None or not base.counts or any(not isinstance(v, (int, float)) for v in base.counts):
        return None
    return _Powered(flow, floats, fed, base, exponent, any(n.startswith("__") for n, _ in trig))


def _fixed_base(ev: Evidence, text: str) -> ArgUse | None:
    """The power's base where the code fixes it: a float literal (a ``(float)`` cast of one too), or a name the file
    sets to one number (``ev.constants``), as an argument-like value (its name the C literal the wrapper passes); None
    otherwise."""
    value = number(unparen(re.sub(r"^\(\s*float\s*\)", "", unparen(text))), ev.constants)
    if value is None or value <= 0:
        return None
    lit = repr(value) + "f"
    return ArgUse(ArgSpec(lit, "scalar", "f32", value=lit), True, True, False, -1, (value,) * len(ev.spec.sizes))


def _forms(ev: Evidence, p: _Powered) -> list[int] | None:
    """The inverse-frequency forms to try, the one the body shows first: a base above 1 raised to minus, or divided
    by, its power; a base below 1 raised to ``i`` or to ``2i/rot``. None for a base on both sides of 1."""
    if all(v > 1 for v in p.base.counts):
        inverse = re.search(r"\b1(\.0*)?[fF]?\s*/\s*\(?\s*(__)?powf?\s*\(", ev.body) is not None
        # or a value divided by a local the power is assigned to (Gemma's `position / timescale`)
        powered = {n for n, v in assignments(ev.body) if re.match(rf"\s*\(?\s*{_POW}\s*\(", v)}
        inverse = inverse or any(re.search(rf"/\(*{re.escape(n)}\b", plain(ev.body)) for n in powered)
        return [2, 0] if inverse else [0, 2]
    if all(0 < v < 1 for v in p.base.counts):
        return [3, 1] if "/" in p.exponent else [1, 3]
    return None


_ANGLE_WORDS = {0: "pos * {b}^(-2i/rot)", 1: "pos * {b}^i", 2: "pos / {b}^(2i/rot)", 3: "pos * {b}^(2i/rot)",
                4: "pos / {b}^(2i/rot) in double"}


class _AngleTable(NamedTuple):
    """A float input that holds the angles themselves (Transformer Engine's and Megatron's ``freqs``, position *
    inv_freq): the body takes the sine and cosine of values read from it. Whether through the fast intrinsics, and
    the row strides its index multiplies a varying term by (values on every size set; empty: not read)."""
    fast: bool
    strides: set


def _angle_table(ev: Evidence, c: ArgUse) -> _AngleTable | None:
    """The cache ``c`` as a tensor of angles: a sine or cosine (sincosf, __sincosf, sinf, __cosf, ...) whose argument
    is computed from a value read from ``c``; None when none is."""
    flow = flows(ev.body)
    fed = [n for n, args in call_arguments(ev.body, _TRIG) if args and c.name in feeding(flow, args[0])]
    if not fed:
        return None
    return _AngleTable(all(n.startswith("__") for n in fed), _index_strides(ev, c.name))


_CLAMP_LOW = re.compile(r"\b(?:fmaxf|fmax|max)\((?:0(?:\.0*)?[fF]?,|[^,()]+,0(?:\.0*)?[fF]?\))")
_CLAMP_HIGH = re.compile(r"\b(?:fminf|fmin|min)\((?:1(?:\.0*)?[fF]?,|[^,()]+,1(?:\.0*)?[fF]?\))")


def _smooth_angles(ev: Evidence) -> tuple[ArgUse, ArgUse, ArgUse | None, list[int], bool, ArgUse, ArgUse] | None:
    """Llama 3.1's frequency rescaling computed in the kernel (FlashInfer's BatchQKApplyLlama31Rotary*): (base,
    frequency scale, attention factor or None, the inverse-frequency forms, fast intrinsics, smooth_a, smooth_b), or
    None. Read by evidence: a local assigned ``f * a + b`` (either order) where ``f`` is computed from the power of
    the base and ``a``, ``b`` are float arguments, the body clamping a value to [0, 1] (a max with 0 and a min with
    1, or ``__saturatef``); the one other float argument that feeds the angle is the frequency scale (the
    interpolation ``(1 - s) * (f * scale) + s * f``)."""
    if not ((_CLAMP_LOW.search(ev.flat) and _CLAMP_HIGH.search(ev.flat)) or "__saturatef(" in ev.flat):
        return None
    p = _powered(ev)
    if p is None:
        return None
    flow, floats, base = p.flow, p.floats, p.base
    roles = [n for n in floats if n in p.fed and n != base.name]
    attn = [a for n, a in floats.items() if n not in p.fed and a is not base]
    if len(roles) != 3 or len(attn) > 1:
        return None
    smooth = None
    for _, value in assignments(ev.body):
        terms = additive_terms(unparen(value.strip()))
        if len(terms) != 2 or any(sign < 0 for sign, _ in terms):
            continue
        for (_, prod_t), (_, add_t) in (terms, terms[::-1]):
            factors = [unparen(f) for f in re.split(r"\*", prod_t)]
            add_t = unparen(add_t)
            if len(factors) != 2 or add_t not in roles:
                continue
            for f, a in (factors, factors[::-1]):
                if a in roles and a != add_t and base.name in feeding(flow, f):
                    smooth = (floats[a], floats[add_t])
    if smooth is None:
        return None
    scale = [floats[n] for n in roles if n not in (smooth[0].name, smooth[1].name)]
    forms = _forms(ev, p)
    if forms is None:
        return None
    return base, scale[0], attn[0] if attn else None, forms, p.fast, smooth[0], smooth[1]
