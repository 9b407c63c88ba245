"""The kernel's launch sites: which one the tunable values are read from (the one the spec describes), its
integer template arguments, and its block size (x, and y for a 2-D block), which every later step ties to."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core import expr
from agent_core.model import KerntuneError, LaunchSite
from agent_core.source import spec as spec_mod
from agent_core.templating.structural.domains import ALL_BLOCKS, BLOCK_XS, BLOCK_YS, POW2_BLOCKS, TEMPLATE_VALUES, WARPS
from agent_core.templating.structural.smem import smem_pins
from agent_core.templating.structural.source import Cap, Resolver, Source, dim3_components
from agent_core.templating.structural.state import Analysis, param_name


def spec_site_first(a: Analysis, sites: list[LaunchSite]) -> list[LaunchSite]:
    """The launch sites with the one the spec's launch describes first, where the host code has several
    that differ (``if (ncols < 1024) k<32><<<g, 32>>>(...); else k<1024><<<g, 1024>>>(...);``): the spec's
    ``template_args`` name it, else its block size at the first size set does. The tunable values are read
    from that branch."""
    if len(sites) < 2:
        return sites
    try:
        sp = spec_mod.find_spec(a.cf, a.k.name)
    except KerntuneError:
        return sites
    if sp is None:
        return sites

    def value(site: LaunchSite, n: Node | None) -> str | None:
        src = Resolver(a.f, site.host_vars).resolve(n)
        return str(src.value) if src is not None else (a.f.t(n).strip() if n is not None else None)
    if sp.template_args:
        norm = lambda s: re.sub(r"\s+", "", {"true": "1", "false": "0"}.get(s.strip(), s))  # noqa: E731
        want = [norm(s) for s in sp.template_args]
        match = [st for st in sites if [norm(value(st, a.f.node(t.span)) or "") for t in st.template_args]
                 == want]
    else:
        try:
            want_block = str(expr.evaluate_int(sp.block[0], sp.sizes[0]))
        except (expr.ExprError, KerntuneError, IndexError):
            return sites
        match = []
        for st in sites:
            if len(st.config) < 2:
                continue
            r = Resolver(a.f, st.host_vars)
            node = a.f.node(st.config[1].span)
            comps = dim3_components(a.f, r, node)
            if value(st, comps[0] if comps else node) == want_block:
                match.append(st)
    if not match or match[0] is sites[0]:
        return sites
    return [match[0]] + [st for st in sites if st is not match[0]]


def _buffer_factors(a: Analysis) -> dict[int, str]:
    """The integer literals the spec's buffer sizes multiply by (``qk: bf16[num_tokens * 32 * 128]``: 32 and 128) or
    divide by into a count of tiles (``scale: f32[cdiv(M, 128) * cdiv(N, 128)]``: 128), each with the buffer that says
    so; empty without a spec."""
    import ast
    try:
        sp = spec_mod.find_spec(a.cf, a.k.name)
    except KerntuneError:
        return {}
    out: dict[int, str] = {}
    for arg in (sp.args if sp is not None else []):
        if arg.role == "scalar" or not arg.size:
            continue
        try:
            tree = ast.parse(arg.size.strip(), mode="eval").body
        except SyntaxError:
            continue
        stack = [tree]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                stack += [n.left, n.right]
            elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)):
                stack.append(n.right)  # a count of tiles: `M / 128`
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "cdiv" and len(n.args) == 2:
                stack.append(n.args[1])  # a count of tiles: `cdiv(M, 128)` (a scale a tile)
            elif isinstance(n, ast.Constant) and type(n.value) is int:
                out.setdefault(n.value, f"{arg.name}: {arg.size}")
    return out


def template_args(a: Analysis, site: LaunchSite) -> None:
    """The launch's integer template arguments (``k<4><<<...>>>``) become parameters, but one whose value a buffer of
    the spec is sized by (a head size or head count the kernel takes as a template argument: ``qk[num_tokens * 32 *
    128]`` for ``<32, 128>``) is a problem size, not tuned: the data's layout does not follow it."""
    if not site.template_args:
        return
    r = Resolver(a.f, site.host_vars)
    factors = None
    for tp, arg in zip(a.k.template_params, site.template_args):
        if tp.kind != "value":
            continue
        src = r.resolve(a.f.node(arg.span))
        if src is None:
            a.notes.append(f"template argument {tp.name} = {arg.text} is not a constant")
            continue
        pow2 = expr.FUNCTIONS["is_pow2"](src.value)
        factors = _buffer_factors(a) if factors is None else factors
        if pow2 and src.value > 2 and src.value in factors:  # (a value that is no power of two keeps its one value)
            a.notes.append(f"template argument {tp.name} = {src.value} sizes a buffer of the spec "
                           f"({factors[src.value]}): a problem size, not tuned")
            continue
        values = [v for v in TEMPLATE_VALUES if v <= max(16, src.value)] if pow2 else [src.value]
        if src.value > 16 and pow2:
            values += [src.value // 2, src.value * 2]
        name = a.add(src, param_name(tp.name), "template_arg", values,
                     f"template argument {tp.name} of {a.k.name}, from {src.where}")
        a.tp_of.setdefault(name, tp.name)
        if pow2 and src.value >= 1:
            a.constrain(f"is_pow2({name})")


def block_size(a: Analysis, site: LaunchSite, primary: bool) -> None:
    """The block size of the primary launch becomes the block parameter (a template argument that is the
    block size is that parameter); another launch with the same literal block size follows it. A block capped by
    a constant (``std::min(tile_size, kMaxThreads)``, ``d < 1024 ? d : 1024``: ``Resolver.cap``) makes the cap
    the parameter: the launch becomes ``min(X, BLOCK)``; ``cap.check_cap`` and ``spec_edits`` keep it or refuse
    it."""
    if len(site.config) < 2:
        return
    r = Resolver(a.f, site.host_vars)
    node = a.f.node(site.config[1].span)
    comps = dim3_components(a.f, r, node)
    multi = comps is not None and len(comps) > 1
    x = comps[0] if comps else node
    if primary:
        a.block_2d = multi
    src = r.resolve(x)
    cap = None
    if src is None and not multi and a.caps and (primary or a.block_cap is not None):
        cap = r.cap(x)  # std::min(tile_size, kMaxThreads): the cap is the block parameter
        if cap is not None and not 1 <= cap.src.value <= 1024:
            cap = None
        src = cap.src if cap is not None else None
    if src is None:
        if primary and not multi and warps_per_block(a, r, x, site):
            return
        if primary:
            a.notes.append(f"the block size `{site.config[1].text}` is not a constant")
        return
    if primary and smem_pins(a, site, src):
        a.notes.append(f"the block size `{site.config[1].text}` stays: the launch's dynamic shared memory "
                       f"`{site.config[2].text}` is computed from it, and the spec's does not follow a parameter")
        return
    if not primary:
        if src.key in a.by_key:
            return
        if a.block is not None and src.value == a.params[a.block].original and src.name is None:
            if cap is not None:  # another launch capped by the same literal (check_cap refuses other caps)
                _cap_sites(a, cap, a.block)
            else:
                a.tie(src, a.block)  # another launch with the same literal block size
        return
    if src.key in a.by_key:  # e.g. k<BLOCK><<<g, BLOCK>>>
        name = a.by_key[src.key]
        p = a.params[name]
        if p.kind == "template_arg":
            a.block_tp = a.tp_of.get(name)
            a.drop_pow2(name)
        p.kind, p.values = "block_size", _block_values(src.value, multi)
        p.why = f"threads per block, from {src.where}"
    else:
        tp = _template_param_for_block(a, src.value) if src.name is None else None
        if tp is not None:  # scale<2, 256><<<g, 256>>> with template <int VEC, int THREADS>
            name = tp
            a.tie(src, tp)
            p = a.params[tp]
            p.kind, p.values = "block_size", _block_values(src.value, multi)
            p.why = f"threads per block; {p.why}"
            a.drop_pow2(tp)
            a.block_tp = a.tp_of.get(tp)
        elif cap is not None:
            name = a.add(src, param_name(src.name) if src.name else "BLOCK", "block_size", _block_values(src.value),
                         f"threads per block where the launch's `{' '.join(cap.text.split())}` reaches its cap; "
                         f"fewer where `{' '.join(a.f.t(cap.other).split())}` is smaller; the cap from {src.where}")
        else:
            default = "BLOCK_X" if multi else "BLOCK"
            name = a.add(src, param_name(src.name) if src.name else default, "block_size",
                         _block_values(src.value, multi),
                         f"threads per block{' in x' if multi else ''}, from {src.where}")
    a.block = name
    a.block_cap = cap
    if cap is not None:
        _cap_sites(a, cap, name)
    a.constrain(f"{name} % 32 == 0")
    a.constrain(f"{name} <= 1024")
    if multi and len(comps) > 1:
        ysrc = r.resolve(comps[1])
        if ysrc is not None and ysrc.value > 1 and smem_pins(a, site, ysrc):
            a.notes.append(f"the block's y `{a.f.t(comps[1])}` stays: the launch's dynamic shared memory "
                           f"`{site.config[2].text}` is computed from it")
        elif ysrc is not None and ysrc.value > 1 and ysrc.key not in a.by_key:
            yname = a.add(ysrc, param_name(ysrc.name) if ysrc.name else "BLOCK_Y", "block_size",
                          _block_y_values(ysrc.value, a.params[name].original),
                          f"threads per block in y, from {ysrc.where}")
            a.block_y = yname
            a.constraints = [c for c in a.constraints if not c.startswith(f"{name} % 32")]
            a.constrain(f"({name} * {yname}) % 32 == 0")
            a.constrain(f"{name} * {yname} <= 1024")


def _cap_sites(a: Analysis, cap: Cap, name: str) -> None:
    """The literals of a capped block's cap as sites of the block parameter ``name``: the cap, and the condition's
    of ``d < 1024 ? d : 1024``; a literal keeps its suffix (``std::min(n / 8, 1024U)`` needs an unsigned)."""
    for src in [cap.src] + cap.also:
        suffix = re.search(r"[uUlL]+$", src.text) if src.name is None else None
        if a.by_key.get(src.key) == name:  # the parameter's own source (Analysis.add)
            src.render = "{value}" + suffix.group(0) if suffix else "{value}"
        else:
            a.tie(src, name, "{value}" + suffix.group(0) if suffix else "{value}")


_WARP_SIZE_NAME = re.compile(r"warp_?size|warp_?threads|threads_per_warp|lanes", re.I)
_PRODUCT = re.compile(r"\(?\s*((?:\w+::)*\w+)\s*\*\s*((?:\w+::)*\w+)\s*\)?")


def _factor_names(a: Analysis, r: Resolver, x, depth: int = 0) -> tuple[str, str] | None:
    """The two names of a block size written as their product (``WARPS * kWarpSize``), at the launch or in the
    host variable, file constant or macro the launch names (``constexpr int kThreads = kWarps * 32;``,
    ``#define THREADS (NUM_WARPS * WARP_SIZE)``); a factor may be the literal 32."""
    if x is None or depth > 4:
        return None
    if x.type == "parenthesized_expression" and x.named_child_count == 1:
        return _factor_names(a, r, x.named_children[0], depth + 1)
    if x.type == "binary_expression":
        m = _PRODUCT.fullmatch(" ".join(a.f.t(x).split()))
        return (m.group(1), m.group(2)) if m else None
    if x.type not in ("identifier", "qualified_identifier", "type_identifier"):  # `dim3 block(kThreads);`: a type
        return None
    name = a.f.t(x).split("::")[-1]
    hv = r.vars.get(name)
    if hv is not None:
        if hv.init is None or "dim3" in hv.type or r.reassigned(hv):
            return None
        return _factor_names(a, r, a.f.node(hv.init.span), depth + 1)
    d = a.f.defines.get(name)
    if d is not None:
        m = _PRODUCT.fullmatch(d.value.strip())
        return (m.group(1), m.group(2)) if m else None
    return None


def _splits_threads(a: Analysis, name: str) -> bool:
    """Whether the kernel splits threadIdx.x by the constant ``name`` (``threadIdx.x % kBlockSize``, ``threadIdx.x /
    kGroup``, ``threadIdx.x & (N - 1)``): a 32 it divides its threads by is the warp's lanes, whatever it is called
    (an MX block of 32 elements, one a lane)."""
    n = re.escape(name.split("::")[-1])
    return re.search(rf"threadIdx\.x\s*(?:%|/)\s*(?:\w+::)*{n}\b|threadIdx\.x\s*&\s*\(\s*(?:\w+::)*{n}\s*-\s*1\s*\)",
                     a.body_text) is not None


def warps_per_block(a: Analysis, r: Resolver, x, site: LaunchSite) -> bool:
    """A 1-D block written as a warp count times the warp size (``<<<g, WARPS_PER_BLOCK * kWarpSize>>>``, through
    a constant or macro of the product): the warp count, a named constant the kernel and the grid read by name,
    becomes the parameter (1 to 32 warps). A literal warp count (``8 * 32``) has nothing to follow it: not lifted."""
    names = _factor_names(a, r, x)
    if names is None:
        return False
    res: list[tuple[str, int, Source | None]] = []  # (as written, value, the constant's source; None: a literal)
    for nm in names:
        if re.fullmatch(r"\d+", nm):
            res.append((nm, int(nm), None))
            continue
        src = r.resolve_name(nm.split("::")[-1])
        if src is None:
            return False
        res.append((nm, src.value, src))
    warp_size = [v == 32 and (src is None or bool(_WARP_SIZE_NAME.search(nm))) for nm, v, src in res]
    if not any(warp_size):  # a named 32 of another name that the kernel splits its threads by: a warp's lanes
        warp_size = [v == 32 and src is not None and _splits_threads(a, nm) for nm, v, src in res]
    if warp_size[1]:
        (wn, _, w), ws = res[0], res[1][0]
    elif warp_size[0]:
        (wn, _, w), ws = res[1], res[0][0]
    else:
        return False
    if w is None or w.name is None or not 1 <= w.value <= 32:
        return False
    if smem_pins(a, site, w):
        a.notes.append(f"the warp count `{w.name}` stays: the launch's dynamic shared memory `{site.config[2].text}` "
                       "is computed from it, and the spec's does not follow it")
        return True
    name = a.add(w, param_name(w.name), "warps_per_block", WARPS,
                 f"warps per block (the block is {wn} * {ws}), from {w.where}")
    a.warps = name
    a.constrain(f"{name} >= 1")
    a.constrain(f"{name} * 32 <= 1024")
    return True


def _template_param_for_block(a: Analysis, value: int) -> str | None:
    for name, p in a.params.items():
        if p.kind == "template_arg" and p.original == value and re.search(r"BLOCK|THREAD|NT\b|TPB", name):
            return name
    return None


def _block_y_values(original: int, x: int) -> list[int]:
    """Rows of threads a block stacks in y (1-32); a block of one column (``dim3(1, 256)``, ggml's rope) carries
    its threads in y, offered as a 1-D block's are; a y of a warp or more (``dim3(8, 64)``), the powers of two too."""
    if x == 1:
        return sorted(set(BLOCK_YS) | set(ALL_BLOCKS) | {original})
    if original >= 32:
        return sorted(set(BLOCK_YS) | set(POW2_BLOCKS) | {original})
    return sorted(set(BLOCK_YS) | {original})


def _block_values(original: int, multi: bool = False) -> list[int]:
    """Every multiple of 32 up to 1024 (block_pow2 narrows it to powers of two for a tree reduction)."""
    return sorted(set(BLOCK_XS if multi else ALL_BLOCKS) | {original})
