"""Vectorized access: a thread-strided loop over contiguous elements reads and writes ``VEC``-wide vectors.

``for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = f(x[i]);`` (or a grid-stride loop) becomes a loop
over whole vectors (``kt_pack<T, VEC>``: 4/8/16 bytes, one load or store instruction each), taken only when
every pointer it touches is aligned to the vector at run time, followed by the original scalar loop over what
is left (the tail of sizes that VEC does not divide, or everything when a pointer is misaligned). Each vector
step runs the loop's own body once per element, on the loaded values; ``ITEMS`` vectors (a parameter of the
work-per-thread rewrite, 1 without it) are loaded before any is used, to keep more loads in flight. Where the
body recovers coordinates from the index (``t = i / d; j = i % d``, ``d`` loop-invariant), a vector divides its
first index once and each lane steps the remainder (a division only where a lane wraps into the next row), so
a flat-index kernel no longer pays a 64-bit division per element.

Preconditions: the loop is strided by the block's or grid's threads; every subscript of its index is
``p[i]`` or ``p[off + i]`` on a pointer of a known scalar type with one offset per pointer that the loop does
not change; the body has no barrier, ``break``, ``continue``, ``return`` or atomic, and does not assign the
index, a bound, or a pointer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tree_sitter import Node

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.grid import grid_follows_block, shrink_grid
from agent_core.templating.rewrites.syntax import (KernelFacts, StridedLoop, names_in, pure, strided_loop,
                                                   subscript_parts, walk)

VEC = "VEC"
_FORBIDDEN = {"break_statement": "a break", "continue_statement": "a continue", "return_statement": "a return",
              "goto_statement": "a goto"}


@dataclass
class Access:
    pointer: str
    offset: str  # "" for p[i]
    node: Node  # the subscript expression
    write: bool
    read: bool
    stream: str = ""  # the register array it reads and writes in the vector loop
    guarded: bool = False  # read only under a test of its pointer (``mask ? mask[i] : 0``)


@dataclass
class LoopPlan:
    loop: StridedLoop
    accesses: list[Access]
    # one entry per (pointer, offset) stream: register array name -> (element type, pointer, offset, read, written)
    pointers: dict[str, tuple[str, str, str, bool, bool]]
    sizes: dict[str, int]  # element type -> bytes (KernelFacts.sizes: the scalars, and the kernel's resolved T)
    guarded: set[str] = field(default_factory=set)  # streams read only where their pointer is not null


def plan_loop(v: KernelView, facts: KernelFacts, loop: StridedLoop) -> tuple[LoopPlan | None, str]:
    """Whether ``loop`` can be vectorized, with its accesses; else (None, why not)."""
    body, var = loop.body, loop.var
    for x in walk(body):
        if x.type in _FORBIDDEN:
            return None, f"its body has {_FORBIDDEN[x.type]}"
        if x.type == "call_expression":
            fn = v.t(x.child_by_field_name("function"))
            if fn.startswith("__syncthreads") or fn.startswith("atomic") or fn.startswith("__shfl"):
                return None, f"its body calls {fn}"
    accesses: list[Access] = []
    local = _body_locals(v, body)
    aliases = index_aliases(v, facts, body, var, local)
    for x in walk(body):
        if x.type != "subscript_expression":
            continue
        arr, idx = subscript_parts(x)
        if arr is None or idx is None:
            return None, f"cannot read the subscript `{v.t(x)}`"
        bare = _unparen(idx)
        if bare.type == "identifier" and v.t(bare) in aliases:
            idx = aliases[v.t(bare)]  # `i` declared in the body as `(size_t)row * cols + col`: its initializer
        if var not in names_in(v, idx):
            continue
        if arr.type != "identifier" or v.t(arr) not in facts.pointers:
            return None, f"`{v.t(x)}` indexes something that is not a pointer of the kernel"
        off_node = offset_node(v, idx, var)
        if off_node is None:
            if _role(v, x)[0] or _assigned_through(v, body, v.t(arr)):
                return None, f"`{v.t(x)}` is written at elements that are not contiguous (index not `{var}` or " \
                             f"`offset + {var}`)"
            continue  # a gather from a pointer the loop only reads (bias[i % cols]): stays a scalar load
        off = ""
        if off_node is not idx:
            off = hoisted(v, body, off_node, var, local) if pure(v, idx) else None
            if off is None:
                return None, f"the offset of `{v.t(x)}` changes inside the loop"
        write, read = _role(v, x)
        guard, why = _read_condition(v, body, x, var, set(aliases), v.t(arr))
        if why:
            return None, why
        node, why = _element_use(v, x)
        if node is None:
            return None, why
        accesses.append(Access(v.t(arr), off, node, write, read, guarded=guard))
    if not accesses:
        return None, "its body reads no element through its index"
    streams: dict[tuple[str, str], list] = {}  # (pointer, offset) -> [element type, read, written]
    for a in accesses:
        et = facts.pointers[a.pointer]
        if et not in facts.sizes:
            return None, f"the element type `{et}` of {a.pointer} is not a scalar kerntune can pack"
        if _assigned(v, body, a.pointer):
            return None, f"the loop body changes the pointer {a.pointer}"
        st = streams.setdefault((a.pointer, a.offset), [et, False, False])
        st[1] |= a.read
        st[2] |= a.write
    for (name, off), st in streams.items():
        writes = [a for a in accesses if a.pointer == name and a.offset == off and a.write]
        if st[2] and len({o for (n, o) in streams if n == name}) > 1:
            return None, f"{name} is written at the index and accessed at another offset too"
        if st[2] and _conditional_write(v, body, writes):
            st[1] = True  # written on some paths only: loaded first, stored whole
    for x in walk(body):  # a written pointer read elsewhere than at the index would see stale values
        if x.type == "subscript_expression":
            arr = x.child_by_field_name("argument")
            if arr is not None and any(n == v.t(arr) and st[2] for (n, _o), st in streams.items()) \
                    and all(x != a.node for a in accesses):
                return None, f"{v.t(arr)} is written at the index and accessed at `{v.t(x)}` too"
    names: dict[tuple[str, str], str] = {}
    for (name, off) in streams:
        same = [k for k in streams if k[0] == name]
        names[(name, off)] = f"kt_{name}" if len(same) == 1 else f"kt_{name}_{same.index((name, off))}"
    pointers = {names[k]: (st[0], k[0], k[1], st[1], st[2]) for k, st in streams.items()}
    for a in accesses:
        a.stream = names[(a.pointer, a.offset)]
    guarded = set()
    for k, sname in names.items():
        on = [a for a in accesses if (a.pointer, a.offset) == k]
        if any(a.guarded for a in on):
            if any(a.write for a in on) or not all(a.guarded for a in on):
                return None, f"{k[0]} is tested for null around some of its reads only"
            guarded.add(sname)
    return LoopPlan(loop, accesses, pointers, facts.sizes, guarded), ""


_CONDITIONALS = {"if_statement": "condition", "conditional_expression": "condition", "while_statement": "condition"}


def _outside_subscripts(v: KernelView, n: Node) -> set[str]:
    """The identifiers of ``n`` outside subscripts (``i < m`` names i and m; ``x[i] > 0`` names nothing: the
    element's value, not its index or its pointer)."""
    out, stack = set(), [n]
    while stack:
        x = stack.pop()
        if x.type == "identifier":
            out.add(v.t(x))
        elif x.type != "subscript_expression":
            stack.extend(x.named_children)
    return out


def _read_condition(v: KernelView, body: Node, sub: Node, var: str, aliases: set[str],
                    pointer: str) -> tuple[bool, str]:
    """(guarded, why not) for an element access under conditions of the loop body. A vector load reads every lane
    whatever the condition, so a read that a condition on its index bounds (``i < m ? y[i] : 0``) cannot be
    vectorized; one that a test of its pointer guards (``mask ? mask[i] : 0``, ``if (bias != nullptr)``) is
    loaded only where the pointer is not null (guarded)."""
    guarded = False
    child, p = sub, sub.parent
    while p is not None and p != body.parent:
        cond = None
        if p.type in _CONDITIONALS:
            c = p.child_by_field_name(_CONDITIONALS[p.type])
            cond = c if c is not None and not (c.start_byte <= child.start_byte < c.end_byte) else None
        elif p.type == "binary_expression" and v.t(p.child_by_field_name("operator")) in ("&&", "||"):
            left = p.child_by_field_name("left")
            cond = left if left is not None and left != child else None
        if cond is not None:
            named = _outside_subscripts(v, cond)
            if var in named or named & aliases:
                return False, f"`{v.t(sub)}` is read under a condition on the index (`{v.t(cond)}`)"
            if pointer in named:
                guarded = True
        child, p = p, p.parent
    return guarded, ""


def _unparen(n: Node) -> Node:
    while n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _body_locals(v: KernelView, body: Node) -> dict[str, list[Node | None]]:
    """Each name declared in ``body`` -> the initializers of its declarations (None: declared without one)."""
    out: dict[str, list[Node | None]] = {}
    for x in walk(body):
        if x.type == "init_declarator":
            d = x.child_by_field_name("declarator")
            if d is not None and d.type == "identifier":
                out.setdefault(v.t(d), []).append(x.child_by_field_name("value"))
        elif x.type == "declaration":
            for c in x.named_children:
                if c.type == "identifier":
                    out.setdefault(v.t(c), []).append(None)
    return out


def index_aliases(v: KernelView, facts: KernelFacts, body: Node, var: str,
                  local: dict[str, list[Node | None]]) -> dict[str, Node]:
    """Locals of the loop body that name an element's index: declared once, never assigned, from an integer
    expression of the loop's index (``const size_t i = (size_t)row * cols + col;``) -> that expression. A subscript
    by such a local is read as a subscript by its expression, so the 2-D-grid and row-offset styles vectorize."""
    out = {}
    for name, inits in local.items():
        if len(inits) != 1 or inits[0] is None or facts.assigned.get(name) or _assigned(v, body, name):
            continue
        init = inits[0]
        if var in names_in(v, init) and pure(v, init) and \
                sum(1 for x in walk(v.body) if x.type == "init_declarator" and
                    v.t(x.child_by_field_name("declarator") or x) == name) == 1:
            out[name] = init
    return out


def hoisted(v: KernelView, body: Node, node: Node, var: str, local: dict[str, list[Node | None]],
            depth: int = 0) -> str | None:
    """The text of a loop-invariant offset as it can be written before the loop: the body's own invariant locals
    (``const size_t base = (size_t)row * ld;`` declared in the loop) replaced by their initializers; None where it
    depends on the index or on anything the body assigns. ``local``: the body's locals (``_body_locals``)."""
    if depth > 4:
        return None
    edits = []
    for x in walk(node):
        if x.type != "identifier":
            continue
        nm = v.t(x)
        if nm == var or _assigned(v, body, nm):
            return None
        if nm in local:
            inits = local[nm]
            if len(inits) != 1 or inits[0] is None or not pure(v, inits[0]):
                return None
            sub = hoisted(v, body, inits[0], var, local, depth + 1)
            if sub is None:
                return None
            edits.append((x.start_byte - node.start_byte, x.end_byte - node.start_byte, f"({sub})"))
    return apply_edits(v.t(node), edits)


def _assigned_through(v: KernelView, body: Node, name: str) -> bool:
    """Some element of pointer ``name`` is written in ``body``."""
    for x in walk(body):
        if x.type == "subscript_expression" and v.t(x.child_by_field_name("argument")) == name and _role(v, x)[0]:
            return True
    return False


def _offset(v: KernelView, idx: Node, var: str) -> str | None:
    """The text of ``off`` where the index is ``off + var`` (either order), "" for ``var`` alone, else None."""
    got = offset_node(v, idx, var)
    return None if got is None else "" if got is idx else v.t(got)


def offset_node(v: KernelView, idx: Node, var: str) -> Node | None:
    """``off``'s node where the index is ``off + var`` (either order); ``idx`` itself for ``var`` alone; else None."""
    inner = _unparen(idx)
    if inner.type == "identifier" and v.t(inner) == var:
        return idx
    if inner.type == "binary_expression" and v.t(inner.child_by_field_name("operator")) == "+":
        lt, rt = inner.child_by_field_name("left"), inner.child_by_field_name("right")
        for a, b in ((lt, rt), (rt, lt)):
            if a.type == "identifier" and v.t(a) == var and var not in names_in(v, b):
                return b
    return None


_LOAD_INTRINSICS = {"__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv"}


def _element_use(v: KernelView, sub: Node) -> tuple[Node | None, str]:
    """The expression that stands for the element ``p[i]`` and becomes its register: the subscript itself, or the
    read-only load around its address (``__ldg(&p[i])``); (None, why) where the address is taken otherwise (a
    register element has no global address)."""
    p = sub.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    if p is None or p.type != "pointer_expression" or p.children[0].type != "&":
        return sub, ""
    args = p.parent
    while args is not None and args.type == "parenthesized_expression":
        args = args.parent
    call = args.parent if args is not None and args.type == "argument_list" else None
    if call is not None and call.type == "call_expression" and len(args.named_children) == 1 and \
            v.t(call.child_by_field_name("function")) in _LOAD_INTRINSICS:
        return call, ""
    return None, f"the address of `{v.t(sub)}` is taken"


def _role(v: KernelView, sub: Node) -> tuple[bool, bool]:
    """(written, read) for a subscript expression."""
    p = sub.parent
    while p is not None and p.type == "parenthesized_expression":
        sub, p = p, p.parent
    if p is not None and p.type == "assignment_expression" and p.child_by_field_name("left") == sub:
        return True, v.t(p.child_by_field_name("operator")) != "="
    if p is not None and p.type == "update_expression":
        return True, True
    return False, True


def _assigned(v: KernelView, n: Node, name: str) -> bool:
    for x in walk(n):
        t = x.child_by_field_name("left") if x.type == "assignment_expression" else \
            x.child_by_field_name("argument") if x.type == "update_expression" else None
        if t is not None and v.t(t) == name:
            return True
    return False


def _conditional_write(v: KernelView, body: Node, writes: list[Access]) -> bool:
    """Some write happens under a condition or inner loop of the body (not on every path)."""
    for a in writes:
        p = a.node.parent
        while p is not None and p != body:
            if p.type in ("if_statement", "conditional_expression", "for_statement", "while_statement",
                          "do_statement", "switch_statement", "binary_expression") and \
                    (p.type != "binary_expression" or v.t(p.child_by_field_name("operator")) in ("&&", "||")):
                return True
            p = p.parent
    return False


def vectorizable_loops(v: KernelView, facts: KernelFacts) -> tuple[list[LoopPlan], list[str]]:
    """The strided loops of the kernel that can be vectorized (outermost first), and why the others cannot."""
    plans, why = [], []
    for n in walk(v.body):
        if n.type != "for_statement":
            continue
        if any(p.loop.node.start_byte <= n.start_byte < p.loop.node.end_byte for p in plans):
            continue
        loop, reason = strided_loop(v, facts, n, groups=True)
        line = n.start_point.row + 1
        if loop is None:
            why.append(f"loop at line {line}: {reason}")
            continue
        plan, reason = plan_loop(v, facts, loop)
        if plan is None:
            why.append(f"loop at line {line}: {reason}")
        else:
            plans.append(plan)
    return plans, why


def max_elem_bytes(plans: list[LoopPlan]) -> int:
    return max(p.sizes[et] for p in plans for et, *_ in p.pointers.values())


def _unroll_pragma(v: KernelView, loop: Node) -> Node | None:
    """The ``#pragma unroll`` directly above ``loop``, if any."""
    prev = loop.prev_sibling
    if prev is not None and prev.type == "preproc_call" and v.t(prev).split()[:2] in (["#pragma", "unroll"],):
        return prev
    return None


def vector_loop_text(v: KernelView, plan: LoopPlan, items: str, note: str, pragma: str | None = None) -> str:
    """The loop ``plan`` vectorized: aligned whole vectors (ITEMS at a time), then the scalar loop for the rest.
    The user's ``#pragma unroll`` above the loop goes above both loops."""
    L = plan.loop
    ind = v.indent_of(L.node)
    i1, i2, i3, i4, i5, i6 = (ind + "  " * k for k in range(1, 7))
    vec = macro_name(VEC)
    start, bound, step = v.t(L.start), v.t(L.bound), v.t(L.step)
    index, first = L.index or start, L.first  # the vector loop starts at the thread's index past `first`
    ptrs = plan.pointers

    def base(s: str) -> str:
        _et, p, off, _r, _w = ptrs[s]
        if first:
            return f"({p} + ({off}) + ({first}))" if off else f"({p} + ({first}))"
        return p if not off else f"({p} + ({off}))"

    aligned = " && ".join(f"({ptrs[sname][1]} == nullptr || kt_aligned<{vec}>({base(sname)}))"
                          if sname in plan.guarded else f"kt_aligned<{vec}>({base(sname)})" for sname in ptrs)
    body_edits = []
    for a in plan.accesses:
        body_edits.append((a.node.start_byte - L.body.start_byte, a.node.end_byte - L.body.start_byte,
                           f"{a.stream}[kt_u].v[kt_j]"))
    divisors = lane_divisions(v, plan)
    for k, (d, nodes) in enumerate(divisors.items()):
        for node, op in nodes:
            q = f"kt_q{k}" if op == "/" else f"kt_r{k}"
            body_edits.append((node.start_byte - L.body.start_byte, node.end_byte - L.body.start_byte,
                               f"((decltype({L.var} {op} ({d})))({q}))"))
    body_text = apply_edits(v.t(L.body), body_edits)
    body_text = _reindent(body_text, i6, ind)
    if first:  # the elements from `first` on: none where the bound is below it
        whole = [f"{i2}const long long kt_span = (long long)({bound}) - (long long)({first});",
                 f"{i2}const long long kt_nv = kt_span > 0 ? kt_span / {vec} : 0;  // whole vectors past {first}"]
    else:
        whole = [f"{i2}const long long kt_nv = (long long)({bound}) / {vec};  // whole vectors"]
    lines = [f"{ind}{{  // kerntune vectorize: {note}",
             f"{i1}long long kt_done = 0;  // elements the vector loop covered",
             f"{i1}if ({vec} > 1 && {aligned}) {{",
             *whole,
             *([pragma] if pragma else []),
             f"{i2}for (long long kt_k = {index}; kt_k < kt_nv; kt_k += (long long)({step}) * {items}) {{"]
    for sname, (et, *_rest) in ptrs.items():
        lines.append(f"{i3}kt_pack<{et}, {vec}> {sname}[{items}];")
    loads = [sname for sname, (_e, _p, _o, r, _w) in ptrs.items() if r]
    if loads:
        lines += ["#pragma unroll", f"{i3}for (int kt_u = 0; kt_u < {items}; ++kt_u) {{",
                  f"{i4}const long long kt_kk = kt_k + (long long)kt_u * ({step});",
                  f"{i4}if (kt_kk < kt_nv) {{"]
        lines += [(f"{i5}if ({ptrs[sname][1]} != nullptr) " if sname in plan.guarded else i5) +
                  f"{sname}[kt_u] = kt_load<{vec}>({base(sname)}, kt_kk);" for sname in loads]
        lines += [f"{i4}}}", f"{i3}}}"]
    lines += ["#pragma unroll", f"{i3}for (int kt_u = 0; kt_u < {items}; ++kt_u) {{",
              f"{i4}const long long kt_kk = kt_k + (long long)kt_u * ({step});",
              f"{i4}if (kt_kk < kt_nv) {{"]
    if divisors:  # the vector's first index divided once; its lanes step the remainder (division on a wrap only)
        lines.append(f"{i5}const long long kt_b = " + (f"(long long)({first}) + " if first else "") + f"kt_kk * {vec};")
        for k, d in enumerate(divisors):
            lines += [f"{i5}const bool kt_step{k} = kt_b >= 0 && ({d}) > 0;  // else each lane divides as written",
                      f"{i5}const long long kt_q{k}b = kt_step{k} ? kt_b / ({d}) : 0, "
                      f"kt_r{k}b = kt_step{k} ? kt_b % ({d}) : 0;"]
    lines += ["#pragma unroll",
              f"{i5}for (int kt_j = 0; kt_j < {vec}; ++kt_j) {{",
              f"{i6}const {L.var_type} {L.var} = ({L.var_type})(" + (f"(long long)({first}) + " if first else "")
              + f"kt_kk * {vec} + kt_j);",
              f"{i6}(void){L.var};"]
    for k, d in enumerate(divisors):
        lines += [f"{i6}long long kt_q{k} = kt_q{k}b, kt_r{k} = kt_r{k}b + kt_j;",
                  f"{i6}if (!kt_step{k}) {{ kt_q{k} = (long long)({L.var} / ({d})); "
                  f"kt_r{k} = (long long)({L.var} % ({d})); }}",
                  f"{i6}else if (kt_r{k} >= ({d})) {{ kt_q{k} += kt_r{k} / ({d}); kt_r{k} %= ({d}); }}"]
    lines += [f"{i6}{body_text}",
              f"{i5}}}"]
    lines += [f"{i5}kt_store<{vec}>({base(sname)}, kt_kk, {sname}[kt_u]);"
              for sname, (_e, _p, _o, _r, w) in ptrs.items() if w]
    lines += [f"{i4}}}", f"{i3}}}", f"{i2}}}", f"{i2}kt_done = kt_nv * {vec};", f"{i1}}}",
              f"{i1}// the scalar loop: the tail VEC does not divide, or everything when a pointer is misaligned",
              *([pragma] if pragma else []),
              f"{i1}for ({L.var_type} {L.var} = ({L.var_type})(kt_done + ({start})); {L.var} < {bound}; "
              f"{L.var} += {step}) {_reindent(v.t(L.body), i1, ind)}",
              f"{ind}}}"]
    return "\n".join(lines).lstrip()


def lane_divisions(v: KernelView, plan: LoopPlan) -> dict[str, list[tuple[Node, str]]]:
    """The index divided and taken modulo by loop-invariant divisors in the loop's body (``t = i / d; j = i % d``:
    a flat index recovering its row and column), per divisor text: [(the ``i / d`` or ``i % d`` node, op)]. In
    the vector loop the VEC lanes of a vector have consecutive indices, so one division per vector and a
    remainder stepped per lane give the same values without a 64-bit division per element."""
    L = plan.loop
    out: dict[str, list[tuple[Node, str]]] = {}
    spans = [(a.node.start_byte, a.node.end_byte) for a in plan.accesses]
    declared = {v.t(d) for x in walk(L.body) if x.type in ("init_declarator", "declaration")
                for d in [x.child_by_field_name("declarator")] if d is not None and d.type == "identifier"}
    for x in walk(L.body):
        if x.type != "binary_expression":
            continue
        op = v.t(x.child_by_field_name("operator"))
        left, right = x.child_by_field_name("left"), x.child_by_field_name("right")
        if op not in ("/", "%") or left is None or right is None:
            continue
        left = _unparen(left)
        if left.type != "identifier" or v.t(left) != L.var:
            continue
        names = names_in(v, right)
        if L.var in names or names & declared or not pure(v, right) or any(_assigned(v, L.body, n) for n in names):
            continue
        if any(s < x.end_byte and x.start_byte < e for s, e in spans):
            continue
        out.setdefault(" ".join(v.t(right).split()), []).append((x, op))
    return out


def _reindent(text: str, new: str, old: str) -> str:
    """A statement's continuation lines moved from indent ``old`` to ``new``."""
    lines = text.split("\n")
    out = [lines[0]]
    for ln in lines[1:]:
        out.append(new + ln[len(old):] if ln.startswith(old) else ln)
    return "\n".join(out)


def vec_param(ctx: RewriteContext) -> Param:
    """The vector width over every vectorizable loop of the kernel: at most 16 bytes of the widest element."""
    v = ctx.view()
    plans, _ = vectorizable_loops(v, KernelFacts(v, ctx.block, ctx.launch))
    widest = max_elem_bytes(plans)
    values = [w for w in (1, 2, 4, 8, 16) if w * widest <= 16]
    return Param(VEC, values, 1, "vector_width",
                 f"elements per vector load/store in the strided loops (at most 16 bytes of the widest element, "
                 f"{widest} bytes); 1 keeps the scalar loop", closed=True)


class Vectorize(Rewrite):
    name = "vectorize"
    summary = "thread-strided loops over contiguous elements read and write VEC-wide vectors (aligned), scalar tail"

    def _plans(self, ctx: RewriteContext):
        v = ctx.view()
        facts = KernelFacts(v, ctx.block, ctx.launch)
        plans, why = vectorizable_loops(v, facts)
        return v, plans, why

    def why_not(self, ctx: RewriteContext) -> str | None:
        _, plans, why = self._plans(ctx)
        if plans:
            return None
        return "no thread-strided loop over contiguous elements" + (f" ({'; '.join(why)})" if why else "")

    def params(self, ctx: RewriteContext) -> list[Param]:
        if VEC in ctx.params:
            return []  # fuse_passes declared it (it runs first and shares the vector width)
        return [vec_param(ctx)]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v, plans, _ = self._plans(ctx)
        ctx = self._add_space(ctx)
        items = macro_name("ITEMS") if "ITEMS" in ctx.params else "1"
        edits = []
        for p in plans:
            pragma = _unroll_pragma(v, p.loop.node)
            start = pragma.start_byte if pragma is not None else p.loop.node.start_byte
            names = ", ".join(f"{pn}{'[' + off + ' + ' + p.loop.var + ']' if off else ''} ({'read+write' if r and w else 'write' if w else 'read'})"
                              for _s, (_e, pn, off, r, w) in p.pointers.items())
            note = f"{names} in VEC-wide vectors when aligned"
            edits.append((start, p.loop.node.end_byte,
                          vector_loop_text(v, p, items, note, v.t(pragma).strip() if pragma is not None else None)))
        lines = ", ".join(str(p.loop.node.start_point.row + 1) for p in plans)
        ctx = ctx.with_text(apply_edits(ctx.text, edits),
                            f"vectorize: the strided loop(s) at line(s) {lines} of the structural template read "
                            "and write VEC-wide vectors when every pointer is aligned, with a scalar tail",
                            {"pack"})
        if any(p.loop.kind == "grid" for p in plans) and grid_follows_block(ctx) is None:
            ctx = shrink_grid(ctx, VEC)  # each thread of the grid-stride loop covers VEC elements per step
            ctx.notes[-1] += "; the grid is divided by VEC"
        return ctx
