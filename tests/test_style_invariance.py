"""Expert matching survives changes of style that keep what a kernel computes (tests/style_mutations.py): a corpus
variant or bench kernel rewritten with neutral names, in a namespace, with its constants spelled another way, other
qualifiers, index types, parameter order or index helpers still parses, still has its spec, and still gets the
same families of candidates and (stronger, listed apart) the same number of candidate bindings.

CI samples the (mutation, kernel) matrix (each mutation on a rotating few kernels) and draws a bounded,
derandomized set of compositions with Hypothesis; ``python -m tests.style_mutations`` prints the whole matrix. A
pair that breaks is listed below with why (strict xfail: fixing it forces its removal)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import style_mutations as SM
from tests.nvcc_check import CHECK_FLAGS

CASES = SM.cases()

# (mutation, case path) -> why: the family set of the candidates changes (style mutations)
KNOWN_STYLE_GAPS: dict[tuple[str, str], str] = {}
# (mutation, case path) -> why: same families, another number of candidate bindings
KNOWN_COUNT_CHANGES: dict[tuple[str, str], str] = {
    ("for_to_while", "bench/corpus/softmax/softmax_onnx_axis_left_axis_right_split_invocation_per_left_right_index_"
                     "serial_max_sum_output_loops_workgroup_of_1_below_65535_groups_log0_neg_inf_out_of_place_f32_"
                     "wonnx.cu"):
        "the channel softmax reads the walk over the channels from a `for` header (softmax_channels._LOOP): its loops "
        "written as `while` loops keep the row bindings (15) and lose the two channel ones and a strided-rows one",
}
# (numerics mutation, case path) -> why: the family set changes once the math intrinsics are swapped (not
# semantics-preserving: the expert must bind with the matching convention, or not at all)
KNOWN_NUMERICS_GAPS: dict[tuple[str, str], str] = {}

_STRIDE = 23  # each mutation runs on the kernels whose index is its own index modulo this: ~5 kernels each


def _sample(mutations) -> list[tuple[str, str, str]]:
    out = []
    for i, m in enumerate(mutations):
        out += [(m.name, rel, k) for j, (rel, k) in enumerate(CASES) if j % _STRIDE == i % _STRIDE]
    return out


def _params(mutations, gaps: dict) -> list:
    pairs = _sample(mutations)
    seen = {(m, rel) for m, rel, _ in pairs}
    kernels = dict(CASES)
    pairs += [(m, rel, kernels[rel]) for (m, rel) in gaps if (m, rel) not in seen and rel in kernels
              and m in {x.name for x in mutations}]
    return [pytest.param(m, rel, k, id=f"{m}-{rel.removeprefix('bench/').removeprefix('corpus/')}",
                         marks=[pytest.mark.xfail(reason=gaps[(m, rel)], strict=True)] if (m, rel) in gaps else [])
            for m, rel, k in pairs]


@functools.lru_cache(maxsize=None)
def _base(rel: str, kernel: str):
    return SM.matching(SM.read(rel, kernel), rel)


@functools.lru_cache(maxsize=None)
def _mutated(name: str, rel: str, kernel: str):
    out = SM.apply(name, SM.read(rel, kernel))
    if out is None:
        return None, None
    return out, SM.matching(out, rel)


def _check_families(name, rel, kernel):
    out, got = _mutated(name, rel, kernel)
    if out is None:
        pytest.skip(f"{name} does not apply to {rel}")
    assert got is not None, f"{name} on {rel}: the kernel no longer parses cleanly or its spec is not found"
    base = _base(rel, kernel)
    assert got[0] == base[0], (name, rel, sorted(base[0]), sorted(got[0]))


@pytest.mark.parametrize("name,rel,kernel", _params(SM.STYLE, KNOWN_STYLE_GAPS))
def test_style_mutation_keeps_the_families(name, rel, kernel):
    _check_families(name, rel, kernel)


@pytest.mark.parametrize("name,rel,kernel", _params(SM.STYLE, KNOWN_COUNT_CHANGES))
def test_style_mutation_keeps_the_number_of_bindings(name, rel, kernel):
    if (name, rel) in KNOWN_STYLE_GAPS:
        pytest.skip("listed in KNOWN_STYLE_GAPS")
    out, got = _mutated(name, rel, kernel)
    if out is None:
        pytest.skip(f"{name} does not apply to {rel}")
    assert got is not None and got[1] == _base(rel, kernel)[1], (name, rel, _base(rel, kernel), got)


@pytest.mark.parametrize("name,rel,kernel", _params(SM.NUMERICS, KNOWN_NUMERICS_GAPS))
def test_numerics_mutation_keeps_the_families(name, rel, kernel):
    """Reported apart: expf <-> __expf and rsqrtf <-> 1 / sqrtf change rounding; a family that binds the original
    should bind the rewritten kernel with the matching convention."""
    _check_families(name, rel, kernel)


def test_every_listed_gap_is_a_pair_the_harness_knows():
    kernels = dict(CASES)
    for (m, rel) in [*KNOWN_STYLE_GAPS, *KNOWN_COUNT_CHANGES, *KNOWN_NUMERICS_GAPS]:
        assert m in SM.MUTATIONS and rel in kernels, (m, rel)


_STYLE_NAMES = [m.name for m in SM.STYLE]


@settings(max_examples=30, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), names=st.lists(st.sampled_from(_STYLE_NAMES), min_size=2, max_size=4,
                                                   unique=True))
def test_compositions_of_style_mutations_keep_the_families(case, names):
    rel, kernel = case
    src, applied = SM.read(rel, kernel), []
    for n in names:
        out = SM.apply(n, src)
        if out is not None:
            src, applied = out, applied + [n]
    got = SM.matching(src, rel)
    assert got is not None, (rel, applied, "no longer parses cleanly or its spec is not found")
    if any((n, rel) in KNOWN_STYLE_GAPS for n in applied):
        return
    assert got[0] == _base(rel, kernel)[0], (rel, applied, sorted(_base(rel, kernel)[0]), sorted(got[0]))


# ------------------------------------------------------------------------------------------------ nvcc
# one kernel of each family, each rewritten by every style mutation that applies, in turn: one compile each
_COMPILE_CASES = [next(c for c in CASES if f"/{fam}/" in c[0]) for fam in SM.CORPUS_EXPERT] + \
                 [c for c in CASES if c[0] == "bench/rotary_neox.cu"]


@pytest.mark.nvcc
@pytest.mark.parametrize("rel,kernel", _COMPILE_CASES, ids=lambda x: os.path.basename(x))
def test_mutated_files_compile(rel, kernel, tmp_path):
    """Every style mutation that applies, composed, on one kernel per family: still valid CUDA C++ for sm_90."""
    src, applied = SM.read(rel, kernel), []
    for m in SM.STYLE:
        out = m.fn(src)
        if out is not None:
            src, applied = out, applied + [m.name]
    path = tmp_path / os.path.basename(rel)
    path.write_text(src.text)
    r = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", *CHECK_FLAGS, "-std=c++17", "-c", str(path), "-o",
                        str(tmp_path / "k.o")], capture_output=True, text=True)
    assert r.returncode == 0, (applied, r.stderr[-3000:])
