"""The integer constants a .cu file names at file scope: object-like ``#define``s whose body is an integer
expression (``#define ACT_GELU 1``, ``#define THREADS (4 * 32)``), enumerators (``enum DataType { FP4, NF4 = 2 }``,
``enum class Act : int { SILU, GELU }`` as ``Act::GELU`` and ``GELU``) and integer constants outside functions
(``constexpr int kGelu = 7;`` in ``namespace ffn`` as ``ffn::kGelu`` and ``kGelu``), each as its value.

A templated kernel's instantiation is named by values (``act_kernel<1>``, ``kQuantize<__half, 256, 2>``) where the
spec and the host code name it by these constants (``<ACT_GELU>``, ``<half, 256, NF4>``): the compiler's choice of
the entry to tune (``measure.compiler``) reads the spec's template arguments through them. Text only: no header is
read, a constant defined there stays a name."""

from __future__ import annotations

import functools
import re

from agent_core import expr
from agent_core.source.macros import scan_defines

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENUM = re.compile(r"\benum\s+(?:(?:class|struct)\s+)?(?:(\w+)\s*)?(?::\s*[\w\s:]+?)?\{([^{}]*)\}", re.S)
_ENUMERATOR = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*$", re.S)
_INT_SUFFIX = re.compile(r"(?<=\d)[uUlL]+\b")
_CONST = re.compile(r"\b(?:static\s+)?(?:constexpr|const)\s+(?:static\s+)?(?:(?:unsigned|signed|long|short)\s+)*"
                    r"(?:int|char|long|short|unsigned|size_t|u?int(?:8|16|32|64)_t|bool)?\s*([A-Za-z_]\w*)\s*=\s*"
                    r"([^;{}]+);")
_NAMESPACE = re.compile(r"\bnamespace\s+([A-Za-z_][\w:]*)?\s*\{")


def _scopes(text: str) -> list[tuple[int, str]]:
    """(offset, the namespace path there, "" at file scope or None inside anything else) at each brace."""
    out, stack = [(0, "")], []
    opens = {m.end() - 1: m.group(1) or "" for m in _NAMESPACE.finditer(text)}
    for i, c in enumerate(text):
        if c == "{":
            stack.append(opens.get(i))  # a namespace's name ("" anonymous), else None: a function, a class, ...
        elif c == "}" and stack:
            stack.pop()
        else:
            continue
        path = None if None in stack else "::".join(n for n in stack if n)
        out.append((i, path))
    return out


def _value(text: str, env: dict[str, int]) -> int | None:
    if text.strip() in env:  # also a scoped enumerator (Act::GELU), which no expression parser reads
        return env[text.strip()]
    try:
        return expr.evaluate_int(_INT_SUFFIX.sub("", text.strip()), env)
    except Exception:  # noqa: BLE001 - not an integer expression of known constants
        return None


def int_constants(text: str) -> dict[str, int]:
    """Name -> value of the file's integer macros, enumerators and constants (a macro naming another is resolved
    through it, in any order; an enumerator without ``=`` is one more than the one before it, the first 0)."""
    return dict(_int_constants(text))


@functools.lru_cache(maxsize=32)
def _macro_constants(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    pending = {m.name: m.body for m in scan_defines(text.encode()) if m.params is None and m.body}
    while pending:  # a macro may name one defined after it
        done = {n: v for n, b in pending.items() if (v := _value(b, out)) is not None}
        if not done:
            break
        out.update(done)
        pending = {n: b for n, b in pending.items() if n not in done}
    return out


@functools.lru_cache(maxsize=32)
def _int_constants(text: str) -> dict[str, int]:
    out = dict(_macro_constants(text))
    clean = _COMMENT.sub(lambda m: " " * len(m.group(0)), text)
    scopes = _scopes(clean)
    for m in _CONST.finditer(clean):
        path = next((p for at, p in reversed(scopes) if at < m.start()), "")
        v = _value(m.group(2), out) if path is not None else None  # a function's local is not the file's
        if v is not None:
            out.setdefault(m.group(1), v)
            if path:
                out[f"{path}::{m.group(1)}"] = v
    for m in _ENUM.finditer(clean):
        scope, nxt = m.group(1), 0
        path = next((p for at, p in reversed(scopes) if at < m.start()), "")  # the namespaces around the enum
        for item in m.group(2).split(","):
            e = _ENUMERATOR.match(item)
            if e is None:
                continue
            v = nxt if e.group(2) is None else _value(e.group(2), out)
            if v is None:
                break  # its value is not known here: neither are the ones after it
            out[e.group(1)] = v
            if scope:
                out[f"{scope}::{e.group(1)}"] = v
            if path:  # qualified by its namespaces too (st::kernel::ActivationType::SILU)
                out[f"{path}::{f'{scope}::' if scope else ''}{e.group(1)}"] = v
            nxt = v + 1
    return out


_USING = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([^;{}()=]+?)\s*;")
_TYPEDEF = re.compile(r"\btypedef\s+([^;{}()]+?)\s+([A-Za-z_]\w*)\s*;")


def type_aliases(text: str) -> dict[str, str]:
    """The file's type aliases written once (``using fp32_4 = float4;``, ``typedef __half half_t;``): name -> the
    type it stands for, followed through aliases of aliases; a name written twice (two scopes) is left out."""
    code = _COMMENT.sub(" ", text)
    found: dict[str, list[str]] = {}
    for m in _USING.finditer(code):
        found.setdefault(m.group(1), []).append(" ".join(m.group(2).split()))
    for m in _TYPEDEF.finditer(code):
        found.setdefault(m.group(2), []).append(" ".join(m.group(1).split()))
    out = {n: v[0] for n, v in found.items() if len(set(v)) == 1}
    for n in list(out):
        for _ in range(8):
            if out[n] not in out or out[n] == n:
                break
            out[n] = out[out[n]]
    return out


def valued(args: list[str] | None, text: str, macros_only: bool = False) -> list[str] | None:
    """``args`` (template arguments as C++ text) with each one that names the file's integer constants written as
    its value and each one that names a type alias of the file (qualified by its namespace or not) as the type it
    stands for (the compiled symbol's spelling); the others (types, literals, what the file does not define) as they are. ``macros_only``: only the
    ones that name macros, for C++ that sees the file's other names (an NVRTC name expression: an enumerator stays
    a name there, as a template parameter of its enum type needs)."""
    if not args or not any(re.search(r"[A-Za-z_]", a) for a in args):
        return args
    if not macros_only:
        aliases = type_aliases(text)
        # a qualified name (`ck_tile::half_t`) is the alias its last name is: aliases are names written once
        args = [aliases.get(a.strip(), aliases.get(a.strip().rsplit("::", 1)[-1], a)) for a in args]
    if macros_only:
        consts = dict(_macro_constants(text))
        if not any(re.search(r"[A-Za-z_]\w*", a) and set(re.findall(r"[A-Za-z_]\w*", a)) & set(consts)
                   for a in args):
            return args
    else:
        consts = int_constants(text)
    out = []
    for a in args:
        v = _value(a, consts) if re.search(r"[A-Za-z_]", a) and a.strip() not in ("true", "false") else None
        out.append(str(v) if v is not None else a)
    return out
