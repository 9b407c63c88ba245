"""The replay backend, over stores recorded on an H100 (tests/data/stores, written by gpu/run_examples.sh and
gpu/run_bench.sh): it answers what the GPU measured, never runs code, and says plainly what it lacks."""

import shutil
import sqlite3
from pathlib import Path

import pytest

from agent_core.measure.backend import Backend, Launch, Problem, Variant
from agent_core.model import KerntuneError, Status
from agent_core.measure.replay import ReplayBackend, ReplayMiss
from agent_core.store import Store

REPO = Path(__file__).resolve().parents[1]
STORES = REPO / "tests" / "data" / "stores"
H100 = "NVIDIA H100 80GB HBM3"


def copy_store(tmp_path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(STORES / name, dst)
    return dst


def raw(path: Path, sql: str, args=()) -> list[sqlite3.Row]:
    db = sqlite3.connect(str(path))
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def session_row(path: Path, kernel: str, origin: str | None = None) -> sqlite3.Row:
    q = "SELECT * FROM sessions WHERE kernel=?" + (" AND origin=?" if origin else "") + " ORDER BY id LIMIT 1"
    return raw(path, q, (kernel, origin) if origin else (kernel,))[0]


def problem_of(row: sqlite3.Row) -> Problem:
    from agent_core.model import TuningSpec
    return Problem(spec=TuningSpec(kernel=row["kernel"], args=[], sizes=[], grid=[], block=[]), reference=None, reference_launches=[],
                   original_hash=row["original_hash"], template_hash=row["template_hash"],
                   spec_hash=row["spec_hash"])


def variant(params: dict) -> Variant:
    return Variant(params=dict(params), compiled=None, launches=[Launch((1, 1, 1), (32, 1, 1))])


@pytest.fixture
def examples(tmp_path) -> Path:
    return copy_store(tmp_path, "examples.sqlite")


@pytest.fixture
def backend(examples):
    b = ReplayBackend(Store(examples))
    yield b
    b.close()


def test_is_a_backend_named_replay(backend):
    assert isinstance(backend, ReplayBackend) and backend.name == "replay"
    for m in ("device", "measure_copy_bandwidth", "start", "evaluate", "confirm", "close"):
        assert callable(getattr(backend, m)) and hasattr(Backend, m)


def test_device_and_bandwidth_are_the_recorded_ones(backend, examples):
    (dev,) = raw(examples, "SELECT name, copy_bw_gbps FROM devices")
    assert backend.device().name == dev["name"] == H100 and backend.device().arch == "sm_90"
    assert backend.measure_copy_bandwidth() == dev["copy_bw_gbps"]
    assert 2500 < backend.measure_copy_bandwidth() < 3400  # an H100's HBM3, measured
    missing = ReplayBackend(Store(examples), device="RTX 4090")
    with pytest.raises(KerntuneError, match=f"recorded devices: {H100}"):
        missing.device()
    missing.close()


def test_empty_recording_has_no_device(tmp_path):
    b = ReplayBackend(Store(tmp_path / "empty.sqlite"))
    with pytest.raises(KerntuneError, match="no device"):
        b.device()
    b.close()


def test_start_returns_the_recorded_original(backend, examples):
    row = session_row(examples, "row_sum")
    orig = backend.start(problem_of(row))
    (rec,) = raw(examples, "SELECT timings_json FROM originals WHERE original_hash=? AND spec_hash=?",
                 (row["original_hash"], row["spec_hash"]))
    import json
    assert [t.median_us for t in orig] == [t["median_us"] for t in json.loads(rec["timings_json"])]
    assert len(orig) == 2 and all(t.median_us > 0 and t.reps > 0 for t in orig)


def test_start_without_original_recording(backend, examples):
    p = problem_of(session_row(examples, "row_sum"))
    p.original_hash = "edited-file"
    with pytest.raises(KerntuneError) as e:
        backend.start(p)
    assert f"no recorded measurement of the original kernel for this spec on {H100}" in e.value.message
    assert not isinstance(e.value, ReplayMiss)


def test_evaluate_answers_recorded_configs_as_copies(backend, examples):
    import json
    row = session_row(examples, "silu")
    backend.start(problem_of(row))
    recs = raw(examples, "SELECT params_json, objective, timings_json FROM evaluations WHERE session_id=? "
                         "AND status='ok' ORDER BY objective", (row["id"],))
    assert len(recs) == 200
    best = json.loads(recs[0]["params_json"])
    ev = backend.evaluate(variant(best))
    assert ev.status == Status.OK and ev.from_store and ev.objective == recs[0]["objective"]
    assert [t.median_us for t in ev.timings] == [t["median_us"] for t in json.loads(recs[0]["timings_json"])]
    ev.timings[0].median_us = -1.0
    ev.params["THREADS"] = 7
    again = backend.evaluate(variant(best))
    assert again.timings[0].median_us > 0 and again.params == best
    # the recorded optimum of the grid-stride silu is far from its original 256 blocks
    assert recs[0]["objective"] < 0.3


def test_evaluate_miss(backend, examples):
    backend.start(problem_of(session_row(examples, "row_sum")))
    with pytest.raises(ReplayMiss, match="not recorded"):
        backend.evaluate(variant({"BLOCK": 96, "UNROLL": 4}))
    p = problem_of(session_row(examples, "row_sum"))
    p.template_hash = "another-template"  # same original, a different template
    backend.start(p)
    with pytest.raises(ReplayMiss):
        backend.evaluate(variant({"BLOCK": 256, "UNROLL": 16}))


def test_recorded_failures_replay_as_failures(tmp_path):
    """The first H100 bench recording (2026-11-22, before the row experts sized their threads to the row) holds
    real failures (illegal addresses, wrong results) of real variants."""
    import json
    path = copy_store(tmp_path, "bench_2026-11-22.sqlite")
    fails = raw(path, "SELECT e.params_json, e.status, e.error, s.original_hash, s.template_hash, s.spec_hash, "
                      "s.kernel FROM evaluations e JOIN sessions s ON s.id = e.session_id "
                      "WHERE e.status IN ('crashed', 'verify_failed') ORDER BY e.id")
    assert {f["status"] for f in fails} == {"crashed", "verify_failed"}
    b = ReplayBackend(Store(path))
    try:
        for f in (next(x for x in fails if x["status"] == "crashed"),
                  next(x for x in fails if x["status"] == "verify_failed")):
            b.start(problem_of(f))
            ev = b.evaluate(variant(json.loads(f["params_json"])))
            assert ev.status.value == f["status"] and ev.error == f["error"] and not ev.ok
            with pytest.raises(ReplayMiss):
                b.confirm(variant(json.loads(f["params_json"])))  # recorded, but failed: nothing to quote
    finally:
        b.close()


def test_confirm_returns_recorded_timings(backend, examples):
    import json
    row = session_row(examples, "row_sum")
    orig = backend.start(problem_of(row))
    rec = raw(examples, "SELECT params_json FROM evaluations WHERE session_id=? AND status='ok' LIMIT 1",
              (row["id"],))[0]
    o, v = backend.confirm(variant(json.loads(rec["params_json"])), rounds=3)
    assert o == orig and len(v) == 2 and all(t.median_us > 0 for t in v)
    with pytest.raises(ReplayMiss):
        backend.confirm(variant({"BLOCK": 2048, "UNROLL": 1}))


# --------------------------------------------------------------------------------------------- with the tuner
def stored_template(path: Path, kernel: str, src: Path):
    """The template a recorded session measured, rebuilt from the store (independent of today's templatizer)."""
    from dataclasses import replace

    from agent_core.model import KernelTemplate
    from agent_core.templating.space import space_from_toml
    from agent_core.search.tuner import prepare

    row = session_row(path, kernel)
    (t,) = raw(path, "SELECT * FROM templates WHERE template_hash=?", (row["template_hash"],))
    space, _ = space_from_toml(t["space_toml"], "stored", None)
    prep = prepare(str(src), kernel, use_workspace_files=False)
    tmpl = KernelTemplate(kernel=kernel, path=str(src), original_text=prep.text, text=t["text"], space=space,
                          sites=[], origin=t["origin"] or "structural")
    assert tmpl.template_hash == row["template_hash"]
    return replace(prep, template=tmpl)


def test_tuner_session_on_the_recorded_row_sum(tmp_path, examples):
    from agent_core.search.tuner import TuneOptions, tune

    src = tmp_path / "row_sum.cu"
    shutil.copy(REPO / "examples" / "row_sum.cu", src)
    prepared = stored_template(examples, "row_sum", src)
    best_obj = raw(examples, "SELECT min(objective) AS m FROM evaluations WHERE status='ok' AND template_hash=?",
                   (prepared.template.template_hash,))[0]["m"]
    with Store(tmp_path / "ws.sqlite") as ws:
        backend = ReplayBackend(Store(examples))
        r = tune(str(src), "row_sum", backend, ws, TuneOptions(budget=100, strategy="exhaustive"),
                 prepared=prepared)
        backend.close()
        s = r.summary
        assert r.status == "finished" and s["device"] == H100 and s["backend"] == "replay"
        assert s["counts"]["ok"] == 30 and s["counts"]["failed"] == 0 and s["counts"]["not_recorded"] == 0
        # the lowest objective is BLOCK=256, UNROLL=16; UNROLL=8 is within 1% of it and takes less time over the
        # size sets, so the tie goes to it (what the H100 said, read with the tuner's tie rule)
        assert best_obj <= r.best.objective <= best_obj * 1.01
        assert s["best_params"] == {"BLOCK": 256, "UNROLL": 8}
        assert 1.0 < s["speedup"] < 1.2
        assert ws.latest_session(str(src), "row_sum", finished_only=True)["summary"]["best_params"] == s["best_params"]
        # TPE with a third of the space finds a configuration within 5% of the recorded optimum
        backend = ReplayBackend(Store(examples))
        with Store(tmp_path / "ws2.sqlite") as ws2:
            r2 = tune(str(src), "row_sum", backend, ws2, TuneOptions(budget=10, strategy="tpe", seed=1),
                      prepared=prepared)
        backend.close()
        assert r2.summary["counts"]["measured"] == 10
        assert r2.best.objective <= best_obj * 1.05


def test_version1_store_is_rekeyed_path_free(tmp_path, examples):
    """Stores of schema 1 keyed templates by a hash that included the #line file name; opening one re-keys it."""
    from agent_core.model import sha256_text, template_hash_of

    rows = raw(examples, "SELECT template_hash, text FROM templates")
    assert all(r["template_hash"] == template_hash_of(r["text"]) for r in rows)
    old = tmp_path / "v1.sqlite"
    shutil.copy(examples, old)
    db = sqlite3.connect(str(old))
    for r in rows:
        h1 = sha256_text(r["text"])
        for table in ("templates", "sessions", "evaluations"):
            db.execute(f"UPDATE {table} SET template_hash=? WHERE template_hash=?", (h1, r["template_hash"]))
    db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    db.commit()
    db.close()
    Store(old).close()
    assert sorted(r["template_hash"] for r in raw(old, "SELECT template_hash FROM templates")) == \
        sorted(r["template_hash"] for r in rows)
    assert raw(old, "SELECT count(*) AS n FROM evaluations e JOIN templates t USING (template_hash)")[0]["n"] == \
        raw(old, "SELECT count(*) AS n FROM evaluations")[0]["n"]
