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


def block_token(ctx: RewriteContext, v) -> re.Pattern:
    """The names that stand for the block size in host code: its macro, macros and constants defined as it, and
    the launching function's locals initialized to one of those (``const int threads = 128;``)."""
    from agent_core.templating.rewrites.syntax import KernelFacts, squash
    facts = KernelFacts(v, ctx.block)
    names = {n for n in facts.block_names - facts.block_locals if n != "blockDim.x"}
    for site in v.k.launch_sites:
        for hv in site.host_vars.values():
            if hv.init is not None and "dim3" not in hv.type and squash(hv.init.text) in names:
                names.add(hv.name)
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")


def _grid_edit(v, site, token: re.Pattern) -> tuple[int, int, str] | None:
    """(start, end, text) of the host expression a launch's grid is computed by: the grid argument itself, or the
    initializer of the host variable it names (``int blocks = (n + 255) / 256;``); None when neither names the
    block size."""
    c = site.config[0] if site.config else None
    if c is None:
        return None
    if token.search(c.text):
        return c.span.start, c.span.end, c.text
    hv = site.host_vars.get(c.text.strip())
    if hv is None or hv.init is None:
        return None
    if any(re.search(rf"\b{re.escape(hv.name)}\b", a.text) for a in site.args):
        return None  # the variable is passed to the kernel too: part of the problem, not only of the launch
    if "dim3" in hv.type:  # dim3 grid((n + 255) / 256) or dim3 grid((cols + 255) / 256, rows): its x component
        comps = dim3_components_of(v, hv)
        if not comps or any(token.search(v.t(c)) for c in comps[1:]):
            return None
        text = v.t(comps[0])
        return (comps[0].start_byte, comps[0].end_byte, text) if token.search(text) else None
    text = v.data[hv.init.span.start:hv.init.span.end].decode("utf-8")
    return (hv.init.span.start, hv.init.span.end, text) if token.search(text) else None


def dim3_components_of(v, hv) -> list:
    """The components of a ``dim3`` host variable's initializer (``dim3 grid((cols + 255) / 256, rows)``), as parse
    nodes, x first."""
    node = v.root.named_descendant_for_byte_range(hv.init.span.start, hv.init.span.end)
    return [x for x in node.named_children if x.type != "comment"] if node is not None else []


def dim3_component(v, hv):
    """The one component of a ``dim3`` host variable's initializer (``dim3 grid((n + 255) / 256)``), as a parse
    node; None when it has more or none."""
    comps = dim3_components_of(v, hv)
    return comps[0] if len(comps) == 1 else None


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
    for gy in (grid[1:] if isinstance(grid, list) else []):  # a 2-D grid: only its x follows the block's x
        if ctx.block in {n.id for n in ast.walk(ast.parse(str(gy), mode="eval")) if isinstance(n, ast.Name)}:
            return f"the launch's grid `{gy}` (y or z) follows the block size {ctx.block} too"
    v = ctx.view()
    token = block_token(ctx, v)
    if not v.k.launch_sites:
        return "the kernel is not launched in this file"
    for s in v.k.launch_sites:
        if _grid_edit(v, s, token) is None:
            return (f"the launch at line {s.span.line + 1} computes its grid `{s.config[0].text if s.config else ''}` "
                    "without the block size (write it as cdiv(n, 256) or (n + 255) / 256, or from the block's macro)")
    sp = find_spec(v.cf, ctx.kernel)
    if sp is None or sp.span is None:
        return "the spec is not a comment in this file (a sidecar spec's grid is not rewritten)"
    if "grid" not in sp.lines or not re.search(rf"\b{macro_name(ctx.block)}\b", spec_line(ctx.text, sp, "grid")[2]):
        return f"the spec's grid does not write the block size as a number ({macro_name(ctx.block)} in the template)"
    return None


def spec_line(text: str, sp, key: str) -> tuple[int, int, str]:
    """(start, end, text) of the spec comment's line that holds ``key`` (``grid``, ``block``)."""
    data = text.encode("utf-8")
    pos = 0
    for _ in range(sp.lines[key]):
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
    v = ctx.view()
    token = block_token(ctx, v)
    rep = lambda mo: f"({mo.group(0)} * {macro_name(factor)})"  # noqa: E731
    edits = {}
    for s in v.k.launch_sites:
        a, b, text = _grid_edit(v, s, token)
        edits[(a, b)] = token.sub(rep, text)  # two launches may share one host variable: edited once
    sp = find_spec(v.cf, ctx.kernel)
    a, b, line = spec_line(ctx.text, sp, "grid")
    key = line.find("grid")
    edits[(a, b)] = line[:key] + re.sub(rf"\b{m}\b", rep, line[key:])
    edits = [(a, b, t) for (a, b), t in edits.items()]
    out = RewriteContext(**{**ctx.__dict__, "launch": launch})
    out.text = apply_edits(ctx.text, edits)
    return out
