"""Row-shape probe: the bool-mask fp16 softmax's expert binding (the corpus variant masked_softmax_bool_key_mask_fp16,
the binding that verified on the GPU) at several block shapes on its big shape 4 x 16 x 512 x 1024: the search's
best (a block a row of 64 threads, 16 elements a thread), a warp a row with 4 or 8 rows a block (32 elements a
thread, no shared-memory reduction), the same with the item capacity of the 4096-key decode set (ITEMS=16: every
item count's path in the kernel, so its registers) with and without __launch_bounds__' blocks per SM capping the
registers, and 128 / 256 threads a row. Each verified against the first and timed (cupy events, median of 40
launches, L2 flushed before each), registers and spills from ptxas; a device copy of the same bytes beside it.
python3 gpu/experiments/row_shape_probe.py > OUT.json"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating import experts as X

VARIANT = "bench/corpus/softmax/masked_softmax_bool_key_mask_fp16.cu"
KERNEL = "masked_softmax_bool_key_mask_kernel"
WORK = Path(tempfile.mkdtemp(prefix="row_probe_"))
# name: (THREADS, ROWS, VEC, ITEMS, min blocks per SM or 0)
CONFIGS = {"best_256_1_8_2": (256, 1, 8, 2, 0), "warp_rows4_it4": (32, 4, 8, 4, 0), "warp_rows8_it4": (32, 8, 8, 4, 0),
           "warp_rows4_it16": (32, 4, 8, 16, 0), "warp_rows4_it16_minb8": (32, 4, 8, 16, 8),
           "warp_rows4_it16_minb12": (32, 4, 8, 16, 12), "warp_rows8_it16_minb6": (32, 8, 8, 16, 6),
           "t64_rows2_it2": (64, 2, 8, 2, 0), "t128_rows1_it1": (128, 1, 8, 1, 0), "t256_rows1_it1": (256, 1, 8, 1, 0),
           "best_minb16": (256, 1, 8, 2, 16)}

cf = parse_cuda(Path(VARIANT).read_text(), VARIANT)
spec = S.find_spec(cf, KERNEL)
b = next(b for b in X.candidates(cf, KERNEL, spec) if "consecutive rows share one" in b.describe()
         and "hidden=`k_len`" in b.describe())
text = X.bind(b, cf, spec).text
name = re.search(r"__launch_bounds__\(.*\) (\w+)\(", text).group(1)
B, H, Q, K = 4, 16, 512, 1024
rows = B * H * Q
mods, regs = {}, {}
for v, (t, r, vec, it, minb) in CONFIGS.items():
    src = text
    if minb:
        src = re.sub(r"__launch_bounds__\((.*)\) " + name, lambda m: f"__launch_bounds__({m.group(1)}, {minb}) {name}",
                     src, count=1)
    (WORK / f"{v}.cu").write_text(src)
    p = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "-Xptxas", "-v", f"-DKT_THREADS={t}", f"-DKT_ROWS={r}",
                        f"-DKT_VEC={vec}", f"-DKT_ITEMS={it}", "-o", str(WORK / f"{v}.cubin"), str(WORK / f"{v}.cu")],
                       capture_output=True, text=True, check=True)
    regs[v] = {"registers": int(re.findall(r"Used (\d+) registers", p.stderr)[-1]),
               "spill_stores": int((re.findall(r"(\d+) bytes spill stores", p.stderr) or ["0"])[-1])}
    mods[v] = cp.RawModule(path=str(WORK / f"{v}.cubin")).get_function(name)
rng = np.random.default_rng(0)
x = cp.asarray(rng.standard_normal((rows, K)).astype(np.float16))
mask = cp.asarray(rng.integers(0, 2, (B, K)).astype(np.uint8))
flush = cp.empty(256 << 20, dtype=cp.uint8)
outs = {v: cp.zeros((rows, K), dtype=cp.float16) for v in CONFIGS}


def launch(v):
    t, r, vec, it, _ = CONFIGS[v]
    cdiv = lambda a, b_: -(-a // b_)  # noqa: E731
    block = (min(t, cdiv(cdiv(K, vec * it), 32) * 32), r)
    mods[v]((-(-rows // r),), block, (x, mask, outs[v], np.int32(B), np.int32(H), np.int32(Q), np.int32(K)))


def timed(fn, n=40):
    ts = []
    s, e = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(n):
        flush.fill(1)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return float(np.median(ts))


for v in CONFIGS:
    launch(v)
cp.cuda.Device().synchronize()
ref = outs["best_256_1_8_2"].astype(cp.float32)
res = {}
for v in CONFIGS:
    res[v] = {"us": timed(lambda: launch(v)), "max_abs_diff": float(cp.abs(outs[v].astype(cp.float32) - ref).max()),
              **regs[v]}
src, dst = cp.empty(rows * K * 2 + B * K, dtype=cp.uint8), cp.empty(rows * K * 2, dtype=cp.uint8)
res["copy_same_bytes_us"] = timed(lambda: dst.__setitem__(slice(None), src[: rows * K * 2]))
for v in CONFIGS:
    res[v]["pct_of_copy"] = round(100 * res["copy_same_bytes_us"] / res[v]["us"], 1)
print(json.dumps(res, indent=1))
