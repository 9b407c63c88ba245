"""Recordings of one H100 run each, replayed with today's code over their stores: the same command, the same
winners, the same figures within what the replay of the interleaved confirmation moves. A change to the loop that
would have chosen differently on the GPU shows here first.

- the bench suite's figure of record (bench/results/h100-2026-11-24j: the nine bench kernels, experts on, 2.00x,
  ``auto`` searching with TPE over ranks);
- the corpus kernels outside the expert families, rewrites alone (gpu/results/2026-11-24j/corpus_other,
  ``--no-experts``): per-shape dispatches that mix rewrite configurations with the original kernel (a templated
  kernel's among them, chosen by the product its launch passes), searches that start from the rewrite's seeds and
  go on where every template is tried."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = {
    "bench": (ROOT / "bench" / "results" / "h100-2026-11-24j" / "bench_results.json",
              ROOT / "tests" / "data" / "stores" / "bench_2026-11-24j.sqlite", [], set()),
    "corpus_other": (ROOT / "gpu" / "results" / "2026-11-24j" / "corpus_other" / "bench_results.json",
                     ROOT / "tests" / "data" / "stores" / "corpus_other_2026-11-24j.sqlite",
                     ["bench/corpus/other", "--no-experts"], set()),
}


@pytest.fixture(scope="module", params=sorted(RECORDINGS))
def replayed(request, tmp_path_factory):
    record, stored, args, left_out = RECORDINGS[request.param]
    tmp = tmp_path_factory.mktemp("record")
    store = tmp / "recording.sqlite"
    shutil.copy(stored, store)
    rec = json.loads(record.read_text())
    rec["kernels"] = [k for k in rec["kernels"] if k["name"] not in left_out]
    o = rec["options"]
    only = [x for k in rec["kernels"] for x in ("--only", k["name"])]  # the recorded kernels (a folder may have grown)
    cmd = [sys.executable, "-m", "agent_core.cli", "bench", *args, *only, "--budget", str(o["budget_per_round"]),
           "--rounds", str(o["rounds"]), "--strategy", o["strategy"], "--seed", str(o["seed"]),
           "--backend", f"replay:{store}", "--out", str(tmp / "out")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "left the recorded run's" not in r.stdout + r.stderr  # the recorded ask batch keeps the order
    return request.param, rec, json.loads((tmp / "out" / "bench_results.json").read_text())


def test_the_recording_replays_to_the_same_winners(replayed):
    which, rec, now = replayed
    a = {k["name"]: k for k in rec["kernels"]}
    b = {k["name"]: k for k in now["kernels"] if k["status"] != "not_run"}
    assert set(a) == set(b) and len(a) >= 8
    for name, k in a.items():
        assert b[name]["status"] == k["status"] == "ok", name
        if which == "corpus_other" and (b[name]["origin"], b[name]["params"]) != (k["origin"], k["params"]):
            # a tie: two templates' bests within 1% (softmax_three_pass: structural 1.54x and the rewrite 1.54x in
            # the search); the GPU's interleaved confirmation chose one, the replay's recorded timings the other
            assert b[name]["speedup"] == pytest.approx(k["speedup"], rel=0.01), name
            continue
        assert (b[name]["origin"], b[name]["params"]) == (k["origin"], k["params"]), name
        if which == "bench":
            assert (b[name]["dispatch"] is None) == (k["dispatch"] is None), name
        # corpus_other: where the GPU's interleaved confirmation kept the original on a size set at 1.00x (gelu_tanh
        # 16 x 14336), the replay, confirming with the search's recorded timings, may find one configuration enough
    if which == "corpus_other":  # the rewrite's configurations and the original kernel share one dispatch
        d = b["dynamic_scaled_int8_quant_kernel"]["dispatch"]
        assert d is not None and any(e["origin"].startswith("rewrite:") for e in d["entries"])
        assert any(e["origin"] == "original" for e in d["entries"])
        # GELU-tanh: `template <int BLOCK_SIZE>`, launched with n = rows * cols only: its dispatch (a rewrite
        # configuration, the template for the small size set) chooses by that product
        g = a["gelu_tanh_kernel"]["dispatch"]
        assert g["inputs"] == ["rows * cols"] and [b_["name"] for r in g["rules"] for b_ in r["when"]] == ["rows * cols"]
        assert {e["origin"].split(":")[0] for e in g["entries"]} == {"rewrite", "original"}


def test_the_recording_replays_to_the_same_figures(replayed):
    which, rec, now = replayed
    a = {k["name"]: k["speedup"] for k in rec["kernels"]}
    b = {k["name"]: k["speedup"] for k in now["kernels"] if k["name"] in a}
    # the replay has no interleaved confirmation to replay: it confirms with the search's recorded timings,
    # which differ from the GPU's confirmation by a percent or two
    for name in a:
        assert b[name] == pytest.approx(a[name], rel=0.03), name
    geo = math.exp(sum(math.log(x) for x in b.values()) / len(b))
    assert geo == pytest.approx(math.exp(sum(math.log(x) for x in a.values()) / len(a)), rel=0.02)
    if which == "bench":
        assert now["suite"]["geomean_over_kernels"] == pytest.approx(geo)
    if which == "bench":  # the targets read as the figures say (2.00x on the H100: on the line), every large shape
        # at >= 80% of copy bandwidth
        assert now["targets"]["geomean"]["met"] is (geo >= 2.0) and now["targets"]["bandwidth"]["met"] is True
