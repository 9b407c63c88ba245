"""The rule-based planner's order of steps, over real templates (a bench kernel's structural template and the
expert bound to it). The percentages are the planner's inputs, not measurements: these tests check decisions."""

from pathlib import Path

from agent_core.templating import experts
from agent_core.agent.planning import Analysis, Round, RuleBasedPlanner, Step, widen
from agent_core.search.tuner import prepare

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _templates():
    prep = prepare(str(BENCH / "rms_norm.cu"), "rms_norm_kernel")
    expert = experts.bind(experts.match(prep.cf, prep.kernel.name, prep.spec)[0], prep.cf, prep.spec)
    return prep.template, expert


def _round(i, template, pct, best, action="search"):
    return Round(i, template, {"best_params": best, "speedup": 1.5}, Analysis("", {"pct_copy": pct}),
                 Step(action, "", template))


def test_matching_expert_is_searched_first_then_the_structural_template():
    structural, expert = _templates()
    pl = RuleBasedPlanner(30)
    first = pl.plan([], [structural, expert])
    assert first.action == "search" and first.template is expert and first.budget == 30
    assert "matches its family" in first.reason
    # below the stop rule: the structural template is the next candidate
    r1 = _round(0, expert, 85.0, expert.space.original_config())
    nxt = pl.plan([r1], [structural])
    assert nxt.action == "switch_template" and nxt.template is structural
    # at or above 90% of copy bandwidth: stop, the structural template is never searched
    done = pl.plan([_round(0, expert, 92.0, expert.space.original_config())], [structural])
    assert done.action == "stop" and "92%" in done.reason


def test_without_an_expert_the_users_kernel_comes_first():
    structural, _ = _templates()
    s = RuleBasedPlanner(30).plan([], [structural])
    assert s.action == "search" and s.template is structural


def test_an_experts_closed_domain_is_never_widened_a_structural_one_is():
    structural, expert = _templates()
    top = {n: max(p.values) for n, p in expert.space.params.items()}
    assert all(p.closed for p in expert.space.params.values())
    assert widen(expert, list(top), {"best_params": top}) is None
    # every candidate tried, the expert's best at the edge of every domain: nothing to widen, so stop
    s = RuleBasedPlanner(30).plan([_round(0, structural, 70.0, structural.space.original_config()),
                                   _round(1, expert, 80.0, top, "switch_template")], [])
    assert s.action == "stop" and "every candidate template tried" in s.reason
    # the user's own parameters are open: a best value at the top of its domain is widened by one step
    structural = prepare(str(BENCH.parent / "examples" / "row_sum.cu"), "row_sum").template
    sp = structural.space.params
    name = next(n for n, p in sp.items() if p.kind not in ("block_size", "launch_bounds") and max(p.values) > 1)
    best = dict(structural.space.original_config(), **{name: max(sp[name].values)})
    w = widen(structural, [name], {"best_params": best})
    assert w is not None and max(w.space.params[name].values) == 2 * max(sp[name].values)


# ------------------------------------------------------------------------------ templates made for a regime
def _with_cluster():
    prep = prepare(str(BENCH / "rms_norm.cu"), "rms_norm_kernel")
    ms = experts.match(prep.cf, prep.kernel.name, prep.spec)
    expert, cluster = (experts.bind(m, prep.cf, prep.spec) for m in ms[:2])
    return prep, expert, cluster


def _lagging_round(expert, prep, pct_largest, pct_few):
    """The expert's round: the largest size set at pct_largest, the 16-token one (which the cluster twin serves)
    at pct_few, the others at 80%."""
    sizes = prep.spec.sizes
    pct = [pct_few if s["tokens"] <= 256 else 80.0 for s in sizes]
    pct[max(range(len(sizes)), key=lambda i: sizes[i]["tokens"] * sizes[i]["hidden"])] = pct_largest
    return Round(0, expert, {"best_params": expert.space.original_config(), "speedup": 1.7, "sizes": sizes,
                             "pct_copy": pct}, Analysis("", {"pct_copy": pct_largest}), Step("search", "", expert))


def test_a_regime_template_is_searched_for_the_dispatch_where_its_size_sets_lag():
    prep, expert, cluster = _with_cluster()
    assert cluster.serves and expert.serves is None
    pl = RuleBasedPlanner(30)
    # never first, even though it is an expert
    assert pl.plan([], [prep.template, expert, cluster]).template is expert
    # the expert reached the stop rule on the largest size set, but 16 tokens are at 7%: search the twin
    r1 = _lagging_round(expert, prep, 96.0, 7.0)
    s = pl.plan([r1], [prep.template, cluster])
    assert s.action == "switch_template" and s.template is cluster
    assert "tokens=16, hidden=14336 (7%)" in s.reason and "per-shape dispatch" in s.reason
    # without the dispatch there is nothing a regime template can win: stop
    assert RuleBasedPlanner(30, dispatch=False).plan([r1], [prep.template, cluster]).action == "stop"
    # its size sets already at 60% (above the 50% lag line): stop, naming the twin and why it cannot win
    s60 = pl.plan([_lagging_round(expert, prep, 96.0, 60.0)], [prep.template, cluster])
    assert s60.action == "stop" and s60.skipped and s60.skipped[0].startswith(cluster.origin)
    assert "not searched (cannot win): " + cluster.origin in s60.reason and "tokens=16, hidden=14336 (60%)" in s60.reason
    # the original already runs the twin's size sets at >= 90% of copy bandwidth: nothing for the twin to win
    fast = _lagging_round(expert, prep, 96.0, 7.0)
    fast.summary["original_pct_copy"] = [95.0] * len(prep.spec.sizes)
    sf = pl.plan([fast], [prep.template, cluster])
    assert sf.action == "stop" and "the original already runs its size sets at 90%" in sf.reason
    # below the stop rule the next template for the whole kernel comes first, then the regime template
    r_low = _lagging_round(expert, prep, 85.0, 7.0)
    assert pl.plan([r_low], [prep.template, cluster]).template is prep.template
    r2 = Round(1, prep.template, {"best_params": prep.template.space.original_config(), "speedup": 1.1},
               Analysis("", {"pct_copy": 70.0}), Step("switch_template", "", prep.template))
    assert pl.plan([r_low, r2], [cluster]).template is cluster
    # once searched, never again
    r3 = Round(2, cluster, {"best_params": cluster.space.original_config(), "speedup": 0.9},
               Analysis("", {"pct_copy": 40.0}), Step("switch_template", "", cluster))
    assert pl.plan([r_low, r2, r3], []).action == "stop"


def test_an_experts_cluster_twin_for_every_size_comes_right_after_it_a_regime_twin_does_not():
    """softmax_long reads a vocabulary row twice; its cluster twin (no `serves`: every size) once: it is the next
    round after softmax_long, before the structural template. A regime twin (rms_norm_cluster: few rows) still waits
    for size sets that lag."""
    from agent_core.templating.experts import cluster_twin, long_twin
    root = BENCH / "corpus" / "softmax"
    prep = prepare(str(root / "online_softmax_temperature_f32.cu"), "temperature_softmax_kernel",
                   use_workspace_files=False)
    lib = {e.name: e for e in experts.load_library()}
    b = long_twin(experts.candidates(prep.cf, prep.kernel.name, prep.spec, list(lib.values()))[0], lib)
    long = experts.bind(b, prep.cf, prep.spec)
    twin = experts.bind(cluster_twin(b, lib), prep.cf, prep.spec)
    assert twin.serves is None
    pl = RuleBasedPlanner(30)
    assert pl.plan([], [prep.template, long, twin]).template is long
    nxt = pl.plan([_round(0, long, 61.0, long.space.original_config())], [prep.template, twin])
    assert nxt.action == "switch_template" and nxt.template is twin and "twin for every size" in nxt.reason
    # rms_norm's cluster twin is a regime template (few rows): the structural template comes first
    structural, expert = _templates()
    rprep = prepare(str(BENCH / "rms_norm.cu"), "rms_norm_kernel")
    rtwin = experts.bind(cluster_twin(experts.match(rprep.cf, rprep.kernel.name, rprep.spec)[0], lib), rprep.cf,
                         rprep.spec)
    assert rtwin.serves
    assert pl.plan([_round(0, expert, 61.0, expert.space.original_config())], [structural, rtwin]).template \
        is structural


# ------------------------------------------------------------------------------ searching a template further
def _searched(i, template, speedup, measured, budget=30, action="search"):
    return Round(i, template, {"best_params": template.space.original_config(), "speedup": speedup,
                               "budget": budget, "counts": {"measured": measured, "pruned": 0}},
                 Analysis("", {"pct_copy": 70.0}), Step(action, "", template, budget))


def test_every_candidate_tried_the_best_template_with_configurations_left_is_searched_further():
    structural, expert = _templates()
    assert expert.space.size() > 60
    pl = RuleBasedPlanner(30)
    rounds = [_searched(0, expert, 1.5, 30), _searched(1, structural, 1.2, 30, action="switch_template")]
    s = pl.plan(rounds, [])
    assert s.action == "search" and s.template is expert and s.budget == 60, s
    assert "search it further" in s.reason and "30 measured found in the store" in s.reason
    # the continuation raised the run's best by 1% or more: once more, with another round's budget
    more = rounds + [_searched(2, expert, 1.6, 60, budget=60)]
    s = pl.plan(more, [])
    assert s.action == "search" and s.template is expert and s.budget == 90, s
    # ... by less: stop, saying so
    flat = rounds + [_searched(2, expert, 1.505, 60, budget=60)]
    s = pl.plan(flat, [])
    assert s.action == "stop" and "gained less than 1%" in s.reason, s.reason


def test_a_template_searched_through_or_stopped_short_is_not_searched_further():
    structural, expert = _templates()
    small = structural.space.size()
    assert small < 30
    # the expert's search ended before its budget (its strategy asked all it would) and the structural template's
    # space is searched through: stop, naming both
    s = RuleBasedPlanner(30).plan([_searched(0, expert, 1.5, 12),
                                   _searched(1, structural, 1.2, small, action="switch_template")], [])
    assert s.action == "stop" and "asked every configuration it would" in s.reason, s.reason
    assert "searched through" in s.reason
