"""Time layer_norm expert variants (cubins compiled beforehand) on lc0's and ByteTransformer's bindings, the largest
size set of each; median of 30 batches of 10 launches (CUDA events), bytes as the bench counts them."""
import json, sys, os
import numpy as np
import cupy as cp
D = os.path.dirname(os.path.abspath(__file__))
man = json.load(open(f"{D}/manifest.json"))
COPY = 4220.0
rng = cp.random.default_rng(0)
def h(n): return (rng.standard_normal(n, dtype=cp.float32)).astype(cp.float16)
N, C = 16384, 1024
lc = dict(out=cp.empty(N * C, cp.float16), x=h(N * C), bias=h(C), skip=h(N * C), g=h(C), b=h(C))
M, n = 8192, 4096
bt = dict(out=h(M * n), inp=h(M * n), bias=h(n), g=rng.standard_normal(n, dtype=cp.float32), b=rng.standard_normal(n, dtype=cp.float32))
res = []
for m in man:
    c = m["cfg"]
    f = cp.RawModule(path=f"{D}/{m['tag']}.cubin").get_function(m["entry"])
    vi = c["VEC"] * c["ITEMS"]
    if m["case"] == "lc0":
        bx = min(c["THREADS"], -(-(-(-C // vi)) // 32) * 32)
        grid, block = (-(-N // c["ROWS"]),), (bx, c["ROWS"])
        args = (np.int32(N), np.int32(C), lc["out"], lc["x"], lc["bias"], lc["skip"], lc["g"], lc["b"], np.float32(1e-5), np.float32(1.0), np.int32(0))
        nbytes = 3 * N * C * 2
    else:
        bx = min(c["THREADS"], -(-(-(-n // vi)) // 32) * 32)
        grid, block = (M,), (bx, 1)
        args = (bt["out"], bt["inp"], bt["bias"], bt["g"], bt["b"], np.int32(n), np.bool_(True))
        nbytes = 3 * M * n * 2
    for _ in range(3):
        f(grid, block, args)
    ts = []
    for _ in range(30):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        for _ in range(10):
            f(grid, block, args)
        e.record(); e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) / 10 * 1e3)
    us = sorted(ts)[15]
    pct = nbytes / us / 1e3 / COPY * 100
    res.append(dict(m, us=us, pct=pct))
    print(f"{m['tag']:32s} regs {m['regs']} {us:7.1f} us {pct:5.1f}% of copy", flush=True)
json.dump(res, open(sys.argv[1], "w"), indent=1)
