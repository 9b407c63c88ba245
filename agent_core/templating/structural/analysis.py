"""The structural analysis of one kernel: the steps in the order they run. The launch comes first (its
template arguments, then its block size, which the later steps tie to; its grid), then what the kernel
assumes of the block, the code knobs, the block-size domain's narrowing, a capped block's checks, and last the spec
written in terms of the parameters. The order matters: a step sees what the earlier ones lifted and tied."""

from __future__ import annotations

from agent_core.model import CudaFile
from agent_core.templating.structural import block, cap, grid, knobs, launch, smem, spec_edits
from agent_core.templating.structural.kernel import check_supported, find_kernel
from agent_core.templating.structural.state import Analysis


def run(a: Analysis) -> None:
    sites = launch.spec_site_first(a, a.k.launch_sites)
    if sites:
        launch.template_args(a, sites[0])
        launch.block_size(a, sites[0], primary=True)
        for s in sites[1:]:
            launch.block_size(a, s, primary=False)
        grid.grid_size(a, sites[0])
        for s in sites:
            grid.grid_follows_block(a, s)
            smem.smem_follows_block(a, s)
        grid.items_per_thread(a, sites[0])
    elif a.k.macro_launch_sites:
        lines = ", ".join(dict.fromkeys(str(s.span.line + 1) for s in a.k.macro_launch_sites))
        a.notes.append(f"no launch site of it written out in this file (launched inside the body of the macro "
                       f"{a.k.macro_launch_sites[0].macro} at line(s) {lines}: read only, not lifted)")
    else:
        a.notes.append("no launch site of it in this file")
    block.block_assumptions(a)
    knobs.launch_bounds(a)
    knobs.unroll(a)
    block.block_pow2(a)
    block.untied_block_literals(a)
    knobs.warp_lanes(a)
    cap.check_cap(a, sites)
    spec_edits.spec_launch(a)
    spec_edits.spec_template_args(a)


def analyze(cf: CudaFile, kernel: str) -> Analysis:
    """The finished analysis of ``kernel``; KerntuneError (located) when there is no such kernel or it
    cannot be analyzed."""
    k = find_kernel(cf, kernel)
    check_supported(cf, k)
    a = Analysis(cf, k)
    run(a)
    if a.block_cap is not None:
        p = a.params[a.block]
        why = a.cap_refused or (None if len(p.values) > 1 else
                                f"its cap `{' '.join(a.block_cap.text.split())}` is not tuned: {p.why}")
        if why is not None:  # the analysis as it is without caps, and why
            a = Analysis(cf, k)
            a.caps = False
            run(a)
            at = next((i + 1 for i, n in enumerate(a.notes) if n.startswith("the block size")), len(a.notes))
            a.notes.insert(at, why)
    return a
