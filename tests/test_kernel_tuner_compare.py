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


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or importlib.util.find_spec("kernel_tuner") is None,
                    reason="needs nvcc and kernel_tuner")
def test_dry_run_compiles_the_kernel_tuner_sources():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "kernel_tuner_compare.py"), "--dry-run"],
                       capture_output=True, text=True, timeout=280, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": __import__("os").environ["PATH"]})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "the Kernel Tuner source of the template compiles with nvcc: entry row_sum" in r.stdout
    assert "Kernel Tuner's restriction admits 30 configurations (kerntune's space: 30)" in r.stdout
