import glob, json, os, sys
import cupy as cp, numpy as np
rows, cols = 8192, 4096
x = cp.random.standard_normal(rows * cols, dtype=cp.float32)
ref = x.reshape(rows, cols).astype(cp.float64).sum(axis=0)
out = cp.empty(cols, cp.float32)
res = []
start, end = cp.cuda.Event(), cp.cuda.Event()
for f in sorted(glob.glob(os.path.dirname(__file__) + "/cs_*.cubin")):
    B, S, C, U, V = map(int, os.path.basename(f)[3:-6].split("_"))
    k = cp.RawModule(path=f).get_function("cs")
    grid = ((cols // V + B - 1) // B, C)
    try:
        out.fill(np.nan)
        k(grid, (B, S), (x, out, np.int32(rows), np.int32(cols)))
        cp.cuda.Device().synchronize()
        ok = bool(cp.allclose(out.astype(cp.float64), ref, rtol=1e-4, atol=1e-2))
        ts = []
        for _ in range(15):
            start.record(); k(grid, (B, S), (x, out, np.int32(rows), np.int32(cols))); end.record(); end.synchronize()
            ts.append(cp.cuda.get_elapsed_time(start, end) * 1000)
        t = float(np.median(ts[3:]))
        res.append({"B": B, "S": S, "C": C, "U": U, "V": V, "ok": ok, "us": t, "gbps": rows * cols * 4 / t / 1e3})
    except Exception as e:
        res.append({"B": B, "S": S, "C": C, "U": U, "V": V, "error": str(e)[:200]})
json.dump(res, open(os.environ.get("OUT", "/tmp") + "/colsum_sweep.json", "w"), indent=0)
good = sorted([r for r in res if r.get("ok")], key=lambda r: r["us"])
print(len(res), "configs,", len(good), "verified,", [r for r in res if "error" in r][:3])
for r in good[:25]:
    print(r)
for V in (1, 4):
    for U in (1, 4):
        b = [r for r in good if r["V"] == V and r["U"] == U]
        if b: print("best V", V, "U", U, b[0])
for C in (1, 2, 4, 8):
    b = [r for r in good if r["C"] == C]
    if b: print("best C", C, b[0])
