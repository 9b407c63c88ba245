"""bench/merge_results.py and bench/corpus_report.py over the corpus recorded on the H100 (gpu/results/2026-11-26s
and 2026-11-27t): the merge replaces a variant re-run later, and the ceiling (a device copy of each shape's bytes,
gpu/experiments/copy_ceiling.py) bounds what the corpus geomean can reach."""

import json
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import corpus_report  # noqa: E402
import merge_results  # noqa: E402

RESULTS = ROOT / "gpu" / "results"
ALL_96 = RESULTS / "2026-11-26s" / "corpus" / "corpus_all_96.json"
BATCH4 = RESULTS / "2026-11-27t" / "corpus_batch4" / "bench_results.json"
CEILING = RESULTS / "2026-11-27t" / "ceiling" / "copy_ceiling.json"
pytestmark = pytest.mark.skipif(not (ALL_96.is_file() and BATCH4.is_file() and CEILING.is_file()),
                                reason="the recorded corpus results are not in this checkout")


def test_merge_replaces_the_variants_run_again(tmp_path):
    out = tmp_path / "all.json"
    assert merge_results.main([str(out), str(ALL_96), str(BATCH4), "--note", "test"]) == 0
    merged = json.loads(out.read_text())
    keys = [merge_results.kernel_key(k) for k in merged["kernels"]]
    assert len(keys) == len(set(keys)) == 104  # 96 + 8 new; the 5 batch-3 variants re-run replace their rows
    later = {merge_results.kernel_key(k): k for k in json.loads(BATCH4.read_text())["kernels"]}
    for k in merged["kernels"]:
        if merge_results.kernel_key(k) in later:
            assert k["speedup"] == later[merge_results.kernel_key(k)]["speedup"]
    assert merged["note"].endswith("test")


def test_merge_refuses_what_is_not_a_results_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert merge_results.main([str(tmp_path / "o.json"), str(ALL_96), str(bad)]) == 2
    assert "not a kerntune bench results file" in capsys.readouterr().err


def test_ceiling_bounds_the_corpus(tmp_path):
    out = tmp_path / "all.json"
    merge_results.main([str(out), str(ALL_96), str(BATCH4)])
    manifest = tomllib.loads(corpus_report.MANIFEST.read_text())
    ceiling = json.loads(CEILING.read_text())
    rows, t = corpus_report.report(json.loads(out.read_text()), manifest, ceiling)
    c = t["ceiling"]
    assert c["of"] == 104 and 1.0 < t["geomean"]["value"] < c["value"] < corpus_report.GEOMEAN
    assert 0 < c["reached"] <= 1.0
    text = corpus_report.markdown(rows, t)
    assert "% of ceiling" in text and "ceiling (every shape at the time of a device copy" in text
    # without the ceiling file the report is as before
    plain = corpus_report.markdown(*corpus_report.report(json.loads(out.read_text()), manifest))
    assert "ceiling" not in plain


def test_ceiling_time_is_the_copy_at_least_an_empty_kernel():
    ceiling = {"copy_us": {"1000": 0.5, "64000000": 30.0}, "empty_kernel_us": 1.7}
    assert corpus_report.ceiling_time({"bytes": 1000}, ceiling) == 1.7
    assert corpus_report.ceiling_time({"bytes": 64000000}, ceiling) == 30.0
    assert corpus_report.ceiling_time({"bytes": 5}, ceiling) is None


H200_RUN = RESULTS / "2026-11-28f" / "corpus_b"


@pytest.mark.skipif(not (H200_RUN / "copy_ceiling.json").is_file(), reason="the H200 corpus run is not in this checkout")
def test_big_shapes_against_a_copy_of_their_own_bytes():
    """The ≥ 64 MB target read both ways on the H200's whole-corpus run: against the device's large-copy bandwidth
    and against a copy of each shape's own bytes (a 64-134 MB copy runs at 81-87% of the large one there)."""
    manifest = tomllib.loads(corpus_report.MANIFEST.read_text())
    results = json.loads((H200_RUN / "multi_all" / "bench_results.json").read_text())
    ceiling = json.loads((H200_RUN / "copy_ceiling.json").read_text())
    rows, t = corpus_report.report(results, manifest, ceiling)
    peak, same = t["bandwidth"], t["bandwidth_same_bytes"]
    assert peak["checked"] == same["checked"] == 161
    assert len(peak["failing"]) == 100 and len(same["failing"]) == 53
    # no shape is further from its own copy than from the device's bandwidth
    by_row = [(r.get("big_pct") or [], r.get("big_same") or []) for r in rows]
    assert all(len(a) == len(b) and all(q >= p - 1e-9 for p, q in zip(a, b) if p is not None and q is not None)
               for a, b in by_row)
    text = corpus_report.markdown(rows, t)
    assert "100 of 161: NOT met" in text and "53 of 161 below 85%" in text and "% of a copy of its bytes" in text
