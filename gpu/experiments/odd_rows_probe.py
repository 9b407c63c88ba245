"""Why does the fused add + RMSNorm expert reach 98% of copy bandwidth on 8192x4096 but 69% on 4097x2053 (the fp32
residual variant, every configuration of its space, 2026-11-24f)? Odd rows, or a smaller problem?

The corpus variant bench/corpus/fused_add_rms_norm/add_rms_norm_fp32_residual.cu with its spec's size sets replaced
by shapes that separate the two: the odd width at the even row count and the reverse, the same widths at twice the
rows. Every valid configuration of the bound expert is verified against the original on every shape and timed
(GpuBackend.evaluate); a reference for each shape's traffic (the same bytes: hidden bf16 and residual f32 read,
residual f32 and a bf16 output written, flat and 16-byte vectorized, no reduction; cupy, after an L2 flush); ncu
counters of the best configuration on the odd shape and on its even twin.

    python gpu/experiments/odd_rows_probe.py > $OUT/odd_rows_probe.txt
"""
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent_core.measure.backend import Problem, Variant  # noqa: E402
from agent_core.measure.compiler import compile_kernel, compile_many  # noqa: E402
from agent_core.measure.gpu_backend import GpuBackend  # noqa: E402
from agent_core.model import macro_name, sha256_text  # noqa: E402
from agent_core.search import tuner  # noqa: E402
from agent_core.source import spec as spec_mod  # noqa: E402
from agent_core.templating import experts  # noqa: E402
from agent_core.templating.space import valid_configs  # noqa: E402

VARIANT = ROOT / "bench" / "corpus" / "fused_add_rms_norm" / "add_rms_norm_fp32_residual.cu"
KERNEL = "add_residual_rmsnorm_kernel"
SHAPES = [(4097, 2053), (4096, 2048), (4097, 2048), (4096, 2053), (8194, 2053), (8192, 2048), (8192, 4096)]
METRICS = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
           "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "sm__inst_executed.sum",
           "smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__warps_active.avg.pct_of_peak_sustained_active",
           "launch__registers_per_thread", "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor",
           "lts__t_sectors_srcunit_tex_op_write.sum", "lts__t_requests_srcunit_tex_op_write.sum"]


def reference(shapes) -> list[float]:
    """us of the same traffic without the reduction, per shape (median of 20 after an L2 flush)."""
    import cupy as cp
    src = r"""#include <cuda_bf16.h>
extern "C" __global__ void ref(__nv_bfloat16* __restrict__ o, float* __restrict__ r,
                               const __nv_bfloat16* __restrict__ h, long long n) {
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  const long long step = (long long)gridDim.x * blockDim.x * 4;
  for (; i + 3 < n; i += step) {
    float4 a = *reinterpret_cast<const float4*>(r + i);
    uint2 hb = *reinterpret_cast<const uint2*>(h + i);
    const __nv_bfloat16* hv = reinterpret_cast<const __nv_bfloat16*>(&hb);
    a.x += __bfloat162float(hv[0]); a.y += __bfloat162float(hv[1]);
    a.z += __bfloat162float(hv[2]); a.w += __bfloat162float(hv[3]);
    *reinterpret_cast<float4*>(r + i) = a;
    __nv_bfloat16 ob[4] = {__float2bfloat16(a.x), __float2bfloat16(a.y), __float2bfloat16(a.z), __float2bfloat16(a.w)};
    *reinterpret_cast<uint2*>(o + i) = *reinterpret_cast<uint2*>(ob);
  }
  for (; i < n; ++i) { float v = r[i] + __bfloat162float(h[i]); r[i] = v; o[i] = __float2bfloat16(v); }
}"""
    k = cp.RawKernel(src, "ref", backend="nvcc")
    flush = cp.empty(200 * 2**20, dtype=cp.uint8)
    out = []
    for t, d in shapes:
        n = t * d
        o, h = cp.zeros(n + 8, dtype=cp.uint16), cp.zeros(n + 8, dtype=cp.uint16)
        r = cp.zeros(n + 4, dtype=cp.float32)
        ts = []
        for _ in range(21):
            flush.fill(1)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            k((132 * 8,), (512,), (o, r, h, cp.int64(n)))
            b.record()
            b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        out.append(sorted(ts[1:])[10])
    return out


def main() -> None:
    backend = GpuBackend()
    dev = backend.device()
    bw = dev.copy_bandwidth_gbps or backend.measure_copy_bandwidth()
    print(f"{dev.name}, copy {bw:.0f} GB/s", flush=True)
    prep = tuner.prepare(str(VARIANT), KERNEL)
    spec = replace(prep.spec, sizes=[{"tokens": t, "hidden_dim": d} for t, d in SHAPES])
    nbytes = [spec_mod.bytes_moved(spec, s) for s in spec.sizes]
    try:
        ref_us = reference(SHAPES)
        for (t, d), u, nb in zip(SHAPES, ref_us, nbytes):
            print(f"  reference {t}x{d}: {u:.1f} us, {nb / (u * 1e3):.0f} GB/s ({100 * nb / (u * 1e3) / bw:.0f}%)",
                  flush=True)
    except Exception as e:  # a side figure
        print("  reference failed:", str(e)[:300], flush=True)
    b = next(b for b in experts.candidates(prep.cf, KERNEL, spec) if b.expert.name == "fused_add_rms_norm")
    t = experts.bind(b, prep.cf, spec)
    configs = valid_configs(t.space, spec.sizes)
    print(f"{len(configs)} configurations valid on {SHAPES}", flush=True)
    ref = compile_kernel(prep.text, KERNEL, arch=dev.arch, include_dirs=[str(VARIANT.parent)], source_path=str(VARIANT))
    problem = Problem(spec=spec, reference=ref, reference_launches=prep.original_launches(spec),
                      original_hash=sha256_text(prep.text), template_hash=t.template_hash, spec_hash=spec.spec_hash)
    orig = backend.start(problem)
    print("original: " + ", ".join(f"{a}x{b_}: {o.median_us:.1f} us ({100 * n / (o.median_us * 1e3) / bw:.0f}%)"
                                   for (a, b_), o, n in zip(SHAPES, orig, nbytes)), flush=True)
    rows = []
    jobs = [dict(text=t.text, kernel=t.entry, arch=dev.arch, defines={macro_name(n): v for n, v in cfg.items()},
                 include_dirs=[str(VARIANT.parent)], source_path=str(VARIANT)) for cfg in configs]
    for cfg, comp in zip(configs, compile_many(jobs)):
        if isinstance(comp, Exception):
            print(f"  {cfg}: compile failed: {str(comp)[:200]}", flush=True)
            continue
        v = Variant(params=cfg, compiled=comp, launches=tuner._launches(t, spec, cfg))
        ev = backend.evaluate(v)
        if not ev.ok:
            print(f"  {cfg}: {ev.status} {ev.error[:200] if ev.error else ''}", flush=True)
            continue
        us = [tm.median_us for tm in ev.timings]
        pct = [100 * n / (u * 1e3) / bw for n, u in zip(nbytes, us)]
        print(f"  {cfg} regs {comp.resources.registers}: " + ", ".join(f"{u:.1f} ({p:.0f}%)" for u, p in zip(us, pct)),
              flush=True)
        rows.append((us, cfg, v))
    for si in (0, 1):
        best = min(rows, key=lambda r: r[0][si])
        print(f"best on {SHAPES[si]}: {best[1]} {best[0][si]:.1f} us", flush=True)
        for sj in (0, 1):
            prof = backend.profile(best[2], METRICS, sj)
            m = prof.get("metrics", {})
            print(f"  ncu {best[1]} on {SHAPES[sj]}: " + json.dumps({k: round(x, 2) for k, x in m.items()})
                  + f"; top stalls {prof.get('top_stalls')}" + (f"; error {prof['error']}" if "error" in prof else ""),
                  flush=True)
    backend.close()


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\n{time.time() - t0:.0f} s")
