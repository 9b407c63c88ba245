"""The vector loads the other rewrites made (``kt_load``; ``kt_gather`` where the thread decided once) take a
cache hint as a parameter: at ``LOAD_HINT=1`` they are ``ld.global.L1::no_allocate.L2::256B``, the plain load's
semantics (weak, coherent: nothing a plain load may read is read otherwise) with its line not allocated in L1.
A streaming read of data used once then leaves L1 alone; on the H100 that moved a column sum's cluster split from
58.7 to 54.0 us on 8192 x 4096 fp32 (gpu/results/2026-11-24i/column_sum_same_harness: the L1 allocation, not the
non-coherent path or the L2 prefetch size, is what costs). Where data is read again (a row read twice) keeping it
in L1 may be worth more: a parameter, so the search decides.

Only loads the rewrites wrote are touched (the user's own loads keep their form), never a load from shared memory
(an array declared ``__shared__`` or a local pointer into one), and the hinted load carries a
``memory`` clobber, so the compiler keeps it in order with the kernel's stores as it does a plain load."""

from __future__ import annotations

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.syntax import KernelFacts, walk

LOAD_HINT = "LOAD_HINT"
_LOAD, _GATHER = "kt_load", "kt_gather"


def _sites(ctx: RewriteContext) -> list[tuple[int, int, str]]:
    """(start, end, name) of the function names of the kernel's hintable calls: every ``kt_load<N>(...)`` and the
    four-argument ``kt_gather<N>(p, i, live, vec)`` (the three-argument gather decides at each load, lane by lane)."""
    v = ctx.view()
    shared = KernelFacts(v, ctx.block).shared_names
    out = []
    for n in walk(v.body):
        if n.type != "call_expression":
            continue
        fn = n.child_by_field_name("function")
        if fn is None or fn.type != "template_function":
            continue
        name = v.t(fn.child_by_field_name("name"))
        args = n.child_by_field_name("arguments")
        nargs = sum(1 for c in args.named_children if c.type != "comment") if args is not None else 0
        first = next((c for c in args.named_children if c.type != "comment"), None) if args is not None else None
        if first is not None and {v.t(x) for x in walk(first) if x.type == "identifier"} & shared:
            continue  # a load from shared memory: ld.global would read the wrong space
        if name == _LOAD or (name == _GATHER and nargs == 4):
            targs = fn.child_by_field_name("arguments")
            out.append((fn.start_byte, targs.start_byte + 1, name))
    return out


class LoadHint(Rewrite):
    name = "load_hint"
    summary = "the rewrites' vector loads as ld.global.L1::no_allocate.L2::256B when LOAD_HINT=1 (not kept in L1)"

    def why_not(self, ctx: RewriteContext) -> str | None:
        if LOAD_HINT in ctx.params:
            return f"a parameter {LOAD_HINT} exists already"
        return None if _sites(ctx) else "no vector load written by a rewrite (kt_load, or kt_gather decided once)"

    def params(self, ctx: RewriteContext) -> list[Param]:
        return [Param(LOAD_HINT, [0, 1], 0, "load_hint",
                      "1: the rewrites' vector loads do not allocate their lines in L1 "
                      "(ld.global.L1::no_allocate.L2::256B; data read once)", closed=True)]

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        sites = _sites(ctx)
        ctx = self._add_space(ctx)
        m = macro_name(LOAD_HINT)
        edits = [(a, b, f"{name}_hint<{m}, ") for a, b, name in sites]
        helpers = {"pack_hint"} | ({"pack_lanes_hint"} if any(n == _GATHER for *_, n in sites) else set())
        n_load = sum(n == _LOAD for *_, n in sites)
        what = ", ".join(w for w in (f"{n_load} kt_load" if n_load else "",
                                     f"{len(sites) - n_load} kt_gather" if len(sites) > n_load else "") if w)
        return ctx.with_text(apply_edits(ctx.text, edits),
                             f"load_hint: {what} not kept in L1 when {LOAD_HINT}=1 "
                             "(ld.global.L1::no_allocate.L2::256B)", helpers)
