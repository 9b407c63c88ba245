"""``#pragma unroll LOOP_UNROLL`` on the loops no other rewrite reads: innermost ``for`` loops whose trip count is
known only at run time (``j < n``, ``j += step``), that read memory other than shared arrays and have no barrier or
shuffle in them. Unrolled N times, a thread issues N iterations' loads before it uses the first: a scan whose
iterations depend on each other (a running maximum, an argmax) otherwise waits out each load in turn.
LOOP_UNROLL = 0 is the loop as written (the compiler's own choice). Unrolling keeps the loop's semantics; timing
decides. Applied only where no rewrite of the thread-strided loops applied (outputs_per_thread, split_reduction or
its twin cluster_split, work_per_thread, fuse_passes, vectorize: their loops carry their own items-per-thread
knobs), and never to a loop a rewrite wrote (one that names a ``kt_`` local, warp_reduce's among them)."""

from __future__ import annotations

from tree_sitter import Node

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.syntax import KernelFacts, squash, subscript_parts, walk

LOOP_UNROLL = "LOOP_UNROLL"
LOOP_REWRITES = ("outputs_per_thread", "split_reduction", "cluster_split", "work_per_thread", "fuse_passes",
                 "vectorize")
_SYNC = ("__syncthreads", "__syncwarp", "__shfl", "sync", "__barrier", "cg::sync")
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")


def _runtime_loop(v: KernelView, n: Node) -> str | None:
    """Why ``n`` is not a loop with a run-time trip count of the shape ``i < bound`` / ``i += step``, or None."""
    cond, upd = n.child_by_field_name("condition"), n.child_by_field_name("update")
    if cond is None or upd is None or cond.type != "binary_expression" or \
            v.t(cond.child_by_field_name("operator")) not in ("<", "<="):
        return "its condition is not `i < bound`"
    var, bound = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if var is None or var.type != "identifier" or bound is None or bound.type == "number_literal":
        return "its bound is a constant (the compiler sees the trip count)"
    name = v.t(var)
    step = upd.child_by_field_name("right") if upd.type == "assignment_expression" else None
    for what, x in (("bound", bound), ("step", step)):
        if x is not None and any(y.type in ("subscript_expression", "pointer_expression", "call_expression",
                                            "assignment_expression", "update_expression") for y in walk(x)):
            return f"its {what} `{v.t(x)}` reads memory or has effects (it may change as the loop runs)"
    if upd.type == "update_expression":
        ok = v.t(upd.child_by_field_name("argument")) == name and "++" in v.t(upd)
    else:
        ok = upd.type == "assignment_expression" and v.t(upd.child_by_field_name("operator")) == "+=" and \
            v.t(upd.child_by_field_name("left")) == name
    return None if ok else f"its update is not `{name} += step`"


def _pragma_before(v: KernelView, n: Node) -> bool:
    line_start = v.data.rfind(b"\n", 0, n.start_byte) + 1
    prev = v.data[:line_start].rstrip().rsplit(b"\n", 1)[-1].strip()
    return prev.startswith(b"#pragma") and b"unroll" in prev


def _loops(ctx: RewriteContext) -> tuple[KernelView, list[Node], str]:
    """The loops to unroll, and (when there are none) why."""
    v = ctx.view()
    facts = KernelFacts(v, ctx.block)
    out, whys = [], []
    for n in walk(v.body):
        if n.type != "for_statement":
            continue
        body = n.child_by_field_name("body")
        if body is None:
            continue
        inner = [x for x in walk(body) if x.type in _LOOPS]
        reads = [x for x in walk(body) if x.type == "subscript_expression"]
        calls = [v.t(x.child_by_field_name("function")) for x in walk(body) if x.type == "call_expression"]
        reason = _runtime_loop(v, n)
        if reason:
            whys.append(f"loop at line {n.start_point[0] + 1}: {reason}")
        elif n.parent is None or n.parent.type != "compound_statement" or \
                v.data[v.data.rfind(b"\n", 0, n.start_byte) + 1:n.start_byte].strip():
            whys.append(f"loop at line {n.start_point[0] + 1}: not a statement of its own line in a block")
        elif inner:
            whys.append(f"loop at line {n.start_point[0] + 1}: not innermost")
        elif any(x.type == "identifier" and v.t(x).startswith(("kt_", "KT_")) for x in walk(n)):
            whys.append(f"loop at line {n.start_point[0] + 1}: written by a rewrite")
        elif _pragma_before(v, n):
            whys.append(f"loop at line {n.start_point[0] + 1}: has its own #pragma unroll")
        elif any(c.startswith(_SYNC) for c in calls):
            whys.append(f"loop at line {n.start_point[0] + 1}: a barrier or shuffle in it")
        elif not any(squash(v.t(subscript_parts(r)[0])) not in facts.shared_names for r in reads):
            whys.append(f"loop at line {n.start_point[0] + 1}: reads no global memory")
        else:
            out.append(n)
    return v, out, "; ".join(whys) or "no for loop in the kernel"


class Unroll(Rewrite):
    name = "unroll"
    summary = "#pragma unroll LOOP_UNROLL on innermost run-time-bounded loops no other rewrite reads"

    def why_not(self, ctx: RewriteContext) -> str | None:
        done = [n.split(":")[0] for n in ctx.notes if n.split(":")[0] in LOOP_REWRITES]
        if done:
            return f"{done[0]} rewrote the loops (its items per thread are the knob)"
        if LOOP_UNROLL in ctx.params:
            return f"a parameter {LOOP_UNROLL} exists already"
        _, loops, why = _loops(ctx)
        return None if loops else why

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(LOOP_UNROLL, [0, 2, 4, 8], 0, "loop_unroll",
                      "0: the loop as written; N: #pragma unroll N (N iterations' loads in flight per thread)",
                      closed=True)]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v, loops, _ = _loops(ctx)
        ctx = self._add_space(ctx)
        m = macro_name(LOOP_UNROLL)
        edits = [(v.body.start_byte + 1, v.body.start_byte + 1,
                  f"\n#if {m} > 0\n  constexpr int kerntune_loop_unroll = {m};  // #pragma unroll does not expand "
                  "macros\n#endif")]
        for n in loops:
            at = v.data.rfind(b"\n", 0, n.start_byte) + 1
            edits.append((at, at, f"#if {m} > 0\n#pragma unroll kerntune_loop_unroll\n#endif\n"))
        lines = ", ".join(str(n.start_point[0] + 1) for n in loops)
        return ctx.with_text(apply_edits(ctx.text, edits), f"unroll: #pragma unroll {LOOP_UNROLL} on the loop(s) at "
                             f"line(s) {lines} when {LOOP_UNROLL} > 0")
