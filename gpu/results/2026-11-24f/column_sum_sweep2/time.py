# Times every cs_*.cubin of this folder (column sum of 8192x4096 fp32, 134 MB read) on the GPU, against
# torch.sum(dim=0) and a device copy; verified at the corpus spec's tolerance (rtol 1e-4, atol 1e-2).
import glob, json, os
import cupy as cp, numpy as np
rows, cols = 8192, 4096
x = cp.random.standard_normal(rows * cols, dtype=cp.float32)
ref = x.reshape(rows, cols).astype(cp.float64).sum(axis=0)
out = cp.empty(cols, cp.float32)
start, end = cp.cuda.Event(), cp.cuda.Event()
def med(fn, n=30):
    ts = []
    for _ in range(n):
        start.record(); fn(); end.record(); end.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, end) * 1000)
    return float(np.median(ts[5:]))
src = cp.random.standard_normal(rows * cols, dtype=cp.float32); dst = cp.empty_like(src)
copy_us = med(lambda: dst.__setitem__(slice(None), src))
copy_gbps = 2 * src.nbytes / copy_us / 1e3
res = {"copy_gbps": copy_gbps, "configs": []}
try:
    import torch
    tx = torch.as_tensor(x, device="cuda").view(rows, cols)
    ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    tt = []
    for _ in range(30):
        ts[0].record(); y = tx.sum(dim=0); ts[1].record(); torch.cuda.synchronize(); tt.append(ts[0].elapsed_time(ts[1]) * 1000)
    res["torch_sum_us"] = float(np.median(tt[5:]))
    res["torch_sum_pct"] = 100 * x.nbytes / res["torch_sum_us"] / 1e3 / copy_gbps
except Exception as e:
    res["torch_error"] = str(e)[:200]
for f in sorted(glob.glob(os.path.dirname(os.path.abspath(__file__)) + "/cs_*.cubin")):
    B, S, C, U, L = map(int, os.path.basename(f)[3:-6].split("_"))
    k = cp.RawModule(path=f).get_function("cs")
    grid = ((cols // 4 + B - 1) // B, C)
    try:
        out.fill(np.nan)
        k(grid, (B, S), (x, out, np.int32(rows), np.int32(cols)))
        cp.cuda.Device().synchronize()
        ok = bool(cp.allclose(out.astype(cp.float64), ref, rtol=1e-4, atol=1e-2))
        t = med(lambda: k(grid, (B, S), (x, out, np.int32(rows), np.int32(cols))))
        res["configs"].append({"B": B, "S": S, "C": C, "U": U, "L": L, "ok": ok, "us": t,
                               "pct_copy": 100 * x.nbytes / t / 1e3 / copy_gbps})
    except Exception as e:
        res["configs"].append({"B": B, "S": S, "C": C, "U": U, "L": L, "error": str(e)[:200]})
json.dump(res, open(os.environ.get("OUT", "/tmp") + "/colsum_sweep2.json", "w"), indent=0)
good = sorted([r for r in res["configs"] if r.get("ok")], key=lambda r: r["us"])
print("copy", round(copy_gbps), "GB/s; torch.sum", res.get("torch_sum_us"), "us", res.get("torch_sum_pct"), "%")
print(len(res["configs"]), "configs,", len(good), "verified", [r for r in res["configs"] if "error" in r][:2])
for r in good[:20]: print(r)
for U in (4, 8, 16):
    for L in (0, 1):
        b = [r for r in good if r["U"] == U and r["L"] == L]
        if b: print("best U", U, "L", L, b[0])
