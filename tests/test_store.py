import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from dataclasses import replace

import pytest

from agent_core.model import DeviceInfo, Evaluation, KerntuneError, Resources, Status, Timing
from agent_core.store import SCHEMA_VERSION, Store


def timing(us: float) -> Timing:
    return Timing(median_us=us, min_us=us * 0.9, max_us=us * 1.2, iqr_us=us * 0.05, reps=50, batch=1, l2="flushed")


def evaluation(block: int, status: Status = Status.OK, objective: float | None = 0.8) -> Evaluation:
    ok = status == Status.OK
    return Evaluation(
        params={"BLOCK": block, "UNROLL": 2},
        status=status,
        timings=[timing(10.0), None] if ok else [],
        gbps=[1234.5, None] if ok else [],
        resources=Resources(registers=32, static_smem=1024, spill_stores=4, occupancy=0.75, blocks_per_sm=6),
        error="" if ok else f"{status.value}: details",
        objective=objective if ok else None,
    )


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "ws" / ".kerntune" / "results.sqlite") as s:
        yield s


def new_session(store, path="/abs/k.cu", kernel="row_sum", **kw):
    args = dict(original_hash="oh", template_hash="th", spec_hash="sh", device="H100", strategy="tpe",
                budget=40, seed=1, origin="structural")
    args.update(kw)
    return store.start_session(path, kernel, **args)


def test_creates_parent_dir_schema_and_wal(tmp_path):
    p = tmp_path / "a" / "b" / "results.sqlite"
    Store(p).close()
    assert p.is_file()
    db = sqlite3.connect(p)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "devices", "sessions", "originals", "evaluations", "templates", "steps"} <= tables
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    idx = [r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE type='index' AND name='evaluations_by_config'")]
    assert "template_hash, spec_hash, device, params_key" in idx[0]
    db.close()
    Store(p).close()  # reopening an existing store works


def test_newer_schema_refused(tmp_path):
    p = tmp_path / "results.sqlite"
    Store(p).close()
    db = sqlite3.connect(p)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(KerntuneError) as e:
        Store(p)
    assert "newer kerntune" in e.value.message and e.value.path == str(p)


def test_not_a_store_refused(tmp_path):
    p = tmp_path / "results.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(KerntuneError, match="not a kerntune results store"):
        Store(p)


def test_devices_most_recent_and_copy_bandwidth(store):
    assert store.get_device() is None
    a = DeviceInfo(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132)
    b = DeviceInfo(name="NVIDIA A100", arch="sm_80", sm_count=108, smem_per_sm=167936)
    store.put_device(a)
    store.put_device(b)
    assert store.get_device() == b
    assert store.get_device(a.name) == a
    assert store.get_device("nope") is None
    store.set_copy_bandwidth(a.name, 2960.5)
    assert store.get_device(a.name).copy_bandwidth_gbps == 2960.5
    store.put_device(a)  # re-recording without a bandwidth keeps the measured one, and makes it the latest
    assert store.get_device() == replace(a, copy_bandwidth_gbps=2960.5)
    store.put_device(replace(b, copy_bandwidth_gbps=1400.0))
    assert store.get_device(b.name).copy_bandwidth_gbps == 1400.0
    assert [d.name for d in store.devices()] == [b.name, a.name]
    with pytest.raises(KerntuneError, match="no device named"):
        store.set_copy_bandwidth("missing", 1.0)


def test_sessions_lifecycle(store):
    s1 = new_session(store)
    s2 = new_session(store, kernel="other")
    s3 = new_session(store)
    row = store.session(s1)
    assert row["status"] == "running" and row["summary"] is None and row["finished_at"] is None
    assert (row["path"], row["kernel"], row["budget"], row["seed"], row["origin"]) == ("/abs/k.cu", "row_sum", 40, 1,
                                                                                      "structural")
    store.finish_session(s1, "finished", {"speedup": 1.5, "best_params": {"BLOCK": 256}})
    row = store.session(s1)
    assert row["status"] == "finished" and row["finished_at"] >= row["started_at"]
    assert row["summary"] == {"speedup": 1.5, "best_params": {"BLOCK": 256}}
    assert [s["id"] for s in store.sessions()] == [s3, s2, s1]
    assert [s["id"] for s in store.sessions(kernel="row_sum")] == [s3, s1]
    assert [s["id"] for s in store.sessions(path="/abs/k.cu", kernel="other")] == [s2]
    assert store.sessions(path="/elsewhere.cu") == []
    assert store.latest_session("/abs/k.cu", "row_sum")["id"] == s3
    assert store.latest_session("/abs/k.cu", "row_sum", finished_only=True)["id"] == s1
    store.finish_session(s3, "failed", {})
    assert store.latest_session("/abs/k.cu", "row_sum", finished_only=True)["id"] == s1
    store.finish_session(s2, "cancelled", {"speedup": None})
    assert store.latest_session("/abs/k.cu", "other", finished_only=True)["id"] == s2
    assert store.latest_session("/abs/k.cu", "missing") is None
    with pytest.raises(ValueError):
        store.finish_session(s1, "done", {})
    with pytest.raises(KerntuneError):
        store.session(999)


def test_originals_round_trip(store):
    assert store.get_original("oh", "sh", "H100") is None
    t = [timing(12.5), timing(3.25)]
    store.put_original("oh", "sh", "H100", t)
    assert store.get_original("oh", "sh", "H100") == t
    assert store.get_original("oh", "sh", "A100") is None
    store.put_original("oh", "sh", "H100", [timing(1.0)])  # re-measured: replaced
    assert store.get_original("oh", "sh", "H100") == [timing(1.0)]


def test_evaluation_round_trip_and_lookup(store):
    sid = new_session(store)
    ev = evaluation(256)
    eid = store.put_evaluation(sid, "th", "sh", "H100", ev)
    assert isinstance(eid, int)
    got = store.get_evaluation("th", "sh", "H100", {"UNROLL": 2, "BLOCK": 256})  # key order does not matter
    assert got == replace(ev, from_store=True)
    assert got.timings[1] is None and got.resources.occupancy == 0.75
    assert store.get_evaluation("th", "sh", "A100", ev.params) is None
    assert store.get_evaluation("other", "sh", "H100", ev.params) is None
    assert store.get_evaluation("th", "sh", "H100", {"BLOCK": 256, "UNROLL": 4}) is None
    # the most recent evaluation of a configuration wins
    newer = replace(evaluation(256), objective=0.5)
    store.put_evaluation(sid, "th", "sh", "H100", newer)
    assert store.get_evaluation("th", "sh", "H100", ev.params).objective == 0.5
    # failures round-trip too, resources or not
    bad = replace(evaluation(1024, Status.COMPILE_ERROR), resources=None)
    store.put_evaluation(sid, "th", "sh", "H100", bad)
    assert store.get_evaluation("th", "sh", "H100", bad.params) == replace(bad, from_store=True)


def test_evaluations_filters_and_counts(store):
    s1, s2 = new_session(store), new_session(store)
    statuses = [Status.OK, Status.OK, Status.PRUNED, Status.COMPILE_ERROR, Status.VERIFY_FAILED, Status.CRASHED,
                Status.TIMEOUT, Status.LAUNCH_ERROR]
    for i, st in enumerate(statuses):
        store.put_evaluation(s1, "th", "sh", "H100", evaluation(32 * (i + 1), st))
    store.put_evaluation(s2, "th2", "sh", "A100", evaluation(64))
    assert [e.status for e in store.evaluations(session_id=s1)] == statuses
    assert len(store.evaluations()) == 9
    assert len(store.evaluations(template_hash="th2")) == 1
    assert len(store.evaluations(device="H100", spec_hash="sh")) == 8
    assert store.evaluations(session_id=s1, device="A100") == []
    assert all(e.from_store for e in store.evaluations())
    assert store.counts(s1) == {"ok": 2, "failed": 5, "pruned": 1}
    assert store.counts(s2) == {"ok": 1, "failed": 0, "pruned": 0}
    assert store.counts(12345) == {"ok": 0, "failed": 0, "pruned": 0}


def test_templates(store):
    assert store.get_template("h") is None
    store.put_template("h", "row_sum", "structural", "template text", "[params]\n")
    store.put_template("h", "row_sum", "llm", "template text", "[params]\n")  # same hash: first one kept
    row = store.get_template("h")
    assert (row["kernel"], row["origin"], row["text"], row["space_toml"]) == ("row_sum", "structural",
                                                                            "template text", "[params]\n")


def test_steps(store):
    sid = new_session(store)
    store.put_step(sid, "analysis", "memory bound at 40% of copy bandwidth", {"pct_copy": 40.0})
    store.put_step(sid, "plan", "widen BLOCK")
    store.put_step(new_session(store), "plan", "elsewhere")
    steps = store.steps(sid)
    assert [(s["kind"], s["text"], s["data"]) for s in steps] == [
        ("analysis", "memory bound at 40% of copy bandwidth", {"pct_copy": 40.0}), ("plan", "widen BLOCK", None)]
    assert steps[0]["session_id"] == sid and steps[0]["created_at"] > 0


def test_second_connection_reads_while_writing(tmp_path):
    """A second Store (another process's view) sees each evaluation as soon as it is written, even while
    the first connection keeps writing."""
    p = tmp_path / "results.sqlite"
    writer = Store(p)
    reader = Store(p)
    sid = new_session(writer)
    for i in range(20):
        writer.put_evaluation(sid, "th", "sh", "H100", evaluation(32 * (i + 1)))
        assert len(reader.evaluations(session_id=sid)) == i + 1
        assert reader.counts(sid)["ok"] == i + 1
    writer.close()
    reader.close()


def test_other_process_reads_while_writing(tmp_path):
    p = tmp_path / "results.sqlite"
    writer = Store(p)
    sid = new_session(writer)
    code = textwrap.dedent(f"""
        import sys, time
        from agent_core.store import Store
        s = Store({str(p)!r})
        seen = 0
        deadline = time.time() + 60
        while seen < 30 and time.time() < deadline:
            seen = len(s.evaluations(session_id={sid}))
        print(seen)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    for i in range(30):
        writer.put_evaluation(sid, "th", "sh", "H100", evaluation(i + 1))
    out, _ = proc.communicate(timeout=90)
    writer.close()
    assert proc.returncode == 0 and out.strip() == "30"
