"""bench/kernel_tuner_compare.py up to the GPU: the same space and kernel for Kernel Tuner as for kerntune."""

import importlib.util
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import kernel_tuner_compare as ktc  # noqa: E402

sys.path.remove(str(ROOT / "bench"))


def test_row_sum_is_the_same_space_and_kernel_for_both_tools():
    case = ktc.make_case(str(ROOT / "examples" / "row_sum.cu"), "row_sum")
    assert case.tune_params == {"KT_BLOCK": [32, 64, 128, 256, 512, 1024], "KT_UNROLL": [1, 2, 4, 8, 16]}
    assert case.block_names == ["KT_BLOCK"] and case.original_block == [128]
    admitted = [c for c in itertools.product(*case.tune_params.values())
                if case.restriction(dict(zip(case.tune_params, c)))]
    assert len(admitted) == case.n_valid == 30
    # the template as Kernel Tuner compiles it: no #include, the entry with C linkage, no host code after it
    src = case.kt_source
    assert 'extern "C" __global__ void row_sum(' in src and "#include <" not in src.replace("// #include", "")
    assert "row_sum_launch" not in src and "#ifndef KT_BLOCK" in src
    assert 'extern "C" __global__ void row_sum(' in case.original_source and "KT_BLOCK" not in case.original_source
    sizes = case.prep.spec.sizes[1]
    args, outs = ktc.arguments(case, sizes, 0)
    assert [a.dtype for a in args[:2]] == [np.float32, np.float32] and args[2] == np.int32(4099)
    assert args[0].size == 1000 * 4099 and outs == [1]
    assert ktc.problem_size(case, sizes)({"KT_BLOCK": 256, "KT_UNROLL": 2}) == (1000, 1, 1)


def test_a_block_that_is_not_one_parameter_is_refused(tmp_path):
    src = (ROOT / "examples" / "row_sum.cu").read_text().replace('block = "BLOCK"', 'block = "BLOCK / 2"')
    (tmp_path / "row_sum.cu").write_text(src)
    with pytest.raises(ktc.KerntuneError, match="block 'BLOCK / 2' is not a single parameter"):
        ktc.make_case(str(tmp_path / "row_sum.cu"), "row_sum")


def test_a_template_kernel_goes_to_kernel_tuner_by_its_templated_name():
    case = ktc.make_case(str(ROOT / "examples" / "scale_rows.cu"), "scale_rows")
    assert case.n_valid == 160 and case.block_names == ["KT_THREADS"] and case.original_block == [256]
    # Kernel Tuner instantiates the template in an extern "C" wrapper of its own: the source keeps C++ linkage
    assert (case.kt_name, case.original_name) == ("scale_rows<KT_VEC>", "scale_rows<4>")
    assert 'extern "C"' not in case.kt_source and 'extern "C"' not in case.original_source
    assert "scale_rows_launch" not in case.kt_source and "__launch_bounds__(KT_THREADS)" in case.kt_source
    assert ktc.problem_size(case, case.prep.spec.sizes[0])({"KT_VEC": 4, "KT_THREADS": 256}) == (4, 4096, 1)
    row_sum = ktc.make_case(str(ROOT / "examples" / "row_sum.cu"), "row_sum")
    assert (row_sum.kt_name, row_sum.original_name) == ("row_sum", "row_sum")


def _timeline(wall, **phases):
    rows = [{"phase": n, "label": n, "s": s, "n": 1} for n, s in phases.items()]
    rows.append({"phase": "other", "label": "other", "s": wall - sum(phases.values()), "n": 0})
    return {"wall_s": wall, "phases": rows, "overlapped": {"compile": 2.5}}


def test_report_breakdown_and_the_overall_rate_ratio():
    row_sum = ktc.make_case(str(ROOT / "examples" / "row_sum.cu"), "row_sum")
    scale = ktc.make_case(str(ROOT / "examples" / "scale_rows.cu"), "scale_rows")
    tl = _timeline(6.0, worker_start=1.5, original=0.3, compile=1.0, verify=0.2, time=2.0, confirm=0.7)

    def runs(n, kn_wall, kt_wall):
        return [ktc.Run("kerntune", "exhaustive", kn_wall, n, 0, {"A": 1}, 0.9, 1.0, timeline=tl),
                ktc.Run("kerntune", "auto", 1.0, 20, 0, {"A": 1}, 0.9, 0.5, timeline=tl),  # faster: not the pair
                ktc.Run("Kernel Tuner", "brute_force", kt_wall, n, 0, {"A": 2}, 0.95, 1.0),
                ktc.Run("Kernel Tuner", "random_sample", 0.5, 20, 0, {"A": 2}, 0.95, 0.2)]
    results = [(row_sum, runs(30, 6.0, 3.0)), (scale, runs(160, 20.0, 40.0))]
    line = ktc.breakdown(results[0][1][0])
    assert line.startswith("kerntune exhaustive: 6.0 s = worker start 1.50, original 0.30, compile wait 1.00, "
                           "verify 0.20, timing 2.00, confirmation 0.70, other 0.30")
    assert "compiling ahead 2.5" in line
    # fixed per run: worker start + original + confirmation = 2.5 s; 30 evaluations in the other 3.5 s
    assert "per-run fixed (worker start, original, confirmation) 2.5 s, without it 514 evaluations/min" in line
    text = ktc.report(*results[0])
    assert "evaluations per minute, kerntune exhaustive over Kernel Tuner brute_force: 0.50x" in text
    summary, data = ktc.overall(results)
    assert [k["ratio"] for k in data["kernels"]] == pytest.approx([0.5, 2.0])
    assert data["pooled_ratio"] == pytest.approx((190 / 26.0) / (190 / 43.0))
    assert data["geomean_ratio"] == pytest.approx(1.0)
    assert "all kernels (pooled)" in summary and "190" in summary
    # without a brute force run, the best rate of each, said so
    a, b, same = ktc.rate_pair([r for r in results[0][1] if r.strategy != "brute_force"])
    assert (a.strategy, b.strategy, same) == ("auto", "random_sample", False)


def test_warm_runs_are_paired_apart_from_cold_ones():
    """--worker both: each kerntune strategy once with its own worker (cold) and once with the worker up before the
    clock (warm); each kind is set against Kernel Tuner's brute force on its own, never mixed."""
    row_sum = ktc.make_case(str(ROOT / "examples" / "row_sum.cu"), "row_sum")
    tl = _timeline(4.0, worker_start=2.0, original=0.3, compile=0.5, time=0.7, confirm=0.5)
    runs = [ktc.Run("kerntune", "exhaustive", 4.0, 30, 0, {"A": 1}, 0.9, 1.0, timeline=tl),
            ktc.Run("kerntune", "exhaustive", 1.0, 30, 0, {"A": 1}, 0.9, 0.5, timeline=tl, warm=True),
            ktc.Run("Kernel Tuner", "brute_force", 3.0, 30, 0, {"A": 2}, 0.95, 1.0)]
    a, b, same = ktc.rate_pair(runs)
    assert not a.warm and same and b.strategy == "brute_force"
    a, _, _ = ktc.rate_pair(runs, warm=True)
    assert a.warm and a.wall_s == 1.0
    text = ktc.report(row_sum, runs)
    assert "kerntune exhaustive over Kernel Tuner brute_force: 0.75x" in text
    assert "kerntune exhaustive (warm) over Kernel Tuner brute_force: 3.00x" in text
    assert "kerntune exhaustive (warm): 4.0 s" in text  # its breakdown line, labelled
    summary, data = ktc.overall([(row_sum, runs)])
    assert [(k["warm"], k["ratio"]) for k in data["kernels"]] == [(False, pytest.approx(0.75)),
                                                                  (True, pytest.approx(3.0))]
    assert "worker started in the run" in summary and "worker up before the clock" in summary


def test_kernel_tuner_breakdown_sums_its_own_records():
    run = ktc.Run("Kernel Tuner", "brute_force", 2.0, 30, 0, {"A": 1}, 0.9, 1.0,
                  per_size=[{"sizes": {}}, {"sizes": {}}],
                  kt_phases={"compile_time": 1.2, "verification_time": 0.1, "benchmark_time": 0.3,
                             "strategy_time": 0.0, "framework_time": 0.1})
    line = ktc.kt_breakdown(run)
    assert line.startswith("Kernel Tuner brute_force: 2.0 s; its own records 1.70 s = compile 1.20, verification "
                           "0.10, benchmark 0.30, strategy 0.00, framework 0.10; outside them 0.30 s")
    assert line.endswith("compile 20 ms per configuration and size set")  # 1.2 s over 30 configurations x 2 sets
    case = ktc.make_case(str(ROOT / "examples" / "row_sum.cu"), "row_sum")
    assert line in ktc.report(case, [run])


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or importlib.util.find_spec("kernel_tuner") is None,
                    reason="needs nvcc and kernel_tuner")
def test_dry_run_compiles_the_kernel_tuner_sources():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "kernel_tuner_compare.py"), "--dry-run",
                        "--kernel", "examples/row_sum.cu:row_sum", "--kernel", "examples/scale_rows.cu:scale_rows"],
                       capture_output=True, text=True, timeout=280, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": __import__("os").environ["PATH"]})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "the Kernel Tuner source of the template compiles with nvcc: entry row_sum" in r.stdout
    assert "Kernel Tuner's restriction admits 30 configurations (kerntune's space: 30)" in r.stdout
    assert ("the Kernel Tuner source of the template compiles with nvcc: entry scale_rows_wrapper (Kernel Tuner's "
            "wrapper of scale_rows<KT_VEC>)") in r.stdout
    assert "entry scale_rows_wrapper (Kernel Tuner's wrapper of scale_rows<4>)" in r.stdout
    assert "Kernel Tuner's restriction admits 160 configurations (kerntune's space: 160)" in r.stdout
