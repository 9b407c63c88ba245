"""The spec written in terms of the parameters. Its literal block size, and the block-size literals of its
grid where the launch's grid follows the block, become parameter names in the template's ``launch``; in a spec
comment they, and its ``template_args`` integers that are a lifted template argument, are also sites, so that
a rewritten file's spec still matches its launch and names the instantiation it makes."""

from __future__ import annotations

import ast
import re

from agent_core.model import KerntuneError, Span
from agent_core.source import spec as spec_mod
from agent_core.templating.structural.grid import grid_mentions
from agent_core.templating.structural.launch_exprs import HostExprConverter, strip_outer
from agent_core.templating.structural.smem import smem_number, spec_literals
from agent_core.templating.structural.source import Source, expr_names, spec_int
from agent_core.templating.structural.state import Analysis

# (start, end, replacement, original value, parameter, render) of a literal in one spec string
Edit = tuple[int, int, str, int, str, str]


def spec_launch(a: Analysis) -> None:
    """The kernel's spec gives the launch the tuner runs; when it writes the block size as a literal
    (``block = "256"``) it must follow the block parameter, or every variant would run on the original
    block (a shared array sized for 64 threads indexed by 256, a stride of 512 walked by 256 threads). Its
    literal block size, and the block-size literals of its grid where the launch's own grid follows the
    block (``cdiv(n, 128)``), become the parameter's names in the template's ``launch``; written in a
    spec comment, they are also sites, so that a rewritten file's spec still matches its launch."""
    if a.block is None and a.warps is None:
        return
    try:
        sp = spec_mod.find_spec(a.cf, a.k.name)
    except KerntuneError:
        return  # a broken spec is reported where it is used
    if sp is None:
        return
    names = set(a.params)
    edits: dict[tuple[str, int], list[Edit]] = {}
    block_params = [a.block, a.block_y]
    for j, e in enumerate(sp.block):
        pname = block_params[j] if j < len(block_params) else None
        if expr_names(e) & names:
            continue
        if j == 0 and a.block_cap is not None:
            got = _spec_cap_edits(e, a.params[a.block].original, a.block)
            if got:
                edits[("block", j)] = got
                continue
        node = spec_int(e)
        if node is None:
            continue
        if pname is not None and node[2] == a.params[pname].original:
            edits[("block", j)] = [(node[0], node[1], pname, node[2], pname, "{value}")]
            if j == 0 and a.block_cap is not None:  # the spec says X >= the cap at every size: so it is with less
                a.constrain(f"{pname} <= {node[2]}")
        elif j == 0 and a.warps is not None and node[2] == a.params[a.warps].original * 32:
            edits[("block", j)] = [(node[0], node[1], f"{a.warps} * 32", node[2], a.warps, "{value} * 32")]
    if sp.grid and not expr_names(sp.grid[0]) & names:
        got = _spec_grid_edits(a, sp.grid[0])
        if got:
            edits[("grid", 0)] = got
    if a.block_cap is not None:
        shown = " ".join(a.block_cap.text.split())
        if ("block", 0) not in edits:
            a.refuse_cap(f"its cap `{shown}` is not tuned: the spec's block `{sp.block[0] if sp.block else ''}` is "
                         f"not the same min with {a.params[a.block].original} (write it as min(..., "
                         f"{a.params[a.block].original}))")
            return
        if a.grid_tied and ("grid", 0) not in edits:
            a.refuse_cap(f"its cap `{shown}` is not tuned: the launch computes its grid from it, and the spec's "
                         f"grid `{sp.grid[0] if sp.grid else ''}` does not write it as a number")
            return
    bp = a.params[a.block] if a.block is not None else None
    if bp is not None and bp.kind == "block_size" and sp.smem and not expr_names(sp.smem) & names and \
            not any(x.name for x in bp.sites) and len(bp.values) > 1:
        got = [(s, e, a.block, bp.original, a.block, "{value}") for s, e in spec_literals(sp.smem, bp.original)]
        if got:  # smem = "256 * 4" with <<<g, 256, 256 * sizeof(float)>>>
            edits[("smem", 0)] = got
    if ("smem", 0) not in edits:
        got = _spec_smem_number_edit(a, sp)
        if got:
            edits[("smem", 0)] = got
    if not edits:
        return
    launch = {"grid": list(sp.grid), "block": list(sp.block), "smem": [sp.smem or "0"]}
    for (fld, j), es in edits.items():
        text = launch[fld][j].encode("utf-8")
        for s, e, rep, *_ in sorted(es, reverse=True):
            text = text[:s] + rep.encode("utf-8") + text[e:]
        launch[fld][j] = text.decode("utf-8")
    launch["smem"] = launch["smem"][0]
    a.launch = launch
    if sp.span is None:  # a sidecar spec: the launch is all there is
        return
    for (fld, j), es in edits.items():
        start = _spec_string_start(a, sp, fld, j)
        if start is None:
            continue
        for s, e, _rep, value, param, render in es:
            sb, se = start + s, start + e  # a TOML string on one line
            line, col = a.f.line_of(sb), sb - (a.f.data.rfind(b"\n", 0, sb) + 1)
            src = Source(Span(sb, se, line, col, line, col + (se - sb)), value,
                         a.f.data[sb:se].decode("utf-8"), None, f"the spec's {fld} at line {line + 1}")
            a.tie(src, param, render)


def spec_template_args(a: Analysis) -> None:
    """A spec comment's ``template_args`` names the instantiation to tune; an integer there that is the
    original value of a parameter lifted from that template argument is a site of the parameter, so that
    a rewritten file's spec still names the instantiation its launch makes."""
    try:
        sp = spec_mod.find_spec(a.cf, a.k.name)
    except KerntuneError:
        return
    if sp is None or sp.span is None or not sp.template_args:
        return
    param_of = {tp: n for n, tp in a.tp_of.items()}
    for i, (tp, arg) in enumerate(zip(a.k.template_params, sp.template_args)):
        name = param_of.get(tp.name)
        m = re.fullmatch(r"\s*(\d+)\s*", arg)
        if name is None or m is None or int(m.group(1)) != a.params[name].original:
            continue
        start = _spec_string_start(a, sp, "template_args", i)
        if start is None:
            continue
        sb, se = start + m.start(1), start + m.end(1)
        line, col = a.f.line_of(sb), sb - (a.f.data.rfind(b"\n", 0, sb) + 1)
        a.tie(Source(Span(sb, se, line, col, line, col + (se - sb)), int(m.group(1)), m.group(1), None,
                     f"the spec's template_args at line {line + 1}"), name)


def _spec_cap_edits(e: str, cap: int, pname: str) -> list[Edit]:
    """The spec's block ``e`` written as the launch's capped block, the smaller of something and ``cap``
    (``min(d, 1024)``, ``min(1024, round_up(cdiv(h, 8), 32))``, ``d if d < 1024 else 1024``): its ``cap``
    literals, which become the parameter."""
    try:
        tree = ast.parse(e.strip(), mode="eval")
    except SyntaxError:
        return []
    lead = len(e) - len(e.lstrip())
    b = tree.body
    is_cap = lambda x: isinstance(x, ast.Constant) and type(x.value) is int and x.value == cap  # noqa: E731
    const = lambda x: isinstance(x, ast.Constant)  # noqa: E731
    at: list[ast.AST] = []
    if isinstance(b, ast.Call) and isinstance(b.func, ast.Name) and b.func.id == "min" and len(b.args) == 2 \
            and not b.keywords:
        at = [x for x in b.args if is_cap(x)] if sum(map(const, b.args)) == 1 else []
    elif isinstance(b, ast.IfExp) and isinstance(b.test, ast.Compare) and len(b.test.ops) == 1:
        u, v, op, d = b.test.left, b.test.comparators[0], b.test.ops[0], ast.dump
        if (isinstance(op, (ast.Lt, ast.LtE)) and (d(b.body), d(b.orelse)) == (d(u), d(v))) or \
                (isinstance(op, (ast.Gt, ast.GtE)) and (d(b.body), d(b.orelse)) == (d(v), d(u))):
            if const(u) != const(v):
                at = [x for x in (u, v, b.body, b.orelse) if is_cap(x)]
    return [(lead + x.col_offset, lead + x.end_col_offset, pname, cap, pname, "{value}") for x in at]


def _spec_grid_rows_edits(a: Analysis, tree, offs, pname: str | None) -> list[Edit]:
    """The literals of the spec's grid that are a count of rows per block (the block's y size, the warps of a
    block of one row per warp; or a template argument, a window of tokens a block), where every launch's grid x is
    written from that count's name (``(rows + kRowsPerBlock - 1) / kRowsPerBlock`` with ``dim3 block(32,
    kRowsPerBlock)``): the grid covers the rows for every value of it."""
    if pname is None or not a.k.launch_sites:
        return []
    py = a.params[pname]
    names = {s.name for s in py.sites if s.name}
    if not names or not all(grid_mentions(a, site, names) for site in a.k.launch_sites):
        return []
    parents = {c: par for par in ast.walk(tree) for c in ast.iter_child_nodes(par)}
    out = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Constant) and type(n.value) is int):
            continue
        par = parents.get(n)
        s, e = offs(n)
        if n.value == py.original and isinstance(par, (ast.BinOp, ast.Call)):
            out.append((s, e, pname, py.original, pname, "{value}"))
        elif n.value == py.original - 1 and isinstance(par, ast.BinOp) and isinstance(par.op, ast.Add):
            out.append((s, e, f"{pname} - 1", py.original - 1, pname, "{value} - 1"))
    return out


def _spec_grid_edits(a: Analysis, e: str) -> list[Edit]:
    """Where the spec's grid expression ``e`` must name parameters: the block size where the launch's
    grid follows the block (``cdiv(n, 128)``, ``(n + 127) / 128``), the items per thread next to it, a
    fixed grid of a grid-stride loop."""
    try:
        tree = ast.parse(e.strip(), mode="eval")
    except SyntaxError:
        return []
    lead = len(e) - len(e.lstrip())
    offs = lambda n: (lead + n.col_offset, lead + n.end_col_offset)  # noqa: E731 (one line: UTF-8 offsets)
    out = []
    grid = next((p for p in a.params.values() if p.kind == "grid_size"), None)
    if grid is not None and isinstance(tree.body, ast.Constant) and tree.body.value == grid.original:
        s, t = offs(tree.body)
        return [(s, t, grid.name, grid.original, grid.name, "{value}")]
    rows = _spec_grid_rows_edits(a, tree, offs, a.block_y) or _spec_grid_rows_edits(a, tree, offs, a.warps)
    if rows:  # rows per block in y: `cdiv(rows, 4)` where the launch divides by ROWS_PER_BLOCK
        return rows
    # a template argument the launch's grid is written from (`kernel<T, kWindowSize><<<cdiv(n, kWindowSize), ...>>>`,
    # the spec's grid `cdiv(n, 8)`): the spec's grid follows it (a value the block size also has is left alone)
    block_original = a.params[a.block].original if a.block is not None else None
    for pname, p in a.params.items():
        if p.kind == "template_arg" and len(p.values) > 1 and p.original not in (block_original, 1):
            got = _spec_grid_rows_edits(a, tree, offs, pname)
            if got:
                return got
    if not a.grid_tied or a.block is None:
        return []
    bo = a.params[a.block].original
    io = a.params[a.items].original if a.items else None
    parents = {c: par for par in ast.walk(tree) for c in ast.iter_child_nodes(par)}
    ints = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int]
    exact = [n for n in ints if n.value == bo and isinstance(parents.get(n), (ast.BinOp, ast.Call))]
    if not exact:
        return []
    for n in exact:
        s, t = offs(n)
        out.append((s, t, a.block, bo, a.block, "{value}"))
    for n in ints:
        par = parents.get(n)
        if n in exact or par is None:
            continue
        s, t = offs(n)
        if n.value == bo - 1 and isinstance(par, ast.BinOp):
            additive = isinstance(par.op, ast.Add)  # n + 127 -> n + BLOCK - 1; else parenthesized
            out.append((s, t, f"{a.block} - 1" if additive else f"({a.block} - 1)", bo - 1, a.block,
                        "{value} - 1" if additive else "({value} - 1)"))
        elif io is not None and n.value == io and isinstance(par, ast.BinOp) and isinstance(par.op, ast.Mult) \
                and any(o in exact for o in (par.left, par.right)):
            out.append((s, t, a.items, io, a.items, "{value}"))
    return out


def _spec_smem_number_edit(a: Analysis, sp) -> list[Edit]:
    """The spec's shared memory, a number (``smem = "48"``) that is what the launch computes from one tunable
    block dimension (``threads.y * 3 * sizeof(U)`` with 4 warps in y): replaced by the launch's expression
    (``BLOCK_Y * 3 * 4``), so that a variant launches the bytes its block needs."""
    number = spec_int(sp.smem or "")
    if number is None or not a.k.launch_sites or len(a.k.launch_sites[0].config) < 3:
        return []
    site = a.k.launch_sites[0]
    tunable = {n for n, p in a.params.items() if len(p.values) > 1 and p.kind in ("block_size", "warps_per_block")}
    site_params = {x.key: n for n, p in a.params.items() for x in p.sites if x.render == "{value}"}
    e = strip_outer(HostExprConverter(a.f, site, site_params).conv(a.f.node(site.config[2].span)))
    used = expr_names(e)
    if len(used) != 1 or not used <= tunable:
        return []
    (pname,) = used
    start, end, value = number
    if smem_number(e, {pname: a.params[pname].original}) != value:
        return []
    render = re.sub(rf"\b{pname}\b", "{value}", e)
    return [(start, end, e, value, pname, render)]


def _spec_string_start(a: Analysis, sp, fld: str, j: int) -> int | None:
    """The byte offset in the file where the text of the spec comment's ``fld`` (its ``j``-th string,
    for a list) starts; None when it cannot be found exactly as parsed."""
    if sp.span is None or fld not in sp.lines:
        return None
    data = a.f.data
    pos = a.f.line_start(sp.lines[fld])
    if pos is None:
        return None
    m = re.compile(rb"\b" + fld.encode() + rb"\s*=\s*").match(data, data.find(fld.encode(), pos))
    if m is None or m.start() >= sp.span.end:
        return None
    if data[m.end():m.end() + 1] not in (b'"', b"'", b"["):
        return None  # a bare number (`block = 128`): no string of this field (a later field's is not its)
    strings = list(re.compile(rb'"((?:[^"\\\n])*)"|\'([^\'\n]*)\'').finditer(data, m.end(), sp.span.end))
    if data[m.end():m.end() + 1] == b"[":  # a list: its own strings, up to its closing bracket (outside them)
        own, at = [], m.end() + 1
        for x in strings:
            if b"]" in data[at:x.start()]:
                break
            own.append(x)
            at = x.end()
        strings = own
    elif strings:
        strings = strings[:1]
    if j >= len(strings):
        return None
    sm = strings[j]
    g = 1 if sm.group(1) is not None else 2
    value = getattr(sp, fld)
    value = value[j] if isinstance(value, list) else value
    return sm.start(g) if sm.group(g).decode("utf-8", "replace") == value else None
