"""The `kerntune` CLI end to end, without a GPU: parsing, specs, templates, and tuning / optimizing / applying /
benchmarking over stores recorded on an H100 (tests/data/stores, replay backend)."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_core.cli import main

REPO = Path(__file__).resolve().parents[1]
STORES = REPO / "tests" / "data" / "stores"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A copy of the examples and of the recordings in a scratch folder (nothing under the repo is written)."""
    for f in (REPO / "examples").glob("*.cu"):
        shutil.copy(f, tmp_path / f.name)
    for f in (REPO / "tests" / "data" / "cu").glob("*.cu"):
        shutil.copy(f, tmp_path / f.name)
    for f in STORES.glob("*.sqlite"):
        shutil.copy(f, tmp_path / f"rec-{f.name}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNTUNE_STORE", raising=False)
    monkeypatch.delenv("KERNTUNE_BACKEND", raising=False)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def kt(*args, code: int | None = 0):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if code is not None:
        assert r.exit_code == code, r.output
    return r


def test_show_lists_kernels_launches_tunables_and_spec(work):
    r = kt("show", "row_sum.cu")
    assert "row_sum  row_sum.cu:14" in r.output
    assert "launch: line 33 in row_sum_launch: <<<rows, BLOCK, 0, stream>>>" in r.output
    assert "tunable BLOCK = 128  domain [32, 64, 128, 256, 512, 1024]" in r.output
    assert "tunable UNROLL = 4" in r.output and "is_pow2(BLOCK)" in r.output
    assert "spec: ok (comment:7; 2 size sets)" in r.output


def test_show_names_syntax_errors_and_exits_nonzero(work):
    r = kt("show", "errors.cu", code=1)
    assert "errors.cu:5:15: syntax error: missing ';'" in r.output
    assert "need fixing: via_macro, pragma_if" in r.output
    assert "not tunable: nothing to tune in kernel 'fine'" in r.output


@pytest.mark.parametrize("args, message", [
    (("templatize", "row_sum.cu", "-k", "nope"), "no __global__ kernel named 'nope' (kernels in this file: row_sum)"),
    (("templatize", "errors.cu", "-k", "pragma_if"), "errors.cu:5:15: kernel 'pragma_if' has a syntax error here"),
    (("templatize", "errors.cu", "-k", "fine"), "errors.cu:10:17: nothing to tune in kernel 'fine'"),
    (("tune", "missing.cu", "-k", "x"), "no such file"),
])
def test_bad_input_is_named_and_exits_nonzero(work, args, message):
    r = kt(*args, code=2)
    assert message in " ".join(r.output.split())


def test_spec_drafts_from_the_signature_and_write_inserts_it(work):
    src = work / "errors.cu"
    before = src.read_text()
    r = kt("spec", "errors.cu", "-k", "fine")
    assert "/* kerntune:" in r.output and "TODO" in r.output
    assert src.read_text() == before  # printing a draft changes nothing
    kt("spec", "errors.cu", "-k", "fine", "--write")
    after = src.read_text()
    assert after != before and after.count("/* kerntune:") == before.count("/* kerntune:") + 1


def test_a_bad_spec_names_the_field(work):
    src = work / "row_sum.cu"
    src.write_text(src.read_text().replace('grid  = "rows"', 'grid  = "rowz"'))
    r = kt("tune", "row_sum.cu", "-k", "row_sum", "--backend", "replay:rec-examples.sqlite", code=2)
    assert "grid" in r.output and "rowz" in r.output


def test_templatize_writes_files_and_an_edited_space_is_what_tune_searches(work):
    r = kt("templatize", "row_sum.cu", "-k", "row_sum")
    tpath, spath = work / ".kerntune" / "row_sum.row_sum.kt.cu", work / ".kerntune" / "row_sum.row_sum.space.toml"
    assert tpath.is_file() and spath.is_file() and str(spath) in r.output
    assert "#pragma unroll KT_UNROLL" in tpath.read_text()
    space = spath.read_text()
    assert "BLOCK" in space and "UNROLL" in space
    # the user narrows BLOCK to two values (the original must stay): the search covers exactly those (2 x 5)
    import re
    edited = re.sub(r"(?m)^(values\s*=\s*)\[32, 64, 128, 256, 512, 1024\]", r"\1[128, 256]", space)
    assert edited != space, space
    spath.write_text(edited)
    r = kt("tune", "row_sum.cu", "-k", "row_sum", "--backend", "replay:rec-examples.sqlite",
           "--strategy", "exhaustive", "--json", "s.json")
    s = json.loads((work / "s.json").read_text())
    assert s["counts"]["ok"] == 10
    assert {t["params"]["BLOCK"] for t in s["top"]} == {128, 256}


def test_tune_on_the_recorded_h100_and_resume(work):
    r = kt("tune", "silu.cu", "-k", "silu", "--backend", "replay:rec-examples.sqlite", "--strategy", "exhaustive",
           "--budget", "200", "--json", "silu.json")
    out = " ".join(r.output.split())
    assert "silu on NVIDIA H100 80GB HBM3 (replayed from a recorded store)" in out
    s = json.loads((work / "silu.json").read_text())
    rec = sqlite3.connect(str(work / "rec-examples.sqlite"))
    best = rec.execute("SELECT min(objective) FROM evaluations e JOIN sessions s ON s.id = e.session_id "
                       "WHERE s.kernel = 'silu' AND e.status = 'ok'").fetchone()[0]
    rec.close()
    assert s["counts"]["ok"] == 200 and s["counts"]["failed"] == 0
    assert s["speedup"] > 3.0  # what the H100 measured: 256 blocks of 128 threads starve HBM3
    assert min(t["objective"] for t in s["top"]) == best
    assert f"{s['speedup']:.2f}x" in out and "% copy bw" in out and "200 ok, 0 failed, 0 pruned" in out
    # a second run resumes from the workspace store: nothing measured again
    r2 = kt("tune", "silu.cu", "-k", "silu", "--backend", "replay:rec-examples.sqlite", "--strategy", "exhaustive",
            "--budget", "200", "--json", "silu2.json")
    s2 = json.loads((work / "silu2.json").read_text())
    assert s2["counts"]["reused"] == 200  # every answer came from the workspace store
    assert s2["best_params"] == s["best_params"]
    assert (work / ".kerntune" / "results.sqlite").is_file()


def test_results_then_apply_rewrites_kernel_and_launch(work):
    kt("tune", "row_sum.cu", "-k", "row_sum", "--backend", "replay:rec-examples.sqlite", "--strategy", "exhaustive")
    r = kt("results", "row_sum.cu", "-k", "row_sum")
    assert "best parameters" in r.output
    before = (work / "row_sum.cu").read_text()
    r = kt("apply", "row_sum.cu", "-k", "row_sum", "--dry-run")
    assert "+#define BLOCK 256" in r.output and "+    #pragma unroll 8" in r.output
    assert (work / "row_sum.cu").read_text() == before
    kt("apply", "row_sum.cu", "-k", "row_sum", "--backend", "none")
    after = (work / "row_sum.cu").read_text()
    assert "#define BLOCK 256" in after and "#pragma unroll 8" in after and "KT_" not in after
    assert after.replace("#define BLOCK 256", "#define BLOCK 128").replace("unroll 8", "unroll 4") == before


def test_apply_rewrites_the_launch_site_of_a_host_variable(work):
    kt("tune", "silu.cu", "-k", "silu", "--backend", "replay:rec-examples.sqlite", "--budget", "200",
       "--strategy", "exhaustive", "--json", "s.json")
    best = json.loads((work / "s.json").read_text())["best_params"]
    kt("apply", "silu.cu", "-k", "silu", "--backend", "none")
    text = (work / "silu.cu").read_text()
    assert f"int blocks = {best['BLOCKS']};" in text and f"int threads = {best['THREADS']};" in text


@pytest.mark.nvcc
def test_applied_files_compile(work):
    for k in ("row_sum", "silu"):
        kt("tune", f"{k}.cu", "-k", k, "--backend", "replay:rec-examples.sqlite", "--budget", "200",
           "--strategy", "exhaustive")
        kt("apply", f"{k}.cu", "-k", k, "--backend", "none")
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        p = subprocess.run([nvcc, "-arch=sm_90", "-c", f"{k}.cu", "-o", f"{k}.o"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_apply_without_a_result_says_so(work):
    r = kt("apply", "row_sum.cu", "-k", "row_sum", "--backend", "none", code=2)
    assert "no tuned result for kernel 'row_sum'" in r.output


def test_tune_without_a_gpu_says_so(work):
    try:
        import pycuda  # noqa: F401
        pytest.skip("pycuda is installed here")
    except ImportError:
        pass
    r = kt("tune", "row_sum.cu", "-k", "row_sum", code=3)
    assert "no CUDA device available" in r.output and "kerntune[gpu]" in r.output


def test_optimize_runs_rounds_and_explains_them(work):
    """The offline agent over the bench recording: the expert it matched first; it reached the stop rule."""
    shutil.copy(REPO / "bench" / "silu_and_mul.cu", work / "silu_and_mul.cu")
    r = kt("optimize", "silu_and_mul.cu", "-k", "silu_and_mul_kernel", "--budget", "30", "--rounds", "3",
           "--backend", "replay:rec-bench.sqlite", "--json", "o.json")
    out = " ".join(r.output.split())
    assert "search the expert:act_and_mul template first" in out and "round 1 (expert:act_and_mul)" in out
    assert "round 2" not in out and "stop: reached" in out and "of the device's copy bandwidth" in out
    o = json.loads((work / "o.json").read_text())
    assert o["best"]["origin"] == "expert:act_and_mul" and o["best"]["speedup"] > 2.0


def test_bench_over_the_recording_reproduces_the_h100_table(work):
    """The suite's figure of record (bench/results/h100-2026-11-24e, one H100 run, budget 30, 3 rounds) replayed
    over its own store by the CLI: the same winners, the same dispatches, the same suite figures."""
    shutil.copytree(REPO / "bench", work / "bench", ignore=shutil.ignore_patterns("results", "*.py", "*.json"))
    r = kt("bench", "--budget", "30", "--rounds", "3", "--backend", "replay:rec-bench_2026-11-24e.sqlite",
           "--out", "out", "--store", "out/s.sqlite", *sorted(str(p) for p in (work / "bench").glob("*.cu")))
    doc = json.loads((work / "out" / "bench_results.json").read_text())
    h100 = json.loads((REPO / "bench" / "results" / "h100-2026-11-24e" / "bench_results.json").read_text())
    assert doc["status"] == "finished" and len(doc["kernels"]) == 9
    got = {k["name"]: k for k in doc["kernels"]}
    for k in h100["kernels"]:
        g = got[k["name"]]
        assert g["status"] == "ok" and g["origin"] == k["origin"], k["name"]
        # replayed search figures vs the H100's interleaved confirmation: the same winners, within a few %
        single = k.get("single_speedup") or k["speedup"]
        assert g["single_speedup"] == pytest.approx(single, rel=0.05), k["name"]
        assert g["params"] == k["params"], k["name"]
        # the per-shape dispatch over the same recorded evaluations: never below one configuration
        assert g["speedup"] >= g["single_speedup"] - 1e-9, k["name"]
        if g["dispatch"]:
            d = g["dispatch"]
            assert d["winner"]["params"] == g["params"] and len(d["entries"]) >= 2
            assert d["backend"] == "replay" and d["confirmed"]
    # the kernels the recording's search found a clearly faster configuration for on some size set, as on the H100
    # (fused add + RMSNorm, layer norm and the merge: one configuration serves every size set)
    assert sorted(k["name"] for k in doc["kernels"] if k["dispatch"]) == sorted(
        k["name"] for k in h100["kernels"] if k["dispatch"]) == [
        "gelu_and_mul_kernel", "per_token_group_quant_int8_kernel", "rms_norm_kernel", "rotary_neox_kernel",
        "silu_and_mul_kernel", "softmax_kernel"]
    suite = doc["suite"]
    assert suite["geomean_one_configuration"] == pytest.approx(1.93, abs=0.02)
    assert suite["geomean_over_kernels"] == pytest.approx(1.98, abs=0.02)
    assert (work / "out" / "bench_results.md").read_text().startswith("# kerntune bench results")
    assert "geomean speedup" in r.output and "with one configuration per kernel" in r.output


def test_bench_over_the_h200_suite_recording_reproduces_its_figure_of_record(work):
    """The suite's figure of record of 2026-11-30b (gpu/results/2026-11-30b/call3/suite: one H200 run with that
    session's code, dispatch included, budget 30, 3 rounds; its store tests/data/stores/bench_2026-11-30b_h200.sqlite)
    replayed over its own store with the current code: the same winning template and parameters per kernel, the same
    kernels with a per-shape dispatch, the per-kernel and suite figures within 2% of the device's."""
    shutil.copytree(REPO / "bench", work / "bench", ignore=shutil.ignore_patterns("results", "corpus", "*.py", "*.json"))
    kt("bench", "--budget", "30", "--rounds", "3", "--backend", "replay:rec-bench_2026-11-30b_h200.sqlite",
       "--out", "out", "--store", "out/s.sqlite", *sorted(str(p) for p in (work / "bench").glob("*.cu")))
    doc = json.loads((work / "out" / "bench_results.json").read_text())
    h200 = json.loads((REPO / "gpu" / "results" / "2026-11-30b" / "call3" / "suite" / "bench_results.json").read_text())
    assert doc["status"] == "finished" and len(doc["kernels"]) == len(h200["kernels"]) == 9
    got = {k["name"]: k for k in doc["kernels"]}
    for k in h200["kernels"]:
        g = got[k["name"]]
        assert g["status"] == "ok" and g["origin"] == k["origin"] and g["params"] == k["params"], k["name"]
        assert g["single_speedup"] == pytest.approx(k["single_speedup"], rel=0.02), k["name"]
        assert g["speedup"] == pytest.approx(k["speedup"], rel=0.02), k["name"]
        assert bool(g["dispatch"]) == bool(k["dispatch"]), k["name"]
    for key in ("geomean_over_kernels", "geomean_one_configuration"):
        assert doc["suite"][key] == pytest.approx(h200["suite"][key], rel=0.02), key


def test_lsp_command_starts_a_server_that_answers_initialize(work):
    """`kerntune lsp` over stdio: the first bytes on stdout are an LSP header (no stray prints)."""
    msg = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"processId": None, "rootUri": None, "capabilities": {}}})
    data = f"Content-Length: {len(msg)}\r\n\r\n{msg}".encode()
    exit_msg = json.dumps({"jsonrpc": "2.0", "method": "exit"})
    data += f"Content-Length: {len(exit_msg)}\r\n\r\n{exit_msg}".encode()
    p = subprocess.run([sys.executable, "-m", "agent_core.cli", "lsp"], input=data, capture_output=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.startswith(b"Content-Length: "), p.stdout[:200]
    assert b'"capabilities"' in p.stdout
