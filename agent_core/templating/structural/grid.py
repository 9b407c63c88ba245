"""The launch's grid: a fixed grid of a grid-stride loop becomes GRID; a grid written from the literal block
size (``cdiv(n, 256)``) follows the block parameter; the items per thread a grid-stride kernel's grid is
sized for (``cdiv(n, 256 * 4)``) become ITEMS."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core.model import LaunchSite
from agent_core.templating.structural.domains import GRIDS, ITEMS
from agent_core.templating.structural.source import CDIV_FUNCS, Resolver, Source, dim3_components, int_literal, span_of
from agent_core.templating.structural.state import Analysis, param_name
from agent_core.templating.structural.syntax import in_arithmetic, launch_arg_names, walk


def grid_size(a: Analysis, site: LaunchSite) -> None:
    """A constant grid of a grid-stride kernel (its loop covers any size) becomes a parameter."""
    if not grid_stride(a):
        return
    if not re.search(r"\bgridDim\s*\.\s*x\b", a.body_text):
        return  # the loop strides over y or z (`i1 += gridDim.y`): more blocks in x would only repeat the work
    r = Resolver(a.f, site.host_vars)
    node = a.f.node(site.config[0].span)
    comps = dim3_components(a.f, r, node)
    x = comps[0] if comps else node
    src = r.resolve(x)
    if src is None:
        return  # the grid follows the problem size: nothing fixed to tune
    if src.key in a.by_key:
        return
    name = a.add(src, param_name(src.name) if src.name else "GRID", "grid_size", GRIDS,
                 f"blocks in the grid of the grid-stride loop (which covers any size), from {src.where}")
    a.constrain(f"{name} >= 1")
    a.constrain(f"{name} <= 2147483647")


def grid_follows_block(a: Analysis, site: LaunchSite) -> None:
    """Literals of the grid's x expression that are the literal block size: ``cdiv(n, 256)`` with
    ``<<<..., 256>>>`` makes the 256 a site of the block parameter, so the grid keeps covering the
    problem when the block changes; the 255 of ``(n + 255) / 256`` becomes ``BLOCK - 1``. A host variable
    that is also passed to the kernel (``num_groups = n / 128`` launched as ``<<<num_groups, 128>>>(...,
    num_groups)``) is part of the problem, not of the launch shape: its literals are left alone."""
    if a.block is None or not site.config:
        return
    p = a.params[a.block]
    if p.kind != "block_size":
        return
    if any(s.name for s in p.sites):
        a.grid_tied = a.grid_tied or grid_mentions(a, site, {s.name for s in p.sites if s.name})
        return  # a named block size (macro, variable) is followed by name already
    exact: list[Source] = []
    derived: list[tuple[Source, str]] = []
    for x in _grid_x_nodes(a, site, Resolver(a.f, site.host_vars), follow_dim3=True):
        if x.type != "number_literal":
            continue
        v = int_literal(a.f.t(x))
        if v is None or (x.start_byte, x.end_byte) in a.by_key or not in_arithmetic(a.f, x):
            continue  # a grid that is just `256` is its own thing, not the block size
        src = Source(span_of(x), v, a.f.t(x), None, f"line {x.start_point.row + 1}")
        if v == p.original:
            exact.append(src)
        elif v == p.original - 1:
            par = x.parent
            additive = par is not None and par.type == "binary_expression" and \
                a.f.t(par.child_by_field_name("operator")) == "+"
            derived.append((src, "{value} - 1" if additive else "({value} - 1)"))
    if not exact:
        return  # `n + 255` alone is not the block size
    a.grid_tied = True
    for src in exact:
        a.tie(src, a.block)
    for src, render in derived:
        a.tie(src, a.block, render)


def items_per_thread(a: Analysis, site: LaunchSite) -> None:
    """In a grid-stride kernel launched on ``cdiv(n, 256 * 4)`` blocks, the 4 (items per thread the grid
    is sized for) can be anything: the loop covers the problem with any grid. It becomes ITEMS."""
    if a.block is None or not site.config or not grid_stride(a):
        return
    r = Resolver(a.f, site.host_vars)
    ceil, found = False, []
    for x in _grid_x_nodes(a, site, r, follow_dim3=False):
        if x.type == "call_expression":
            fn = x.child_by_field_name("function")
            ceil = ceil or (fn is not None and a.f.t(fn).split("::")[-1] in CDIV_FUNCS)
        elif x.type == "binary_expression":
            op = a.f.t(x.child_by_field_name("operator"))
            lt, rt = x.child_by_field_name("left"), x.child_by_field_name("right")
            if lt is None or rt is None:
                continue
            if op == "/" and any(y.type == "binary_expression" and
                                 a.f.t(y.child_by_field_name("operator")) == "+" for y in walk(lt)):
                ceil = True
            if op == "*":
                for u, b in ((lt, rt), (rt, lt)):
                    if b.type == "number_literal" and (b.start_byte, b.end_byte) not in a.by_key \
                            and _is_block(a, u, r):
                        found.append(b)
    if not found:
        return
    where = f"line {found[0].start_point.row + 1}"
    values = {int_literal(a.f.t(b)) for b in found}
    if not ceil or len(values) != 1 or None in values or min(values) < 1:  # type: ignore[type-var]
        a.notes.append(f"the items per thread of the grid at {where} are not lifted: the grid is not a "
                       "round-up division by one product of the block size")
        return
    srcs = [Source(span_of(b), int_literal(a.f.t(b)), a.f.t(b), None, f"line {b.start_point.row + 1}")
            for b in found]
    k = srcs[0].value
    name = a.add(srcs[0], "ITEMS", "items_per_thread", ITEMS,
                 f"items per thread the grid is sized for ({k} at {where}); the grid-stride loop covers "
                 "the problem with any grid, so this only trades blocks for work per thread")
    for src in srcs[1:]:
        a.tie(src, name)
    a.items = name
    a.constrain(f"{name} >= 1")


def grid_stride(a: Analysis) -> bool:
    """The kernel walks its data in a grid-stride loop (a step of ``gridDim``, directly or through a
    variable)."""
    if a.body is None or "gridDim" not in a.body_text:
        return False
    strided: set[str] = set()
    for n in walk(a.body):
        if n.type == "init_declarator":
            v = n.child_by_field_name("value")
            d = n.child_by_field_name("declarator")
            if v is not None and d is not None and "gridDim" in a.f.t(v):
                strided.add(a.f.t(d))
        elif n.type == "assignment_expression":
            op = n.child_by_field_name("operator")
            rt = n.child_by_field_name("right")
            lt = n.child_by_field_name("left")
            if op is None or rt is None or lt is None:
                continue
            if a.f.t(op) == "=" and "gridDim" in a.f.t(rt):
                strided.add(a.f.t(lt))
    for n in walk(a.body):
        if n.type == "assignment_expression":
            op = n.child_by_field_name("operator")
            rt = n.child_by_field_name("right")
            if op is not None and rt is not None and a.f.t(op) == "+=":
                txt = a.f.t(rt)
                if "gridDim" in txt or set(re.findall(r"\w+", txt)) & strided:
                    return True
    return False


def _grid_x_nodes(a: Analysis, site: LaunchSite, r: Resolver, follow_dim3: bool):
    """Every node of the launch's grid x expression, host variables followed to their initializers (the
    kernel's own arguments are not followed; a dim3 variable to its x component, or not at all)."""
    node = a.f.node(site.config[0].span)
    comps = dim3_components(a.f, r, node)
    todo = [comps[0] if comps else node]
    seen: set[str] = set(launch_arg_names(a.f, site))
    while todo:
        n = todo.pop()
        if n is None:
            continue
        for x in walk(n):
            if x.type == "identifier":
                name = a.f.t(x)
                hv = r.vars.get(name)
                is_dim3 = hv is not None and "dim3" in hv.type
                if hv is not None and hv.init is not None and name not in seen and (follow_dim3 or not is_dim3):
                    seen.add(name)
                    init = a.f.node(hv.init.span)
                    c = dim3_components(a.f, r, init) if is_dim3 else None
                    todo.append(c[0] if c else init)
            yield x


def _is_block(a: Analysis, n: Node, r: Resolver) -> bool:
    """``n`` stands for the block parameter (a literal site of it, or a name resolving to one)."""
    if n.type == "parenthesized_expression" and n.named_child_count == 1:
        return _is_block(a, n.named_children[0], r)
    if n.type == "number_literal":
        return a.by_key.get((n.start_byte, n.end_byte)) == a.block
    if n.type == "identifier":
        src = r.resolve(n)
        return src is not None and a.by_key.get(src.key) == a.block
    return False


def grid_mentions(a: Analysis, site: LaunchSite, names: set[str]) -> bool:
    """The grid's x expression (through host variables) uses one of ``names``."""
    r = Resolver(a.f, site.host_vars)
    node = a.f.node(site.config[0].span)
    comps = dim3_components(a.f, r, node)
    todo = [comps[0] if comps else node]
    seen: set[str] = set(launch_arg_names(a.f, site))
    while todo:
        n = todo.pop()
        if n is None:
            continue
        for x in walk(n):
            if x.type != "identifier":
                continue
            name = a.f.t(x)
            if name in names:
                return True
            hv = r.vars.get(name)
            if hv is not None and hv.init is not None and name not in seen:
                seen.add(name)
                if src := r.resolve_name(name):
                    if src.name in names:
                        return True
                todo.append(a.f.node(hv.init.span))
    return False
