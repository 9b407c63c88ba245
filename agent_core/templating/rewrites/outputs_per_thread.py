"""Outputs per thread: a thread that computes one output by walking a loop over other elements (a column sum:
one thread per column, walking down the rows) computes ``OUTS`` neighbouring outputs instead, and every load of
the walk becomes one vector across them.

Such a thread's loads are not contiguous per thread (each row is a stride of ``cols`` away), so ``vectorize`` has
nothing to pack: the contiguous direction runs across the threads of a warp. Giving each thread ``OUTS``
neighbouring outputs (``i, i + 1, ...``) turns each of its loads ``p[off + i]`` into one ``OUTS``-wide vector load
(``kt_gather``: one 8- or 16-byte load when all lanes exist and the address is aligned, else lane by lane with
the lanes past the end left out), so each thread keeps ``OUTS`` times the bytes in flight with the same number
of instructions, and the grid divides by ``OUTS``. Where the offsets allow it, the thread makes that choice once,
before its walk (``kt_outs_vec``, see ``_decide_once``), and ``finish`` unswitches the walk on it: a loop that
decided at every load kept fewer loads in flight than the kernel's own. The values that follow from those loads become ``kt_lanes<T,
OUTS>`` (a register array with element-wise ``+ - * /``); calls and casts on them run lane by lane
(``kt_apply``), and each store ``q[off + i] = v`` writes the lanes that exist (``kt_scatter``). The arithmetic of
each lane is the original's, in the original order: the outputs are bit for bit those of the kernel.

Applies where the kernel is one output per thread (``i = blockIdx.x * blockDim.x + threadIdx.x``, never assigned,
with ``if (i < n) {...}`` as its last statement or ``if (i >= n) return;``); the index is used only as the last
term of subscripts of the kernel's pointers (``p[i]``, ``p[off + i]``), so neighbouring outputs read and write
neighbouring elements; at least one such read is in a loop with an offset (a walk over other elements; a kernel
without one is elementwise, which ``work_per_thread`` and ``vectorize`` cover); no value that follows from a load
decides a branch, a comparison, an index or an address, or is stored elsewhere than at the thread's outputs; a
store is a whole statement ``q[off + i] = v``, not a read-modify-write; the kernel has no shared memory, barrier,
warp shuffle, atomic, 2D index or grid-stride loop; and the grid follows the block size (``cdiv(n, 256)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from agent_core.model import KerntuneError, Param, macro_name
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.grid import grid_follows_block, shrink_grid
from agent_core.templating.rewrites.syntax import KernelFacts, names_in, subscript_parts, walk
from agent_core.templating.rewrites.vectorize import _offset, _role, offset_node
from agent_core.templating.rewrites.work_per_thread import _guarded_element

OUTS = "OUTS"
LIVE = "kt_outs_live"  # how many of the thread's OUTS outputs exist (the last thread's may be fewer)
VEC = "kt_outs_vec"  # the thread's walk loads vectors only (decided once, before the walk)
_LOOPS = ("for_statement", "while_statement", "do_statement")
_FORBIDDEN_TEXT = ("__shared__", "__syncthreads", "threadIdx.y", "blockIdx.y", "blockDim.y", "threadIdx.z",
                   "blockIdx.z", "gridDim", "__shfl", "atomic", "cooperative_groups", "asm")
_ARITH = {"+", "-", "*", "/"}
_ASSIGN = {"=", "+=", "-=", "*=", "/="}
_OVERLOADED = {"fmaxf", "fminf", "fmax", "fmin", "max", "min"}  # the helpers overload them for lanes


@dataclass
class _Plan:
    var: str  # the thread's output index
    decl: Node  # its declaration
    guard: Node  # the guarding if
    bound: str  # outputs that exist: i < bound
    form: str  # "guard" (if (i < n) {...}) or "return" (if (i >= n) return;)
    region: list[Node]  # the statements the guard covers
    reads: list[Node] = field(default_factory=list)  # subscripts read at the thread's outputs
    stores: list[Node] = field(default_factory=list)  # expression statements `q[off + i] = v;`
    lanes: set[str] = field(default_factory=set)  # locals whose values follow from the reads
    lane_decls: list[Node] = field(default_factory=list)  # their declarations
    elem_bytes: int = 4  # the widest element the thread reads or writes at its outputs
    walk_reads: list[Node] = field(default_factory=list)  # the reads in loops, when decided once (see _decide_once)
    flag_at: Node | None = None  # the statement of the region before which the thread decides
    flag_terms: list[str] = field(default_factory=list)  # what must hold for every load of the walk to be aligned

    @property
    def read_spans(self) -> set[tuple[int, int]]:
        return {(x.start_byte, x.end_byte) for x in self.reads}


def _fail(why: str):
    raise KerntuneError(why)


def _plan(ctx: RewriteContext) -> _Plan:
    if ctx.block is None:
        _fail("the block size is not a parameter")
    if OUTS in ctx.params:
        _fail(f"a parameter {OUTS} exists already")
    why = grid_follows_block(ctx)
    if why:
        _fail(why)
    v = ctx.view()
    body = v.t(v.body)
    for w in _FORBIDDEN_TEXT:
        if w in body:
            _fail(f"the kernel uses {w} (threads would no longer own their outputs alone)")
    facts = KernelFacts(v, ctx.block)
    got, why = _guarded_element(v, facts)
    if got is None:
        _fail(f"not one output per thread: {why}")
    decl, rest, guard, bound, cons, form = got
    var = v.t(next(c for c in decl.named_children if c.type == "init_declarator").child_by_field_name("declarator"))
    stmts = [c for c in v.body.named_children if c.type != "comment"]
    pre = [s for s in stmts if decl.end_byte <= s.start_byte and s.end_byte <= guard.start_byte]
    region = [cons] if form == "guard" else [s for s in stmts if s.start_byte >= guard.end_byte]
    for s in pre:
        if var in names_in(v, s):
            _fail(f"the index {var} is used before its guard")
    plan = _Plan(var, decl, guard, bound, form, region)
    # every use of the index: the last term of a subscript of a pointer
    uses, sizes = 0, []
    for s in region:
        for x in walk(s):
            if x.type == "identifier" and v.t(x) == var:
                uses += 1
            if x.type != "subscript_expression":
                continue
            arr, idx = subscript_parts(x)
            if idx is None or var not in names_in(v, idx):
                continue
            if arr is None or arr.type != "identifier" or v.t(arr) not in facts.pointers:
                _fail(f"`{v.t(x)}` indexes something that is not a pointer of the kernel")
            if _offset(v, idx, var) is None:
                _fail(f"`{v.t(x)}`: the index {var} is not the last term of the subscript (neighbouring outputs "
                      "would not be neighbouring elements)")
            elem = facts.pointers[v.t(arr)]
            if elem not in facts.sizes:
                _fail(f"the element type of {v.t(arr)} ({elem}) has no known size")
            sizes.append(facts.sizes[elem])
            written, read = _role(v, x)
            if written and read:
                _fail(f"`{v.t(x)}` is read and written in one step (a read-modify-write of an output)")
            if written:
                stmt = x.parent
                while stmt is not None and stmt.type == "parenthesized_expression":
                    stmt = stmt.parent
                if stmt is None or stmt.type != "assignment_expression" or stmt.parent is None or \
                        stmt.parent.type != "expression_statement":
                    _fail(f"the store to `{v.t(x)}` is not a statement of its own")
                plan.stores.append(stmt.parent)
            else:
                plan.reads.append(x)
    if uses != len(plan.reads) + len(plan.stores):
        _fail(f"the index {var} is used other than as the last term of a subscript")
    if not plan.reads:
        _fail(f"the thread reads nothing at its output index {var}")
    plan.elem_bytes = max(sizes)
    if not any(_offset(v, subscript_parts(x)[1], var) and _in_loop(x, region) for x in plan.reads):
        _fail("no read of the thread's index walks a loop (an elementwise kernel: work_per_thread and vectorize "
              "cover it)")
    _taint(v, plan)
    _check_uses(v, plan)
    _decide_once(v, plan, facts)
    return plan


def _statements_of(plan: _Plan) -> list[Node]:
    """The region's statements, one level down for the guarding if's block."""
    if plan.form == "guard":
        return [c for c in plan.region[0].named_children if c.type != "comment"]
    return plan.region


def _decide_once(v: KernelView, plan: _Plan, facts: KernelFacts) -> None:
    """Where every read in a loop is ``p[off + i]`` with ``off`` a sum of products in which some factor does not
    change in the thread (a kernel argument or a local of the kernel's top level never assigned, a literal, a
    macro), the thread decides once, before the walk, whether all its loads can be vectors: its OUTS outputs
    exist, each pointer is aligned at its first output and each such offset is a multiple of OUTS. The walk is
    then unswitched on that flag (``finish``), so the loop holds only vector loads (or only lanes) and keeps as many
    in flight as the kernel's own loop did. Leaves the plan alone (each load decides for itself) where an offset
    varies in a way not seen here."""
    walk_reads = [x for x in plan.reads if _in_loop(x, plan.region)]
    stmts = _statements_of(plan)
    at = next((s for s in stmts if any(s.start_byte <= x.start_byte and x.end_byte <= s.end_byte
                                       for x in walk_reads)), None)
    if at is None:
        return
    params = {q.name for q in v.k.params}
    tops = {v.body} | ({plan.region[0]} if plan.form == "guard" else set())
    fixed = {n for n in params if not facts.assigned.get(n)}
    for d in walk(v.body):  # locals of the top level (or the guard's block) declared before the walk, never assigned
        if d.type == "declaration" and d.parent in tops and d.end_byte <= at.start_byte:
            for c in d.named_children:
                n = c.child_by_field_name("declarator") if c.type == "init_declarator" else None
                if n is not None and n.type == "identifier" and not facts.assigned.get(v.t(n)):
                    fixed.add(v.t(n))
    terms: list[str] = []
    pointers: dict[str, int] = {}
    for x in walk_reads:
        arr, idx = subscript_parts(x)
        off = offset_node(v, idx, plan.var)
        if off is not idx:  # p[off + i]; p[i] alone is aligned wherever the thread's first output is
            cond = _multiple(v, off, fixed)
            if cond is None:
                return
            if cond and cond not in terms:
                terms.append(cond)
        pointers[v.t(arr)] = facts.sizes[facts.pointers[v.t(arr)]]
    m = macro_name(OUTS)
    plan.flag_terms = [f"(unsigned long long)({p} + {plan.var}) % ({m} * {b}) == 0" for p, b in pointers.items()] + terms
    plan.walk_reads = walk_reads
    plan.flag_at = at


def _fixed(v: KernelView, n: Node, fixed: set[str]) -> bool:
    """``n`` has one value for the whole thread: literals, macros, fixed names, + - * / % and integer casts."""
    for x in walk(n):
        if x.type == "identifier":
            name = v.t(x)
            if name not in fixed and not (name.isupper() or name.startswith("KT_")):
                return False
        elif x.type == "field_expression":
            if v.t(x).replace(" ", "") not in ("blockIdx.x", "blockDim.x", "gridDim.x"):
                return False
        elif x.type not in ("number_literal", "parenthesized_expression", "binary_expression", "cast_expression",
                            "type_descriptor", "primitive_type", "sized_type_specifier", "type_identifier",
                            "field_identifier"):
            return False
    return True


def _multiple(v: KernelView, n: Node, fixed: set[str]) -> str | None:
    """A condition (C++) under which ``n`` is a multiple of OUTS wherever the walk evaluates it: "" for always, None
    when it cannot be told before the walk."""
    m = macro_name(OUTS)
    while n.type in ("parenthesized_expression", "cast_expression"):
        n = n.named_children[0] if n.type == "parenthesized_expression" else n.child_by_field_name("value")
    if n.type == "number_literal":
        return "" if v.t(n).rstrip("uUlL").isdigit() and int(v.t(n).rstrip("uUlL")) == 0 else \
            f"{v.t(n)} % {m} == 0"
    if _fixed(v, n, fixed):
        return f"(long long)({v.t(n)}) % {m} == 0"
    if n.type != "binary_expression":
        return None
    op = v.t(n.child_by_field_name("operator"))
    a, b = (_multiple(v, n.child_by_field_name(f), fixed) for f in ("left", "right"))
    if op in ("+", "-"):
        if a is None or b is None:
            return None
        return " && ".join(c for c in (a, b) if c)
    if op == "*":
        if a == "" or b == "":
            return ""
        if a is None or b is None:
            return a if b is None else b
        return f"({a} || {b})"
    return None


def _in_loop(x: Node, region: list[Node]) -> bool:
    """``x`` is inside a loop of the region (the region's statements included)."""
    top = {(s.start_byte, s.end_byte) for s in region}
    p = x.parent
    while p is not None:
        if p.type in _LOOPS:
            return True
        if (p.start_byte, p.end_byte) in top:
            return False
        p = p.parent
    return False


def _locals(v: KernelView, region: list[Node]) -> dict[str, Node]:
    """name -> declaration of the locals declared in the region."""
    out = {}
    for s in region:
        for x in walk(s):
            if x.type != "declaration":
                continue
            for c in x.named_children:
                d = c.child_by_field_name("declarator") if c.type == "init_declarator" else c
                if c.type in ("init_declarator", "identifier") and d is not None:
                    out[v.t(d)] = x
    return out


def _lane_value(v: KernelView, plan: _Plan, x: Node, reads: set[tuple[int, int]]) -> bool:
    """``x`` itself is a read at the thread's outputs or a local holding lanes."""
    return (x.start_byte, x.end_byte) in reads or (x.type == "identifier" and v.t(x) in plan.lanes)


def _lane_valued(v: KernelView, plan: _Plan, n: Node, reads: set[tuple[int, int]]) -> bool:
    """Some part of ``n`` is a lane value."""
    return any(_lane_value(v, plan, x, reads) for x in walk(n))


def _taint(v: KernelView, plan: _Plan) -> None:
    """The locals whose values follow from the reads at the thread's outputs (to a fixed point); a whole
    declaration is lanes when one of its names is."""
    reads = plan.read_spans
    loc = _locals(v, plan.region)
    changed = True
    while changed:
        changed = False
        for s in plan.region:
            for x in walk(s):
                target = value = None
                if x.type == "assignment_expression":
                    target, value = x.child_by_field_name("left"), x.child_by_field_name("right")
                elif x.type == "init_declarator":
                    target, value = x.child_by_field_name("declarator"), x.child_by_field_name("value")
                if target is None or value is None or target.type == "subscript_expression":
                    continue
                if not _lane_valued(v, plan, value, reads):
                    continue
                name = v.t(target)
                if target.type != "identifier" or name not in loc:
                    _fail(f"`{v.t(x)}`: a value that follows from a load is stored in `{name}`, which is not a "
                          "local scalar of the guarded code")
                if name not in plan.lanes:
                    decl = loc[name]
                    for c in decl.named_children:
                        d = c.child_by_field_name("declarator") if c.type == "init_declarator" else c
                        if c.type in ("init_declarator", "identifier") and d is not None:
                            if d.type != "identifier":
                                _fail(f"`{v.t(decl)}`: a loaded value in something that is not a scalar")
                            plan.lanes.add(v.t(d))
                    plan.lane_decls.append(decl)
                    changed = True
    for decl in plan.lane_decls:
        if any(c.type in ("pointer_declarator", "array_declarator", "reference_declarator") for c in walk(decl)):
            _fail(f"`{v.t(decl)}`: a loaded value in something that is not a scalar")


def _check_uses(v: KernelView, plan: _Plan) -> None:
    """No lane value decides control flow, indexes, addresses or leaves through anything but the stores."""
    reads = plan.read_spans
    stores = {(s.start_byte, s.end_byte) for s in plan.stores}
    tops = {(s.start_byte, s.end_byte) for s in plan.region}
    for s in plan.region:
        for x in walk(s):
            if not _lane_value(v, plan, x, reads):
                continue
            child, p = x, x.parent
            while p is not None:
                what = _forbidden_parent(v, p, child, plan)
                if what:
                    _fail(f"`{v.t(p) if len(v.t(p)) < 80 else v.t(p)[:77] + '...'}`: {what}")
                if (p.start_byte, p.end_byte) in stores or (p.start_byte, p.end_byte) in tops or \
                        p.type in ("expression_statement", "declaration", "compound_statement"):
                    break
                child, p = p, p.parent


def _forbidden_parent(v: KernelView, p: Node, child: Node, plan: _Plan) -> str | None:
    t = p.type
    field_of = None
    for i, c in enumerate(p.children):
        if c == child:
            field_of = p.field_name_for_child(i)
    if t in ("if_statement", "while_statement", "do_statement", "switch_statement", "for_statement") and \
            field_of in ("condition", "update"):
        return "a loaded value decides a branch or a loop (the lanes would have to agree)"
    if t == "condition_clause":
        return "a loaded value decides a branch or a loop (the lanes would have to agree)"
    if t == "conditional_expression" and field_of == "condition":
        return "a loaded value decides a conditional expression"
    if t == "binary_expression" and v.t(p.child_by_field_name("operator")) not in _ARITH:
        return f"the operator {v.t(p.child_by_field_name('operator'))} on a loaded value (only + - * / run lane by lane)"
    if t == "unary_expression" and v.t(p.child_by_field_name("operator")) != "-":
        return f"the operator {v.t(p.child_by_field_name('operator'))} on a loaded value"
    if t in ("pointer_expression", "field_expression", "update_expression", "comma_expression",
             "initializer_list", "sizeof_expression", "lambda_expression", "return_statement"):
        return "a loaded value used as an address, a member, an increment or the like"
    if (t == "subscript_expression" and child != p.child_by_field_name("argument")) or t == "subscript_argument_list":
        return "a loaded value indexes memory"
    if t == "assignment_expression":
        op = v.t(p.child_by_field_name("operator"))
        if op not in _ASSIGN:
            return f"the assignment {op} on a loaded value"
        left = p.child_by_field_name("left")
        if left.type == "subscript_expression" and not any(p.parent == s for s in plan.stores):
            return "a loaded value is stored elsewhere than at the thread's outputs"
    return None


class OutputsPerThread(Rewrite):
    name = "outputs_per_thread"
    summary = ("a thread that walks a loop for its one output computes OUTS neighbouring outputs, each load one "
               "vector across them; the grid is divided by OUTS")

    def why_not(self, ctx: RewriteContext) -> str | None:
        _plan(ctx)
        return None

    def params(self, ctx: RewriteContext) -> list[Param]:
        return self._params(_plan(ctx))

    def _params(self, plan: _Plan) -> list[Param]:
        elem = plan.elem_bytes
        values = [n for n in (1, 2, 4, 8) if n * elem <= 16]
        return [Param(OUTS, values, 1, "outputs_per_thread",
                      "neighbouring outputs each thread computes, each of its loads one vector of OUTS elements "
                      "across them; the grid is divided by it", closed=True)]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        plan = _plan(ctx)
        v = ctx.view()
        m = macro_name(OUTS)
        edits: list[tuple[int, int, str]] = []
        d = next(c for c in plan.decl.named_children if c.type == "init_declarator")
        val = d.child_by_field_name("value")
        ind = v.indent_of(plan.decl)
        edits.append((plan.decl.start_byte, plan.decl.start_byte,
                      f"// kerntune outputs_per_thread: this thread computes the {OUTS} outputs {plan.var} .. "
                      f"{plan.var} + {OUTS} - 1; each load at them is one vector\n{ind}"))
        edits.append((val.start_byte, val.end_byte, f"({v.t(val)}) * {m}"))
        live = f"const long long {LIVE} = (long long)({plan.bound}) - {plan.var};  // of the thread's {OUTS} outputs, those that exist"
        if plan.form == "return":
            edits.append((plan.guard.end_byte, plan.guard.end_byte, f"\n{v.indent_of(plan.guard)}{live}"))
        else:
            block = plan.region[0]
            inner = [c for c in block.named_children]
            at = block.start_byte + 1
            lead = v.indent_of(inner[0]) if inner else v.indent_of(plan.guard) + "  "
            edits.append((at, at, f"\n{lead}{live}"))
        if plan.flag_at is not None:
            cond = " && ".join([f"{m} > 1", f"{LIVE} >= {m}"] + plan.flag_terms)
            edits.append((plan.flag_at.start_byte, plan.flag_at.start_byte,
                          f"const bool {VEC} = {cond};  // all {OUTS} outputs exist and every load of the walk is "
                          f"aligned: the walk below runs with vector loads only\n{v.indent_of(plan.flag_at)}"))
        r = _Render(v, plan, m)
        for s in plan.region:
            if plan.form == "guard":  # the block itself: its statements one by one (the live count goes first)
                for c in s.named_children:
                    edits.append((c.start_byte, c.end_byte, r.render(c)))
            else:
                edits.append((s.start_byte, s.end_byte, r.render(s)))
        text = apply_edits(ctx.text, edits)
        note = (f"outputs_per_thread: each thread computes {OUTS} neighbouring outputs of the index {plan.var} "
                f"(line {plan.decl.start_point[0] + 1}); its {len(plan.reads)} read(s) at them are vectors "
                f"(kt_gather), its values kt_lanes, its {len(plan.stores)} store(s) kt_scatter; the grid is divided "
                f"by {OUTS}")
        ctx = ctx.with_text(text, note, {"pack", "pack_lanes"})
        ctx.params[OUTS] = self._params(plan)[0]
        return shrink_grid(ctx, OUTS)

    def finish(self, ctx: RewriteContext) -> RewriteContext:
        """Each outermost loop that reads with the thread's flag runs in two copies, one with vector loads only and
        one lane by lane (the flag a constant in each), so the compiler keeps the loop's loads in flight; done last,
        after the rewrites that reshape loops (split_reduction) have seen the one loop."""
        v = ctx.view()
        if v.body is None:
            return ctx
        uses = [x for x in walk(v.body) if x.type == "identifier" and v.t(x) == VEC and
                x.parent.type != "init_declarator"]
        loops = []
        for x in uses:
            top, p = None, x.parent
            while p is not None and p != v.body:
                if p.type in _LOOPS:
                    top = p
                p = p.parent
            if top is not None and all((top.start_byte, top.end_byte) != (q.start_byte, q.end_byte) for q in loops):
                loops.append(top)
        if not loops:
            return ctx
        edits = []
        for loop in loops:
            ind = v.line_indent(loop)
            body = v.t(loop).replace("\n", "\n    ")
            copy = {c: re.sub(rf"\b{VEC}\b", c, body) for c in ("true", "false")}
            edits.append((loop.start_byte, loop.end_byte,
                          f"{{  // kerntune outputs_per_thread: the walk with vector loads only, or lane by lane\n"
                          f"{ind}  if ({VEC})\n{ind}    {copy['true']}\n{ind}  else\n{ind}    {copy['false']}\n{ind}}}"))
        lines = ", ".join(str(q.start_point[0] + 1) for q in loops)
        return ctx.with_text(apply_edits(ctx.text, edits),
                             f"outputs_per_thread: the walk (line {lines}) unswitched on {VEC}: vector loads or lanes")


class _Render:
    """The new text of a statement of the guarded region: reads -> kt_gather, stores -> kt_scatter, lane locals'
    types -> kt_lanes, calls and casts of lane values -> kt_apply."""

    def __init__(self, v: KernelView, plan: _Plan, m: str):
        self.v, self.plan, self.m = v, plan, m
        self.reads = plan.read_spans
        self.walk_reads = {(x.start_byte, x.end_byte) for x in plan.walk_reads}
        self.stores = {(s.start_byte, s.end_byte) for s in plan.stores}
        self.decls = {(d.start_byte, d.end_byte) for d in plan.lane_decls}

    def lane(self, n: Node) -> bool:
        return _lane_valued(self.v, self.plan, n, self.reads)

    def render(self, n: Node) -> str:
        v, key = self.v, (n.start_byte, n.end_byte)
        if key in self.reads:
            arr, idx = subscript_parts(n)
            flag = f", {VEC}" if key in self.walk_reads else ""
            return f"kt_gather<{self.m}>({v.t(arr)}, {self.render(idx)}, {LIVE}{flag})"
        if key in self.stores:
            a = n.named_children[0]
            while a.type == "parenthesized_expression":
                a = a.named_children[0]
            left = a.child_by_field_name("left")
            while left.type == "parenthesized_expression":
                left = left.named_children[0]
            arr, idx = subscript_parts(left)
            return (f"kt_scatter<{self.m}>({v.t(arr)}, {self.render(idx)}, "
                    f"{self.render(a.child_by_field_name('right'))}, {LIVE});")
        if n.type == "call_expression" and self.lane(n.child_by_field_name("arguments")) and \
                self.v.t(n.child_by_field_name("function")) not in _OVERLOADED:
            args = [c for c in n.child_by_field_name("arguments").named_children if c.type != "comment"]
            names = [f"kt_a{i}" for i in range(len(args))]
            fn = v.t(n.child_by_field_name("function"))
            return (f"kt_apply([](auto {', auto '.join(names)}) {{ return {fn}({', '.join(names)}); }}, "
                    f"{', '.join(self.render(a) for a in args)})")
        if n.type == "cast_expression" and self.lane(n.child_by_field_name("value")):
            typ = v.t(n.child_by_field_name("type"))
            return f"kt_apply([](auto kt_a0) {{ return ({typ})kt_a0; }}, {self.render(n.child_by_field_name('value'))})"
        if key in self.decls and self.v.t(n.child_by_field_name("type")) != "auto":
            typ = n.child_by_field_name("type")
            return self._splice(n, {(typ.start_byte, typ.end_byte): f"kt_lanes<{v.t(typ)}, {self.m}>"})
        return self._splice(n, {})

    def _splice(self, n: Node, fixed: dict[tuple[int, int], str]) -> str:
        """``n``'s text with each named child rendered (``fixed``: children's texts given)."""
        v = self.v
        out, pos = [], n.start_byte
        for c in n.named_children:
            key = (c.start_byte, c.end_byte)
            new = fixed[key] if key in fixed else self.render(c)
            out.append(v.data[pos:c.start_byte].decode("utf-8"))
            out.append(new)
            pos = c.end_byte
        out.append(v.data[pos:n.end_byte].decode("utf-8"))
        return "".join(out)
