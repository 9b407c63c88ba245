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
from agent_core.templating.rewrites.load_hint import LoadHint
from agent_core.templating.rewrites.outputs_per_thread import OutputsPerThread
from agent_core.templating.rewrites.split_reduction import SplitReduction
from agent_core.templating.rewrites.vectorize import Vectorize
from agent_core.templating.rewrites.warp_reduce import WarpReduce
from agent_core.templating.rewrites.work_per_thread import WorkPerThread
from agent_core.templating.templatize import templatize
from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END, strip_header

# The order matters: a thread's outputs widened first (its loads become vectors across its neighbouring outputs;
# the loop around them stays what it was), reductions next (they change what the loops around them look like; a
# thread's serial reduction split across the block's y threads), then one element per thread into a loop (so that it can be
# vectorized), passes over one row fused (their fallback is then
# vectorized; they use its VEC), vectors, and last the per-call and per-kernel knobs.
REWRITES: list[Rewrite] = [OutputsPerThread(), WarpReduce(), SplitReduction(), WorkPerThread(), FusePasses(), Vectorize(),
                           LoadHint(), FastMath(), LaunchBounds()]
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
_LANES = """\
// kerntune rewrite helpers: N neighbouring outputs of one thread (outputs_per_thread); lane k is output i + k
#include <type_traits>
template <typename T, int N> struct kt_lanes {
  T v[N];
  kt_lanes() = default;
  __device__ __forceinline__ kt_lanes(const T& s) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = s;
  }
  template <typename U> __device__ __forceinline__ kt_lanes(const kt_lanes<U, N>& o) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = o.v[k];
  }
};
template <typename X> struct kt_lanes_of { static constexpr int n = 0; };
template <typename T, int N> struct kt_lanes_of<kt_lanes<T, N>> { static constexpr int n = N; };
template <typename... A> __host__ __device__ constexpr int kt_lanes_n() {
  int n = 0;
  ((n = kt_lanes_of<A>::n > n ? kt_lanes_of<A>::n : n), ...);
  return n;
}
template <typename T> __device__ __forceinline__ const T& kt_lane(const T& x, int) { return x; }
template <typename T, int N> __device__ __forceinline__ const T& kt_lane(const kt_lanes<T, N>& x, int k) { return x.v[k]; }
// f lane by lane (a value that is not lanes is the same in every lane)
template <typename F, typename... A> __device__ __forceinline__ auto kt_apply(F f, const A&... a) {
  constexpr int N = kt_lanes_n<A...>();
  kt_lanes<decltype(f(kt_lane(a, 0)...)), N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) r.v[k] = f(kt_lane(a, k)...);
  return r;
}
template <typename A, typename B, typename = std::enable_if_t<(kt_lanes_n<A, B>() > 0)>>
__device__ __forceinline__ auto operator+(const A& a, const B& b) {
  return kt_apply([](const auto& x, const auto& y) { return x + y; }, a, b);
}
template <typename T, int N, typename B> __device__ __forceinline__ kt_lanes<T, N>& operator+=(kt_lanes<T, N>& a, const B& b) {
#pragma unroll
  for (int k = 0; k < N; ++k) a.v[k] += kt_lane(b, k);
  return a;
}
template <typename A, typename B, typename = std::enable_if_t<(kt_lanes_n<A, B>() > 0)>>
__device__ __forceinline__ auto operator-(const A& a, const B& b) {
  return kt_apply([](const auto& x, const auto& y) { return x - y; }, a, b);
}
template <typename T, int N, typename B> __device__ __forceinline__ kt_lanes<T, N>& operator-=(kt_lanes<T, N>& a, const B& b) {
#pragma unroll
  for (int k = 0; k < N; ++k) a.v[k] -= kt_lane(b, k);
  return a;
}
template <typename A, typename B, typename = std::enable_if_t<(kt_lanes_n<A, B>() > 0)>>
__device__ __forceinline__ auto operator*(const A& a, const B& b) {
  return kt_apply([](const auto& x, const auto& y) { return x * y; }, a, b);
}
template <typename T, int N, typename B> __device__ __forceinline__ kt_lanes<T, N>& operator*=(kt_lanes<T, N>& a, const B& b) {
#pragma unroll
  for (int k = 0; k < N; ++k) a.v[k] *= kt_lane(b, k);
  return a;
}
template <typename A, typename B, typename = std::enable_if_t<(kt_lanes_n<A, B>() > 0)>>
__device__ __forceinline__ auto operator/(const A& a, const B& b) {
  return kt_apply([](const auto& x, const auto& y) { return x / y; }, a, b);
}
template <typename T, int N, typename B> __device__ __forceinline__ kt_lanes<T, N>& operator/=(kt_lanes<T, N>& a, const B& b) {
#pragma unroll
  for (int k = 0; k < N; ++k) a.v[k] /= kt_lane(b, k);
  return a;
}
// min and max lane by lane, under their own names (a reduction `acc = fmaxf(acc, e)` keeps its form)
#define KERNTUNE_LANES_MINMAX(F)                                                                                      \\
  template <typename A, typename B, typename = std::enable_if_t<(kt_lanes_n<A, B>() > 0)>>                     \\
  __device__ __forceinline__ auto F(const A& a, const B& b) {                                                   \\
    return kt_apply([](const auto& x, const auto& y) { return F(x, y); }, a, b);                                \\
  }
KERNTUNE_LANES_MINMAX(fmaxf)
KERNTUNE_LANES_MINMAX(fminf)
KERNTUNE_LANES_MINMAX(fmax)
KERNTUNE_LANES_MINMAX(fmin)
KERNTUNE_LANES_MINMAX(max)
KERNTUNE_LANES_MINMAX(min)
#undef KERNTUNE_LANES_MINMAX
template <typename T, int N> __device__ __forceinline__ kt_lanes<T, N> operator-(const kt_lanes<T, N>& a) {
  return kt_apply([](const T& x) { return -x; }, a);
}
// loads predicated in PTX (no branch: a loop of them keeps its loads in flight); B bytes, zero where not taken
template <int B> struct kt_bits;
template <> struct kt_bits<1> { using type = unsigned char; };
template <> struct kt_bits<2> { using type = unsigned short; };
template <> struct kt_bits<4> { using type = unsigned int; };
template <> struct kt_bits<8> { using type = unsigned long long; };
template <> struct kt_bits<16> { using type = uint4; };
template <int B> __device__ __forceinline__ typename kt_bits<B>::type kt_ld_if(const void* p, bool take);
template <> __device__ __forceinline__ unsigned char kt_ld_if<1>(const void* p, bool take) {
  unsigned short v = 0;
  asm("{ .reg .pred q; setp.ne.b32 q, %2, 0; @q ld.global.u8 %0, [%1]; }" : "+h"(v) : "l"(p), "r"((int)take));
  return (unsigned char)v;
}
template <> __device__ __forceinline__ unsigned short kt_ld_if<2>(const void* p, bool take) {
  unsigned short v = 0;
  asm("{ .reg .pred q; setp.ne.b32 q, %2, 0; @q ld.global.u16 %0, [%1]; }" : "+h"(v) : "l"(p), "r"((int)take));
  return v;
}
template <> __device__ __forceinline__ unsigned int kt_ld_if<4>(const void* p, bool take) {
  unsigned int v = 0;
  asm("{ .reg .pred q; setp.ne.b32 q, %2, 0; @q ld.global.u32 %0, [%1]; }" : "+r"(v) : "l"(p), "r"((int)take));
  return v;
}
template <> __device__ __forceinline__ unsigned long long kt_ld_if<8>(const void* p, bool take) {
  unsigned long long v = 0;
  asm("{ .reg .pred q; setp.ne.b32 q, %2, 0; @q ld.global.u64 %0, [%1]; }" : "+l"(v) : "l"(p), "r"((int)take));
  return v;
}
template <> __device__ __forceinline__ uint4 kt_ld_if<16>(const void* p, bool take) {
  uint4 v = make_uint4(0, 0, 0, 0);
  asm("{ .reg .pred q; setp.ne.b32 q, %5, 0; @q ld.global.v4.u32 {%0, %1, %2, %3}, [%4]; }"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w) : "l"(p), "r"((int)take));
  return v;
}
// outputs i .. i + N - 1 of p, live of which exist: one vector load when all do and the address is aligned, else
// lane by lane; every load predicated, none branched around
template <int N, typename T> __device__ __forceinline__ kt_lanes<T, N> kt_gather(const T* p, long long i, long long live) {
  if constexpr (N == 1) {  // one output: the kernel's own load (the caller's guard says it exists)
    kt_lanes<T, 1> r;
    r.v[0] = p[i];
    return r;
  }
  const bool vec = live >= N && kt_aligned<N>(p + i);
  union { typename kt_bits<sizeof(T) * N>::type bits; T v[N]; } w;
  w.bits = kt_ld_if<sizeof(T) * N>(p + i, vec);
  kt_lanes<T, N> r;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    union { typename kt_bits<sizeof(T)>::type bits; T v; } s;
    s.bits = kt_ld_if<sizeof(T)>(p + i + k, !vec && k < live);
    r.v[k] = vec ? w.v[k] : s.v;
  }
  return r;
}
// the same where the thread decided once (vec: every output exists and every load of the walk is aligned); with
// vec a constant (the walk unswitched on it) the loads are plain vectors, or lanes, nothing else in the loop
template <int N, typename T> __device__ __forceinline__ kt_lanes<T, N> kt_gather(const T* p, long long i, long long live, bool vec) {
  kt_lanes<T, N> r;
  if constexpr (N == 1) {
    r.v[0] = p[i];
  } else if (vec) {
    const kt_pack<T, N> w = kt_load<N>(p + i, 0);
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = w.v[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      union { typename kt_bits<sizeof(T)>::type bits; T v; } s;
      s.bits = kt_ld_if<sizeof(T)>(p + i + k, k < live);
      r.v[k] = s.v;
    }
  }
  return r;
}
template <int N, typename T, typename V> __device__ __forceinline__ void kt_scatter(T* p, long long i, const V& x, long long live) {
  if constexpr (N == 1) {  // one output: the kernel's own store
    p[i] = kt_lane(x, 0);
    return;
  }
  if (live >= N && kt_aligned<N>(p + i)) {
    kt_pack<T, N> y;
#pragma unroll
    for (int k = 0; k < N; ++k) y.v[k] = kt_lane(x, k);
    kt_store<N>(p + i, 0, y);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (k < live) p[i + k] = kt_lane(x, k);
  }
}"""
_PACK_HINT = """\
// kerntune rewrite helpers: a vector load whose line is not kept in L1 at H = 1 (load_hint):
// ld.global.L1::no_allocate.L2::256B has the plain load's semantics; the memory clobber keeps it in order with
// the kernel's stores as a plain load is; H = 0 and packs of another size: the plain load
template <int H, int N, typename T> __device__ __forceinline__ kt_pack<T, N> kt_load_hint(const T* p, long long k) {
  const kt_pack<T, N>* q = reinterpret_cast<const kt_pack<T, N>*>(p) + k;
  constexpr int B = sizeof(kt_pack<T, N>);
  if constexpr (H == 0 || (B != 4 && B != 8 && B != 16)) {
    return *q;
  } else {
    kt_pack<T, N> r;
    unsigned* u = reinterpret_cast<unsigned*>(&r);
    if constexpr (B == 16)
      asm volatile("ld.global.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(q) : "memory");
    else if constexpr (B == 8)
      asm volatile("ld.global.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(q) : "memory");
    else
      asm volatile("ld.global.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(u[0]) : "l"(q) : "memory");
    return r;
  }
}"""
_LANES_HINT = """\
// kerntune rewrite helpers: kt_gather (decided once) whose vector load is kt_load_hint<H> (load_hint)
template <int H, int N, typename T> __device__ __forceinline__ kt_lanes<T, N> kt_gather_hint(const T* p, long long i, long long live, bool vec) {
  if constexpr (N == 1) {
    return kt_gather<N>(p, i, live, vec);
  } else {
    if (!vec) return kt_gather<N>(p, i, live, false);
    const kt_pack<T, N> w = kt_load_hint<H, N>(p + i, 0);
    kt_lanes<T, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = w.v[k];
    return r;
  }
}"""
_CLUSTER = "#include <cooperative_groups.h>  // kerntune rewrite helpers: thread-block clusters (cluster_split)"
HELPERS = {"pack": ("KERNTUNE_REWRITE_PACK", _PACK), "fast_math": ("KERNTUNE_REWRITE_FAST_MATH", _FAST_MATH),
           "cluster": ("KERNTUNE_REWRITE_CLUSTER", _CLUSTER),
           "pack_lanes": ("KERNTUNE_REWRITE_PACK_LANES", _LANES),  # after "pack" (sorted): it uses kt_pack
           # sorted after "pack" (kt_pack) and, the gather's, after "pack_lanes" (kt_lanes, kt_gather)
           "pack_hint": ("KERNTUNE_REWRITE_PACK_HINT", _PACK_HINT),
           "pack_lanes_hint": ("KERNTUNE_REWRITE_PACK_LANES_HINT", _LANES_HINT)}


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
    type_args = _type_args(cf, kernel, spec)
    if structural is not None:
        params = copy.deepcopy(structural.space.params)
        blocks = [p.name for p in params.values() if p.kind == "block_size"]
        return RewriteContext(kernel, cf.path, strip_header(structural.text), params,
                              list(structural.space.constraints), launch, blocks[0] if len(blocks) == 1 else None,
                              type_args=type_args)
    return RewriteContext(kernel, cf.path, cf.text, {}, [], launch, None, type_args=type_args)


def _type_args(cf: CudaFile, kernel: str, spec: TuningSpec | None) -> dict[str, str]:
    """The kernel's type template parameters -> the scalar C type they are instantiated with: the instantiation
    the spec tunes (``spec_instantiation``: its ``template_args``, the launches' arguments or the buffers'
    dtypes), else the one type every launch in the file names (``k<__nv_bfloat16><<<...>>>``); a parameter
    neither gives is left out (``{}`` for a kernel that is no template)."""
    from agent_core.templating.rewrites.syntax import ELEM_BYTES, base_type
    k = cf.kernel(kernel)
    if k is None or not any(tp.kind == "type" for tp in k.template_params):
        return {}
    args: list[str] = []
    if spec is not None:
        from agent_core.source.instantiation import spec_instantiation
        try:
            args = spec_instantiation(cf, k, spec)
        except KerntuneError:
            args = []
    out: dict[str, str] = {}
    for i, tp in enumerate(k.template_params):
        if tp.kind != "type" or not tp.name:
            continue
        if i < len(args) and base_type(args[i]) in ELEM_BYTES:
            out[tp.name] = args[i]
            continue
        named = {base_type(site.template_args[i].text) for site in k.launch_sites if i < len(site.template_args)}
        if len(named) == 1 and next(iter(named)) in ELEM_BYTES and all(
                i < len(site.template_args) for site in k.launch_sites):
            out[tp.name] = next(iter(named))
    return out


def compose(cf: CudaFile, kernel: str, spec: TuningSpec | None = None,
            structural: KernelTemplate | None = None) -> Outcome:
    """Apply every rewrite whose preconditions hold, in ``REWRITES`` order."""
    cf.kernel(kernel)
    if kernel_has_errors(cf, kernel):
        return Outcome(None, [(r.name, "the kernel does not parse") for r in REWRITES])
    start = start_context(cf, kernel, spec, structural)
    if any(w.startswith("kt_") for w in _identifiers(start)):
        return Outcome(None, [(r.name, "the kernel already uses names starting with kt_ (kerntune's)") for r in REWRITES])
    if start.capped:
        # A block capped by the parameter (min(d, BLOCK)) is given to the rewrites only where none applies to the
        # kernel as written: where some do, their composition (recorded on the GPU; CI replays it by its text's
        # hash) stays what it was, and the structural template tunes the cap beside it.
        plain = RewriteContext(kernel, cf.path, cf.text, {}, [], _spec_launch(cf, kernel, spec), None,
                               type_args=start.type_args)
        got = _compose(cf, kernel, plain)
        if got.template is not None:
            return got
    return _compose(cf, kernel, start)


def _spec_launch(cf: CudaFile, kernel: str, spec: TuningSpec | None) -> dict | None:
    if spec is None:
        try:
            spec = find_spec(cf, kernel)
        except KerntuneError:
            spec = None
    return {"grid": list(spec.grid), "block": list(spec.block), "smem": spec.smem or "0"} if spec is not None else None


def _compose(cf: CudaFile, kernel: str, start: RewriteContext) -> Outcome:
    """``compose`` from the context ``start``."""
    ctx, report, before = _run(start, REWRITES)
    applied = [n for n, why in report if why is None]
    if not applied:
        return Outcome(None, report)
    ctx = _finish(ctx, applied)
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
            tapplied = [n for n, w in treport if w is None]
            out.twins.append(_template(cf, kernel, _finish(tctx, tapplied), tapplied))
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


def _finish(ctx: RewriteContext, applied: list[str]) -> RewriteContext:
    """Each applied rewrite's last step on the composed text, in composition order."""
    by_name = {r.name: r for r in REWRITES + list(TWINS.values())}
    for name in applied:
        ctx = by_name[name].finish(_copy(ctx))
    return ctx


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
    space = ParamSpace(kernel=kernel, params=ctx.params, constraints=ctx.constraints, seeds=seeds(ctx.params))
    return KernelTemplate(kernel=kernel, path=cf.path, original_text=cf.text, text=header + text, space=space,
                          sites=[], origin=origin, launch=ctx.launch, entry=None)


SEED_BLOCKS = (128, 256, 512)  # threads per block of the search's starting points


def seeds(params: dict) -> list[dict[str, int]]:
    """Where the search of a rewrite template starts, after the original: the usual shape of memory-bound CUDA code,
    the widest vector (``VEC``) at 128, 256 and 512 threads per block, every other parameter at its original
    value (no row cache, no load hint, the original's work per thread). Only where the template has a block size
    or a vector width to set; a starting point the constraints rule out is skipped by the search."""
    from agent_core.templating.rewrites.vectorize import VEC
    orig = {n: p.original for n, p in params.items()}
    blocks = [n for n, p in params.items() if p.kind == "block_size"]
    out: list[dict[str, int]] = []
    for b in SEED_BLOCKS if blocks else (None,):
        cfg = dict(orig)
        if b is not None:
            if not all(b in params[n].values for n in blocks):
                continue
            cfg.update({n: b for n in blocks})
        if VEC in params:
            cfg[VEC] = max(params[VEC].values)
        if cfg != orig and cfg not in out:
            out.append(cfg)
    return out


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
    if _inside_extern_c(ctx.text, at):  # templates may not have C linkage: the helpers get C++'s back
        blocks = ['extern "C++" {  // kerntune: the helpers below are templates\n', *blocks,
                  '}  // extern "C++"\n\n']
    return apply_edits(ctx.text, [(at, at, "".join(blocks))])


def _inside_extern_c(text: str, at: int) -> bool:
    """Whether offset ``at`` of the file lies inside an ``extern "C" { ... }`` block (a kernel written for a C
    interface), as the parse reads the file: the innermost linkage block around it is a "C" one."""
    from agent_core.source.cuda_parse import parse_tree
    b = len(text[:at].encode("utf-8"))
    n = parse_tree(text.encode("utf-8")).root_node.descendant_for_byte_range(b, b)
    while n is not None:
        if n.type == "declaration_list" and n.parent is not None and n.parent.type == "linkage_specification":
            value = n.parent.child_by_field_name("value")
            return value is not None and value.text.decode("utf-8", "replace").strip('"') == "C"
        n = n.parent
    return False


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
