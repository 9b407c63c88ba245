"""The launch's dynamic shared memory and the tunable block: whether it is computed from a block dimension, and
whether the spec's byte count follows it. A dimension whose bytes the spec fixes stays (smem_pins); a literal block
multiplied in the launch's bytes is a site of the block (smem_follows_block); spec_edits writes a spec's bytes that
repeat the block, or are the launch's own number, as the launch's expression."""

from __future__ import annotations

import ast

from agent_core import expr
from agent_core.model import KerntuneError, LaunchSite
from agent_core.source import spec as spec_mod
from agent_core.templating.structural.launch_exprs import HostExprConverter
from agent_core.templating.structural.source import Resolver, Source, expr_names, int_literal, span_of, spec_int
from agent_core.templating.structural.state import Analysis, param_name
from agent_core.templating.structural.syntax import walk


def smem_pins(a: Analysis, site: LaunchSite, src: Source) -> bool:
    """The launch's dynamic shared memory is computed from the block dimension read at ``src``
    (``threads.y * 3 * sizeof(U)``, through host locals, dim3 fields, macros and constants, as ``launch_exprs``
    reads a launch; or, for a literal block, the same literal multiplied: ``<<<g, 256, 256 * sizeof(float)>>>``)
    while the spec gives the tuner a byte count that does not follow it (``smem = "48"`` where the launch computes
    another number): a template that tuned that dimension would launch with too little for a larger block (an
    illegal address). Without a spec, the launch is the template's own (the literal becomes a site of the block,
    smem_follows_block); a spec whose bytes repeat the literal or are the launch's number follows (spec_edits)."""
    if len(site.config) < 3:
        return False
    probe = "KT_PROBE_BLOCK_DIM"
    launch = HostExprConverter(a.f, site, {src.key: probe}).conv(a.f.node(site.config[2].span))
    if probe not in launch and not (src.name is None and smem_literals(a, site, src.value)):
        return False
    try:
        sp = spec_mod.find_spec(a.cf, a.k.name)
    except KerntuneError:
        return False  # a broken spec is reported where it is used
    if sp is None:
        return False
    if expr_names(sp.smem or "0") & ({src.name, param_name(src.name)} if src.name else set()):
        return False
    if src.name is None and spec_literals(sp.smem or "0", src.value):
        return False
    number = spec_int(sp.smem or "")
    return number is None or smem_number(launch, {probe: src.value}) != number[2]


def smem_number(e: str, env: dict[str, int]) -> int | None:
    """The bytes of the launch's shared-memory expression ``e`` (as HostExprConverter writes it) where nothing but
    ``env``'s names is left in it (``threads.y * 3 * sizeof(U)`` is 48 with 4 warps in y); None otherwise."""
    if not expr_names(e) <= set(env):
        return None
    try:
        v = expr.evaluate(e, env)
    except expr.ExprError:
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def smem_literals(a: Analysis, site: LaunchSite, value: int) -> list[Source]:
    """Literals ``value`` multiplied in the launch's shared-memory expression (``256 * sizeof(float)``), its
    host locals followed (``const size_t bytes = 256 * sizeof(float);``)."""
    if len(site.config) < 3:
        return []
    r = Resolver(a.f, site.host_vars)
    out, todo, seen = [], [a.f.node(site.config[2].span)], set()
    while todo:
        n = todo.pop()
        for x in walk(n):
            if x.type == "identifier":
                hv = r.vars.get(a.f.t(x))
                if hv is not None and hv.init is not None and hv.name not in seen and "dim3" not in hv.type:
                    seen.add(hv.name)
                    todo.append(a.f.node(hv.init.span))
            elif x.type == "number_literal" and int_literal(a.f.t(x)) == value and x.parent is not None and \
                    x.parent.type == "binary_expression" and a.f.t(x.parent.child_by_field_name("operator")) == "*":
                out.append(Source(span_of(x), value, a.f.t(x), None, f"line {x.start_point.row + 1}"))
    return out


def spec_literals(e: str, value: int) -> list[tuple[int, int]]:
    """(start, end) of the literals ``value`` multiplied in the spec expression ``e`` (``"256 * 4"``)."""
    try:
        tree = ast.parse(e.strip(), mode="eval")
    except SyntaxError:
        return []
    lead = len(e) - len(e.lstrip())
    parents = {c: par for par in ast.walk(tree) for c in ast.iter_child_nodes(par)}
    return [(lead + n.col_offset, lead + n.end_col_offset) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value == value and
            isinstance(parents.get(n), ast.BinOp) and isinstance(parents[n].op, ast.Mult)]


def smem_follows_block(a: Analysis, site: LaunchSite) -> None:
    """A literal block size multiplied in the launch's shared memory (``<<<n / 128, 128, 128 * sizeof(float)>>>``)
    is a site of the block parameter: the template's launch keeps the shared memory in step with the block."""
    if a.block is None or len(site.config) < 3:
        return
    p = a.params[a.block]
    if p.kind != "block_size" or any(x.name for x in p.sites):
        return
    for src in smem_literals(a, site, p.original):
        a.tie(src, a.block)
