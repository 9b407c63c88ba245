"""Shrinking the launch's grid when each thread of a grid-stride loop covers more elements.

The grid of an elementwise kernel is written from the block size (``cdiv(n, 256)``; in the structural template
``cdiv(n, KT_BLOCK)``). When a rewrite makes each thread cover ``F`` times as many elements, the grid divides by
``BLOCK * F`` instead: in the template's launch (over parameter names), in every launch of the kernel in the
host code and in the spec comment's grid (over ``KT_`` macros, so that ``apply`` writes them back as numbers).
The loop stays a grid-stride loop, so any grid remains correct; the shrink only removes idle blocks."""

from __future__ import annotations

import ast
import re

from agent_core.model import KerntuneError, macro_name
from agent_core.source.spec import find_spec
from agent_core.templating.rewrites.base import RewriteContext, apply_edits


class _Rename(ast.NodeTransformer):
    def __init__(self, name: str, new: ast.AST):
        self.name, self.new = name, new

    def visit_Name(self, node: ast.Name):
        return self.new if node.id == self.name else node


def grid_follows_block(ctx: RewriteContext) -> str | None:
    """None when the grid can be shrunk (see the module docstring), else why not."""
    if ctx.block is None:
        return "the block size is not a parameter"
    if not ctx.launch or not ctx.launch.get("grid"):
        return "the kernel has no spec giving its launch"
    grid = ctx.launch["grid"]
    gx = grid[0] if isinstance(grid, list) else grid
    if ctx.block not in {n.id for n in ast.walk(ast.parse(str(gx), mode="eval")) if isinstance(n, ast.Name)}:
        return f"the launch's grid `{gx}` does not follow the block size {ctx.block}"
    v = ctx.view()
    token = re.compile(rf"\b{macro_name(ctx.block)}\b")
    if not v.k.launch_sites:
        return "the kernel is not launched in this file"
    for s in v.k.launch_sites:
        if not s.config or not token.search(s.config[0].text):
            return (f"the launch at line {s.span.line + 1} computes its grid `{s.config[0].text if s.config else ''}` "
                    "without the block size's literal (write it as cdiv(n, 256) or (n + 255) / 256)")
    sp = find_spec(v.cf, ctx.kernel)
    if sp is None or sp.span is None:
        return "the spec is not a comment in this file (a sidecar spec's grid is not rewritten)"
    if "grid" not in sp.lines or not token.search(_spec_grid_line(ctx.text, sp)[2]):
        return f"the spec's grid does not write the block size as a number ({macro_name(ctx.block)} in the template)"
    return None


def _spec_grid_line(text: str, sp) -> tuple[int, int, str]:
    data = text.encode("utf-8")
    pos = 0
    for _ in range(sp.lines["grid"]):
        pos = data.find(b"\n", pos) + 1
    end = data.find(b"\n", pos)
    end = len(data) if end < 0 else end
    return pos, end, data[pos:end].decode("utf-8")


def shrink_grid(ctx: RewriteContext, factor: str) -> RewriteContext:
    """``ctx`` with the grid divided by ``factor`` (a parameter name) more: BLOCK becomes (BLOCK * factor) in the
    launch's grid x, in each launch site's grid and in the spec comment's grid. Check ``grid_follows_block`` first."""
    why = grid_follows_block(ctx)
    if why:
        raise KerntuneError(f"internal: the grid cannot be shrunk: {why}")
    launch = dict(ctx.launch)
    grid = list(launch["grid"]) if isinstance(launch["grid"], list) else [launch["grid"]]
    tree = ast.parse(str(grid[0]), mode="eval")
    new = ast.BinOp(ast.Name(ctx.block, ast.Load()), ast.Mult(), ast.Name(factor, ast.Load()))
    grid[0] = ast.unparse(_Rename(ctx.block, new).visit(tree))
    launch["grid"] = grid
    m = macro_name(ctx.block)
    token = re.compile(rf"\b{m}\b")
    rep = f"({m} * {macro_name(factor)})"
    v = ctx.view()
    edits = []
    for s in v.k.launch_sites:
        c = s.config[0]
        edits.append((c.span.start, c.span.end, token.sub(rep, c.text)))
    sp = find_spec(v.cf, ctx.kernel)
    a, b, line = _spec_grid_line(ctx.text, sp)
    key = line.find("grid")
    edits.append((a, b, line[:key] + token.sub(rep, line[key:])))
    out = RewriteContext(**{**ctx.__dict__, "launch": launch})
    out.text = apply_edits(ctx.text, edits)
    return out
