"""Compare two `kerntune bench` results files kernel by kernel (the same figures within a tolerance).

    python3 gpu/compare_bench.py A/bench_results.json B/bench_results.json [--rel 0.05]

Prints, per kernel, the best configuration and the speedup of each run, the per-shape tuned times' largest
relative difference and where each kernel ran (more than one attempt: redone after a lost worker); exits 1
when a kernel is missing, did not finish, or differs by more than ``--rel`` in speedup (twice that in a
single size set's original or tuned time).
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rel", type=float, default=0.05, help="relative tolerance (default 0.05)")
    args = ap.parse_args(argv)
    a, b = (json.load(open(p, encoding="utf-8")) for p in (args.a, args.b))
    ka, kb = ({k["name"]: k for k in d["kernels"]} for d in (a, b))
    bad = 0

    def rel(x, y):
        return abs(x - y) / max(abs(x), abs(y), 1e-12) if x is not None and y is not None else float("inf")

    for name in sorted(set(ka) | set(kb)):
        x, y = ka.get(name), kb.get(name)
        if x and y and x["status"] == y["status"] == "not_run":  # a part of the suite (--only) in both
            continue
        if x is None or y is None or x["status"] != "ok" or y["status"] != "ok":
            print(f"{name}: MISSING or not finished ({x and x['status']} / {y and y['status']})")
            bad += 1
            continue
        shapes = max((max(rel(s["tuned_us"], t["tuned_us"]), rel(s["original_us"], t["original_us"]))
                      for s, t in zip(x["shapes"], y["shapes"])), default=0.0)
        d = rel(x["speedup"], y["speedup"])
        # a single size set's time is noisier than a kernel's geomean: twice the tolerance
        ok = d <= args.rel and shapes <= 2 * args.rel and len(x["shapes"]) == len(y["shapes"])
        bad += not ok
        where = "; ".join(f"{a_['worker']} pid {a_['pid']}" for a_ in y.get("attempts") or []) or "in process"
        print(f"{name}: {'same' if ok else 'DIFFERENT'} within {args.rel:.0%}: speedup {x['speedup']:.3f}x vs "
              f"{y['speedup']:.3f}x ({d:.1%}), shapes' times differ by at most {shapes:.1%}; "
              f"parameters {'equal' if x['params'] == y['params'] else 'differ'}: {x['params']} vs {y['params']}; "
              f"second run: {where}" + (f" (redone: {len(y['attempts'])} attempts)" if len(y.get("attempts") or []) > 1
                                         else ""))
    sa, sb = a["suite"]["geomean_over_kernels"], b["suite"]["geomean_over_kernels"]
    print(f"suite geomean: {sa:.3f}x vs {sb:.3f}x" if sa and sb else "suite geomean: -")
    print("RESULT: " + ("same figures within tolerance" if not bad else f"{bad} kernel(s) differ"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
