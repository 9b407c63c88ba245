"""The kernel's file as the analyses read it: the parsed tree (nodes at spans, line offsets, defines and
file-scope constants), the literal integers a parameter can stand for (``Source``), and the resolver that
follows a C expression (a literal, a variable, a macro, a dim3's components) to such a literal, or a block size
capped by one (``Cap``: ``std::min(tile_size, kMaxThreads)``) to its cap."""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from tree_sitter import Node

from agent_core import expr
from agent_core.model import CudaFile, HostVar, Span
from agent_core.source.cuda_parse import file_constants, parse_tree, walk

_INT_RE = re.compile(r"^\s*\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?\s*$")
# the ceiling-division helpers a grid may be written with (`cdiv(n, 256)`)
CDIV_FUNCS = {"cdiv", "ceil_div", "ceildiv", "div_up", "divup", "DIV_UP", "CEIL_DIV", "CDIV", "DIVUP", "iDivUp",
              "div_round_up", "DIV_ROUND_UP"}


def int_literal(text: str) -> int | None:
    """The value of an integer literal (``256``, ``0x100``, ``(256u)``), None for anything else."""
    m = _INT_RE.match(text)
    return int(m.group(1), 0) if m else None


def expr_names(e: str) -> set[str]:
    """The names an expression of the spec language uses (``cdiv(rows, 8)``: rows); none when it does not parse."""
    try:
        return expr.names(e)
    except expr.ExprError:
        return set()


def spec_int(e: str) -> tuple[int, int, int] | None:
    """(start, end, value) of ``e`` when it is one integer literal (``"256"``), offsets in UTF-8 bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*", e)
    return (m.start(1), m.end(1), int(m.group(1))) if m else None


def span_of(n: Node) -> Span:
    return Span(n.start_byte, n.end_byte, n.start_point.row, n.start_point.column, n.end_point.row,
                n.end_point.column)


class File:
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
    def of(cf: CudaFile) -> "File":
        """The file's context, built once per CudaFile (templatizing every kernel of a file of thousands must
        not parse the whole file again for each: linear, not quadratic, in the number of kernels)."""
        f = cf.__dict__.get("_templatize_file")
        if f is None or f.cf is not cf or f.text is not cf.text:
            f = File(cf)
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
        if self._starts is None:
            self.line_start(0)
        return bisect_right(self._starts, offset) - 1


@dataclass
class Source:
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
class Cap:
    """A value capped by a constant: the smaller of one expression that is not a constant and one that is
    (``std::min(tile_size, sampler::kMaxThreads)``, ``min(d, 1024)``, ``d < 1024 ? d : 1024``, ``MIN(d, 1024)``
    with a function-like macro computing the smaller of its arguments). ``src`` is the constant, ``other`` the
    expression it caps, ``text`` the capping expression as written; ``also`` the constant's other literals in it
    (the condition's ``1024`` of ``d < 1024 ? d : 1024``), which follow ``src``."""
    src: Source
    other: Node
    text: str
    also: list[Source] = field(default_factory=list)


def _squash(text: str) -> str:
    """``text`` without white space and outer parentheses (``( d )`` -> ``d``)."""
    s = re.sub(r"\s+", "", text)
    while s.startswith("(") and s.endswith(")") and _one_group(s):
        s = s[1:-1]
    return s


def _one_group(s: str) -> bool:
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(s) - 1:
            return False
    return True


def _min_of_conditional(u: str, op: str, v: str, a: str, b: str) -> bool:
    """``u op v ? a : b`` computes the smaller of ``u`` and ``v`` (``u < v ? u : v``, ``u > v ? v : u``, also
    with ``<=`` / ``>=``); not a max, not a clamp."""
    u, v, a, b = (_squash(x) for x in (u, v, a, b))
    return op in ("<", "<=") and (a, b) == (u, v) or op in (">", ">=") and (a, b) == (v, u)


class Resolver:
    """Follows a C expression to the integer literal it is (a literal, a variable, a macro)."""

    def __init__(self, f: File, host_vars: dict[str, HostVar] | None):
        self.f = f
        self.vars: dict[str, HostVar] = dict(f.consts)
        if host_vars:
            self.vars.update(host_vars)

    def resolve(self, n: Node | None, depth: int = 0) -> Source | None:
        if n is None or depth > 8:
            return None
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            return self.resolve(n.named_children[0], depth + 1)
        if n.type == "number_literal":
            v = int_literal(self.f.t(n))
            if v is None:
                return None
            return Source(span_of(n), v, self.f.t(n), None, f"a literal at line {n.start_point.row + 1}")
        if n.type in ("identifier", "type_identifier"):  # `k<vec>`: a bare name parses as a type
            return self.resolve_name(self.f.t(n), depth)
        if n.type == "qualified_identifier":  # at::native::kCUDANumThreads: the file's constant of that name
            name = n.child_by_field_name("name")
            while name is not None and name.type == "qualified_identifier":
                name = name.child_by_field_name("name")
            return self.resolve_name(self.f.t(name), depth) if name is not None and \
                name.type in ("identifier", "type_identifier") else None  # `dim3 b(ns::kX, ...)`: a type's place
        if n.type == "type_descriptor" and n.named_child_count == 1:
            return self.resolve(n.named_children[0], depth + 1)
        return None

    def cap(self, n: Node | None, depth: int = 0) -> Cap | None:
        """The constant that caps ``n`` (see ``Cap``), through parentheses, casts and the host variables and file
        constants ``n`` names; None when ``n`` is not the smaller of a constant and something that is not."""
        if n is None or depth > 8:
            return None
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            return self.cap(n.named_children[0], depth + 1)
        if n.type == "cast_expression":
            return self.cap(n.child_by_field_name("value"), depth + 1)
        if n.type in ("identifier", "type_identifier"):  # `dim3 block(block_size);` parses the name as a type
            hv = self.vars.get(self.f.t(n))
            if hv is None or hv.init is None or "dim3" in hv.type or self.reassigned(hv):
                return None
            return self.cap(self.f.node(hv.init.span), depth + 1)
        ops: list[Node] = []
        also: list[Node] = []  # the condition's operands of a conditional
        if n.type == "call_expression":
            fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
            argv = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            name = re.sub(r"<.*>$", "", re.sub(r"\s+", "", self.f.t(fn))).split("::")[-1] if fn is not None else ""
            if name in ("static_cast", "int", "unsigned") and len(argv) == 1:
                return self.cap(argv[0], depth + 1)
            if len(argv) == 2 and (name == "min" or self._min_macro(name)):
                ops = argv
        elif n.type == "conditional_expression":
            cond, a, b = (n.child_by_field_name(x) for x in ("condition", "consequence", "alternative"))
            if cond is not None and a is not None and b is not None:
                if cond.type == "parenthesized_expression" and cond.named_child_count == 1:
                    cond = cond.named_children[0]
                u, op, v = (cond.child_by_field_name(x) for x in ("left", "operator", "right")) \
                    if cond.type == "binary_expression" else (None, None, None)
                if u is not None and op is not None and v is not None and \
                        _min_of_conditional(self.f.t(u), self.f.t(op), self.f.t(v), self.f.t(a), self.f.t(b)):
                    ops, also = [a, b], [u, v]
        if len(ops) != 2:
            return None
        srcs = [self.resolve(x) for x in ops]
        if (srcs[0] is None) == (srcs[1] is None):
            return None  # the smaller of two constants is a constant; of two variables, no cap
        i = 0 if srcs[0] is not None else 1
        more = [x for x in (self.resolve(y) for y in also) if x is not None and x.key != srcs[i].key]
        return Cap(srcs[i], ops[1 - i], self.f.t(n), more)

    def _min_macro(self, name: str) -> bool:
        """``name`` is a function-like macro of two parameters computing the smaller
        (``#define MIN(a, b) ((a) < (b) ? (a) : (b))``)."""
        macros = self.f.__dict__.setdefault("_min_macros", {})
        if name not in macros:
            macros[name] = False
            for x in walk(self.f.root):
                if x.type != "preproc_function_def" or x.child_by_field_name("name") is None or \
                        self.f.t(x.child_by_field_name("name")) != name:
                    continue
                ps, val = x.child_by_field_name("parameters"), x.child_by_field_name("value")
                names = [self.f.t(c) for c in ps.named_children] if ps is not None else []
                m = re.fullmatch(r"(\(*\w+\)*)(<=|>=|<|>)(\(*\w+\)*)\?(.+):(.+)", _squash(self.f.t(val))) \
                    if val is not None else None
                if len(names) == 2 and m is not None and {_squash(m.group(1)), _squash(m.group(3))} == set(names):
                    macros[name] = _min_of_conditional(*m.groups())
        return macros[name]

    def reassigned(self, hv: HostVar) -> bool:
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

    def resolve_name(self, name: str, depth: int = 0) -> Source | None:
        hv = self.vars.get(name)
        if hv is not None:
            if hv.init is None or "dim3" in hv.type or self.reassigned(hv):
                return None
            src = self.resolve(self.f.node(hv.init.span), depth + 1)
            if src is not None and src.name is None:
                src.name = name
                src.where = f"`{hv.type} {name} = {hv.init.text};` at line {hv.span.line + 1}"
            return src
        d = self.f.defines.get(name)
        if d is not None and d.value_span is not None:
            v = int_literal(d.value)
            if v is not None:
                m = re.search(r"0[xX][0-9a-fA-F]+|\d+", d.value)
                vb = d.value[:m.start()].encode("utf-8")
                start = d.value_span.start + len(vb)
                sp = Span(start, start + len(m.group(0)), d.value_span.line, d.value_span.col + len(vb),
                          d.value_span.line, d.value_span.col + len(vb) + len(m.group(0)))
                return Source(sp, v, m.group(0), name, f"#define {name} {d.value} at line {d.span.line + 1}")
            if re.fullmatch(r"[A-Za-z_]\w*", d.value) and d.value != name:
                return self.resolve_name(d.value, depth + 1)
        return None


def dim3_components(f: File, r: Resolver, n: Node | None, depth: int = 0) -> list[Node] | None:
    """The component expressions of a dim3 value (``dim3(a, b)``, a ``dim3 g(a, b)`` variable); None if
    ``n`` is not a dim3."""
    if n is None or depth > 8:
        return None
    if n.type == "parenthesized_expression" and n.named_child_count == 1:
        return dim3_components(f, r, n.named_children[0], depth + 1)
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
            comps = dim3_components(f, r, inner, depth + 1)
            if comps is None and inner is not None:  # dim3 g = n;
                return [inner]
            return comps
    return None
