import math
import statistics

import pytest

from agent_core.model import KerntuneError, Param, ParamSpace, params_key
from agent_core.search.strategies import (STRATEGIES, Exhaustive, RandomSearch, Tpe, expected_random_best, make_strategy,
                               score_against_random)
from agent_core.templating.space import check_config, valid_configs

SIZES = [{"cols": 4096}, {"cols": 4099}]


def small_space() -> ParamSpace:
    """48 configurations, 22 of them valid for SIZES (constraints over parameters and sizes)."""
    return ParamSpace("k", {
        "BLOCK": Param("BLOCK", [32, 64, 96, 128, 256, 512], 128, "block_size"),
        "VEC": Param("VEC", [1, 2, 4, 8], 1, "items_per_thread"),
        "UNROLL": Param("UNROLL", [1, 4], 4, "unroll"),
    }, ["is_pow2(BLOCK)", "BLOCK * VEC <= 1024", "VEC == 1 or cols % VEC == 0 or UNROLL == 1"])


def smooth_space() -> ParamSpace:
    """512 configurations, 480 valid: a tuning space with a smooth objective (below)."""
    return ParamSpace("k", {
        "BLOCK": Param("BLOCK", [32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024],
                       128, "block_size"),
        "UNROLL": Param("UNROLL", [1, 2, 3, 4, 5, 6, 7, 8], 1, "unroll"),
        "VEC": Param("VEC", [1, 2, 4, 8], 1, "items_per_thread"),
    }, ["BLOCK % 32 == 0", "BLOCK * VEC <= 4096"])


def smooth(cfg: dict) -> float:
    """Time ratio to the original: best at BLOCK=256, UNROLL=4, VEC=4 (1.0)."""
    return (1.0 + 0.3 * (math.log2(cfg["BLOCK"]) - 8) ** 2 + 0.05 * (cfg["UNROLL"] - 4) ** 2
            + 0.2 * (math.log2(cfg["VEC"]) - 2) ** 2)


def drain(strategy, n=1, objective=None, limit=10_000) -> list[dict]:
    """Ask until exhausted, telling each configuration its objective (or failure)."""
    out = []
    while len(out) < limit:
        got = strategy.ask(n)
        if not got:
            break
        assert len(got) <= n
        for cfg in got:
            strategy.tell(cfg, objective(cfg) if objective else None)
        out += got
    return out


def keys(cfgs):
    return [params_key(c) for c in cfgs]


@pytest.mark.parametrize("name", ["exhaustive", "random", "tpe", "tpe_ranked"])
@pytest.mark.parametrize("batch", [1, 3])
def test_covers_exactly_the_valid_set_without_repeats(name, batch):
    space = small_space()
    valid = valid_configs(space, SIZES)
    assert 0 < len(valid) < space.size()
    got = drain(make_strategy(name, space, SIZES, seed=5), n=batch, objective=smooth_or_fail)
    assert len(set(keys(got))) == len(got)  # never repeats
    assert sorted(keys(got)) == sorted(keys(valid))  # exactly the valid set, then exhausted
    assert all(check_config(space, c, SIZES) is None for c in got)


def smooth_or_fail(cfg):
    return None if cfg["VEC"] == 8 else smooth(cfg)  # some configurations fail


@pytest.mark.parametrize("name", ["exhaustive", "random", "tpe", "tpe_ranked"])
def test_original_first(name):
    space = small_space()
    assert make_strategy(name, space, SIZES, seed=3, budget=10).ask(1) == [space.original_config()]


def test_invalid_original_is_skipped():
    space = small_space()
    space.params["BLOCK"].original = 96  # not a power of two: violates a constraint
    for name in ("exhaustive", "random", "tpe", "tpe_ranked"):
        first = make_strategy(name, space, SIZES, seed=0, budget=10).ask(4)
        assert len(first) == 4 and all(check_config(space, c, SIZES) is None for c in first)


def test_exhaustive_order_is_the_space_order():
    space = small_space()
    got = drain(Exhaustive(space, SIZES))
    valid = valid_configs(space, SIZES)
    assert got[0] == space.original_config()
    assert got[1:] == [c for c in valid if c != space.original_config()]


@pytest.mark.parametrize("name", ["random", "tpe", "tpe_ranked"])
def test_reproducible_with_a_seed_and_seeds_differ(name):
    space = smooth_space()

    def run(seed):
        s = make_strategy(name, space, [], seed=seed, budget=30)
        out = []
        for _ in range(10):
            got = s.ask(3)
            for c in got:
                s.tell(c, smooth(c))
            out += got
        return keys(out)

    a = run(11)
    assert a == run(11)
    assert a != run(12)
    assert a[0] == run(12)[0] == params_key(space.original_config())


def test_budget_not_consumed_by_invalid_configs():
    """A space where most points break a constraint: every asked configuration is valid, TPE absorbed
    the invalid suggestions internally."""
    space = ParamSpace("k", {
        "A": Param("A", list(range(1, 21)), 1, "define"),
        "B": Param("B", list(range(1, 21)), 1, "define"),
    }, ["(A + B) % 7 == 2"])  # 57 of 400 valid
    valid = valid_configs(space, [])
    for name in ("random", "tpe"):
        s = make_strategy(name, space, [], seed=1, budget=20)
        got = []
        while len(got) < 20:
            batch = s.ask(20 - len(got))
            assert batch
            for c in batch:
                s.tell(c, abs(c["A"] - 12) + abs(c["B"] - 4) + 1.0)
            got += batch
        assert len(got) == 20 and len(set(keys(got))) == 20
        assert all(check_config(space, c, []) is None for c in got)
    assert isinstance(s, Tpe) and s.invalid_suggestions > 0
    assert len(drain(s, objective=lambda c: 1.0)) == len(valid) - 20


def test_tpe_finds_near_optimum_with_few_asks():
    space = smooth_space()
    valid = valid_configs(space, [])
    optimum = min(smooth(c) for c in valid)
    budget = 40  # under a tenth of the 480 valid configurations
    for seed in (0, 1, 2):
        s = make_strategy("tpe", space, [], seed=seed, budget=budget)
        seen = drain(s, n=1, objective=smooth, limit=budget)
        assert len(seen) == budget
        best = min(smooth(c) for c in seen)
        assert best <= optimum * 1.05, (seed, best)
        assert s.best()[1] == best


def test_tpe_beats_random_search_score():
    """Willemsen et al. score against the exactly computed random baseline: TPE is well above random."""
    space = smooth_space()
    objs = [smooth(c) for c in valid_configs(space, [])]
    optimum, k = min(objs), 25
    baseline = expected_random_best(objs, k)
    scores = {}
    for name in ("tpe", "random"):
        per_seed = []
        for seed in range(6):
            seen = drain(make_strategy(name, space, [], seed=seed, budget=k), objective=smooth, limit=k)
            per_seed.append(score_against_random(min(smooth(c) for c in seen), optimum, baseline))
        scores[name] = statistics.mean(per_seed)
    assert scores["tpe"] > 0.5
    assert scores["tpe"] > scores["random"] + 0.3


def test_tpe_failures_are_learned_and_known_points_not_returned():
    space = small_space()
    s = Tpe(space, SIZES, seed=0, budget=10)
    first = s.ask(2)
    s.tell(first[0], None)
    s.tell(first[1], float("nan"))  # not finite: a failure
    assert s.results[params_key(first[1])] is None
    rest = drain(s, objective=smooth)
    assert not set(keys(first)) & set(keys(rest))


def test_tpe_learns_results_told_from_elsewhere():
    space = small_space()
    s = Tpe(space, SIZES, seed=0, budget=10)
    known = {"BLOCK": 256, "VEC": 4, "UNROLL": 1}
    assert check_config(space, known, SIZES) is None
    s.tell(known, 0.5)  # e.g. reused from the store without being asked
    assert params_key(known) not in keys(drain(s, objective=smooth))
    assert any(t.params == known and t.value == 0.5 for t in s.study.trials)


def test_tpe_prints_nothing(capfd):
    s = make_strategy("tpe", smooth_space(), [], seed=0, budget=15)
    drain(s, n=2, objective=smooth, limit=15)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_auto_chooses_by_budget():
    space = small_space()  # 22 valid of 48
    assert len(valid_configs(space, SIZES)) == 22
    assert isinstance(make_strategy("auto", space, SIZES, budget=48), Exhaustive)
    assert isinstance(make_strategy("auto", space, SIZES, budget=22), Exhaustive)  # valid space fits
    assert isinstance(make_strategy("auto", space, SIZES, budget=21), Tpe)
    assert isinstance(make_strategy("auto", space, SIZES, budget=None), Exhaustive)
    assert isinstance(make_strategy("random", space, SIZES), RandomSearch)
    assert set(STRATEGIES) == {"auto", "exhaustive", "random", "tpe", "tpe_ranked"}
    with pytest.raises(KerntuneError, match="unknown search strategy 'annealing'"):
        make_strategy("annealing", space, SIZES)


def test_ask_zero_and_empty_space():
    space = small_space()
    assert make_strategy("random", space, SIZES).ask(0) == []
    space.constraints.append("BLOCK > 4096")  # nothing valid
    for name in ("exhaustive", "random", "tpe", "tpe_ranked"):
        assert make_strategy(name, space, SIZES, budget=5).ask(3) == []


def test_tpe_ranked_searches_numbers_by_rank_and_the_rest_as_categories():
    """Numeric parameters become integer distributions over their ranks (neighbours share what TPE learns),
    a parameter of words stays a category; the configurations asked are the space's own values."""
    from optuna.distributions import CategoricalDistribution, IntDistribution
    space = small_space()
    space.params["MODE"] = Param("MODE", ["fast", "exact"], "exact", "choice", "a parameter of words")
    t = make_strategy("tpe_ranked", space, SIZES, seed=1, budget=12)
    numeric = [n for n in space.params if n != "MODE"]
    assert all(isinstance(t._dists[n], IntDistribution) and t._dists[n].high == len(space.params[n].values) - 1
               for n in numeric)
    assert isinstance(t._dists["MODE"], CategoricalDistribution)
    assert all(isinstance(d, CategoricalDistribution) for d in make_strategy("tpe", space, SIZES, budget=12)._dists.values())
    got = drain(t, n=1, objective=smooth_or_fail, limit=12)
    assert got[0] == space.original_config() and len(got) == 12
    assert all(c[n] in space.params[n].values for c in got for n in space.params)


def test_expected_random_best_is_exact():
    vals = [3.0, 1.0, 2.0, 4.0]
    # best of 2 of 4 without replacement: P(1)=3/6, P(2)=2/6, P(3)=1/6
    assert expected_random_best(vals, 2) == pytest.approx((3 * 1 + 2 * 2 + 1 * 3) / 6)
    assert expected_random_best(vals, 1) == pytest.approx(2.5)
    assert expected_random_best(vals, 4) == 1.0
    with pytest.raises(ValueError):
        expected_random_best(vals, 5)


def test_score_against_random():
    assert score_against_random(1.0, 1.0, 2.0) == 1.0
    assert score_against_random(2.0, 1.0, 2.0) == 0.0
    assert score_against_random(1.5, 1.0, 2.0) == 0.5
    assert score_against_random(3.0, 1.0, 2.0) == -1.0
    assert score_against_random(1.0, 1.0, 1.0) == 1.0
