"""Search quality offline (bench/strategy_scores.py): kerntune's strategies against random search on spaces
brute-forced on an H100 (the recordings in tests/data/stores), scored as in Willemsen et al. (FGCS 2024)."""

import importlib.util
import itertools
import math
import random
import sys
from pathlib import Path

import pytest

from agent_core.search.strategies import expected_random_best

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import strategy_scores as ss  # noqa: E402

sys.path.remove(str(ROOT / "bench"))
EXAMPLES = ROOT / "tests" / "data" / "stores" / "examples.sqlite"


def test_the_random_baseline_is_the_exact_expectation_over_every_draw():
    vals = [3.0, 1.0, 2.0, 2.0, 5.0, 0.5, 4.0]
    for k in range(1, len(vals) + 1):
        draws = list(itertools.combinations(vals, k))
        assert expected_random_best(vals, k) == pytest.approx(sum(min(d) for d in draws) / len(draws))
    # failed configurations (inf) matter only when a draw can hold nothing else
    failed = [1.0, 2.0, math.inf, math.inf]
    assert expected_random_best(failed, 3) == pytest.approx(sum(min(d) for d in itertools.combinations(failed, 3)) / 4)
    assert expected_random_best(failed, 2) == math.inf
    with pytest.raises(ValueError):
        expected_random_best(vals, 0)


def test_recordings_say_which_spaces_were_brute_forced():
    spaces = {rs.kernel: rs for rs in ss.recorded_spaces(EXAMPLES)}
    row_sum, silu = spaces["row_sum"], spaces["silu"]
    assert row_sum.complete and row_sum.n_valid == len(row_sum.objectives) == 30  # tuned exhaustively
    assert not silu.complete and len(silu.objectives) == 200 and silu.n_valid == 640
    sub = ss.sub_space(silu)  # the exhaustive run's budget of 200 covered THREADS 32..320 for every BLOCKS
    assert sub.complete and sub.n_valid == len(sub.objectives) == 200
    assert sub.space.params["THREADS"].values == [32 * i for i in range(1, 11)]
    assert len(sub.space.params["BLOCKS"].values) == 20
    assert sub.optimum == min(silu.objectives.values())  # the best silu configuration lies in the sub-space


def test_scores_of_curves():
    rand = [3.0, 2.0, 1.5]
    assert ss.scores([1.0, 1.0, 1.0], rand, 1.0) == [1.0, 1.0, 1.0]  # the optimum from the start
    assert ss.scores(rand, rand, 1.0) == [0.0, 0.0, 0.0]  # exactly random search
    assert ss.scores([math.inf, 3.0, 2.0], rand, 1.0) == [-1.0, -1.0, -1.0]  # behind random search
    assert ss.scores([1.0], [1.0], 1.0) == [1.0]  # random search already at the optimum: only the optimum scores


def test_a_uniformly_random_order_scores_about_zero():
    """The baseline is what a random search gets on average: random permutations of the recorded row_sum space,
    best after k, averaged, land on it."""
    rs = next(r for r in ss.recorded_spaces(EXAMPLES) if r.kernel == "row_sum")
    vals = rs.values()
    rng = random.Random(7)
    k, trials = 10, 4000
    mean = sum(min(rng.sample(vals, k)) for _ in range(trials)) / trials
    assert mean == pytest.approx(expected_random_best(vals, k), rel=0.01)


def test_kerntune_strategies_on_the_brute_forced_row_sum_space():
    rs = next(r for r in ss.recorded_spaces(EXAMPLES) if r.kernel == "row_sum")
    rows = {r.strategy: r for r in ss.score_space(rs, ["exhaustive", "random", "tpe"], [20], repeats=6)}
    for r in rows.values():
        assert -1.0 <= r.final <= 1.0 and -1.0 <= r.mean <= 1.0 and r.budget == 20
    assert rows["exhaustive"].repeats == 1 and rows["tpe"].repeats == 6
    # exhaustive walks BLOCK=32 first (the original, then the space in order): early on it is behind random search
    assert rows["exhaustive"].mean < 0 and rows["exhaustive"].final == 1.0
    # TPE beats random search over the budget on this recorded space
    assert rows["tpe"].mean > 0.3
    # the replay answers what the recording holds: the exhaustive curve ends at the recorded optimum
    be = ss.replay_for(rs)
    try:
        curve = ss.search_curve(rs, be, "exhaustive", 0, 29)
    finally:
        be.close()
    assert curve[-1] == rs.optimum and curve == sorted(curve, reverse=True)


@pytest.mark.skipif(importlib.util.find_spec("kernel_tuner") is None, reason="kernel_tuner is not installed")
def test_kernel_tuner_replays_the_same_space_in_its_simulation_mode(tmp_path):
    rs = next(r for r in ss.recorded_spaces(EXAMPLES) if r.kernel == "row_sum")
    cache = tmp_path / "kt.json"
    tune_params, restriction = ss.kt_cache_file(rs, cache)
    assert tune_params == {"BLOCK": [32, 64, 128, 256, 512, 1024], "UNROLL": [1, 2, 4, 8, 16]}
    curve = ss.kt_curve(rs, "random_sample", 0, 20, cache, tune_params, restriction)
    assert len(curve) == 20 and curve == sorted(curve, reverse=True)
    assert curve[-1] in rs.objectives.values()
    rows = ss.score_space_kt(rs, ["random_sample"], [20], 3, tmp_path)
    assert len(rows) == 1 and rows[0].strategy == "KT random_sample" and -1.0 <= rows[0].mean <= 1.0


def test_gzipped_recordings_are_read_from_an_unzipped_copy(tmp_path):
    """The brute-forced spaces kept under gpu/results are .sqlite.gz: scored like the store they hold."""
    import gzip
    import shutil
    gz = tmp_path / "examples.sqlite.gz"
    with open(EXAMPLES, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    into = tmp_path / "unzipped"
    into.mkdir()
    got = ss._unzip(gz, into)
    assert got == into / "examples.sqlite" and got.read_bytes() == EXAMPLES.read_bytes()
    assert ss._unzip(EXAMPLES, into) == EXAMPLES
    assert {rs.kernel for rs in ss.recorded_spaces(got)} == {rs.kernel for rs in ss.recorded_spaces(EXAMPLES)}
