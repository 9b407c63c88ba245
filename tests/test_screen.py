"""Screening expert bindings before round 1 (agent_core/agent/screen.py), over replay recordings.

The real H100 bench recording holds the bench kernels' first bindings: those verify, the other bindings are not
recorded and are not counted as failures. The fixture below is a recording written through the Store API (the
replay format, not a measurement): for a kernel in another style, the likeliest binding's default configuration
is recorded as failing verification and a later binding's as verified, so the loop must tune the later one."""

import re
import shutil
from pathlib import Path

import pytest

from agent_core.agent.loop import AgentOptions, expert_templater, optimize
from agent_core.agent.screen import FAILED, NOT_RECORDED, VERIFIED, screen, smallest_size_set
from agent_core.measure.replay import ReplayBackend
from agent_core.model import DeviceInfo, Evaluation, Status, Timing, sha256_text
from agent_core.search.tuner import prepare
from agent_core.store import Store
from agent_core.templating import experts as X
from agent_core.templating.space import valid_configs

ROOT = Path(__file__).resolve().parent.parent
DEVICE = DeviceInfo(name="fixture device (synthetic recording)", arch="sm_90", sm_count=132,
                    copy_bandwidth_gbps=3000.0)


def timing(us: float) -> Timing:
    return Timing(median_us=us, min_us=us, max_us=us * 1.02, iqr_us=us * 0.01, reps=50, batch=1, l2="flushed")


def test_bench_recording_verifies_the_recorded_binding_and_misses_are_not_failures(tmp_path):
    src = tmp_path / "silu_and_mul.cu"
    shutil.copy(ROOT / "bench" / "silu_and_mul.cu", src)
    prep = prepare(str(src), "silu_and_mul_kernel", use_workspace_files=False)
    rec = tmp_path / "rec.sqlite"
    shutil.copy(ROOT / "tests" / "data" / "stores" / "bench.sqlite", rec)
    be = ReplayBackend(Store(rec))
    try:
        s = screen(prep, be)
    finally:
        be.close()
    assert s.size_set == smallest_size_set(prep.spec) == 2  # 16 x 14336 moves the fewest bytes
    assert s.verdicts[0].status == VERIFIED and {v.status for v in s.verdicts[1:]} == {NOT_RECORDED}
    assert [t.template_hash for t in s.templates] == [s.verdicts[0].template.template_hash]
    assert s.verdicts[0].words(s.sizes_text) == ("expert act_and_mul, binding: out=out, x=x, d=`d`, SiLU, gate and up "
                                                 "halves [gate | up], activation rounded to f16 before the multiply … "
                                                 "verified on 16x14336")


@pytest.fixture()
def recorded_style(tmp_path):
    """A gated kernel with a token argument, grid-stride (tests/data/cu/styles), and a recording in which its first
    candidate binding fails and its fourth verifies (every configuration of the fourth recorded, 0.5x the time)."""
    src = tmp_path / "gated.cu"
    shutil.copy(ROOT / "tests" / "data" / "cu" / "styles" / "gated_tokens_gridstride.cu", src)
    prep = prepare(str(src), "act_kernel", use_workspace_files=False)
    bs = X.candidates(prep.cf, "act_kernel", prep.spec)
    wrong, right = X.bind(bs[0], prep.cf, prep.spec), X.bind(bs[3], prep.cf, prep.spec)
    orig = [50.0 + 10 * i for i in range(len(prep.spec.sizes))]
    rec = tmp_path / "rec.sqlite"
    with Store(rec) as st:
        st.put_device(DEVICE)
        st.put_original(sha256_text(prep.text), prep.spec.spec_hash, DEVICE.name, [timing(u) for u in orig])
        st.put_evaluation(None, wrong.template_hash, prep.spec.spec_hash, DEVICE.name, Evaluation(
            params=wrong.space.original_config(), status=Status.VERIFY_FAILED, error="out[256]: 1.5 != 0.25 (fixture)"))
        for cfg in valid_configs(right.space, prep.spec.sizes):
            us = [u * 0.5 for u in orig]
            st.put_evaluation(None, right.template_hash, prep.spec.spec_hash, DEVICE.name, Evaluation(
                params=cfg, status=Status.OK, timings=[timing(u) for u in us], objective=0.5))
    return src, prep, bs, rec


def test_a_failed_binding_is_dropped_and_a_verified_one_kept(recorded_style):
    src, prep, bs, rec = recorded_style
    be = ReplayBackend(Store(rec))
    try:
        s = screen(prep, be)
    finally:
        be.close()
    st = [v.status for v in s.verdicts]
    assert st[0] == FAILED and "out[256]" in s.verdicts[0].detail and st[3] == VERIFIED
    assert set(st[1:3] + st[4:]) == {NOT_RECORDED}
    assert [t.template_hash for t in s.templates] == [s.verdicts[3].template.template_hash]


def test_optimize_tunes_the_verified_binding_and_records_every_verdict(recorded_style, tmp_path):
    src, prep, bs, rec = recorded_style
    events = []
    be = ReplayBackend(Store(rec))
    with Store(tmp_path / "ws.sqlite") as ws:
        try:
            res = optimize(str(src), "act_kernel", be, ws, AgentOptions(budget_per_round=10, max_rounds=1,
                                                                        dispatch=False),
                           templaters=[expert_templater], on_event=lambda e: events.append(e.message))
        finally:
            be.close()
        assert res.rounds[0].template.template_hash == X.bind(bs[3], prep.cf, prep.spec).template_hash
        assert res.rounds[0].summary["speedup"] == pytest.approx(2.0)
        steps = [x for x in ws.steps(res.rounds[0].summary["session_id"]) if x["kind"] == "screen"]
    assert len(steps) == len(bs) and steps[3]["data"]["status"] == VERIFIED
    assert steps[3]["text"] == f"expert act_and_mul, binding: {bs[3].describe()} … verified on {res.screening.sizes_text}"
    assert steps[0]["data"]["status"] == FAILED and steps[0]["data"]["binding"] == bs[0].describe()
    assert any(m.startswith("screening 16 expert bindings (act_and_mul: 16)") for m in events)
    assert any(m.endswith("failed (verify_failed: out[256]: 1.5 != 0.25 (fixture))") for m in events)


@pytest.mark.nvcc
def test_the_screening_compiles_the_instantiation_the_spec_names(tmp_path, monkeypatch):
    """A templated kernel the host launches in two instantiations (rotary_embedding_kernel<bf16, true/false>): the
    screening's original is the one the spec's template_args name, as the rounds' is (it failed with "2 compiled
    instantiations and none was chosen" on the H100, and the screening was skipped). The backend here runs nothing:
    it keeps the problem it is started with and answers every check as verified."""
    from agent_core.measure.backend import Problem
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    src = ROOT / "bench" / "corpus" / "rotary" / "rotary_embedding_template_bf16.cu"
    prep = prepare(str(src), "rotary_embedding_kernel", use_workspace_files=False)
    assert prep.spec.template_args == ["__nv_bfloat16", "true"]

    class Recorder:
        name = "recorder"
        problems: list[Problem] = []

        def device(self):
            return DEVICE

        def start(self, problem, original=None):
            self.problems.append(problem)
            return [timing(50.0) for _ in prep.spec.sizes]

        def check(self, variant, size_sets, scale=1.0):
            return Evaluation(params=dict(variant.params), status=Status.OK)

    be = Recorder()
    bindings = X.candidates(prep.cf, "rotary_embedding_kernel", prep.spec)[:1]
    s = screen(prep, be, bindings=bindings)
    assert be.problems and s.verdicts[0].status == VERIFIED
    assert re.match(r"_ZN7pos_enc23rotary_embedding_kernelI13__nv_bfloat16Lb1E", be.problems[0].reference.symbol)


@pytest.mark.nvcc
def test_bindings_that_agree_on_the_smallest_size_set_are_told_apart_on_the_others(tmp_path, monkeypatch):
    """Two rotary bindings verify on the smallest size set (there rot_dim = head_size); checked on the other size
    sets, the one that reads the wrong size fails (here: the backend answers so for the first binding) and the
    loop is given the other. Every check is recorded: one per binding on the smallest set, then one per survivor
    on all the others."""
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    src = ROOT / "bench" / "corpus" / "rotary" / "rotary_embedding_template_bf16.cu"
    prep = prepare(str(src), "rotary_embedding_kernel", use_workspace_files=False)
    bindings = X.candidates(prep.cf, "rotary_embedding_kernel", prep.spec)[:3]
    idx = smallest_size_set(prep.spec)

    class Answers:
        name = "answers"
        calls: list[tuple[int, list[int]]] = []
        n = 0

        def device(self):
            return DEVICE

        def start(self, problem, original=None):
            return [timing(50.0) for _ in prep.spec.sizes]

        def check(self, variant, size_sets, scale=1.0):
            self.n += 1
            self.calls.append((self.n, list(size_sets), scale))
            bad = size_sets != [idx] and self.n == len(bindings) + 1  # the first survivor, on the other sets
            return Evaluation(params=dict(variant.params), status=Status.VERIFY_FAILED if bad else Status.OK,
                              error="query[5] = 1 vs 2 (fixture)" if bad else "")

    be = Answers()
    s = screen(prep, be, bindings=bindings)
    others = [i for i in range(len(prep.spec.sizes)) if i != idx]
    assert [c[1:] for c in be.calls] == [([idx], 1.0)] * 3 + [(others, 1.0)] * 3 + [([idx], 2.0 ** -10)] * 2
    assert [v.status for v in s.verdicts] == [FAILED, VERIFIED, VERIFIED]
    assert "that set could not tell it from the kernel" in s.verdicts[0].detail
    assert [t.template_hash for t in s.templates][:1] == [s.verdicts[1].template.template_hash]


@pytest.mark.nvcc
def test_a_lone_binding_that_verifies_only_on_the_smallest_size_set_is_not_tuned(tmp_path, monkeypatch):
    """The smallest size set can be degenerate (Caffe's channel softmax at a channel stride of 1 is a row softmax
    there): a binding that verifies there alone of its expert is checked on the other size sets too, and where it
    fails there the loop is not given it (no round spent on configurations that fail everywhere else)."""
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    src = ROOT / "bench" / "corpus" / "rotary" / "rotary_embedding_template_bf16.cu"
    prep = prepare(str(src), "rotary_embedding_kernel", use_workspace_files=False)
    bindings = X.candidates(prep.cf, "rotary_embedding_kernel", prep.spec)[:1]
    idx = smallest_size_set(prep.spec)
    others = [i for i in range(len(prep.spec.sizes)) if i != idx]

    class Answers:
        name = "answers"
        calls: list = []

        def device(self):
            return DEVICE

        def start(self, problem, original=None):
            return [timing(50.0) for _ in prep.spec.sizes]

        def check(self, variant, size_sets, scale=1.0):
            self.calls.append((list(size_sets), scale))
            bad = size_sets == others
            return Evaluation(params=dict(variant.params), status=Status.VERIFY_FAILED if bad else Status.OK,
                              error="query[300] = 1 vs 2 (fixture)" if bad else "")

    be = Answers()
    s = screen(prep, be, bindings=bindings)
    assert be.calls == [([idx], 1.0), (others, 1.0)]  # no small-magnitude probe of a binding that failed
    assert [v.status for v in s.verdicts] == [FAILED] and "query[300]" in s.verdicts[0].detail
    assert s.templates == []


class _ScaleAnswers:
    """Every check at the usual magnitudes verifies; the small-magnitude checks answer from ``small`` in turn."""
    name = "scale answers"

    def __init__(self, sizes, small: list[bool]):
        self.sizes, self.small, self.scaled = sizes, list(small), []

    def device(self):
        return DEVICE

    def start(self, problem, original=None):
        return [timing(50.0) for _ in self.sizes]

    def check(self, variant, size_sets, scale=1.0):
        if scale == 1.0:
            return Evaluation(params=dict(variant.params), status=Status.OK)
        self.scaled.append(list(size_sets))
        ok = self.small.pop(0)
        return Evaluation(params=dict(variant.params), status=Status.OK if ok else Status.VERIFY_FAILED,
                          error="" if ok else "rms_norm[3] = 1.7 vs 0.9 (fixture)")


def _tvm_eps_bindings():
    """The TVM-style RMSNorm (held-out batch 5): eps = 1/4096 (the mean as a product) and eps = 1e-5 both bind."""
    src = ROOT / "bench" / "corpus" / "rms_norm" / "rms_norm_tvm_codegen_fixed_hidden_fp16.cu"
    prep = prepare(str(src), "rms_norm_kernel", use_workspace_files=False)
    bs = X.candidates(prep.cf, "rms_norm_kernel", prep.spec)
    wrong = next(b for b in bs if "eps=2.441406e-04f" in b.describe() and "inside" in b.describe())
    right = next(b for b in bs if "eps=1.000000e-05f" in b.describe() and "inside" in b.describe())
    return prep, [wrong, right]


@pytest.mark.nvcc
def test_a_binding_of_the_wrong_eps_fails_the_small_magnitude_check(tmp_path, monkeypatch):
    """Both eps bindings verify at the usual magnitudes; with inputs scaled by 2^-10 the wrong one differs from the
    original while the other holds: the wrong one fails and the loop is given the other."""
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    prep, bindings = _tvm_eps_bindings()
    be = _ScaleAnswers(prep.spec.sizes, [False, True])
    s = screen(prep, be, bindings=bindings)
    assert be.scaled == [[smallest_size_set(prep.spec)]] * 2
    assert [v.status for v in s.verdicts] == [FAILED, VERIFIED]
    assert "scaled by 2^-10" in s.verdicts[0].detail and "eps" in s.verdicts[0].detail
    assert s.verdicts[1].small == "holds"
    assert [t.template_hash for t in s.templates][:1] == [s.verdicts[1].template.template_hash]
    assert s.verdicts[0].to_dict(s.size_set)["small_inputs"].startswith("verify_failed")


@pytest.mark.nvcc
def test_the_small_magnitude_check_decides_nothing_where_no_binding_holds(tmp_path, monkeypatch):
    """A kernel need not be scale-invariant: where every binding differs at the small magnitude, all stay verified,
    in the old order, and their verdicts say so."""
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    prep, bindings = _tvm_eps_bindings()
    s = screen(prep, _ScaleAnswers(prep.spec.sizes, [False, False]), bindings=bindings)
    assert [v.status for v in s.verdicts] == [VERIFIED, VERIFIED]
    assert [t.template_hash for t in s.templates][:1] == [s.verdicts[0].template.template_hash]
    assert "as every binding of its expert does" in s.verdicts[0].words(s.sizes_text)
