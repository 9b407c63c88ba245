import pytest

from agent_core import expr
from agent_core.expr import ExprError


@pytest.mark.parametrize("text,env,want", [
    ("(n + threads - 1) / threads", {"n": 10, "threads": 4}, 3),
    ("-7 / 2", {}, -3),            # C truncation, not Python floor
    ("-7 % 2", {}, -1),            # sign of the dividend, as in C
    ("-7 // 2", {}, -4),           # explicit floor division stays Python's
    ("cdiv(n, BLOCK * VEC)", {"n": 1000, "BLOCK": 128, "VEC": 4}, 2),
    ("round_up(100, 32)", {}, 128),
    ("min(1024, max(32, x))", {"x": 7}, 32),
    ("1 << 20", {}, 1048576),
    ("a if a > b else b", {"a": 3, "b": 9}, 9),
    ("is_pow2(256) and not is_pow2(96)", {}, True),
    ("divides(VEC, hidden)", {"VEC": 8, "hidden": 4100}, False),
    ("log2(1024)", {}, 10),
    ("BLOCK % 32 == 0", {"BLOCK": 96}, True),
    ("1e-6", {}, 1e-6),
    ("2.0 / 4", {}, 0.5),
])
def test_evaluate(text, env, want):
    assert expr.evaluate(text, env) == want


def test_names_excludes_functions():
    assert expr.names("cdiv(n, BLOCK) + min(rows, 4)") == {"n", "BLOCK", "rows"}


@pytest.mark.parametrize("text,fragment", [
    ("__import__('os')", "unknown function"),
    ("x.real", "not allowed"),
    ("x[0]", "not allowed"),
    ("lambda: 1", "not allowed"),
    ("open('f')", "unknown function"),
    ("'abc'", "not allowed"),
    ("1 +", "cannot parse"),
    ("", "empty"),
])
def test_rejects_anything_but_arithmetic(text, fragment):
    with pytest.raises(ExprError, match=fragment):
        expr.evaluate(text, {"x": 1})


def test_errors_name_the_problem():
    with pytest.raises(ExprError, match="unknown name 'rows'"):
        expr.evaluate("rows * 2", {"cols": 3})
    with pytest.raises(ExprError, match="division by zero"):
        expr.evaluate("n / 0", {"n": 1})
    with pytest.raises(ExprError, match="whole number"):
        expr.evaluate_int("n / 2.0", {"n": 3})
    with pytest.raises(ExprError, match="not a power of two"):
        expr.evaluate("log2(96)", {})
    with pytest.raises(ExprError, match="too large"):
        expr.evaluate("2 ** 1000", {})
