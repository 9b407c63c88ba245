"""The timing race of the GPU worker (gpu_worker.race_limit), without a GPU: which warm-up median ends a search
evaluation's timing on a size set. Its effect on a real GPU: tests/test_gpu_backend.py."""

from agent_core.measure.gpu_worker import RACE_FACTOR, SLOW_FACTOR, _SizeSet, race_limit


def size_set(reference_us=None, best_us=None) -> _SizeSet:
    return _SizeSet(index=0, sizes={"n": 1}, bufs=[], args=[], working_set=4, reference_us=reference_us,
                    best_us=best_us)


def test_the_fastest_so_far_bounds_the_race():
    assert race_limit(size_set(10.0, 8.0)) == RACE_FACTOR * 8.0
    assert race_limit(size_set(10.0, 10.0)) == RACE_FACTOR * 10.0  # the original is the fastest yet


def test_the_original_bounds_it_where_nothing_faster_was_timed():
    assert race_limit(size_set(10.0, None)) == SLOW_FACTOR * 10.0  # (start() sets best_us to it)
    assert race_limit(size_set(None, 5.0)) == RACE_FACTOR * 5.0  # the original not timed here (replayed medians)


def test_no_limit_before_anything_was_timed():
    assert race_limit(size_set()) is None
