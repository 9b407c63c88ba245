"""A thread's serial reduction loop split across ``SPLIT`` threads of its block (``threadIdx.y``).

A kernel whose threads each walk a long loop accumulating into one register (a column sum: one thread per column
walking down the rows; a per-column max) leaves the GPU idle when there are few threads: 4096 columns make 16
blocks of 256 for 132 SMs, each thread issuing one load at a time. Splitting the loop across ``SPLIT`` threads of
the block (rows ``r = start + threadIdx.y, ... step SPLIT``) puts ``SPLIT`` times as many loads in flight with the
same grid; the partials meet in shared memory and thread ``y = 0`` combines them (in ``y`` order) and runs what
followed the loop. The block becomes ``(BLOCK, SPLIT)``; ``SPLIT = 1`` is the kernel as it was (plus one barrier).

Applies where the kernel's body has, at its top level, a counted loop ``for (int r = A; r < B; ++r)`` whose trip
does not depend on the thread (A and B read only kernel arguments and constants) and whose body is one update of
a local accumulator declared above it: ``acc += e`` (the accumulator starting at zero) or ``acc = fmaxf(acc, e)``
(``fminf``, ``max``, ``min``, ``fmax``, ``fmin``; any start); ``e`` writes nothing. Early returns above the loop
(``if (c >= cols) return;``) become a flag, so every thread reaches the barrier; between the first of them and the
loop only declarations that read no memory may stand. Not where the kernel already uses shared memory, barriers,
``threadIdx.y``/``blockDim.y``, returns elsewhere, or is launched with a block that is not exactly ``BLOCK``.
The sum changes order (partials of every ``SPLIT``-th row), so verification at the spec's tolerance decides."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core.model import KerntuneError, Param, macro_name
from agent_core.source.spec import find_spec
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.grid import block_token, dim3_component, spec_line
from agent_core.templating.rewrites.syntax import walk

SPLIT = "SPLIT"
_MINMAX = {"fmaxf", "fminf", "max", "min", "fmax", "fmin"}
_ZERO = re.compile(r"0+(\.0*)?[fF]?|0?\.0+[fF]?|\(\w+\)\s*0+(\.0*)?[fF]?")
_IMPURE_CALL = re.compile(r"atomic|__sync|printf|assert|__threadfence|malloc|free")


class _Loop:
    def __init__(self, node: Node, var: str, var_type: str, start: Node, acc: str, op: str, fn: str | None,
                 term: Node):
        self.node, self.var, self.var_type, self.start, self.acc, self.op, self.fn, self.term = (
            node, var, var_type, start, acc, op, fn, term)


def _in_lambda(n: Node) -> bool:
    """``n`` is inside a lambda (its return ends the lambda, not the kernel)."""
    p = n.parent
    while p is not None:
        if p.type == "lambda_expression":
            return True
        p = p.parent
    return False


def _plain_declaration(s: Node) -> bool:
    """A declaration that reads no memory and changes nothing (safe for a thread past the end to run)."""
    return s.type == "declaration" and not any(
        x.type in ("subscript_expression", "pointer_expression", "call_expression", "assignment_expression",
                   "update_expression") for x in walk(s))


def _statements(body: Node) -> list[Node]:
    return [c for c in body.named_children if c.type != "comment"]


def _single(n: Node) -> Node | None:
    if n.type == "compound_statement":
        inner = _statements(n)
        return inner[0] if len(inner) == 1 else None
    return n


def _counted_loop(v: KernelView, n: Node, params: set[str]) -> tuple[_Loop | None, str]:
    """The loop facts of ``n`` when it is a counted reduction loop (see the module docstring), else (None, why)."""
    init, cond, upd, body = (n.child_by_field_name(f) for f in ("initializer", "condition", "update", "body"))
    if init is None or init.type != "declaration" or cond is None or upd is None or body is None:
        return None, "not `for (int r = A; r < B; ++r)`"
    decls = [d for d in init.named_children if d.type == "init_declarator"]
    if len(decls) != 1:
        return None, "the loop declares more than its counter"
    var = v.t(decls[0].child_by_field_name("declarator"))
    start = decls[0].child_by_field_name("value")
    var_type = v.t(init.child_by_field_name("type"))
    if cond.type != "binary_expression" or v.t(cond.child_by_field_name("operator")) != "<" or \
            v.t(cond.child_by_field_name("left")) != var:
        return None, f"the loop's condition is not `{var} < B`"
    if re.sub(r"\s+", "", v.t(upd)) not in (f"++{var}", f"{var}++", f"{var}+=1"):
        return None, f"the loop does not step {var} by one"
    for bound in (start, cond.child_by_field_name("right")):
        names = {v.t(x) for x in walk(bound) if x.type == "identifier"}
        if any(x.type == "field_expression" for x in walk(bound)) or not names <= params | {
                w for w in names if w.startswith("KT_") or w.isupper()}:
            return None, "the loop's bounds depend on the thread (they read more than the kernel's arguments)"
    stmt = _single(body)
    if stmt is None or stmt.type != "expression_statement" or not stmt.named_children:
        return None, "the loop's body is not one update of an accumulator"
    e = stmt.named_children[0]
    if e.type != "assignment_expression":
        return None, "the loop's body is not one update of an accumulator"
    left, op, right = e.child_by_field_name("left"), v.t(e.child_by_field_name("operator")), e.child_by_field_name("right")
    if left is None or left.type != "identifier" or right is None:
        return None, "the loop's body does not update a local scalar"
    acc = v.t(left)
    fn, term = None, right
    if op == "+=":
        pass
    elif op == "=" and right.type == "call_expression" and v.t(right.child_by_field_name("function")) in _MINMAX:
        args = [a for a in right.child_by_field_name("arguments").named_children if a.type != "comment"]
        if len(args) != 2 or acc not in (v.t(args[0]), v.t(args[1])):
            return None, f"the loop's body does not combine {acc} with one term"
        fn = v.t(right.child_by_field_name("function"))
        term = args[1] if v.t(args[0]) == acc else args[0]
    else:
        return None, "the loop's body is neither `acc += e` nor `acc = fmaxf(acc, e)` (or min/max)"
    for x in walk(term):
        if x.type in ("assignment_expression", "update_expression"):
            return None, "the loop's term writes something"
        if x.type == "call_expression" and _IMPURE_CALL.search(v.t(x.child_by_field_name("function"))):
            return None, "the loop's term calls a function with side effects"
        if x.type == "identifier" and v.t(x) == acc:
            return None, f"the loop's term reads the accumulator {acc}"
    return _Loop(n, var, var_type, start, acc, op, fn, term), ""


class SplitReduction(Rewrite):
    name = "split_reduction"
    summary = "a thread's serial reduction loop split across SPLIT threads of its block (threadIdx.y)"

    def _find(self, ctx: RewriteContext):
        """(view, statements, index of the loop, its facts, the accumulator's declaration, early returns)."""
        if ctx.block is None:
            raise KerntuneError("the block size is not a parameter")
        if SPLIT in ctx.params:
            raise KerntuneError(f"a parameter {SPLIT} exists already")
        block = (ctx.launch or {}).get("block")
        block = block if isinstance(block, list) else [block]
        if not block or str(block[0]).strip() != ctx.block or any(str(b).strip() != "1" for b in block[1:]):
            raise KerntuneError(f"the launch's block `{block}` is not exactly the parameter {ctx.block}")
        v = ctx.view()
        if v.body is None:
            raise KerntuneError("the kernel has no body")
        body_text = v.t(v.body)
        if re.search(r"__shared__|__syncthreads|\bthreadIdx\.y\b|\bblockDim\.y\b|\bthreadIdx\.z\b|cooperative_groups",
                     body_text):
            raise KerntuneError("the kernel uses shared memory, barriers or a 2D/3D block already")
        stmts = _statements(v.body)
        guard = None  # the kernel's body is `decls; if (COND) { ... }`: the loop is searched inside the block
        last = stmts[-1] if stmts else None
        if last is not None and last.type == "if_statement" and last.child_by_field_name("alternative") is None \
                and last.child_by_field_name("consequence").type == "compound_statement" and not any(
                    s.type == "for_statement" for s in stmts) and all(s.type == "declaration" for s in stmts[:-1]):
            guard = last
            stmts = _statements(last.child_by_field_name("consequence"))
        params = {p.name for p in v.k.params}
        loop, why, at = None, "no counted loop at the top of the kernel's body", -1
        for i, s in enumerate(stmts):
            if s.type == "for_statement":
                loop, why = _counted_loop(v, s, params)
                if loop is not None:
                    at = i
                    break
        if loop is None:
            raise KerntuneError(why)
        decl = None
        for s in stmts[:at]:
            if s.type != "declaration":
                continue
            for d in s.named_children:
                if d.type == "init_declarator" and v.t(d.child_by_field_name("declarator")) == loop.acc:
                    decl = (s, d)
        if decl is None:
            raise KerntuneError(f"the accumulator {loop.acc} is not a local declared above the loop")
        value = decl[1].child_by_field_name("value")
        if loop.op == "+=" and (value is None or not _ZERO.fullmatch(v.t(value).strip())):
            raise KerntuneError(f"the sum {loop.acc} does not start at zero")
        acc_type = v.t(decl[0].child_by_field_name("type"))
        if re.search(r"\bconst\b|\bstatic\b", v.t(decl[0])) or "[" in v.t(decl[1]) or "*" in v.t(decl[1]):
            raise KerntuneError(f"the accumulator {loop.acc} is not a plain scalar")
        returns = []
        for s in stmts[:at]:
            if guard is not None and s.type == "declaration" and not _plain_declaration(s):
                raise KerntuneError("inside the guarding `if`, above the loop stands more than declarations that "
                                    "read no memory")
            if s.type == "if_statement" and s.child_by_field_name("alternative") is None and \
                    re.fullmatch(r"\{?\s*return\s*;\s*\}?", v.t(s.child_by_field_name("consequence")).strip()):
                returns.append(s)
            elif returns and not _plain_declaration(s):
                raise KerntuneError("between an early return and the loop stands more than declarations that read "
                                    "no memory")
            elif s.type not in ("declaration", "if_statement", "expression_statement"):
                raise KerntuneError("the statements above the loop are not declarations and early returns")
            elif s.type == "if_statement":
                raise KerntuneError("an `if` above the loop that is not an early return")
        n_returns = sum(1 for x in walk(v.body) if x.type == "return_statement" and not _in_lambda(x))
        if n_returns != len(returns):
            raise KerntuneError("the kernel returns elsewhere than in early returns above the loop")
        for s in stmts[:at]:
            if s.type == "expression_statement" and any(
                    x.type in ("assignment_expression", "update_expression") and loop.acc in v.t(x) for x in walk(s)):
                raise KerntuneError(f"the accumulator {loop.acc} is changed above the loop")
        return v, stmts, at, loop, acc_type, returns, guard

    def why_not(self, ctx: RewriteContext) -> str | None:
        v, *_ = self._find(ctx)
        sites = v.k.launch_sites
        if not sites:
            return "the kernel is not launched in this file"
        token = block_token(ctx, v)
        for s in sites:
            if _block_edit(v, s, token) is None:
                return (f"the launch at line {s.span.line + 1} does not give its block as the block size alone "
                        f"(`{s.config[1].text if len(s.config) > 1 else ''}`)")
        sp = find_spec(v.cf, ctx.kernel)
        if sp is None or sp.span is None or "block" not in sp.lines:
            return "the spec is not a comment in this file with a block line"
        if not re.search(rf"=\s*\"\s*{macro_name(ctx.block)}\s*\"\s*$", spec_line(ctx.text, sp, "block")[2]):
            return f"the spec's block is not the block size alone ({macro_name(ctx.block)} in the template)"
        return None

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(SPLIT, [1, 2, 4, 8, 16, 32], 1, "split_reduction",
                      "threads of the block (threadIdx.y) that share one thread's serial reduction loop")]

    def constraints(self, ctx: RewriteContext) -> list[str]:
        return [f"{ctx.block} * {SPLIT} <= 1024"]

    # ------------------------------------------------------------------------- what a twin changes (cluster_split)
    def _row_offset(self, var_type: str) -> str:
        """The first row of this thread, added to the loop's start."""
        return f"({var_type})threadIdx.y"

    def _row_step(self) -> str:
        """The loop's step: the threads that share the loop."""
        return macro_name(SPLIT)

    def _combine(self, ind: str, acc_type: str, loop: _Loop, combine: str, b: str) -> str:
        """The block after the loop that leaves the combined value in thread y = 0's accumulator (``b``: the
        block size's macro)."""
        return _block_partials(ind, acc_type, loop, combine, b) + f"{ind}}}\n"

    def _keeps(self) -> str:
        """The condition under which a thread runs what followed the loop (besides being live)."""
        return "threadIdx.y != 0"

    def _comment(self, loop: _Loop) -> str:
        return (f"// kerntune split_reduction: the loop over {loop.var} is split across {SPLIT} threads of the block "
                f"(threadIdx.y); thread y = 0 combines the partials")

    def _launch(self, launch: dict, block: str) -> dict:
        """The template's launch: the block becomes (BLOCK, SPLIT)."""
        return {**launch, "block": [block, SPLIT]}

    def _launch_edits(self, out: RewriteContext, ov: KernelView) -> dict[tuple[int, int], str]:
        """Host edits (by byte range) beyond the block; the twin makes the grid two-dimensional."""
        return {}

    def _note(self, loop: _Loop, line: int) -> str:
        return (f"split_reduction: the loop over {loop.var} at line {line} is split across {SPLIT} threads of the "
                "block (threadIdx.y), the partials combined in shared memory; the block is (BLOCK, SPLIT)")

    # ------------------------------------------------------------------------------------------- the rewrite
    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        why = self.why_not(ctx)
        if why:
            raise KerntuneError(f"internal: {self.name} does not apply: {why}")
        v, stmts, at, loop, acc_type, returns, guard = self._find(ctx)
        ctx = self._add_space(ctx)
        m, b = macro_name(SPLIT), macro_name(ctx.block)
        ind = v.indent_of(loop.node)
        edits: list[tuple[int, int, str]] = []
        live = "kt_live"
        if guard is not None:  # `if (COND) { ... }` -> `bool kt_live = (COND); { ... }`
            block = guard.child_by_field_name("consequence")
            cond = v.t(guard.child_by_field_name("condition"))
            edits.append((guard.start_byte, block.start_byte,
                          f"const bool {live} = {cond};  // kerntune {self.name}: the guarding `if` became this "
                          "flag (every thread must reach the barrier)\n" + v.indent_of(guard)))
        for i, r in enumerate(returns):
            cond = v.t(r.child_by_field_name("condition"))
            text = (f"bool {live} = true;  // kerntune {self.name}: an early return became this flag (every "
                    f"thread must reach the barrier)\n{ind}" if i == 0 else "") + f"if {cond} {live} = false;"
            edits.append((r.start_byte, r.end_byte, text))
        n = loop.node
        start = v.t(loop.start)
        head = v.data[n.start_byte:loop.start.start_byte].decode("utf-8")
        new_start = f"({start}) + {self._row_offset(loop.var_type)}"
        upd = n.child_by_field_name("update")
        loop_text = (head + new_start + v.data[loop.start.end_byte:upd.start_byte].decode("utf-8")
                     + f"{loop.var} += {self._row_step()}" + v.data[upd.end_byte:n.end_byte].decode("utf-8"))
        combine = (f"{loop.acc} += kt_part[kt_s * blockDim.x + threadIdx.x]" if loop.fn is None else
                   f"{loop.acc} = {loop.fn}({loop.acc}, kt_part[kt_s * blockDim.x + threadIdx.x])")
        flagged = bool(returns) or guard is not None
        loop_guard = f"if ({live}) " if flagged else ""
        new = (f"{self._comment(loop)}\n"
               f"{ind}{loop_guard}{loop_text}\n"
               f"{self._combine(ind, acc_type, loop, combine, b)}"
               f"{ind}if ({self._keeps()}{' || !' + live if flagged else ''}) return;")
        edits.append((n.start_byte, n.end_byte, new))
        text = apply_edits(ctx.text, edits)
        # the launch: block (BLOCK, SPLIT) in the template's launch, each launch site and the spec comment
        out = RewriteContext(**{**ctx.__dict__, "launch": self._launch(ctx.launch, ctx.block), "text": text})
        ov = out.view()
        token = block_token(out, ov)
        host = {}
        for s in ov.k.launch_sites:
            a, e, t = _block_edit(ov, s, token)
            host[(a, e)] = t
        sp = find_spec(ov.cf, ctx.kernel)
        a, e, line = spec_line(out.text, sp, "block")
        key = line.find("block")
        host[(a, e)] = line[:key] + re.sub(rf"\"\s*{b}\s*\"", f'["{b}", "{m}"]', line[key:], count=1)
        host.update(self._launch_edits(out, ov))
        out.text = apply_edits(out.text, [(a, e, t) for (a, e), t in host.items()])
        return out.with_text(out.text, self._note(loop, n.start_point[0] + 1), self._helpers())

    def _helpers(self) -> set[str]:
        return set()


def _block_partials(ind: str, acc_type: str, loop: _Loop, combine: str, b: str, then: str = "") -> str:
    """The opening of the block after the loop: every thread's partial into shared memory, thread y = 0 combining
    them in y order (``combine``), then running ``then`` (lines, already indented); the block is left open."""
    m = macro_name(SPLIT)
    head = (f"{ind}{{\n"
            f"{ind}  __shared__ {acc_type} kt_part[{m} * {b}];\n"
            f"{ind}  kt_part[threadIdx.y * blockDim.x + threadIdx.x] = {loop.acc};\n"
            f"{ind}  __syncthreads();\n")
    if not then:
        return head + (f"{ind}  if (threadIdx.y == 0)\n"
                       f"{ind}    for (int kt_s = 1; kt_s < {m}; ++kt_s) {combine};\n")
    return head + (f"{ind}  if (threadIdx.y == 0) {{\n"
                   f"{ind}    for (int kt_s = 1; kt_s < {m}; ++kt_s) {combine};\n"
                   f"{then}"
                   f"{ind}  }}\n")


def _block_edit(v: KernelView, site, token: re.Pattern) -> tuple[int, int, str] | None:
    """(start, end, new text) making a launch's block ``(its block, KT_SPLIT)``: the block argument when it is the
    block size alone, or the one component of the ``dim3`` host variable it names; None otherwise."""
    if len(site.config) < 2:
        return None
    c = site.config[1]
    m = macro_name(SPLIT)
    text = c.text.strip()
    if token.fullmatch(text):
        return c.span.start, c.span.end, f"dim3({c.text}, {m})"
    hv = site.host_vars.get(text)
    if hv is None or hv.init is None or "dim3" not in hv.type:
        return None
    node = dim3_component(v, hv)
    if node is None or not token.fullmatch(v.t(node).strip()):
        return None
    return node.start_byte, node.end_byte, f"{v.t(node)}, {m}"
