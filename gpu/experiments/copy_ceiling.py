"""How fast could each corpus shape go at all? A device copy moving the same bytes, timed the way kerntune times
kernels, gives every shape a ceiling: the speedup over its original if the tuned kernel ran at the speed of a copy
of its traffic (bench/corpus_report.py --ceiling reads what this writes).

For every distinct byte count among the shapes of a `kerntune bench` results file: a copy kernel (16-byte loads and
stores, grid-stride, 1024 blocks of 256 threads at most) reading half the bytes and writing the other half, after an
L2 flush (a 256 MiB memset); a copy shorter than 50 us is timed as a batch of back-to-back launches over distinct
buffer pairs (each cold in L2, as kerntune's batches rotate buffer copies) and the batch's time divided by its
launches; the median of 20-100 repetitions. Also the launch floor: an empty kernel timed the same way.

    python gpu/experiments/copy_ceiling.py RESULTS.json [MORE.json ...] > $OUT/copy_ceiling.json
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import cupy as cp
import numpy as np

FLUSH_BYTES = 256 << 20
BATCH_SINGLE_US = 50.0  # as agent_core.measure.gpu_worker
BATCH_TARGET_US = 200.0
BATCH_MAX = 256
MIN_REPS, MAX_REPS = 20, 100

SOURCE = r"""
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n16,
                                  const unsigned char* __restrict__ s1, unsigned char* __restrict__ d1, size_t tail) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) dst[i] = src[i];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < tail; i += stride) d1[i] = s1[i];
}
extern "C" __global__ void empty() {}
"""


def median_precise(ts: list[float]) -> bool:
    q1, med, q3 = np.percentile(ts, [25, 50, 75])
    return med > 0 and 0.93 * (q3 - q1) / math.sqrt(len(ts)) <= 0.002 * med


class Prober:
    def __init__(self) -> None:
        mod = cp.RawModule(code=SOURCE)
        self.copy, self.empty = mod.get_function("copy16"), mod.get_function("empty")
        self.flush = cp.empty(FLUSH_BYTES, dtype=cp.uint8)
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()

    def _timed(self, launches) -> float:
        """Microseconds of the launches (a list of callables), after an L2 flush."""
        self.flush.fill(1)
        self.start.record()
        for f in launches:
            f()
        self.end.record()
        self.end.synchronize()
        return cp.cuda.get_elapsed_time(self.start, self.end) * 1e3

    def time(self, make_launch, copies: int) -> float:
        """Median microseconds per launch; ``make_launch(i)`` is the launch on buffer pair i (< copies)."""
        single = [self._timed([make_launch(0)]) for _ in range(5)]
        ref = float(np.median(single[2:]))
        batch = 1 if ref >= BATCH_SINGLE_US else max(1, min(BATCH_MAX, copies, math.ceil(BATCH_TARGET_US / max(ref, 0.5))))
        launches = [make_launch(i % copies) for i in range(batch)]
        ts: list[float] = []
        while len(ts) < MAX_REPS:
            ts.append(self._timed(launches) / batch)
            if len(ts) >= MIN_REPS and len(ts) % 5 == 0 and median_precise(ts):
                break
        return float(np.median(ts))

    def copy_us(self, nbytes: int) -> float:
        half = max(1, nbytes // 2)
        n16, tail = half // 16, half % 16
        copies = max(1, min(BATCH_MAX, (512 << 20) // max(2 * half, 1)))  # keep the pairs within 512 MiB
        pairs = [(cp.empty(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8)) for _ in range(copies)]
        for s, _ in pairs:
            s.fill(7)
        threads = 256
        blocks = max(1, min(1024, -(-max(n16, tail) // threads)))

        def make(i):
            s, d = pairs[i]
            args = (s, d, np.uint64(n16), s[n16 * 16:], d[n16 * 16:], np.uint64(tail))
            return lambda: self.copy((blocks,), (threads,), args)
        try:
            return self.time(make, copies)
        finally:
            del pairs
            cp.get_default_memory_pool().free_all_blocks()

    def empty_us(self) -> float:
        return self.time(lambda i: (lambda: self.empty((1,), (32,), ())), BATCH_MAX)


def main(paths: list[str]) -> int:
    sizes = set()
    for p in paths:
        res = json.loads(Path(p).read_text())
        for k in res.get("kernels", []):
            for s in k.get("shapes") or []:
                if s.get("bytes"):
                    sizes.add(int(s["bytes"]))
    pr = Prober()
    out = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "method": __doc__.split("\n\n")[1],
           "empty_kernel_us": pr.empty_us(), "copy_us": {}}
    for n in sorted(sizes):
        out["copy_us"][str(n)] = pr.copy_us(n)
        print(f"{n} bytes: {out['copy_us'][str(n)]:.2f} us ({n / out['copy_us'][str(n)] / 1e3:.0f} GB/s)", file=sys.stderr)
    big = max(sizes)
    out["largest"] = {"bytes": big, "gbps": big / out["copy_us"][str(big)] / 1e3}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
