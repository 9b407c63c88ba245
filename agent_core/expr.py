"""The small expression language of specs and parameter spaces.

Python syntax, C integer semantics: ``/`` between integers truncates toward zero (as in the CUDA host
code these expressions come from), ``//`` floors, ``%`` takes the sign of the dividend. Allowed: numbers,
names (sizes, parameters), ``+ - * / // % ** << >> & | ^ ~``, comparisons, ``and or not``,
``a if c else b``, and the functions below. Nothing else is evaluated: no attributes, no subscripts,
no other calls, so an edited spec or space file can never run code on the host.

Its cost is bounded too (the language server evaluates what the user types): an expression has at most
``MAX_LENGTH`` characters and ``MAX_DEPTH`` levels of nesting, every integer it computes (operands and
intermediate results) fits in ``MAX_INT_BITS`` bits and every float is finite. Anything over a bound is an
``ExprError`` that says which bound, found before the work is done (a power or shift is checked before it
is computed).
"""

from __future__ import annotations

import ast
import math
from functools import lru_cache
from typing import Callable, Mapping

from agent_core.model import KerntuneError


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _is_pow2(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


def _divides(a: int, b: int) -> bool:
    return a != 0 and b % a == 0


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def _log2(x: int) -> int:
    if not _is_pow2(x):
        raise ValueError(f"log2 of {x}, which is not a power of two")
    return x.bit_length() - 1


FUNCTIONS: dict[str, Callable] = {
    "cdiv": _cdiv,  # ceil(a / b)
    "round_up": _round_up,  # a rounded up to a multiple of b
    "min": min,
    "max": max,
    "is_pow2": _is_pow2,
    "divides": _divides,  # divides(a, b): a divides b
    "log2": _log2,
    "int": int,
    "abs": abs,
}

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift,
           ast.BitAnd, ast.BitOr, ast.BitXor)


class ExprError(KerntuneError):
    pass


MAX_LENGTH = 2000  # characters of one expression
MAX_DEPTH = 64  # nesting of operators, calls and parentheses
MAX_INT_BITS = 64  # |every integer| < 2**64 (the widest C type a spec names is 64 bits)


def _too_big(v) -> str | None:
    """What is wrong with an intermediate value, or None when it is within bounds."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        if v.bit_length() > MAX_INT_BITS:
            return f"an intermediate integer has {v.bit_length()} bits (at most {MAX_INT_BITS})"
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return f"an intermediate value is {v} (not a finite number)"
    return None


def _bounded(v):
    why = _too_big(v)
    if why:
        raise ExprError(f"value out of range: {why}")
    return v


def _depth(tree: ast.AST) -> int:
    """Nesting depth of an AST, iteratively (no recursion on hostile input)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH + 2:
            return deepest
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))
    return deepest


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    """Parse and check an expression; raise ExprError naming what is not allowed."""
    src = str(text).strip()
    if not src:
        raise ExprError("empty expression")
    if len(src) > MAX_LENGTH:
        raise ExprError(f"expression too long: {len(src)} characters (at most {MAX_LENGTH}): "
                        f"'{src[:40]}...'")
    if "\x00" in src:  # ast.parse raises ValueError (Python <= 3.11.3) or SyntaxError for it, by version
        raise ExprError(f"cannot parse expression {src!r}: it contains a NUL character")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression '{src}': {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression nested too deeply (at most {MAX_DEPTH} levels): '{src[:40]}...'") from None
    # the Expression node and the body's Load contexts add two levels that are not the user's nesting
    if _depth(tree) > MAX_DEPTH + 2:
        raise ExprError(f"expression nested too deeply (at most {MAX_DEPTH} levels): '{src[:40]}...'")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load, ast.Name, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp,
                             ast.UAdd, ast.USub, ast.Not, ast.Invert, ast.BinOp, ast.Compare, ast.IfExp,
                             ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)) or isinstance(node, _BINOPS):
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            continue
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                fn = ast.unparse(node.func)
                raise ExprError(f"'{src}': unknown function '{fn}' (allowed: {', '.join(FUNCTIONS)})")
            continue
        raise ExprError(f"'{src}': '{ast.unparse(node) if hasattr(node, 'lineno') else type(node).__name__}' "
                        "is not allowed in an expression")
    return tree


def names(text: str) -> set[str]:
    """Free names an expression refers to (function names excluded)."""
    tree = parse(text)
    func_nodes = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in func_nodes}


def evaluate(text: str | int | float, env: Mapping[str, int | float]):
    """Evaluate an expression over ``env``; raise ExprError for unknown names or arithmetic errors."""
    if isinstance(text, bool) or isinstance(text, (int, float)):
        why = _too_big(text)
        if why:
            raise ExprError(f"'{text}': value out of range: {why}")
        return text
    tree = parse(str(text))
    try:
        return _eval(tree.body, env)
    except ExprError as e:
        if e.message.startswith("value out of range"):
            raise ExprError(f"'{text}': {e.message}") from None
        raise
    except ZeroDivisionError:
        raise ExprError(f"'{text}': division by zero") from None
    except (ValueError, TypeError, OverflowError, ArithmeticError) as e:
        raise ExprError(f"'{text}': {e}") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"'{text}': too costly to evaluate") from None


def evaluate_int(text: str | int, env: Mapping[str, int | float]) -> int:
    v = evaluate(text, env)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"'{text}' = {v}, expected a whole number")
        return int(v)
    return v


def _c_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _c_mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b * _c_div(a, b)
    return math.fmod(a, b)


def _eval(node: ast.AST, env: Mapping[str, int | float]):
    """Evaluate one node; every value it yields is within the bounds (module docstring)."""
    return _bounded(_eval_node(node, env))


def _check_pow(a, b) -> None:
    """Refuse ``a ** b`` before computing it when the result would be out of bounds."""
    if isinstance(a, bool) or isinstance(b, bool):
        return
    if isinstance(a, int) and isinstance(b, int):
        if b < 0 or a in (-1, 0, 1):
            return
        if (abs(a).bit_length() - 1) * b >= MAX_INT_BITS:
            raise ExprError(f"value out of range: {a} ** {b} is too large (over {MAX_INT_BITS} bits)")
        return
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a != 0:
        try:
            mag = abs(b) * math.log2(abs(float(a)))
        except (OverflowError, ValueError):
            return
        if mag > 1100:
            raise ExprError(f"value out of range: {a} ** {b} is not a finite number")


def _eval_node(node: ast.AST, env: Mapping[str, int | float]):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            v = env[node.id]
            why = _too_big(v)
            if why:
                raise ExprError(f"value out of range: '{node.id}' = {v}: {why}")
            return v
        raise ExprError(f"unknown name '{node.id}' (known: {', '.join(sorted(env)) or 'none'})")
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return +v
        if isinstance(node.op, ast.Not):
            return not v
        return ~v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div):
            return _c_div(a, b)
        if isinstance(op, ast.FloorDiv):
            return a // b
        if isinstance(op, ast.Mod):
            return _c_mod(a, b)
        if isinstance(op, ast.Pow):
            _check_pow(a, b)
            return a ** b
        if isinstance(op, ast.LShift):
            if isinstance(b, int) and b > MAX_INT_BITS:
                raise ExprError(f"value out of range: shift by {b} is too large (at most {MAX_INT_BITS})")
            return a << b
        if isinstance(op, ast.RShift):
            return a >> b
        if isinstance(op, ast.BitAnd):
            return a & b
        if isinstance(op, ast.BitOr):
            return a | b
        return a ^ b
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            v = True
            for x in node.values:
                v = _eval(x, env)
                if not v:
                    return v
            return v
        v = False
        for x in node.values:
            v = _eval(x, env)
            if v:
                return v
        return v
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env)
            ok = {ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                  ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}[type(op)]
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        fn = FUNCTIONS[node.func.id]
        return fn(*[_eval(a, env) for a in node.args])
    raise ExprError(f"cannot evaluate '{ast.unparse(node)}'")
