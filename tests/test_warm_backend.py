"""server/warm_backend.py: the language server keeps one GPU backend warm between Optimize runs (its worker's start,
1-4 s, is most of a small kernel's run). The GPU side (``GpuBackend.release``: buffers freed, the worker and its
context kept, the next problem started on it) is tested on the GPU in tests/test_gpu_backend.py; here the keeping,
reuse, expiry and shutdown rules over backends that record what is done to them."""

import threading
import time

from server.warm_backend import WarmBackends, warm_seconds


class Recorded:
    """A backend as the pool sees one: ``warm`` while its worker runs, ``release`` and ``close``."""

    name = "gpu"

    def __init__(self, warm=True, release_fails=False):
        self.warm, self.release_fails = warm, release_fails
        self.released = self.closed = 0

    def release(self):
        self.released += 1
        if self.release_fails:
            raise RuntimeError("the worker did not answer")

    def close(self):
        self.closed += 1
        self.warm = False


class NoRelease:
    """A replay backend: nothing to keep warm."""

    name = "replay"

    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


def opener(made):
    def open_backend():
        b = Recorded()
        made.append(b)
        return b
    return open_backend


def test_the_next_run_gets_the_released_backend_without_opening_one():
    pool, made = WarmBackends(idle_s=60), []
    a = pool.acquire(opener(made))
    pool.release(a)
    assert a.released == 1 and a.closed == 0
    b = pool.acquire(opener(made))
    assert b is a and len(made) == 1 and pool.reused == 1
    pool.release(b)
    pool.close()
    assert a.closed == 1


def test_a_backend_with_nothing_to_keep_is_closed():
    pool = WarmBackends(idle_s=60)
    r = pool.acquire(NoRelease)
    pool.release(r)
    assert r.closed == 1
    made = []
    assert pool.acquire(opener(made)) is made[0]


def test_two_runs_at_once_keep_one_and_close_the_other():
    pool, made = WarmBackends(idle_s=60), []
    a, b = pool.acquire(opener(made)), pool.acquire(opener(made))
    assert a is not b
    pool.release(a)
    pool.release(b)
    assert (a.closed, b.closed) == (0, 1)
    pool.close()
    assert a.closed == 1


def test_an_idle_backend_is_stopped_after_its_time():
    pool, made = WarmBackends(idle_s=0.05), []
    a = pool.acquire(opener(made))
    pool.release(a)
    deadline = time.monotonic() + 10
    while a.closed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert a.closed == 1
    b = pool.acquire(opener(made))
    assert b is not a and len(made) == 2


def test_a_timer_that_fires_after_reuse_leaves_the_backend_alone():
    fired = []

    class Manual:
        def __init__(self, s, fn, args):
            self.fn, self.args, self.daemon = fn, args, True
            fired.append(self)

        def start(self):
            pass

        def cancel(self):
            pass

    pool, made = WarmBackends(idle_s=60, timer=Manual), []
    a = pool.acquire(opener(made))
    pool.release(a)
    assert pool.acquire(opener(made)) is a  # reused before the timer fires
    fired[0].fn(*fired[0].args)  # a timer cancelled too late: it must not close the backend in use
    assert a.closed == 0


def test_a_worker_that_died_while_idle_gives_a_fresh_backend():
    pool, made = WarmBackends(idle_s=60), []
    a = pool.acquire(opener(made))
    pool.release(a)
    a.warm = False  # its worker process ended
    b = pool.acquire(opener(made))
    assert b is not a and a.closed == 1 and pool.reused == 0


def test_a_backend_that_cannot_release_is_closed():
    pool = WarmBackends(idle_s=60)
    a = pool.acquire(lambda: Recorded(release_fails=True))
    pool.release(a)
    assert a.closed == 1


def test_nothing_is_kept_with_warm_seconds_0_or_after_shutdown(monkeypatch):
    monkeypatch.setenv("KERNTUNE_WARM_S", "0")
    assert warm_seconds() == 0.0
    pool = WarmBackends()
    a = pool.acquire(Recorded)
    pool.release(a)
    assert a.closed == 1 and a.released == 0
    monkeypatch.setenv("KERNTUNE_WARM_S", "soon")
    assert warm_seconds() == 120.0
    monkeypatch.delenv("KERNTUNE_WARM_S")
    pool = WarmBackends()
    pool.close()
    b = pool.acquire(Recorded)
    pool.release(b)  # a run that ends after the server shut down
    assert b.closed == 1


def test_concurrent_releases_keep_exactly_one():
    pool = WarmBackends(idle_s=60)
    backs = [Recorded() for _ in range(16)]
    ts = [threading.Thread(target=pool.release, args=(b,)) for b in backs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sum(b.closed == 0 for b in backs) == 1
    pool.close()
    assert all(b.closed == 1 for b in backs)


def test_releasing_a_gpu_backend_whose_worker_never_started_starts_none():
    from agent_core.measure.gpu_backend import GpuBackend
    be = GpuBackend()
    be.release()
    assert not be.warm and be.sup.worker is None and be.problem is None
    be.close()


def test_the_hang_limit_follows_the_original():
    """A variant's request beats after each launch it times: no progress for 2000x the original's slowest timed
    launch (a batch counted whole), at least 8 s, is a hang; never more than the watchdog itself."""
    from agent_core.measure.gpu_backend import HANG_FACTOR, HANG_FLOOR_S, hang_limit
    from agent_core.model import Timing

    def t(us, batch=1):
        return Timing(median_us=us, min_us=us, max_us=us, iqr_us=0.0, reps=10, batch=batch, l2="flushed")
    assert hang_limit([t(324.0), t(9.9, 24)], 30.0) == HANG_FLOOR_S
    assert hang_limit([t(20_000.0)], 300.0) == HANG_FACTOR * 0.02  # a 20 ms kernel: 40 s
    assert hang_limit([t(20_000.0)], 30.0) == 30.0
    assert hang_limit([t(500.0, 40)], 300.0) == HANG_FACTOR * 0.02
    assert hang_limit([], 30.0) == HANG_FLOOR_S
