"""A binding: one way an expert serves one user kernel, and the cap on how many of them a family proposes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from agent_core.templating.experts.library import Expert

MAX_PER_FAMILY = 16  # bindings proposed per family and kernel: each costs one cheap check before round 1


@dataclass
class Binding:
    expert: Expert
    score: float  # 0..1: how surely the kernel is of this family (the same for every binding of a family match)
    reason: str  # in words: what in the kernel suggests the family (written into the bound template)
    kernel: str
    call_args: list[str] = field(default_factory=list)  # C expressions over the user's parameter names
    template_args: list[str] = field(default_factory=list)  # C types for the expert function
    sizes: dict[str, str] = field(default_factory=dict)  # role size name -> expression over spec size names
    consts: dict[str, int] = field(default_factory=dict)  # ESIZE, CSIZE, ...: substituted into constraints
    # bind-time macros written as #define (KT_EXPERT_ACT, ...; a codebook's thresholds as the text of a C list)
    defines: dict[str, int | str] = field(default_factory=dict)
    conventions: dict[str, int] = field(default_factory=dict)  # kt:bind conventions, resolved in the source
    fixed: dict[str, list[int]] = field(default_factory=dict)  # parameters whose domain the binding narrows
    words: list[str] = field(default_factory=list)  # the binding in words: role=argument, layout, conventions
    support: int = 0  # how much of the kernel's evidence supports this binding (orders the family's bindings)
    # a reading of the kernel's arguments that the body shows against the spec's roles, capped apart from the
    # expert's other bindings and proposed before them (an output declared inout that the body writes in part and
    # never reads, read as out of place); "" for every other binding
    reading: str = ""
    # the kernel's run-time flags (``evidence.branch_flags``) the binding does not pass on: name -> the spec's value,
    # the only one verified; the wrapper traps on another (never the other branch computed wrongly)
    pinned: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """``x=arg0 out=arg1 weight=arg2, eps outside sqrt, ...``: what the loop prints and records."""
        return ", ".join(self.words) if self.words else "(default binding)"

    def copy(self) -> "Binding":
        """The binding with lists and dicts of its own (a variant of it changes them without touching it)."""
        return replace(self, call_args=list(self.call_args), template_args=list(self.template_args),
                       sizes=dict(self.sizes), consts=dict(self.consts), defines=dict(self.defines),
                       conventions=dict(self.conventions), fixed={k: list(v) for k, v in self.fixed.items()},
                       words=list(self.words), pinned=dict(self.pinned))

    def key(self) -> tuple:
        """What makes two bindings the same code (duplicates are dropped)."""
        return (self.expert.name, tuple(self.call_args), tuple(self.template_args),
                tuple(sorted(self.defines.items())), tuple(sorted(self.conventions.items())),
                tuple(sorted((k, tuple(v)) for k, v in self.fixed.items())),
                tuple(sorted(self.sizes.items())))


# Match was the name of a single guessed binding; kept for callers of the old API.
Match = Binding


def ranked(bindings: list[Binding], cap: int = MAX_PER_FAMILY) -> list[Binding]:
    """Duplicates dropped, best supported first (stable: the binder's own order breaks ties), at most ``cap``."""
    seen, out = set(), []
    for b in sorted(bindings, key=lambda b: -b.support):
        k = b.key()
        if k not in seen:
            seen.add(k)
            out.append(b)
    return out[:cap]


def cluster_twin_name(expert: str) -> str:
    """The name of an expert's cluster twin in the library."""
    return f"{expert}_cluster"


def long_twin_name(expert: str) -> str:
    """The name of an expert's long-row twin in the library."""
    return f"{expert}_long"


def cluster_twin(b: Binding, lib: dict[str, Expert]) -> Binding | None:
    """The same binding of the family's cluster expert (``<name>_cluster``: each row split over the blocks of a
    thread-block cluster, for few rows); rows read from the grid (``gridDim.x``) are the grid over the cluster
    size there. None when there is no twin, or the twin does not have the binding's conventions."""
    t = _twin(b, lib.get(cluster_twin_name(b.expert.name)), 0.3, "for few rows, each row split over a thread-block cluster")
    if t is not None:
        t.call_args = ["(int)(gridDim.x / KT_CLUSTER)" if a == "(int)gridDim.x" else a for a in b.call_args]
    return t


def long_twin(b: Binding, lib: dict[str, Expert]) -> Binding | None:
    """The same binding of the family's long-row expert (``<name>_long``: a row longer than the expert's registers
    hold, read twice: an online max-and-sum pass, then the normalized write), for a kernel whose rows the expert
    has no configuration for. None when there is none, or it does not have the binding's conventions."""
    return _twin(b, lib.get(long_twin_name(b.expert.name)), 0.0,
                 "rows longer than the registers of a block hold: two reads of each row (online max and sum)")


def _twin(b: Binding, twin: Expert | None, lower: float, words: str) -> Binding | None:
    if twin is None:
        return None
    # the twin serves the binding where it declares each convention, or the binding keeps the family's default
    if any(k not in twin.conventions and v != b.expert.conventions.get(k) for k, v in b.conventions.items()):
        return None
    t = Binding(twin, round(b.score - lower, 2), f"{b.reason}; {words}", b.kernel)
    t.call_args = list(b.call_args)
    t.template_args, t.sizes, t.consts, t.defines = list(b.template_args), dict(b.sizes), dict(b.consts), dict(b.defines)
    t.conventions = {k: v for k, v in b.conventions.items() if k in twin.conventions}
    t.words, t.support, t.pinned = list(b.words), b.support, dict(b.pinned)
    return t
