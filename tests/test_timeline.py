"""Where a run's time goes (agent_core.measure.timeline) and what the run does with it: phases that add up to
the wall time, the worker's reported phases, batches of variants in one worker request (a crash costs only the
crashing variant), the original timed once per run, early stop, the whole-run time budget."""

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent_core.measure import timeline as tl
from agent_core.measure.backend import Launch, Problem, Variant
from agent_core.measure.gpu_backend import GpuBackend, Supervisor, WorkerCrashed, WorkerProcess
from agent_core.measure.replay import ReplayBackend
from agent_core.model import Compiled, Evaluation, Resources, Status, Timing
from agent_core.store import Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tests" / "data" / "stores" / "examples.sqlite"
BENCH = ROOT / "tests" / "data" / "stores" / "bench.sqlite"


# --------------------------------------------------------------------------------------------- the timers
def test_nested_phases_count_their_own_time_and_add_up_to_the_wall():
    t = tl.Timeline()
    with t.phase("confirm"):
        time.sleep(0.05)
        with t.phase("compile"):
            time.sleep(0.1)
    with t.phase("worker_call"):
        time.sleep(0.02)
        t.attribute("verify", 0.5)  # more than the call took: the call's own time goes to zero, not below
    time.sleep(0.03)
    t.finish()
    rep = t.report()
    by = {r["phase"]: r for r in rep["phases"]}
    assert 0.1 <= by["compile"]["s"] < 0.3 and 0.05 <= by["confirm"]["s"] < 0.1  # confirm less its compile
    assert by["worker_call"]["s"] == 0.0 and by["verify"]["s"] == 0.5
    assert rep["phases"][-1]["phase"] == "other"
    assert sum(r["s"] for r in rep["phases"]) >= rep["wall_s"] - 1e-9  # phases + other cover the wall
    assert by["other"]["s"] == pytest.approx(max(0.0, rep["wall_s"] - sum(
        r["s"] for r in rep["phases"] if r["phase"] != "other")))
    assert list(tl.PHASES).index("compile") < list(tl.PHASES).index("confirm")
    assert [r["phase"] for r in rep["phases"][:-1]] == [p for p in tl.PHASES if p in by]


def test_other_threads_are_overlapped_not_summed():
    t = tl.Timeline()

    def background():
        with t.phase("compile"):
            time.sleep(0.1)
    th = threading.Thread(target=background)
    th.start()
    th.join()
    t.finish()
    rep = t.report()
    assert rep["overlapped"]["compile"] >= 0.1
    assert [r["phase"] for r in rep["phases"]] == ["other"]
    assert "overlapped with the above" in tl.render(rep)


def test_outside_a_run_nothing_is_recorded_and_run_scope_nests():
    with tl.phase("compile"):
        pass  # no active run: a no-op
    assert isinstance(tl.current(), tl._Off)
    with tl.run_scope() as (outer, own):
        assert own and tl.current() is outer
        with tl.run_scope() as (inner, own2):
            assert inner is outer and not own2
    assert outer.finished is not None and isinstance(tl.current(), tl._Off)


def test_tallies_count_events_of_any_thread_and_merge():
    t = tl.Timeline()
    tok = tl.bind(t)
    try:
        tl.tally("NVRTC", 0.04)

        def pool_thread():
            token = tl.bind_tallies(t)
            try:
                tl.tally("NVRTC", 0.1)
                with tl.phase("compile"):  # a pool thread's phases are not summed: the waiting thread times the wait
                    tl.tally("nvcc")
            finally:
                tl.unbind(token)
        th = threading.Thread(target=pool_thread)
        th.start()
        th.join()
    finally:
        tl.unbind(tok)
    rep = t.report()
    assert rep["tallies"] == {"NVRTC": {"n": 2, "s": pytest.approx(0.14), "max_s": 0.1},
                              "nvcc": {"n": 1, "s": 0.0, "max_s": 0.0}}
    assert "compile" not in rep["overlapped"]
    m = tl.merge_reports([rep, rep])
    assert m["tallies"]["NVRTC"]["n"] == 4 and m["tallies"]["NVRTC"]["max_s"] == 0.1
    assert tl.render_tallies(m["tallies"]) == "NVRTC 4 (0.28 s, longest 0.10 s), nvcc 2"


def test_merge_reports_sums_phases_and_walls():
    a = {"wall_s": 10.0, "phases": [{"phase": "compile", "label": "c", "s": 4.0, "n": 2},
                                    {"phase": "other", "label": "o", "s": 6.0, "n": 0}], "overlapped": {"compile": 1}}
    b = {"wall_s": 5.0, "phases": [{"phase": "time", "label": "t", "s": 5.0, "n": 1},
                                   {"phase": "other", "label": "o", "s": 0.0, "n": 0}], "overlapped": {}}
    m = tl.merge_reports([a, b])
    assert m["wall_s"] == 15.0 and [r["phase"] for r in m["phases"]] == ["compile", "time", "other"]
    assert [r["s"] for r in m["phases"]] == [4.0, 5.0, 6.0] and m["overlapped"] == {"compile": 1}
    assert sum(r["pct"] for r in m["phases"]) == pytest.approx(100.0)


# --------------------------------------------------------------------------------------------- the worker side
class BatchWorker:
    """A pure-Python worker handler (the real protocol, no CUDA): reports phases and batch parts, and dies on a
    variant whose parameter CRASH is 1 (as an illegal address kills a CUDA worker)."""

    def __init__(self, beat=None):
        self.beat = beat
        self.phases = {}
        self.send_part = lambda obj: None
        self.exit_requested = False
        self.started = []

    def start(self, problem, batches, time_original, reference_us=None):  # GpuWorker.start's signature
        self.started.append((batches, time_original))
        self.phases["original"] = 0.25
        n = len(problem.spec.sizes) if problem is not None else 2
        return ([Timing(10.0, 9.0, 11.0, 0.1, 10, b, "flushed") for b in batches or [1] * n] if time_original
                else None, batches or [1] * n)

    def starts(self):
        return self.started

    def evaluate_many(self, variants, counters):
        out = []
        for v in variants:
            if v.params.get("CRASH"):
                os.kill(os.getpid(), signal.SIGSEGV)
                time.sleep(10)
            self.phases["verify"] = self.phases.get("verify", 0.0) + 0.01
            self.phases["time"] = self.phases.get("time", 0.0) + 0.02
            ev = Evaluation(params=dict(v.params), status=Status.OK,
                            timings=[Timing(5.0, 4.0, 6.0, 0.1, 10, 1, "flushed") for _ in v.launches])
            out.append(ev)
            self.send_part(ev)
        return out


def test_worker_reports_its_phases_and_the_parts_of_a_batch_before_a_crash():
    w = WorkerProcess(BatchWorker, (), watchdog_s=20)
    try:
        v = [Variant({"A": i, "CRASH": 0}, None, [Launch((1, 1, 1), (32, 1, 1))]) for i in range(3)]
        evs = w.call("evaluate_many", v, [1, 2, 3])
        assert [e.params["A"] for e in evs] == [0, 1, 2]
        assert w.last_phases == pytest.approx({"verify": 0.03, "time": 0.06})
        crash = v[:2] + [Variant({"A": 9, "CRASH": 1}, None, v[0].launches)]
        with pytest.raises(WorkerCrashed):
            w.call("evaluate_many", crash, [4, 5, 6])
        assert [e.params["A"] for e in w.parts] == [0, 1]  # what finished before the crash came back
    finally:
        w.kill()


def _problem():
    ref = Compiled(cubin_path="ref.cubin", symbol="ref", resources=Resources(registers=8, static_smem=0),
                   source_hash="r", log="")
    return Problem(spec=replace_spec(), reference=ref, reference_launches=[Launch((1, 1, 1), (32, 1, 1))] * 2,
                   original_hash="o", template_hash="t", spec_hash="s")


def replace_spec():
    from agent_core.model import ArgSpec, TuningSpec
    return TuningSpec(kernel="k", args=[ArgSpec(name="x", role="in", dtype="f32", size="n")],
                      sizes=[{"n": 256}, {"n": 300}], grid=["1"], block=["32"], path="k.cu")


def test_gpu_backend_measures_a_batch_in_one_request_and_a_crash_costs_one_variant():
    be = GpuBackend(watchdog_s=20)
    be.sup = Supervisor(BatchWorker, (), 20, 60)
    timeline = tl.Timeline()
    token = tl.bind(timeline)
    try:
        problem = _problem()
        orig = be.start(problem)
        assert [t.median_us for t in orig] == [10.0, 10.0]
        comp = Compiled(cubin_path="v.cubin", symbol="v", resources=Resources(registers=16, static_smem=0),
                        source_hash="v", log="")
        launches = [Launch((1, 1, 1), (32, 1, 1))] * 2
        vs = [Variant({"A": i, "CRASH": int(i == 2)}, comp, launches) for i in range(5)]
        evs = be.evaluate_many(vs)
        assert [e.params["A"] for e in evs] == [0, 1, 2, 3, 4]
        assert [e.status for e in evs] == [Status.OK, Status.OK, Status.CRASHED, Status.OK, Status.OK]
        assert all(e.objective == pytest.approx(0.5) for e in evs if e.ok)  # 5 us against the original's 10
        assert be.restarts == 1
        # the fresh worker redid the setup without timing the original
        assert be.sup.call("starts") == [([1, 1], False)]
        # start with the original's timings from earlier in the run: set up, not timed
        again = be.start(problem, original=orig)
        assert again == orig and be.sup.call("starts")[-1] == ([1, 1], False)
    finally:
        tl.unbind(token)
        be.close()
    rep = timeline.report()
    by = {r["phase"]: r["s"] for r in rep["phases"]}
    # the two starts asked for report 0.25 s each; the setup the fresh worker redid counts as its start
    assert by["original"] == pytest.approx(0.5)
    # 4 verified variants: 2 before the crash (reported with their parts), 2 in the fresh worker's request
    assert by["verify"] == pytest.approx(0.04) and by["time"] == pytest.approx(0.08)
    assert by["worker_start"] > 0


def test_a_batch_past_its_deadline_leaves_the_variants_after_a_crash_unmeasured():
    """The run's time budget as a deadline: a crash mid-batch restarts the worker for the rest only while the
    deadline has not passed (hanging variants cost a hang limit each: a batch of them overran a 60 s run by 50 s on
    the H200); those left are not measured and not returned."""
    be = GpuBackend(watchdog_s=20)
    be.sup = Supervisor(BatchWorker, (), 20, 60)
    try:
        be.start(_problem())
        comp = Compiled(cubin_path="v.cubin", symbol="v", resources=Resources(registers=16, static_smem=0),
                        source_hash="v", log="")
        launches = [Launch((1, 1, 1), (32, 1, 1))] * 2
        vs = [Variant({"A": i, "CRASH": int(i == 1)}, comp, launches) for i in range(5)]
        evs = be.evaluate_many(vs, deadline=time.monotonic() - 1.0)  # already past
        assert [e.params["A"] for e in evs] == [0, 1] and evs[1].status == Status.CRASHED
        evs = be.evaluate_many(vs, deadline=time.monotonic() + 60.0)
        assert [e.params["A"] for e in evs] == [0, 1, 2, 3, 4]
    finally:
        be.close()


# --------------------------------------------------------------------------------------------- the run
def store_original_key(res, store):
    s = store.session(res.rounds[0].summary["session_id"])
    return s["original_hash"], s["spec_hash"], s["device"]


class CountingReplay(ReplayBackend):
    """The replay backend, counting how each start was asked for."""

    def __init__(self, store):
        super().__init__(store)
        self.starts = []

    def start(self, problem, original=None):
        self.starts.append(original is not None)
        return super().start(problem, original=original)


@pytest.fixture
def bench_copy(tmp_path):
    import shutil
    for f in ("silu_and_mul.cu", "rms_norm.cu"):
        shutil.copy(ROOT / "bench" / f, tmp_path / f)
    return tmp_path


def test_optimize_times_the_original_once_and_stores_where_the_time_went(bench_copy):
    from agent_core.agent.loop import AgentOptions, optimize
    be = CountingReplay(Store(BENCH))
    store = Store(bench_copy / "results.sqlite")
    try:
        res = optimize(str(bench_copy / "rms_norm.cu"), "rms_norm_kernel", be, store,
                       AgentOptions(budget_per_round=40, max_rounds=3))
    finally:
        be.close()
    assert len(res.rounds) >= 2
    # timed once, by the first start (the expert screening's); every later start (screening, rounds, dispatch)
    # reuses those timings
    assert be.starts[0] is False and all(be.starts[1:]), be.starts
    assert res.screening is not None and res.screening.verdicts
    assert all(r.summary["original_reused"] for r in res.rounds)
    assert store.get_original(*store_original_key(res, store)) is not None  # stored though no round timed it
    first = res.rounds[0].summary["original_us"]
    assert all(r.summary["original_us"] == first or r.summary["confirmed"] for r in res.rounds)
    rep = res.timeline
    assert rep and rep["phases"][-1]["phase"] == "other"
    assert sum(r["s"] for r in rep["phases"]) == pytest.approx(rep["wall_s"], rel=1e-6, abs=1e-6)
    step = [s for s in store.steps(res.rounds[-1].summary["session_id"]) if s["kind"] == "timeline"]
    assert len(step) == 1 and step[0]["data"]["wall_s"] == pytest.approx(rep["wall_s"])
    assert "where the time went" in step[0]["text"]
    store.close()


def test_early_stop_ends_a_stalled_search_and_says_why(bench_copy):
    from agent_core.search.tuner import EARLY_STOP_GAIN, TuneOptions, prepare, tune
    from agent_core.templating import experts
    prep = prepare(str(bench_copy / "silu_and_mul.cu"), "silu_and_mul_kernel")
    m = experts.match(prep.cf, prep.kernel.name, prep.spec)
    prep = replace(prep, template=experts.bind(m[0], prep.cf, prep.spec))
    results = {}
    for n in (None, 5):
        be = ReplayBackend(Store(BENCH))
        store = Store(bench_copy / f"r{n}.sqlite")
        try:
            r = tune(prep.path, prep.kernel.name, be, store, TuneOptions(budget=60, strategy="random", seed=3,
                                                                         early_stop_after=n), prepared=prep)
        finally:
            be.close()
            store.close()
        results[n] = r
    full, stopped = results[None], results[5]
    assert full.summary["stop_reason"] is None
    assert stopped.summary["stop_reason"].startswith("early stop: the best has not improved")
    evs = [e for e in stopped.evaluations if e.status != Status.PRUNED]
    assert len(evs) < len([e for e in full.evaluations if e.status != Status.PRUNED])
    # the same seed: the stopped search is a prefix of the full one, and its last 5 gained nothing over 1%
    assert [e.params for e in evs] == [e.params for e in full.evaluations if e.status != Status.PRUNED][:len(evs)]
    objs = [e.objective if e.ok else None for e in evs]
    best_before = min(o for o in objs[:-5] if o is not None)
    assert all(o is None or o >= best_before * (1 - EARLY_STOP_GAIN) for o in objs[-5:])


class SlowReplay(ReplayBackend):
    """The replay backend, taking ``delay`` seconds per evaluation like a GPU would."""

    delay = 0.05

    def evaluate(self, variant):
        time.sleep(self.delay)
        return super().evaluate(variant)


def test_the_time_budget_holds_for_the_whole_optimize_run(bench_copy):
    from agent_core.agent.loop import AgentOptions, optimize
    be = SlowReplay(Store(BENCH))
    store = Store(bench_copy / "results.sqlite")
    try:
        t0 = time.monotonic()
        res = optimize(str(bench_copy / "rms_norm.cu"), "rms_norm_kernel", be, store,
                       AgentOptions(budget_per_round=40, max_rounds=4, time_budget_s=0.6, early_stop_after=None))
        wall = time.monotonic() - t0
    finally:
        be.close()
        store.close()
    measured = sum(r.summary["counts"]["measured"] for r in res.rounds)
    # 0.6 s at >= 0.05 s an evaluation: far fewer than one round's 40; the rounds share the budget
    assert measured < 40 and wall < 30
    assert any("time budget" in (r.summary.get("stop_reason") or "") for r in res.rounds) or \
        "time budget" in res.final_step.reason


def test_a_spent_time_budget_still_chooses_the_per_shape_dispatch_from_what_was_measured(bench_copy):
    """The per-shape dispatch searches nothing (it chooses among the configurations measured and confirms them), so
    a run whose time budget is spent still makes it, instead of one configuration for every size that the
    no-regression rule may turn into the original everywhere."""
    from agent_core.agent.loop import AgentOptions, optimize
    be = SlowReplay(Store(BENCH))
    store = Store(bench_copy / "results.sqlite")
    events = []
    try:
        res = optimize(str(bench_copy / "silu_and_mul.cu"), "silu_and_mul_kernel", be, store,
                       AgentOptions(budget_per_round=40, max_rounds=4, time_budget_s=0.3, early_stop_after=None),
                       on_event=lambda e: events.append(e.message))
    finally:
        be.close()
        store.close()
    assert res.best is not None
    assert any(m.startswith("per-shape dispatch: from the configurations already measured") for m in events)
    # the dispatch's choice was made (here: no size set gains from another configuration), not skipped
    assert any(m.startswith("per-shape dispatch: no size set is served") or "confirming them against" in m
               for m in events), events[-8:]


def test_a_round_started_past_its_time_budget_still_measures_its_first_batch(bench_copy):
    """A round given what is left of a run's time (screening and compiling can spend nearly all of it) measures
    the batch it asked for before the time budget counts: ending with nothing would waste a verified binding (a
    corpus run, 2026-11-29: a masked softmax's expert screened in 27 s of 40, then "no_variant")."""
    from agent_core.search.tuner import TuneOptions, prepare, tune
    from agent_core.templating import experts
    prep = prepare(str(bench_copy / "silu_and_mul.cu"), "silu_and_mul_kernel")
    m = experts.match(prep.cf, prep.kernel.name, prep.spec)
    prep = replace(prep, template=experts.bind(m[0], prep.cf, prep.spec))
    be = ReplayBackend(Store(BENCH))
    store = Store(bench_copy / "late.sqlite")
    try:
        r = tune(prep.path, prep.kernel.name, be, store, TuneOptions(budget=60, strategy="random", seed=3,
                                                                     time_budget_s=1e-9), prepared=prep)
    finally:
        be.close()
        store.close()
    measured = [e for e in r.evaluations if e.status != Status.PRUNED]
    assert 0 < len(measured) < 60 and r.best is not None
    assert r.summary["stop_reason"].startswith("time budget of 0 s spent after")


def test_the_editors_optimize_has_a_whole_run_time_budget_by_default():
    from server.tuning import DEFAULT_TIME_BUDGET_S, options_from
    assert DEFAULT_TIME_BUDGET_S == 120.0
    assert options_from(None, None).time_budget_s == 120.0
    assert options_from({"tuning": {"timeBudgetSeconds": None}}, None).time_budget_s == 120.0
    assert options_from({"tuning": {"timeBudgetSeconds": 30}}, None).time_budget_s == 30.0
    assert options_from({"tuning": {"timeBudgetSeconds": 0}}, None).time_budget_s is None  # 0: no limit
    assert options_from(None, {"timeBudgetSeconds": 45}).time_budget_s == 45.0


def test_the_benchs_early_stop_default_is_the_tuners():
    from agent_core.bench import BenchOptions
    from agent_core.search.tuner import EARLY_STOP_AFTER, TuneOptions
    from agent_core.agent.loop import AgentOptions
    assert BenchOptions().early_stop_after == TuneOptions().early_stop_after == AgentOptions().early_stop_after \
        == EARLY_STOP_AFTER == 25


class CompilingReplay(ReplayBackend):
    """The replay backend taken for one that runs code: the tuner compiles every variant with nvcc (ahead, in the
    background, for a non-adaptive strategy) and the recording answers for the measurement."""

    name = "replay-compiled"

    def start(self, problem, original=None):
        assert problem.reference is not None  # the original was compiled
        return super().start(problem, original=original)

    def evaluate_many(self, variants, deadline=None):
        assert all(v.compiled is not None and Path(v.compiled.cubin_path).is_file() for v in variants)
        self.batches = getattr(self, "batches", []) + [len(variants)]
        return super().evaluate_many(variants)

    def confirm(self, variant, rounds=5):
        return super().confirm(variant, rounds)


def _tune_row_sum(tmp_path, be, options):
    """examples/row_sum.cu tuned on ``be`` in a copy under tmp_path, into a fresh store; the backend closed after."""
    import shutil
    from agent_core.search.tuner import tune
    shutil.copy(ROOT / "examples" / "row_sum.cu", tmp_path / "row_sum.cu")
    store = Store(tmp_path / "results.sqlite")
    try:
        return tune(str(tmp_path / "row_sum.cu"), "row_sum", be, store, options)
    finally:
        be.close()
        store.close()


@pytest.mark.nvcc
def test_the_next_batch_compiles_while_this_one_is_measured(tmp_path, monkeypatch):
    from agent_core.search.tuner import TuneOptions
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    be = CompilingReplay(Store(EXAMPLES))
    r = _tune_row_sum(tmp_path, be, TuneOptions(budget=30, strategy="random", compile_workers=4, early_stop_after=None))
    assert r.summary["counts"]["measured"] == 30 and r.summary["counts"]["ok"] == 30
    assert be.batches == [4] * 7 + [2]  # asked 4 at a time, the last batch what the budget left
    rep = r.timeline
    by = {x["phase"]: x["s"] for x in rep["phases"]}
    assert rep["overlapped"].get("compile", 0) > 0  # batches compiled on the background thread
    assert by.get("compile", 0) >= 0 and sum(x["s"] for x in rep["phases"]) == pytest.approx(rep["wall_s"])
    # every compile is tallied by how it was served, from the pool's threads too: the 30 variants (NVRTC where the
    # library is, else nvcc and why), the original and the best's confirmation (nvcc, exact)
    t = rep["tallies"]
    served = sum(v["n"] for k, v in t.items() if k in ("NVRTC", "NVRTC, cached", "nvcc", "nvcc, cached"))
    assert served == 32 and t["nvcc: exact (the original, a confirmation)"]["n"] == 2
    if "NVRTC" not in t:
        assert sum(v["n"] for k, v in t.items() if k.startswith("nvcc: ") and "exact" not in k) == 30
    assert "compiles: " in tl.render(rep)


class SlowStartingReplay(CompilingReplay):
    """As CompilingReplay, with a device that takes a while to come up (a GPU worker starting) and an architecture
    known before it (nvidia-smi's, on a GPU machine): device() returns once the original's cubin and ``want`` more
    (the search's first batch, compiled meanwhile too) are in the compile cache, or after 120 s."""

    def __init__(self, store, hint, want=0):
        super().__init__(store)
        self.hint, self.want, self.seen_during_start = hint, want, None

    def arch_hint(self):
        return self.hint

    def device(self):
        if self.seen_during_start is None:
            cache = Path(os.environ["KERNTUNE_CACHE"])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(list(cache.glob("*.cubin"))) < 1 + self.want:
                time.sleep(0.05)
            self.seen_during_start = sorted(p.name for p in cache.glob("*.cubin"))
        return super().device()


@pytest.mark.nvcc
@pytest.mark.parametrize("hint", ["sm_90", "sm_80"])
def test_the_original_compiles_while_the_worker_starts(tmp_path, monkeypatch, hint):
    """The original compiles on another thread for the backend's architecture hint while device() starts the
    worker; the recording's device is sm_90: with a wrong hint (sm_80) the original is compiled again for it."""
    from agent_core.search.tuner import TuneOptions
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    be = SlowStartingReplay(Store(EXAMPLES), hint, want=2)  # the original and the first batch (2 workers)
    started = []

    class Spy(type(be)):
        def start(self, problem, original=None):
            started.append(problem.reference)
            return super().start(problem, original=original)
    be.__class__ = Spy
    r = _tune_row_sum(tmp_path, be, TuneOptions(budget=4, strategy="random", compile_workers=2, early_stop_after=None))
    assert be.seen_during_start  # a cubin was there before device() returned: compiled while it "started"
    assert r.summary["counts"]["ok"] == 4
    # the hint right: the original the session uses is that cubin; wrong: one compiled again for the device's sm_90
    assert (Path(started[0].cubin_path).name in be.seen_during_start) == (hint == "sm_90")
    assert r.timeline["overlapped"].get("compile", 0) > 0



@pytest.mark.nvcc
def test_the_first_batch_compiles_while_the_worker_starts(tmp_path, monkeypatch):
    """The strategy's first batch is asked and compiled while device() starts the worker; the search then measures
    those very cubins (no configuration compiled twice) in the order it asks without the early compile."""
    from agent_core.measure import compiler
    from agent_core.search.tuner import TuneOptions
    opts = dict(budget=6, strategy="random", compile_workers=2, early_stop_after=None)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    runs = lambda: compiler.stats["nvcc_runs"] + compiler.stats["nvrtc_runs"]  # noqa: E731 (either compiler)
    before = runs()
    be = SlowStartingReplay(Store(EXAMPLES), "sm_90", want=2)
    (tmp_path / "a").mkdir()
    r = _tune_row_sum(tmp_path / "a", be, TuneOptions(**opts))
    assert len(be.seen_during_start) == 3  # the original and the first batch of 2, before device() returned
    from agent_core.measure import nvrtc
    # each configuration compiled once; where NVRTC compiles the search's variants, the best is compiled again by
    # nvcc for its confirmation (the figure reported is of the binary the user's build makes)
    assert runs() - before == 1 + 6 + (nvrtc.available(compiler.nvcc_path()) is not None)
    assert r.summary["counts"]["ok"] == 6 and be.batches == [2, 2, 2]
    # the same search without a hint (nothing compiled early): the same configurations in the same order
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache2"))
    (tmp_path / "b").mkdir()
    plain = _tune_row_sum(tmp_path / "b", CompilingReplay(Store(EXAMPLES)), TuneOptions(**opts))
    assert [e.params for e in r.evaluations] == [e.params for e in plain.evaluations]
