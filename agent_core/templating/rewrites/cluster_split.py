"""A thread's serial reduction loop split across ``SPLIT`` threads of its block and ``CLUSTER`` blocks of a
thread-block cluster (Hopper, sm_90): the twin of ``split_reduction`` for kernels with too few blocks.

``split_reduction`` puts more loads in flight per block, but the grid stays what the kernel's outputs give it: a
column sum of 4096 columns has 64-128 blocks for 132 SMs, so half the GPU waits (54% of copy bandwidth). Here
the grid gains a second dimension of ``CLUSTER`` blocks (``dim3(grid, CLUSTER)``, ``__cluster_dims__(1, CLUSTER,
1)``); the rows are dealt to ``CLUSTER * SPLIT`` threads per output (``r = start + blockIdx.y * SPLIT +
threadIdx.y, ... step SPLIT * CLUSTER``). Each block combines its partials in shared memory as in
``split_reduction``; then the cluster's first block reads the other blocks' partials through distributed shared
memory (``cluster.map_shared_rank``), in rank order, and alone runs what followed the loop. No workspace, no
atomics, no zeroed output: the launch keeps its arguments, and the sum's order is fixed (deterministic).

Applies where ``split_reduction`` does, and besides: the kernel reads no ``blockIdx.y``/``gridDim.y`` (or z),
uses no clusters already, and every launch gives a one-dimensional grid (an expression, or a ``dim3`` host
variable of one component) as does the spec comment. The template needs sm_90 or newer (the loop leaves it out
on older devices)."""

from __future__ import annotations

import re

from agent_core.model import KerntuneError, Param, macro_name
from agent_core.source.spec import find_spec
from agent_core.templating.rewrites.base import KernelView, RewriteContext
from agent_core.templating.rewrites.grid import dim3_component, spec_line
from agent_core.templating.rewrites.split_reduction import SPLIT, SplitReduction, _block_partials, _Loop

CLUSTER = "CLUSTER"
_GRID_2D = re.compile(r"\b(?:blockIdx|gridDim)\.[yz]\b|__cluster_dims__|this_cluster|cluster_group|clusterDim")


class ClusterSplit(SplitReduction):
    name = "cluster_split"
    summary = ("a thread's serial reduction loop split across SPLIT threads of its block and CLUSTER blocks of a "
               "thread-block cluster (sm_90), combined through distributed shared memory")

    def why_not(self, ctx: RewriteContext) -> str | None:
        why = super().why_not(ctx)
        if why:
            return why
        if CLUSTER in ctx.params:
            return f"a parameter {CLUSTER} exists already"
        v = ctx.view()
        if _GRID_2D.search(v.t(v.body)) or "__cluster_dims__" in v.k.signature:
            return "the kernel reads a second grid dimension or uses thread-block clusters already"
        grid = (ctx.launch or {}).get("grid")
        grid = grid if isinstance(grid, list) else [grid]
        if not grid or grid[0] is None or any(str(g).strip() != "1" for g in grid[1:]):
            return f"the launch's grid `{grid}` is not one-dimensional"
        for s in v.k.launch_sites:
            if _grid_2d_edit(v, s) is None:
                return (f"the launch at line {s.span.line + 1} does not give a one-dimensional grid "
                        f"(`{s.config[0].text if s.config else ''}`)")
        sp = find_spec(v.cf, ctx.kernel)
        if "grid" not in sp.lines or _spec_grid(spec_line(ctx.text, sp, "grid")[2]) is None:
            return "the spec comment's grid is not one expression"
        return None

    def params(self, ctx: RewriteContext) -> list[Param]:
        return super().params(ctx) + [
            Param(CLUSTER, [2, 4, 8], 2, "cluster_size",
                  "blocks of a thread-block cluster (grid y) that share each output's reduction loop; 8 is the most "
                  "a cluster may portably have", closed=True)]

    # ------------------------------------------------------------------------- what differs from split_reduction
    def _row_offset(self, var_type: str) -> str:
        return f"({var_type})(blockIdx.y * {macro_name(SPLIT)} + threadIdx.y)"

    def _row_step(self) -> str:
        return f"{macro_name(SPLIT)} * {macro_name(CLUSTER)}"

    def _combine(self, ind: str, acc_type: str, loop: _Loop, combine: str, b: str) -> str:
        c = macro_name(CLUSTER)
        remote = "kt_cluster.map_shared_rank(kt_part, kt_b)[threadIdx.x]"
        merge = f"{loop.acc} += {remote}" if loop.fn is None else f"{loop.acc} = {loop.fn}({loop.acc}, {remote})"
        publish = f"{ind}    kt_part[threadIdx.x] = {loop.acc};  // this block's value, for the cluster's first block\n"
        return (_block_partials(ind, acc_type, loop, combine, b, publish) +
                f"{ind}  cooperative_groups::cluster_group kt_cluster = cooperative_groups::this_cluster();\n"
                f"{ind}  kt_cluster.sync();  // every block's value is in its shared memory\n"
                f"{ind}  if (threadIdx.y == 0 && kt_cluster.block_rank() == 0)\n"
                f"{ind}    for (unsigned kt_b = 1; kt_b < {c}; ++kt_b) {merge};\n"
                f"{ind}  kt_cluster.sync();  // no block leaves before the first block has read its shared memory\n"
                f"{ind}}}\n")

    def _keeps(self) -> str:
        return "threadIdx.y != 0 || blockIdx.y != 0"  # the grid's y is the cluster: block y = 0 is its first block

    def _comment(self, loop: _Loop) -> str:
        return (f"// kerntune cluster_split: the loop over {loop.var} is split across {SPLIT} threads of the block "
                f"(threadIdx.y) and the {CLUSTER} blocks of a thread-block cluster (blockIdx.y); the cluster's first "
                "block combines the partials")

    def _launch(self, launch: dict, block: str) -> dict:
        grid = launch["grid"]
        return {**super()._launch(launch, block), "grid": [grid[0] if isinstance(grid, list) else grid, CLUSTER]}

    def _launch_edits(self, out: RewriteContext, ov: KernelView) -> dict[tuple[int, int], str]:
        c = macro_name(CLUSTER)
        edits = {}
        for s in ov.k.launch_sites:
            a, e, t = _grid_2d_edit(ov, s)
            edits[(a, e)] = t
        sp = find_spec(ov.cf, out.kernel)
        a, e, line = spec_line(out.text, sp, "grid")
        s0, e0, expr = _spec_grid(line)
        edits[(a, e)] = line[:s0] + f'["{expr}", "{c}"]' + line[e0:]
        # the kernel's attribute: __cluster_dims__ after __global__, else (a macro standing for `__global__ void`)
        # just before the kernel's name
        sig = ov.k.signature
        at = re.search(r"\b__global__\b", sig)
        if at is not None:
            pos = ov.k.span.start + len(sig[:at.end()].encode("utf-8"))
            edits[(pos, pos)] = f" __cluster_dims__(1, {c}, 1)"
        else:
            pos = ov.k.name_span.start
            edits[(pos, pos)] = f"__cluster_dims__(1, {c}, 1) "
        return edits

    def _note(self, loop: _Loop, line: int) -> str:
        return (f"cluster_split: the loop over {loop.var} at line {line} is split across {SPLIT} threads of the "
                f"block (threadIdx.y) and {CLUSTER} blocks of a thread-block cluster (grid y), combined in shared "
                "memory and then through distributed shared memory; the block is (BLOCK, SPLIT), the grid "
                "(grid, CLUSTER); needs sm_90")

    def _helpers(self) -> set[str]:
        return {"cluster"}


def _grid_2d_edit(v: KernelView, site) -> tuple[int, int, str] | None:
    """(start, end, new text) making a launch's grid ``(its grid, KT_CLUSTER)``: the grid argument wrapped in a
    ``dim3`` (its inner expression when it is one ``dim3(...)`` already), or a ``dim3`` host variable of one
    component given a second; None when the grid is not one-dimensional as written."""
    if not site.config:
        return None
    g = site.config[0]
    text = g.text.strip()
    c = macro_name(CLUSTER)
    hv = site.host_vars.get(text)
    if hv is not None and "dim3" in hv.type:
        if hv.init is None:
            return None
        node = dim3_component(v, hv)
        if node is None:
            return None
        return node.end_byte, node.end_byte, f", {c}"
    m = re.fullmatch(r"dim3\s*\((.*)\)", text, re.S)
    if m:
        if "," in m.group(1):
            return None
        return g.span.start, g.span.end, f"dim3({m.group(1).strip()}, {c})"
    if hv is None and re.search(r"\bdim3\b|\{", text):
        return None
    return g.span.start, g.span.end, f"dim3({text}, {c})"


def _spec_grid(line: str) -> tuple[int, int, str] | None:
    """(start, end, expression) of the spec line's grid value when it is one expression: ``"E"`` or ``["E"]``."""
    m = re.search(r"grid\s*=\s*(\[\s*\"([^\"]*)\"\s*\]|\"([^\"]*)\")", line)
    if m is None:
        return None
    return m.start(1), m.end(1), (m.group(2) if m.group(2) is not None else m.group(3))
