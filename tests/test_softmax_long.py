"""The long-row twin of the softmax expert (templates/experts/softmax_long.cu): a binding of softmax whose rows
are longer than its registers hold (a vocabulary of logits) is handed over to softmax_long by the screening, with
the same binding; a kernel whose rows fit keeps softmax; softmax_long's own cluster twin (softmax_long_cluster:
the row split over a cluster's blocks, STAGE 0 holding each slice in registers, STAGE 1 reading it twice with the
online passes softmax_long uses, _online.cuh) follows it. With nvcc: the bound long twin compiles at its corners
without spills, in both conventions (plain, and scaled/divided with an output type of its own); the cluster twin
of a 152k row has no STAGE 0 configuration that does not spill, and its STAGE 1 corners compile without spills;
where the rows fit, the largest STAGE 0 configurations the spill bound lets through compile without spills."""

import itertools
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agent_core.agent.screen import VERIFIED, screen
from agent_core.model import DeviceInfo, Evaluation, Status, Timing
from agent_core.search.tuner import prepare
from agent_core.templating import experts as X
from agent_core.templating.space import check_config

ROOT = Path(__file__).resolve().parent.parent
VOCAB = [("softmax/online_softmax_temperature_f32.cu", "temperature_softmax_kernel"),
         ("softmax/softmax_gridstride_half_to_float.cu", "softmax_rows_half_to_float")]
DEVICE = DeviceInfo(name="fixture device (runs nothing)", arch="sm_90", sm_count=132, copy_bandwidth_gbps=3000.0)


def _prep(rel: str, kernel: str):
    return prepare(str(ROOT / "bench" / "corpus" / rel), kernel, use_workspace_files=False)


@pytest.mark.parametrize("rel, kernel", VOCAB)
def test_a_vocabulary_row_has_no_softmax_configuration_and_binds_its_long_twin(rel, kernel):
    prep = _prep(rel, kernel)
    lib = {e.name: e for e in X.load_library()}
    b = X.candidates(prep.cf, kernel, prep.spec, list(lib.values()))[0]
    assert b.expert.name == "softmax"
    with pytest.raises(X.NoConfiguration, match="no configuration satisfies"):
        X.bind(b, prep.cf, prep.spec)
    long = X.long_twin(b, lib)
    assert long.expert.name == "softmax_long" and long.describe() == b.describe()
    assert long.call_args == b.call_args and long.conventions == b.conventions
    t = X.bind(long, prep.cf, prep.spec)
    assert t.origin == "expert:softmax_long" and t.launch["block"] == ["THREADS"]
    from agent_core.source import spec as spec_mod
    for sizes in prep.spec.sizes:  # one block per row, whatever the user's grid was
        rows = next(v for n, v in sizes.items() if n in ("batch", "num_rows"))
        assert spec_mod.launch(t.launch, sizes, t.space.original_config()).grid == (rows, 1, 1)
    assert check_config(t.space, t.space.original_config(), prep.spec.sizes) is None


def test_rows_that_fit_keep_the_softmax_expert():
    prep = prepare(str(ROOT / "bench" / "softmax.cu"), "softmax_kernel", use_workspace_files=False)
    b = X.candidates(prep.cf, "softmax_kernel", prep.spec)[0]
    assert X.bind(b, prep.cf, prep.spec).origin == "expert:softmax"


class _AllVerify:
    """A backend that runs nothing: every check verifies (what is checked is the screening's choice)."""
    name = "fixture"

    def device(self):
        return DEVICE

    def start(self, problem, original=None):
        return [Timing(median_us=50.0, min_us=50.0, max_us=51.0, iqr_us=0.5, reps=50, batch=1, l2="flushed")] * 3

    def check(self, variant, size_sets, scale=1.0):
        return Evaluation(params=dict(variant.params), status=Status.OK)


@pytest.mark.nvcc
@pytest.mark.parametrize("rel, kernel", VOCAB)
def test_the_screening_hands_a_vocabulary_softmax_to_the_long_twin(rel, kernel, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    prep = _prep(rel, kernel)
    s = screen(prep, _AllVerify())
    first = s.verdicts[0]
    assert first.binding.expert.name == "softmax_long" and first.status == VERIFIED
    assert s.templates[0].origin == "expert:softmax_long"
    # its cluster twin (one read of the row, sm_90) follows, as the other row families' twins follow theirs
    twin = next(t for t in s.templates if t.origin == "expert:softmax_long_cluster")
    assert twin.serves is None and "__cluster_dims__" in twin.text


def _nvcc_resources(t, cfgs, tmp):
    """ptxas's resources of ``t`` at each configuration of ``cfgs``, compiled side by side (compile_many: a thread
    per CPU); a configuration that does not compile fails the test with nvcc's message."""
    from agent_core.measure.compiler import Compiled, compile_many
    got = compile_many([dict(text=t.text, kernel=t.entry, arch="sm_90", defines={f"KT_{n}": v for n, v in cfg.items()},
                             cache_dir=tmp) for cfg in cfgs])
    for cfg, c in zip(cfgs, got):
        assert isinstance(c, Compiled), (cfg, str(c), getattr(c, "log", "")[-3000:])
    return [c.resources for c in got]


@pytest.mark.nvcc
@pytest.mark.parametrize("rel, kernel", VOCAB)
def test_the_long_twin_compiles_at_its_corners_without_spills(rel, kernel, tmp_path):
    prep = _prep(rel, kernel)
    lib = {e.name: e for e in X.load_library()}
    t = X.bind(X.long_twin(X.candidates(prep.cf, kernel, prep.spec, list(lib.values()))[0], lib), prep.cf, prep.spec)
    p = t.space.params
    corners = [dict(zip(p, c)) for c in itertools.product(*([min(x.values), max(x.values)] for x in p.values()))]
    for cfg, res in zip(corners, _nvcc_resources(t, corners, tmp_path / "cache")):
        assert res.spill_stores == 0 and res.spill_loads == 0, (cfg, res)


@pytest.mark.nvcc
@pytest.mark.parametrize("rel, kernel", VOCAB)
def test_the_long_cluster_twin_of_a_vocabulary_row_reads_it_twice_and_compiles_without_spills(rel, kernel, tmp_path):
    prep = _prep(rel, kernel)
    lib = {e.name: e for e in X.load_library()}
    long = X.long_twin(X.candidates(prep.cf, kernel, prep.spec, list(lib.values()))[0], lib)
    twin = X.cluster_twin(long, lib)
    assert twin.expert.name == "softmax_long_cluster" and twin.conventions == long.conventions
    t = X.bind(twin, prep.cf, prep.spec)
    # 151,936 logits over 8 blocks: 18,992 a block; STAGE 0 holds them in registers only at THREADS * VEC * ITEMS >=
    # 18,992 and <= 32,768 (the ones that spill a few bytes but measured faster on fp32 rows), STAGE 1 (two reads of
    # each slice) at any cluster size; 4-byte logits or outputs: vectors of 4 at most; expf or the hardware's 2^x
    assert {n: p.values for n, p in t.space.params.items()} == {
        "CLUSTER": [2, 4, 8], "THREADS": [256, 512, 1024], "VEC": [1, 2, 4], "ITEMS": [1, 2, 4, 8], "STAGE": [0, 1],
        "FAST_MATH": [0, 1]}
    assert t.space.original_config() == {"CLUSTER": 8, "THREADS": 1024, "VEC": 4, "ITEMS": 2, "STAGE": 1,
                                         "FAST_MATH": 0}
    assert check_config(t.space, {"CLUSTER": 8, "THREADS": 1024, "VEC": 4, "ITEMS": 8, "STAGE": 0, "FAST_MATH": 0},
                        prep.spec.sizes) is None
    p = {n: q.values for n, q in t.space.params.items()}
    p["ITEMS"] = [1, 2, 4]
    cfgs = [{"CLUSTER": 8, **dict(zip(("THREADS", "VEC", "ITEMS", "FAST_MATH"), c)), "STAGE": 1}
            for c in itertools.product(*([min(p[n]), max(p[n])] for n in ("THREADS", "VEC", "ITEMS", "FAST_MATH")))]
    for cfg, res in zip(cfgs, _nvcc_resources(t, cfgs, tmp_path / "cache")):
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 64, (cfg, res)


@pytest.mark.nvcc
def test_the_long_cluster_twin_keeps_stage_0_where_the_rows_fit_and_it_does_not_spill(tmp_path):
    """A plain fp16 softmax of rows up to 14,336: STAGE 0 holds a slice of 8 blocks in registers; the largest
    configurations that hold at most 16384 values compile without spills; the bound is 32768."""
    prep = _prep("softmax/softmax_pow2_block_fp16.cu", "cunn_SoftMaxForward")
    lib = {e.name: e for e in X.load_library()}
    b = X.candidates(prep.cf, "cunn_SoftMaxForward", prep.spec, list(lib.values()))[0]
    t = X.bind(X.cluster_twin(X.long_twin(b, lib), lib), prep.cf, prep.spec)
    assert t.space.params["STAGE"].values == [0, 1]
    cfgs = [{"CLUSTER": 8, "THREADS": threads, "VEC": vec, "ITEMS": items, "STAGE": 0, "FAST_MATH": 0}
            for threads, vec, items in [(1024, 4, 4), (1024, 2, 8), (512, 4, 8), (256, 8, 8)]]
    for cfg in cfgs:
        assert check_config(t.space, cfg, prep.spec.sizes) is None, cfg
    for cfg, res in zip(cfgs, _nvcc_resources(t, cfgs, tmp_path / "cache")):
        assert res.spill_stores == 0 and res.spill_loads == 0, (cfg, res)
    # four times that capacity is refused
    assert check_config(t.space, {"CLUSTER": 8, "THREADS": 1024, "VEC": 8, "ITEMS": 8, "STAGE": 0, "FAST_MATH": 0},
                        prep.spec.sizes) is not None


@pytest.mark.nvcc
def test_a_dispatch_of_the_long_twin_and_its_cluster_twin_compiles(tmp_path):
    """Both share the logit helpers (_logits.cuh): in one file each expert's code keeps them in its own namespace."""
    import shutil

    from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, select
    from agent_core.apply import check_compiles, rewrite_dispatch
    rel, kernel = VOCAB[1]
    f = tmp_path / Path(rel).name
    shutil.copy(ROOT / "bench" / "corpus" / rel, f)
    prep = prepare(str(f), kernel, use_workspace_files=False)
    lib = {e.name: e for e in X.load_library()}
    long = X.long_twin(X.candidates(prep.cf, kernel, prep.spec, list(lib.values()))[0], lib)
    base, twin = X.bind(long, prep.cf, prep.spec), X.bind(X.cluster_twin(long, lib), prep.cf, prep.spec)
    bcfg, tcfg = base.space.original_config(), twin.space.original_config()
    n = len(prep.spec.sizes)
    d = Dispatch(rules=[Rule([Bound("num_rows", None, 45)], 1), Rule([], 0)],
                 entries=[Entry(base.template_hash, base.origin, bcfg), Entry(twin.template_hash, twin.origin, tcfg)],
                 winner=Entry(base.template_hash, base.origin, bcfg), sizes=prep.spec.sizes, serve=[],
                 original_us=[1.0] * n, tuned_us=[1.0] * n, single_original_us=[1.0] * n, single_us=[1.0] * n)
    d.serve = [select(d, s) for s in prep.spec.sizes]
    rw = rewrite_dispatch(prep.text, f, kernel, [(base, bcfg), (twin, tcfg)], d)
    assert rw.text.count("struct LogitScale {") == 2
    check_compiles(rw.text, f, host=True)


# ---- the division by a temperature (_logits.cuh's Div), emulated exactly: float32 rounding of exact rationals
def _rn32(v):
    """v (a Fraction) rounded to the nearest float32, ties to even (normal range), as a Fraction."""
    if v == 0:
        return F(0)
    sign, a = (-1 if v < 0 else 1), abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    e += 1 if F(2) ** (e + 1) <= a else (-1 if F(2) ** e > a else 0)
    q = a / F(2) ** (max(e, -126) - 23)
    n, rem = divmod(q.numerator, q.denominator)
    if 2 * rem > q.denominator or (2 * rem == q.denominator and n % 2):
        n += 1
    return sign * n * F(2) ** (max(e, -126) - 23)


def _f32(x: float):
    return F(float(np.float32(x)))


def _div_as_the_expert_does(x, d):
    """Div::operator() for |x| and |d| in [2^-60, 2^60]: q = x * r (r = 1/d rounded), then q + (x - q*d) * r by
    fma (one rounding each)."""
    r = _rn32(1 / d)
    q = _rn32(x * r)
    return _rn32(q + _rn32(x - q * d) * r)


_MAG = st.floats(min_value=2.0 ** -60, max_value=2.0 ** 60, width=32)


@settings(max_examples=400, deadline=None)
@given(x=_MAG, d=_MAG, neg=st.booleans())
def test_the_logit_division_by_a_reciprocal_and_one_correction_rounds_as_the_division(x, d, neg):
    """_logits.cuh divides a logit by a temperature (or a per-row divisor) with the reciprocal taken once and one
    fma correction (Markstein): the claim that this is the IEEE division's result wherever |x| and |d| lie in
    [2^-60, 2^60], checked in exact rational arithmetic."""
    x, d = _f32(-x if neg else x), _f32(d)
    assert _div_as_the_expert_does(x, d) == _rn32(x / d)


@settings(max_examples=200, deadline=None)
@given(x=st.integers(2 ** 23, 2 ** 24 - 1), k=st.integers(0, 63), ex=st.integers(-8, 8), ed=st.integers(-8, 8))
def test_the_logit_division_holds_at_divisors_whose_significand_is_all_ones(x, k, ex, ed):
    """The hard divisors for a reciprocal (significands near 2 - 2^-23) with any dividend significand."""
    xv = F(x, 2 ** 23) * F(2) ** ex
    dv = F(2 ** 24 - 1 - k, 2 ** 23) * F(2) ** ed
    assert _div_as_the_expert_does(xv, dv) == _rn32(xv / dv)
