"""The replay backend answers from a recording made with the Store API (the recording format)."""

import math

import pytest

from agent_core.backend import Backend, Launch, Problem, Variant
from agent_core.model import (ArgSpec, DeviceInfo, Evaluation, KerntuneError, Resources, Status, Timing,
                              TuningSpec)
from agent_core.replay import ReplayBackend, ReplayMiss
from agent_core.store import Store

DEVICE = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132, copy_bandwidth_gbps=2960.0)
SPEC = TuningSpec(kernel="row_sum",
                  args=[ArgSpec("x", "in", "f32", size="rows * cols"), ArgSpec("out", "out", "f32", size="rows"),
                        ArgSpec("cols", "scalar", "i32", value="cols")],
                  sizes=[{"rows": 8192, "cols": 4096}, {"rows": 1000, "cols": 4099}], grid=["rows"], block=["BLOCK"])
BLOCKS = [32, 64, 128, 256, 512, 1024]
ORIGINAL_US = [100.0, 14.0]


def t(us: float) -> Timing:
    return Timing(median_us=us, min_us=us * 0.97, max_us=us * 1.1, iqr_us=us * 0.02, reps=100, batch=1, l2="flushed")


def recorded_us(block: int) -> list[float]:
    """A consistent synthetic recording: fastest at 256 threads."""
    f = 1 + 0.1 * (math.log2(block) - 8) ** 2
    return [ORIGINAL_US[0] * 0.6 * f, ORIGINAL_US[1] * 0.7 * f]


def problem(template_hash="th") -> Problem:
    return Problem(spec=SPEC, reference=None, reference_launches=[Launch((8192, 1, 1), (128, 1, 1))],
                   original_hash="oh", template_hash=template_hash, spec_hash=SPEC.spec_hash)


def variant(block: int) -> Variant:
    return Variant(params={"BLOCK": block}, compiled=None,
                   launches=[Launch((8192, 1, 1), (block, 1, 1)), Launch((1000, 1, 1), (block, 1, 1))])


@pytest.fixture
def recording(tmp_path):
    """What a GPU session leaves in the store: device, original timings, one evaluation per config."""
    path = tmp_path / "recording.sqlite"
    with Store(path) as s:
        s.put_device(DEVICE)
        s.put_device(DeviceInfo(name="NVIDIA A100", arch="sm_80", sm_count=108))  # another, without bandwidth
        s.put_device(DEVICE)  # the H100 is the most recent
        sid = s.start_session("/abs/row_sum.cu", "row_sum", "oh", "th", SPEC.spec_hash, DEVICE.name, "exhaustive",
                              10, 0, "structural")
        s.put_original("oh", SPEC.spec_hash, DEVICE.name, [t(u) for u in ORIGINAL_US])
        for b in BLOCKS[:-1]:
            us = recorded_us(b)
            obj = math.sqrt(us[0] / ORIGINAL_US[0] * us[1] / ORIGINAL_US[1])
            s.put_evaluation(sid, "th", SPEC.spec_hash, DEVICE.name, Evaluation(
                params={"BLOCK": b}, status=Status.OK, timings=[t(u) for u in us],
                gbps=[8192 * 4100 * 4 / (us[0] * 1e3), 1000 * 4100 * 4 / (us[1] * 1e3)],
                resources=Resources(registers=24, static_smem=4 * b, occupancy=1.0, blocks_per_sm=2048 // b),
                objective=obj))
        s.put_evaluation(sid, "th", SPEC.spec_hash, DEVICE.name, Evaluation(
            params={"BLOCK": 1024}, status=Status.VERIFY_FAILED, error="out[3]: 1.5 != 2.0"))
        s.finish_session(sid, "finished", {})
    return path


@pytest.fixture
def backend(recording):
    b = ReplayBackend(Store(recording))
    yield b
    b.close()


def test_is_a_backend_named_replay(backend):
    assert isinstance(backend, ReplayBackend) and backend.name == "replay"
    for m in ("device", "measure_copy_bandwidth", "start", "evaluate", "confirm", "close"):
        assert callable(getattr(backend, m)) and hasattr(Backend, m)


def test_device_and_bandwidth(backend, recording):
    assert backend.device() == DEVICE
    assert backend.measure_copy_bandwidth() == 2960.0
    other = ReplayBackend(Store(recording), device="NVIDIA A100")
    assert other.device().arch == "sm_80"
    with pytest.raises(KerntuneError, match="no copy bandwidth"):
        other.measure_copy_bandwidth()
    other.close()
    missing = ReplayBackend(Store(recording), device="RTX 4090")
    with pytest.raises(KerntuneError, match="recorded devices: NVIDIA H100 80GB HBM3, NVIDIA A100"):
        missing.device()
    missing.close()


def test_empty_recording_has_no_device(tmp_path):
    b = ReplayBackend(Store(tmp_path / "empty.sqlite"))
    with pytest.raises(KerntuneError, match="no device"):
        b.device()
    b.close()


def test_start_returns_recorded_original(backend):
    assert backend.start(problem()) == [t(u) for u in ORIGINAL_US]


def test_start_without_original_recording(backend):
    p = problem()
    p.original_hash = "edited-file"
    with pytest.raises(KerntuneError) as e:
        backend.start(p)
    assert "no recorded measurement of the original kernel for this spec on NVIDIA H100 80GB HBM3" in e.value.message
    assert not isinstance(e.value, ReplayMiss)


def test_evaluate_answers_recorded_configs(backend):
    backend.start(problem())
    ev = backend.evaluate(variant(256))
    assert ev.status == Status.OK and ev.from_store
    assert [x.median_us for x in ev.timings] == recorded_us(256)
    assert ev.objective == pytest.approx(math.sqrt(0.6 * 0.7))
    assert ev.resources.blocks_per_sm == 8
    # answers are copies: changing one does not change the next
    ev.timings[0].median_us = -1.0
    ev.params["BLOCK"] = 7
    again = backend.evaluate(variant(256))
    assert again.timings[0].median_us == recorded_us(256)[0] and again.params == {"BLOCK": 256}
    bad = backend.evaluate(variant(1024))
    assert bad.status == Status.VERIFY_FAILED and "1.5 != 2.0" in bad.error and bad.from_store
    best = min((backend.evaluate(variant(b)) for b in BLOCKS[:-1]), key=lambda e: e.objective)
    assert best.params == {"BLOCK": 256}


def test_evaluate_miss(backend):
    backend.start(problem())
    with pytest.raises(ReplayMiss, match="not recorded"):
        backend.evaluate(variant(96))
    b2 = ReplayBackend(backend.store)
    b2.start(problem())
    b2._problem = problem(template_hash="another-template")  # same original, a different template
    with pytest.raises(ReplayMiss):
        b2.evaluate(variant(256))


def test_confirm_returns_recorded_timings(backend):
    backend.start(problem())
    orig, var = backend.confirm(variant(128), rounds=3)
    assert orig == [t(u) for u in ORIGINAL_US]
    assert var == [t(u) for u in recorded_us(128)]
    with pytest.raises(ReplayMiss):
        backend.confirm(variant(1024))  # recorded, but failed: nothing to quote
    with pytest.raises(ReplayMiss):
        backend.confirm(variant(2048))


def test_replay_never_needs_compiled_code(backend):
    backend.start(problem())
    v = variant(64)
    assert v.compiled is None
    assert backend.evaluate(v).ok


# --------------------------------------------------------------------------------------------- with the tuner
def record_row_sum(tmp_path):
    """A recording of examples/row_sum.cu for every valid configuration, made with the Store API the way a GPU
    session writes it; the objective is a smooth function of the parameters, best at BLOCK=256, UNROLL=8."""
    import shutil
    from pathlib import Path

    from agent_core.model import sha256_text
    from agent_core.space import valid_configs
    from agent_core.tuner import prepare

    src = tmp_path / "row_sum.cu"
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "row_sum.cu", src)
    prep = prepare(str(src), "row_sum", use_workspace_files=False)
    th, sh, oh = prep.template.template_hash, prep.spec.spec_hash, sha256_text(prep.text)
    rec = tmp_path / "recording.sqlite"
    with Store(rec) as s:
        s.put_device(DEVICE)
        s.put_original(oh, sh, DEVICE.name, [t(u) for u in ORIGINAL_US])
        sid = s.start_session(str(src), "row_sum", oh, th, sh, DEVICE.name, "exhaustive", 100, 0, "structural")
        for cfg in valid_configs(prep.template.space, prep.spec.sizes):
            f = 1 + 0.1 * (math.log2(cfg["BLOCK"]) - 8) ** 2 + 0.02 * (math.log2(cfg["UNROLL"]) - 3) ** 2
            us = [u * 0.5 * f for u in ORIGINAL_US]
            s.put_evaluation(sid, th, sh, DEVICE.name, Evaluation(params=cfg, status=Status.OK,
                                                                  timings=[t(u) for u in us], gbps=[1.0, 1.0],
                                                                  objective=0.5 * f))
        s.finish_session(sid, "finished", {})
    return src, rec


def test_tuner_session_on_replay(tmp_path):
    pytest.importorskip("agent_core.templatize")  # the tuner's structural templatizer (another module)
    from agent_core.tuner import TuneOptions, tune

    src, rec = record_row_sum(tmp_path)
    with Store(tmp_path / "ws.sqlite") as ws:
        backend = ReplayBackend(Store(rec))
        r = tune(str(src), "row_sum", backend, ws, TuneOptions(budget=100, strategy="auto"))
        backend.close()
        s = r.summary
        assert r.status == "finished" and s["device"] == DEVICE.name and s["copy_bw_gbps"] == 2960.0
        assert s["best_params"] == {"BLOCK": 256, "UNROLL": 8}
        assert s["speedup"] == pytest.approx(2.0)
        assert s["counts"]["ok"] == 30 and s["counts"]["failed"] == 0
        assert ws.latest_session(str(src), "row_sum", finished_only=True)["summary"]["best_params"] == s["best_params"]
        # with TPE and a budget of a third of the space, the best found is within 5% of the optimum
        backend = ReplayBackend(Store(rec))
        with Store(tmp_path / "ws2.sqlite") as ws2:
            r2 = tune(str(src), "row_sum", backend, ws2, TuneOptions(budget=10, strategy="tpe", seed=1))
        backend.close()
        assert r2.summary["counts"]["measured"] == 10
        assert r2.best.objective <= 0.5 * 1.05
