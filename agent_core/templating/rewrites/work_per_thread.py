"""Work per thread: an elementwise kernel (one element per thread: ``int i = blockIdx.x * blockDim.x +
threadIdx.x; if (i < n) {...}``, or ``if (i >= n) return;``) becomes a grid-stride loop, and its grid is
divided by ``ITEMS``: each thread covers ITEMS elements (ITEMS vectors once vectorized, loaded before any is
used), so fewer blocks keep more loads in flight. A kernel that already has a grid-stride loop over a grid
written from the block size gets ITEMS the same way.

A 2-D grid (``blockIdx.y`` the row, ``blockIdx.x * blockDim.x + threadIdx.x`` the column) strides its x index
the same way: each row's blocks become a grid-stride loop over the columns, and only the grid's x is divided.

Preconditions: the index is declared once from the global thread index and never assigned; the guard is the
kernel's last statement (or an early return), without ``else``; the kernel has no barrier and no shared
memory (the threads of a block would no longer meet at the same points); the block is 1-D; the grid's x follows
the block size (``cdiv(n, 256)``) at every launch and in the spec comment, and its y and z do not.
"""

from __future__ import annotations

from agent_core.model import Param
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.grid import grid_follows_block, shrink_grid
from agent_core.templating.rewrites.syntax import KernelFacts, names_in, pure, strided_loop, walk

ITEMS = "ITEMS"


def _guarded_element(v: KernelView, facts: KernelFacts) -> tuple[tuple | None, str]:
    """(declaration, the statements from it to the end, the guard, the body) of a one-element-per-thread
    kernel, or (None, why not)."""
    stmts = [c for c in v.body.named_children if c.type != "comment"]
    decl_i = var = None
    for i, s in enumerate(stmts):
        if s.type != "declaration":
            continue
        ds = [c for c in s.named_children if c.type == "init_declarator"]
        if len(ds) == 1:
            d, val = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
            if d is not None and d.type == "identifier" and val is not None and facts.is_global_index(v.t(val)):
                decl_i, var = i, v.t(d)
                break
    if decl_i is None:
        return None, "no `i = blockIdx.x * blockDim.x + threadIdx.x` index"
    if facts.assigned.get(var):
        return None, f"the index {var} is assigned after its declaration"
    for i in range(decl_i + 1, len(stmts)):
        s = stmts[i]
        if s.type != "if_statement":
            continue
        cond = s.child_by_field_name("condition")
        c = cond.named_children[0] if cond is not None and cond.named_child_count == 1 else None
        while c is not None and c.type == "parenthesized_expression" and c.named_child_count == 1:
            c = c.named_children[0]
        if c is None or c.type != "binary_expression":
            continue
        op, lt, rt = v.t(c.child_by_field_name("operator")), c.child_by_field_name("left"), c.child_by_field_name("right")
        if v.t(lt) != var or not pure(v, rt) or var in names_in(v, rt) or \
                any(facts.assigned.get(nm) for nm in names_in(v, rt)):
            continue
        alt = s.child_by_field_name("alternative")
        cons = s.child_by_field_name("consequence")
        if op == "<" and i == len(stmts) - 1 and alt is None:
            got = (stmts[decl_i], stmts[decl_i + 1:i], s, v.t(rt), cons, "guard")
        elif op == ">=" and alt is None and cons is not None and (cons.type == "return_statement" or (
                cons.type == "compound_statement" and [x.type for x in cons.named_children] == ["return_statement"])):
            got = (stmts[decl_i], stmts[decl_i + 1:i] + stmts[i + 1:], s, v.t(rt), None, "return")
        else:
            continue
        inside = got[1] + ([cons] if got[5] == "guard" else [])
        if any(x.type == "return_statement" for n in inside for x in walk(n)):
            return None, "a return inside the element's code would end the thread's whole loop"
        return got, ""
    return None, f"no `if ({var} < n)` guarding the rest of the kernel (nor `if ({var} >= n) return;`)"


class WorkPerThread(Rewrite):
    name = "work_per_thread"
    summary = "one element per thread becomes a grid-stride loop; ITEMS elements (vectors) per thread, grid / ITEMS"

    def _facts(self, ctx: RewriteContext):
        v = ctx.view()
        return v, KernelFacts(v, ctx.block)

    def _existing_loop(self, v: KernelView, facts: KernelFacts):
        for n in walk(v.body):
            loop, _ = strided_loop(v, facts, n)
            if loop is not None and loop.kind == "grid":
                return loop
        return None

    def why_not(self, ctx: RewriteContext) -> str | None:
        if ITEMS in ctx.params:
            return f"the structural template already tunes the items per thread ({ITEMS})"
        v, facts = self._facts(ctx)
        text = v.t(v.body)
        if "__syncthreads" in text or "__shared__" in text:
            return "the kernel uses barriers or shared memory (threads could no longer meet at the same points)"
        if any(w in text for w in ("threadIdx.y", "threadIdx.z", "blockDim.y", "blockDim.z")):
            return "the kernel uses a 2D block (the x index would not be the block's thread index)"
        if self._existing_loop(v, facts) is None:
            got, why = _guarded_element(v, facts)
            if got is None:
                return f"not one element per thread and no grid-stride loop: {why}"
        return grid_follows_block(ctx)

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(ITEMS, [1, 2, 4, 8], 1, "items_per_thread",
                      "elements (vectors, once vectorized) each thread covers per step of the grid-stride loop; "
                      "the grid is divided by it")]

    def constraints(self, ctx: RewriteContext) -> list[str]:
        return []

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v, facts = self._facts(ctx)
        note = "work_per_thread: each thread covers ITEMS elements; the grid is divided by ITEMS"
        if self._existing_loop(v, facts) is None:
            (decl, rest, guard, bound, cons, form), _ = _guarded_element(v, facts)
            d = next(c for c in decl.named_children if c.type == "init_declarator")
            var, start = v.t(d.child_by_field_name("declarator")), v.t(d.child_by_field_name("value"))
            typ = " ".join(v.t(decl.child_by_field_name("type")).split())
            ind = v.indent_of(decl)
            last = (rest[-1] if rest else guard)
            end = max(guard.end_byte, last.end_byte)
            kept = [c for c in v.body.named_children  # the statements and comments after the index, in order
                    if decl.end_byte <= c.start_byte and c.end_byte <= end and c != guard]
            inner = [v.t(s) for s in kept]
            if cons is not None:
                inner.append(v.t(cons))
            if not kept and cons is not None and cons.type == "compound_statement":
                body_block = v.t(cons)  # the guarded block is the loop's body as it is
            else:
                body_block = "{\n" + ind + "  " + ("\n" + ind + "  ").join(x.replace("\n", "\n  ") for x in inner) + \
                    "\n" + ind + "}"
            step = "blockDim.x * gridDim.x"
            loop = (f"// kerntune work_per_thread: one element per thread became a grid-stride loop (any grid covers "
                    f"{bound});\n{ind}// the grid is divided by ITEMS\n"
                    f"{ind}for ({typ} {var} = {start}; {var} < {bound}; {var} += {step}) {body_block}")
            text = apply_edits(ctx.text, [(decl.start_byte, end, loop)])
            note += f"; the guarded element at line {guard.start_point.row + 1} became a grid-stride loop"
            ctx = ctx.with_text(text, note)
        else:
            ctx = ctx.with_text(ctx.text, note)
        ctx = self._add_space(ctx)
        return shrink_grid(ctx, ITEMS)
