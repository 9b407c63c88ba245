"""Function-like (and object-like) macros of a .cu file that hold a kernel launch, expanded at their use sites.

Serving code bases write a kernel's launches inside macros (FasterTransformer's and TensorRT-LLM's
``#define LAUNCH_MASKED_SOFTMAX(ITEMS) softmax_kernel<T, ITEMS><<<grid, block, 0, stream>>>(...)`` used as
``if (...) { LAUNCH_MASKED_SOFTMAX(4) } else ...``, vLLM's ``#define LAUNCH_KERNEL(width) ...``). tree-sitter
keeps a macro's body as raw text, so the launch is not in the tree. This module finds the macros whose expansion
holds ``<<<`` (directly or through another such macro), and expands one use of such a macro the way the C
preprocessor does for these few macros (arguments split at top-level commas, parameters replaced by the fully
expanded arguments, ``#`` stringizing, ``##`` pasting, ``__VA_ARGS__``, the result rescanned for the same
macros; a macro is not expanded inside its own expansion). Other macros (constants, ``FINAL_MASK``) are left as
written, so the launch reads in the names the host code uses. Only the file's own ``#define``s are known: no
header is read, no include is needed.

The expansion is text: the launch it holds is read by parsing it (``cuda_parse``), and is reported at the macro's
use (its line, for the editor); it cannot be edited in place (its text is the macro's, shared by every use).
"""

from __future__ import annotations

import dataclasses
import re

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<paste>\#\#)
  | (?P<hash>\#)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<other>.)
""", re.X | re.S)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_MAX_DEPTH = 16


@dataclasses.dataclass
class Macro:
    name: str
    params: list[str] | None  # None: object-like; a variadic macro's last parameter is "..." (or "name...")
    body: str  # continuations joined, comments blanked
    start: int  # byte offset of the `#define`
    end: int

    @property
    def variadic(self) -> bool:
        return bool(self.params) and self.params[-1].endswith("...")


def clean_body(raw: str) -> str:
    """A macro body as the preprocessor sees it: line continuations joined, comments replaced by a space."""
    body = re.sub(r"\\\r?\n", " ", raw)
    return _COMMENT.sub(" ", body).strip()


def _tokens(text: str) -> list[tuple[str, str]]:
    return [(m.lastgroup, m.group(0)) for m in _TOKEN.finditer(text)]


def launching(macros: list[Macro], what: str = "<<<") -> set[str]:
    """The names of the macros whose expansion holds a kernel launch (``<<<``), directly or through another
    (``what="__global__"``: those that define a kernel)."""
    if what != "<<<":  # function-like macros whose body is a kernel's definition (not `#define KERNEL __global__`)
        macros = [m for m in macros if m.params is not None]
    names = {m.name for m in macros if (what in m.body if what == "<<<" else what in m.body.split() and "{" in m.body)}
    while True:
        more = {m.name for m in macros if m.name not in names
                and any(k == "id" and t in names for k, t in _tokens(m.body))}
        if not more:
            return names
        names |= more


def split_args(text: str) -> list[str] | None:
    """The arguments of a macro use, ``text`` being what stands between its parentheses: split at the commas
    outside parentheses (the preprocessor knows no other brackets), each stripped. None when unbalanced."""
    out, depth, cur = [], 0, []
    for kind, t in _tokens(text):
        if kind == "other" and t in "([":
            depth += 1
        elif kind == "other" and t in ")]":
            depth -= 1
            if depth < 0:
                return None
        if kind == "other" and t == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(t)
    if depth:
        return None
    out.append("".join(cur).strip())
    return out


# What is not code where a macro could be used: comments, string and character literals, preprocessor lines
# (with their continuations: a macro's own body, `#undef`, `#if`).
_NOT_CODE = re.compile(rb"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*\#(?:\\\r?\n|[^\n])*""",
                       re.S | re.M)


def uses(data: bytes, names: set[str]) -> list[tuple[str, int, int, str | None]]:
    """Each use of a macro of ``names`` in the code of ``data`` (UTF-8 bytes), in order: (name, start byte, end
    byte, the text between its parentheses; None where the name is not followed by a parenthesis). Read from the
    text, not the tree: tree-sitter reads ``LAUNCH(float, 4)`` (a type among the arguments) or a use without its
    ``;`` as broken syntax of many shapes."""
    if not names:
        return []
    masked = bytearray(data)
    for m in _NOT_CODE.finditer(data):
        for i in range(m.start(), m.end()):
            if masked[i] != 0x0A:
                masked[i] = 0x20
    code = bytes(masked)
    out = []
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
    for m in pattern.finditer(code):
        j = m.end()
        while j < len(code) and code[j] in b" \t\r\n":
            j += 1
        if j >= len(code) or code[j] != 0x28:  # (
            out.append((m.group(1).decode(), m.start(), m.end(), None))
            continue
        depth, e = 0, j
        while e < len(code):
            depth += code[e] == 0x28
            depth -= code[e] == 0x29
            if depth == 0:
                break
            e += 1
        if depth:
            continue
        out.append((m.group(1).decode(), m.start(), e + 1, data[j + 1:e].decode("utf-8", errors="replace")))
    return out


_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)\n]*\))?((?:\\\r?\n|[^\n])*)", re.M)


def scan_defines(data: bytes) -> list[Macro]:
    """The file's ``#define``s read from the text (before any parse), bodies cleaned (``clean_body``)."""
    out = []
    for m in _DEFINE.finditer(data):
        params = None
        if m.group(2) is not None:
            params = [p.strip() for p in m.group(2)[1:-1].decode("utf-8", "replace").split(",") if p.strip()]
        out.append(Macro(m.group(1).decode(), params, clean_body(m.group(3).decode("utf-8", "replace")),
                         m.start(), m.end()))
    return out


def mask_launch_macro_uses(source: bytes) -> bytes:
    """``source`` with each use of a macro of the file whose expansion holds a kernel launch blanked (spaces,
    newlines kept; a ``;`` first where none follows), for the parse only: ``{ LAUNCH(4) }`` or ``LAUNCH(float, 4);``
    is valid code the grammar cannot read (a type among the arguments, no ``;``), and its error recovery swallows
    the code around. The uses are read from the text (``cuda_parse``'s macro launches); every byte offset stays
    that of ``source``."""
    if (b"<<<" not in source and b"__global__" not in source) or b"define" not in source:
        return source
    defs = scan_defines(source)
    names = launching(defs)
    defining = launching(defs, "__global__") - names if b"__global__" in source else set()
    found = uses(source, names | defining)
    if not found:
        return source
    out = bytearray(source)
    for name, start, end, args in found:
        for i in range(start, end):
            if out[i] != 0x0A:
                out[i] = 0x20
        rest = source[end:end + 64].lstrip()
        if name in names and not rest.startswith((b";", b")", b",")):
            out[start] = 0x3B  # ;
    return bytes(out)



# The qualifiers a function's declaration may start with, in the order a use of a macro standing for some of them
# writes them where it is too short for all (``__device__`` first: what tells a helper of the device code).
QUALIFIERS = ("__device__", "__forceinline__", "__host__", "__noinline__", "__inline__", "inline", "static",
              "constexpr")


def qualifier_macros(data: bytes) -> dict[str, list[str]]:
    """The object-like macros of the file whose body is only function qualifiers (``QUALIFIERS``) or such macros:
    PaddleNLP's ``#define HOSTDEVICE __host__ __device__``, vLLM's ``#define DINLINE __device__ __forceinline__``;
    name → the qualifiers it stands for (of every definition of the name, one under ``#ifdef __CUDACC__`` and an
    empty one for the host compiler alike). ``__global__`` is no such qualifier: a macro standing for it defines
    kernels (``cuda_parse``'s ``macro_globals``). A name one of whose definitions is anything else is left out, and
    so is one that stands for no qualifier at all."""
    if b"define" not in data:
        return {}
    defs = [m for m in scan_defines(data) if m.params is None]
    bodies: dict[str, list[list[str]]] = {}
    for m in defs:
        bodies.setdefault(m.name, []).append(m.body.split())
    known: dict[str, list[str]] = {}
    bad: set[str] = set()
    changed = True
    while changed:  # a macro whose body names another such macro (``#define HDI HOSTDEVICE inline``)
        changed = False
        for name, forms in bodies.items():
            if name in known or name in bad:
                continue
            quals: list[str] = []
            state = "ok"
            for t in (t for toks in forms for t in toks):
                if t in QUALIFIERS:
                    quals.append(t)
                elif t in known:
                    quals += known[t]
                elif t in bodies and t not in bad and t != name:
                    state = "wait" if state == "ok" else state  # a macro not read yet: the next round
                else:
                    state = "bad"
            if state == "wait":
                continue
            if state == "bad" or not quals:
                bad.add(name)
            else:
                known[name] = list(dict.fromkeys(quals))
                changed = True
    return known


def mask_qualifier_macros(source: bytes) -> bytes:
    """``source`` with each use of a function-qualifier macro of the file (``qualifier_macros``) written as the
    qualifiers it stands for, for the parse only: tree-sitter reads ``HOSTDEVICE inline T div_up(T a, T b)`` as a
    type ``HOSTDEVICE`` followed by broken syntax. Every byte offset stays that of ``source``, so a use is written
    in its own width: as many of its qualifiers as fit, in ``QUALIFIERS``' order (``HOSTDEVICE``: ``__device__``),
    the rest blanked (consumers that read a head from the text itself expand the macros: ``device_head``)."""
    macros = qualifier_macros(source)
    if not macros:
        return source
    found = uses(source, set(macros))
    if not found:
        return source
    out = bytearray(source)
    for name, start, _, _ in found:
        width, words = len(name), []
        for q in QUALIFIERS:
            if q in macros[name] and sum(len(w) + 1 for w in words) + len(q) <= width:
                words.append(q)
        out[start:start + width] = " ".join(words).ljust(width).encode()
    return bytes(out)


# a macro that stands for a kernel attribute the grammar reads only where it is written out (DSSTNE's
# `#define LAUNCH_BOUNDS() __launch_bounds__(128, 8)` used as `__global__ void LAUNCH_BOUNDS() kName(...)`)
_ATTRIBUTE_BODY = re.compile(r"^(__launch_bounds__|__cluster_dims__|__maxnreg__)\s*\(.*\)$", re.S)


def mask_attribute_macros(source: bytes) -> bytes:
    """``source`` with each use of a macro of the file that stands for a kernel attribute (``__launch_bounds__(...)``,
    ``__cluster_dims__(...)``, ``__maxnreg__(...)``; object-like or with parameters) blanked, arguments included, for
    the parse only: tree-sitter reads ``__global__ void LAUNCH_BOUNDS() kName(...)`` as broken syntax and finds no
    kernel. Every byte offset stays that of ``source``; the compiled text keeps the use."""
    if b"define" not in source or b"__" not in source:
        return source
    names = {m.name for m in scan_defines(source) if _ATTRIBUTE_BODY.match(m.body.strip())}
    if not names:
        return source
    found = uses(source, names)
    if not found:
        return source
    out = bytearray(source)
    for _, start, end, _ in found:
        for i in range(start, end):
            if out[i] != 0x0A:
                out[i] = 0x20
    return bytes(out)


def launch_bounds_macros(data: bytes) -> dict[str, Macro]:
    """The file's macros that stand for a ``__launch_bounds__(...)``, by name (read once per file)."""
    if b"define" not in data or b"__launch_bounds__" not in data:
        return {}
    return {m.name: m for m in scan_defines(data)
            if (g := _ATTRIBUTE_BODY.match(m.body.strip())) and g.group(1) == "__launch_bounds__"}


def macro_launch_bounds(defs: dict[str, Macro], head: str) -> list[str]:
    """The arguments of the ``__launch_bounds__`` a kernel's ``head`` (its text before the body) writes through one of
    the file's macros ``defs`` (``launch_bounds_macros``: ``LAUNCH_BOUNDS()`` for ``#define LAUNCH_BOUNDS()
    __launch_bounds__(128, 8)``: ["128", "8"]; ``LB(256)`` for ``#define LB(n) __launch_bounds__(n)``: ["256"]);
    empty where the head uses none."""
    if not defs:
        return []
    for name, _, _, inner in uses(head.encode("utf-8"), set(defs)):
        m = defs[name]
        body = m.body.strip()
        if m.params:
            args = [a.strip() for a in (inner or "").split(",")]
            for prm, arg in zip(m.params, args):
                body = re.sub(rf"\b{re.escape(prm)}\b", arg, body)
        inner_lb = body[body.index("(") + 1:body.rindex(")")]
        return [a.strip() for a in inner_lb.split(",") if a.strip()]
    return []


def function_head(src: bytes, start: int, body: int, macros: dict[str, list[str]]) -> bytes:
    """The head of the function whose node spans ``start`` to its body at ``body`` in ``src``, with the uses of
    qualifier macros just before it (``HD float f(...)``: a use too short to hold a qualifier is blank in the parsed
    text, so the function's node starts after it)."""
    i = start
    while macros:
        j = i
        while j > 0 and src[j - 1:j] in (b" ", b"\t", b"\r", b"\n"):
            j -= 1
        m = re.search(rb"(?<![\w.])([A-Za-z_]\w*)$", src[max(0, j - 64):j])
        if m is None or m.group(1).decode() not in macros:
            break
        i = j - len(m.group(1))
    return src[i:body]


def device_head(head: bytes, macros: dict[str, list[str]]) -> bool:
    """Whether a function's head (its text before the body) declares device code: ``__device__`` written, or a
    qualifier macro of the file (``qualifier_macros``) that stands for it; not a ``__global__`` kernel."""
    if b"__global__" in head:
        return False
    if b"__device__" in head:
        return True
    return any(q == "__device__" for w in re.findall(rb"[A-Za-z_]\w*", head)
               for q in macros.get(w.decode(), ()))

_GLOBAL_NAME = re.compile(r"\b__global__\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\(")


def macro_kernels(data: bytes) -> list[tuple[str, str, int, int]]:
    """The ``__global__`` functions the uses of the file's macros define (candle's ``ROPE_OP(float, rope_f32)``):
    (kernel name, macro, use start byte, use end byte), in order."""
    if b"__global__" not in data or b"define" not in data:
        return []
    defs = scan_defines(data)
    names = launching(defs, "__global__")
    if not names:
        return []
    ex = Expander(defs, names)
    out = []
    for name, start, end, args in uses(data, names):
        m = ex.macro_at(name, start)
        if m is None or (m.params is None) != (args is None):
            continue
        text = ex.expand_use(m, args, start)
        for g in _GLOBAL_NAME.finditer(text or ""):
            if g.group(1) not in ("__launch_bounds__", "__cluster_dims__", "__maxnreg__"):
                out.append((g.group(1), name, start, end))
    return out


class Expander:
    """Expands uses of ``macros`` (the launching ones, by name; the last definition before a use wins)."""

    def __init__(self, macros: list[Macro], names: set[str]):
        self.defs: dict[str, list[Macro]] = {}
        for m in sorted(macros, key=lambda m: m.start):
            if m.name in names:
                self.defs.setdefault(m.name, []).append(m)

    def macro_at(self, name: str, offset: int) -> Macro | None:
        """The definition of ``name`` in force at byte ``offset`` (the last one before it)."""
        got = [m for m in self.defs.get(name, []) if m.start < offset]
        return got[-1] if got else None

    def expand_use(self, m: Macro, args_text: str | None, offset: int) -> str | None:
        """The expansion of one use of ``m`` (``args_text``: what stands between its parentheses, None for an
        object-like macro). None when the use does not fit the macro (argument count, unbalanced text)."""
        if m.params is None:
            return self._rescan(m.body, offset, {m.name}, 0)
        args = split_args(args_text or "")
        if args is None:
            return None
        return self._substitute(m, args, offset, {m.name}, 0)

    def _substitute(self, m: Macro, args: list[str], offset: int, hidden: set[str], depth: int) -> str | None:
        params = list(m.params or [])
        if args == [""] and not params:
            args = []
        named: dict[str, str] = {}
        if m.variadic:
            fixed = params[:-1]
            if len(args) < len(fixed):
                return None
            va_name = params[-1][:-3].strip() or "__VA_ARGS__"
            named.update(zip(fixed, args))
            named[va_name] = ", ".join(args[len(fixed):])
        else:
            if len(args) != len(params):
                return None
            named.update(zip(params, args))
        toks = [(k, t) for k, t in _tokens(m.body)]
        out: list[str] = []
        i = 0
        nxt: list[int | None] = [None] * len(toks)  # the next / previous token that is not white space
        prv: list[int | None] = [None] * len(toks)
        last = None
        for j, (k, _) in enumerate(toks):
            prv[j] = last
            if k != "ws":
                last = j
        last = None
        for j in range(len(toks) - 1, -1, -1):
            nxt[j] = last
            if toks[j][0] != "ws":
                last = j

        def next_sig(j: int) -> int | None:
            return nxt[j]

        def prev_sig(j: int) -> int | None:
            return prv[j]

        while i < len(toks):
            k, t = toks[i]
            if k == "hash":  # #param: the argument as a string literal
                j = next_sig(i)
                if j is not None and toks[j][0] == "id" and toks[j][1] in named:
                    s = " ".join(named[toks[j][1]].split())
                    out.append('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"')
                    i = j + 1
                    continue
            if k == "id" and t in named:
                p, n = prev_sig(i), next_sig(i)
                pasted = (p is not None and toks[p][0] == "paste") or (n is not None and toks[n][0] == "paste")
                if pasted:
                    out.append(named[t])
                else:
                    got = self._rescan(named[t], offset, hidden, depth + 1)
                    if got is None:
                        return None
                    out.append(got)
                i += 1
                continue
            if k == "paste":  # a ## b: drop the operator and the white space around it
                while out and not out[-1].strip():
                    out.pop()
                if out:
                    out[-1] = out[-1].rstrip()
                i += 1
                while i < len(toks) and toks[i][0] == "ws":
                    i += 1
                continue
            out.append(t)
            i += 1
        return self._rescan("".join(out), offset, hidden, depth)

    def _rescan(self, text: str, offset: int, hidden: set[str], depth: int) -> str | None:
        if depth > _MAX_DEPTH:
            return None
        toks = _tokens(text)
        out: list[str] = []
        i = 0
        while i < len(toks):
            k, t = toks[i]
            m = self.macro_at(t, offset) if k == "id" and t not in hidden else None
            if m is None:
                out.append(t)
                i += 1
                continue
            if m.params is None:
                got = self._rescan(m.body, offset, hidden | {m.name}, depth + 1)
                if got is None:
                    return None
                out.append(got)
                i += 1
                continue
            j = i + 1
            while j < len(toks) and toks[j][0] == "ws":
                j += 1
            if j >= len(toks) or toks[j][1] != "(":  # a function-like macro's name without a call: left as is
                out.append(t)
                i += 1
                continue
            level, e = 0, j
            while e < len(toks):
                if toks[e][1] == "(":
                    level += 1
                elif toks[e][1] == ")":
                    level -= 1
                    if level == 0:
                        break
                e += 1
            if e >= len(toks):
                return None
            args = split_args("".join(x for _, x in toks[j + 1:e]))
            if args is None:
                return None
            got = self._substitute(m, args, offset, hidden | {m.name}, depth + 1)
            if got is None:
                return None
            out.append(got)
            i = e + 1
        return "".join(out)
