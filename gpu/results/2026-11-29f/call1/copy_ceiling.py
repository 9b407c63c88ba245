"""Copy bandwidth against size: device-to-device copies (cudaMemcpyAsync and an elementwise copy kernel) of 8 MB
to 1 GiB, bytes read + written, median of 30 batches of 5 launches with CUDA events (warm L2 for the small ones is
avoided by a 256 MB flush between batches)."""
import json, sys
import cupy as cp
out = {}
flush = cp.empty(256 << 20, dtype=cp.uint8)
for mb in (8, 16, 32, 64, 84, 100, 134, 176, 268, 537, 1024):
    n = mb << 20
    a = cp.random.randint(0, 255, n, dtype=cp.uint8); b = cp.empty_like(a)
    res = {}
    for kind in ("memcpy", "kernel"):
        ts = []
        for rep in range(30):
            flush.fill(rep & 0xFF)
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            for _ in range(5):
                if kind == "memcpy":
                    cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, n, 3, 0)
                else:
                    cp.copyto(b, a)
            e.record(); e.synchronize()
            ts.append(cp.cuda.get_elapsed_time(s, e) / 5 * 1e3)
        ts.sort(); us = ts[len(ts) // 2]
        res[kind] = {"us": us, "gbps": 2 * n / us / 1e3}
    out[mb] = res
    print(mb, "MB", {k: round(v["gbps"]) for k, v in res.items()}, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
