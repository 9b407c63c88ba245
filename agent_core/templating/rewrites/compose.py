"""Compose the rewrites: apply each one whose preconditions hold, in a fixed order, to the structural template
of the user's kernel (so its block size and other structural parameters stay parameters) -> one
``KernelTemplate`` (origin ``rewrite:<names>``) whose text is the user's whole file with the kernel rewritten,
helpers above it, and a header that defines every ``KT_<PARAM>`` to its original value.

A rewrite may have a twin (``TWINS``): the same transformation done another way that needs what not every device
has (``cluster_split``: a reduction over the blocks of a thread-block cluster, sm_90). Where the rewrite applied,
the composition runs once more with its twin in its place -> a second template, searched after the first."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace

from agent_core.model import CudaFile, KernelTemplate, KerntuneError, ParamSpace, TuningSpec, macro_name
from agent_core.source.cuda_parse import kernel_has_errors, parse_cuda
from agent_core.source.spec import find_spec
from agent_core.templating.rewrites.base import Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.cluster_split import ClusterSplit
from agent_core.templating.rewrites.fast_math import FastMath
from agent_core.templating.rewrites.fuse_passes import FusePasses
from agent_core.templating.rewrites.launch_bounds import LaunchBounds
from agent_core.templating.rewrites.split_reduction import SplitReduction
from agent_core.templating.rewrites.vectorize import Vectorize
from agent_core.templating.rewrites.warp_reduce import WarpReduce
from agent_core.templating.rewrites.work_per_thread import WorkPerThread
from agent_core.templating.templatize import templatize
from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END, strip_header

# The order matters: reductions first (they change what the loops around them look like; a thread's serial
# reduction split across the block's y threads), then one element per thread into a loop (so that it can be
# vectorized), passes over one row fused (their fallback is then
# vectorized; they use its VEC), vectors, and last the per-call and per-kernel knobs.
REWRITES: list[Rewrite] = [WarpReduce(), SplitReduction(), WorkPerThread(), FusePasses(), Vectorize(), FastMath(), LaunchBounds()]
# rewrite name -> its twin (a composition of its own, in the rewrite's place in REWRITES)
TWINS: dict[str, Rewrite] = {"split_reduction": ClusterSplit()}

_PACK = """\
// kerntune rewrite helpers: N elements of T in one aligned load/store (4, 8 or 16 bytes)
template <typename T, int N> struct alignas(sizeof(T) * N) kt_pack { T v[N]; };
template <int N, typename T> __device__ __forceinline__ bool kt_aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (sizeof(T) * N) == 0;
}
template <int N, typename T> __device__ __forceinline__ kt_pack<T, N> kt_load(const T* p, long long k) {
  return reinterpret_cast<const kt_pack<T, N>*>(p)[k];
}
template <int N, typename T> __device__ __forceinline__ void kt_store(T* p, long long k, const kt_pack<T, N>& x) {
  reinterpret_cast<kt_pack<T, N>*>(p)[k] = x;
}"""
_FAST_MATH = """\
// kerntune rewrite helpers: precise math at F = 0, the fast intrinsic at F = 1
template <int F> __device__ __forceinline__ float kt_expf(float x) { return F ? __expf(x) : expf(x); }
template <int F> __device__ __forceinline__ float kt_logf(float x) { return F ? __logf(x) : logf(x); }
template <int F> __device__ __forceinline__ float kt_sinf(float x) { return F ? __sinf(x) : sinf(x); }
template <int F> __device__ __forceinline__ float kt_cosf(float x) { return F ? __cosf(x) : cosf(x); }
template <int F> __device__ __forceinline__ float kt_powf(float x, float y) { return F ? __powf(x, y) : powf(x, y); }
template <int F> __device__ __forceinline__ float kt_rsqrtf(float x) { return F ? rsqrtf(x) : 1.0f / sqrtf(x); }
template <int F> __device__ __forceinline__ float kt_tanhf(float x) {
  if (F) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
  return tanhf(x);
}"""
_CLUSTER = "#include <cooperative_groups.h>  // kerntune rewrite helpers: thread-block clusters (cluster_split)"
HELPERS = {"pack": ("KERNTUNE_REWRITE_PACK", _PACK), "fast_math": ("KERNTUNE_REWRITE_FAST_MATH", _FAST_MATH),
           "cluster": ("KERNTUNE_REWRITE_CLUSTER", _CLUSTER)}


@dataclass
class Outcome:
    """What composing did: the template (None when no rewrite applies) and, per rewrite, None where it was
    applied or why it was not; the twins' templates (each with a rewrite replaced by its twin) and, per twin
    of an applied rewrite, None where it applied or why not."""
    template: KernelTemplate | None
    report: list[tuple[str, str | None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    twins: list[KernelTemplate] = field(default_factory=list)
    twin_report: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def applied(self) -> list[str]:
        return [n for n, why in self.report if why is None]


def start_context(cf: CudaFile, kernel: str, spec: TuningSpec | None = None,
                  structural: KernelTemplate | None = None) -> RewriteContext:
    """The context the rewrites start from: the structural template of ``kernel`` (without its header), or the
    file itself when nothing is structurally tunable."""
    if structural is None:
        try:
            structural = templatize(cf, kernel)
        except KerntuneError:
            structural = None
    if spec is None:
        try:
            spec = find_spec(cf, kernel)
        except KerntuneError:
            spec = None
    launch = None
    if structural is not None and structural.launch:
        launch = copy.deepcopy(structural.launch)
    elif spec is not None:
        launch = {"grid": list(spec.grid), "block": list(spec.block), "smem": spec.smem or "0"}
    if structural is not None:
        params = copy.deepcopy(structural.space.params)
        blocks = [p.name for p in params.values() if p.kind == "block_size"]
        return RewriteContext(kernel, cf.path, strip_header(structural.text), params,
                              list(structural.space.constraints), launch, blocks[0] if len(blocks) == 1 else None)
    return RewriteContext(kernel, cf.path, cf.text, {}, [], launch, None)


def compose(cf: CudaFile, kernel: str, spec: TuningSpec | None = None,
            structural: KernelTemplate | None = None) -> Outcome:
    """Apply every rewrite whose preconditions hold, in ``REWRITES`` order."""
    cf.kernel(kernel)
    if kernel_has_errors(cf, kernel):
        return Outcome(None, [(r.name, "the kernel does not parse") for r in REWRITES])
    start = start_context(cf, kernel, spec, structural)
    if any(w.startswith("kt_") for w in _identifiers(start)):
        return Outcome(None, [(r.name, "the kernel already uses names starting with kt_ (kerntune's)") for r in REWRITES])
    ctx, report, before = _run(start, REWRITES)
    applied = [n for n, why in report if why is None]
    if not applied:
        return Outcome(None, report)
    out = Outcome(_template(cf, kernel, ctx, applied), report, ctx.notes)
    for i, (name, why) in enumerate(report):
        twin = TWINS.get(name)
        if twin is None or why is not None:
            continue
        # the rewrites before it ran already: the twin's composition goes on from where the rewrite started
        tctx, treport, _ = _run(before[i], [twin] + REWRITES[i + 1:])
        treport = report[:i] + treport
        out.twin_report.append((twin.name, treport[i][1]))
        if treport[i][1] is None:
            out.twins.append(_template(cf, kernel, tctx, [n for n, w in treport if w is None]))
    return out


def _run(ctx: RewriteContext, rewrites: list[Rewrite]
         ) -> tuple[RewriteContext, list[tuple[str, str | None]], list[RewriteContext]]:
    """Each rewrite of ``rewrites`` whose preconditions hold applied in order: the context, per rewrite None where
    it applied or why not, and per rewrite the context it started from (left unchanged: each works on a copy)."""
    report: list[tuple[str, str | None]] = []
    before: list[RewriteContext] = []
    for r in rewrites:
        before.append(ctx)
        try:
            why = r.applies(ctx)
            if why is None:
                ctx = r.rewrite(_copy(ctx))  # a rewrite that fails half-way leaves ctx as it was
        except Exception as e:  # a construct the analysis did not foresee: this rewrite is skipped, not the rest
            why = f"internal error, skipped ({type(e).__name__}: {e})"
        report.append((r.name, why))
    return ctx, report, before


def _template(cf: CudaFile, kernel: str, ctx: RewriteContext, applied: list[str]) -> KernelTemplate:
    """The rewritten context as a template: helpers above the kernel, the params header; checked to parse and
    to use no ``KT_`` name without a parameter."""
    text = _with_helpers(ctx)
    rcf = parse_cuda(text, cf.path)
    errors = kernel_has_errors(rcf, kernel) if any(k.name == kernel for k in rcf.kernels) else ["no kernel"]
    if errors:
        raise KerntuneError(f"internal: the rewritten kernel '{kernel}' does not parse ({errors[0]}); "
                            f"rewrites: {', '.join(applied)}", cf.path)
    missing = set(re.findall(r"\bKT_(\w+)\b", text)) - set(ctx.params)
    if missing:
        raise KerntuneError(f"internal: the rewritten kernel '{kernel}' uses {', '.join(sorted(missing))} without a "
                            f"parameter; rewrites: {', '.join(applied)}", cf.path)
    origin = "rewrite:" + "+".join(applied)
    header = _header(kernel, origin, ctx)
    space = ParamSpace(kernel=kernel, params=ctx.params, constraints=ctx.constraints)
    return KernelTemplate(kernel=kernel, path=cf.path, original_text=cf.text, text=header + text, space=space,
                          sites=[], origin=origin, launch=ctx.launch, entry=None)


def rewrite_template(cf: CudaFile, kernel: str, spec: TuningSpec | None = None,
                     structural: KernelTemplate | None = None) -> KernelTemplate:
    """The composed rewrite template of ``kernel``; KerntuneError saying why each rewrite does not apply when
    none does."""
    got = compose(cf, kernel, spec, structural)
    if got.template is None:
        k = cf.kernel(kernel)
        why = "; ".join(f"{n}: {w}" for n, w in got.report)
        raise KerntuneError(f"no semantic rewrite applies to kernel '{kernel}': {why}", cf.path, k.name_span.line,
                            k.name_span.col)
    return got.template


def _copy(ctx: RewriteContext) -> RewriteContext:
    return replace(ctx, params=dict(ctx.params), constraints=list(ctx.constraints), launch=copy.deepcopy(ctx.launch),
                   helpers=set(ctx.helpers), notes=list(ctx.notes))


def _identifiers(ctx: RewriteContext) -> set[str]:
    v = ctx.view()
    from agent_core.templating.rewrites.syntax import walk
    return {v.t(n) for n in walk(v.body) if n.type == "identifier"}


def _with_helpers(ctx: RewriteContext) -> str:
    """The text with the helper snippets the rewrites used, guarded, above the kernel (and above its spec
    comment, which must stay directly above the kernel)."""
    if not ctx.helpers:
        return ctx.text
    v = ctx.view()
    at = v.k.span.start
    sp = find_spec(v.cf, ctx.kernel)
    if sp is not None and sp.span is not None and sp.span.start < at:
        at = sp.span.start
    blocks = []
    for name in sorted(ctx.helpers):
        guard, code = HELPERS[name]
        blocks.append(f"#ifndef {guard}\n#define {guard}\n{code}\n#endif  // {guard}\n\n")
    return apply_edits(ctx.text, [(at, at, "".join(blocks))])


def _header(kernel: str, origin: str, ctx: RewriteContext) -> str:
    lines = [HEADER_BEGIN,
             f"// kerntune: semantic rewrite template of kernel '{kernel}' ({origin}); compile with "
             "-DKT_<PARAM>=<value>"]
    lines += [f"//   {n}" for n in ctx.notes]
    if ctx.launch:
        lines.append("// kerntune: launched on grid ({}) x block ({}), smem {}".format(
            ", ".join(map(str, _as_list(ctx.launch.get("grid")))), ", ".join(map(str, _as_list(ctx.launch.get("block")))),
            ctx.launch.get("smem") or 0))
    for p in ctx.params.values():
        m = macro_name(p.name)
        lines += [f"// {p.name} ({p.kind}): {p.why}", f"#ifndef {m}", f"#define {m} {p.original}", "#endif"]
        if p.kind == "unroll":
            lines += [f"constexpr int kerntune_{p.name}_value = {m};  // #pragma unroll does not expand macros",
                      f"#undef {m}", f"constexpr int {m} = kerntune_{p.name}_value;"]
    lines.append(HEADER_END)
    return "\n".join(lines) + "\n"


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]
