"""The analysis state every step reads and extends: the kernel and its file, the parameters lifted so far
(each with the literal sites that follow it), which literal belongs to which parameter, the constraints, the
notes on what was not lifted, and what the launch steps found (the block parameter, whether the grid
follows it, ...). Its registry operations (``add``, ``tie``, ``constrain``) are how steps record findings."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

from agent_core import expr
from agent_core.model import CudaFile, Kernel, Site
from agent_core.templating.structural.source import Cap, File, Source


def param_name(raw: str) -> str:
    """A parameter name from a C name: ``kBlockSize`` -> ``K_BLOCK_SIZE``."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", raw).upper()
    s = re.sub(r"\W", "_", s).strip("_") or "P"
    if s[0].isdigit():
        s = "P_" + s
    return s


@dataclass
class Lifted:
    """A parameter as the analysis builds it: its domain so far and the literals that follow it."""
    name: str
    kind: str
    original: int
    values: list[int]
    why: str
    sites: list[Source] = field(default_factory=list)


class Analysis:
    """What the analysis of one kernel has found so far (the steps are functions taking it)."""

    def __init__(self, cf: CudaFile, k: Kernel):
        self.cf, self.k = cf, k
        self.f = File.of(cf)
        self.params: dict[str, Lifted] = {}
        self.by_key: dict[tuple[int, int], str] = {}
        self.constraints: list[str] = []
        self.notes: list[str] = []  # why something was not lifted
        self.body = self.f.node(k.body_span)
        self.body_text = cf.text.encode("utf-8")[k.body_span.start:k.body_span.end].decode("utf-8", "replace")
        self.block: str | None = None  # the block-size parameter (x)
        self.block_y: str | None = None  # the block-size parameter in y, when the block is 2D
        self.warps: str | None = None  # the warp-count parameter of a block written as WARPS * 32
        self.block_2d = False  # the launch's block is a dim3 of 2 or 3 components
        self.block_tp: str | None = None  # the kernel's template parameter that is the block size, if any
        self.tp_of: dict[str, str] = {}  # template-argument parameter -> the kernel's template parameter name
        self.grid_tied = False  # the launch's grid follows the block parameter (`cdiv(n, 256)`)
        self.items: str | None = None  # the items-per-thread parameter of a grid-stride kernel's grid
        self.launch: dict | None = None  # the spec's launch with its literal block size tied to the parameters
        self.caps = True  # a block capped by a constant (`std::min(d, 1024)`) may make the cap the block parameter
        self.block_cap: Cap | None = None  # the launch's capped block, where the block parameter is its cap
        self.cap_refused: str | None = None  # why the cap cannot be the block parameter (analyze runs again without)

    # ------------------------------------------------------------------------------------- registry
    def _unique(self, name: str) -> str:
        if keyword.iskeyword(name.lower()) or name in expr.FUNCTIONS:
            name = name + "_P"
        base, i = name, 2
        while name in self.params:
            name = f"{base}_{i}"
            i += 1
        return name

    def add(self, src: Source, name: str, kind: str, values: list[int], why: str) -> str:
        """A new parameter of ``src`` (or the one it already belongs to): its name."""
        if src.key in self.by_key:
            return self.by_key[src.key]
        name = self._unique(name)
        self.params[name] = Lifted(name, kind, src.value, sorted(set(values) | {src.value}), why, [src])
        self.by_key[src.key] = name
        return name

    def tie(self, src: Source, param: str, render: str = "{value}") -> None:
        """Make ``src`` a site of ``param``; ``render`` for a derived literal (the 255 of ``(n + 255) / 256``
        is ``{value} - 1``; apply folds it back to a number)."""
        if src.key in self.by_key:
            return
        src.render = render
        self.params[param].sites.append(src)
        self.by_key[src.key] = param

    def constrain(self, c: str, env: dict[str, int] | None = None) -> None:
        env = env or {n: p.original for n, p in self.params.items()}
        try:
            if not expr.evaluate(c, env):
                return  # never impose a constraint the original configuration breaks
        except expr.ExprError:
            return
        if c not in self.constraints:
            self.constraints.append(c)

    def refuse_cap(self, why: str) -> None:
        """The capped block cannot be the block parameter (``why``, for the user): the analysis runs again with
        the block left alone (``analysis.analyze``)."""
        if self.block_cap is not None and self.cap_refused is None:
            self.cap_refused = why

    def drop_pow2(self, name: str) -> None:
        """Forget ``is_pow2(name)``: the block size's own step (block_pow2) decides."""
        self.constraints = [c for c in self.constraints if c != f"is_pow2({name})"]

    # ------------------------------------------------------------------------------------- results
    def sites(self) -> list[Site]:
        out = []
        for p in self.params.values():
            for s in p.sites:
                out.append(Site(param=p.name, span=s.span, original_text=s.text, render=s.render))
        out.sort(key=lambda s: s.span.start)
        return out

    def why_nothing(self) -> str:
        parts = list(dict.fromkeys(self.notes))
        if not self.k.launch_bounds:
            parts.append("no __launch_bounds__")
        if not self.k.template_params:
            parts.append("no template parameters")
        return "; ".join(parts)
