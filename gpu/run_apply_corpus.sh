#!/bin/bash
# On the GPU machine, from the repository root (.gpu carried): `kerntune apply` of every expert or rewrite winner
# of a recorded corpus (or bench) run, as a user applies it: the rewritten file compiled (nvcc, host code too),
# re-verified against the original on every size set of its spec and timed interleaved with it. Each file is
# restored after its apply; the store is a scratch copy.
#   usage: bash gpu/run_apply_corpus.sh RESULTS_JSON STORE
# Back under $OUT/apply: apply.log (every apply's output) and apply_summary.json (per kernel: applied,
# original kept or failed, and the interleaved times).
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=400
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/apply"
cp "$2" /tmp/apply_store.sqlite
python3 - "$1" "$OUT/apply" <<'PY'
import json, re, shutil, subprocess, sys, time
doc = json.load(open(sys.argv[1])); out = sys.argv[2]
log = open(f"{out}/apply.log", "w"); rows = []
import os
print("cwd", os.getcwd(), flush=True)
budget = float(os.environ.get("APPLY_BUDGET_S", "480")); start = time.time()
wins = [k for k in doc["kernels"] if k["status"] == "ok" and (k.get("origin") or "").startswith(("expert", "rewrite"))]
# kernel templates first (what this apply is new for), then the rest
wins.sort(key=lambda k: "template <" not in open(k["file"]).read())
for k in wins:
    if time.time() - start > budget:
        rows.append({"name": k["name"], "file": k["file"], "origin": k["origin"], "status": "not_run",
                     "bench_speedup": k.get("speedup"), "times_us": [], "applied_speedup": None, "wall_s": 0,
                     "error": f"not run: the {budget:.0f} s budget of this call was spent"})
        continue
    f = k["file"]; shutil.copy(f, "/tmp/apply_backup.cu"); t0 = time.time()
    try:
        r = subprocess.run([sys.executable, "-m", "agent_core.cli", "apply", f, "-k", k["kernel"], "--store",
                            "/tmp/apply_store.sqlite", "--backend", "gpu"], capture_output=True, text=True, timeout=240)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        text, rc = "TIMEOUT after 240 s", 124
    shutil.copy("/tmp/apply_backup.cu", f)
    m = re.search(r"timed interleaved: (.*)", text)
    times = [tuple(map(float, x.split(" -> "))) for x in re.findall(r"([\d.]+ -> [\d.]+)", m.group(1))] if m else []
    kept = "one configuration must serve" in text or "nothing to change" in text or "original kernel" in text and rc == 0 and not m
    status = "applied" if rc == 0 and m else "original_kept" if rc == 0 and kept else "failed"
    rows.append({"name": k["name"], "file": f, "origin": k["origin"], "bench_speedup": k.get("speedup"), "status": status,
                 "times_us": times, "applied_speedup": (__import__("math").exp(sum(__import__("math").log(a / b) for a, b in times) / len(times)) if times else None),
                 "wall_s": round(time.time() - t0, 1), "error": None if rc == 0 else text.strip().splitlines()[-1][:400] if text.strip() else f"rc {rc}"})
    log.write(f"===== {k['name']} ({f}) rc={rc}\n{text}\n"); log.flush()
    x = rows[-1]
    print(f"{x['name']:45s} {x['status']:14s} bench {x['bench_speedup'] or 0:.2f}x applied "
          f"{x['applied_speedup'] or 0:.2f}x {x['wall_s']:.0f} s {x['error'] or ''}", flush=True)
json.dump(rows, open(f"{out}/apply_summary.json", "w"), indent=1)
ok = [x for x in rows if x["status"] == "applied"]
print(f"applied and re-verified on the GPU: {len(ok)} of {len(rows)}; original kept {sum(x['status'] == 'original_kept' for x in rows)}; "
      f"failed {sum(x['status'] == 'failed' for x in rows)}")
PY
