"""The tuning spec: find it (comment block or sidecar), parse and validate it, draft it, evaluate it.

Format: README "The tuning spec". Evaluation helpers (sizes, buffers, scalars, launches, bytes,
tolerances) are what the tuner and the GPU worker call.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import math
import re
import tomllib
from pathlib import Path
from typing import Mapping

from agent_core import expr
from agent_core.model import (ArgSpec, CudaFile, Kernel, KernelTemplate, KerntuneError, Launch, ParamSpace, Span,
                              TuningSpec)

# dtype -> (numpy dtype string, itemsize); bf16 is carried as its raw 16 bits
DTYPES: dict[str, tuple[str, int]] = {
    "f32": ("float32", 4), "f16": ("float16", 2), "bf16": ("uint16", 2), "f64": ("float64", 8),
    "i8": ("int8", 1), "u8": ("uint8", 1), "i16": ("int16", 2), "u16": ("uint16", 2), "i32": ("int32", 4),
    "u32": ("uint32", 4), "i64": ("int64", 8), "u64": ("uint64", 8),
}
FLOAT_DTYPES = {"f32", "f16", "bf16", "f64"}
ROLES = ("in", "out", "inout")
SPEC_KEYS = ("args", "sizes", "grid", "block", "smem", "bytes", "flops", "rtol", "atol", "template_args")
# what a spec may ask for (README "The tuning spec"): checked by validate_spec for every size set
MAX_BUFFER_BYTES = 32 * 2 ** 30  # all buffers of one size set together: 32 GiB
MAX_BLOCK_THREADS = 1024  # threads per block (CUDA's limit on every device)
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2 ** 31 - 1, 65535, 65535)
MAX_SMEM_BYTES = 2 ** 20  # dynamic shared memory (far above any device's; the device check is exact)
INT_RANGES: dict[str, tuple[int, int]] = {
    "i8": (-2 ** 7, 2 ** 7 - 1), "u8": (0, 2 ** 8 - 1), "i16": (-2 ** 15, 2 ** 15 - 1), "u16": (0, 2 ** 16 - 1),
    "i32": (-2 ** 31, 2 ** 31 - 1), "u32": (0, 2 ** 32 - 1), "i64": (-2 ** 63, 2 ** 63 - 1), "u64": (0, 2 ** 64 - 1),
}
INITS = ("normal", "uniform(lo, hi)", "randint(lo, hi)", "zeros", "ones")
ARG_FORMS = ('buffers "NAME: in|out|inout DTYPE[COUNT]" (optionally "~ uniform(-1, 1)"), '
             'scalars "NAME: DTYPE = EXPR"')

_BUFFER_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<role>inout|in|out)\s+(?P<dtype>\w+)\s*"
                        r"\[(?P<size>.*)\]\s*(?:~\s*(?P<init>.*?))?\s*$")
_SCALAR_RE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<dtype>\w+)\s*=\s*(?P<value>.+?)\s*$")


# --------------------------------------------------------------------------------------------- errors
def _err(spec: TuningSpec, field: str, msg: str) -> KerntuneError:
    """An error about one field of ``spec``, at that field's line when known."""
    line = spec.lines.get(field)
    if line is None:
        line = spec.lines.get(field.split(".")[0])
    if line is None:
        line = spec.lines.get(re.sub(r"\[.*", "", field))
    if line is None:
        line = spec.lines.get("")
    return KerntuneError(msg, spec.path or None, line, field_name=field)


# --------------------------------------------------------------------------------------------- parsing
def parse_arg(text: str) -> ArgSpec | None:
    """One ``args`` entry → ArgSpec, or None when it has neither form."""
    m = _BUFFER_RE.match(text)
    if m:
        return ArgSpec(name=m["name"], role=m["role"], dtype=m["dtype"], size=m["size"].strip(),
                       init=(m["init"] or "normal").strip() or "normal")
    m = _SCALAR_RE.match(text)
    if m:
        return ArgSpec(name=m["name"], role="scalar", dtype=m["dtype"], value=m["value"])
    return None


def _exprs(v) -> list[str] | None:
    """A grid/block value (expression or list of 1..3) → list of expression strings; None if malformed."""
    items = v if isinstance(v, list) else [v]
    if not 1 <= len(items) <= 3:
        return None
    out = []
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (str, int)):
            return None
        out.append(str(x).strip())
    return out


def parse_spec(data: dict, kernel: str, origin: str, path: str | None = None, line: int | None = None,
               lines: dict[str, int] | None = None) -> TuningSpec:
    """A spec's TOML table → TuningSpec. Checks the form of each field; ``validate_spec`` checks meaning."""
    spec = TuningSpec(kernel=kernel, args=[], sizes=[], grid=[], block=[], origin=origin, path=str(path or ""),
                      lines=dict(lines or {}))
    if line is not None:
        spec.lines.setdefault("", line)

    def err(field: str, msg: str) -> KerntuneError:
        return _err(spec, field, msg)

    if not isinstance(data, dict):
        raise err("", f"the spec of '{kernel}' must be a TOML table")
    for k in data:
        if k not in SPEC_KEYS:
            close = difflib.get_close_matches(k, SPEC_KEYS, 1, 0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise err(k, f"unknown spec field '{k}' (fields: {', '.join(SPEC_KEYS)}){hint}")
    for k in ("args", "sizes", "grid", "block"):
        if k not in data:
            raise err("", f"the spec of '{kernel}' has no `{k}` (needed: args, sizes, grid, block)")

    args = data["args"]
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise err("args", f"`args` must be a list of strings, one per kernel parameter: {ARG_FORMS}")
    for i, a in enumerate(args):
        parsed = parse_arg(a)
        if parsed is None:
            raise err(f"args[{i}]", f"args[{i}] = \"{a}\" is not an argument spec; the forms are {ARG_FORMS}")
        spec.args.append(parsed)

    sizes = data["sizes"]
    if not isinstance(sizes, list) or not all(isinstance(s, dict) for s in sizes):
        raise err("sizes", "`sizes` must be a list of tables of size names, e.g. "
                           "[{ rows = 8192, cols = 4096 }, { rows = 1000, cols = 4099 }]")
    for i, s in enumerate(sizes):
        for k, v in s.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise err(f"sizes[{i}].{k}", f"sizes[{i}].{k} = {v!r}: sizes must be whole numbers")
    spec.sizes = [dict(s) for s in sizes]

    for k in ("grid", "block"):
        v = _exprs(data[k])
        if v is None:
            example = '"cdiv(n, BLOCK)"' if k == "grid" else '"BLOCK"'
            raise err(k, f"`{k}` must be an expression or a list of 1 to 3 expressions, e.g. {k} = {example}")
        setattr(spec, k, v)
    for k, attr in (("smem", "smem"), ("bytes", "bytes_moved"), ("flops", "flops")):
        if k in data:
            v = data[k]
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise err(k, f"`{k}` must be an expression (a string) or a whole number")
            setattr(spec, attr, str(v).strip())
    for k in ("rtol", "atol"):
        if k in data:
            v = data[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise err(k, f"`{k}` = {v!r}: it must be a finite non-negative number, e.g. {k} = 1e-3 "
                             "(a NaN tolerance would let every variant pass verification)")
            setattr(spec, k, float(v))
    if "template_args" in data:
        v = data["template_args"]
        if not isinstance(v, list) or not v or not all(isinstance(x, (str, int)) and not isinstance(x, bool)
                                                       for x in v):
            raise err("template_args", "`template_args` must be a list of the kernel's template arguments as "
                                       "written in C++, e.g. template_args = [\"__nv_bfloat16\", \"true\", \"1024\"]")
        spec.template_args = [str(x).strip() for x in v]
        for i, a in enumerate(spec.template_args):
            why = _template_arg_problem(a)
            if why:
                raise err("template_args", f"template_args[{i}] = \"{a}\": {why}")
    return spec


def _template_arg_problem(a: str) -> str | None:
    """Why ``a`` cannot be one C++ template argument (it is only ever compared with compiled instantiations)."""
    if not a:
        return "empty"
    if len(a) > 200:
        return "longer than 200 characters"
    if re.search(r"[;{}\"'\\#`\n]", a):
        return "not a C++ template argument (it holds ; { } quotes, # or a line break)"
    depth = 0
    for ch in a:
        if ch == "," and depth == 0:
            return "holds a comma outside <>, () or []: give one list entry per template argument"
        depth += {"<": 1, "(": 1, "[": 1, ">": -1, ")": -1, "]": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth != 0:
        return "unbalanced <>, () or []"
    return None


def instantiation(spec: TuningSpec, kernel: Kernel, template: KernelTemplate | None = None,
                  cfg: dict[str, int] | None = None) -> list[str] | None:
    """The template arguments that choose the instantiation of the user's kernel to compile: the spec's
    ``template_args`` (else the instantiation read from the file, ``inferred_template_args``), where a value that
    ``template`` tunes (a parameter lifted from the kernel's template argument, at its original value in the spec)
    follows the parameter's value in ``cfg``. None: no choice to make (neither, or a template with an entry of its
    own, an expert's)."""
    given = spec.template_args if spec.template_args is not None else spec.inferred_template_args
    if given is None or (template is not None and template.entry):
        return None
    names = [tp.name for tp in kernel.template_params]
    by_tp = {p.template_param: p for p in template.space.params.values() if p.template_param} if template else {}
    out = []
    for i, a in enumerate(given):
        p = by_tp.get(names[i]) if i < len(names) else None
        lit = re.fullmatch(r"\(?\s*(-?\d+)[uUlL]*\s*\)?", a)
        if p is not None and cfg and p.name in cfg and lit and int(lit.group(1)) == p.original:
            out.append(str(cfg[p.name]))
        else:
            out.append(a)
    return out


# --------------------------------------------------------------------------------------------- finding
_LEX = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<space>\s+)
  | (?P<string>(?P<q>["'])(?:\\.|(?!(?P=q))[^\\\n])*(?:(?P=q)|\n|\\\Z)?)
  | (?P<code>(?:[^\s"'/]|/(?![/*]))+|.)
""", re.S | re.X)


def _segments(text: str, end: int, start: int = 0) -> list[tuple[str, int, int]]:
    """Lex ``text[start:end]`` into ("comment"|"code"|"space", start, end) segments (strings count as code);
    ``start`` must not be inside a comment or a string."""
    out: list[tuple[str, int, int]] = []
    for m in _LEX.finditer(text, start):  # tokens may look past ``end`` (a "/" before it starting "//"): cut
        if m.start() >= end:
            break
        kind = m.lastgroup
        out.append(("code" if kind in ("string", "q") else kind, m.start(), min(m.end(), end)))
    return out


class _TextIndex:
    """Line starts of a text in characters and in UTF-8 bytes, for offset conversions that cost a line, not
    the file (a file of thousands of kernels converts offsets for each of them)."""

    def __init__(self, text: str):
        self.text = text
        self.ascii = text.isascii()
        self.char_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        if self.ascii:
            self.byte_starts = self.char_starts
        else:
            self.byte_starts, b, prev = [], 0, 0
            for c in self.char_starts:
                b += len(text[prev:c].encode("utf-8"))
                self.byte_starts.append(b)
                prev = c

    def char_offset(self, byte_offset: int) -> int:
        if self.ascii:
            return byte_offset
        line = bisect.bisect_right(self.byte_starts, byte_offset) - 1
        start_c, start_b = self.char_starts[line], self.byte_starts[line]
        end_c = self.char_starts[line + 1] if line + 1 < len(self.char_starts) else len(self.text)
        raw = self.text[start_c:end_c].encode("utf-8")[:byte_offset - start_b]
        return start_c + len(raw.decode("utf-8", errors="ignore"))

    def line_of(self, char_offset: int) -> int:
        return bisect.bisect_right(self.char_starts, char_offset) - 1

    def pos(self, off: int) -> tuple[int, int, int]:
        """(byte offset, line, byte column) of a character offset."""
        line = self.line_of(off)
        col = len(self.text[self.char_starts[line]:off].encode("utf-8"))
        return self.byte_starts[line] + col, line, col


def _index(cf: CudaFile) -> _TextIndex:
    ix = cf.__dict__.get("_spec_text_index")
    if ix is None or ix.text is not cf.text:
        ix = cf.__dict__["_spec_text_index"] = _TextIndex(cf.text)
    return ix


def _char_offset(text: str, byte_offset: int) -> int:
    """The character offset of a UTF-8 byte offset into ``text``."""
    if text.isascii():
        return byte_offset
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def _kernel_start(text: str, kernel: Kernel) -> int:
    """Where the kernel's declaration starts as a character offset (spans are UTF-8 byte offsets)."""
    return _char_offset(text, kernel.span.start)


def _lex_start(cf: CudaFile, kernel: Kernel) -> int:
    """A byte offset before ``kernel`` where lexing can start: the end of the previous kernel (outside any
    comment or string), when no syntax error comes before the kernel; else the start of the file. Lexing
    only from there keeps finding every kernel's spec linear in the file's size."""
    key = (len(cf.kernels), len(cf.errors))
    got = cf.__dict__.get("_spec_lex_index")
    if got is None or got[0] != key:
        first_error = min((e.span.start for e in cf.errors), default=None)
        ends = sorted(k.span.end for k in cf.kernels)
        got = cf.__dict__["_spec_lex_index"] = (key, first_error, ends)
    _, first_error, ends = got
    if first_error is not None and first_error < kernel.span.start:
        return 0
    i = bisect.bisect_right(ends, kernel.span.start)
    return ends[i - 1] if i else 0


def _comment_spec_block(text: str, kernel: Kernel, lex_from: int = 0,
                        kernel_start: int | None = None) -> tuple[int, int] | None:
    """(start, end) character offsets of the `/* kerntune: ... */` block directly above the kernel
    (``lex_from``: a character offset outside comments and strings where lexing may start; ``kernel_start``:
    the kernel's start as a character offset, when known)."""
    segs = _segments(text, _kernel_start(text, kernel) if kernel_start is None else kernel_start, lex_from)
    for kind, s, e in reversed(segs):
        if kind == "space":
            continue
        if kind == "comment":
            if text.startswith("/*", s) and re.match(r"/\*\s*kerntune\s*:", text[s:e]):
                return s, e
            continue
        # `extern "C"` and attributes on the line of the kernel do not separate the spec from it
        if text[s:e] in ('extern', '"C"'):
            continue
        return None
    return None


def _pos(text: str, off: int) -> tuple[int, int, int]:
    """(byte offset, line, byte column) of a character offset."""
    before = text[:off]
    line = before.count("\n")
    col = len(before[before.rfind("\n") + 1:].encode("utf-8"))
    return len(before.encode("utf-8")), line, col


def _span(text: str, s: int, e: int) -> Span:
    bs, ls, cs = _pos(text, s)
    be, le, ce = _pos(text, e)
    return Span(bs, be, ls, cs, le, ce)


def _field_lines(body: str, first_line: int, nargs: int, nsizes: int, key_prefix: str = "") -> dict[str, int]:
    """Best-effort 0-based file lines of spec fields in a TOML body that starts at ``first_line``."""
    lines: dict[str, int] = {}
    keyre = re.compile(r"^\s*" + re.escape(key_prefix) + r"(\w+)\s*=")
    offs = [0]
    for ln in body.splitlines(True):
        offs.append(offs[-1] + len(ln))

    def line_at(off: int) -> int:
        lo, hi = 0, len(offs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if offs[mid] <= off:
                lo = mid
            else:
                hi = mid - 1
        return first_line + lo

    for m in re.finditer(r"^.*$", body, re.M):
        km = keyre.match(m.group(0))
        if km and km.group(1) in SPEC_KEYS and km.group(1) not in lines:
            lines[km.group(1)] = line_at(m.start())
            start = m.start() + km.end()
            if km.group(1) == "args":
                for i, sm in enumerate(re.finditer(r"\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'", body[start:])):
                    if i >= nargs:
                        break
                    lines[f"args[{i}]"] = line_at(start + sm.start())
            elif km.group(1) == "sizes":
                for i, sm in enumerate(re.finditer(r"\{", body[start:])):
                    if i >= nsizes:
                        break
                    lines[f"sizes[{i}]"] = line_at(start + sm.start())
    return lines


def _strip_stars(body: str) -> str:
    """Drop a ` * ` margin when every non-blank line of a comment body has one."""
    ls = body.split("\n")
    rest = [ln for ln in ls[1:] if ln.strip()]
    if rest and all(re.match(r"^\s*\*(\s|$)", ln) for ln in rest):
        ls = [ls[0]] + [re.sub(r"^\s*\*(\s|$)", "", ln) if ln.strip() else ln for ln in ls[1:]]
    return "\n".join(ls)


def toml_error_line(e: tomllib.TOMLDecodeError, text: str = "") -> tuple[str, int | None, int | None]:
    """(message, 0-based line, 0-based col) of a TOML syntax error in ``text`` (tomllib puts them in the
    message; an error at the end of the document is put on the last line)."""
    msg = str(e)
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", msg)
    if m:
        return msg[:m.start()], int(m.group(1)) - 1, int(m.group(2)) - 1
    m = re.search(r"\s*\(at end of document\)\s*$", msg)
    if m:
        return msg[:m.start()] + " at the end", max(0, len(text.rstrip("\n").split("\n")) - 1), None
    return msg, None, None


def _load_toml(body: str, path: str, first_line: int, what: str) -> dict:
    try:
        return tomllib.loads(body)
    except tomllib.TOMLDecodeError as e:
        msg, line, col = toml_error_line(e, body)
        raise KerntuneError(f"{what} is not valid TOML: {msg}", path,
                            first_line + line if line is not None else first_line, col,
                            field_name="spec") from None
    except (RecursionError, MemoryError):
        raise KerntuneError(f"{what} is nested too deeply to be read", path, first_line,
                            field_name="spec") from None


def sidecar_path(path: str) -> Path:
    return Path(str(path) + ".kerntune.toml")


def _comment_spec(cf: CudaFile, kernel: Kernel) -> TuningSpec | None:
    ix = _index(cf)
    block = _comment_spec_block(cf.text, kernel, ix.char_offset(_lex_start(cf, kernel)),
                                ix.char_offset(kernel.span.start))
    if block is None:
        return None
    s, e = block
    raw = cf.text[s:e]
    m = re.match(r"/\*\s*kerntune\s*:", raw)
    body_start = s + m.end()
    body_end = e - 2 if raw.endswith("*/") else e
    body = _strip_stars(cf.text[body_start:body_end])
    first_line = ix.line_of(body_start)
    data = _load_toml(body, cf.path, first_line, f"the kerntune comment above '{kernel.name}'")
    comment_line = ix.line_of(s)
    nargs = len(data.get("args", [])) if isinstance(data.get("args"), list) else 0
    nsizes = len(data.get("sizes", [])) if isinstance(data.get("sizes"), list) else 0
    lines = _field_lines(body, first_line, nargs, nsizes)
    spec = parse_spec(data, kernel.name, f"comment:{comment_line + 1}", cf.path, comment_line, lines)
    (bs, ls, cs), (be, le, ce) = ix.pos(s), ix.pos(e)
    spec.span = Span(bs, be, ls, cs, le, ce)
    return spec


def _sidecar_spec(cf: CudaFile, kernel: str) -> TuningSpec | None:
    sp = sidecar_path(cf.path)
    if not sp.is_file():
        return None
    text = sp.read_text(encoding="utf-8")
    data = _load_toml(text, str(sp), 0, f"{sp.name}")
    if kernel not in data:
        return None
    hdr = re.search(r"^[ \t]*\[[ \t]*" + re.escape(kernel) + r"[ \t]*\]", text, re.M)
    line = text[:hdr.start()].count("\n") if hdr else 0
    lines: dict[str, int] = {}
    if hdr:
        nxt = re.search(r"^[ \t]*\[(?!\[)", text[hdr.end():], re.M)
        body = text[hdr.end():hdr.end() + nxt.start()] if nxt else text[hdr.end():]
        d = data[kernel] if isinstance(data[kernel], dict) else {}
        nargs = len(d.get("args", [])) if isinstance(d.get("args"), list) else 0
        nsizes = len(d.get("sizes", [])) if isinstance(d.get("sizes"), list) else 0
        lines = _field_lines(body, text[:hdr.end()].count("\n"), nargs, nsizes)
    return parse_spec(data[kernel], kernel, str(sp), str(sp), line, lines)


def find_spec(cf: CudaFile, kernel: str) -> TuningSpec | None:
    """The kernel's spec from a `/* kerntune: ... */` comment directly above it, or from the sidecar
    ``FILE.cu.kerntune.toml`` (table ``[KERNEL]``); None when it has neither."""
    k = cf.kernel(kernel)
    spec = _comment_spec(cf, k)
    side = _sidecar_spec(cf, kernel)
    if spec is not None and side is not None:
        raise KerntuneError(f"kernel '{kernel}' has a spec both in a comment and in {sidecar_path(cf.path).name}; "
                            "keep one of them", cf.path, spec.span.line if spec.span else None, field_name="spec")
    return spec if spec is not None else side


# --------------------------------------------------------------------------------------------- validation
def _check_init(init: str, size_sets: list[dict[str, int]] | None = None) -> str | None:
    """None when ``init`` is a known distribution, else what is wrong. The bounds of uniform/randint may be
    expressions of size names (``randint(0, max_pos)``): they must hold for every size set in ``size_sets``."""
    if init in ("normal", "zeros", "ones"):
        return None
    m = re.fullmatch(r"(uniform|randint)\s*\((.*)\)", init.strip())
    if not m:
        return f"unknown init '{init}' (use {', '.join(INITS)})"
    exprs = m.group(2).split(",")
    if len(exprs) != 2:
        return f"{m.group(1)} needs two numbers: {m.group(1)}(lo, hi)"
    try:
        used = set().union(*(expr.names(e) for e in exprs))
    except KerntuneError:
        return f"{m.group(1)} needs two numbers: {m.group(1)}(lo, hi)"
    sets = size_sets or [{}]
    unknown = sorted(used - set(sets[0]))
    if unknown:
        return (f"{init}: '{unknown[0]}' is not a size name (the bounds are numbers or expressions of the size "
                f"names: {', '.join(sets[0]) or 'none'})")
    for sizes in (sets if used else [{}]):
        try:
            parts = [expr.evaluate(e, sizes) for e in exprs]
        except KerntuneError:
            parts = []
        where = f" (at {', '.join(f'{k}={v}' for k, v in sizes.items())})" if used else ""
        if len(parts) != 2 or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in parts):
            return f"{m.group(1)} needs two numbers: {m.group(1)}(lo, hi){where}"
        lo, hi = parts
        if m.group(1) == "randint" and not (isinstance(lo, int) and isinstance(hi, int)):
            return f"randint needs whole numbers: randint(lo, hi){where}"
        if not lo < hi:
            return f"{init}: lo must be below hi{where}"
    return None


def init_params(init: str, sizes: dict[str, int] | None = None) -> tuple[str, float | None, float | None]:
    """("normal"|"uniform"|"randint"|"zeros"|"ones", lo, hi) of a validated init string, its bounds evaluated
    for the size set ``sizes``."""
    m = re.fullmatch(r"(uniform|randint)\s*\((.*)\)", init.strip())
    if not m:
        return init.strip(), None, None
    lo, hi = (expr.evaluate(p, dict(sizes or {})) for p in m.group(2).split(","))
    return m.group(1), lo, hi


def _check_names(spec: TuningSpec, field: str, text: str, allowed: set[str], what: str) -> None:
    try:
        used = expr.names(text)
    except expr.ExprError as e:
        raise _err(spec, field, f"{field}: {e.message}") from None
    unknown = sorted(used - allowed)
    if unknown:
        n = unknown[0]
        close = difflib.get_close_matches(n, sorted(allowed), 1, 0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise _err(spec, field, f"{field} = '{text}' uses unknown name '{n}' ({what}: "
                                f"{', '.join(sorted(allowed)) or 'none'}){hint}")


def _dtype_mismatch(dtype: str, c_type: str) -> str | None:
    """What is wrong with giving a parameter of C type ``c_type`` the spec dtype ``dtype``; None when it fits
    (or the C type is not one kerntune knows, e.g. a template parameter or a vector type). A 16-bit integer
    dtype may carry a half or bfloat16's raw bits."""
    want = c_dtype(c_type)
    if want is None or want == dtype or dtype not in DTYPES:
        return None
    if DTYPES[want][1] != DTYPES[dtype][1]:
        return f"{DTYPES[dtype][1]}-byte elements but {c_type} has {DTYPES[want][1]}-byte ones"
    if (want in FLOAT_DTYPES) != (dtype in FLOAT_DTYPES):
        if want in ("f16", "bf16") and dtype in ("u16", "i16"):
            return None
        return f"{'floating-point' if dtype in FLOAT_DTYPES else 'integer'} elements but {c_type} is " \
               f"{'floating-point' if want in FLOAT_DTYPES else 'an integer type'}"
    if want in FLOAT_DTYPES and dtype in FLOAT_DTYPES:
        return f"{dtype} but {c_type} is {want}"
    return None


def _check_launch(spec: TuningSpec, i: int, env: dict, all_names: set[str]) -> None:
    """Evaluate grid, block and smem for size set ``i`` (``env``: its sizes and the original configuration)
    and check them against CUDA's limits; expressions naming a parameter not in ``env`` are skipped."""
    for k, limits in (("grid", MAX_GRID_DIMS), ("block", MAX_BLOCK_DIMS)):
        vals = []
        for j, e in enumerate(getattr(spec, k)):
            if not expr.names(e) <= set(env):
                vals = None
                break
            try:
                v = expr.evaluate_int(e, env)
            except expr.ExprError as ex:
                raise _err(spec, k, f"{k} for size set {i + 1} ({_sizes_words(spec.sizes[i])}): {ex.message}") \
                    from None
            if not 1 <= v <= limits[j]:
                raise _err(spec, k, f"{k} '{e}' = {v} for size set {i + 1} ({_sizes_words(spec.sizes[i])}); "
                                    f"dimension {'xyz'[j]} of a {k} must be between 1 and {limits[j]}")
            vals.append(v)
        if k == "block" and vals and math.prod(vals) > MAX_BLOCK_THREADS:
            raise _err(spec, k, f"block = {vals} for size set {i + 1} ({_sizes_words(spec.sizes[i])}) has "
                                f"{math.prod(vals)} threads; a block has at most {MAX_BLOCK_THREADS}")
    if expr.names(spec.smem) <= set(env):
        try:
            v = expr.evaluate_int(spec.smem, env)
        except expr.ExprError as ex:
            raise _err(spec, "smem", f"smem for size set {i + 1} ({_sizes_words(spec.sizes[i])}): {ex.message}") \
                from None
        if not 0 <= v <= MAX_SMEM_BYTES:
            raise _err(spec, "smem", f"smem '{spec.smem}' = {v} bytes for size set {i + 1}; dynamic shared memory "
                                     f"must be between 0 and {MAX_SMEM_BYTES} bytes")


def _sizes_words(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def validate_spec(spec: TuningSpec, kernel: Kernel, param_names: set[str] | frozenset = frozenset(),
                  original: Mapping[str, int] | None = None) -> None:
    """Check a spec against the kernel it is for; raise KerntuneError naming the field and its line.

    Every expression is evaluated for every size set: buffer counts (positive, all buffers together at most
    MAX_BUFFER_BYTES), scalars (within their dtype's range: a size that overflows an ``int`` is refused),
    ``bytes``, and ``grid``/``block``/``smem`` at ``original`` (the kernel's original configuration; an
    expression naming a parameter it lacks is only checked for names) against CUDA's launch limits."""
    params = kernel.params
    if len(spec.args) != len(params):
        want = ", ".join(p.name for p in params) or "none"
        raise _err(spec, "args", f"args has {len(spec.args)} entries but '{kernel.name}' has {len(params)} "
                                 f"parameters ({want}): give one entry per parameter, in order")
    for i, (a, p) in enumerate(zip(spec.args, params)):
        f = f"args[{i}]"
        if a.name != p.name:
            raise _err(spec, f, f"{f} is '{a.name}' but parameter {i + 1} of '{kernel.name}' is '{p.name}' "
                                f"({p.type}): args follow the kernel's parameters, in order")
        if a.dtype not in DTYPES:
            close = difflib.get_close_matches(a.dtype, DTYPES, 1, 0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise _err(spec, f, f"{f}: unknown dtype '{a.dtype}' (use one of {' '.join(DTYPES)}){hint}")
        if a.role == "scalar" and p.is_pointer:
            raise _err(spec, f, f"{f}: '{p.name}' is a pointer ({p.type}), so it needs a buffer spec: "
                                f"\"{p.name}: {'in' if p.is_const else 'out'} {a.dtype}[COUNT]\"")
        if a.role != "scalar" and not p.is_pointer:
            raise _err(spec, f, f"{f}: '{p.name}' is not a pointer ({p.type}), so it needs a scalar spec: "
                                f"\"{p.name}: {a.dtype} = EXPR\"")
        why = _dtype_mismatch(a.dtype, p.type)
        if why:
            raise _err(spec, f, f"{f}: '{p.name}' is {a.dtype}, {why}: the dtype must match the parameter's "
                                f"type (use {c_dtype(p.type)})")
        if a.role in ("out", "inout") and p.is_const:
            raise _err(spec, f, f"{f}: '{p.name}' points to const ({p.type}), so the kernel cannot write it: "
                                f"make it `in`")
        if a.role != "scalar":
            why = _check_init(a.init, spec.sizes)
            if why:
                raise _err(spec, f, f"{f}: {why}")

    if spec.template_args is not None:
        tps = kernel.template_params
        if not tps:
            raise _err(spec, "template_args", f"template_args: '{kernel.name}' is not a template; remove the field")
        if len(spec.template_args) != len(tps):
            want = ", ".join(tp.name for tp in tps)
            raise _err(spec, "template_args", f"template_args has {len(spec.template_args)} entries but "
                                              f"'{kernel.name}' has {len(tps)} template parameters ({want}): give "
                                              "one per parameter, in order, as the launch writes them")

    if len(spec.sizes) < 2:
        raise _err(spec, "sizes", f"sizes has {len(spec.sizes)} set(s); give at least two, one of them not a "
                                  "multiple of the block size (tails are where tuned kernels break)")
    keys = list(spec.sizes[0])
    if not keys:
        raise _err(spec, "sizes[0]", "sizes[0] is empty: name the problem sizes, e.g. { n = 1048576 }")
    for i, s in enumerate(spec.sizes):
        if set(s) != set(keys):
            missing = sorted(set(keys) - set(s))
            extra = sorted(set(s) - set(keys))
            what = (f"lacks {', '.join(missing)}" if missing else "") + \
                   ("; " if missing and extra else "") + (f"has extra {', '.join(extra)}" if extra else "")
            raise _err(spec, f"sizes[{i}]", f"sizes[{i}] {what}: every size set must name the same sizes "
                                            f"({', '.join(keys)})")
        for k, v in s.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", k):
                raise _err(spec, f"sizes[{i}].{k}", f"size name '{k}' must be an identifier")
            if k in param_names:
                raise _err(spec, f"sizes[{i}].{k}", f"size name '{k}' is also a tuning parameter; rename the size")
            if v <= 0:
                raise _err(spec, f"sizes[{i}].{k}", f"sizes[{i}].{k} = {v}: sizes must be positive")

    size_names = set(keys)
    all_names = size_names | set(param_names)
    for i, a in enumerate(spec.args):
        text = a.value if a.role == "scalar" else a.size
        _check_names(spec, f"args[{i}]", text, size_names,
                     "buffer counts and scalar values use size names only; sizes")
    for k in ("grid", "block"):
        for j, e in enumerate(getattr(spec, k)):
            _check_names(spec, k, e, all_names, "size and parameter names")
    _check_names(spec, "smem", spec.smem, all_names, "size and parameter names")
    for k, attr in (("bytes", "bytes_moved"), ("flops", "flops")):
        if getattr(spec, attr):
            _check_names(spec, k, getattr(spec, attr), size_names, "size names")
    for i, s in enumerate(spec.sizes):
        total = 0
        for j, a in enumerate(spec.args):
            f = f"args[{j}]"
            try:
                v = expr.evaluate(a.size if a.role != "scalar" else a.value, s)
            except expr.ExprError as e:
                raise _err(spec, f, f"{f} for size set {i + 1}: {e.message}") from None
            if a.role != "scalar" and (isinstance(v, bool) or not isinstance(v, int) and not float(v).is_integer()
                                       or v <= 0):
                raise _err(spec, f, f"{f}: count '{a.size}' = {v} for size set {i + 1}; a buffer needs a "
                                    "positive whole number of elements")
            if a.role != "scalar":
                total += int(v) * DTYPES[a.dtype][1]
                if total > MAX_BUFFER_BYTES:
                    raise _err(spec, f, f"{f}: count '{a.size}' = {int(v)} for size set {i + 1} "
                                        f"({_sizes_words(s)}) brings the buffers to {total} bytes; at most "
                                        f"{MAX_BUFFER_BYTES} bytes ({MAX_BUFFER_BYTES // 2 ** 30} GiB) per size set")
            elif a.dtype in INT_RANGES:
                lo, hi = INT_RANGES[a.dtype]
                if isinstance(v, float) and not v.is_integer() or not lo <= v <= hi:
                    raise _err(spec, f, f"{f}: '{a.name}' = {v} for size set {i + 1} ({_sizes_words(s)}) does not "
                                        f"fit its type {a.dtype} ({lo} to {hi})")
        _check_launch(spec, i, {**dict(original or {}), **s}, all_names)
        if spec.bytes_moved:
            try:
                expr.evaluate_int(spec.bytes_moved, s)
            except expr.ExprError as e:
                raise _err(spec, "bytes", f"bytes for size set {i + 1}: {e.message}") from None


# --------------------------------------------------------------------------------------------- evaluation
def size_env(spec: TuningSpec, i: int) -> dict[str, int]:
    """The names and values of size set ``i``."""
    return dict(spec.sizes[i])


def dtype_info(dtype: str) -> tuple[str, int]:
    """(numpy dtype string, itemsize); bf16 is "uint16" (its raw bits)."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise KerntuneError(f"unknown dtype '{dtype}' (use one of {' '.join(DTYPES)})") from None


def buffer_elems(spec: TuningSpec, sizes: dict) -> dict[str, int]:
    """Element count of every buffer argument for one size set."""
    return {a.name: expr.evaluate_int(a.size, sizes) for a in spec.args if a.role != "scalar"}


def scalar_values(spec: TuningSpec, sizes: dict) -> dict[str, int | float]:
    """Value of every scalar argument for one size set (int for integer dtypes, float otherwise)."""
    out: dict[str, int | float] = {}
    for a in spec.args:
        if a.role == "scalar":
            out[a.name] = float(expr.evaluate(a.value, sizes)) if a.dtype in FLOAT_DTYPES \
                else expr.evaluate_int(a.value, sizes)
    return out


def _dims(v, env: dict, what: str) -> tuple[int, int, int]:
    items = v if isinstance(v, (list, tuple)) else [v]
    if not 1 <= len(items) <= 3:
        raise KerntuneError(f"{what} must have 1 to 3 dimensions, got {len(items)}", field_name=what)
    vals = [expr.evaluate_int(x, env) for x in items]
    return tuple(vals + [1] * (3 - len(vals)))  # type: ignore[return-value]


def launch(src: TuningSpec | dict, sizes: dict, params: dict | None = None) -> Launch:
    """The launch configuration for one size set and configuration, from the spec's grid/block/smem or a
    template's ``launch`` dict {"grid": ..., "block": ..., "smem": ...} (each an expression or a list)."""
    env = {**sizes, **(params or {})}
    if isinstance(src, dict):
        grid, block, smem = src.get("grid"), src.get("block"), src.get("smem") or "0"
        if grid is None or block is None:
            raise KerntuneError("a template's launch needs grid and block", field_name="launch")
    else:
        grid, block, smem = src.grid, src.block, src.smem or "0"
    return Launch(grid=_dims(grid, env, "grid"), block=_dims(block, env, "block"),
                  smem=expr.evaluate_int(smem, env))


def bytes_moved(spec: TuningSpec, sizes: dict) -> int:
    """Bytes the kernel must move for one size set: the spec's `bytes`, or in read once, out written once,
    inout both."""
    if spec.bytes_moved:
        return expr.evaluate_int(spec.bytes_moved, sizes)
    elems = buffer_elems(spec, sizes)
    total = 0
    for a in spec.args:
        if a.role != "scalar":
            total += elems[a.name] * dtype_info(a.dtype)[1] * (2 if a.role == "inout" else 1)
    return total


def tolerances(spec: TuningSpec, dtype: str) -> tuple[float, float]:
    """(rtol, atol) for comparing a buffer of ``dtype``: the spec's values, else the dtype's default."""
    if dtype in ("f32", "f64"):
        rtol, atol = 1e-5, 1e-5
    elif dtype in ("f16", "bf16"):
        rtol, atol = 1e-2, 1e-2
    else:
        rtol, atol = 0.0, 0.0
    return (spec.rtol if spec.rtol is not None else rtol, spec.atol if spec.atol is not None else atol)


TAIL_KINDS = ("block_size", "items_per_thread", "outputs_per_thread", "vector_width", "vec", "tile", "elems_per_thread")


def check_tail_sizes(spec: TuningSpec, space: ParamSpace) -> str | None:
    """A warning when no size set has a size that is a non-multiple of the block-size / vector-width
    parameters' values (so tails are never exercised); None when fine."""
    steps = sorted({v for p in space.params.values() if p.kind in TAIL_KINDS or
                    re.search(r"VEC|BLOCK|TILE|ITEMS|WIDTH", p.name.upper()) for v in p.values if v > 1})
    if not steps:
        return None
    for s in spec.sizes:
        for v in s.values():
            if all(v % b != 0 for b in steps):
                return None
    names = ", ".join(p.name for p in space.params.values() if p.kind in TAIL_KINDS
                      or re.search(r"VEC|BLOCK|TILE|ITEMS|WIDTH", p.name.upper()))
    return (f"no size set has a size that is not a multiple of {names} ({', '.join(map(str, steps))}): add "
            "one with an odd size (e.g. 4099) so that tails are verified")


# --------------------------------------------------------------------------------------------- drafting
C_DTYPES: dict[str, str] = {
    "float": "f32", "half": "f16", "__half": "f16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16",
    "__bfloat16": "bf16", "double": "f64", "int": "i32", "signed": "i32", "signed int": "i32", "int32_t": "i32",
    "unsigned": "u32", "unsigned int": "u32", "uint32_t": "u32", "int64_t": "i64", "long long": "i64",
    "long long int": "i64", "long": "i64", "long int": "i64", "ptrdiff_t": "i64", "uint64_t": "u64",
    "size_t": "u64", "unsigned long long": "u64", "unsigned long": "u64", "int8_t": "i8", "signed char": "i8",
    "char": "i8", "uint8_t": "u8", "unsigned char": "u8", "bool": "u8", "int16_t": "i16", "short": "i16",
    "uint16_t": "u16", "unsigned short": "u16", "__nv_fp8_e4m3": "u8", "__nv_fp8_e5m2": "u8",
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b|[*&]")


def base_type(c_type: str) -> str:
    """A C type as written without its pointer, reference and qualifiers (``const T* __restrict__`` -> ``T``)."""
    return " ".join(_QUALIFIERS.sub(" ", c_type).split())


def c_dtype(c_type: str) -> str | None:
    """The spec dtype of a C type as written (pointer and qualifiers ignored), or None when unknown."""
    base = base_type(c_type)
    return C_DTYPES.get(base) or C_DTYPES.get(base.replace("std::", ""))


def _clean_host_expr(text: str) -> str | None:
    """A host C expression in the spec's expression language, or None when it cannot be expressed."""
    t = re.sub(r"static_cast\s*<[^<>]*>\s*", "", text)
    t = re.sub(r"\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|long long|long|size_t|int64_t|int32_t|"
               r"uint32_t|uint64_t|unsigned|short)\s*\)", "", t)
    t = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", t)
    t = re.sub(r"\b(\d+\.\d*(?:[eE][-+]?\d+)?|\d*\.\d+(?:[eE][-+]?\d+)?)[fF]\b", r"\1", t)
    t = t.strip()
    try:
        expr.parse(t)
    except expr.ExprError:
        return None
    return t


def _names_in(texts: list[str]) -> list[str]:
    seen: list[str] = []
    for t in texts:
        try:
            tree = expr.parse(t)
        except expr.ExprError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in expr.FUNCTIONS and node.id not in seen:
                seen.append(node.id)
    return seen
