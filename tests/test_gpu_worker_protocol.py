"""The GPU backend's parts that run without a GPU: availability, the worker protocol (spawn process,
heartbeat watchdog, crash detection, restart with setup replay, stdout isolation) driven by a pure-Python
handler, the helper kernels' compilation, and the small pure functions of the worker."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from agent_core.measure import gpu_worker
from agent_core.measure.backend import Launch, Variant
from agent_core.measure.gpu_backend import (GpuBackend, Supervisor, WorkerCrashed, WorkerError, WorkerProcess,
                                    WorkerTimeout, gpu_available, parse_ncu_csv)
from agent_core.model import KerntuneError, Timing

ROOT = Path(__file__).resolve().parents[1]


class EchoWorker:
    """A handler that runs plain Python requests (the protocol, without CUDA)."""

    def __init__(self, tag="w", beat=None):
        self.tag = tag
        self.beat = beat
        self.state = None
        self.exit_requested = False

    def echo(self, x):
        return x

    def pid(self):
        return os.getpid()

    def setup(self, value):
        self.state = value
        return "set"

    def get(self):
        return self.state

    def fail(self):
        raise ValueError("bad request")

    def hang(self):
        time.sleep(120)

    def slow_with_beats(self, steps, dt):
        for _ in range(steps):
            time.sleep(dt)
            self.beat()
        return steps

    def segfault(self):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)

    def poisoned(self):
        self.exit_requested = True
        return "reported"

    def shout(self):
        print("WORKER-STDOUT-LINE", flush=True)
        os.write(1, b"WORKER-FD1-LINE\n")
        return "done"


class BrokenWorker:
    def __init__(self, beat=None):
        raise RuntimeError("no device here")


# --------------------------------------------------------------------------------------------- availability
def test_gpu_available_says_why_not():
    ok, why = gpu_available()
    assert isinstance(ok, bool) and why
    if importlib.util.find_spec("pycuda") is None:
        assert not ok and "pycuda is not installed" in why


def test_backend_needs_start_before_evaluate():
    be = GpuBackend()
    try:
        assert be.name == "gpu"
        v = Variant(params={"B": 1}, compiled=None, launches=[Launch((1, 1, 1), (32, 1, 1))])
        with pytest.raises(KerntuneError, match="start"):
            be.evaluate(v)
        assert be.sup.worker is None  # nothing started a process
    finally:
        be.close()


# --------------------------------------------------------------------------------------------- protocol
def test_round_trip_and_errors_keep_the_worker():
    w = WorkerProcess(EchoWorker, ("a",), watchdog_s=5)
    try:
        t = Timing(1.5, 1.0, 2.0, 0.25, 30, 4, "flushed")
        assert w.call("echo", t) == t
        pid = w.call("pid")
        assert pid != os.getpid()
        with pytest.raises(WorkerError, match="ValueError: bad request"):
            w.call("fail")
        with pytest.raises(WorkerError, match="no operation"):
            w.call("_private")
        assert w.call("pid") == pid and w.alive
    finally:
        w.stop()
    assert not w.alive


def test_watchdog_kills_a_hung_request():
    w = WorkerProcess(EchoWorker, (), watchdog_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout, match="no progress for 1 s"):
        w.call("hang")
    assert time.monotonic() - t0 < 15
    assert not w.alive


def test_heartbeats_keep_a_long_request_alive():
    w = WorkerProcess(EchoWorker, (), watchdog_s=1.0)
    try:
        assert w.call("slow_with_beats", 6, 0.4) == 6  # 2.4 s in all, never 1 s without a beat
    finally:
        w.stop()


def test_a_segfault_is_a_crash_with_its_signal():
    w = WorkerProcess(EchoWorker, (), watchdog_s=10)
    with pytest.raises(WorkerCrashed, match="SIGSEGV"):
        w.call("segfault")
    assert not w.alive


def test_init_error_is_reported():
    with pytest.raises(WorkerError, match="no device here"):
        WorkerProcess(BrokenWorker, (), watchdog_s=5)


def test_supervisor_restarts_and_replays_setup():
    sup = Supervisor(EchoWorker, ("s",), watchdog_s=1.0, log=lambda m: None)
    try:
        assert sup.call("setup", 41) == "set"
        sup.remember_setup("setup", 42)  # what a fresh worker must redo
        first = sup.call("pid")
        with pytest.raises(WorkerCrashed):
            sup.call("segfault")
        assert sup.call("get") == 42  # a fresh worker, set up again
        second = sup.call("pid")
        assert second != first and sup.restarts == 1
        # a worker that reports a poisoned context answers, then exits; the next call gets a fresh one
        assert sup.call("poisoned") == "reported"
        assert sup.call("pid") not in (first, second) and sup.restarts == 2
        with pytest.raises(WorkerTimeout):
            sup.call("hang")
        assert sup.call("get") == 42 and sup.restarts == 3
    finally:
        sup.close()


def test_worker_stdout_never_reaches_the_parents_stdout(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT)!r}, {str(Path(__file__).parent)!r}]
        from agent_core.measure.gpu_backend import WorkerProcess
        from test_gpu_worker_protocol import EchoWorker
        if __name__ == "__main__":
            w = WorkerProcess(EchoWorker, (), watchdog_s=10)
            print("PARENT-RESULT", w.call("shout"))
            w.stop()
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "PARENT-RESULT done"
    assert "WORKER-STDOUT-LINE" in r.stderr and "WORKER-FD1-LINE" in r.stderr


# --------------------------------------------------------------------------------------------- helpers
@pytest.mark.nvcc
def test_helper_kernels_compile(tmp_path):
    cubin = gpu_worker.helper_cubin("sm_90", tmp_path)
    data = cubin.read_bytes()
    for dt in gpu_worker.SCALAR_FORMAT:
        assert f"kt_fill_{dt}".encode() in data and f"kt_compare_{dt}".encode() in data
    assert b"kt_spin" in data
    mtime = cubin.stat().st_mtime_ns
    assert gpu_worker.helper_cubin("sm_90", tmp_path) == cubin and cubin.stat().st_mtime_ns == mtime


def test_choose_batch_and_summarize():
    assert gpu_worker.choose_batch(80.0) == 1
    assert gpu_worker.choose_batch(50.0) == 1
    assert gpu_worker.choose_batch(10.0) == 20
    assert gpu_worker.choose_batch(2.0) == 100
    assert gpu_worker.choose_batch(0.01) == 400 <= gpu_worker.BATCH_MAX  # floor of 0.5 us per launch
    t = gpu_worker.summarize([1.0, 2.0, 3.0, 4.0, 100.0], 8, "warm")
    assert (t.median_us, t.min_us, t.max_us, t.iqr_us, t.reps, t.batch, t.l2) == (3.0, 1.0, 100.0, 2.0, 5, 8, "warm")


def test_median_is_precise_stops_when_the_median_is_known():
    rng = np.random.default_rng(0)
    steady = list(100.0 + rng.normal(0, 0.2, 20))  # 0.2% spread: 20 repetitions pin the median
    assert gpu_worker.median_is_precise(steady)
    noisy = list(100.0 + rng.normal(0, 5.0, 20))  # 5% spread: 20 are not enough ...
    assert not gpu_worker.median_is_precise(noisy)
    many = list(100.0 + rng.normal(0, 5.0, 2000))  # ... a few thousand would be
    assert gpu_worker.median_is_precise(many)
    assert not gpu_worker.median_is_precise([0.0] * 20)


def test_scalar_and_element_encoding():
    assert gpu_worker.scalar_arg("f16", 1.0) == 0x3C00
    assert gpu_worker.scalar_arg("bf16", 1.0) == 0x3F80
    assert gpu_worker.scalar_arg("bf16", -2.5) == 0xC020
    assert gpu_worker.scalar_arg("i32", 7) == 7
    assert gpu_worker.element_value("bf16", np.array([0x3FC0], np.uint16).tobytes()) == 1.5
    assert gpu_worker.element_value("f16", np.array([0.5], np.float16).tobytes()) == 0.5
    assert gpu_worker.element_value("i8", b"\xff") == -1
    assert np.isnan(gpu_worker.element_value("f64", np.array([0x7FF800007FF80000], np.uint64).tobytes()))
    assert gpu_worker.derive_seed(1, 2, 3) == gpu_worker.derive_seed(1, 2, 3) != gpu_worker.derive_seed(1, 2, 4)


def test_parse_ncu_raw_csv():
    text = textwrap.dedent('''\
        ==PROF== Connected to process 123
        ==PROF== Profiling "scale": 0%....50%....100% - 9 passes
        "ID","Process ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__registers_per_thread","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_long_scoreboard_per_warp_active.pct","smsp__average_warps_issue_stalled_barrier_per_warp_active.pct","smsp__average_warps_issue_stalled_not_selected_not_issued_per_warp_active.pct"
        "","","","%","nsecond","register/thread","%","%","%","%"
        "0","123","scale","91.52","1,234.00","16","78.1","55.5","3.25","1.0"
        ==PROF== Disconnected from process 123
    ''')
    p = parse_ncu_csv(text)
    assert p["dram_pct"] == 91.52 and p["registers_per_thread"] == 16
    assert p["duration_us"] == pytest.approx(1.234) and p["achieved_occupancy_pct"] == 78.1
    assert p["top_stalls"] == ["long_scoreboard", "barrier"]
    assert parse_ncu_csv("==ERROR== nothing") == {}
