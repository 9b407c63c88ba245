"""Why do the bound row experts reach 72-76% of copy bandwidth on 16-bit rows of 4096 where a hand-written kernel of
the same shape (row_pipeline_probe.py) reaches ~90%? The recorded expert templates (read from the corpus run's
store, gpu/results/2026-11-24c/corpus_families_41/results.sqlite.gz) compiled as recorded and with one edit each,
beside the probe's kernels, each timed two ways: 50 back-to-back launches (warm), and one launch after the 4x-L2
memset that kerntune's worker flushes with (as the bench measures shapes of <= 3x L2).

    python gpu/experiments/expert_rows_probe.py > $OUT/expert_rows_probe.txt
"""
import gzip
import re
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

HERE = Path(__file__).resolve().parent
STORE = HERE.parents[1] / "gpu" / "results" / "2026-11-24c" / "corpus_families_41" / "results.sqlite.gz"
ROWS, HIDDEN = 8192, 4096
COPY_GBPS = 2978.3  # the corpus run's measured copy bandwidth (bench_results.json copy_bw_gbps)

VEC_ONLY = lambda t: t.replace("const bool vec = vec_ok", "const bool vec = true || vec_ok")
DIV_MUL = lambda t: t.replace("v[i][j] = v[i][j] / s;", "v[i][j] = v[i][j] * (1.f / s);")
GB = ("  Vec<W, KT_VEC> gr[IT], br[IT];  // gamma and beta, in flight while the row is reduced\n"
      "  row_load_raw<KT_VEC, IT>(gamma, hidden, vec, gr);\n  row_load_raw<KT_VEC, IT>(beta, hidden, vec, br);\n")
LATE_GB = lambda t: t.replace(GB, "").replace("#pragma unroll\n  for (int i = 0; i < IT; ++i) {\n    float g[KT_VEC], b[KT_VEC];",
                                               GB + "#pragma unroll\n  for (int i = 0; i < IT; ++i) {\n    float g[KT_VEC], b[KT_VEC];")
BF16_SHIFT = lambda t: t.replace("float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }",
                                 "float to_f(__nv_bfloat16 v) { return __uint_as_float(((unsigned)__bfloat16_as_ushort(v)) << 16); }")
MINB = lambda t: t.replace("__launch_bounds__((KT_THREADS * KT_ROWS))", "__launch_bounds__((KT_THREADS * KT_ROWS), KT_MINB)")
EDITS = {
    "as recorded": lambda t: t,
    "div->mul": DIV_MUL,
    "vec only": VEC_ONLY,
    "div->mul + vec only": lambda t: DIV_MUL(VEC_ONLY(t)),
    "vec only + late gamma/beta": lambda t: LATE_GB(VEC_ONLY(t)),
    "vec only + bf16 by shift": lambda t: BF16_SHIFT(VEC_ONLY(t)),
    "vec only + min blocks": lambda t: MINB(VEC_ONLY(t)),
    "div->mul + vec only + min blocks": lambda t: MINB(DIV_MUL(VEC_ONLY(t))),
}

KERNELS = [  # corpus variant, expert, symbol, dtype, kind
    ("softmax/softmax_pow2_block_fp16.cu", "expert:softmax", "kt_softmax_cunn_SoftMaxForward", "fp16", "softmax"),
    ("layer_norm/layer_norm_sum_sq_bf16.cu", "expert:layer_norm", "kt_layer_norm_generalLayerNorm", "bf16", "layer_norm"),
    ("rms_norm/rms_norm_block_reduce_bf16.cu", "expert:rms_norm", "kt_rms_norm_rms_norm_kernel", "bf16", "rms_norm"),
]


def recorded_template(variant, origin):
    """The template text the corpus run tuned for ``variant`` with ``origin`` (its session's template)."""
    d = Path(tempfile.mkdtemp())
    (d / "s.sqlite").write_bytes(gzip.decompress(STORE.read_bytes()))
    with sqlite3.connect(d / "s.sqlite") as c:
        (text,) = c.execute("SELECT t.text FROM templates t JOIN sessions s ON s.template_hash = t.template_hash "
                            "WHERE s.path LIKE ? AND s.origin = ?", (f"%/bench/corpus/{variant}", origin)).fetchone()
    return text
CONFIGS = [(1024, 8, 2), (256, 8, 2), (256, 4, 4), (128, 8, 4)]  # THREADS, VEC, ITEMS


def compile_one(text, defines):
    d = Path(tempfile.mkdtemp())
    (d / "k.cu").write_text(text)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas=-v", *defines, "-o",
                        str(d / "k.cubin"), str(d / "k.cu")], capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr[-400:]
    regs = re.findall(r"Used (\d+) registers", r.stderr)
    return cp.RawModule(path=str(d / "k.cubin")), max(map(int, regs)) if regs else None


def timings(call, flush):
    call(); cp.cuda.Device().synchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    batched = []
    for _ in range(7):
        a.record()
        for _ in range(50):
            call()
        b.record(); b.synchronize()
        batched.append(cp.cuda.get_elapsed_time(a, b) * 1000 / 50)
    single = []
    for _ in range(30):
        flush.fill(0)
        a.record(); call(); b.record(); b.synchronize()
        single.append(cp.cuda.get_elapsed_time(a, b) * 1000)
    return float(np.median(batched)), float(np.median(single))


def main():
    l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    flush = cp.empty(4 * l2 // 4, dtype=cp.float32)
    src = cp.random.standard_normal((ROWS, HIDDEN), dtype=cp.float32)
    x16 = {"fp16": src.astype(cp.float16), "bf16": (src.view(cp.uint32) >> 16).astype(cp.uint16)}
    nbytes = ROWS * HIDDEN * 2 * 2
    print(f"{ROWS} x {HIDDEN}, {nbytes / 1e6:.0f} MB moved; % of {COPY_GBPS} GB/s; flush = memset of {4 * l2 >> 20} MB")
    print("kernel | edit | THREADS VEC ITEMS | block | regs | warm us (%) | flushed single us (%)")
    jobs = []
    for variant, origin, sym, dt, kind in KERNELS:
        text = recorded_template(variant, origin)
        seen = set()
        for edit, fn in EDITS.items():
            t2 = fn(text)
            if t2 in seen:
                continue
            seen.add(t2)
            for thr, vec, items in CONFIGS:
                jobs.append((variant, sym, dt, kind, edit, t2, thr, vec, items))
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as ex:
        built = list(ex.map(lambda j: compile_one(j[5], [f"-DKT_THREADS={j[6]}", f"-DKT_VEC={j[7]}",
                                                         f"-DKT_ITEMS={j[8]}", "-DKT_ROWS=1",
                                                         f"-DKT_MINB={max(1, 1536 // min(j[6], 256))}"]), jobs))
    for (_, sym, dt, kind, edit, _, thr, vec, items), (mod, regs) in zip(jobs, built):
        x = x16[dt]; out = cp.empty_like(x)
        w = x[0].copy(); bta = x[1].copy()
        if mod is None:
            print(f"{kind} | {edit} | {thr} {vec} {items} | compile failed: {regs}")
            continue
        f = mod.get_function(sym)
        block = min(thr, (-(-HIDDEN // (vec * items)) + 31) // 32 * 32)
        if kind == "softmax":
            args = (out, x, np.int32(HIDDEN))
        elif kind == "layer_norm":
            args = (x, w, bta, out, np.float32(1e-5), np.int32(ROWS), np.int32(HIDDEN))
        else:
            args = (out, x, w, np.float32(1e-6), np.int32(ROWS), np.int32(HIDDEN))
        call = lambda: f((ROWS,), (block, 1), args)
        out.fill(0); call(); filled = float((out != 0).mean())  # every element written (a wrong launch shows)
        warm, single = timings(call, flush)
        pw, ps = nbytes / warm / 1e3 / COPY_GBPS * 100, nbytes / single / 1e3 / COPY_GBPS * 100
        print(f"{kind} | {edit} | {thr} {vec} {items} | {block} | {regs} | {warm:.1f} ({pw:.0f}%) | {single:.1f} ({ps:.0f}%)"
              f" | written {filled:.3f}")
    # the hand-written probe kernels, the same two ways
    import row_pipeline_probe as rp
    mod, regs = rp.build(HIDDEN)
    for name, thr in (("sm_fp16_8_2_1_0_0_0", 256), ("sm_fp16_4_4_1_0_0_0", 256), ("ln_bf16_8_2_1_0_0", 256),
                      ("ln_fp16_8_2_1_0_0", 256)):
        f = mod.get_function(name)
        x = x16["fp16" if "fp16" in name else "bf16"]; out = cp.empty_like(x)
        if name.startswith("sm"):
            args = (out, x, np.int32(ROWS), np.int32(HIDDEN))
        else:
            args = (out, x, x[0].copy(), x[1].copy(), np.float32(1e-5), np.int32(ROWS), np.int32(HIDDEN))
        call = lambda: f((ROWS,), (thr,), args)
        warm, single = timings(call, flush)
        pw, ps = nbytes / warm / 1e3 / COPY_GBPS * 100, nbytes / single / 1e3 / COPY_GBPS * 100
        print(f"probe | {name} | - | {thr} | {regs.get(name)} | {warm:.1f} ({pw:.0f}%) | {single:.1f} ({ps:.0f}%)")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(HERE))
    main()
