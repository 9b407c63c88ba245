"""Fused passes: several block-strided passes over the same row (softmax: max, sum of exponentials, normalize;
norms: sum of squares, then scale) read the row from global memory once, into registers, when it fits.

Each pass ``for (int i = threadIdx.x; i < n; i += BLOCK)`` that reads a stream ``p[off + i]`` read by another
pass too gets a cached twin, taken when ``CACHE_ROW`` vectors of ``VEC`` elements per thread hold the row and
every pointer of the passes is aligned to the vector: thread ``t`` holds the vectors ``t, t + BLOCK, ...``; the
first pass loads them (a partial last vector element by element), the later passes read the registers. Other
streams of a cached pass are loaded and stored as vectors too. Otherwise (``CACHE_ROW = 0``, a longer row, a
misaligned pointer) the passes run as written, and the vectorize rewrite makes them read vectors. The vector width
``VEC`` is shared with vectorize (declared here, since this runs first).

Preconditions: at least two passes at the top level of the kernel, with the same start, bound and stride (the
block's threads), each vectorizable (see ``vectorize``), sharing a stream no pass writes through its pointer;
the stream's pointer and offset are not assigned in the kernel. Runs before ``vectorize``.
"""

from __future__ import annotations

from agent_core.model import Param, macro_name
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.syntax import KernelFacts, squash, strided_loop
from agent_core.templating.rewrites.vectorize import LoopPlan, VEC, _reindent, plan_loop, vec_param

CACHE_ROW = "CACHE_ROW"


def _passes(v: KernelView, facts: KernelFacts) -> tuple[list[LoopPlan], set[tuple[str, str]], str]:
    """(the passes to fuse, the cached streams as (pointer, offset)), or ([], set(), why not)."""
    loops: dict[tuple[str, str, str], list[LoopPlan]] = {}
    for n in v.body.named_children:
        loop, _ = strided_loop(v, facts, n)
        if loop is None or loop.kind != "block":
            continue
        plan, _ = plan_loop(v, facts, loop)
        if plan is None or plan.guarded:  # a null-tested pointer's reads are not cached (its loads are guarded)
            continue
        key = (squash(v.t(loop.start)), squash(v.t(loop.bound)), squash(v.t(loop.step)))
        loops.setdefault(key, []).append(plan)
    best: tuple[list[LoopPlan], set] = ([], set())
    for plans in loops.values():
        if len(plans) < 2:
            continue
        reads: dict[tuple[str, str], int] = {}
        written = {p for pl in plans for (_e, p, _o, _r, w) in pl.pointers.values() if w}
        for pl in plans:
            for _e, p, off, r, w in pl.pointers.values():
                if r and not w:
                    reads[(p, off)] = reads.get((p, off), 0) + 1
        shared = {k for k, c in reads.items() if c >= 2 and k[0] not in written and not facts.assigned.get(k[0])
                  and not any(facts.assigned.get(nm) for nm in _names(v, k[1]))}
        if shared and len(plans) > len(best[0]):
            best = (plans, shared)
    if not best[0]:
        return [], set(), "no two block-strided passes over the same range read the same row"
    return best[0], best[1], ""


def _names(v: KernelView, text: str) -> set[str]:
    import re
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _elem(pl: LoopPlan, stream: tuple[str, str]) -> str:
    return next(e for (e, p, o, _r, _w) in pl.pointers.values() if (p, o) == stream)


def cached_loop_text(v: KernelView, pl: LoopPlan, cached: dict[tuple[str, str], str], first: set, ind: str) -> str:
    """The cached twin of pass ``pl``: the thread's vectors of the row, from registers (``cached``: stream ->
    register array) or, for the other streams, loaded and stored as vectors; ``first``: the cached streams this
    pass loads into their registers."""
    L = pl.loop
    vec, cr = macro_name(VEC), macro_name(CACHE_ROW)
    start, bound, step = v.t(L.start), v.t(L.bound), v.t(L.step)
    i1, i2, i3, i4, i5 = (ind + "  " * k for k in range(1, 6))
    head = [f"{ind}for (int kt_c = 0; kt_c < {cr}; ++kt_c) {{",
            f"{i1}const long long kt_kk = (long long)({start}) + (long long)kt_c * ({step});  // the thread's vector",
            f"{i1}if (kt_kk * {vec} < (long long)({bound})) {{",
            f"{i2}const bool kt_full = (kt_kk + 1) * {vec} <= (long long)({bound});"]
    lines = []
    loads = []  # the first pass loads every vector of the row before it reads any: the loads are all in flight
    for sname, (et, p, off, r, w) in pl.pointers.items():
        if (p, off) in cached and not w and (p, off) in first:
            base = p if not off else f"({p} + ({off}))"
            target = f"{cached[(p, off)]}[kt_c]"
            loads += [f"{i2}if (kt_full) {target} = kt_load<{vec}>({base}, kt_kk);",
                      f"{i2}else for (int kt_j = 0; kt_j < {vec}; ++kt_j)",
                      f"{i3}if (kt_kk * {vec} + kt_j < (long long)({bound})) {target}.v[kt_j] = {base}[kt_kk * {vec} + kt_j];"]
    if loads:
        lines += [f"{ind}// every load of the row first (all in flight at once), then the pass over the registers",
                  "#pragma unroll", *head, *loads, f"{i1}}}", f"{ind}}}", "#pragma unroll"]
    else:
        lines.append("#pragma unroll")
    full = len(lines) + len(head) - 1  # the line of the pass's own kt_full
    lines += head
    names: dict[str, str] = {}  # stream register array of the vectorize plan -> expression of its pack here
    for sname, (et, p, off, r, w) in pl.pointers.items():
        base = p if not off else f"({p} + ({off}))"
        if (p, off) in cached and not w:
            names[sname] = f"{cached[(p, off)]}[kt_c]"
            continue  # in the registers (this pass's loads are above)
        else:
            lines.append(f"{i2}kt_pack<{et}, {vec}> {sname};")
            names[sname] = sname
            target = sname
            if not r:
                continue
        lines += [f"{i2}if (kt_full) {target} = kt_load<{vec}>({base}, kt_kk);",
                  f"{i2}else for (int kt_j = 0; kt_j < {vec}; ++kt_j)",
                  f"{i3}if (kt_kk * {vec} + kt_j < (long long)({bound})) {target}.v[kt_j] = {base}[kt_kk * {vec} + kt_j];"]
    edits = [(a.node.start_byte - L.body.start_byte, a.node.end_byte - L.body.start_byte,
              f"{names[a.stream]}.v[kt_j]") for a in pl.accesses]
    body = _reindent(apply_edits(v.t(L.body), edits), i4, v.indent_of(L.node))
    lines += ["#pragma unroll", f"{i2}for (int kt_j = 0; kt_j < {vec}; ++kt_j) {{",
              f"{i3}const {L.var_type} {L.var} = ({L.var_type})(kt_kk * {vec} + kt_j);",
              f"{i3}if ({L.var} < {bound}) {{", f"{i4}{body}", f"{i3}}}", f"{i2}}}"]
    for sname, (et, p, off, r, w) in pl.pointers.items():
        if w:
            base = p if not off else f"({p} + ({off}))"
            lines += [f"{i2}if (kt_full) kt_store<{vec}>({base}, kt_kk, {sname});",
                      f"{i2}else for (int kt_j = 0; kt_j < {vec}; ++kt_j)",
                      f"{i3}if (kt_kk * {vec} + kt_j < (long long)({bound})) {base}[kt_kk * {vec} + kt_j] = {sname}.v[kt_j];"]
    lines += [f"{i1}}}", f"{ind}}}"]
    if not any("kt_full" in x for x in lines[full + 1:]):
        del lines[full]  # this pass's loop loads and stores nothing itself: no partial vector to tell
    return "\n".join(lines)


class FusePasses(Rewrite):
    name = "fuse_passes"
    summary = "passes over the same row read it once into registers when it fits (CACHE_ROW vectors per thread)"

    def _analyse(self, ctx: RewriteContext):
        v = ctx.view()
        facts = KernelFacts(v, ctx.block)
        plans, shared, why = _passes(v, facts)
        return v, plans, shared, why

    def why_not(self, ctx: RewriteContext) -> str | None:
        if ctx.block is None:
            return "the block size is not a parameter"
        _, plans, _, why = self._analyse(ctx)
        return why or None

    def params(self, ctx: RewriteContext) -> list[Param]:
        vec = [] if VEC in ctx.params else [vec_param(ctx)]  # shared with vectorize, which runs next
        return vec + [Param(CACHE_ROW, [0, 1, 2, 4, 8, 16], 0, "cache_row",
                      "vectors of the row each thread keeps in registers across the passes (0: the passes re-read "
                      "the row); taken only when the row fits in BLOCK * VEC * CACHE_ROW elements")]

    def constraints(self, ctx: RewriteContext) -> list[str]:
        _, plans, shared, _ = self._analyse(ctx)
        widest = max(p.sizes[_elem(p, s)] for p in plans for s in shared if any(
            (pp, o) == s for (_e, pp, o, _r, _w) in p.pointers.values()))
        per = widest * len(shared)  # bytes of cached row per element position
        return [f"{VEC} * {CACHE_ROW} * {per} <= 256",  # at most 64 registers of cached row per thread,
                f"{VEC} * {CACHE_ROW} * {per} * {ctx.block} <= 131072"]  # and half the registers a block may have

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v, plans, shared, _ = self._analyse(ctx)
        ctx = self._add_space(ctx)
        vec, cr = macro_name(VEC), macro_name(CACHE_ROW)
        first_loop = plans[0].loop
        ind = v.indent_of(first_loop.node)
        regs = {s: f"kt_row_{s[0]}" + (f"_{i}" if len(shared) > 1 else "") for i, s in enumerate(sorted(shared))}
        bound, step = v.t(first_loop.bound), v.t(first_loop.step)
        streams = {}
        for pl in plans:
            for _sn, (_e, p, off, _r, _w) in pl.pointers.items():
                streams[(p, off)] = p if not off else f"({p} + ({off}))"
        aligned = " && ".join(f"kt_aligned<{vec}>({b})" for b in streams.values())
        what = ", ".join(f"{p}[{off + ' + ' if off else ''}i]" for p, off in sorted(shared))
        decl = [f"// kerntune fuse_passes: the {len(plans)} passes over {what} read it from global memory once, into "
                "registers, when the row fits",
                *[f"{ind}kt_pack<{_elem(plans[0], s) if any((p, o) == s for (_e, p, o, _r, _w) in plans[0].pointers.values()) else _elem(next(pl for pl in plans if any((p, o) == s for (_e, p, o, _r, _w) in pl.pointers.values())), s)}, {vec}> {regs[s]}[{cr} > 0 ? {cr} : 1];"
                  for s in sorted(shared)],
                f"{ind}const bool kt_cached = {cr} > 0 && (long long)({bound}) <= (long long)({step}) * {vec} * {cr} && "
                f"{aligned};"]
        edits = []
        loaded: set = set()
        for k, pl in enumerate(plans):
            node = pl.loop.node
            mine = {s for s in shared if any((p, o) == s for (_e, p, o, _r, _w) in pl.pointers.values())}
            first = mine - loaded
            loaded |= mine
            twin = cached_loop_text(v, pl, regs, first, ind + "  ")
            text = (f"if (kt_cached) {{  // pass {k + 1}: {'loads the row into' if first else 'reads the row from'} "
                    f"registers\n{twin}\n{ind}}} else {{  // the row does not fit, or a pointer is misaligned\n"
                    f"{ind}  {_reindent(v.t(node), ind + '  ', ind)}\n{ind}}}")
            if k == 0:
                text = "\n".join(decl) + "\n" + ind + text
            edits.append((node.start_byte, node.end_byte, text))
        lines = ", ".join(str(p.loop.node.start_point.row + 1) for p in plans)
        return ctx.with_text(apply_edits(ctx.text, edits),
                             f"fuse_passes: the passes at lines {lines} read {what} once into registers when the row "
                             "fits (CACHE_ROW vectors of VEC per thread)", {"pack"})
