"""What a kernel computes, read from its spec and its body (tree-sitter), never from how it is spelled.

Per argument: dtype, const, whether the body reads it, writes it or both (through local pointer aliases too:
``T* row = out + blockIdx.x * n; row[i] = ...`` writes ``out``), and its element count (buffers) or value
(scalars) on every size set. Of the body: the math calls, loops, how it reduces (warp shuffles, shared
memory), the index expressions and float literals. Names, macros, launch variables and block sizes are not
read here: a family binder may use a name only to order its candidates.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field

from agent_core import expr
from agent_core.model import ArgSpec, CudaFile, Kernel, TemplateParam, TuningSpec
from agent_core.templating.experts import callees

FLOATS = ("f32", "f16", "bf16")
INTS = ("i32", "i64", "u32", "u64")
CTYPE = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "f64": "double", "i8": "int8_t",
         "u8": "uint8_t", "i16": "int16_t", "i32": "int", "u32": "unsigned", "i64": "int64_t", "u64": "uint64_t"}
NBYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i8": 1, "u8": 1, "i16": 2, "i32": 4, "u32": 4, "i64": 8,
          "u64": 8}
_ATOMIC = re.compile(r"atomic\w+")
# CUDA's cache-hinted stores (`void __stcs(T* ptr, T value)`, ...): their first argument is the pointer written
_STORE = re.compile(r"__st(?:cg|cs|wb|wt)")
# a collective's store member (CUB's `BlockStore<...>(temp).Store(ptr, items[, valid])`, `WarpStore`): its first
# argument is the pointer written
_MEMBER_STORE = "Store"


@dataclass
class ArgUse:
    """One kernel argument as the spec and the body show it."""
    spec: ArgSpec
    const: bool  # declared const in the signature
    read: bool  # the body reads it (directly or through a local pointer made from it)
    written: bool  # the body writes it
    first_write: int  # byte offset in the body of its first write, -1 when never written
    counts: tuple | None  # element count (buffers) or value (scalars) on every size set; None when not evaluable

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    @property
    def role(self) -> str:
        return self.spec.role


@dataclass
class SizeExpr:
    """A role size as the wrapper computes it (C over the kernel's scalar arguments) and as the launch and the
    constraints compute it (an expression over the spec's size names)."""
    c: str
    spec: str
    words: str


@dataclass
class Evidence:
    kernel: Kernel
    spec: TuningSpec
    body: str  # the body, comments blanked
    calls: set[str]
    args: list[ArgUse]
    loops: int
    shuffles: bool
    shared: bool
    syncs: bool
    literals: list[str] = field(default_factory=list)  # small float literals of the body (eps candidates)
    flat: str = ""  # the body without whitespace, for index shapes
    constants: dict[str, float] = field(default_factory=dict)  # identifiers the file sets to one number
    defs: dict[str, str] = field(default_factory=dict)  # identifiers the file sets to one arithmetic expression
    own_end: int = -1  # where the kernel's own text ends in ``body`` (its inlined helpers follow); -1: all of it
    aliases: dict[str, set[str]] = field(default_factory=dict)  # local pointer -> the arguments it is made from
    # the arrays the file initializes with numbers (``constant_arrays``): name -> (element kind, values)
    arrays: dict[str, tuple[str, list[float]]] = field(default_factory=dict)

    def arg(self, name: str) -> ArgUse:
        return next(a for a in self.args if a.name == name)

    def bufs(self, role: str | None = None, dtypes=None) -> list[ArgUse]:
        """The buffers (the auxiliary ones left out: ``aux``)."""
        return [a for a in self.args if a.role != "scalar" and (role is None or a.role == role)
                and (dtypes is None or a.dtype in dtypes) and not _auxiliary(a)]

    def aux(self) -> list[ArgUse]:
        """Auxiliary buffers: a few integers the kernel writes whatever the sizes (a persistent grid's row counter,
        a flag). No expert computes them: a binding leaves them as they are, and the check against the original
        decides whether that is what the original leaves there."""
        return [a for a in self.args if _auxiliary(a)]

    def ints(self) -> list[ArgUse]:
        return [a for a in self.args if a.role == "scalar" and a.dtype in INTS]

    def floats(self) -> list[ArgUse]:
        return [a for a in self.args if a.role == "scalar" and a.dtype in ("f32", "f64")]

    def has(self, *names: str) -> bool:
        return any(n in self.calls for n in names)

    def mentions(self, pattern: str) -> bool:
        """Whether the whitespace-free body matches ``pattern`` (index shapes: ``2*d``, ``[2*i+1]``)."""
        return re.search(pattern, self.flat) is not None

    def uses(self, size: "SizeExpr") -> int:
        """How often the body uses the arguments a size expression is made of (at most 3 each): an argument the
        body never reads cannot be the row length it walks."""
        names = re.findall(r"\(int\)\((\w+)\)", size.c)
        return sum(min(3, len(re.findall(rf"\b{re.escape(n)}\b", self.body))) for n in names)

    def reduction_words(self) -> str:
        if self.shuffles:
            return "reduces with warp shuffles"
        if self.shared and self.syncs:
            return "reduces with a shared-memory tree"
        return "reduces over the row"

    def held(self, target: tuple | None) -> list[SizeExpr]:
        """The int arguments that hold ``target`` on every size set, as ``sizes`` writes them (no product, quotient
        or literal)."""
        return [s for s in self.sizes(target) if s.c.startswith("(int)(") and "*" not in s.c and "/" not in s.c]

    def sizes(self, target: tuple | None, exclude: tuple[str, ...] = ()) -> list[SizeExpr]:
        """Every way the wrapper can compute a value that is ``target`` on every size set: an int argument that
        holds it, the product or quotient of two, or a literal where it is the same on every size set; in that
        order (an argument that holds it is the likeliest)."""
        if not target or any(v is None for v in target):
            return []
        ints = [a for a in self.ints() if a.counts and a.name not in exclude]
        out = [SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`") for a in ints if a.counts == target]
        for i, a in enumerate(ints):
            for j, b in enumerate(ints):
                if a is b:
                    continue
                if i < j and tuple(x * y for x, y in zip(a.counts, b.counts)) == target:
                    # a product's place is its first factor's (the arguments' order); its factors are written in
                    # the order of their names, which is only how it reads
                    f, g = (a, b) if a.name < b.name else (b, a)
                    out.append(SizeExpr(f"(int)({f.name}) * (int)({g.name})", f"({f.spec.value}) * ({g.spec.value})",
                                        f"`{f.name} * {g.name}`"))
                if all(y and x % y == 0 and x // y == t for x, y, t in zip(a.counts, b.counts, target)):
                    out.append(SizeExpr(f"(int)({a.name}) / (int)({b.name})",
                                        f"({a.spec.value}) / ({b.spec.value})", f"`{a.name} / {b.name}`"))
        if len(set(target)) == 1:
            out.append(SizeExpr(str(target[0]), str(target[0]), f"the constant {target[0]}"))
        return out


def branch_flags(ev: "Evidence") -> list[ArgUse]:
    """The kernel's run-time flags: scalar int / bool arguments whose spec value is the same on every size set and
    that the body branches on by themselves (``if (isBack)``, ``if (!flag)``, ``mode == 2 ? a : b``, ``switch
    (mode)``, a comparison with a literal). The check against the original runs only the spec's value of each, so a
    binding that does not pass a flag on holds it at that value (``Binding.pinned``: its wrapper traps on another,
    never computing the other branch wrongly)."""
    out = []
    for a in ev.args:
        if a.role != "scalar" or a.dtype not in INTS + ("i8", "u8", "i16", "u16") or not a.counts \
                or len(set(a.counts)) != 1:
            continue
        n = re.escape(a.name)
        lit = r"(?:\s*(?:==|!=)\s*(?:\d+|true|false)[uUlL]*)?"
        if re.search(rf"\b(?:if|switch)\s*\(\s*!?\s*\(*\s*{n}\b\s*\)*{lit}\s*\)", ev.body) or re.search(
                rf"(?:(?<![<>=!])=|[(,;]|&&|\|\||return)\s*\(?\s*!?\s*{n}\b{lit}\s*\)?\s*\?", ev.body):
            out.append(a)
    return out


def _auxiliary(a: ArgUse) -> bool:
    return (a.role in ("inout", "out") and a.dtype in INTS and a.counts is not None and len(set(a.counts)) == 1
            and 0 < a.counts[0] <= 64)


def counts_of(e: str | None, spec: TuningSpec) -> tuple | None:
    if e is None:
        return None
    try:
        return tuple(expr.evaluate(e, s) for s in spec.sizes)
    except Exception:
        return None


def div(a: tuple | None, b: tuple | None) -> tuple | None:
    if a is None or b is None or any(y == 0 or x % y for x, y in zip(a, b)):
        return None
    return tuple(x // y for x, y in zip(a, b))


def prod(*xs: tuple | None) -> tuple | None:
    if any(x is None for x in xs):
        return None
    return tuple(math.prod(v) for v in zip(*xs))


# ----------------------------------------------------------------------------------------------- the body
def _bases(n) -> set[str]:
    """The identifiers an lvalue (or a pointer expression) is based on: ``out`` of ``out[i]``, ``*(out + i)``,
    ``reinterpret_cast<float4*>(out)[i]``, ``row->x``; not the identifiers of its index."""
    t = n.type
    if t == "identifier":
        return {n.text.decode("utf-8", "replace")}
    if t in ("subscript_expression", "pointer_expression", "field_expression"):
        a = n.child_by_field_name("argument")
        return _bases(a) if a is not None else set()
    if t == "cast_expression":
        v = n.child_by_field_name("value")
        return _bases(v) if v is not None else set()
    if t == "call_expression":
        args = n.child_by_field_name("arguments")
        return set().union(*(_bases(c) for c in args.named_children)) if args is not None else set()
    if t in ("parenthesized_expression", "binary_expression", "conditional_expression"):
        return set().union(*(_bases(c) for c in n.named_children)) if n.named_children else set()
    return set()


def _auto_declared(init_declarator) -> bool:
    """Whether the declaration an init-declarator belongs to declares its type as ``auto``."""
    decl = init_declarator.parent
    ty = decl.child_by_field_name("type") if decl is not None and decl.type == "declaration" else None
    return ty is not None and ty.text.decode("utf-8", "replace").strip() == "auto"


def _pointer_valued(v) -> bool:
    """Whether an expression is a pointer as written (``x``, ``x + off``, ``(x + off)``, ``&x[i]``, a cast to a
    pointer type), not a value read through one (``x[i]``, ``*p``)."""
    t = v.type
    if t == "identifier":
        return True
    if t == "parenthesized_expression":
        return len(v.named_children) == 1 and _pointer_valued(v.named_children[0])
    if t == "binary_expression":
        op = v.child_by_field_name("operator")
        left, right = v.child_by_field_name("left"), v.child_by_field_name("right")
        return op is not None and op.text in (b"+", b"-") and (
            (left is not None and _pointer_valued(left)) or (right is not None and _pointer_valued(right)))
    if t == "pointer_expression":
        op = v.child_by_field_name("operator")
        return op is not None and op.text == b"&"
    if t == "cast_expression":
        ty = v.child_by_field_name("type")
        return ty is not None and b"*" in ty.text
    return False


def _walk(n):
    stack = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.children))


def _body_node(cf: CudaFile, kernel: Kernel):
    from agent_core.source.cuda_parse import parse_tree
    tree = parse_tree(cf.text.encode("utf-8"))
    s, e = kernel.body_span.start, kernel.body_span.end
    node = tree.root_node.descendant_for_byte_range(s, e)
    while node is not None and not (node.start_byte <= s and node.end_byte >= e):
        node = node.parent
    return node


def _root(n):
    while n.parent is not None:
        n = n.parent
    return n


# ------------------------------------------------------------------------- branches the instantiation decides
_COND_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?[fFuUlL]*)|([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)|"
                         r"(==|!=|<=|>=|&&|\|\||[<>!()+\-*]))")


def _named(name: str, values: dict[str, float]) -> float | None:
    """The value of a name in ``values``: as written (``Act::GELU``), else by its last part (``ffn::kGeluTanhAct``,
    a constant named in its namespace)."""
    name = re.sub(r"\s+", "", name)
    if name in values:
        return values[name]
    return values.get(name.split("::")[-1]) if "::" in name else None


def _decide(cond: str, values: dict[str, float]) -> bool | None:
    """The value of an ``if``'s condition made only of numbers, the names in ``values`` (the instantiation's
    template arguments, the file's numeric constants, ``true`` / ``false``), comparisons, ``&&``, ``||``, ``!`` and
    + - *; None where any part is something else (a run-time value, a call, a division)."""
    out, at, text, negate = [], 0, cond.strip(), False
    while at < len(text):
        m = _COND_TOKEN.match(text, at)
        if m is None or m.end() == at:
            return None
        at = m.end()
        num, name, op = m.groups()
        named = _named(name, values) if name is not None else None
        if name is not None and named is None:
            return None
        if num is not None or name is not None:
            v = float(num.rstrip("fFuUlL")) if num is not None else float(named)
            out.append(repr(float(not v) if negate else v))
            negate = False
        elif negate:
            return None  # `!` of more than one operand: C's precedence is not Python's
        elif op == "!":
            negate = True
        else:
            out.append({"&&": " and ", "||": " or "}.get(op, op))
    if negate:
        return None
    try:
        return bool(eval("".join(out), {"__builtins__": {}}, {}))  # numbers, comparisons and logic only
    except Exception:  # noqa: BLE001
        return None


def _decided_blanks(node, params: set[str], values: dict[str, float]) -> list[tuple[int, int, bytes]]:
    """The text of the branches an instantiation discards: every ``if constexpr`` whose condition names a value
    template parameter of the kernel and is decided by the instantiation's arguments (``if constexpr
    (activation_type == ACT_GELU)`` with ``activation_type`` = ACT_GELU, ``#define ACT_GELU 1``): the condition and
    the branch not taken (C++ does not even instantiate it), as (start, end, filler) ranges; the branch taken stays
    a statement, an ``if`` with nothing taken becomes an empty statement. A plain ``if`` is left as it is (both of
    its branches are compiled; the evidence reads both, as it always has)."""
    out = []
    for n in _walk(node):
        if n.type != "if_statement" or not any(c.type == "constexpr" for c in n.children):
            continue
        cond, then = n.child_by_field_name("condition"), n.child_by_field_name("consequence")
        if cond is None or then is None:
            continue
        text = cond.text.decode("utf-8", "replace")
        if not set(re.findall(r"[A-Za-z_]\w*", text)) & params:
            continue
        v = _decide(text, values)
        if v is None:
            continue
        alt = n.child_by_field_name("alternative")
        stmt = next((c for c in alt.named_children if c.type != "comment"), None) if alt is not None else None
        if v:
            out.append((n.start_byte, then.start_byte, b""))
            if alt is not None:
                out.append((alt.start_byte, alt.end_byte, b""))
        elif stmt is not None:
            out.append((n.start_byte, stmt.start_byte, b""))
        else:
            out.append((n.start_byte, n.end_byte, b";"))
    return out


def _blank(raw: bytes, ranges: list[tuple[int, int, bytes]]) -> bytes:
    """``raw`` with each range replaced by its filler and spaces (newlines kept): every offset stays where it was."""
    buf = bytearray(raw)
    for s, e, fill in ranges:
        for i in range(s, e):
            if buf[i] not in b"\n\r":
                buf[i] = 0x20
        buf[s:s + len(fill)] = fill
    return bytes(buf)


def _known_values(text: str) -> dict[str, float]:
    """What a template argument may name by value: ``true`` / ``false`` and the file's numbers (``#define``s,
    enumerators, constants: ``source.constants``)."""
    from agent_core.source.constants import int_constants
    values = {"true": 1.0, "false": 0.0}
    values.update(constants(text))
    values.update({n: float(v) for n, v in int_constants(text).items()})
    return values


def _template_arg_value(a: str, values: dict[str, float], env: dict[str, float]) -> float | None:
    """A template argument's value: a number, a name in ``values`` (``Act::GELU``, ``ns::kName`` as ``kName``), else
    an expression over ``env``; None where it is none of them."""
    v = number(a, values) if re.fullmatch(r"[-+\d.eE]+[fFuUlL]*", a.strip()) else _named(a, values)
    if v is None:
        try:
            v = float(expr.evaluate(a, env))
        except Exception:  # noqa: BLE001
            return None
    return v


def _instantiation_values(kernel: Kernel, targs: list[str], known: dict[str, float]) -> tuple[dict[str, float],
                                                                                          set[str]]:
    """``known`` and the value of each value template parameter of the kernel its instantiation ``targs`` decides
    (``_template_arg_value``); and the names of those parameters."""
    values, params = dict(known), set()
    for tp, a in zip(kernel.template_params, targs):
        if tp.kind != "value":
            continue
        v = _template_arg_value(a, values, {})
        if v is not None:
            values[tp.name] = v
            params.add(tp.name)
    return values, params


def _helper_instance(values: dict[str, float]):
    """``callees.inlined_blocks``' ``instantiate``: a helper template called with explicit arguments
    (``calculate_fp8_scales<kUseUE8M0>(amax, scale, scale_inv)`` in a kernel instantiated with ``kUseUE8M0`` =
    false) read as that instance: its value template parameters take the arguments' values (numbers, names the file
    sets, the caller's template parameters: ``values`` and the caller's ``env``) and its ``if constexpr`` branches
    they decide are blanked (``_decided_blanks``), so the branch C++ does not instantiate is not read as code."""
    from agent_core.source.cuda_parse import parse_tree

    def instantiate(src: bytes, body, tparams: list[TemplateParam], targs: list[str], env: dict):
        have = {**values, **env}
        local = {}
        for tp, a in zip(tparams, targs):
            if tp.kind == "value" and tp.name:
                v = _template_arg_value(a, have, {})
                if v is not None:
                    local[tp.name] = v
        if not local:
            return src, body, env
        inner = {**env, **local}
        ranges = _decided_blanks(body, set(local), {**have, **local})
        if not ranges:
            return src, body, inner
        raw = _blank(src, ranges)
        s, e = body.start_byte, body.end_byte
        new = parse_tree(raw).root_node.descendant_for_byte_range(s, e)
        while new is not None and not (new.start_byte <= s and new.end_byte >= e):
            new = new.parent
        return (raw, new, inner) if new is not None else (src, body, env)
    return instantiate


def _instantiated(raw: bytes, node, kernel: Kernel, values: dict[str, float], params: set[str]):
    """``raw`` and the kernel's body node with the branches its instantiation leaves out blanked (``_decided_blanks``;
    a template argument read through its value: a number, ``true`` / ``false``, or a name the file sets to a number:
    a ``#define`` or an enumerator (``source.constants``, ``Act::GELU`` too), a constant (``constexpr int kGelu =
    1;``), ``ns::kName`` as ``kName``; ``values`` and ``params``: ``_instantiation_values``); as they were where it
    leaves none out."""
    ranges = _decided_blanks(node, params, values) if params and node is not None else []
    if not ranges:
        return raw, node
    from agent_core.source.cuda_parse import parse_tree
    raw = _blank(raw, ranges)
    s, e = kernel.body_span.start, kernel.body_span.end
    new = parse_tree(raw).root_node.descendant_for_byte_range(s, e)
    while new is not None and not (new.start_byte <= s and new.end_byte >= e):
        new = new.parent
    return raw, new


_COMPOUND_OPS = ("+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>")


def compound_assignments(text: str) -> str:
    """``text`` (a body, braces included) with every ``a = a op b`` / ``a = a op (b)`` written ``a op= b``: the same
    statement (``a`` the assignment's own target, ``op`` the right side's outermost operator, ``a`` its left
    operand), so that every reader of an accumulation, a pointer moved or a value scaled reads one spelling.
    ``a = a * b + c`` and ``a = b + a`` are left as they are."""
    if "=" not in text:
        return text
    from agent_core.source.cuda_parse import parse_tree
    prefix = b"void kt_f() "
    data = prefix + text.encode("utf-8")
    edits = []
    for n in _walk(parse_tree(data).root_node):
        if n.type != "assignment_expression":
            continue
        op, left, right = n.child_by_field_name("operator"), n.child_by_field_name("left"), n.child_by_field_name(
            "right")
        if op is None or left is None or right is None or op.text != b"=" or right.type != "binary_expression":
            continue
        rop, rl, rr = right.child_by_field_name("operator"), right.child_by_field_name("left"), \
            right.child_by_field_name("right")
        if rop is None or rl is None or rr is None or rop.text.decode() not in _COMPOUND_OPS:
            continue
        lt = re.sub(r"\s+", "", left.text.decode("utf-8", "replace"))
        if re.sub(r"\s+", "", rl.text.decode("utf-8", "replace")) != lt:
            continue
        value = rr.text.decode("utf-8", "replace")
        if rr.type == "parenthesized_expression":
            value = value[1:-1].strip()
        edits.append((n.start_byte, n.end_byte,
                      f"{left.text.decode('utf-8', 'replace')} {rop.text.decode()}= {value}".encode("utf-8")))
    if not edits:
        return text
    out, at = [], 0
    for a, b, t in sorted(edits):
        if a < at:
            continue  # nested in one already rewritten
        out.append(data[at:a])
        out.append(t)
        at = b
    out.append(data[at:])
    return b"".join(out)[len(prefix):].decode("utf-8", "replace")


def gather(cf: CudaFile, kernel: Kernel, spec: TuningSpec) -> Evidence:
    """The evidence of one kernel with its (validated) spec: spec args in the kernel's parameter order."""
    raw = cf.text.encode("utf-8")
    node = _body_node(cf, kernel)
    targs = list(spec.template_args or [])
    if not targs:  # else the template arguments its launches name, where they agree
        named = {tuple(a.text for a in site.template_args) for site in kernel.launch_sites if site.template_args}
        targs = list(next(iter(named))) if len(named) == 1 else []
    known = _known_values(cf.text)
    values, params = _instantiation_values(kernel, targs, known)
    raw, node = _instantiated(raw, node, kernel, values, params)
    fn_args = callees.function_arguments([tp.name for tp in kernel.template_params if tp.kind != "type"],
                                         [a for tp, a in zip(kernel.template_params, targs) if tp.kind != "type"])
    types = {tp.name: a for tp, a in zip(kernel.template_params, targs) if tp.kind == "type"}
    # the kernel's accessor objects (`MatrixView_half_rw x_(x, height, width);`): their classes and how each is made
    ctors = callees.constructors(_root(node)) if node is not None else {}
    made = callees.objects(raw, node, ctors) if ctors else {}
    blocks, inlined = callees.inlined_blocks(raw, _root(node), node, fn_args, types, (ctors, made),
                                             _helper_instance(values)) \
        if node is not None else ([], set())
    own_text = raw[kernel.body_span.start:kernel.body_span.end].decode("utf-8", "replace")
    text = compound_assignments(own_text)  # `a = a + (b)` read as `a += b`
    for obj, (cls, _) in made.items():
        # an accessor object made from the kernel's buffers (which the grammar reads as a function declaration)
        # written as the value it is made from, so what is read through it (`x_.item_half2(r, c)`, its method inlined
        # by callees.py) flows from the buffer
        text = re.sub(rf"\b({re.escape(cls)})(\s+)({re.escape(obj)})\s*\(", r"\1\2\3 = \1(", text, count=1)
    if blocks or text != own_text:  # the helpers' bodies read after the kernel's own (callees.py), parsed as one
        blocks = [compound_assignments(t) for t in blocks]  # body; or the kernel's own, normalized, re-parsed
        # the calls of the file's own helpers read as what they are, never by what they are called: a helper that
        # only forwards its parameters to a function the file does not define (``rsqrt(x) { return rsqrtf(x); }``)
        # as a call of that function; the others under names of their own, in the order they are first called
        # (their blocks say what they compute)
        names = sorted((n for n in inlined if n), key=len, reverse=True)
        if names:
            called = r"(?<![\w.:>~])({})(?=\s*(?:<[^;(){{}}]*>)?\s*\()"
            pattern = re.compile(called.format("|".join(map(re.escape, names))))
            forward = callees.forwarding(_root(node), cf.text.encode("utf-8"))
            order = list(dict.fromkeys(m.group(1) for t in [text] + blocks for m in pattern.finditer(t)))
            neutral = {n: forward.get(n) or f"kt_helper{i}" for i, n in enumerate(order)}
            text = pattern.sub(lambda m: neutral.get(m.group(1), m.group(1)), text)
            blocks = [pattern.sub(lambda m: neutral.get(m.group(1), m.group(1)), t) for t in blocks]
            inlined = {neutral.get(n, n) for n in inlined}
        prefix = "void kt_inlined_body() "
        raw = (prefix + text[:text.rstrip().rfind("}")] + "\n" + "\n".join(blocks) + "\n}").encode("utf-8")
        own_end = text.rstrip().rfind("}") if blocks else -1  # the body starts at the kernel's `{`
        from agent_core.source.cuda_parse import parse_tree
        fn = parse_tree(raw).root_node.named_children[0]
        node = fn.child_by_field_name("body") or fn
        b0, b1 = node.start_byte, node.end_byte
    else:
        b0, b1 = kernel.body_span.start, kernel.body_span.end
        own_end = -1
    body = raw[b0:b1].decode("utf-8", "replace")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), body, flags=re.S)
    pointers = {a.name for a in spec.args if a.role != "scalar"}
    alias: dict[str, set[str]] = {}  # local pointer -> the arguments it is made from
    writes: dict[str, int] = {}
    reads: set[str] = set()
    calls: set[str] = set()
    loops = 0
    shuffles = shared = syncs = False
    skip: set[tuple[int, int]] = set()  # identifier nodes that are not reads (write targets, alias sources)

    def not_reads(value) -> None:
        """The identifiers of a pointer's value (``out + off``) outside its subscripts: the pointer is set, nothing
        is read."""
        for x in _walk(value) if value is not None else ():
            if x.type == "identifier" and x.parent is not None and x.parent.type != "subscript_argument_list":
                skip.add((x.start_byte, x.end_byte))

    def roots(names: set[str]) -> set[str]:
        out = set()
        for n in names:
            if n in pointers:
                out.add(n)
            out |= alias.get(n, set())
        return out

    nodes = list(_walk(node)) if node is not None else []
    local_pointers: set[str] = set()  # pointers declared in the body, with or without a value
    for n in nodes:  # local pointers made from the arguments, in source order (an alias of an alias resolves):
        # `T* row = out + off;`, or declared first and assigned later (`T* dst; if (...) dst = q_out + off;`)
        if n.type == "pointer_declarator" and n.parent is not None and n.parent.type in ("declaration",
                                                                                        "init_declarator"):
            ident = next((x for x in _walk(n) if x.type == "identifier"), None)
            if ident is not None:  # declaring a pointer reads nothing
                local_pointers.add(ident.text.decode())
                skip.add((ident.start_byte, ident.end_byte))
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is None or v is None:
                continue
            if d.type not in ("pointer_declarator", "reference_declarator") and not (
                    d.type == "identifier" and _auto_declared(n) and _pointer_valued(v)):
                continue  # (`auto row = x + off;` is a pointer made from x too)
            name = next((x.text.decode() for x in _walk(d) if x.type == "identifier"), None)
            src = roots(_bases(v))
            if name and src:
                alias[name] = src
        elif n.type == "assignment_expression":
            left, v = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is not None and v is not None and left.type == "identifier" and n.child_by_field_name(
                    "operator").text == b"=" and left.text.decode() in local_pointers:
                src = roots(_bases(v))
                if src:
                    alias.setdefault(left.text.decode(), set()).update(src)
    for n in nodes:
        t = n.type
        if t in ("for_statement", "while_statement", "do_statement"):
            loops += 1
        elif t == "call_expression":
            f = n.child_by_field_name("function")
            fname = f.text.decode("utf-8", "replace") if f is not None else ""
            fname = fname.split("<")[0].split("::")[-1]
            calls.add(fname)
            if fname in inlined:  # handing a pointer to a helper reads nothing: its block reads what it reads
                for a in (n.child_by_field_name("arguments") or n).named_children:
                    not_reads(a)
            if fname.startswith("__shfl"):
                shuffles = True
            if fname in ("__syncthreads", "sync") or fname.startswith("__syncthreads"):
                syncs = True
            if _ATOMIC.fullmatch(fname):
                args = n.child_by_field_name("arguments")
                if args is not None and args.named_children:
                    for r in roots(_bases(args.named_children[0])):
                        writes.setdefault(r, n.start_byte - b0)
                        reads.add(r)
            elif _STORE.fullmatch(fname) or (f is not None and f.type == "field_expression" and (
                    f.child_by_field_name("field") is not None
                    and f.child_by_field_name("field").text.decode("utf-8", "replace") == _MEMBER_STORE)):
                # a cache-hinted store (`__stcs(out + i, v)`), a collective's (`BlockStore(t).Store(&out[i], v)`): the
                # pointer is written
                args = n.child_by_field_name("arguments")
                if args is not None and args.named_children:
                    for r in roots(_bases(args.named_children[0])):
                        writes.setdefault(r, n.start_byte - b0)
                    not_reads(args.named_children[0])
        elif t == "assignment_expression":
            left, op = n.child_by_field_name("left"), n.child_by_field_name("operator")
            if left is not None and left.type == "identifier" and left.text.decode() in alias:
                skip.add((left.start_byte, left.end_byte))  # a local pointer pointed at an argument: no read
                not_reads(n.child_by_field_name("right"))
                continue
            if left is None or left.type == "identifier":
                continue
            targets = roots(_bases(left))
            for r in targets:
                writes.setdefault(r, n.start_byte - b0)
            if op is not None and op.text != b"=":
                reads |= targets
            else:
                base = left
                while base.type in ("subscript_expression", "pointer_expression", "field_expression",
                                    "parenthesized_expression") and base.named_children:
                    base = base.child_by_field_name("argument") or base.named_children[0]
                if base.type == "identifier":
                    skip.add((base.start_byte, base.end_byte))
                elif base.type == "binary_expression":  # `(y + off)[i] = v` (a helper's write, callees.py)
                    for x in _walk(base):
                        if x.type == "identifier" and roots({x.text.decode("utf-8", "replace")}):
                            skip.add((x.start_byte, x.end_byte))
        elif t == "update_expression":
            a = n.child_by_field_name("argument")
            if a is not None and a.type != "identifier":
                for r in roots(_bases(a)):
                    writes.setdefault(r, n.start_byte - b0)
                    reads.add(r)
        elif t == "init_declarator":
            d = n.child_by_field_name("declarator")
            if d is not None and d.type in ("pointer_declarator", "reference_declarator"):
                not_reads(n.child_by_field_name("value"))
        elif t in ("storage_class_specifier", "attribute_specifier", "type_qualifier") or n.text == b"__shared__":
            if n.text == b"__shared__":
                shared = True
    for n in nodes:
        if n.type == "identifier" and (n.start_byte, n.end_byte) not in skip:
            reads |= roots({n.text.decode("utf-8", "replace")})
    if "__shared__" in body:
        shared = True
    params = {p.name: p for p in kernel.params}
    uses = []
    for a in spec.args:
        p = params.get(a.name)
        const = bool(p and p.is_const)
        uses.append(ArgUse(a, const, a.name in reads, a.name in writes, writes.get(a.name, -1),
                           counts_of(a.size if a.role != "scalar" else a.value, spec)))
    lits = [m.group(0) for m in re.finditer(r"(?<![\w.])(\d+\.?\d*[eE]-\d+|0\.0*[1-9]\d*)[fF]?(?![\w.])", body)
            if _small(m.group(0))]
    return Evidence(kernel, spec, body, calls, uses, loops, shuffles, shared, syncs,
                    list(dict.fromkeys(lits)), re.sub(r"\s+", "", body),
                    {**constants(cf.text), **_template_values(kernel, targs, known)},
                    constant_exprs(cf.text), own_end, alias, constant_arrays(cf.text))


def _template_values(kernel: Kernel, targs: list[str], known: dict[str, float]) -> dict[str, float]:
    """The kernel's value template parameters at the instantiation the spec tunes (``targs``; a parameter's default
    where the arguments stop before it), where each is a number: constants of the body like the file's (a head size
    ``HEAD_DIM``, a head count ``NUM_HEAD`` a kernel takes as template arguments; ``known``: ``_known_values``)."""
    out: dict[str, float] = {}
    for i, tp in enumerate(kernel.template_params):
        a = targs[i] if i < len(targs) else tp.default
        if tp.kind != "value" or a is None:
            continue
        v = _template_arg_value(a, known, {**known, **out})
        if v is not None:
            out[tp.name] = v
    return out


# ----------------------------------------------------------------------------------------------- fp8 outputs
# the 16-bit float types of CUDA and PyTorch (a cast to one rounds)
HALF_TYPES = r"__half|half|__nv_bfloat16|nv_bfloat16|c10::Half|c10::BFloat16|at::Half|at::BFloat16"
# the fp8 types and conversions of CUDA (cuda_fp8.h), PyTorch (c10) and PTX: which fp8 format a byte output holds
FP8 = re.compile(r"__nv_fp8(?:x[24])?_(e4m3|e5m2)|__NV_(E4M3|E5M2)|Float8_(e4m3|e5m2)|\.(e4m3|e5m2)x2|"
                 r"__nv_cvt_(?:float2?|halfraw2?|bfloat16raw2)_to_fp8(x2)?", re.I)


def instance_types(ev: "Evidence") -> dict[str, str]:
    """The kernel's type template parameters -> the C type of the instantiation (the spec's template arguments, else
    those its launches name); empty for a plain kernel."""
    args = list(ev.spec.template_args or [])
    if not args:
        named = {tuple(a.text for a in site.template_args) for site in ev.kernel.launch_sites if site.template_args}
        args = list(next(iter(named))) if len(named) == 1 else []
    return {tp.name: a.strip() for tp, a in zip(ev.kernel.template_params, args) if tp.kind == "type"}


def fp8_formats(ev: "Evidence", o: ArgUse) -> list[str]:
    """The fp8 types a byte output may hold, by evidence: its declared element type (a template parameter as the
    instantiation gives it), else the fp8 types, conversions or their largest finite values in the body; e4m3
    unless only e5m2 shows. Empty where nothing shows fp8 (bytes of another kind)."""
    inst = instance_types(ev)
    p = next((p for p in ev.kernel.params if p.name == o.name), None)
    ty = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: inst.get(m.group(0), m.group(0)), p.type) if p else ""
    shown = [m.group(0).lower() for m in FP8.finditer(ty)] or [m.group(0).lower() for m in FP8.finditer(ev.body)]
    if re.search(r"(?<![\w.])448(\.0*)?[fF]?(?![\w.])", ev.body):
        shown.append("e4m3")
    if re.search(r"(?<![\w.])57344(\.0*)?[fF]?(?![\w.])", ev.body):
        shown.append("e5m2")
    if not shown:
        return []
    e5 = any("e5m2" in x for x in shown)
    return ["__nv_fp8_e5m2"] if e5 and not any("e4m3" in x for x in shown) else \
        ["__nv_fp8_e4m3", "__nv_fp8_e5m2"] if e5 else ["__nv_fp8_e4m3"]


def scale_ops(ev: "Evidence", name: str, pointer: bool = True) -> list[tuple[int, str]]:
    """How a value meets a static scale (the experts' KT_EXPERT_QUANT), the body's form first: times its reciprocal
    taken once (``1.0f / *scale``), divided by it, times it. The scale is the one fp32 value a pointer argument
    holds (``*scale``, ``scale[0]``, ``__ldg(scale)``) or, ``pointer`` False, a float argument itself; a local that
    holds it (``const float s = *scale;``) counts as it."""
    n = re.escape(name)
    if pointer:
        val = rf"(?:\*{n}\b|{n}\[0\]|__ldg\({n}\))"
        spaced = rf"(?:\*\s*{n}\b|{n}\s*\[\s*0\s*\]|__ldg\(\s*{n}\s*\))"
    else:
        val = rf"{n}\b"
        spaced = rf"(?<![\w.>]){n}"
    # the value and the locals that hold it
    vals = [val] + [re.escape(t) + r"\b" for t in re.findall(rf"(\w+)\s*=\s*{spaced}\s*;", ev.body)]
    recip = divide = times = False
    for v in vals:
        recip |= re.search(rf"(?<![\w.])1(?:\.0*)?[fF]?/\(?{v}|__frcp_rn\({v}", ev.flat) is not None
        divide |= any(not re.search(r"(?<![\w.])1(?:\.0*)?[fF]?$", ev.flat[:m.start()])
                      for m in re.finditer(rf"/\(?{v}", ev.flat))
        times |= re.search(rf"\*\(?{v}", ev.flat) is not None
    s = f"*`{name}`" if pointer else f"`{name}`"
    ops = [(1, f"times 1 / {s} (taken once)"), (2, f"divided by {s}"), (3, f"times {s}")]
    first = 1 if recip else 2 if divide else 3 if times else 1
    ops.sort(key=lambda o: o[0] != first)
    return ops


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?"
STANDARD_CONSTANTS = {"M_LOG2E": math.log2(math.e), "M_LN2": math.log(2.0), "M_LOG10E": math.log10(math.e)}


def constants(text: str) -> dict[str, float]:
    """The identifiers the file sets to one number (``constexpr float kLog2e = 1.4426950408889634f;``, a local
    ``const float c = 0.5f;``, ``#define LOG2E 1.44269504f``), with math.h's constants: what a number in the code
    is, whatever its name. One set to two different numbers is left out."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    seen: dict[str, set[float]] = {}
    for m in re.finditer(rf"\b([A-Za-z_]\w*)\s*=\s*\(?\s*({_NUMBER})\s*\)?\s*[;,]", text):
        seen.setdefault(m.group(1), set()).add(float(m.group(2).rstrip("fF")))
    for m in re.finditer(rf"^\s*#\s*define\s+([A-Za-z_]\w*)\s+\(?\s*({_NUMBER})\s*\)?\s*$", text, re.M):
        seen.setdefault(m.group(1), set()).add(float(m.group(2).rstrip("fF")))
    out = dict(STANDARD_CONSTANTS)
    out.update({n: next(iter(v)) for n, v in seen.items() if len(v) == 1})
    return out


def constant_exprs(text: str) -> dict[str, str]:
    """The identifiers the file sets to one arithmetic expression of numbers and names (``constexpr float
    kMinScale = 1.0f / (kFp8Max * 512.0f);``): name -> the expression's text. One set to two different expressions
    is left out; whether the names are constants is for the reader (``const_value``)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    seen: dict[str, set[str]] = {}
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*([\w.\s()+\-*/]+?)\s*;", text):
        seen.setdefault(m.group(1), set()).add(re.sub(r"\s+", " ", m.group(2)))
    return {n: next(iter(v)) for n, v in seen.items() if len(v) == 1}


# the float limits a constant expression may name
FLOAT_LIMITS = {"std::numeric_limits<float>::epsilon()": "1.1920928955078125e-07f",
                "FLT_EPSILON": "1.1920928955078125e-07f",
                "std::numeric_limits<float>::min()": "1.1754943508222875e-38f", "FLT_MIN": "1.1754943508222875e-38f"}


def const_value(text: str, ev: "Evidence", depth: int = 0) -> tuple[str, float] | None:
    """A constant expression (a literal, a name the file sets to a number or to such an expression, the float limits,
    and + - * / of them) as C float text with every name replaced by its number, and its value; None where some part
    is no constant."""
    t = text.strip()
    for k, v in FLOAT_LIMITS.items():
        t = t.replace(k, v)
    t = re.sub(r"\(float\)|static_cast<float>", "", t)
    if depth > 4 or not t or not re.fullmatch(r"[\w.\s()+\-*/]+", t):
        return None
    parts = []
    for tok in re.findall(rf"{_NUMBER}|[A-Za-z_]\w*|[()+\-*/]|\S", t):
        if re.fullmatch(_NUMBER, tok):
            # a float literal as float (a double one would widen the arithmetic); an integer one as written
            parts.append(tok if tok[-1] in "fF" or not re.search(r"[.eE]", tok) else tok + "f")
        elif re.fullmatch(r"[A-Za-z_]\w*", tok):
            if tok in ev.constants:
                parts.append(f"{ev.constants[tok]!r}f")
            elif tok in ev.defs:
                sub = const_value(ev.defs[tok], ev, depth + 1)
                if sub is None:
                    return None
                parts.append(f"({sub[0]})")
            else:
                return None
        elif tok in "()+-*/":
            parts.append(tok)
        else:
            return None
    c = " ".join(parts).replace("( ", "(").replace(" )", ")")
    try:
        value = eval(re.sub(r"(?<=[\d.])[fF]\b", "", c), {"__builtins__": {}}, {})  # digits and operators only
    except (SyntaxError, ZeroDivisionError, TypeError, NameError):
        return None
    return c, float(value)


def number(text: str, consts: dict[str, float]) -> float | None:
    """The value of a literal (``1.4426950408889634f``) or of an identifier the file sets to one number."""
    text = text.strip()
    if re.fullmatch(_NUMBER, text):
        return float(text.rstrip("fF"))
    return consts.get(text)


def _small(lit: str) -> bool:
    try:
        return 0 < float(lit.rstrip("fF")) <= 1e-3
    except ValueError:
        return False


# ----------------------------------------------------------------------------------------------- data flow
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def _top_level_assign(stmt: str) -> int:
    """The index of a statement's assignment operator (``=``, ``*=``, …) outside brackets; -1 when none."""
    depth = 0
    for i, ch in enumerate(stmt):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)  # a statement split from a `for (...)` header closes one it did not open
        elif ch == "=" and depth == 0:
            prev, nxt = stmt[i - 1] if i else "", stmt[i + 1] if i + 1 < len(stmt) else ""
            if nxt == "=" or prev in "=!<>":
                continue
            return i
    return -1


_FOR_INIT = re.compile(r"^\s*for\s*\(")


def statements(body: str) -> list[tuple[str | None, int, str]]:
    """The body's statements (split at ``;``, ``{``, ``}``) as (the local or indexed local it assigns, or None;
    the index of its assignment operator, -1 when none; its text)."""
    out = []
    for piece in re.split(r"[;{}]", body):
        # a for loop's init-statement is a statement of its own (`for (int k = threadIdx.x` → `int k = threadIdx.x`),
        # and so is the body of a loop without braces after its increment (`k += 32) s += x[k]`: two statements)
        for stmt in _split_header_end(_FOR_INIT.sub("", piece, count=1)):
            at = _top_level_assign(stmt)
            # a store into a member (`o.x = v`, `p->y = v`) changes the object, not a local named like the member
            target = _MEMBER_ACCESS.sub("", re.sub(r"\[[^\]]*\]", "", stmt[:at].rstrip("+-*/%&|^<> "))) \
                if at >= 0 else ""
            names = _IDENT.findall(target)
            out.append((names[-1] if names else None, at, stmt))
    return out


def _split_header_end(stmt: str) -> list[str]:
    """``stmt`` cut after a ``)`` that closes no ``(`` of its own (a for header's end: what follows is the loop's
    body); the statement whole where its parentheses balance."""
    depth = 0
    for i, ch in enumerate(stmt):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return [stmt[:i], stmt[i + 1:]]
    return [stmt]


def assignments(body: str) -> list[tuple[str, str]]:
    """The body's assignments as (the local or indexed local assigned, the value's text); a declaration of
    several (``const float a = x[i], b = y[i];``) gives one per declarator."""
    return [(target, value) for target, value, _ in _assignments(body)]


_ELEMENT_STORE = re.compile(r"\s*(?:\*\s*[A-Za-z_]\w*|[A-Za-z_]\w*\s*(?:(?:\[[^\]]*\]|(?:\.|->)\s*[A-Za-z_]\w*)\s*)+)\s*")
_MEMBER_ACCESS = re.compile(r"(?:\.|->)\s*[A-Za-z_]\w*")


def _assignments(body: str) -> list[tuple[str, str, bool]]:
    """``assignments`` with, for each, whether it stores an element through the name (``p[i] = v``,
    ``p[i][j] = v``, ``*p = v``) rather than giving the name itself a value."""
    out = []
    for target, at, stmt in statements(body):
        if target is None:
            continue
        element = bool(_ELEMENT_STORE.fullmatch(stmt[:at]))
        parts, depth, cur = [], 0, ""
        for ch in stmt[at + 1:]:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(0, depth - 1)
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        out.append((target, parts[0], element))
        for part in parts[1:]:
            j = _top_level_assign(part)
            names = _IDENT.findall(re.sub(r"\[[^\]]*\]", "", part[:j].rstrip("+-*/%&|^<> "))) if j >= 0 else []
            if names:
                out.append((names[-1], part[j + 1:], False))
            elif not re.fullmatch(r"\s*[*&]?\s*[A-Za-z_]\w*\s*(\[[^\]]*\])*\s*", part):
                # not a declarator (one without a value is left out): the comma was the value's own
                out[-1] = (out[-1][0], out[-1][1] + "," + part, out[-1][2])
    return out


def flows(body: str, declarators: bool = False) -> dict[str, set[str]]:
    """Which identifiers each local (or indexed local: ``freq[i] = ...``) is computed from, transitively: per
    statement the target of its assignment and the identifiers of the value. Coarse (no control flow, a name's
    every assignment counted), enough to tell what feeds a call's argument. ``declarators``: each declarator of
    a declaration of several its own assignment (``assignments``), not all of them the first one's."""
    direct: dict[str, set[str]] = {}
    if declarators:
        for target, value in assignments(body):
            direct.setdefault(target, set()).update(set(_IDENT.findall(value)) - {target})
    for target, at, stmt in statements(body) if not declarators else ():
        if target is None:
            continue
        deps = set(_IDENT.findall(stmt[at + 1:]))
        if stmt[at - 1:at] in ("+", "-", "*", "/"):
            deps.add(target)
        direct.setdefault(target, set()).update(deps - {target})
    out: dict[str, set[str]] = {}
    for name in direct:
        seen, todo = set(), [name]
        while todo:
            for d in direct.get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        out[name] = seen
    return out


def closing(text: str, start: int, opens: str = "(", closes: str = ")") -> int:
    """The index just past the ``)`` that closes the group whose ``(`` ends at ``start`` (``len(text)`` if none);
    with ``opens``/``closes`` (e.g. ``"(["``, ``")]"``) any of those brackets nest."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += (text[i] in opens) - (text[i] in closes)
        i += 1
    return i


def call_arguments(body: str, pattern: str) -> list[tuple[str, list[str]]]:
    """Every call whose function name matches ``pattern`` (fullmatch): (name, its arguments as text)."""
    out = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", body):
        if not re.fullmatch(pattern, m.group(1)):
            continue
        depth, args, cur = 1, [], ""
        for ch in body[m.end():]:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth == 0:
                    break
            if ch == "," and depth == 1:
                args.append(cur.strip())
                cur = ""
            else:
                cur += ch
        args.append(cur.strip())
        out.append((m.group(1), args))
    return out


def feeding(flow: dict[str, set[str]], text: str) -> set[str]:
    """The identifiers an expression is computed from, through the locals it names (``flows``)."""
    names = set(_IDENT.findall(text))
    for n in list(names):
        names |= flow.get(n, set())
    return names


# ----------------------------------------------------------------------------------------------- pointer offsets
_CAST_TYPE = (r"(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:long\s+long|long|int|short|char|size_t|ptrdiff_t|"
              r"u?int(?:8|16|32|64)_t|float|double|__half2?|half2?|__nv_bfloat162?|nv_bfloat162?|(?:u?int|float)[1-4])"
              r"(?:\s+int)?\s*\**")
_C_CAST = re.compile(rf"\(\s*{_CAST_TYPE}\s*\)")
_T_CAST = re.compile(r"\b(?:static|reinterpret|const)_cast\s*<[^<>;]*>")


def uncast(text: str) -> str:
    """The text with its casts gone (``(long long)x``, ``static_cast<int64_t>(x)`` → ``x``, ``(x)``): index
    arithmetic as the values it adds."""
    return _C_CAST.sub(" ", _T_CAST.sub(" ", text))


def additive_terms(text: str) -> list[tuple[int, str]]:
    """The top-level terms of a sum, each with its sign: ``a * b + (c + d) - e`` → ``[(1, 'a * b'), (1, '(c + d)'),
    (-1, 'e')]``; a unary sign belongs to its term."""
    out, depth, cur, sign = [], 0, "", 1
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        binary = cur.strip() and not re.search(r"[-+*/%(\[<>=&|^!~,?:]\s*$", cur)
        if depth == 0 and ch in "+-" and text[i + 1:i + 2] not in ("+", "-", ">") and text[i - 1:i] not in ("+", "-"):
            if binary:
                out.append((sign, cur.strip()))
                cur, sign = "", 1 if ch == "+" else -1
                continue
            if not cur.strip():
                sign = sign if ch == "+" else -sign
                continue
        cur += ch
    if cur.strip():
        out.append((sign, cur.strip()))
    return out


def factors(term: str) -> list[str]:
    """The top-level factors of a product (``(pos) * half`` → ``['(pos)', 'half']``; brackets nest)."""
    out, depth, cur = [], 0, ""
    for ch in term:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "*" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def unparen(text: str) -> str:
    """The text without parentheses that wrap all of it."""
    s = text.strip()
    while s.startswith("(") and s.endswith(")"):
        depth = 0
        for i, ch in enumerate(s):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(s) - 1:
                return s
        s = s[1:-1].strip()
    return s


def _expand(terms: list[tuple[int, str]], values: dict[str, str], depth: int = 0) -> list[tuple[int, str]]:
    """Terms with sums in parentheses split and locals assigned once (``values``) replaced by their terms."""
    out = []
    for sign, t in terms:
        s = unparen(t)
        inner = additive_terms(s)
        if len(inner) > 1 or (inner and inner[0][0] < 0):
            out += _expand([(sign * g, x) for g, x in inner], values, depth + 1) if depth < 8 else [(sign, s)]
        elif re.fullmatch(r"[A-Za-z_]\w*", s) and s in values and depth < 8:
            out += _expand([(sign, values[s])], values, depth + 1)
        else:
            out.append((sign, s))
    return out


def _bound(text: str, p: int, step: int, nest: str, unnest: str) -> int:
    """From ``text[p]`` walking by ``step``: the index of the first character outside nested brackets that bounds an
    expression (an unbalanced bracket or one of ``=,;?:{}<>&|^!``, the ``>`` of ``->`` excepted), or the end reached
    (-1 or ``len(text)``)."""
    depth = 0
    while 0 <= p < len(text):
        ch = text[p]
        if ch in nest:
            depth += 1
        elif ch in unnest:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and ch in "=,;?:{}<>&|^!" and not (ch == ">" and text[p - 1:p] == "-"):
            break
        p += step
    return p


def _segment(text: str, start: int, end: int) -> str:
    """The expression around ``text[start:end]`` up to what bounds it: an unbalanced bracket, an assignment, a
    comma, a conditional's parts, a comparison or a logical operator."""
    left = _bound(text, start - 1, -1, ")]", "([") + 1
    right = _bound(text, end, 1, "([", ")]")
    return re.sub(r"^\s*return\b", "", text[left:right])


def modified(body: str) -> set[str]:
    """The names the body changes other than by one plain assignment: incremented (``++i``, ``i += s``) or
    a loop's variable (``for (int i = ...``, ``for (; i < n; i += s)``)."""
    out = set(re.findall(r"\b([A-Za-z_]\w*)\s*(?:[-+*/%&|^]|<<|>>)=(?!=)", body))
    out |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", body)) | set(re.findall(r"\b([A-Za-z_]\w*)\s*(?:\+\+|--)", body))
    out |= loop_variables(body)
    return out


def for_headers(body: str) -> list[tuple[str, str, str]]:
    """The (init, condition, increment) of every ``for`` statement of the body."""
    out = []
    for m in re.finditer(r"\bfor\s*\(", body):
        i = closing(body, m.end())
        parts, depth, cur = [], 0, ""
        for ch in body[m.end():i - 1]:
            depth += ch in "(["
            depth -= ch in ")]"
            if ch == ";" and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def loop_variable(init: str, incr: str) -> str | None:
    """A ``for`` loop's variable: the name its init-statement assigns last (``int i = 0``, ``i = start``), else the
    one its increment changes (``for (; i < n; i += stride)``: i, not the stride)."""
    named = re.findall(r"([A-Za-z_]\w*)\s*=(?!=)", init)
    if named:
        return named[-1]
    changed = re.findall(r"\b([A-Za-z_]\w*)\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)", incr) or \
        re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", incr)
    return changed[0] if changed else None


def while_headers(body: str) -> list[tuple[str, str, str]]:
    """``while (c) { ...; i += s; }`` read as a for loop's (init, condition, increment): no init, its condition,
    and the last statement of its body that changes a name of the condition (none: not a counted loop, left out)."""
    out = []
    for m in re.finditer(r"\bwhile\s*\(", body):  # a do-while's `while (c);` has no body: no step, left out
        i = closing(body, m.end())
        cond = body[m.end():i - 1]
        rest = body[i:]
        j = len(rest) - len(rest.lstrip())
        if rest[j:j + 1] == "{":
            inner = rest[j + 1:closing(rest, j + 1, "{", "}") - 1]
        else:
            inner = rest[j:].split(";", 1)[0]
        names = set(re.findall(r"[A-Za-z_]\w*", cond))
        steps = [st.strip() for st in re.split(r"[;{}]", inner)
                 if (v := loop_variable("", st.strip())) is not None and v in names]
        if steps:
            out.append(("", cond, steps[-1]))
    return out


def loop_headers(body: str) -> list[tuple[str, str, str]]:
    """(init, condition, increment) of the body's counted loops: its ``for`` loops, then its ``while`` loops."""
    return for_headers(body) + while_headers(body)


def loop_variables(body: str) -> set[str]:
    """The variables of the body's counted loops (``loop_variable``)."""
    return {v for init, _, incr in loop_headers(body) if (v := loop_variable(init, incr))}


def index_terms(text: str, name: str) -> list[list[tuple[int, str]]]:
    """Where ``text`` indexes the pointer ``name`` (``name[...]``) or moves it by a sum (``name + ...``): the signed
    additive terms of each such index or move (the pointer's own term left out), in source order."""
    sites = []
    for m in re.finditer(rf"(?<![\w.>]){re.escape(name)}\b", text):
        if re.match(r"\s*\(", text[m.end():]) or text[max(0, m.start() - 2):m.start()] == "->":
            continue
        after = re.match(r"\s*\[", text[m.end():])
        if after:
            i, depth = m.end() + after.end(), 1
            j = i
            while j < len(text) and depth:
                depth += text[j] in "(["
                depth -= text[j] in ")]"
                j += 1
            terms = additive_terms(text[i:j - 1])
        else:
            terms = additive_terms(_segment(text, m.start(), m.end()))
            own = next((t for t in terms if t == (1, name)), None)
            if own is None:
                continue  # not moved by a sum (a dereference, an argument of a call, a comparison)
            terms = [t for t in terms if t is not own]
        sites.append(terms)
    return sites


def pointer_offsets(ev: "Evidence", name: str) -> list[tuple[int, str]] | None:
    """The uniform offset the kernel adds to the pointer ``name`` wherever it indexes it (``name[...]``) or moves it
    (``name + ...``): the signed terms common to every such place (locals assigned once expanded, casts dropped)
    that are made only of int arguments, the file's constants and literals (``q + (t * H + h) * D + nope`` →
    ``[(1, 'nope')]``; ``k + t * ks + ks - rot`` → ``[(1, 'ks'), (-1, 'rot')]``). None when the body neither
    indexes nor moves it; [] when the places share no such term (an offset only some accesses add, as NeoX's
    ``+ rot_dim / 2``, is the pair's, not the pointer's)."""
    text = uncast(ev.body)
    values: dict[str, list[str]] = {}
    for target, value in assignments(text):
        values.setdefault(target, []).append(value)
    moved = modified(text)
    once = {n: v[0] for n, v in values.items() if len(v) == 1 and n != name and n not in moved}
    allowed = {a.name for a in ev.ints() if a.counts and a.name not in values and a.name not in moved} | {
        n for n, v in ev.constants.items() if float(v).is_integer() and n not in values and n not in moved}
    sites = []
    for terms in index_terms(text, name):
        uniform = []
        for sign, t in _expand(terms, once):
            if re.fullmatch(r"[\w\s()+\-*/%]+", t) and t.count("(") == t.count(")") \
                    and set(_IDENT.findall(t)) <= allowed:
                uniform.append((sign, re.sub(r"\s+", " ", t).strip()))
        sites.append(uniform)
    if not sites:
        return None
    common = list(sites[0])
    for s in sites[1:]:
        left = list(s)
        keep = []
        for t in common:
            if t in left:
                left.remove(t)
                keep.append(t)
        common = keep
    return common


def offset_values(ev: "Evidence", terms: list[tuple[int, str]]) -> tuple | None:
    """The offset ``terms`` add on every size set (None when one cannot be evaluated)."""
    from agent_core import expr as _expr
    consts = {n: int(v) for n, v in ev.constants.items() if float(v).is_integer()}
    out = []
    for size in range(len(ev.spec.sizes)):
        env = dict(consts)
        env.update({a.name: a.counts[size] for a in ev.ints() if a.counts})
        try:
            out.append(sum(sign * _expr.evaluate_int(t, env) for sign, t in terms))
        except Exception:  # noqa: BLE001
            return None
    return tuple(out)


def _once(text: str) -> dict[str, str]:
    """The locals ``text`` assigns exactly once (or again with the same value, in sibling scopes) and never changes
    otherwise (``modified``): name → value. A store through a pointer (``row_out[i] = v``) is no new value of the
    pointer: a local assigned once and stored through stays (not an array given a braced initializer and then stored
    into: its elements change)."""
    values: dict[str, list[str]] = {}
    stored: set[str] = set()
    for target, value, element in _assignments(text):
        if element:
            stored.add(target)
        else:
            values.setdefault(target, []).append(value)
    moved = modified(text)
    # a local declared again with the same value in sibling scopes (`const int k = (i0 * C + c) * S + i2;` in each of
    # three loops over c) is that one value
    return {n: v[0] for n, v in values.items()
            if len({re.sub(r"\s+", "", x) for x in v}) == 1 and n not in moved
            and not (n in stored and v[0].strip().startswith("{"))}


def declared_type(body: str, name: str) -> str | None:
    """The type ``name`` is declared with in ``body`` (a ``using`` or ``typedef`` of the body's resolved), or None."""
    m = re.search(rf"(?:^|[;{{}}(])\s*(?:const\s+)?([A-Za-z_][\w:]*(?:\s*<[^;{{}}()]*>)?)\s+{re.escape(name)}\s*(?:\[|;|=|,|\{{)",
                  body, re.M)
    if m is None:
        return None
    ty = m.group(1)
    alias = re.search(rf"\busing\s+{re.escape(ty)}\s*=\s*([^;]+);", body) or \
        re.search(rf"\btypedef\s+([^;]+?)\s+{re.escape(ty)}\s*;", body)
    return alias.group(1) if alias else ty


def ternary(value: str) -> tuple[str, str, str] | None:
    """``c ? a : b`` at the top level of a value: (c, a, b), each unparenthesized and stripped."""
    v = unparen(value)
    depth, q = 0, -1
    for i, ch in enumerate(v):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "?" and depth == 0:
            q = i
            break
    if q < 0:
        return None
    depth = 0
    for i in range(q + 1, len(v)):
        ch = v[i]
        depth += ch in "([{?"
        depth -= ch in ")]}"
        if ch == ":" and depth == 0 and v[i - 1:i + 1] != "::" and v[i:i + 2] != "::":
            return unparen(v[:q]), unparen(v[q + 1:i]), unparen(v[i + 1:])
        if ch == ":" and depth > 0 and v[i - 1:i + 1] != "::" and v[i:i + 2] != "::":
            depth -= 1  # the ':' of a nested conditional
    return None


def scope_view(text: str, name: str) -> str:
    """``text`` without the blocks (``{ ... }`` of a loop or a branch, at any depth) that never mention ``name`` (nor a
    local pointer made from it) and give a local a value another part of ``text`` gives it differently (``const int64_t off = ...`` once in the query's
    loop over heads and again in the key's): in the view of ``name`` such a local has the value of the scope that
    reads ``name``. Unchanged where no local is so declared twice."""
    values: dict[str, set[str]] = {}
    for target, value, element in _assignments(text):
        if not element:
            values.setdefault(target, set()).add(re.sub(r"\s+", "", value))
    twice = {n for n, v in values.items() if len(v) > 1}
    if not twice:
        return text
    mention = re.compile(rf"(?<![\w.])(?:{'|'.join(re.escape(a) for a in pointer_aliases(text, name))})\b")
    spans, opens = [], []
    for i, ch in enumerate(text):
        if ch == "{":
            opens.append(i)
        elif ch == "}" and opens:
            start = opens.pop()
            if opens:  # not the body itself
                spans.append((start, i + 1))
    cut = []
    for start, end in sorted(spans, key=lambda s: s[1] - s[0]):  # innermost first
        block = text[start:end]
        if any(a <= start and end <= b for a, b in cut) or mention.search(block):
            continue
        mine = {t for t, _, element in _assignments(block[1:-1]) if not element}
        if mine & twice:
            cut.append((start, end))
    out = text
    for start, end in sorted(cut, reverse=True):
        if not any(a < start and end <= b for a, b in cut if (a, b) != (start, end)):
            # the statement the block belongs to goes with it (a loop's header: its variable's bound is that scope's)
            out = out[:_header_start(out, start)] + "{}" + out[end:]
    return out


def _header_start(text: str, brace: int) -> int:
    """Where the ``for`` / ``while`` / ``if`` statement whose block opens at ``brace`` starts (its header's keyword);
    ``brace`` where the block is no such statement's."""
    before = text[:brace].rstrip()
    if not before.endswith(")"):
        return brace
    depth = 0
    for i in range(len(before) - 1, -1, -1):
        depth += before[i] == ")"
        depth -= before[i] == "("
        if depth == 0:
            m = re.search(r"\b(?:for|while|if)\s*$", before[:i])
            return m.start() if m else brace
    return brace


def branch_view(text: str, name: str) -> str:
    """``text`` with every local pointer chosen by a conditional between buffers (``float* vec = i == 0 ? q + a :
    k + b;``, one loop rotating the query and then the key) given the branch made from ``name`` alone: the
    buffer's view of the pointer (its indices through ``vec`` are the query's where ``name`` is q). Unchanged where
    no such local exists. Blocks that never mention ``name`` and declare again a local it reads are left out
    (``scope_view``)."""
    text = scope_view(text, name)
    if "?" not in text:
        return text
    out = text
    for _, value, element in _assignments(text):
        c = None if element else ternary(value)
        if c is None:
            continue
        mine = [b for b in c[1:] if (1, name) in additive_terms(b) or b == name]
        if len(mine) != 1:
            continue
        out = out.replace(value, " " + mine[0] + " ", 1)
    return out


def pointer_aliases(text: str, name: str) -> list[str]:
    """``name`` and the local pointers made from it by a sum, transitively (``const T* row = x + off;``): the
    names through which the body indexes the buffer."""
    once = _once(text)
    out = [name]
    for n in out:
        for local, value in once.items():
            if local not in out and (1, n) in additive_terms(unparen(value)):
                out.append(local)
    return out


def index_sites(ev: "Evidence", name: str) -> list[list[tuple[int, str]]]:
    """The additive terms of every place the body indexes or moves the buffer ``name`` or a local pointer made from
    it (``index_terms``; casts dropped, locals assigned once that are sums expanded into their terms), in elements
    of the buffer: an index through a vector view of it (``vector_views``) times the view's lanes."""
    text, lanes = vector_views(ev, name)
    text = branch_view(text, name)
    once = _once(text)
    out = []
    for n in pointer_aliases(text, name):
        for terms in index_terms(text, n):
            terms = _expand(terms, once)
            if lanes.get(n, 1) > 1:
                terms = [(sign, f"{t} * {lanes[n]}") for sign, t in terms]
            out.append(terms)
    return out


# the CUDA vector types a buffer is read through 4, 8 or 16 bytes at a time, and their sizes
VECTOR_BYTES = {"half2": 4, "__half2": 4, "nv_bfloat162": 4, "__nv_bfloat162": 4, "short2": 4, "ushort2": 4,
                "char4": 4, "uchar4": 4, "float2": 8, "int2": 8, "uint2": 8, "float4": 16, "int4": 16, "uint4": 16,
                "double2": 16, "longlong2": 16, "ulonglong2": 16}
_VT = "|".join(sorted(VECTOR_BYTES, key=len, reverse=True))
_VIEW_DECL = re.compile(rf"\b({_VT})\s*(?:const\s*)?\*\s*(?:const\s+|__restrict__\s+)*([A-Za-z_]\w*)\s*=")
_VIEW_CAST = re.compile(rf"(\(\s*)?(?:\(\s*(?:const\s+)?({_VT})\s*(?:const\s*)?\*\s*(?:__restrict__\s*)?\)|"
                        rf"reinterpret_cast\s*<\s*(?:const\s+)?({_VT})\s*(?:const\s*)?\*\s*>(?=\s*\())\s*")


def _view_lanes(ev: "Evidence", name: str, vt: str) -> int:
    """How many elements of the buffer ``name`` one ``vt`` holds (1: not a whole number of them, or not a buffer)."""
    a = next((x for x in ev.args if x.name == name), None)
    size = NBYTES.get(a.dtype) if a is not None and a.role != "scalar" else None
    return VECTOR_BYTES[vt] // size if size and VECTOR_BYTES[vt] % size == 0 and VECTOR_BYTES[vt] > size else 1


def vector_views(ev: "Evidence", name: str) -> tuple[str, dict[str, int]]:
    key = (ev.body, name, tuple((a.name, a.dtype, a.role) for a in ev.args))
    if key not in _VIEWS:
        if len(_VIEWS) > 256:
            _VIEWS.clear()
        _VIEWS[key] = _vector_views(ev, name)
    return _VIEWS[key]


_VIEWS: dict = {}


def _vector_views(ev: "Evidence", name: str) -> tuple[str, dict[str, int]]:
    """The body without casts (``uncast``), and the pointers through which it reads or writes the buffer ``name`` as
    a vector type of several of its elements (``half2* x2 = (half2*)x;``, ``reinterpret_cast<const float4*>(x)``
    over floats) with the elements each holds: an index through such a view counts vectors, not elements. A view
    cast in an expression and indexed there (``((const half2*)cos)[i]``, ``reinterpret_cast<float4*>(x + off)[j]``)
    is named in the text returned (``kt_view0`` declared as ``name + off`` before the body): its index is then a
    site of a pointer made from the buffer, as a declared view's is."""
    body, lanes, decls = ev.body, {}, []
    pos = 0
    while True:
        m = _VIEW_CAST.search(body, pos)
        if m is None:
            break
        pos = m.start() + 1
        vt, j = m.group(2) or m.group(3), m.end()
        if body[j:j + 1] == "(":  # the operand in parentheses
            j = closing(body, j + 1)
            inner = unparen(uncast(body[m.end():j]))
        else:
            word = re.match(r"[A-Za-z_]\w*", body[j:])
            if word is None:
                continue
            inner, j = word.group(0), j + word.end()
        if m.group(2):  # a C cast binds looser than an index: only ((VT*)p)[i] indexes the view
            close = re.match(r"\s*\)", body[j:])
            if m.group(1) is None or close is None:
                continue
            start, j = m.start(), j + close.end()
        else:
            start = m.start() + len(m.group(1) or "")
        if re.match(r"\s*\[", body[j:]) is None:
            continue
        at = re.fullmatch(r"&\s*([A-Za-z_]\w*)\s*\[(.*)\]", inner, re.S)
        src = at.group(1) if at else inner if re.fullmatch(r"[A-Za-z_]\w*", inner) else next(
            (t for sign, t in additive_terms(inner) if sign == 1 and re.fullmatch(r"[A-Za-z_]\w*", t)), None)
        n = _view_lanes(ev, name, vt) if src == name else 1
        if n == 1:
            continue
        view = f"kt_view{len(decls)}"
        decls.append(f"{view} = {name} + ({at.group(2)});" if at else f"{view} = {inner};")
        lanes[view] = n
        body = body[:start] + view + body[j:]
        pos = start + len(view)
    text = uncast("\n".join(decls + [body]))
    made = set(pointer_aliases(text, name)[1:])  # the pointers made from the buffer
    for m in _VIEW_DECL.finditer(ev.body):
        n = _view_lanes(ev, name, m.group(1)) if m.group(2) in made else 1
        if n > 1:
            lanes[m.group(2)] = n
    return text, lanes


def term_values(ev: "Evidence", term: str) -> tuple | None:
    """The value of an index term on every size set (``offset_values``), the locals assigned once replaced by their
    values first (``rotary_dim_half`` → ``(rotary_dim / 2)``); None when something in it is not known before the
    launch (a thread index, a loop variable, a value read from memory)."""
    once = _once(uncast(ev.body))
    for _ in range(8):
        new = _IDENT.sub(lambda m: f"({once[m.group(0)]})" if m.group(0) in once else m.group(0), term)
        if new == term:
            break
        term = new
    if not re.fullmatch(r"[\w\s()+\-*/%]+", term):
        return None
    return offset_values(ev, [(1, term)])


def known_factors(ev: "Evidence", parts: list[str]) -> tuple | None:
    """The value on every size set of the factors of a product (``parts``, ``factors``) known before the launch
    (``term_values``), where another of them is not (a thread, block or loop index): how far the product moves a
    unit of that one. None where none or all of them are known."""
    known = [f for f in parts if term_values(ev, f) is not None]
    if not known or len(known) == len(parts):
        return None
    return term_values(ev, " * ".join(f"({f})" for f in known))


_MEMBER = re.compile(r"\b[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)+")


def _expand_locals(text: str, once: dict[str, str], keep: str | None = None) -> str:
    """``text`` with the locals assigned once (``_once``) replaced by their values, transitively (but ``keep``),
    members (``blockIdx.x``) as ``kt_unknown`` and integer suffixes dropped."""
    for _ in range(8):
        text = _MEMBER.sub("kt_unknown", text)  # blockIdx.x, a member: not known before the launch
        new = _IDENT.sub(lambda m: f"({once[m.group(0)]})" if m.group(0) in once and m.group(0) != keep
                         else m.group(0), text)
        if new == text:
            break
        text = new
    return re.sub(r"(?<![\w.])(\d+)[uUlL]+\b", r"\1", _MEMBER.sub("kt_unknown", text))


def index_parts(ev: "Evidence", name: str) -> list[str]:
    """The parts of every index the body reads or writes the buffer ``name`` at (or a local pointer made from it),
    each as written without whitespace or casts: the additive terms, and the values of the locals assigned once
    that they name, transitively (``lse_idx`` and its ``(b*H+h)*M+m``): the shapes an index is built of."""
    once = _once(uncast(ev.body))
    out: list[str] = []
    todo = [t for terms in index_sites(ev, name) for _, t in terms]
    while todo:
        t = re.sub(r"\s+", "", todo.pop(0))
        if t in out:
            continue
        out.append(t)
        todo += [once[n] for n in _IDENT.findall(t) if n in once]
    return out


def index_stride(ev: "Evidence", name: str, var: str, known: dict[str, int] | None = None,
                 stepping: bool = False) -> tuple | None:
    """How far the body's index into the buffer ``name`` moves when the loop variable ``var`` grows by one, on every
    size set: the same at every place it indexes the buffer (or a local pointer made from it) and whatever the
    thread and block indices, the other loop variables and the values read (each tried at several values); locals
    assigned once replaced by their values, casts dropped. None where that is not what the body shows (a stride
    that depends on something else, an index that cannot be evaluated, no index). ``known``: more names of known
    values (a kernel's value template arguments); ``stepping``: only the places whose index names ``var`` (not a
    move of the pointer by a row offset, ``p += row * D``)."""
    once = _once(uncast(ev.body))
    consts = {n: int(v) for n, v in ev.constants.items() if float(v).is_integer()}
    consts.update(known or {})
    found = set()
    for terms in index_sites(ev, name):
        text = _expand_locals(" + ".join(f"({t})" if sign > 0 else f"-({t})" for sign, t in terms) or "0", once, var)
        if stepping and not re.search(rf"\b{re.escape(var)}\b", text):
            continue
        if not re.fullmatch(r"[\w\s()+\-*/%]+", text):
            return None
        per = []
        for size in range(len(ev.spec.sizes)):
            env = dict(consts)
            env.update({a.name: a.counts[size] for a in ev.ints() if a.counts})
            steps = set()
            for u in (0, 1, 7):
                try:
                    names = expr.names(text)
                    at = {**{n: u for n in names if n not in env}, **env}
                    steps.add(expr.evaluate_int(text, {**at, var: 1}) - expr.evaluate_int(text, {**at, var: 0}))
                except Exception:  # noqa: BLE001
                    return None
            if len(steps) != 1:
                return None
            per.append(steps.pop())
        found.add(tuple(per))
    return found.pop() if len(found) == 1 else None


# ----------------------------------------------------------------------------------------------- values of a buffer
# conversions a value is read through (``__half2float(w[i])``, ``static_cast<float>(b[i])``), and the arithmetic
# intrinsics that multiply, add, or multiply then add their arguments
_WIDEN_CALLS = re.compile(r"(?:__half2float|__bfloat162float|__low2float|__high2float|__ldg|float|to_float|"
                          r"static_cast<float>)\(")
_MULS = r"__hmul|__hmul2|__hmul_rn|__hmul2_rn|__fmul_rn|__fmul_rz|__fmul_ru|__fmul_rd"
_ADDS = r"__hadd|__hadd2|__hadd_rn|__hadd2_rn|__fadd_rn|__fadd_rz|__fadd_ru|__fadd_rd"
_FMAS = r"fmaf|fma|__fmaf_rn|__fmaf_rz|__fmaf_ru|__fmaf_rd|__fmaf_ieee_rn|__hfma|__hfma2"
_SUFFIX = r"(?:\[[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*\]|\.[A-Za-z_]\w*)*"  # subscripts and members


def plain(text: str) -> str:
    """``text`` without whitespace, casts or widening conversions, a parenthesized name before its subscript or member
    unwrapped (``(w)[i]``, as a helper's inlined body reads its argument): values as they are combined."""
    flat = _WIDEN_CALLS.sub("(", re.sub(r"\s+", "", uncast(text)))
    return re.sub(r"(?<![\w)\]])\(([A-Za-z_]\w*)\)(?=[\[.])", r"\1", flat)


def _stores(body: str) -> list[tuple[str, str]]:
    """(the local assigned, the value's text) of every plain assignment, one per declarator (``float a = x[i], b =
    y[i];``), a member's assignment given to its local (``g.raw = ...`` assigns ``g``)."""
    out = []
    for _, at, stmt in statements(body):
        # a direct initialization (``const R g(gamma[i]);``, ``float b{beta[i]};``): a type, the local, one value
        init = re.fullmatch(r"\s*(?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;<>]*>)?\s+([A-Za-z_]\w*)\s*([({])(.*)[)}]\s*",
                            stmt, re.S)
        if at < 0 and init and init.group(1) not in ("return", "else") and "," not in init.group(3):
            out.append((init.group(1), init.group(3)))
            continue
        if at <= 0 or stmt[at - 1] in "+-*/%&|^<>!=":
            continue
        lhs = re.sub(r"\[[^\]]*\]|\.\s*[A-Za-z_]\w*", "", stmt[:at])
        names = _IDENT.findall(lhs)
        if not names:
            continue
        parts, depth, cur = [], 0, ""
        for ch in stmt[at + 1:]:
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        out.append((names[-1], parts[0] if parts else cur))
        for part in (parts[1:] + [cur]) if parts else []:
            j = _top_level_assign(part)
            more = _IDENT.findall(part[:j]) if j > 0 else []
            if more:
                out.append((more[-1], part[j + 1:]))
    return out


def value_holders(ev: "Evidence", name: str) -> tuple[set[str], set[str]]:
    """(pointers, locals) through which the body reads the values of the buffer ``name``: the buffer and the local
    pointers made from it alone; the locals that hold one value read from those as it is (subscripted, or
    dereferenced at an offset: ``*reinterpret_cast<const uint4*>(w + i)``; converted or cast; read from such a local),
    or a constant where the pointer is null (``w == nullptr ? T(1) : w[j]``). Nothing computed from it."""
    pointers = {name} | {p for p, src in ev.aliases.items() if src == {name}} | set(
        pointer_aliases(uncast(ev.body), name))
    ptr = "|".join(map(re.escape, sorted(pointers)))
    read = rf"[(]*(?:{ptr})\b\[|\*[(]*(?:{ptr})\b\+"
    const = r"[(]*\w*\(?-?[\d.]+[fF]?\)?[)]*"
    stores = [(t, plain(v)) for t, v in _stores(ev.body)]
    held: set[str] = set()
    grew = True
    while grew:
        grew = False
        alt = "|".join(map(re.escape, sorted(pointers | held)))
        one = rf"[(*]*(?:{alt})\b{_SUFFIX}(?:\+[\w()*+]+)?[)]*{_SUFFIX}"
        for target, v in stores:
            if target in held or target in pointers:
                continue
            if re.fullmatch(one, v) and (re.match(read, v) or not re.match(rf"[(*]*(?:{ptr})\b", v)) \
                    or re.fullmatch(rf"[^?]*\?(?:{one}:{const}|{const}:{one})", v):
                held.add(target)
                grew = True
    return pointers, held


def _left_factor(flat: str, i: int) -> int:
    """The start of the factor that ends just before ``i`` (an identifier, a subscript or member chain, a call, a
    parenthesized group)."""
    while i > 0:
        ch = flat[i - 1]
        if ch in ")]":
            depth, k = 0, i - 1
            while k >= 0:
                depth += flat[k] in ")]"
                depth -= flat[k] in "(["
                if depth == 0:
                    break
                k -= 1
            i = max(k, 0)
        elif ch.isalnum() or ch in "_.":
            i -= 1
        else:
            break
    return i


def _right_factor(flat: str, j: int) -> int:
    """The end of the factor that starts at ``j``."""
    while j < len(flat):
        ch = flat[j]
        if ch in "([":
            j = closing(flat, j + 1, "([", ")]")
        elif ch.isalnum() or ch in "_.":
            j += 1
        else:
            break
    return j


def value_operands(ev: "Evidence", name: str) -> list[tuple[str, str]]:
    """How the body combines each value of the buffer ``name`` it reads (``value_holders``): ("*", term) where the
    value is a factor of a product (a division's too), ("+", term) where it is an operand of an addition or
    subtraction as it is, ("", term) otherwise; each with the whole product term it is part of, from the sign before
    it (``-y*s``, ``+(c?-a:b)*s``). Add, multiply and fused multiply-add intrinsics count as their operators."""
    pointers, held = value_holders(ev, name)
    flat = plain(ev.body)
    types = {tp.name for tp in ev.kernel.template_params if tp.kind == "type"} \
        | set(re.findall(r"\busing\s+([A-Za-z_]\w*)\s*=", ev.body)) \
        | set(re.findall(r"\btypedef\b[^;]*?\b([A-Za-z_]\w*)\s*;", ev.body))
    alt = "|".join(map(re.escape, sorted(pointers | held)))
    whole = re.compile(rf"[(*]*(?:{alt})\b{_SUFFIX}[)]*")
    out = []
    for m in re.finditer(rf"(?<![\w.])(?:{alt})\b{_SUFFIX}", flat):
        if m.group(0).split("[")[0].split(".")[0] in pointers and "[" not in m.group(0):
            continue  # the pointer itself (an offset, a declaration, a test against null): no value
        i, j = m.start(), m.end()
        while i > 0 and flat[i - 1] == "(" and j < len(flat) and flat[j] == ")":
            # a parenthesis around it, or a functional cast to a type (``C(w[i])``, C a type alias or a template
            # parameter); not a call of a function
            call = re.search(r"[A-Za-z_][\w:]*(?:<[^<>()]*>)?$", flat[:i - 1])
            if call and call.group(0).split("<")[0].split("::")[-1] not in types:
                break
            i, j = (call.start() if call else i - 1), j + 1
        before, after = flat[i - 1:i], flat[j:j + 1]
        if before == "*" and not re.match(r"[\w)\]]", flat[i - 2:i - 1]):
            before = ""  # a dereference (``*(w + off)``), not a product
        s, e = i, j
        while s > 1 and flat[s - 1] in "*/" and re.match(r"[\w)\]]", flat[s - 2]):
            s = _left_factor(flat, s - 1)
        while e < len(flat) - 1 and flat[e] in "*/" and flat[e + 1] != "=":
            e = _right_factor(flat, e + 1)
        term = flat[max(s - 1, 0):e] if s > 0 and flat[s - 1] in "+-" else flat[s:e]
        if before in ("*", "/") or after in ("*", "/"):
            out.append(("*", term))
        elif (before in "+-" and before and flat[i - 2:i - 1] not in ("+", "-")) \
                or (after in ("+", "-") and flat[j + 1:j + 2] not in ("+", "-", "=")):
            out.append(("+", term))
        else:
            out.append(("", term))
    for fname, args in call_arguments(flat, f"{_MULS}|{_ADDS}|{_FMAS}"):
        hit = [whole.fullmatch(a) is not None for a in args]
        if re.fullmatch(_MULS, fname):
            out += [("*", fname)] if any(hit) else []
        elif re.fullmatch(_ADDS, fname):
            out += [("+", fname)] if any(hit) else []
        elif len(args) == 3:
            out += ([("*", fname)] if hit[0] or hit[1] else []) + ([("+", fname)] if hit[2] else [])
    return out


# ------------------------------------------------------------------------------------- decision functions (codebooks)
# A codebook quantizer (bitsandbytes' NF4 and FP4) chooses each value's code by comparing it with constants: a tree of
# `if (x > 0.0398f)` (dQuantizeNF4), a sign bit and a tree on |x| (dQuantizeFP4), a count of the table entries it
# exceeds (`for (k...) c += x > mid[k]`). What such a helper computes is read by running it: a small interpreter of
# the helper's statements (declarations, assignments, if / else, for and while loops, return; numbers, the file's
# constant arrays, casts, + - * / % << >> & | ^, comparisons, ?:, fabsf / fminf / fmaxf) on float32 values, never by
# its names. The code it returns is then a step function of the value: which it is follows exactly from probing it at
# its constants, their negations and the float32 values next to them (a change between two probes that are not
# adjacent floats is found by bisection on the floats' order).

_ARRAY = re.compile(r"(?<![\w.])(float|double|int|unsigned|unsigned\s+char|unsigned\s+int|char|int8_t|uint8_t|"
                    r"int32_t|uint32_t)\s+([A-Za-z_]\w*)\s*\[\s*\w*\s*\]\s*=\s*\{([^{}]*)\}")
FLT_MAX = 3.4028234663852886e38


def constant_arrays(text: str) -> dict[str, tuple[str, list[float]]]:
    """The arrays the file initializes with numbers only (``__constant__ float kMid[15] = {-0.848f, ...};``): name
    -> (element kind: ``f`` float, ``d`` double, ``i`` integer, the values); one initialized twice is left out."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    seen: dict[str, list] = {}
    for m in _ARRAY.finditer(text):
        items = [t.strip() for t in m.group(3).split(",") if t.strip()]
        vals = [_literal(t) for t in items]
        if not items or any(v is None for v in vals):
            continue
        kind = {"float": "f", "double": "d"}.get(m.group(1), "i")
        seen.setdefault(m.group(2), []).append((kind, [_convert(v, kind)[0] for v in vals]))
    return {n: v[0] for n, v in seen.items() if len(v) == 1}


def f32(v: float) -> float:
    """``v`` rounded to float32 (to nearest even; beyond the largest float, infinity)."""
    if v != v or v in (math.inf, -math.inf):
        return v
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def f32_of_text(text: str) -> float:
    """The float32 value of a decimal literal as a compiler reads it: the exact decimal rounded once, to nearest even
    (through a double first, a decimal within 2^-29 of a midpoint between two floats could round twice)."""
    from fractions import Fraction
    exact = Fraction(text.strip().rstrip("fF"))
    v = f32(float(exact))
    if v in (math.inf, -math.inf) or v != v:
        return v
    k = _order(v)
    best = min((_from_order(j) for j in (k - 1, k, k + 1)),
               key=lambda c: (abs(Fraction(c) - exact) if not math.isinf(c) else exact * 0 + 10 ** 40,
                              struct.unpack("<I", struct.pack("<f", c))[0] & 1))
    return best


def _order(v: float) -> int:
    """An integer that orders float32 values as the floats do (-0.0 just below +0.0): adjacent floats differ by 1."""
    b = struct.unpack("<I", struct.pack("<f", v))[0]
    return b if b < 0x80000000 else -(b - 0x80000000) - 1


def _from_order(k: int) -> float:
    b = k if k >= 0 else (-(k + 1)) + 0x80000000
    return struct.unpack("<f", struct.pack("<I", b))[0]


def _literal(text: str):
    """(value, kind) of a C number literal: ``i`` integer, ``f`` float (suffix f), ``d`` double; None if it is not
    one."""
    t = text.strip().replace("'", "")
    sign = 1
    while t[:1] in "+-" and t:
        sign, t = (-sign if t[0] == "-" else sign), t[1:].strip()
    if re.fullmatch(r"(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uUlL]*", t):
        core = t.rstrip("uUlL")
        v = int(core, 8) if re.fullmatch(r"0\d+", core) else int(core, 0)
        return sign * v, "i"
    m = re.fullmatch(r"((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)([fF]?)", t)
    if m is None or not re.search(r"[.eE]", m.group(1)) and not m.group(2):
        return None
    if m.group(2):
        return sign * f32_of_text(m.group(1)), "f"
    return sign * float(m.group(1)), "d"


def _convert(v: tuple, kind: str) -> tuple:
    """``v`` converted to a value of ``kind`` (C's conversions: a float to an integer truncates)."""
    x, k = v
    if kind == "i":
        if k == "i":
            return x, "i"
        if x != x or x in (math.inf, -math.inf):
            raise _Undecided("a non-finite value converted to an integer")
        return int(x), "i"
    return (f32(float(x)) if kind == "f" else float(x)), kind


class _Undecided(Exception):
    """Something the interpreter does not evaluate: the helper is not read as a decision function."""


class _Returned(Exception):
    def __init__(self, value):
        super().__init__()
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_INT_TYPES = re.compile(r"\b(?:int|unsigned|char|short|long|bool|u?int(?:8|16|32|64)_t|size_t|uchar|uint)\b")
_FLOAT_CALLS = {"fabsf": "abs", "fabs": "abs", "abs": "abs", "std::abs": "abs", "std::fabs": "abs",
                "fminf": "min", "fmin": "min", "std::fmin": "min", "fmaxf": "max", "fmax": "max", "std::fmax": "max",
                "min": "min", "max": "max", "std::min": "min", "std::max": "max"}


class _Interpreter:
    """Runs one block of statements on a value of its input expression ``source`` (whitespace-free text)."""

    def __init__(self, src: bytes, source: str, arrays: dict[str, tuple[str, list[float]]]):
        self.src, self.source, self.arrays = src, source, arrays

    def run(self, block, x: float):
        self.steps = 0
        self.env: dict[str, tuple] = {self.source: (x, "f")}
        self.kinds: dict[str, str] = {self.source: "f"}
        self.local_arrays: dict[str, tuple[str, list]] = {}
        try:
            self.stmt(block)
        except _Returned as r:
            return r.value
        except (_Break, _Continue, RecursionError, ZeroDivisionError, OverflowError, ValueError):
            raise _Undecided("no value returned") from None
        raise _Undecided("no value returned")

    def text(self, n) -> str:
        return re.sub(r"\s+", "", self.src[n.start_byte:n.end_byte].decode("utf-8", "replace"))

    def words(self, n) -> str:
        """A type's text, its words apart (``unsigned long long``)."""
        return " ".join(self.src[n.start_byte:n.end_byte].decode("utf-8", "replace").split())

    def tick(self) -> None:
        self.steps += 1
        if self.steps > 20000:
            raise _Undecided("too many steps")

    # statements
    def stmt(self, n) -> None:
        self.tick()
        t = n.type
        if t in ("compound_statement", "else_clause"):
            for c in n.named_children:
                self.stmt(c)
        elif t in ("comment", "preproc_call", "empty_statement", "type_definition"):
            pass
        elif t == "declaration":
            kind = self.decl_kind(n)
            for d in n.named_children:
                if d.type == "init_declarator":
                    self.declare(d, kind)
                elif d.type == "identifier":
                    self.kinds[d.text.decode()] = kind
        elif t == "expression_statement":
            for c in n.named_children:
                self.expr(c)
        elif t == "if_statement":
            cond = n.child_by_field_name("condition")
            value = cond.child_by_field_name("value") if cond is not None else None
            if value is None:
                raise _Undecided("if")
            if self.truth(self.expr(value)):
                self.stmt(n.child_by_field_name("consequence"))
            elif n.child_by_field_name("alternative") is not None:
                self.stmt(n.child_by_field_name("alternative"))
        elif t == "for_statement":
            init = n.child_by_field_name("initializer")
            if init is not None:
                self.stmt(init) if init.type == "declaration" else self.expr(init)
            self.loop(n.child_by_field_name("condition"), n.child_by_field_name("update"), n.child_by_field_name("body"))
        elif t == "while_statement":
            cond = n.child_by_field_name("condition")
            value = cond.child_by_field_name("value") if cond is not None else None
            self.loop(value, None, n.child_by_field_name("body"))
        elif t == "return_statement":
            vals = [c for c in n.named_children if c.type != "comment"]
            if not vals:
                raise _Undecided("return without a value")
            raise _Returned(self.expr(vals[0]))
        elif t == "break_statement":
            raise _Break()
        elif t == "continue_statement":
            raise _Continue()
        else:
            raise _Undecided(t)

    def loop(self, cond, update, body) -> None:
        for _ in range(256):
            if cond is not None and not self.truth(self.expr(cond)):
                return
            try:
                self.stmt(body)
            except _Break:
                return
            except _Continue:
                pass
            if update is not None:
                self.expr(update)
        raise _Undecided("a loop of more than 256 steps")

    def decl_kind(self, n) -> str:
        ty = n.child_by_field_name("type")
        head = self.words(ty) if ty is not None else ""
        if re.search(r"\bdouble\b", head):
            return "d"
        if re.search(r"\bfloat\b", head):
            return "f"
        if _INT_TYPES.search(head):
            return "i"
        raise _Undecided("a declaration of a type the interpreter does not know")

    def declare(self, d, kind: str) -> None:
        decl, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
        if decl is not None and decl.type == "array_declarator":
            name = decl.child_by_field_name("declarator")
            if value is None or value.type != "initializer_list" or name is None:
                raise _Undecided("an array")
            self.local_arrays[name.text.decode()] = (kind, [_convert(self.expr(v), kind)[0]
                                                            for v in value.named_children])
            return
        if decl is None or decl.type != "identifier":
            raise _Undecided("a declarator")
        name = decl.text.decode()
        self.kinds[name] = kind
        if value is not None:
            self.env[name] = _convert(self.expr(value), kind)

    # expressions
    def truth(self, v) -> bool:
        return v[0] != 0  # NaN too, as in C

    def expr(self, n):
        self.tick()
        key = self.text(n)
        if key in self.env:
            return self.env[key]
        t = n.type
        if t == "number_literal":
            v = _literal(n.text.decode())
            if v is None:
                raise _Undecided("a number")
            return v
        if t in ("true", "false"):
            return (int(t == "true"), "i")
        if t == "parenthesized_expression":
            inner = [c for c in n.named_children if c.type != "comment"]
            return self.expr(inner[-1])
        if t == "identifier":
            raise _Undecided(f"the value of {key}")
        if t == "subscript_expression":
            arr = self.text(n.child_by_field_name("argument"))
            idx_node = n.child_by_field_name("indices") or n.child_by_field_name("index")
            idx = [c for c in idx_node.named_children] if idx_node is not None and idx_node.type == \
                "subscript_argument_list" else [idx_node]
            kind, vals = self.local_arrays.get(arr) or self.arrays.get(arr) or (None, None)
            if vals is None or len(idx) != 1:
                raise _Undecided(f"the value of {key}")
            i = _convert(self.expr(idx[0]), "i")[0]
            if not 0 <= i < len(vals):
                raise _Undecided("an index out of the array")
            return vals[i], kind
        if t == "cast_expression":
            ty = self.words(n.child_by_field_name("type"))
            v = self.expr(n.child_by_field_name("value"))
            return self.cast(ty, v)
        if t == "unary_expression":
            op = n.child_by_field_name("operator").text.decode()
            v = self.expr(n.child_by_field_name("argument"))
            if op == "-":
                return (-v[0], v[1])
            if op == "+":
                return v
            if op == "!":
                return (int(not self.truth(v)), "i")
            if op == "~" and v[1] == "i":
                return (~v[0], "i")
            raise _Undecided(op)
        if t == "conditional_expression":
            c = self.expr(n.child_by_field_name("condition"))
            return self.expr(n.child_by_field_name("consequence" if self.truth(c) else "alternative"))
        if t == "binary_expression":
            return self.binary(n)
        if t == "assignment_expression":
            return self.assign(n)
        if t == "update_expression":
            arg = n.child_by_field_name("argument")
            name = self.text(arg)
            if name not in self.env:
                raise _Undecided("an update")
            op = n.child_by_field_name("operator").text.decode()
            old = self.env[name]
            self.env[name] = _convert((old[0] + (1 if op == "++" else -1), old[1]), self.kinds.get(name, old[1]))
            return self.env[name] if n.children[0].type in ("++", "--") else old
        if t == "call_expression":
            return self.call(n)
        if t == "comma_expression":
            self.expr(n.child_by_field_name("left"))
            return self.expr(n.child_by_field_name("right"))
        raise _Undecided(t)

    def cast(self, ty: str, v):
        ty = " ".join(re.sub(r"\bconst\b", "", ty).split())
        if ty == "float":
            return _convert(v, "f")
        if ty == "double":
            return _convert(v, "d")
        if _INT_TYPES.search(ty):
            x = _convert(v, "i")[0]
            bits = 8 if re.search(r"char|int8", ty) else 16 if re.search(r"short|int16", ty) else 32 \
                if not re.search(r"long|64|size_t", ty) else 64
            x &= (1 << bits) - 1
            if not re.search(r"unsigned|uint|uchar|size_t|bool", ty) and x >= 1 << (bits - 1):
                x -= 1 << bits
            return (int(x != 0) if "bool" in ty else x), "i"
        raise _Undecided(f"a cast to {ty}")

    def call(self, n):
        f = self.text(n.child_by_field_name("function"))
        args = [c for c in n.child_by_field_name("arguments").named_children if c.type != "comment"]
        kind = _FLOAT_CALLS.get(f)
        if f.startswith("static_cast<") and f.endswith(">") and len(args) == 1:
            ty = self.words(n.child_by_field_name("function"))
            return self.cast(ty[ty.index("<") + 1:ty.rindex(">")], self.expr(args[0]))
        if kind is None:
            raise _Undecided(f"a call of {f}")
        vals = [self.expr(a) for a in args]
        if kind == "abs" and len(vals) == 1:
            return (abs(vals[0][0]), vals[0][1])
        if kind in ("min", "max") and len(vals) == 2:
            (a, ka), (b, kb) = vals
            k = "i" if ka == kb == "i" else "d" if "d" in (ka, kb) else "f"
            if a != a:
                return _convert((b, kb), k)
            if b != b:
                return _convert((a, ka), k)
            return _convert((min(a, b) if kind == "min" else max(a, b), ka if (a <= b) == (kind == "min") else kb), k)
        raise _Undecided(f"a call of {f}")

    def binary(self, n):
        op = n.child_by_field_name("operator").text.decode()
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if op == "&&":
            return (int(self.truth(self.expr(left)) and self.truth(self.expr(right))), "i")
        if op == "||":
            return (int(self.truth(self.expr(left)) or self.truth(self.expr(right))), "i")
        return _arith(op, self.expr(left), self.expr(right))

    def assign(self, n):
        left = n.child_by_field_name("left")
        name = self.text(left)
        op = n.child_by_field_name("operator").text.decode()
        if left.type == "parenthesized_expression":
            name = self.text(left)  # the input written as itself (`(x) = fabsf((x))` in a helper inlined)
        if left.type not in ("identifier", "parenthesized_expression") or \
                (left.type == "parenthesized_expression" and name != self.source and name not in self.env):
            raise _Undecided("an assignment to memory")
        value = self.expr(n.child_by_field_name("right"))
        if op != "=":
            if name not in self.env:
                raise _Undecided("a compound assignment of no value")
            value = _arith(op[:-1], self.env[name], value)
        kind = self.kinds.get(name) or value[1]
        self.env[name] = _convert(value, kind)
        return self.env[name]


def _arith(op: str, a: tuple, b: tuple) -> tuple:
    (x, ka), (y, kb) = a, b
    if op in (">", "<", ">=", "<=", "==", "!="):
        return (int({">": x > y, "<": x < y, ">=": x >= y, "<=": x <= y, "==": x == y, "!=": x != y}[op]), "i")
    if ka == kb == "i":
        if op in ("/", "%") and y == 0:
            raise _Undecided("an integer division by zero")
        r = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y,
             "/": lambda: abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1),
             "%": lambda: x - (abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)) * y,
             "<<": lambda: x << y, ">>": lambda: x >> y, "&": lambda: x & y, "|": lambda: x | y,
             "^": lambda: x ^ y}.get(op)
        if r is None:
            raise _Undecided(op)
        return r(), "i"
    if op not in ("+", "-", "*", "/"):
        raise _Undecided(op)
    k = "d" if "d" in (ka, kb) else "f"
    x, y = float(x), float(y)
    if op == "/" and y == 0:
        r = math.nan if x == 0 or x != x else math.copysign(math.inf, x) * math.copysign(1.0, y)
    else:
        r = {"+": x + y if not (x == -y and math.isinf(x)) else math.nan, "-": x - y if not (x == y and math.isinf(x))
             else math.nan, "*": x * y if not ((math.isinf(x) and y == 0) or (math.isinf(y) and x == 0)) else math.nan,
             "/": x / y if not (math.isinf(x) and math.isinf(y)) else math.nan}[op]
    return (f32(r) if k == "f" else r), k


@dataclass
class Decision:
    """A helper that maps one float value to a small integer code, read as a step function: ``thresholds`` in
    ascending order, each (float32 value, True where the value passes it at ``>=``, False at ``>``), the code of
    each of the len(thresholds) + 1 intervals (``codes[0]``: below every threshold), the code of NaN (which passes no
    comparison); ``source``: the expression the helper was called with (whitespace-free), ``block``: its text."""
    source: str
    thresholds: list[tuple[float, bool]]
    codes: list[int]
    nan_code: int
    block: str
    literals: dict[float, str] = field(default_factory=dict)  # float32 value -> a float literal of the helper that is it

    def code(self, v: float) -> int:
        if v != v:
            return self.nan_code
        return self.codes[sum(1 for t, ge in self.thresholds if (v >= t if ge else v > t))]


def _input_of(src: bytes, block) -> str | None:
    """The expression a helper inlined into ``block`` was called with: the parenthesized expression (callees.py writes
    each parameter as the call's argument in parentheses) of the block that names something the block does not
    declare, the most frequent one, the first among those (the outer of two nested ones); None where there is none."""
    declared = {x.text.decode() for x in _walk(block) if x.type == "identifier" and x.parent is not None
                and x.parent.type in ("init_declarator", "array_declarator", "declaration")}
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for x in _walk(block):
        if x.type != "parenthesized_expression" or x.parent is None or x.parent.type == "parenthesized_expression":
            continue
        t = re.sub(r"\s+", "", src[x.start_byte:x.end_byte].decode("utf-8", "replace"))
        names = set(re.findall(r"\b[A-Za-z_]\w*\b", t)) - {"float", "double", "int", "unsigned", "char", "const"}
        if names and not names <= declared:
            counts[t] = counts.get(t, 0) + 1
            first.setdefault(t, x.start_byte)
    if not counts:
        return None
    return max(counts, key=lambda t: (counts[t], -first[t]))


def _probe_points(values: set[float]) -> list[float]:
    """float32 points around every value, its negation and the float32 values next to them, with the signed zeros,
    ±1, ±2, the largest floats and the infinities: sorted in the floats' order, no duplicates."""
    keys = set()
    for v in {0.0, 1.0, 2.0, 1e-30, FLT_MAX} | {abs(v) for v in values if v == v and not math.isinf(v)}:
        for s in (1.0, -1.0):
            k = _order(f32(s * v)) if abs(f32(v)) != math.inf else _order(math.copysign(FLT_MAX, s))
            keys.update(range(k - 2, k + 3))
    keys.update({_order(math.inf), _order(-math.inf)})
    keys = sorted(k for k in keys if _order(-math.inf) <= k <= _order(math.inf))
    mids = [(a + b) // 2 for a, b in zip(keys, keys[1:]) if b - a > 2]
    return [_from_order(k) for k in sorted(set(keys) | set(mids))]


def decisions(ev: "Evidence", cf_text: str | None = None) -> list[Decision]:
    """The helpers the kernel calls (the blocks inlined after its own body) that map one float value to a small
    integer code through comparisons with constants, each read as a step function (``Decision``); the thresholds
    verified against the helper at every probe. A block the interpreter does not evaluate, or whose code is no step
    function of at most 15 thresholds, is none."""
    if ev.own_end < 0:
        return []
    from agent_core.source.cuda_parse import parse_tree
    prefix = b"void kt_f() "
    src = prefix + ev.body.encode("utf-8")
    fn = parse_tree(src).root_node.named_children[0]
    body = fn.child_by_field_name("body")
    if body is None:
        return []
    out = []
    for block in body.named_children:
        if block.type != "compound_statement" or block.start_byte - len(prefix) < ev.own_end:
            continue
        if not any(x.type == "return_statement" and x.named_children for x in _walk(block)):
            continue
        if not any(x.type == "binary_expression" and x.child_by_field_name("operator").text.decode() in
                   (">", "<", ">=", "<=") for x in _walk(block)):
            continue
        source = _input_of(src, block)
        try:
            d = _decision(src, block, source, ev.arrays) if source is not None else None
        except (AttributeError, TypeError, IndexError, KeyError, ValueError, OverflowError, RecursionError):
            d = None  # a statement shaped as the interpreter does not expect: no reading
        if d is not None:
            out.append(d)
    return out


def _decision(src: bytes, block, source: str, arrays) -> Decision | None:
    run = _Interpreter(src, source, arrays)
    memo: dict[int, int] = {}

    def code(k: int) -> int:
        if k not in memo:
            v = run.run(block, _from_order(k))
            if v[1] != "i" or not 0 <= v[0] <= 255:
                raise _Undecided("not a small integer code")
            memo[k] = v[0]
        return memo[k]

    consts, texts = set(), {}
    for x in _walk(block):
        if x.type == "number_literal":
            t = x.text.decode()
            v = _literal(t)
            if v is not None and v[1] != "i":
                consts.add(float(v[0]))
                if v[1] == "f":  # written as it is: its text, and its negation's
                    texts.setdefault(v[0], t)
                    texts.setdefault(-v[0], t[1:] if t.startswith("-") else "-" + t)
    used = set(re.findall(r"\b[A-Za-z_]\w*\b", src[block.start_byte:block.end_byte].decode("utf-8", "replace")))
    for name, (kind, vals) in arrays.items():
        if name in used and kind != "i":
            consts.update(float(v) for v in vals)
    try:
        points = [_order(p) for p in _probe_points(consts)]
        # where the code changes: between adjacent floats, or found by bisection between two probes further apart
        changes: list[tuple[int, int]] = []

        def split(a: int, b: int, depth: int = 0) -> None:
            if code(a) == code(b):
                return
            if b - a == 1:
                changes.append((a, b))
                return
            if depth > 80 or len(changes) > 64:
                raise _Undecided("too many changes")
            m = (a + b) // 2
            split(a, m, depth + 1)
            split(m, b, depth + 1)

        for a, b in zip(points, points[1:]):
            split(a, b)
        nan = run.run(block, math.nan)
        if nan[1] != "i":
            return None
    except _Undecided:
        return None
    if any(_from_order(a) == 0.0 and _from_order(b) == 0.0 for a, b in changes) or len(changes) > 15:
        return None  # -0.0 and +0.0 coded apart (no comparison tells them apart), or more than 4 bits of codes
    lits = {f32(c) for c in consts} | {f32(-c) for c in consts}
    thresholds = []
    for a, b in changes:
        fa, fb = _from_order(a), _from_order(b)
        if fb == 0.0:  # -0.0 (and +0.0) pass: x >= 0
            thresholds.append((0.0, True))
        elif fa == 0.0:
            thresholds.append((0.0, False))
        elif fa in lits or fb not in lits:
            thresholds.append((fa, False))
        else:
            thresholds.append((fb, True))
    codes = [code(points[0])] + [code(b) for _, b in changes]
    d = Decision(source, thresholds, codes, nan[0], src[block.start_byte:block.end_byte].decode("utf-8", "replace"),
                 {v: t for v, t in texts.items() if v in {th for th, _ in thresholds}})
    if any(d.code(_from_order(k)) != c for k, c in memo.items()):
        return None  # some probe the step function does not give
    return d
