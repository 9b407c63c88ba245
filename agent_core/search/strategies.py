"""Search strategies over a parameter space: exhaustive, random, optuna TPE (over categories or over ranks), and
"auto". TPE starts from the original configuration and the space's ``seeds`` (a template's own starting points);
random search does not (it is the baseline the others are scored against).

A strategy is asked for configurations and told their objective (time / original time, lower is better;
None when the configuration failed or was pruned). It never returns a configuration twice, returns only
configurations that pass the space's constraints for every size set, and is deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from math import comb
from typing import Iterator

from agent_core.model import ParamSpace, params_key
from agent_core.templating.space import check_config, iter_configs, valid_configs

STRATEGIES = ("auto", "exhaustive", "random", "tpe", "tpe_ranked")
AUTO_SCAN_LIMIT = 20_000  # "auto" counts valid configurations only in spaces up to this size


class Strategy:
    """Ask/tell over ``space``; ``sizes`` are the spec's size sets the constraints are checked against."""

    name = "strategy"

    def __init__(self, space: ParamSpace, sizes: list[dict] | None = None, seed: int = 0,
                 budget: int | None = None):
        self.space = space
        self.sizes = list(sizes or [])
        self.seed = seed
        self.budget = budget
        self.asked: set[str] = set()  # params_key of every configuration returned by ask
        self.results: dict[str, float | None] = {}  # params_key -> objective told (None: failed/pruned)
        self._names = list(space.params)

    def is_valid(self, cfg: dict) -> bool:
        return check_config(self.space, cfg, self.sizes) is None

    def original(self) -> dict | None:
        """The user's original configuration, when it is a valid point of the space."""
        cfg = self.space.original_config()
        return cfg if self.is_valid(cfg) else None

    def ask(self, n: int = 1) -> list[dict]:
        """Up to ``n`` valid configurations never asked before; [] when the space is exhausted."""
        out: list[dict] = []
        while len(out) < n:
            cfg = self._next()
            if cfg is None:
                break
            self.asked.add(params_key(cfg))
            out.append(cfg)
        return out

    def tell(self, cfg: dict, objective: float | None) -> None:
        """The result of ``cfg``: its objective, or None when it failed (compile/verify/crash) or was pruned."""
        if objective is not None and not math.isfinite(objective):
            objective = None
        self.results[params_key(cfg)] = objective

    def best(self) -> tuple[dict, float] | None:
        """The best configuration told so far and its objective."""
        told = [(k, v) for k, v in self.results.items() if v is not None]
        if not told:
            return None
        k, v = min(told, key=lambda kv: kv[1])
        return json.loads(k), v

    def _next(self) -> dict | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers for subclasses
    def _decode(self, index: int) -> dict:
        """The ``index``-th configuration of the space in ``iter_configs`` order (last parameter fastest)."""
        cfg = {}
        for name in reversed(self._names):
            values = self.space.params[name].values
            index, r = divmod(index, len(values))
            cfg[name] = values[r]
        return {n: cfg[n] for n in self._names}

    def _random_order(self, rng: random.Random) -> Iterator[dict]:
        """Every configuration of the space once, in a seeded random order (lazy: O(drawn) memory)."""
        n = self.space.size()
        swapped: dict[int, int] = {}
        for i in range(n):  # Fisher-Yates with the permuted prefix kept in a dict
            j = rng.randrange(i, n)
            vi, vj = swapped.get(i, i), swapped.get(j, j)
            swapped[j] = vi
            swapped.pop(i, None)
            yield self._decode(vj)


class _OriginalFirst(Strategy):
    """The original configuration first, then ``_rest()`` in its order, each valid configuration asked once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._it = self._order()

    def _rest(self) -> Iterator[dict]:
        raise NotImplementedError

    def _order(self) -> Iterator[dict]:
        orig = self.original()
        if orig is not None:
            yield orig
        yield from self._rest()

    def _next(self) -> dict | None:
        for cfg in self._it:
            if params_key(cfg) not in self.asked and self.is_valid(cfg):
                return cfg
        return None


class Exhaustive(_OriginalFirst):
    """Every valid configuration: the original first, then the space in order."""

    name = "exhaustive"

    def _rest(self) -> Iterator[dict]:
        return iter_configs(self.space)


class RandomSearch(_OriginalFirst):
    """Valid configurations in a seeded random order, sampled without replacement; the original first."""

    name = "random"

    def _rest(self) -> Iterator[dict]:
        return self._random_order(random.Random(self.seed))


def _quiet_optuna():
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # optuna logs every trial at INFO
    return optuna


class Tpe(Strategy):
    """Optuna's TPE (multivariate), the original enqueued first.

    Every parameter is a category here: each of THREADS' 32 values is learnt apart. ``TpeRanked`` searches a
    parameter whose values are all numbers by its rank among them instead.

    Suggestions that break a constraint are told as pruned and re-asked (they cost the caller nothing);
    a suggestion already evaluated is told its known result and not returned. When TPE keeps suggesting
    known points, a random unasked configuration is enqueued instead, so ``ask`` always makes progress.
    """

    name = "tpe"
    tries_per_config = 25

    ordinal = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        optuna = _quiet_optuna()
        from optuna.distributions import CategoricalDistribution, IntDistribution
        self._optuna = optuna
        self._ranked = {n: list(p.values) for n, p in self.space.params.items()
                        if self.ordinal and len(p.values) > 1 and all(
                            isinstance(v, (int, float)) and not isinstance(v, bool) for v in p.values)
                        and list(p.values) == sorted(p.values)}
        self._dists = {n: IntDistribution(0, len(self._ranked[n]) - 1) if n in self._ranked
                       else CategoricalDistribution(list(p.values)) for n, p in self.space.params.items()}
        b = self.budget
        startup = 10 if b is None else max(4, min(20, b // 5))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.TPESampler(seed=self.seed, multivariate=True, n_startup_trials=startup,
                                                 constant_liar=True)
            self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[str, list] = {}  # params_key -> trials waiting for the caller's tell
        self._invalid: set[str] = set()
        self._fallback = self._random_order(random.Random(self.seed ^ 0x5EED))
        self.invalid_suggestions = 0  # constraint-breaking suggestions absorbed internally
        self.fallbacks = 0  # configurations chosen at random because TPE only repeated itself
        self._fell_back = False
        orig = self.original()
        if orig is not None:
            self.study.enqueue_trial(self._encode(orig))
        for seed_cfg in self.space.seeds:  # the template's own starting points, after the original
            cfg = {**self.space.original_config(), **seed_cfg}
            if set(cfg) == set(self._dists) and cfg != orig and self.is_valid(cfg) and all(
                    cfg[n] in p.values for n, p in self.space.params.items()):
                self.study.enqueue_trial(self._encode(cfg))

    def _encode(self, cfg: dict) -> dict:
        """A configuration as the study's parameters (ranks for the ordinal ones)."""
        return {n: self._ranked[n].index(v) if n in self._ranked else v for n, v in cfg.items()}

    def _tell_trial(self, trial, objective: float | None) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if objective is None:
                self.study.tell(trial, state=self._optuna.trial.TrialState.PRUNED)
            else:
                self.study.tell(trial, objective)

    def _suggest(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask()
            cfg = {n: self._ranked[n][trial.suggest_int(n, 0, len(self._ranked[n]) - 1)] if n in self._ranked
                   else trial.suggest_categorical(n, p.values) for n, p in self.space.params.items()}
        return trial, cfg

    def _next(self) -> dict | None:
        tries = self.tries_per_config if not self._fell_back else max(1, self.tries_per_config // 5)
        self._fell_back = False
        for _ in range(tries):
            trial, cfg = self._suggest()
            key = params_key(cfg)
            if key in self._invalid or (key not in self.asked and not self.is_valid(cfg)):
                self._invalid.add(key)
                self.invalid_suggestions += 1
                self._tell_trial(trial, None)
            elif key in self.results:
                self._tell_trial(trial, self.results[key])  # known: answered from memory
            elif key in self.asked:
                self._pending.setdefault(key, []).append(trial)  # asked, result still to come
            else:
                self._pending[key] = [trial]
                return cfg
        for cfg in self._fallback:
            key = params_key(cfg)
            if key in self.asked or key in self._invalid or not self.is_valid(cfg):
                continue
            self.fallbacks += 1
            self._fell_back = True  # TPE is repeating itself: try it less before the next fallback
            self.study.enqueue_trial(self._encode(cfg))
            trial, got = self._suggest()
            self._pending.setdefault(params_key(got), []).append(trial)
            return got
        return None

    def tell(self, cfg: dict, objective: float | None) -> None:
        super().tell(cfg, objective)
        key = params_key(cfg)
        objective = self.results[key]
        trials = self._pending.pop(key, [])
        for trial in trials:
            self._tell_trial(trial, objective)
        if not trials and key not in self.asked and set(cfg) == set(self._dists) and self.is_valid(cfg):
            # a result the caller found elsewhere (e.g. the store): teach the model
            from optuna.trial import TrialState, create_trial
            state = TrialState.COMPLETE if objective is not None else TrialState.PRUNED
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.study.add_trial(create_trial(params=self._encode(cfg), distributions=self._dists,
                                                  state=state, value=objective))
            self.asked.add(key)


class TpeRanked(Tpe):
    """TPE with each parameter whose values are all numbers (in increasing order) searched by its rank among them:
    an integer distribution over 0..n-1, so what TPE learns of one value carries to its neighbours (a block of 480
    threads is near one of 512). ``auto`` uses it where the space is larger than the budget: on the spaces the H100
    recordings brute-forced (bench/strategy_scores.py) it scores above ``tpe`` against random search and leaves a
    per-shape dispatch closer to each size set's optimum."""

    name = "tpe_ranked"
    ordinal = True


def make_strategy(name: str, space: ParamSpace, sizes: list[dict] | None, seed: int = 0,
                  budget: int | None = None) -> Strategy:
    """A strategy by name. "auto": exhaustive when the valid space fits the budget, else TPE over ranks."""
    if name not in STRATEGIES:
        from agent_core.model import KerntuneError
        raise KerntuneError(f"unknown search strategy '{name}' (use one of: {', '.join(STRATEGIES)})",
                            field_name="strategy")
    if name == "auto":
        if budget is None or space.size() <= budget:
            name = "exhaustive"
        elif space.size() <= AUTO_SCAN_LIMIT and len(valid_configs(space, sizes, limit=budget + 1)) <= budget:
            name = "exhaustive"
        else:
            name = "tpe_ranked"
    cls = {"exhaustive": Exhaustive, "random": RandomSearch, "tpe": Tpe, "tpe_ranked": TpeRanked}[name]
    return cls(space, sizes, seed=seed, budget=budget)


# --------------------------------------------------------------------------------------------- scoring
def expected_random_best(objectives: list[float], k: int) -> float:
    """The expected best (lowest) objective of ``k`` configurations drawn at random without replacement
    from a space whose valid configurations have ``objectives``: the exact random-search baseline."""
    vals = sorted(objectives)
    n = len(vals)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and {n}, not {k}")
    total = comb(n, k)
    # P(the best of the draw is the i-th smallest) = C(n - 1 - i, k - 1) / C(n, k); a failed configuration
    # (objective inf) weighs only when a draw can hold nothing else, and then the expectation is inf
    return sum(v * w for v, w in ((v, comb(n - 1 - i, k - 1)) for i, v in enumerate(vals)) if w) / total


def score_against_random(best_found: float, optimum: float, random_baseline: float) -> float:
    """(random - found) / (random - optimum), after Willemsen et al.: 1 = found the optimum, 0 = as good
    as random search with the same budget, negative = worse than random."""
    span = random_baseline - optimum
    if span <= 0:
        return 1.0 if best_found <= optimum else 0.0
    return (random_baseline - best_found) / span
