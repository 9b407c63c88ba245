"""A launch site's configuration in the expression language (``agent_core.expr``), for drafting specs: the
grid, block, shared memory and arguments of a ``<<<...>>>`` launch with host locals and macros inlined, casts
and ``sizeof`` folded, ceiling divisions written ``cdiv``, and, given a template, its sites written as the
parameters' names."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core import expr
from agent_core.model import CudaFile, KernelTemplate, KerntuneError, LaunchSite, site_expr
from agent_core.templating.structural.kernel import find_kernel
from agent_core.templating.structural.source import CDIV_FUNCS, File, Resolver, dim3_components, int_literal

# sizes of the types a launch's shared memory is written with (``n * sizeof(float)``)
SIZEOF = {"char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "short": 2,
          "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "int": 4,
          "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "double": 8, "long long": 8,
          "int64_t": 8, "uint64_t": 8, "size_t": 8, "long": 8, "float2": 8, "float4": 16, "int4": 16,
          "half2": 4, "__half2": 4, "double2": 16}


class HostExprConverter:
    """C host expression -> expression-language text (agent_core.expr)."""

    def __init__(self, f: File, site: LaunchSite, site_params: dict[tuple[int, int], str]):
        self.f = f
        self.r = Resolver(f, site.host_vars)
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
            v = int_literal(txt)
            if v is not None:
                return str(v)
            return re.sub(r"[fFlL]$", "", txt)
        if t in ("true", "false"):
            return "1" if t == "true" else "0"
        if t == "identifier":
            return self.name(self.f.t(n))
        if t == "qualified_identifier":  # ops::kMaxThreads: the file's constant or macro of that name
            last = re.sub(r"\s+", "", self.f.t(n)).split("::")[-1]
            if re.fullmatch(r"[A-Za-z_]\w*", last) and (last in self.r.vars or last in self.f.defines):
                return self.name(last)
            return self.raw(n)
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
                size = SIZEOF.get(" ".join(self.f.t(ty).split()))
                if size is not None:
                    return str(size)
            return self.raw(n)
        if t == "call_expression":
            return self.call(n)
        if t == "field_expression":
            arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
            if arg is not None and fld is not None and self.f.t(fld) in ("x", "y", "z"):
                comps = dim3_components(self.f, self.r, arg)
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
        if fname in CDIV_FUNCS and len(argv) == 2:
            return f"cdiv({self.conv(argv[0])}, {self.conv(argv[1])})"
        if fname == "dim3" and len(argv) == 1:
            return self.conv(argv[0])
        return self.raw(n)

    def config(self, n: Node | None) -> list[str]:
        comps = dim3_components(self.f, self.r, n)
        if comps is None:
            return [strip_outer(self.conv(n))]
        return [strip_outer(self.conv(c)) for c in comps] or ["1"]


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


def strip_outer(s: str) -> str:
    while s.startswith("(") and _balanced_outer(s):
        s = s[1:-1].strip()
    return s


def launch_exprs(cf: CudaFile, kernel: str, template: KernelTemplate | None = None, site: int = 0) -> dict:
    """The launch site's configuration in the expression language: ``{"grid": [...], "block": [...],
    "smem": str, "args": [...], "names": [...]}`` with host locals inlined and, given ``template``, its
    tunable sites replaced by parameter names. ``names`` are the free host names left (sizes to define)."""
    k = find_kernel(cf, kernel)
    if not k.launch_sites:
        raise KerntuneError(f"kernel '{kernel}' is not launched in this file: write the spec's grid and block "
                            "by hand", cf.path, k.name_span.line, k.name_span.col)
    if not 0 <= site < len(k.launch_sites):
        raise KerntuneError(f"kernel '{kernel}' has {len(k.launch_sites)} launch site(s), no site {site}", cf.path,
                            k.name_span.line)
    ls = k.launch_sites[site]
    f = File.of(cf)
    site_params: dict[tuple[int, int], str] = {}
    params: set[str] = set()
    if template is not None and template.original_text == cf.text:
        site_params = {(s.span.start, s.span.end): site_expr(s.render, s.param) if s.render != "{value}"
                       else s.param for s in template.sites}  # renders carry their own parentheses
        params = set(template.space.params)
    c = HostExprConverter(f, ls, site_params)
    out = {"grid": c.config(f.node(ls.config[0].span)),
           "block": c.config(f.node(ls.config[1].span)) if len(ls.config) > 1 else ["1"],
           "smem": strip_outer(c.conv(f.node(ls.config[2].span))) if len(ls.config) > 2 else "0",
           "args": [strip_outer(c.conv(f.node(a.span))) for a in ls.args]}
    names: set[str] = set()
    scalars = [a for a, p in zip(out["args"], k.params) if not p.is_pointer]
    for text in out["grid"] + out["block"] + [out["smem"]] + scalars:
        try:
            names |= expr.names(text)
        except expr.ExprError:
            continue
    out["names"] = sorted(names - params)
    return out
