"""Gated activations (SiLU/GELU-and-mul): one float input of twice the output's elements, one output.

Enumerated: which int argument (or product) is the output row length ``d`` (an argument that appears as
``2 * d`` in the body first), the activation (the math the body calls first: erf → GELU, tanh → GELU tanh,
exp → SiLU; the others after it), the layout of the gate and up halves ([gate | up], [up | gate], or
interleaved pairs either way) and, for 16-bit storage, whether the activation is rounded to the storage type
before the multiply.
"""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, div
from agent_core.templating.experts.library import Expert

ACTS = {0: "SiLU", 1: "GELU (erf)", 2: "GELU (tanh)"}
LAYOUTS = {0: "gate and up halves [gate | up]", 1: "halves [up | gate]", 2: "interleaved pairs (gate, up)",
           3: "interleaved pairs (up, gate)", 4: "gate and up as two tensors"}


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def _acts(ev: Evidence) -> list[tuple[int, str, int]]:
    """(KT_EXPERT_ACT, words of the old reason, support): what the body's math calls say first."""
    found = []
    if ev.has("erff", "erf", "normcdff", "erfcf"):
        found.append((1, "erff → GELU-and-mul"))
    if ev.has("tanhf", "tanh"):
        found.append((2, "tanhf → GELU(tanh)-and-mul"))
    if ev.has("expf", "__expf", "exp", "exp2f", "hexp", "__frcp_rn"):
        found.append((0, "x / (1 + expf(-x)) → SiLU-and-mul"))
    seen = {a for a, _ in found}
    rest = [(a, f"{ACTS[a]}-and-mul (assumed)") for a in (0, 1, 2) if a not in seen]
    return [(a, w, 4) for a, w in found] + [(a, w, 0) for a, w in rest]


def enumerate_bindings(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    e = lib.get("act_and_mul")
    ins, outs = ev.bufs("in", FLOATS), ev.bufs("out", FLOATS)
    if e is None or len(ins) not in (1, 2) or len(outs) != 1 or len(ev.bufs()) != len(ins) + 1:
        return []
    o = outs[0]
    if len(ins) == 2:  # gate and up as two tensors of the output's shape
        return _two_tensors(ev, e, ins, o)
    x = ins[0]
    if x.dtype != o.dtype or not x.counts or not o.counts or any(a != 2 * b for a, b in zip(x.counts, o.counts)):
        return []
    ds = _row_lengths(ev, o)
    if not ds:
        return []
    T = x.dtype
    interleaved = ev.mentions(r"\[2\*") or ev.mentions(r"\*2\+1\]") or ev.mentions(r"\[\w+\*2\]")
    layouts = [2, 3, 0, 1] if interleaved else [0, 1, 2, 3]
    return _bindings(ev, e, [x], o, ds, layouts, T)


def _two_tensors(ev: Evidence, e: Expert, ins, o) -> list[Binding]:
    a, b = ins
    if not (a.dtype == b.dtype == o.dtype) or not o.counts or a.counts != o.counts or b.counts != o.counts:
        return []
    ds = _row_lengths(ev, o)
    if not ds:
        return []
    return _bindings(ev, e, [a, b], o, ds, [4], o.dtype) + _bindings(ev, e, [b, a], o, ds, [4], o.dtype, -3)


def _row_lengths(ev: Evidence, o) -> list:
    """(the output row length as the wrapper computes it, support): int arguments (or products) that divide the
    output and are not all of it; one used as `2 * d` in the body first."""
    targets = []
    for a in ev.ints():
        if a.counts and div(o.counts, a.counts) and a.counts != o.counts and a.counts not in targets:
            targets.append(a.counts)
    for a, b in itertools.combinations(ev.ints(), 2):
        if a.counts and b.counts:
            t = tuple(p * q for p, q in zip(a.counts, b.counts))
            if div(o.counts, t) and t != o.counts and t not in targets:
                targets.append(t)
    ds = []
    for t in targets:
        xs = [s for s in ev.sizes(t) if not s.c[0].isdigit()]
        if xs:
            name = xs[0].words.strip("`")
            doubled = ev.mentions(rf"\b2\*\(?{re.escape(name)}\b") or ev.mentions(rf"\b{re.escape(name)}\)?\*2\b")
            ds.append((xs[0], (8 if doubled else 0) + 2 * ev.uses(xs[0])))
    return ds


def _bindings(ev: Evidence, e: Expert, xs: list, o, ds: list, layouts: list[int], T: str,
              extra: int = 0) -> list[Binding]:
    """Every (row length, activation, layout, rounding) binding of the inputs ``xs`` (one gated row, or the gate
    and the up tensors) and the output."""
    x = xs[0]
    rounds = [(None, "")]
    if T != "f32":
        rounds = [(1, f"activation rounded to {T} before the multiply"), (0, "activation kept in fp32")]
        if len(re.findall(r"__float2half(_rn)?\(|__float2bfloat16(_rn)?\(|static_cast<", ev.body)) < 2:
            rounds.reverse()
    out = []
    for di, (d, dsup) in enumerate(ds):
        dname = d.words.strip("`")
        for act, act_words, asup in _acts(ev):
            for li, layout in enumerate(layouts):
                for ri, (rnd, rwords) in enumerate(rounds):
                    b = Binding(e, 0.85, (f"reads two halves of a `2 * {dname}` row and writes one of `{dname}`, "
                                          if len(xs) == 1 else f"reads a gate and an up row of `{dname}` and writes "
                                          "one, ") + act_words, ev.kernel.name)
                    b.sizes = {"rows": f"({o.spec.size}) / ({d.spec})", "d": d.spec}
                    b.defines = {"KT_EXPERT_ACT": act}
                    b.conventions = {"KT_EXPERT_GATE_LAYOUT": layout}
                    if rnd is not None:
                        b.conventions["KT_EXPERT_ROUND_ACT"] = rnd
                    b.template_args = [CTYPE[T]]
                    b.call_args = [_cast(T, o.name, False)] + [_cast(T, a.name, True) for a in xs] + [d.c]
                    b.consts = {"ESIZE": NBYTES[T]}
                    roles = [f"x={x.name}"] if len(xs) == 1 else [f"gate={xs[0].name}", f"up={xs[1].name}"]
                    b.words = [f"out={o.name}", *roles, f"d={d.words}", ACTS[act], LAYOUTS[layout]] + (
                        [rwords] if rwords else [])
                    b.support = dsup + asup + (2 if li == 0 else 0) + (1 if ri == 0 else 0) - di + extra
                    out.append(b)
    return out
