"""A configuration the search verified (its kernel compiled alone) that nvcc cannot build the whole file with (another
instantiation of a templated kernel the file has breaks under it: FlagAttention's combine, batch 31) is never the
confirmed best: it is recorded as a compile error, in the store too, and the next best verified configuration is
confirmed instead (agent_core.search.tuner.Session._unbuildable)."""

import shutil
from pathlib import Path

import pytest

from agent_core.measure.compiler import CompileError, compile_kernel
from agent_core.measure.replay import ReplayBackend
from agent_core.model import Status
from agent_core.search.tuner import Session, TuneOptions, prepare
from agent_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tests" / "data" / "stores" / "examples.sqlite"

BROKEN = """
template <int BLOCK, int D>
__global__ void tile(float* o) {
  constexpr int kPerThread = BLOCK * D / 128;
  static_assert(kPerThread * 128 == BLOCK * D, "the tile must cover whole threads");
  float acc[kPerThread];
  for (int i = 0; i < kPerThread; ++i) acc[i] = i;
  o[threadIdx.x] = acc[0];
}
template __global__ void tile<4, 16>(float*);
"""


@pytest.fixture
def session(tmp_path):
    shutil.copy(ROOT / "examples" / "row_sum.cu", tmp_path / "row_sum.cu")
    be = ReplayBackend(Store(EXAMPLES))
    store = Store(tmp_path / "results.sqlite")
    s = Session(prepare(str(tmp_path / "row_sum.cu"), "row_sum"), be, store, TuneOptions(budget=12), None, None)
    s.setup()
    s.search()
    yield s
    be.close()
    store.close()


def _nvcc_error() -> CompileError:
    try:
        compile_kernel(BROKEN, "tile", arch="sm_90", template_args=["4", "16"], exact=True)
    except CompileError as e:
        return e
    raise AssertionError("the broken file compiled")


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="needs nvcc")
def test_a_best_the_file_does_not_build_with_gives_way_to_the_next_best(session):
    s = session
    ok = sorted((e for e in s.evaluations if s.score(e) is not None), key=s.score)
    assert len(ok) >= 2 and s.best is ok[0]
    err = _nvcc_error()
    assert "whole threads" in err.message
    events = []
    s.on_event = events.append
    assert s._unbuildable(s.best, err)
    assert s.best is ok[1] and ok[0].status == Status.COMPILE_ERROR
    assert "does not build with it" in ok[0].error and "whole threads" in ok[0].error
    # the store answers the configuration's latest record: the compile error (no later session takes it)
    got = s.store.get_evaluation(s.template.template_hash, s.problem.spec_hash, s.device.name, ok[0].params)
    assert got is not None and got.status == Status.COMPILE_ERROR
    assert any("confirming the next best" in e.message for e in events)
    summary = s.summary("finished", None)
    assert summary["best_params"] == ok[1].params
    # every one unbuildable: False at the last, no best left
    results = [s._unbuildable(s.best, err) for _ in ok[1:]]
    assert results[-1] is False and all(results[:-1]) and s.best is None
