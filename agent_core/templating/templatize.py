"""Structural templatization: lift the hard-coded, performance-relevant constants of one kernel (block size,
fixed grid and items per thread of a grid-stride loop, ``#pragma unroll N``, ``__launch_bounds__``, integer
template arguments) into named parameters with domains and constraints -> ``model.KernelTemplate``.

Everything tied to the block size follows its parameter: the launch's grid (``cdiv(n, 256)``), ``__shared__``
array sizes, block-strided loop steps, a tree reduction's first stride, macros and constants of the same value,
a warp-count macro, and the spec's literal launch (which becomes the template's ``launch`` and, in a spec
comment, sites). What cannot be tied restricts the domain: a tree reduction on the block size constrains it to
powers of two; a literal that looks like the block (``if (tid < 128) s[tid] += s[tid + 128]``) fixes it, and
the parameter's ``why`` names that literal.

Also ``launch_exprs``: a launch site's configuration in the expression language, for drafting specs.
"""

from __future__ import annotations

import ast
import difflib
import keyword
import os
import re
from dataclasses import dataclass, field

from tree_sitter import Node

from agent_core import expr
from agent_core.source.cuda_parse import file_constants, kernel_has_errors, parse_tree
from agent_core.model import (CudaFile, HostVar, Kernel, KernelTemplate, KerntuneError, LaunchSite, Param, ParamSpace, Site,
                    Span, macro_name)

from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END  # noqa: F401 (the header templates carry)

SM_COUNT = 132  # H100 SXM / H200: grid sizes are offered as multiples of it
POW2_BLOCKS = [32, 64, 128, 256, 512, 1024]
ALL_BLOCKS = list(range(32, 1025, 32))
BLOCK_XS = [8, 16, 32, 64, 128, 256, 512, 1024]  # x of a 2D block
BLOCK_YS = [1, 2, 4, 8, 16, 32]
UNROLLS = [1, 2, 4, 8, 16]
TEMPLATE_VALUES = [1, 2, 4, 8, 16]
ITEMS = [1, 2, 4, 8, 16, 32]
MIN_BLOCKS = [1, 2, 3, 4, 6, 8]
GRIDS = sorted({SM_COUNT * k for k in (1, 2, 3, 4, 6, 8, 12, 16, 32)} | {2 ** i for i in range(6, 17)})

_INT_RE = re.compile(r"^\s*\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?\s*$")
# a kernel that splits its block into warps (warp ids, lanes, shuffles)
_WARP_RE = re.compile(r"/\s*(?:32|warpSize|WARP_SIZE)\b|>>\s*5\b|%\s*(?:32|warpSize|WARP_SIZE)\b|&\s*31\b|"
                      r"\bwarpSize\b|__shfl")
_SIZEOF = {"char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "short": 2,
           "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "int": 4,
           "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "double": 8, "long long": 8,
           "int64_t": 8, "uint64_t": 8, "size_t": 8, "long": 8, "float2": 8, "float4": 16, "int4": 16,
           "half2": 4, "__half2": 4, "double2": 16}
_CDIV_FUNCS = {"cdiv", "ceil_div", "ceildiv", "div_up", "divup", "DIV_UP", "CEIL_DIV", "CDIV", "DIVUP", "iDivUp",
               "div_round_up", "DIV_ROUND_UP"}


def _int_literal(text: str) -> int | None:
    m = _INT_RE.match(text)
    return int(m.group(1), 0) if m else None


# --------------------------------------------------------------------------------------------- context
class _File:
    """The parsed file with the tree (for nodes at spans), defines and file-scope constants."""

    def __init__(self, cf: CudaFile):
        self.cf = cf
        self.text = cf.text
        self.data = cf.text.encode("utf-8")
        self.tree = parse_tree(self.data)
        self.root = self.tree.root_node
        self.defines = {d.name: d for d in cf.defines}
        self.consts = file_constants(self.tree, cf.text)
        self._starts: list[int] | None = None

    @staticmethod
    def of(cf: CudaFile) -> "_File":
        """The file's context, built once per CudaFile (templatizing every kernel of a file of thousands must
        not parse the whole file again for each: linear, not quadratic, in the number of kernels)."""
        f = cf.__dict__.get("_templatize_file")
        if f is None or f.cf is not cf or f.text is not cf.text:
            f = _File(cf)
            cf.__dict__["_templatize_file"] = f
        return f

    def line_start(self, line: int) -> int | None:
        """The byte offset where 0-based ``line`` starts, None past the end."""
        if self._starts is None:
            starts, i = [0], self.data.find(b"\n")
            while i >= 0:
                starts.append(i + 1)
                i = self.data.find(b"\n", i + 1)
            self._starts = starts
        return self._starts[line] if 0 <= line < len(self._starts) else None

    def t(self, n: Node) -> str:
        return self.data[n.start_byte:n.end_byte].decode("utf-8", errors="replace")

    def node(self, span: Span) -> Node | None:
        return self.root.named_descendant_for_byte_range(span.start, span.end)

    def line_of(self, offset: int) -> int:
        from bisect import bisect_right
        if self._starts is None:
            self.line_start(0)
        return bisect_right(self._starts, offset) - 1


@dataclass
class _Source:
    """A literal integer in the file that a parameter can stand for."""
    span: Span
    value: int
    text: str
    name: str | None  # the variable / macro it is the value of, if any
    where: str  # for the user: "#define BLOCK 128 at line 5"
    render: str = "{value}"  # the replacement, e.g. "{value} - 1" for the 255 of `(n + 255) / 256`

    @property
    def key(self) -> tuple[int, int]:
        return (self.span.start, self.span.end)


@dataclass
class _P:
    name: str
    kind: str
    original: int
    values: list[int]
    why: str
    sites: list[_Source] = field(default_factory=list)


def _span_of(n: Node) -> Span:
    return Span(n.start_byte, n.end_byte, n.start_point.row, n.start_point.column, n.end_point.row,
                n.end_point.column)


class _Resolver:
    """Follows a C expression to the integer literal it is (a literal, a variable, a macro)."""

    def __init__(self, f: _File, host_vars: dict[str, HostVar] | None):
        self.f = f
        self.vars: dict[str, HostVar] = dict(f.consts)
        if host_vars:
            self.vars.update(host_vars)

    def resolve(self, n: Node | None, depth: int = 0) -> _Source | None:
        if n is None or depth > 8:
            return None
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            return self.resolve(n.named_children[0], depth + 1)
        if n.type == "number_literal":
            v = _int_literal(self.f.t(n))
            if v is None:
                return None
            return _Source(_span_of(n), v, self.f.t(n), None, f"a literal at line {n.start_point.row + 1}")
        if n.type in ("identifier", "type_identifier"):  # `k<vec>`: a bare name parses as a type
            return self.resolve_name(self.f.t(n), depth)
        if n.type == "type_descriptor" and n.named_child_count == 1:
            return self.resolve(n.named_children[0], depth + 1)
        return None

    def _reassigned(self, hv: HostVar) -> bool:
        """A variable that is not const and is assigned again in its function (``int nth = 32; while (...)
        nth *= 2;``) is not the constant it starts as."""
        if re.search(r"\b(?:const|constexpr)\b", hv.type):
            return False
        data = self.f.data
        end = data.find(b"\n}", hv.span.end)
        seg = data[hv.span.end:end if end >= 0 else len(data)]
        n = re.escape(hv.name.encode())
        return re.search(rb"\b" + n + rb"\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*" + n + rb"\b|\b" + n +
                         rb"\s*(?:\+\+|--)", seg) is not None

    def resolve_name(self, name: str, depth: int = 0) -> _Source | None:
        hv = self.vars.get(name)
        if hv is not None:
            if hv.init is None or "dim3" in hv.type or self._reassigned(hv):
                return None
            src = self.resolve(self.f.node(hv.init.span), depth + 1)
            if src is not None and src.name is None:
                src.name = name
                src.where = f"`{hv.type} {name} = {hv.init.text};` at line {hv.span.line + 1}"
            return src
        d = self.f.defines.get(name)
        if d is not None and d.value_span is not None:
            v = _int_literal(d.value)
            if v is not None:
                m = re.search(r"0[xX][0-9a-fA-F]+|\d+", d.value)
                vb = d.value[:m.start()].encode("utf-8")
                start = d.value_span.start + len(vb)
                sp = Span(start, start + len(m.group(0)), d.value_span.line, d.value_span.col + len(vb),
                          d.value_span.line, d.value_span.col + len(vb) + len(m.group(0)))
                return _Source(sp, v, m.group(0), name, f"#define {name} {d.value} at line {d.span.line + 1}")
            if re.fullmatch(r"[A-Za-z_]\w*", d.value) and d.value != name:
                return self.resolve_name(d.value, depth + 1)
        return None


def _dim3_components(f: _File, r: _Resolver, n: Node | None, depth: int = 0) -> list[Node] | None:
    """The component expressions of a dim3 value (``dim3(a, b)``, a ``dim3 g(a, b)`` variable); None if
    ``n`` is not a dim3."""
    if n is None or depth > 8:
        return None
    if n.type == "parenthesized_expression" and n.named_child_count == 1:
        return _dim3_components(f, r, n.named_children[0], depth + 1)
    if n.type in ("call_expression", "compound_literal_expression"):
        fn = n.child_by_field_name("function") or n.child_by_field_name("type")
        if fn is not None and f.t(fn) == "dim3":
            args = n.child_by_field_name("arguments") or n.child_by_field_name("value")
            return [c for c in args.named_children if c.type != "comment"] if args is not None else []
    if n.type in ("argument_list", "initializer_list"):
        return [c for c in n.named_children if c.type != "comment"]
    if n.type == "parameter_list":  # `dim3 block(kThreadsX, kRows);`, parsed as a function declaration
        return [c.named_children[0] for c in n.named_children if c.type == "parameter_declaration"]
    if n.type == "identifier":
        hv = r.vars.get(f.t(n))
        if hv is not None and "dim3" in hv.type and hv.init is not None:
            inner = f.node(hv.init.span)
            comps = _dim3_components(f, r, inner, depth + 1)
            if comps is None and inner is not None:  # dim3 g = n;
                return [inner]
            return comps
    return None


# --------------------------------------------------------------------------------------------- analysis
def _param_name(raw: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", raw).upper()
    s = re.sub(r"\W", "_", s).strip("_") or "P"
    if s[0].isdigit():
        s = "P_" + s
    return s


class _Analysis:
    def __init__(self, cf: CudaFile, k: Kernel):
        self.cf, self.k = cf, k
        self.f = _File.of(cf)
        self.params: dict[str, _P] = {}
        self.by_key: dict[tuple[int, int], str] = {}
        self.constraints: list[str] = []
        self.notes: list[str] = []  # why something was not lifted
        self.body = self.f.node(k.body_span)
        self.body_text = cf.text.encode("utf-8")[k.body_span.start:k.body_span.end].decode("utf-8", "replace")
        self.block: str | None = None  # the block-size parameter (x)
        self.block_y: str | None = None  # the block-size parameter in y, when the block is 2D
        self.block_2d = False  # the launch's block is a dim3 of 2 or 3 components
        self.block_tp: str | None = None  # the kernel's template parameter that is the block size, if any
        self.tp_of: dict[str, str] = {}  # template-argument parameter -> the kernel's template parameter name
        self.grid_tied = False  # the launch's grid follows the block parameter (`cdiv(n, 256)`)
        self.items: str | None = None  # the items-per-thread parameter of a grid-stride kernel's grid
        self.launch: dict | None = None  # the spec's launch with its literal block size tied to the parameters

    # ------------------------------------------------------------------------------------- registry
    def _unique(self, name: str) -> str:
        if keyword.iskeyword(name.lower()) or name in expr.FUNCTIONS:
            name = name + "_P"
        base, i = name, 2
        while name in self.params:
            name = f"{base}_{i}"
            i += 1
        return name

    def add(self, src: _Source, name: str, kind: str, values: list[int], why: str) -> str:
        if src.key in self.by_key:
            return self.by_key[src.key]
        name = self._unique(name)
        self.params[name] = _P(name, kind, src.value, sorted(set(values) | {src.value}), why, [src])
        self.by_key[src.key] = name
        return name

    def tie(self, src: _Source, param: str, render: str = "{value}") -> None:
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

    # ------------------------------------------------------------------------------------- steps
    def _spec_site_first(self, sites: list[LaunchSite]) -> list[LaunchSite]:
        """The launch sites with the one the spec's launch describes first, where the host code has several
        that differ (``if (ncols < 1024) k<32><<<g, 32>>>(...); else k<1024><<<g, 1024>>>(...);``): the spec's
        ``template_args`` name it, else its block size at the first size set does. The tunable values are read
        from that branch."""
        if len(sites) < 2:
            return sites
        from agent_core.source import spec as spec_mod
        try:
            sp = spec_mod.find_spec(self.cf, self.k.name)
        except KerntuneError:
            return sites
        if sp is None:
            return sites

        def value(site: LaunchSite, n: Node | None) -> str | None:
            src = _Resolver(self.f, site.host_vars).resolve(n)
            return str(src.value) if src is not None else (self.f.t(n).strip() if n is not None else None)
        if sp.template_args:
            norm = lambda a: re.sub(r"\s+", "", {"true": "1", "false": "0"}.get(a.strip(), a))  # noqa: E731
            want = [norm(a) for a in sp.template_args]
            match = [st for st in sites if [norm(value(st, self.f.node(a.span)) or "") for a in st.template_args]
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
                r = _Resolver(self.f, st.host_vars)
                node = self.f.node(st.config[1].span)
                comps = _dim3_components(self.f, r, node)
                if value(st, comps[0] if comps else node) == want_block:
                    match.append(st)
        if not match or match[0] is sites[0]:
            return sites
        return [match[0]] + [st for st in sites if st is not match[0]]

    def run(self) -> None:
        sites = self._spec_site_first(self.k.launch_sites)
        if sites:
            self.template_args(sites[0])
            self.block_size(sites[0], primary=True)
            for s in sites[1:]:
                self.block_size(s, primary=False)
            self.grid_size(sites[0])
            for s in sites:
                self.grid_follows_block(s)
            self.items_per_thread(sites[0])
        else:
            self.notes.append("no launch site of it in this file")
        self.block_assumptions()
        self.launch_bounds()
        self.unroll()
        self.block_pow2()
        self.untied_block_literals()
        self.warp_lanes()
        self.spec_launch()
        self.spec_template_args()

    def template_args(self, site: LaunchSite) -> None:
        if not site.template_args:
            return
        r = _Resolver(self.f, site.host_vars)
        for tp, arg in zip(self.k.template_params, site.template_args):
            if tp.kind != "value":
                continue
            src = r.resolve(self.f.node(arg.span))
            if src is None:
                self.notes.append(f"template argument {tp.name} = {arg.text} is not a constant")
                continue
            pow2 = expr.FUNCTIONS["is_pow2"](src.value)
            values = [v for v in TEMPLATE_VALUES if v <= max(16, src.value)] if pow2 else [src.value]
            if src.value > 16 and pow2:
                values += [src.value // 2, src.value * 2]
            name = self.add(src, _param_name(tp.name), "template_arg", values,
                            f"template argument {tp.name} of {self.k.name}, from {src.where}")
            self.tp_of.setdefault(name, tp.name)
            if pow2 and src.value >= 1:
                self.constrain(f"is_pow2({name})")

    def block_size(self, site: LaunchSite, primary: bool) -> None:
        if len(site.config) < 2:
            return
        r = _Resolver(self.f, site.host_vars)
        node = self.f.node(site.config[1].span)
        comps = _dim3_components(self.f, r, node)
        multi = comps is not None and len(comps) > 1
        x = comps[0] if comps else node
        if primary:
            self.block_2d = multi
        src = r.resolve(x)
        if src is None:
            if primary:
                self.notes.append(f"the block size `{site.config[1].text}` is not a constant")
            return
        if not primary:
            if src.key in self.by_key:
                return
            if self.block is not None and src.value == self.params[self.block].original and src.name is None:
                self.tie(src, self.block)  # another launch with the same literal block size
            return
        if src.key in self.by_key:  # e.g. k<BLOCK><<<g, BLOCK>>>
            name = self.by_key[src.key]
            p = self.params[name]
            if p.kind == "template_arg":
                self.block_tp = self.tp_of.get(name)
                self.constraints = [c for c in self.constraints if c != f"is_pow2({name})"]  # block_pow2 decides
            p.kind, p.values = "block_size", self._block_values(src.value, multi)
            p.why = f"threads per block, from {src.where}"
        else:
            tp = self._template_param_for_block(src.value) if src.name is None else None
            if tp is not None:  # scale<2, 256><<<g, 256>>> with template <int VEC, int THREADS>
                name = tp
                self.tie(src, tp)
                p = self.params[tp]
                p.kind, p.values = "block_size", self._block_values(src.value, multi)
                p.why = f"threads per block; {p.why}"
                self.constraints = [c for c in self.constraints if c != f"is_pow2({tp})"]  # block_pow2 decides
                self.block_tp = self.tp_of.get(tp)
            else:
                default = "BLOCK_X" if multi else "BLOCK"
                name = self.add(src, _param_name(src.name) if src.name else default, "block_size",
                                self._block_values(src.value, multi),
                                f"threads per block{' in x' if multi else ''}, from {src.where}")
        self.block = name
        self.constrain(f"{name} % 32 == 0")
        self.constrain(f"{name} <= 1024")
        if multi and len(comps) > 1:
            ysrc = r.resolve(comps[1])
            if ysrc is not None and ysrc.value > 1 and ysrc.key not in self.by_key:
                yname = self.add(ysrc, _param_name(ysrc.name) if ysrc.name else "BLOCK_Y", "block_size",
                                 BLOCK_YS, f"threads per block in y, from {ysrc.where}")
                self.block_y = yname
                self.constraints = [c for c in self.constraints if not c.startswith(f"{name} % 32")]
                self.constrain(f"({name} * {yname}) % 32 == 0")
                self.constrain(f"{name} * {yname} <= 1024")

    def _template_param_for_block(self, value: int) -> str | None:
        for name, p in self.params.items():
            if p.kind == "template_arg" and p.original == value and re.search(r"BLOCK|THREAD|NT\b|TPB", name):
                return name
        return None

    def _block_values(self, original: int, multi: bool = False) -> list[int]:
        """Every multiple of 32 up to 1024 (block_pow2 narrows it to powers of two for a tree reduction)."""
        return sorted(set(BLOCK_XS if multi else ALL_BLOCKS) | {original})

    def grid_size(self, site: LaunchSite) -> None:
        if not self._grid_stride():
            return
        r = _Resolver(self.f, site.host_vars)
        node = self.f.node(site.config[0].span)
        comps = _dim3_components(self.f, r, node)
        x = comps[0] if comps else node
        src = r.resolve(x)
        if src is None:
            return  # the grid follows the problem size: nothing fixed to tune
        if src.key in self.by_key:
            return
        name = self.add(src, _param_name(src.name) if src.name else "GRID", "grid_size", GRIDS,
                        f"blocks in the grid of the grid-stride loop (which covers any size), from {src.where}")
        self.constrain(f"{name} >= 1")
        self.constrain(f"{name} <= 2147483647")

    def grid_follows_block(self, site: LaunchSite) -> None:
        """Literals of the grid's x expression that are the literal block size: ``cdiv(n, 256)`` with
        ``<<<..., 256>>>`` makes the 256 a site of the block parameter, so the grid keeps covering the
        problem when the block changes; the 255 of ``(n + 255) / 256`` becomes ``BLOCK - 1``. A host variable
        that is also passed to the kernel (``num_groups = n / 128`` launched as ``<<<num_groups, 128>>>(...,
        num_groups)``) is part of the problem, not of the launch shape: its literals are left alone."""
        if self.block is None or not site.config:
            return
        p = self.params[self.block]
        if p.kind != "block_size":
            return
        if any(s.name for s in p.sites):
            self.grid_tied = self.grid_tied or self._grid_mentions(site, {s.name for s in p.sites if s.name})
            return  # a named block size (macro, variable) is followed by name already
        exact: list[_Source] = []
        derived: list[tuple[_Source, str]] = []
        for x in self._grid_x_nodes(site, _Resolver(self.f, site.host_vars), follow_dim3=True):
            if x.type != "number_literal":
                continue
            v = _int_literal(self.f.t(x))
            if v is None or (x.start_byte, x.end_byte) in self.by_key or not _in_arithmetic(self.f, x):
                continue  # a grid that is just `256` is its own thing, not the block size
            src = _Source(_span_of(x), v, self.f.t(x), None, f"line {x.start_point.row + 1}")
            if v == p.original:
                exact.append(src)
            elif v == p.original - 1:
                par = x.parent
                additive = par is not None and par.type == "binary_expression" and \
                    self.f.t(par.child_by_field_name("operator")) == "+"
                derived.append((src, "{value} - 1" if additive else "({value} - 1)"))
        if not exact:
            return  # `n + 255` alone is not the block size
        self.grid_tied = True
        for src in exact:
            self.tie(src, self.block)
        for src, render in derived:
            self.tie(src, self.block, render)

    def _grid_stride(self) -> bool:
        if self.body is None or "gridDim" not in self.body_text:
            return False
        strided: set[str] = set()
        for n in _walk(self.body):
            if n.type == "init_declarator":
                v = n.child_by_field_name("value")
                d = n.child_by_field_name("declarator")
                if v is not None and d is not None and "gridDim" in self.f.t(v):
                    strided.add(self.f.t(d))
            elif n.type == "assignment_expression":
                op = n.child_by_field_name("operator")
                rt = n.child_by_field_name("right")
                lt = n.child_by_field_name("left")
                if op is None or rt is None or lt is None:
                    continue
                if self.f.t(op) == "=" and "gridDim" in self.f.t(rt):
                    strided.add(self.f.t(lt))
        for n in _walk(self.body):
            if n.type == "assignment_expression":
                op = n.child_by_field_name("operator")
                rt = n.child_by_field_name("right")
                if op is not None and rt is not None and self.f.t(op) == "+=":
                    txt = self.f.t(rt)
                    if "gridDim" in txt or set(re.findall(r"\w+", txt)) & strided:
                        return True
        return False

    def _grid_x_nodes(self, site: LaunchSite, r: "_Resolver", follow_dim3: bool):
        """Every node of the launch's grid x expression, host variables followed to their initializers (the
        kernel's own arguments are not followed; a dim3 variable to its x component, or not at all)."""
        node = self.f.node(site.config[0].span)
        comps = _dim3_components(self.f, r, node)
        todo = [comps[0] if comps else node]
        seen: set[str] = set(_launch_arg_names(self.f, site))
        while todo:
            n = todo.pop()
            if n is None:
                continue
            for x in _walk(n):
                if x.type == "identifier":
                    name = self.f.t(x)
                    hv = r.vars.get(name)
                    is_dim3 = hv is not None and "dim3" in hv.type
                    if hv is not None and hv.init is not None and name not in seen and (follow_dim3 or not is_dim3):
                        seen.add(name)
                        init = self.f.node(hv.init.span)
                        c = _dim3_components(self.f, r, init) if is_dim3 else None
                        todo.append(c[0] if c else init)
                yield x

    def items_per_thread(self, site: LaunchSite) -> None:
        """In a grid-stride kernel launched on ``cdiv(n, 256 * 4)`` blocks, the 4 (items per thread the grid
        is sized for) can be anything: the loop covers the problem with any grid. It becomes ITEMS."""
        if self.block is None or not site.config or not self._grid_stride():
            return
        r = _Resolver(self.f, site.host_vars)
        ceil, found = False, []
        for x in self._grid_x_nodes(site, r, follow_dim3=False):
            if x.type == "call_expression":
                fn = x.child_by_field_name("function")
                ceil = ceil or (fn is not None and self.f.t(fn).split("::")[-1] in _CDIV_FUNCS)
            elif x.type == "binary_expression":
                op = self.f.t(x.child_by_field_name("operator"))
                lt, rt = x.child_by_field_name("left"), x.child_by_field_name("right")
                if lt is None or rt is None:
                    continue
                if op == "/" and any(y.type == "binary_expression" and
                                     self.f.t(y.child_by_field_name("operator")) == "+" for y in _walk(lt)):
                    ceil = True
                if op == "*":
                    for a, b in ((lt, rt), (rt, lt)):
                        if b.type == "number_literal" and (b.start_byte, b.end_byte) not in self.by_key \
                                and self._is_block(a, r):
                            found.append(b)
        if not found:
            return
        where = f"line {found[0].start_point.row + 1}"
        values = {_int_literal(self.f.t(b)) for b in found}
        if not ceil or len(values) != 1 or None in values or min(values) < 1:  # type: ignore[type-var]
            self.notes.append(f"the items per thread of the grid at {where} are not lifted: the grid is not a "
                              "round-up division by one product of the block size")
            return
        srcs = [_Source(_span_of(b), _int_literal(self.f.t(b)), self.f.t(b), None, f"line {b.start_point.row + 1}")
                for b in found]
        k = srcs[0].value
        name = self.add(srcs[0], "ITEMS", "items_per_thread", ITEMS,
                        f"items per thread the grid is sized for ({k} at {where}); the grid-stride loop covers "
                        "the problem with any grid, so this only trades blocks for work per thread")
        for src in srcs[1:]:
            self.tie(src, name)
        self.items = name
        self.constrain(f"{name} >= 1")

    def _is_block(self, n: Node, r: _Resolver) -> bool:
        """``n`` stands for the block parameter (a literal site of it, or a name resolving to one)."""
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            return self._is_block(n.named_children[0], r)
        if n.type == "number_literal":
            return self.by_key.get((n.start_byte, n.end_byte)) == self.block
        if n.type == "identifier":
            src = r.resolve(n)
            return src is not None and self.by_key.get(src.key) == self.block
        return False

    def _grid_mentions(self, site: LaunchSite, names: set[str]) -> bool:
        """The grid's x expression (through host variables) uses one of ``names``."""
        r = _Resolver(self.f, site.host_vars)
        node = self.f.node(site.config[0].span)
        comps = _dim3_components(self.f, r, node)
        todo = [comps[0] if comps else node]
        seen: set[str] = set(_launch_arg_names(self.f, site))
        while todo:
            n = todo.pop()
            if n is None:
                continue
            for x in _walk(n):
                if x.type != "identifier":
                    continue
                name = self.f.t(x)
                if name in names:
                    return True
                hv = r.vars.get(name)
                if hv is not None and hv.init is not None and name not in seen:
                    seen.add(name)
                    if src := r.resolve_name(name):
                        if src.name in names:
                            return True
                    todo.append(self.f.node(hv.init.span))
        return False

    def _thread_vars(self) -> set[str]:
        """Variables of the kernel computed from ``threadIdx`` (``int tid = threadIdx.x; int i = tid;``)."""
        out: set[str] = set()
        decls = []
        for n in _walk(self.body):
            if n.type == "init_declarator":
                d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                if d is not None and v is not None:
                    decls.append((self.f.t(d), v))
            elif n.type == "assignment_expression" and self.f.t(n.child_by_field_name("operator")) == "=":
                d, v = n.child_by_field_name("left"), n.child_by_field_name("right")
                if d is not None and v is not None and d.type == "identifier":
                    decls.append((self.f.t(d), v))
        changed = True
        while changed:
            changed = False
            for name, v in decls:
                if name in out:
                    continue
                ids = {self.f.t(x) for x in _walk(v) if x.type == "identifier"}
                if "threadIdx" in ids or ids & out:
                    out.add(name)
                    changed = True
        return out

    def _block_names(self) -> set[str]:
        """Names that stand for the block size inside the kernel: ``blockDim``, the macro / constant / template
        parameter of the block parameter, and macros and constants defined from those."""
        names = {"blockDim"}
        if self.block is None:
            return names
        names |= {s.name for s in self.params[self.block].sites if s.name}
        if self.block_tp:
            names.add(self.block_tp)
        changed = True
        while changed:
            changed = False
            for d in self.f.cf.defines:
                if d.name not in names and set(re.findall(r"[A-Za-z_]\w*", d.value)) & names:
                    names.add(d.name)
                    changed = True
            for cname, hv in self.f.consts.items():
                if cname not in names and hv.init is not None and \
                        set(re.findall(r"[A-Za-z_]\w*", hv.init.text)) & names:
                    names.add(cname)
                    changed = True
        return names

    def block_assumptions(self) -> None:
        """Constants in the kernel that assume the block size follow the block parameter: ``__shared__`` array
        sizes, the step of a ``threadIdx``-strided loop, ``blockIdx.x * 256`` and the first stride
        ``s = 128`` of a tree reduction, whether written as a literal or as a constant of their own
        (``#define SMEM 256``); a padded dimension (``[256 + 1]``, ``[257]``) follows as ``BLOCK + 1``; a
        macro or constant that is the warp count (``#define NWARPS 8`` sizing a ``__shared__`` array, with
        256 threads, in a kernel that computes warp ids) follows as ``BLOCK / 32``."""
        if self.block is None or self.body is None:
            return
        bp = self.params[self.block]
        orig = bp.original
        r = _Resolver(self.f, None)
        warps = bool(_WARP_RE.search(_strip_comments(self.body_text)))
        tvars = self._thread_vars()
        for n in _walk(self.body):
            cands: list[tuple[Node | None, bool]] = []  # (node, is a __shared__ array size)
            if n.type == "declaration" and "__shared__" in [self.f.t(c) for c in n.children
                                                             if c.type in ("type_qualifier", "storage_class_specifier",
                                                                           "attribute_specifier")]:
                for a in _walk(n):
                    if a.type == "array_declarator":
                        cands.append((a.child_by_field_name("size"), True))
            elif n.type == "binary_expression" and self.f.t(n.child_by_field_name("operator")) == "*":
                lt, rt = n.child_by_field_name("left"), n.child_by_field_name("right")
                if lt is not None and rt is not None:  # blockIdx.x * 256
                    if self.f.t(lt).replace(" ", "") == "blockIdx.x":
                        cands.append((rt, False))
                    elif self.f.t(rt).replace(" ", "") == "blockIdx.x":
                        cands.append((lt, False))
            elif n.type == "assignment_expression":  # i += 256 / i = i + 256 on a threadIdx-derived i
                op, lt, rt = (n.child_by_field_name(x) for x in ("operator", "left", "right"))
                if op is not None and lt is not None and rt is not None and lt.type == "identifier" \
                        and self.f.t(lt) in tvars:
                    if self.f.t(op) == "+=":
                        cands.append((rt, False))
                    elif self.f.t(op) == "=" and rt.type == "binary_expression" and \
                            self.f.t(rt.child_by_field_name("operator")) == "+":
                        a, b = rt.child_by_field_name("left"), rt.child_by_field_name("right")
                        if a is not None and b is not None:
                            if self.f.t(a) == self.f.t(lt):
                                cands.append((b, False))
                            elif self.f.t(b) == self.f.t(lt):
                                cands.append((a, False))
            if n.type == "for_statement" and orig % 2 == 0:  # for (s = 128; s > 0; s >>= 1)
                upd = n.child_by_field_name("update")
                init = n.child_by_field_name("initializer")
                if upd is not None and init is not None and re.search(r">>=\s*1\b|/=\s*2\b", self.f.t(upd)):
                    for x in _walk(init):
                        if x.type == "number_literal" and x.parent is not None and \
                                x.parent.type in ("init_declarator", "assignment_expression") and \
                                _int_literal(self.f.t(x)) == orig // 2:
                            src = _Source(_span_of(x), orig // 2, self.f.t(x), None, "")
                            self.tie(src, self.block, "{value} / 2")
            for c, shared in cands:
                self._tie_block_constant(c, r, shared, warps)

    def _tie_block_constant(self, c: Node | None, r: _Resolver, shared: bool, warps: bool) -> None:
        if c is None:
            return
        orig = self.params[self.block].original
        if shared and c.type == "binary_expression" and self.f.t(c.child_by_field_name("operator")) == "+":
            # [256 + 1]: padding after the block constant
            self._tie_block_constant(c.child_by_field_name("left"), r, shared, warps)
            return
        if c.type not in ("number_literal", "identifier"):
            return
        src = r.resolve(c)
        if src is None or src.key in self.by_key:
            return  # not a constant, or a name that follows the block parameter already
        if src.value == orig:
            self.tie(src, self.block)
        elif shared and src.value == orig + 1 and c.type == "number_literal":
            self.tie(src, self.block, "{value} + 1")
        elif shared and warps and src.name and orig // 32 >= 2 and src.value == orig // 32:
            self.tie(src, self.block, "({value} / 32)")

    def block_pow2(self) -> None:
        """A tree reduction whose first stride comes from the block size (``for (s = BLOCK / 2; s > 0;
        s >>= 1)``) needs a power-of-two block: the domain is narrowed to powers of two and constrained."""
        if self.block is None:
            return
        p = self.params[self.block]
        if p.kind != "block_size":
            return
        line = self._tree_reduction()
        if line is None or not expr.FUNCTIONS["is_pow2"](p.original):
            return
        p.values = sorted({v for v in p.values if expr.FUNCTIONS["is_pow2"](v)} | {p.original})
        self.constrain(f"is_pow2({p.name})")

    def _tree_reduction(self) -> int | None:
        """The 0-based line of a halving update (``s >>= 1``, ``s /= 2``, ``s = s / 2``) of a variable whose
        start comes from the block size, or whose start is unknown; None when there is none."""
        if self.body is None:
            return None
        names = self._block_names()
        bp = self.params[self.block] if self.block else None
        halvings: list[tuple[str, Node]] = []
        inits: dict[str, list[Node]] = {}
        for n in _walk(self.body):
            if n.type == "init_declarator":
                d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                if d is not None and v is not None and d.type == "identifier":
                    inits.setdefault(self.f.t(d), []).append(v)
                continue
            if n.type != "assignment_expression":
                continue
            op, lt, rt = (n.child_by_field_name(x) for x in ("operator", "left", "right"))
            if op is None or lt is None or rt is None or lt.type != "identifier":
                continue
            v, o = self.f.t(lt), self.f.t(op)
            if (o == ">>=" and _int_literal(self.f.t(rt)) == 1) or (o == "/=" and _int_literal(self.f.t(rt)) == 2):
                halvings.append((v, n))
            elif o == "=" and rt.type == "binary_expression" and self.f.t(rt.child_by_field_name("left")) == v \
                    and (self.f.t(rt.child_by_field_name("operator")), _int_literal(
                        self.f.t(rt.child_by_field_name("right")))) in ((">>", 1), ("/", 2)):
                halvings.append((v, n))
            elif o == "=":
                inits.setdefault(v, []).append(rt)

        def from_block(x: Node) -> bool:
            for y in _walk(x):
                if y.type in ("identifier", "type_identifier") and self.f.t(y) in names:
                    return True
                if y.type == "number_literal":
                    if self.by_key.get((y.start_byte, y.end_byte)) == self.block:
                        return True
                    if bp is not None and _int_literal(self.f.t(y)) in (bp.original, bp.original // 2):
                        return True
            return False

        for v, n in halvings:
            starts = inits.get(v, [])
            if not starts or any(from_block(x) for x in starts):
                return n.start_point.row
        return None

    def untied_block_literals(self) -> None:
        """A literal in the kernel that looks like the block size (or half of it, or its warp count) next to
        thread indices, but is not tied to the parameter (``if (tid < 128) red[tid] += red[tid + 128];``):
        kerntune cannot tell what it means, so the block size stays fixed, and ``why`` says which literal."""
        if self.block is None or self.body is None:
            return
        p = self.params[self.block]
        if p.kind != "block_size" or len(p.values) == 1:
            return
        orig = p.original
        suspects = {orig: "the block size"}
        if orig // 2 >= 16:
            suspects.setdefault(orig // 2, "half the block size")
        if _WARP_RE.search(_strip_comments(self.body_text)) and orig // 32 >= 2:
            suspects.setdefault(orig // 32, "the warp count of the block")
        tvars = self._thread_vars() | {"threadIdx"}
        for x in _walk(self.body):
            if x.type != "number_literal" or (x.start_byte, x.end_byte) in self.by_key:
                continue
            v = _int_literal(self.f.t(x))
            if v not in suspects:
                continue
            par = x.parent
            if v == 32 and v != orig and par is not None and par.type == "binary_expression" and \
                    par.child_by_field_name("right") == x and \
                    self.f.t(par.child_by_field_name("operator")) in ("/", "%"):
                continue  # `kThreads / 32`, `threadIdx.x % 32`: the warp size, dividing, not the warp count
            ctx = _statement_of(x)
            ids = {self.f.t(y) for y in _walk(ctx) if y.type == "identifier"} if ctx is not None else set()
            shared = ctx is not None and ctx.type == "declaration" and "__shared__" in self.f.t(ctx).split()
            if not (ids & tvars or shared):
                continue
            line = x.start_point.row + 1
            p.values = [orig]
            p.why += (f"; fixed at {orig}: the literal {self.f.t(x)} at line {line} looks like {suspects[v]} "
                      f"but kerntune cannot tie it to {p.name}; write it from {p.name} (or blockDim.x) to tune "
                      "the block size")
            self.notes.append(f"the block size {orig} stays fixed: the literal {self.f.t(x)} at line {line} looks like "
                              f"{suspects[v]} but is not written from it")
            return

    def spec_launch(self) -> None:
        """The kernel's spec gives the launch the tuner runs; when it writes the block size as a literal
        (``block = "256"``) it must follow the block parameter, or every variant would run on the original
        block (a shared array sized for 64 threads indexed by 256, a stride of 512 walked by 256 threads). Its
        literal block size, and the block-size literals of its grid where the launch's own grid follows the
        block (``cdiv(n, 128)``), become the parameter's names in the template's ``launch``; written in a
        spec comment, they are also sites, so that a rewritten file's spec still matches its launch."""
        if self.block is None:
            return
        from agent_core.source import spec as spec_mod
        try:
            sp = spec_mod.find_spec(self.cf, self.k.name)
        except KerntuneError:
            return  # a broken spec is reported where it is used
        if sp is None:
            return
        names = set(self.params)
        edits: dict[tuple[str, int], list[tuple[int, int, str, int, str, str]]] = {}
        block_params = [self.block, self.block_y]
        for j, e in enumerate(sp.block):
            pname = block_params[j] if j < len(block_params) else None
            if pname is None or _expr_names(e) & names:
                continue
            node = _expr_int(e)
            if node is not None and node[2] == self.params[pname].original:
                edits[("block", j)] = [(node[0], node[1], pname, node[2], pname, "{value}")]
        if sp.grid and not _expr_names(sp.grid[0]) & names:
            got = self._spec_grid_edits(sp.grid[0])
            if got:
                edits[("grid", 0)] = got
        if not edits:
            return
        launch = {"grid": list(sp.grid), "block": list(sp.block), "smem": sp.smem or "0"}
        for (fld, j), es in edits.items():
            text = launch[fld][j].encode("utf-8")
            for a, b, rep, *_ in sorted(es, reverse=True):
                text = text[:a] + rep.encode("utf-8") + text[b:]
            launch[fld][j] = text.decode("utf-8")
        self.launch = launch
        if sp.span is None:  # a sidecar spec: the launch is all there is
            return
        for (fld, j), es in edits.items():
            start = self._spec_string_start(sp, fld, j)
            if start is None:
                continue
            for a, b, _rep, value, param, render in es:
                sb, se = start + a, start + b  # a TOML string on one line
                line, col = self.f.line_of(sb), sb - (self.f.data.rfind(b"\n", 0, sb) + 1)
                src = _Source(Span(sb, se, line, col, line, col + (se - sb)), value,
                              self.f.data[sb:se].decode("utf-8"), None, f"the spec's {fld} at line {line + 1}")
                self.tie(src, param, render)

    def spec_template_args(self) -> None:
        """A spec comment's ``template_args`` names the instantiation to tune; an integer there that is the
        original value of a parameter lifted from that template argument is a site of the parameter, so that
        a rewritten file's spec still names the instantiation its launch makes."""
        from agent_core.source import spec as spec_mod
        try:
            sp = spec_mod.find_spec(self.cf, self.k.name)
        except KerntuneError:
            return
        if sp is None or sp.span is None or not sp.template_args:
            return
        param_of = {tp: n for n, tp in self.tp_of.items()}
        for i, (tp, a) in enumerate(zip(self.k.template_params, sp.template_args)):
            name = param_of.get(tp.name)
            m = re.fullmatch(r"\s*(\d+)\s*", a)
            if name is None or m is None or int(m.group(1)) != self.params[name].original:
                continue
            start = self._spec_string_start(sp, "template_args", i)
            if start is None:
                continue
            sb, se = start + m.start(1), start + m.end(1)
            line, col = self.f.line_of(sb), sb - (self.f.data.rfind(b"\n", 0, sb) + 1)
            self.tie(_Source(Span(sb, se, line, col, line, col + (se - sb)), int(m.group(1)), m.group(1), None,
                             f"the spec's template_args at line {line + 1}"), name)

    def _spec_grid_rows_edits(self, tree, offs) -> list[tuple[int, int, str, int, str, str]]:
        """The literals of the spec's grid that are the block's y size, where every launch's grid x is written
        from the y size's name (``(rows + kRowsPerBlock - 1) / kRowsPerBlock`` with ``dim3 block(32,
        kRowsPerBlock)``): the grid covers the rows for every value of it."""
        if self.block_y is None or not self.k.launch_sites:
            return []
        py = self.params[self.block_y]
        names = {s.name for s in py.sites if s.name}
        if not names or not all(self._grid_mentions(site, names) for site in self.k.launch_sites):
            return []
        parents = {c: par for par in ast.walk(tree) for c in ast.iter_child_nodes(par)}
        out = []
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Constant) and type(n.value) is int):
                continue
            par = parents.get(n)
            a, b = offs(n)
            if n.value == py.original and isinstance(par, (ast.BinOp, ast.Call)):
                out.append((a, b, self.block_y, py.original, self.block_y, "{value}"))
            elif n.value == py.original - 1 and isinstance(par, ast.BinOp) and isinstance(par.op, ast.Add):
                out.append((a, b, f"{self.block_y} - 1", py.original - 1, self.block_y, "{value} - 1"))
        return out

    def _spec_grid_edits(self, e: str) -> list[tuple[int, int, str, int, str, str]]:
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
        grid = next((p for p in self.params.values() if p.kind == "grid_size"), None)
        if grid is not None and isinstance(tree.body, ast.Constant) and tree.body.value == grid.original:
            a, b = offs(tree.body)
            return [(a, b, grid.name, grid.original, grid.name, "{value}")]
        rows = self._spec_grid_rows_edits(tree, offs)
        if rows:  # rows per block in y: `cdiv(rows, 4)` where the launch divides by ROWS_PER_BLOCK
            return rows
        if not self.grid_tied or self.block is None:
            return []
        bo = self.params[self.block].original
        io = self.params[self.items].original if self.items else None
        parents = {c: par for par in ast.walk(tree) for c in ast.iter_child_nodes(par)}
        ints = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int]
        exact = [n for n in ints if n.value == bo and isinstance(parents.get(n), (ast.BinOp, ast.Call))]
        if not exact:
            return []
        for n in exact:
            a, b = offs(n)
            out.append((a, b, self.block, bo, self.block, "{value}"))
        for n in ints:
            par = parents.get(n)
            if n in exact or par is None:
                continue
            a, b = offs(n)
            if n.value == bo - 1 and isinstance(par, ast.BinOp):
                additive = isinstance(par.op, ast.Add)  # n + 127 -> n + BLOCK - 1; else parenthesized
                out.append((a, b, f"{self.block} - 1" if additive else f"({self.block} - 1)", bo - 1, self.block,
                            "{value} - 1" if additive else "({value} - 1)"))
            elif io is not None and n.value == io and isinstance(par, ast.BinOp) and isinstance(par.op, ast.Mult) \
                    and any(o in exact for o in (par.left, par.right)):
                out.append((a, b, self.items, io, self.items, "{value}"))
        return out

    def _spec_string_start(self, sp, fld: str, j: int) -> int | None:
        """The byte offset in the file where the text of the spec comment's ``fld`` (its ``j``-th string,
        for a list) starts; None when it cannot be found exactly as parsed."""
        if sp.span is None or fld not in sp.lines:
            return None
        data = self.f.data
        pos = self.f.line_start(sp.lines[fld])
        if pos is None:
            return None
        m = re.compile(rb"\b" + fld.encode() + rb"\s*=\s*").match(data, data.find(fld.encode(), pos))
        if m is None or m.start() >= sp.span.end:
            return None
        strings = list(re.compile(rb'"((?:[^"\\\n])*)"|\'([^\'\n]*)\'').finditer(data, m.end(), sp.span.end))
        if j >= len(strings):
            return None
        sm = strings[j]
        g = 1 if sm.group(1) is not None else 2
        value = getattr(sp, fld)[j]
        return sm.start(g) if sm.group(g).decode("utf-8", "replace") == value else None

    def launch_bounds(self) -> None:
        lb = self.k.launch_bounds
        if not lb:
            return
        r = _Resolver(self.f, None)
        src = r.resolve(self.f.node(lb[0].span))
        lb_name = None
        if src is None:
            if lb[0].text.strip() not in {tp.name for tp in self.k.template_params}:  # a template parameter follows
                self.notes.append(f"__launch_bounds__({lb[0].text}) is not a constant")
        elif src.key in self.by_key:
            lb_name = self.by_key[src.key]
        elif self.block is not None and src.value == self.params[self.block].original:
            self.tie(src, self.block)
            lb_name = self.block
        else:
            if self.block is not None:
                values = sorted(set(POW2_BLOCKS) | {src.value})
            else:  # the block size is not ours: only values the original launch is sure to fit
                values = [v for v in POW2_BLOCKS if v >= src.value]
            lb_name = self.add(src, "LAUNCH_BOUNDS", "launch_bounds", values,
                               f"__launch_bounds__ max threads per block, from {src.where}")
            if self.block is not None:
                self.constrain(f"{lb_name} >= {self.block}")
            self.constrain(f"{lb_name} <= 1024")
        if len(lb) > 1:
            msrc = r.resolve(self.f.node(lb[1].span))
            if msrc is not None and msrc.key not in self.by_key:
                mname = self.add(msrc, "MIN_BLOCKS", "launch_bounds", MIN_BLOCKS,
                                 f"__launch_bounds__ min blocks per SM, from {msrc.where}")
                if lb_name is not None:
                    self.constrain(f"{lb_name} * {mname} <= 2048")

    def unroll(self) -> None:
        prs = [p for p in self.k.pragmas if p.value is not None and p.value_span is not None]
        for p in prs:
            src = _Source(p.value_span, p.value, str(p.value), None, f"#pragma {p.text} at line {p.span.line + 1}")
            name = "UNROLL" if len(prs) == 1 else f"UNROLL_{p.span.line + 1}"
            loop = f" on the loop at line {p.loop_span.line + 1}" if p.loop_span else ""
            self.add(src, name, "unroll", UNROLLS, f"unroll factor{loop}, from {src.where}")
        if not prs:
            self.notes.append("no #pragma unroll N")

    # ------------------------------------------------------------------------------------- results
    def sites(self) -> list[Site]:
        out = []
        for p in self.params.values():
            for s in p.sites:
                out.append(Site(param=p.name, span=s.span, original_text=s.text, render=s.render))
        out.sort(key=lambda s: s.span.start)
        return out

    def warp_lanes(self) -> None:
        """A block whose x size is 32 in a kernel written for warps of 32 lanes (a warp per row in a 2-D block,
        or one warp per block without shared memory, with warp shuffles or lane arithmetic on threadIdx.x) keeps
        x = 32: its shuffles, masks and `threadIdx.x & 31` assume it, and any other value fails verification."""
        if self.block is None:
            return
        p = self.params[self.block]
        if p.original != 32 or len(p.values) == 1:
            return
        lanes = re.search(r"__shfl\w*_sync|threadIdx\.x\s*[&%]\s*(?:31|32|WARP_SIZE)\b|\blane"
                          r"|=\s*threadIdx\.x\s*;[^;]*;[^)]*\+=\s*32\b", self.body_text)  # a stride of 32 lanes
        lanes = lanes or re.search(r"__shfl\w*_sync", self.cf.text)  # a warp-reduce helper of the file
        if not lanes or not (self.block_2d or "__shared__" not in self.body_text):
            return
        p.values = [32]
        self.notes.append(f"the block's x size {p.name} = 32 stays fixed: the kernel works in warps of 32 lanes")

    def why_nothing(self) -> str:
        parts = list(dict.fromkeys(self.notes))
        if not self.k.launch_bounds:
            parts.append("no __launch_bounds__")
        if not self.k.template_params:
            parts.append("no template parameters")
        return "; ".join(parts)


def _in_arithmetic(f: _File, x: Node) -> bool:
    """``x`` is an operand of arithmetic or an argument of a (non-dim3) call such as ``cdiv(n, 256)``."""
    par = x.parent
    if par is None:
        return False
    if par.type == "binary_expression":
        return True
    if par.type == "argument_list" and par.parent is not None and par.parent.type == "call_expression":
        fn = par.parent.child_by_field_name("function")
        return fn is not None and f.t(fn) != "dim3"
    return False


def _expr_names(e: str) -> set[str]:
    try:
        return expr.names(e)
    except expr.ExprError:
        return set()


def _expr_int(e: str) -> tuple[int, int, int] | None:
    """(start, end, value) of ``e`` when it is one integer literal (``"256"``), offsets in UTF-8 bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*", e)
    return (m.start(1), m.end(1), int(m.group(1))) if m else None


def _statement_of(x: Node) -> Node | None:
    """The statement (or loop header, or declaration) around an expression node."""
    n = x
    while n.parent is not None:
        par = n.parent
        if par.type == "for_statement":
            return n if n.type != "compound_statement" else None  # the initializer / condition / update
        if n.type in ("expression_statement", "declaration", "return_statement", "condition_clause"):
            return n
        if par.type in ("if_statement", "while_statement") and n.type == "parenthesized_expression":
            return n
        n = par
    return None


def _launch_arg_names(f: _File, site: LaunchSite) -> list[str]:
    """The identifiers a launch passes to the kernel as (parts of) its arguments."""
    out = []
    for a in site.args:
        n = f.node(a.span)
        if n is not None:
            out += [f.t(x) for x in _walk(n) if x.type == "identifier"]
    return out


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def _walk(n: Node):
    stack = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.named_children))


def _check_supported(cf: CudaFile, k: Kernel) -> None:
    if "__global__" not in re.findall(r"\w+", k.signature):
        macros = [d.name for d in cf.defines if "__global__" in d.value.split()]
        used = [m for m in macros if m in re.findall(r"\w+", k.signature)]
        what = f"the macro {used[0]}" if used else "a macro"
        raise KerntuneError(f"kernel '{k.name}' is declared through {what} standing in for __global__: "
                            "write __global__ in its declaration so kerntune can read and templatize it",
                            cf.path, k.span.line, k.span.col)
    errors = kernel_has_errors(cf, k)
    if errors:
        e = errors[0]
        raise KerntuneError(f"kernel '{k.name}' does not parse here ({e.message}); fix the syntax (a #pragma "
                            "between `if (...)` and an unbraced body is a common cause) before templatizing",
                            cf.path, e.span.line, e.span.col)


def _kernel(cf: CudaFile, name: str) -> Kernel:
    """The kernel named ``name``; else a KerntuneError naming the file, the kernels it has (with their lines)
    and the closest name, located at a function of that name that is not a kernel, the closest kernel, or the
    file's first line."""
    try:
        return cf.kernel(name)
    except KerntuneError:
        pass
    fn = re.compile(rf"\b{re.escape(name)}\s*\(")
    plain = next((i for i, text in enumerate(_strip_comments(cf.text).split("\n")) if fn.search(text)), None)
    note = f"; '{name}' at line {plain + 1} is not a __global__ function" if plain is not None else ""
    if not cf.kernels:
        raise KerntuneError(f"no __global__ kernel named '{name}': this file has no __global__ kernels{note}",
                            cf.path, plain or 0, 0)
    close = difflib.get_close_matches(name, [k.name for k in cf.kernels], 1, 0.5)
    at = next(k for k in cf.kernels if k.name == close[0]) if close else cf.kernels[0]
    have = ", ".join(f"{k.name} (line {k.name_span.line + 1})" for k in cf.kernels)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    line, col = (plain, 0) if plain is not None else (at.name_span.line, at.name_span.col)
    raise KerntuneError(f"no __global__ kernel named '{name}' (kernels in this file: {have}){note}{hint}", cf.path,
                        line, col)


def _analyze(cf: CudaFile, kernel: str) -> _Analysis:
    k = _kernel(cf, kernel)
    _check_supported(cf, k)
    a = _Analysis(cf, k)
    a.run()
    return a


# --------------------------------------------------------------------------------------------- public
def tunable_sites(cf: CudaFile, kernel: str) -> list[Site]:
    """The hard-coded tunable places of ``kernel`` (empty when there are none or it cannot be analyzed)."""
    try:
        a = _analyze(cf, kernel)
    except KerntuneError:
        return []
    if all(len(p.values) == 1 for p in a.params.values()):
        return []  # templatize says why there is nothing to tune
    return a.sites()


def template_text(cf: CudaFile, kernel: str, params: dict[str, Param], sites: list[Site],
                  launch: dict | None = None) -> str:
    """The file with every site replaced by its macro, behind the params header.

    nvcc does not macro-expand ``#pragma unroll N`` but evaluates N as a constant expression, so a parameter
    used there becomes a ``constexpr int`` of the macro's name (the macro is read, then undefined). The
    header's last line is a ``#line`` directive continued onto the end marker, so that nvcc reports the
    user's own line numbers and ``apply.strip_header`` still removes the whole header. A ``launch`` (the
    spec's, tied to the parameters) is written in the header too: variants of the same text launched
    differently are different templates."""
    data = cf.text.encode("utf-8")
    out, pos = [], 0
    for s in sorted(sites, key=lambda s: s.span.start):
        out += [data[pos:s.span.start], s.render.format(value=macro_name(s.param)).encode()]
        pos = s.span.end
    out.append(data[pos:])
    body = b"".join(out).decode("utf-8")
    in_pragma = {p.name for p in params.values() if p.kind == "unroll"}
    lines = [HEADER_BEGIN,
             f"// kerntune: structural template of kernel '{kernel}'; compile with -DKT_<PARAM>=<value>"]
    if launch:
        lines.append("// kerntune: launched on grid ({}) x block ({}), smem {}".format(
            ", ".join(_as_list(launch.get("grid"))), ", ".join(_as_list(launch.get("block"))), launch.get("smem") or 0))
    for p in params.values():
        m = macro_name(p.name)
        lines += [f"// {p.name} ({p.kind}): {p.why}", f"#ifndef {m}", f"#define {m} {p.original}", "#endif"]
        if p.name in in_pragma:
            lines += [f"constexpr int kerntune_{p.name}_value = {m};  // #pragma unroll does not expand macros",
                      f"#undef {m}", f"constexpr int {m} = kerntune_{p.name}_value;"]
    if cf.path and not cf.path.startswith("<"):
        path = os.path.abspath(cf.path).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'#line 1 "{path}" \\')  # continued onto the end marker: the next line is line 1
    lines.append(HEADER_END)
    return "\n".join(lines) + "\n" + body


def _tunable(cf: CudaFile, kernel: str) -> _Analysis:
    """The analysis of a kernel with something to tune; KerntuneError (located) when there is nothing."""
    a = _analyze(cf, kernel)
    k = a.k
    if not a.params or all(len(p.values) == 1 for p in a.params.values()):
        raise KerntuneError(f"nothing to tune in kernel '{kernel}': {a.why_nothing()}. kerntune lifts constant "
                            "block sizes at a launch in this file (with what assumes them), fixed grids and items "
                            "per thread of grid-stride loops, #pragma unroll N, __launch_bounds__ and integer "
                            "template arguments",
                            cf.path, k.name_span.line, k.name_span.col)
    return a


def tunable_space(cf: CudaFile, kernel: str) -> ParamSpace:
    """The parameter space ``templatize`` would give ``kernel``, without the template's text (which is the
    whole file: ``kerntune show`` over a file of thousands of kernels stays linear in its size)."""
    a = _tunable(cf, kernel)
    params = {n: Param(name=n, values=p.values, original=p.original, kind=p.kind, why=p.why,
                       template_param=a.tp_of.get(n)) for n, p in a.params.items()}
    return ParamSpace(kernel=kernel, params=params, constraints=list(a.constraints))


def templatize(cf: CudaFile, kernel: str) -> KernelTemplate:
    """Lift ``kernel``'s tunable constants into parameters; raise KerntuneError (with the kernel's location
    and the reason) when there is nothing to tune or the kernel cannot be analyzed."""
    a = _tunable(cf, kernel)
    params = {n: Param(name=n, values=p.values, original=p.original, kind=p.kind, why=p.why,
                       template_param=a.tp_of.get(n)) for n, p in a.params.items()}
    sites = a.sites()
    space = ParamSpace(kernel=kernel, params=params, constraints=list(a.constraints))
    return KernelTemplate(kernel=kernel, path=cf.path, original_text=cf.text,
                          text=template_text(cf, kernel, params, sites, a.launch), space=space, sites=sites,
                          origin="structural", launch=a.launch, entry=None)


def _as_list(v) -> list[str]:
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


# --------------------------------------------------------------------------------------------- launch exprs
class _Conv:
    """C host expression -> expression-language text (agent_core.expr)."""

    def __init__(self, f: _File, site: LaunchSite, site_params: dict[tuple[int, int], str]):
        self.f = f
        self.r = _Resolver(f, site.host_vars)
        self.site_params = site_params
        self.visiting: set[str] = set()

    def raw(self, n: Node) -> str:
        return " ".join(self.f.t(n).split())

    def conv(self, n: Node | None) -> str:
        if n is None:
            return ""
        key = (n.start_byte, n.end_byte)
        if key in self.site_params:
            return self.site_params[key]
        t = n.type
        if t == "number_literal":
            txt = self.f.t(n)
            v = _int_literal(txt)
            if v is not None:
                return str(v)
            return re.sub(r"[fFlL]$", "", txt)
        if t in ("true", "false"):
            return "1" if t == "true" else "0"
        if t == "identifier":
            return self.name(self.f.t(n))
        if t == "parenthesized_expression" and n.named_child_count == 1:
            inner = self.conv(n.named_children[0])
            return inner if _atomic(inner) or (inner.startswith("(") and _balanced_outer(inner)) else f"({inner})"
        if t == "binary_expression":
            op = self.f.t(n.child_by_field_name("operator"))
            op = {"&&": "and", "||": "or"}.get(op, op)
            return f"{self.conv(n.child_by_field_name('left'))} {op} {self.conv(n.child_by_field_name('right'))}"
        if t == "unary_expression":
            op = self.f.t(n.child_by_field_name("operator"))
            arg = self.conv(n.child_by_field_name("argument"))
            return f"not {arg}" if op == "!" else f"{op}{arg}"
        if t == "cast_expression":
            return self.wrap(self.conv(n.child_by_field_name("value")))
        if t == "conditional_expression":
            c, a, b = (self.conv(n.child_by_field_name(x)) for x in ("condition", "consequence", "alternative"))
            return f"({a} if {c} else {b})"
        if t == "sizeof_expression":
            ty = n.child_by_field_name("type")
            if ty is not None:
                size = _SIZEOF.get(" ".join(self.f.t(ty).split()))
                if size is not None:
                    return str(size)
            return self.raw(n)
        if t == "call_expression":
            return self.call(n)
        if t == "field_expression":
            arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
            if arg is not None and fld is not None and self.f.t(fld) in ("x", "y", "z"):
                comps = _dim3_components(self.f, self.r, arg)
                if comps is not None:
                    i = "xyz".index(self.f.t(fld))
                    return self.wrap(self.conv(comps[i])) if i < len(comps) else "1"
            return self.raw(n)
        return self.raw(n)

    def wrap(self, s: str) -> str:
        return s if _atomic(s) or (s.startswith("(") and _balanced_outer(s)) else f"({s})"

    def name(self, name: str) -> str:
        if name in self.visiting:
            return name
        hv = self.r.vars.get(name)
        if hv is not None and hv.init is not None and "dim3" not in hv.type:
            node = self.f.node(hv.init.span)
            if node is not None:
                self.visiting.add(name)
                try:
                    return self.wrap(self.conv(node))
                finally:
                    self.visiting.discard(name)
        d = self.f.defines.get(name)
        if d is not None and d.value_span is not None:
            key = (d.value_span.start, d.value_span.end)
            src = self.r.resolve_name(name)
            if src is not None:
                return self.site_params.get(src.key, str(src.value))
            if key in self.site_params:
                return self.site_params[key]
            if re.fullmatch(r"[A-Za-z_]\w*", d.value) and d.value not in self.visiting:
                self.visiting.add(name)
                try:
                    return self.name(d.value)
                finally:
                    self.visiting.discard(name)
            try:
                expr.parse(d.value)
                return self.wrap(d.value)
            except expr.ExprError:
                return name
        return name

    def call(self, n: Node) -> str:
        fn = n.child_by_field_name("function")
        args = n.child_by_field_name("arguments")
        argv = [c for c in args.named_children if c.type != "comment"] if args is not None else []
        fname = ""
        if fn is not None:
            base = fn.child_by_field_name("name") if fn.type == "template_function" else fn
            fname = self.f.t(base if base is not None else fn).split("::")[-1]
        if fname in ("static_cast", "reinterpret_cast", "const_cast", "int", "size_t", "unsigned", "long",
                     "int64_t", "int32_t", "uint32_t", "uint64_t") and len(argv) == 1:
            return self.wrap(self.conv(argv[0]))
        if fname in ("min", "max", "fmin", "fmax", "umin", "umax") and len(argv) == 2:
            return f"{fname.lstrip('fu')}({self.conv(argv[0])}, {self.conv(argv[1])})"
        if fname in _CDIV_FUNCS and len(argv) == 2:
            return f"cdiv({self.conv(argv[0])}, {self.conv(argv[1])})"
        if fname == "dim3" and len(argv) == 1:
            return self.conv(argv[0])
        return self.raw(n)

    def config(self, n: Node | None) -> list[str]:
        comps = _dim3_components(self.f, self.r, n)
        if comps is None:
            return [_strip_outer(self.conv(n))]
        return [_strip_outer(self.conv(c)) for c in comps] or ["1"]


def _atomic(s: str) -> bool:
    return bool(re.fullmatch(r"[\w.]+", s))


def _balanced_outer(s: str) -> bool:
    """``s`` is one parenthesized group: ``(a + b)`` but not ``(a) + (b)``."""
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(s) - 1:
            return False
    return s.endswith(")")


def _strip_outer(s: str) -> str:
    while s.startswith("(") and _balanced_outer(s):
        s = s[1:-1].strip()
    return s


def launch_exprs(cf: CudaFile, kernel: str, template: KernelTemplate | None = None, site: int = 0) -> dict:
    """The launch site's configuration in the expression language: ``{"grid": [...], "block": [...],
    "smem": str, "args": [...], "names": [...]}`` with host locals inlined and, given ``template``, its
    tunable sites replaced by parameter names. ``names`` are the free host names left (sizes to define)."""
    k = _kernel(cf, kernel)
    if not k.launch_sites:
        raise KerntuneError(f"kernel '{kernel}' is not launched in this file: write the spec's grid and block "
                            "by hand", cf.path, k.name_span.line, k.name_span.col)
    if not 0 <= site < len(k.launch_sites):
        raise KerntuneError(f"kernel '{kernel}' has {len(k.launch_sites)} launch site(s), no site {site}", cf.path,
                            k.name_span.line)
    ls = k.launch_sites[site]
    f = _File.of(cf)
    site_params: dict[tuple[int, int], str] = {}
    params: set[str] = set()
    if template is not None and template.original_text == cf.text:
        site_params = {(s.span.start, s.span.end): s.render.format(value=s.param) if s.render != "{value}"
                       else s.param for s in template.sites}  # renders carry their own parentheses
        params = set(template.space.params)
    c = _Conv(f, ls, site_params)
    out = {"grid": c.config(f.node(ls.config[0].span)),
           "block": c.config(f.node(ls.config[1].span)) if len(ls.config) > 1 else ["1"],
           "smem": _strip_outer(c.conv(f.node(ls.config[2].span))) if len(ls.config) > 2 else "0",
           "args": [_strip_outer(c.conv(f.node(a.span))) for a in ls.args]}
    names: set[str] = set()
    scalars = [a for a, p in zip(out["args"], k.params) if not p.is_pointer]
    for text in out["grid"] + out["block"] + [out["smem"]] + scalars:
        try:
            names |= expr.names(text)
        except expr.ExprError:
            continue
    out["names"] = sorted(names - params)
    return out
