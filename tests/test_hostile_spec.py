"""Hostile and careless specs (issue #15): every field is checked for meaning, every expression is evaluated
for every size set at validation, and whatever the spec says, validation answers quickly with a KerntuneError
naming the field, never a traceback."""

import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_core.model import KerntuneError
from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda

from test_spec import row_kernel, row_sum_spec

ORIG = {"BLOCK": 128}


def _check(**over):
    S.validate_spec(row_sum_spec(**over), row_kernel(), {"BLOCK"}, ORIG)


@pytest.mark.parametrize("over,field,fragment", [
    ({"rtol": float("nan")}, "rtol", "finite"),
    ({"atol": float("inf")}, "atol", "finite"),
    ({"args": ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols * 1000000"]}, "args[2]",
     "does not fit its type i32"),
    ({"args": ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = -cols - 2147483647"]}, "args[2]",
     "does not fit"),
    ({"args": ["x: in f32[rows * cols * 1000000]", "out: out f32[rows]", "cols: i32 = cols"]}, "args[0]",
     "at most 34359738368 bytes"),
    ({"args": ["x: in f64[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]}, "args[0]",
     "8-byte elements but const float"),
    ({"args": ["x: in i32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]}, "args[0]",
     "integer elements but const float"),
    ({"args": ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: f32 = cols"]}, "args[2]",
     "floating-point elements but int"),
    ({"block": "0"}, "block", "between 1 and 1024"),
    ({"block": "2048"}, "block", "between 1 and 1024"),
    ({"block": ["BLOCK", "BLOCK"]}, "block", "16384 threads"),
    ({"block": ["32", "1", "128"]}, "block", "between 1 and 64"),
    ({"grid": "rows - 10000"}, "grid", "between 1 and"),
    ({"grid": "rows / (cols - cols)"}, "grid", "division by zero"),
    ({"block": "BLOCK % (rows - 1000)"}, "block", "division by zero"),
    ({"smem": "-4"}, "smem", "between 0 and"),
    ({"smem": "cols / (rows - 1000)"}, "smem", "division by zero"),
    ({"grid": "9 ** 9 ** 9"}, "grid", "too large"),
])
def test_bad_values_are_named_errors(over, field, fragment):
    with pytest.raises(KerntuneError, match=fragment) as ei:
        _check(**over)
    assert ei.value.field_name == field
    assert ei.value.line is not None


def test_launch_checked_at_the_original_configuration():
    _check()  # the original spec is fine
    with pytest.raises(KerntuneError, match="2048 threads"):
        S.validate_spec(row_sum_spec(block=["BLOCK", "16"]), row_kernel(), {"BLOCK"}, ORIG)
    # a parameter the caller gives no value for is checked for its name only
    S.validate_spec(row_sum_spec(block=["BLOCK", "16"]), row_kernel(), {"BLOCK"})


def test_half_bits_as_u16_are_allowed():
    from test_spec import hand_file
    text = "__global__ void k(const __half* x, __half* y, int n) { }\n"
    cf = hand_file(text, "k", [("x", "const __half*", True, True), ("y", "__half*", True, False),
                               ("n", "int", False, False)])
    spec = S.parse_spec({"args": ["x: in u16[n]", "y: out f16[n]", "n: i32 = n"], "sizes": [{"n": 7}, {"n": 9}],
                         "grid": "1", "block": "32"}, "k", "test", "f.cu", 0)
    S.validate_spec(spec, cf.kernels[0])


def test_deeply_nested_toml_is_a_clean_error(tmp_path):
    body = "args = " + "[" * 5000 + "]" * 5000
    text = f"/* kerntune:\n{body}\n*/\n__global__ void k(float* x) {{ }}\n"
    cf = parse_cuda(text, str(tmp_path / "k.cu"))
    with pytest.raises(KerntuneError, match="nested too deeply|not valid TOML"):
        S.find_spec(cf, "k")


_values = st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True), st.booleans(),
                    st.text(max_size=40), st.sampled_from(["rows", "BLOCK", "cdiv(rows, BLOCK)", "rows / 0",
                                                          "9**9**9", "rows * cols * 1e30", "-1"]))
_exprs = st.one_of(st.sampled_from(["rows", "BLOCK", "cols - 4096", "0", "rows * cols", "1 / 0", "2**40"]),
                   st.integers(-2 ** 40, 2 ** 40), st.text(max_size=30))
_arg = st.one_of(
    st.tuples(st.sampled_from(["x", "out", "cols", "y"]), st.sampled_from(["in", "out", "inout"]),
              st.sampled_from(list(S.DTYPES) + ["f128", "float"]), _exprs)
      .map(lambda t: f"{t[0]}: {t[1]} {t[2]}[{t[3]}]"),
    st.tuples(st.sampled_from(["x", "out", "cols"]), st.sampled_from(["i32", "f32", "u8", "i64"]), _exprs)
      .map(lambda t: f"{t[0]}: {t[1]} = {t[2]}"),
    st.text(max_size=30))
_specs = st.fixed_dictionaries(
    {"args": st.lists(_arg, max_size=4),
     "sizes": st.lists(st.dictionaries(st.sampled_from(["rows", "cols", "BLOCK", "1x"]),
                                       st.one_of(st.integers(-2 ** 65, 2 ** 65), st.floats(), st.text(max_size=5)),
                                       max_size=3), max_size=3),
     "grid": st.one_of(_exprs, st.lists(_exprs, max_size=4)),
     "block": st.one_of(_exprs, st.lists(_exprs, max_size=4))},
    optional={"smem": _values, "bytes": _values, "rtol": _values, "atol": _values, "flops": _values})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_specs)
def test_fuzzed_specs_validate_or_name_the_problem(data):
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        spec = S.parse_spec(data, "row_sum", "test", "f.cu", 3)
        S.validate_spec(spec, row_kernel(), {"BLOCK"}, ORIG)
    except KerntuneError as e:
        assert e.message
    else:  # what passes is usable: every launch, count and scalar evaluates within CUDA's limits
        for sz in spec.sizes:
            launch = S.launch(spec, sz, ORIG)
            assert 1 <= launch.block[0] * launch.block[1] * launch.block[2] <= 1024
            assert all(g >= 1 for g in launch.grid) and launch.smem >= 0
            assert sum(S.buffer_elems(spec, sz).values()) > 0
            S.scalar_values(spec, sz)
        for tol in (spec.rtol, spec.atol):
            assert tol is None or tol == tol
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0
    assert peak < 8 * 2 ** 20, f"{peak} bytes"


_size_vals = st.integers(-2 ** 40, 2 ** 40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({"rows": _size_vals, "cols": _size_vals}), min_size=2, max_size=3),
       _exprs, st.one_of(_exprs, st.lists(_exprs, min_size=1, max_size=3)), _exprs, _exprs,
       st.sampled_from(["i32", "u32", "i64", "f32", "u8"]))
def test_fuzzed_values_of_a_well_formed_spec(sizes, grid, block, count, scalar, sdtype):
    """The skeleton of a valid spec with hostile values: whatever passes is launchable within CUDA's limits."""
    data = {"args": [f"x: in f32[{count}]", "out: out f32[rows]", f"cols: {sdtype} = {scalar}"], "sizes": sizes,
            "grid": grid, "block": block}
    test_fuzzed_specs_validate_or_name_the_problem.hypothesis.inner_test(data)
