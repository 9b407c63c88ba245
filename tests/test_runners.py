"""Runners (agent_core.runners): whole tuning sessions in process or on a Dask cluster, one store writer.

GPU behaviour comes from the H100 recording of the bench (tests/data/stores/bench.sqlite) through the replay
backend; the Dask clusters are real (scheduler, nannies, worker processes on this machine's CPUs).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent_core.agent.loop import AgentOptions
from agent_core.bench import BenchOptions, discover, run_bench
from agent_core.measure.replay import ReplayBackend
from agent_core.model import KerntuneError
from agent_core.runners import LocalRunner, SessionUnit
from agent_core.search.tuner import result_summary
from agent_core.store import Store

pytest.importorskip("distributed")
from agent_core.runners.dask_runner import DaskRunner  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "tests" / "data" / "stores" / "bench_2026-11-24e.sqlite"  # the suite's figure of record
OPTIONS = BenchOptions(budget_per_round=30, rounds=3)  # as the recording was taken (bench/README)
BACKEND = f"replay:{RECORDING}"


def _bench_in_process(out: Path) -> dict:
    with Store(out / "results.sqlite") as store:
        be = ReplayBackend(Store(RECORDING))
        try:
            return run_bench(discover(), be, store, out, OPTIONS, plot=False)
        finally:
            be.close()


def _bench_on_dask(out: Path, workers: int, on_event=None) -> dict:
    with Store(out / "results.sqlite") as store, DaskRunner(store, BACKEND, gpus=workers) as runner:
        assert len(runner.workers) == workers
        return run_bench(discover(), None, store, out, OPTIONS, plot=False, runner=runner, backend_name=BACKEND,
                         on_event=on_event)


def _figures(doc: dict) -> dict:
    """What a bench run found, per kernel: everything but wall times and where it ran."""
    out = {}
    for k in doc["kernels"]:
        out[k["name"]] = {
            "status": k["status"], "origin": k["origin"], "params": k["params"], "speedup": k["speedup"],
            "single_speedup": k["single_speedup"], "device": k["device"], "copy_bw_gbps": k["copy_bw_gbps"],
            "counts": k["counts"], "rounds": [(r["origin"], r["best_params"], r["speedup"]) for r in k["rounds"]],
            "shapes": [(s["label"], s["original_us"], s["tuned_us"], s["entry"]) for s in k["shapes"]],
            "dispatch": k["dispatch"]}
    return out


def _store_contents(path: Path) -> dict:
    """Per kernel: its sessions (origin, status, best parameters, speedup) and evaluations, id-free."""
    with Store(path) as st:
        out = {}
        for s in st.sessions():
            evs = st.evaluations(session_id=s["id"])
            # a timeline step's text is wall-clock time: its kind is compared, its figures are not
            steps = [(x["kind"], "" if x["kind"] == "timeline" else x["text"]) for x in st.steps(s["id"])]
            out.setdefault(s["kernel"], []).append(
                (s["origin"], s["status"], s["device"], json.dumps(s["summary"]["best_params"], sort_keys=True),
                 s["summary"]["speedup"], s["summary"]["session_id"] == s["id"], len(evs),
                 sorted((e.status.value, json.dumps(e.params, sort_keys=True)) for e in evs), steps))
        return {k: sorted(v, key=repr) for k, v in out.items()}


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("in-process")
    return out, _bench_in_process(out)


# --------------------------------------------------------------------------------------------- the store
def test_merge_renumbers_sessions_and_is_all_or_nothing(tmp_path):
    """A worker's rows (a session on a snapshot of the store) land in the store under new session ids, with
    their evaluations and steps; a merge that fails part-way adds nothing."""
    src, src2 = tmp_path / "silu_and_mul.cu", tmp_path / "gelu_and_mul.cu"
    shutil.copy(REPO / "bench" / "silu_and_mul.cu", src)
    shutil.copy(REPO / "bench" / "gelu_and_mul.cu", src2)
    opts = AgentOptions(budget_per_round=30, max_rounds=1, dispatch=False)
    main = Store(tmp_path / "main.sqlite")
    be = ReplayBackend(Store(RECORDING))
    first = LocalRunner(be, main).run([SessionUnit.of(src, "silu_and_mul_kernel", opts)])
    [o1] = list(first)
    assert o1.ok and main.sessions()[0]["id"] == 1
    scratch = Store.from_snapshot(main.snapshot(), tmp_path / "scratch.sqlite")
    assert scratch.sessions()[0]["summary"] == main.sessions()[0]["summary"]  # the snapshot holds everything
    marks = scratch.high_water()
    [o2] = list(LocalRunner(be, scratch).run([SessionUnit.of(src2, "gelu_and_mul_kernel", opts)]))
    rows = scratch.rows_since(marks)
    assert [s["id"] for s in rows["sessions"]] == [2] and rows["evaluations"]
    # the store has moved on meanwhile: session 2 is taken here by another session
    main.start_session(str(src), "other", "h", "t", "s", "dev", "auto", 1, 0, "structural")
    bad = json.loads(json.dumps(rows))
    bad["evaluations"][-1]["status"] = None  # NOT NULL: the transaction fails after the session went in
    with pytest.raises(Exception):
        main.merge_rows(bad)
    assert len(main.sessions()) == 2
    ids = main.merge_rows(rows)
    assert ids == {2: 3}
    s3 = main.session(3)
    assert s3["summary"]["session_id"] == 3 and s3["summary"]["best_params"] == o2.result.best.summary["best_params"]
    assert len(main.evaluations(session_id=3)) == len(rows["evaluations"])
    assert [x["kind"] for x in main.steps(3)] == [x["kind"] for x in scratch.steps(2)]
    with pytest.raises(KerntuneError, match="columns"):
        main.merge_rows({"sessions": [{"id": 9, "kernel": "x", "nonsense": 1}]})
    be.close()
    main.close()
    scratch.close()


# --------------------------------------------------------------------------------------------- Dask
def _process_facts():
    import multiprocessing
    return multiprocessing.current_process().daemon, os.environ.get("CUDA_VISIBLE_DEVICES")


def _killer(which: int):
    """An on_event that kills (SIGKILL) the worker running the ``which``-th unit to start, as it starts."""
    killed: dict = {}
    starts: list = []
    lock = threading.Lock()

    def on_event(bk, ev):
        m = re.match(r"started on worker (\S+) \(pid (\d+),", ev.message)
        if m:
            with lock:
                starts.append(bk.name)
                if len(starts) == which and not killed:
                    killed.update(name=bk.name, worker=m.group(1), pid=int(m.group(2)))
                    os.kill(int(m.group(2)), signal.SIGKILL)
    return on_event, killed


@pytest.mark.timeout(600)
def test_one_dask_worker_killed_mid_run_gives_the_in_process_results(in_process, tmp_path):
    """One worker (one GPU), killed as its second unit starts: the scheduler keeps the unit, the nanny restarts
    the worker, the unit is redone there; the run ends with the in-process results and store."""
    ref_out, ref = in_process
    names = ["silu_and_mul", "softmax", "rms_norm"]
    on_event, killed = _killer(2)
    with Store(tmp_path / "results.sqlite") as store, DaskRunner(store, BACKEND, gpus=1) as runner:
        assert runner.describe() == {"kind": "dask", "workers": 1, "scheduler": "local", "gpus": ["0"]}
        # a worker may start child processes (the GPU backend's worker), and sees its own GPU only
        assert list(runner.client.run(_process_facts).values()) == [(False, "0")]
        doc = run_bench(discover(names), None, store, tmp_path, OPTIONS, plot=False, runner=runner,
                        backend_name=BACKEND, on_event=on_event)
    assert doc["status"] == "finished" and killed
    rec = next(k for k in doc["kernels"] if k["name"] == killed["name"])
    assert [a["pid"] == killed["pid"] for a in rec["attempts"]] == [True, False], rec["attempts"]
    assert rec["attempts"][0]["gpu"] == rec["attempts"][1]["gpu"] == "0"
    md = (tmp_path / "bench_results.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("- runner: "))
    assert line.startswith("- runner: Dask, 1 GPU worker(s), local cluster (CUDA_VISIBLE_DEVICES 0); redone after "
                           "a lost worker: ") and f"{killed['name']} (2 attempts)" in line, line
    # the first unit may have finished on the worker a moment before the kill, its result not yet fetched by the
    # client: the scheduler redoes it too. Nothing else is redone.
    for k in doc["kernels"]:
        assert len(k["attempts"]) == 1 or k["attempts"][0]["pid"] == killed["pid"], k["attempts"]
    want = {k: v for k, v in _figures(ref).items() if k.removesuffix("_kernel") in names}
    assert _figures(doc) == want and len(want) == 3
    mine, theirs = _store_contents(tmp_path / "results.sqlite"), _store_contents(ref_out / "results.sqlite")
    assert mine == {k: v for k, v in theirs.items() if k in want}


@pytest.mark.timeout(600)
def test_a_unit_whose_outcome_arrived_is_not_redone_when_its_worker_dies_later(in_process, tmp_path):
    """The worker is killed right after the first unit's outcome reached the client, while it runs the next one:
    only that next unit is redone. (Seen on two H200s: a finished unit's result, still held by the client, was
    recomputed by the scheduler when its worker died later: a whole unit of GPU time thrown away.)"""
    ref_out, ref = in_process
    names = ["silu_and_mul", "softmax", "rms_norm"]
    messages: list = []
    killed: dict = {}
    with Store(tmp_path / "results.sqlite") as store, DaskRunner(store, BACKEND, gpus=1) as runner:
        [pid] = runner.worker_pids().values()

        def on_kernel(rec):
            if not killed:
                killed.update(first=rec["name"], pid=pid)
                os.kill(pid, signal.SIGKILL)

        doc = run_bench(discover(names), None, store, tmp_path, OPTIONS, plot=False, runner=runner,
                        backend_name=BACKEND, on_event=lambda bk, ev: messages.append((bk.name, ev.message)),
                        on_kernel=on_kernel)
    assert doc["status"] == "finished" and killed
    starts = [(k, m) for k, m in messages if m.startswith(("started on worker", "redone on worker"))]
    assert [k for k, _ in starts].count(killed["first"]) == 1, starts
    assert any(m.startswith("redone on worker") for _, m in starts), starts  # the unit running was redone
    want = {k: v for k, v in _figures(ref).items() if k.removesuffix("_kernel") in names}
    assert _figures(doc) == want


@pytest.mark.timeout(600)
def test_two_dask_workers_one_killed_mid_run_give_the_same_results(in_process, tmp_path):
    """Two workers share the nine kernels; the worker running the first kernel to start is killed (SIGKILL) as
    it starts: that kernel is redone on a worker and the run ends with the in-process results, the store
    included (the lost attempt's rows never reach it)."""
    ref_out, ref = in_process
    on_event, killed = _killer(1)

    doc = _bench_on_dask(tmp_path, 2, on_event)
    assert killed, "no unit started"
    assert doc["status"] == "finished" and doc["runner"]["workers"] == 2
    rec = next(k for k in doc["kernels"] if k["name"] == killed["name"])
    assert len(rec["attempts"]) == 2, rec["attempts"]
    assert rec["attempts"][0]["pid"] == killed["pid"] and rec["attempts"][1]["pid"] != killed["pid"]
    workers = {a["worker"] for k in doc["kernels"] for a in k["attempts"]}
    assert len(workers) >= 2  # the units were spread
    assert _figures(doc) == _figures(ref)
    assert doc["suite"] == ref["suite"]
    assert _store_contents(tmp_path / "results.sqlite") == _store_contents(ref_out / "results.sqlite")
    # apply and the hover read the same result from either store
    for k in ("silu_and_mul", "rms_norm"):
        bk = discover([k])[0]
        with Store(tmp_path / "results.sqlite") as a, Store(ref_out / "results.sqlite") as b:
            sa, sb = result_summary(a, bk.path, bk.kernel), result_summary(b, bk.path, bk.kernel)
        for key in ("best_params", "speedup", "device", "dispatch", "devices", "template_hash"):
            assert sa[key] == sb[key], (k, key)


@pytest.mark.timeout(300)
def test_cancel_on_dask_ends_the_running_units_and_runs_no_more(tmp_path):
    """Ctrl-C (the cancel event) as the first unit starts: units running end as interrupted between evaluations,
    what they measured merged; units not started are not run."""
    cancel = threading.Event()

    def on_event(bk, ev):
        if ev.message.startswith("started on worker"):
            cancel.set()

    names = ["silu_and_mul", "softmax", "rms_norm", "gelu_and_mul", "layer_norm"]
    with Store(tmp_path / "results.sqlite") as store, DaskRunner(store, BACKEND, gpus=1) as runner:
        doc = run_bench(discover(names), None, store, tmp_path, OPTIONS, plot=False, runner=runner,
                        backend_name=BACKEND, on_event=on_event, cancel=cancel)
        sessions = store.sessions()
    assert doc["status"] == "interrupted"
    status = {k["name"]: k["status"] for k in doc["kernels"]}
    assert list(status.values()).count("not_run") >= 3, status
    assert set(status.values()) <= {"interrupted", "not_run", "ok"}, status
    ran = {k for k, v in status.items() if v != "not_run"}
    assert {s["kernel"] for s in sessions} <= ran


@pytest.mark.timeout(300)
def test_an_existing_scheduler_needs_workers_that_offer_a_gpu(tmp_path):
    from distributed import LocalCluster

    src = tmp_path / "rms_norm.cu"
    shutil.copy(REPO / "bench" / "rms_norm.cu", src)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as plain:
        with Store(tmp_path / "a.sqlite") as st, pytest.raises(KerntuneError, match="--resources GPU=1"):
            DaskRunner(st, BACKEND, scheduler=plain.scheduler_address)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, resources={"GPU": 1},
                      dashboard_address=":0") as gpu:
        with Store(tmp_path / "b.sqlite") as st, DaskRunner(st, BACKEND, scheduler=gpu.scheduler_address) as r:
            [o] = list(r.run([SessionUnit.of(src, "rms_norm_kernel", AgentOptions(budget_per_round=30,
                                                                                  max_rounds=3))]))
            assert o.ok and o.attempts[0].worker in r.workers
            assert result_summary(st, str(src), "rms_norm_kernel")["best_params"] == \
                o.result.best.summary["best_params"]


def test_gpus_and_scheduler_are_checked(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        with pytest.raises(KerntuneError, match="replay backend uses none"):
            DaskRunner(st, BACKEND, gpus="all")
        with pytest.raises(KerntuneError, match="either"):
            DaskRunner(st, BACKEND, gpus=2, scheduler="tcp://127.0.0.1:1")
        with pytest.raises(KerntuneError, match="at least 1"):
            DaskRunner(st, BACKEND, gpus="0")
        with pytest.raises(KerntuneError, match="no recorded store"):
            DaskRunner(st, "replay:/nonexistent.sqlite", gpus=1)


# --------------------------------------------------------------------------------------------- the commands
def _kt(cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    env.pop("KERNTUNE_STORE", None)
    r = subprocess.run([sys.executable, "-m", "agent_core.cli", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == code, r.stdout + r.stderr
    return r


@pytest.mark.timeout(600)
def test_optimize_all_on_two_workers_tunes_every_kernel_with_a_spec(tmp_path):
    """A file of two bench kernels (the recording's originals filed under its text's hash): `optimize --all`
    on two workers gives each kernel the configuration the recording gives it alone; `results` and `apply` say
    which device it was tuned on."""
    a = (REPO / "bench" / "silu_and_mul.cu").read_text()
    b = (REPO / "bench" / "gelu_and_mul.cu").read_text()
    b = "\n".join(line for line in b.splitlines() if not line.startswith("#include"))
    text = a + "\n" + b + "\n__global__ void helper_without_spec(float* x) { x[0] = 1.0f; }\n"
    src = tmp_path / "two.cu"
    src.write_text(text)
    rec = tmp_path / "rec.sqlite"
    shutil.copy(RECORDING, rec)
    from agent_core.agent.loop import expert_templater
    from agent_core.model import sha256_text
    from agent_core.search.tuner import prepare
    with Store(rec) as st:  # the recording's measurements of each kernel, filed under the two-kernel file's text
        dev = st.get_device().name
        for f, k in (("silu_and_mul", "silu_and_mul_kernel"), ("gelu_and_mul", "gelu_and_mul_kernel")):
            p = REPO / "bench" / f"{f}.cu"
            alone, both = prepare(str(p), k), prepare(str(src), k)
            spec_hash = alone.spec.spec_hash
            assert both.spec.spec_hash == spec_hash
            st.put_original(sha256_text(text), spec_hash, dev,
                            st.get_original(sha256_text(p.read_text()), spec_hash, dev))
            for old, new in zip(expert_templater(alone, []), expert_templater(both, [])):
                assert old.origin == new.origin
                for ev in st.evaluations(template_hash=old.template_hash, spec_hash=spec_hash, device=dev):
                    st.put_evaluation(None, new.template_hash, spec_hash, dev, ev)
    r = _kt(tmp_path, "optimize", "two.cu", "--all", "--gpus", "2", "--budget", "30", "--rounds", "3",
            "--backend", f"replay:{rec}", "--json", "o.json")
    assert "not tuned (no tuning spec): helper_without_spec" in r.stderr
    assert re.search(r"started on worker tcp://127\.0\.0\.1:\d+ \(pid \d+, CUDA_VISIBLE_DEVICES=[01]\)", r.stderr)
    out = " ".join(r.stdout.split())
    assert "2 of 2 kernel(s) tuned" in out
    assert f"silu_and_mul_kernel tuned on {dev}" in out and f"gelu_and_mul_kernel tuned on {dev}" in out
    got = {k["kernel"]: k for k in json.loads((tmp_path / "o.json").read_text())["kernels"]}
    h100 = {k["kernel"]: k for k in json.loads((REPO / "bench" / "results" / "h100" / "bench_results.json")
                                               .read_text())["kernels"]}
    for k in ("silu_and_mul_kernel", "gelu_and_mul_kernel"):
        assert got[k]["best"]["best_params"] == h100[k]["params"], k
        assert got[k]["device"] == dev and got[k]["attempts"][0]["worker"].startswith("tcp://")
    # the results went to the workspace's store, written by the client alone
    store = tmp_path / ".kerntune" / "results.sqlite"
    with Store(store) as st:
        assert {s["kernel"] for s in st.sessions()} == {"silu_and_mul_kernel", "gelu_and_mul_kernel"}
    r = _kt(tmp_path, "results", "two.cu", "-k", "gelu_and_mul_kernel")
    assert f"gelu_and_mul_kernel on {dev}" in " ".join(r.stdout.split())
    # a second device model's result for the same file: each is its own, and apply names the one it writes
    with Store(store) as st:
        s = st.sessions(kernel="gelu_and_mul_kernel")[0]
        other = st.start_session(s["path"], s["kernel"], s["original_hash"], s["template_hash"], s["spec_hash"],
                                 "NVIDIA L40S", "auto", 30, 0, s["origin"])
        st.finish_session(other, "finished", dict(s["summary"], device="NVIDIA L40S", speedup=9.0,
                                                  session_id=other))
    r = _kt(tmp_path, "apply", "two.cu", "-k", "gelu_and_mul_kernel", "--dry-run")
    assert "tuned on NVIDIA L40S" in r.stdout and f"also tuned on: {dev}" in r.stdout
    r = _kt(tmp_path, "apply", "two.cu", "-k", "gelu_and_mul_kernel", "--dry-run", "--device", dev)
    assert f"tuned on {dev}" in r.stdout and "also tuned on: NVIDIA L40S" in r.stdout


def test_optimize_needs_one_kernel_or_all(tmp_path):
    shutil.copy(REPO / "bench" / "rms_norm.cu", tmp_path / "rms_norm.cu")
    r = _kt(tmp_path, "optimize", "rms_norm.cu", code=2)
    assert "-k KERNEL" in r.stderr and "--all" in r.stderr
    r = _kt(tmp_path, "optimize", "rms_norm.cu", "--all", "--llm-model", "m", "--gpus", "1", code=2)
    assert "LLM options" in r.stderr


# --------------------------------------------------------------------------------------------- the editor
async def test_the_hover_names_the_device_and_the_other_devices(tmp_path):
    """A configuration is one device model's: the hover shows the latest result's device and names the others
    with a result for the same text of the file."""
    from lsprotocol import types as lsp
    from test_lsp_server import ENV, hover_text, lsp_server, open_doc

    src = tmp_path / "silu_and_mul.cu"
    shutil.copy(REPO / "bench" / "silu_and_mul.cu", src)
    store_path = tmp_path / "results.sqlite"
    with Store(store_path) as st:
        be = ReplayBackend(Store(RECORDING))
        [o] = list(LocalRunner(be, st).run([SessionUnit.of(src, "silu_and_mul_kernel",
                                                           AgentOptions(budget_per_round=30, max_rounds=1))]))
        be.close()
        h100 = o.device
        s = st.sessions()[0]
        other = st.start_session(s["path"], s["kernel"], s["original_hash"], s["template_hash"], s["spec_hash"],
                                 "NVIDIA L40S", "auto", 30, 0, s["origin"])
        st.finish_session(other, "finished", dict(s["summary"], device="NVIDIA L40S", session_id=other))
    env = {**ENV, "KERNTUNE_STORE": str(store_path), "KERNTUNE_WORKDIR": str(tmp_path / ".kerntune")}
    async with lsp_server(env) as client:
        uri = open_doc(client, src)
        lines = src.read_text().split("\n")
        row = next(i for i, ln in enumerate(lines) if "__global__ void silu_and_mul_kernel(" in ln)
        md = await hover_text(client, uri, lsp.Position(line=row, character=lines[row].index("silu_and_mul_kernel")))
    assert "Device **NVIDIA L40S**" in md and f"also tuned on {h100}" in md, md
