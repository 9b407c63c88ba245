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
           3: "interleaved pairs (up, gate)"}


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
    if e is None or len(ins) != 1 or len(outs) != 1 or len(ev.bufs()) != 2:
        return []
    x, o = ins[0], outs[0]
    if x.dtype != o.dtype or not x.counts or not o.counts or any(a != 2 * b for a, b in zip(x.counts, o.counts)):
        return []
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
    if not ds:
        return []
    T = x.dtype
    interleaved = ev.mentions(r"\[2\*") or ev.mentions(r"\*2\+1\]") or ev.mentions(r"\[\w+\*2\]")
    layouts = [2, 3, 0, 1] if interleaved else [0, 1, 2, 3]
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
                    b = Binding(e, 0.85, f"reads two halves of a `2 * {dname}` row and writes one of `{dname}`, "
                                + act_words, ev.kernel.name)
                    b.sizes = {"rows": f"({o.spec.size}) / ({d.spec})", "d": d.spec}
                    b.defines = {"KT_EXPERT_ACT": act}
                    b.conventions = {"KT_EXPERT_GATE_LAYOUT": layout}
                    if rnd is not None:
                        b.conventions["KT_EXPERT_ROUND_ACT"] = rnd
                    b.template_args = [CTYPE[T]]
                    b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), d.c]
                    b.consts = {"ESIZE": NBYTES[T]}
                    b.words = [f"out={o.name}", f"x={x.name}", f"d={d.words}", ACTS[act], LAYOUTS[layout]] + (
                        [rwords] if rwords else [])
                    b.support = dsup + asup + (2 if li == 0 else 0) + (1 if ri == 0 else 0) - di
                    out.append(b)
    return out
