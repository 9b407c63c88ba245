"""``__launch_bounds__(BLOCK, MIN_BLOCKS)`` on a kernel that has none: the compiler may then budget registers for
exactly the block the launch uses and for MIN_BLOCKS resident blocks per SM (MIN_BLOCKS = 1: no register cap
beyond the block's). Applies only where the launch's block is exactly the block parameter (1D), or is capped by it
(``min(d, BLOCK)``: BLOCK is then the most threads a block has, which is what __launch_bounds__ bounds)."""

from __future__ import annotations

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import Rewrite, RewriteContext, apply_edits

MIN_BLOCKS = "MIN_BLOCKS"


class LaunchBounds(Rewrite):
    name = "launch_bounds"
    summary = "__launch_bounds__(BLOCK, MIN_BLOCKS) where the kernel has none"

    def why_not(self, ctx: RewriteContext) -> str | None:
        v = ctx.view()
        if v.k.launch_bounds:
            return "the kernel has __launch_bounds__ already (the structural template tunes it)"
        if v.k.macro_launch_bounds:
            return f"the kernel has __launch_bounds__({', '.join(v.k.macro_launch_bounds)}) already, through a macro"
        if ctx.block is None:
            return "the block size is not a parameter"
        if MIN_BLOCKS in ctx.params:
            return f"a parameter {MIN_BLOCKS} exists already"
        block = (ctx.launch or {}).get("block")
        block = block if isinstance(block, list) else [block]
        if not block or (str(block[0]).strip() != ctx.block and not ctx.capped) or \
                any(str(b).strip() != "1" for b in block[1:]):
            return f"the launch's block `{block}` is not exactly the parameter {ctx.block}"
        return None

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(MIN_BLOCKS, [1, 2, 3, 4, 6, 8], 1, "launch_bounds",
                      f"__launch_bounds__ min blocks per SM (the max threads is {ctx.block})")]

    def constraints(self, ctx: RewriteContext) -> list[str]:
        return [f"{ctx.block} * {MIN_BLOCKS} <= 2048"]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v = ctx.view()
        ctx = self._add_space(ctx)
        at = v.k.name_span.start
        text = apply_edits(ctx.text, [(at, at, f"__launch_bounds__({macro_name(ctx.block)}, {macro_name(MIN_BLOCKS)}) ")])
        return ctx.with_text(text, f"launch_bounds: __launch_bounds__({ctx.block}, {MIN_BLOCKS}) added")
