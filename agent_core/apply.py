"""Render a configuration back into the user's file: the text, minimal edits, and a checked write."""

from __future__ import annotations

import ast
import copy
import difflib
import json
import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agent_core import expr
from agent_core.source.cuda_parse import parse_cuda
from agent_core.model import (CudaFile, Kernel, KernelTemplate, KerntuneError, LaunchSite, Site, TuningSpec,
                              params_words, sha256_text)
from agent_core.templating.text_kind import can_dispatch, is_whole_file, strip_header
from agent_core.templating.text_kind import unedited as _unedited


_DEFAULT_GUARD_RE = re.compile(
    r"^[ \t]*#[ \t]*ifndef[ \t]+(KT_\w+)[^\n]*\n"      # #ifndef KT_X
    r"[ \t]*#[ \t]*define[ \t]+\1\b[^\n]*\n"          # #define KT_X <default>
    r"[ \t]*#[ \t]*endif[^\n]*(?:\n|\Z)", re.M)          # #endif


def strip_default_guards(text: str) -> str:
    """``text`` without the ``#ifndef KT_X / #define KT_X default / #endif`` blocks a template may carry
    outside its header (an LLM's or an expert's): once the macros are replaced by values they mean nothing."""
    return _DEFAULT_GUARD_RE.sub("", text)


def _site_text(site: Site, value: int, original: int) -> str:
    """What a site reads for ``value``: its original text at the original value, else the site's
    expression (``{value} - 1``) folded to a number when it is one."""
    if value == original:
        return site.original_text
    text = site.render.format(value=value)
    try:
        v = expr.evaluate(text, {})
    except expr.ExprError:
        return text
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else text


def render(template: KernelTemplate, cfg: dict[str, int]) -> str:
    """The file text for ``cfg``: the header removed and every ``KT_<PARAM>`` replaced by its value
    (parameters missing from ``cfg`` take their original value). An unedited structural template is
    rendered through its sites, so derived literals read as numbers (``KT_BLOCK / 2`` -> ``64``)."""
    originals = template.space.original_config()
    values = {**originals, **cfg}
    if _unedited(template) and all(s.param in values for s in template.sites):
        src = template.original_text.encode("utf-8")
        out, pos = [], 0
        for site in sorted(template.sites, key=lambda x: x.span.start):
            text = _site_text(site, values[site.param], originals.get(site.param, values[site.param]))
            out += [src[pos:site.span.start], text.encode("utf-8")]
            pos = site.span.end
        out.append(src[pos:])
        return b"".join(out).decode("utf-8")
    body = strip_default_guards(strip_header(template.text))
    if not values:
        return body

    def sub(m: re.Match) -> str:
        name = m.group(1)
        return str(values[name]) if name in values else m.group(0)

    return re.sub(r"\bKT_([A-Za-z_]\w*)\b", sub, body)


def text_edits(old: str, new: str) -> list[tuple[int, int, str]]:
    """Minimal replaced regions turning ``old`` into ``new``: (start, end, replacement) with UTF-8 byte
    offsets into ``old``, in order and not overlapping."""
    a, b = old.splitlines(True), new.splitlines(True)
    offs = [0]
    for ln in a:
        offs.append(offs[-1] + len(ln))  # character offsets
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        s, e = offs[i1], offs[i2]
        rep = "".join(b[j1:j2])
        seg = old[s:e]
        p = 0  # trim the common prefix / suffix of the replaced lines
        while p < len(seg) and p < len(rep) and seg[p] == rep[p]:
            p += 1
        q = 0
        while q < len(seg) - p and q < len(rep) - p and seg[-1 - q] == rep[-1 - q]:
            q += 1
        s2, e2 = s + p, e - q
        edits.append((s2, e2, rep[p:len(rep) - q]))
    # character offsets -> UTF-8 byte offsets
    if old.isascii():
        return edits
    return [(len(old[:s].encode("utf-8")), len(old[:e].encode("utf-8")), r) for s, e, r in edits]


def apply_edits(old: str, edits: list[tuple[int, int, str]]) -> str:
    """``old`` with ``text_edits`` applied (byte offsets)."""
    b = old.encode("utf-8")
    out, pos = [], 0
    for s, e, r in edits:
        out += [b[pos:s], r.encode("utf-8")]
        pos = e
    out.append(b[pos:])
    return b"".join(out).decode("utf-8")


def check_compiles(text: str, path: str | Path, arch: str = "sm_90", timeout: float = 300, host: bool = False) -> None:
    """Compile ``text`` (as if it were ``path``) with ``nvcc -cubin`` (``host``: ``nvcc -c``, the host code
    compiled too); raise KerntuneError with the compiler's message when it fails."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise KerntuneError("nvcc is not on PATH: cannot check that the rewritten file compiles", str(path))
    from agent_core.measure.compiler import scratch_name
    src_dir = Path(path).resolve().parent
    with tempfile.TemporaryDirectory(prefix="kerntune-apply-") as tmp:
        cu = Path(tmp) / scratch_name(str(path))  # a long name cut: nvcc's own temporary files lengthen it
        cu.write_text(text, encoding="utf-8")
        cmd = [nvcc, "-c" if host else "-cubin", f"-arch={arch}", "-I", str(src_dir), "-o",
               str(Path(tmp) / ("out.o" if host else "out.cubin")), str(cu)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KerntuneError(f"nvcc took longer than {timeout:.0f} s; the file was not changed", str(path))
        if r.returncode != 0:
            log = (r.stderr or r.stdout).replace(str(cu), str(path)).strip()
            raise KerntuneError(f"the rewritten file does not compile, so it was not changed:\n{log}", str(path))


def apply_to_file(path: str | Path, template: KernelTemplate, cfg: dict[str, int], check_compile: bool = True,
                  arch: str = "sm_90") -> str:
    """Rewrite ``path`` to ``cfg`` (``rewrite_file``: in place for a template that is not a whole file; the
    spec's sidecar too when it changes) after checking it compiles; refuse if the file changed since it was
    templatized. Returns the new text."""
    path = Path(path)
    current = path.read_text(encoding="utf-8")
    if sha256_text(current) != template.original_hash:
        raise KerntuneError(f"{path.name} changed since kernel '{template.kernel}' was templatized; "
                            "templatize (and tune) again before applying", str(path))
    from agent_core.store import check_params
    rw = rewrite_file(current, path, template.kernel, template,
                      check_params(cfg, f"the configuration for '{template.kernel}'"))
    new = rw.text
    if check_compile:
        check_compiles(new, path, arch, host=rw.in_place)
    from agent_core.source.files import write_files
    write_files([(path, new)] + ([(Path(rw.sidecar[0]), rw.sidecar[1])] if rw.sidecar else []))
    return new


# =============================================================================================== in place
# A template that is not a whole file (an expert's helpers + device code + a wrapper with the kernel's
# signature, or an LLM's partial template) is written back *into* the user's file: the kernel definition is
# replaced by the template's code, the spec's launch and every launch site follow the template's launch.

@dataclass
class Rewrite:
    """What applying a configuration changes: the file's new text, the spec's sidecar when it changes
    (``(path, new text)``), warnings for the user, whether the kernel was rewritten in place (a template
    that is not a whole file), and the kernel's spec as it reads after the rewrite (None when unreadable)."""
    text: str
    sidecar: tuple[str, str] | None = None
    warnings: list[str] = field(default_factory=list)
    in_place: bool = False
    spec: TuningSpec | None = None
    kernels: list[tuple[str, TuningSpec]] = field(default_factory=list)  # in-place: each kernel written, its spec
    dispatch: object | None = None  # the per-shape dispatch written (agent_core.agent.dispatch.Dispatch), if one was
    kept: list[str] = field(default_factory=list)  # where (and why) the original kernel is kept, in words


# ------------------------------------------------------------------ launch expressions
def _is_int_const(n: ast.AST) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool)


def _try_const(n: ast.AST) -> ast.AST:
    try:
        v = expr._eval(n, {})
    except Exception:
        return n
    if isinstance(v, bool):
        v = int(v)
    return ast.Constant(v) if isinstance(v, (int, float)) else n


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _simplify(n: ast.AST) -> ast.AST:
    """Constant folding and the identities launch expressions need (``x * 1``, ``x / 1``, ``cdiv(x, 1)``,
    ``(a * b) / b`` for a size name or positive constant ``b``, ``a if c else a``): exact in integer arithmetic."""
    if isinstance(n, ast.BinOp):
        l, r = _simplify(n.left), _simplify(n.right)
        out = ast.BinOp(l, n.op, r)
        if isinstance(l, ast.Constant) and isinstance(r, ast.Constant):
            return _try_const(out)
        op = n.op
        if isinstance(op, ast.Mult):
            if _is_int_const(l) and l.value == 1:
                return r
            if _is_int_const(r) and r.value == 1:
                return l
        if isinstance(op, ast.Add):
            if _is_int_const(l) and l.value == 0:
                return r
            if _is_int_const(r) and r.value == 0:
                return l
        if isinstance(op, ast.Sub) and _is_int_const(r) and r.value == 0:
            return l
        if isinstance(op, (ast.Div, ast.FloorDiv)):
            if _is_int_const(r) and r.value == 1:
                return l
            positive = isinstance(r, ast.Name) or _is_int_const(r) and r.value > 0
            if positive and isinstance(l, ast.BinOp) and isinstance(l.op, ast.Mult):
                if _same(l.right, r):
                    return l.left
                if _same(l.left, r):
                    return l.right
        return out
    if isinstance(n, ast.UnaryOp):
        out = ast.UnaryOp(n.op, _simplify(n.operand))
        return _try_const(out) if isinstance(out.operand, ast.Constant) else out
    if isinstance(n, ast.Call):
        args = [_simplify(a) for a in n.args]
        out = ast.Call(ast.Name(n.func.id, ast.Load()), args, [])
        if all(isinstance(a, ast.Constant) for a in args):
            return _try_const(out)
        if n.func.id in ("cdiv", "round_up") and len(args) == 2 and _is_int_const(args[1]) and args[1].value == 1:
            return args[0]
        if n.func.id in ("min", "max") and len(args) == 1:
            return args[0]
        return out
    if isinstance(n, ast.IfExp):
        test = _simplify(n.test)
        if isinstance(test, ast.Constant):
            return _simplify(n.body) if test.value else _simplify(n.orelse)
        body, orelse = _simplify(n.body), _simplify(n.orelse)
        return body if _same(body, orelse) else ast.IfExp(test, body, orelse)
    if isinstance(n, ast.Compare):
        out = ast.Compare(_simplify(n.left), n.ops, [_simplify(c) for c in n.comparators])
        return _try_const(out) if all(isinstance(c, ast.Constant) for c in [out.left, *out.comparators]) else out
    if isinstance(n, ast.BoolOp):
        out = ast.BoolOp(n.op, [_simplify(v) for v in n.values])
        return _try_const(out) if all(isinstance(v, ast.Constant) for v in out.values) else out
    return n


def fold(text: str | int, values: dict[str, int] | None = None) -> ast.AST:
    """The expression ``text`` with the names in ``values`` replaced by their values, simplified."""
    tree = copy.deepcopy(expr.parse(str(text)).body)
    values = values or {}

    class Sub(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.Constant(values[node.id]) if node.id in values else node

        def visit_Call(self, node):  # the function's name is not a variable
            node.args = [self.visit(a) for a in node.args]
            return node

    return _simplify(Sub().visit(tree))


def spec_expr(node: ast.AST) -> str:
    """An expression tree in the spec's language."""
    return ast.unparse(node)


_C_PREC = {ast.Mult: 80, ast.Div: 80, ast.FloorDiv: 80, ast.Mod: 80, ast.Add: 70, ast.Sub: 70, ast.LShift: 60,
           ast.RShift: 60, ast.BitAnd: 40, ast.BitXor: 35, ast.BitOr: 30}
_C_OP = {ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "/", ast.Mod: "%", ast.Add: "+", ast.Sub: "-", ast.LShift: "<<",
         ast.RShift: ">>", ast.BitAnd: "&", ast.BitXor: "^", ast.BitOr: "|"}
_C_CMP = {ast.Eq: ("==", 45), ast.NotEq: ("!=", 45), ast.Lt: ("<", 50), ast.LtE: ("<=", 50), ast.Gt: (">", 50),
          ast.GtE: (">=", 50)}


def _c_atomic(t: str) -> bool:
    """A C expression that needs no parentheses as an operand."""
    t = t.strip()
    if re.fullmatch(r"[A-Za-z_]\w*(?:(?:\.|->)[A-Za-z_]\w*)*|\d+[uUlL]*", t):
        return True
    if t.startswith("(") and _match_paren(t, 0) == len(t) - 1:
        return True
    return False


def _match_paren(s: str, i: int) -> int:
    """The index of the bracket closing the one at ``s[i]`` (``(``/``[``/``{``); -1 when unbalanced."""
    opening = s[i]
    closing = {"(": ")", "[": "]", "{": "}"}[opening]
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c in "\"'":
            k = j + 1
            while k < len(s) and s[k] != c:
                k += 2 if s[k] == "\\" else 1
            j = k
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _split_top(s: str) -> list[str]:
    """``s`` split at the commas outside brackets."""
    out, depth, cur = [], 0, []
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return [x.strip() for x in out]


class _Unmapped(Exception):
    def __init__(self, names: set[str], why: str = ""):
        super().__init__(", ".join(sorted(names)) or why)
        self.names, self.why = names, why


def to_c(node: ast.AST, host: dict[str, str]) -> str:
    """A (folded) expression tree as C over the host's values: ``host`` maps ``ast.dump`` of a size name (or
    of a whole sub-expression) to the C text that holds it at the launch. Raises _Unmapped naming the size
    names that have no host value."""
    missing: set[str] = set()

    def wrap(t: tuple[str, int], prec: int) -> str:
        return t[0] if t[1] >= prec else f"({t[0]})"

    def go(n: ast.AST) -> tuple[str, int]:
        if not isinstance(n, ast.Constant):
            h = host.get(ast.dump(n))
            if h is not None:
                return (h, 100) if _c_atomic(h) else (f"({h})", 100)
        if isinstance(n, ast.Constant):
            v = n.value
            if isinstance(v, bool):
                return ("1" if v else "0"), 100
            return (str(v), 100) if v >= 0 else (f"({v})", 100)
        if isinstance(n, ast.Name):
            missing.add(n.id)
            return n.id, 100
        if isinstance(n, ast.BinOp):
            if isinstance(n.op, ast.Pow):
                raise _Unmapped(set(), f"'{spec_expr(n)}' has no C form (**)")
            p = _C_PREC[type(n.op)]
            return f"{wrap(go(n.left), p)} {_C_OP[type(n.op)]} {wrap(go(n.right), p + 1)}", p
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.UAdd):
                return go(n.operand)
            op = {ast.USub: "-", ast.Not: "!", ast.Invert: "~"}[type(n.op)]
            return f"{op}{wrap(go(n.operand), 90)}", 90
        if isinstance(n, ast.IfExp):
            return f"({wrap(go(n.test), 6)} ? {wrap(go(n.body), 6)} : {wrap(go(n.orelse), 6)})", 100
        if isinstance(n, ast.Compare):
            parts, left = [], n.left
            for op, right in zip(n.ops, n.comparators):
                sym, p = _C_CMP[type(op)]
                parts.append(f"{wrap(go(left), p)} {sym} {wrap(go(right), p + 1)}")
                left = right
            if len(parts) == 1:
                return parts[0], _C_CMP[type(n.ops[0])][1]
            return " && ".join(f"({x})" for x in parts), 20
        if isinstance(n, ast.BoolOp):
            sym, p = ("&&", 20) if isinstance(n.op, ast.And) else ("||", 10)
            return f" {sym} ".join(wrap(go(v), p + 1) for v in n.values), p
        if isinstance(n, ast.Call):
            fn, args = n.func.id, n.args
            if fn in ("cdiv", "round_up") and len(args) == 2:
                a = wrap(go(args[0]), 70)
                if _is_int_const(args[1]) and args[1].value > 0:
                    b = args[1].value
                    q = f"({a} + {b - 1}) / {b}" if b > 1 else a
                    return (f"{q} * {b}" if fn == "round_up" and b > 1 else q), 80
                bt = go(args[1])
                q = f"({a} + {wrap(bt, 71)} - 1) / {wrap(bt, 81)}"
                return (f"{q} * {wrap(bt, 81)}" if fn == "round_up" else q), 80
            if fn in ("min", "max") and args:
                cur = go(args[0])
                for x in args[1:]:
                    a, b = wrap(cur, 51), wrap(go(x), 51)
                    cur = (f"({a} {'<' if fn == 'min' else '>'} {b} ? {a} : {b})", 100)
                return cur
            if fn == "int" and len(args) == 1:
                return go(args[0])
            if fn == "abs" and len(args) == 1:
                a = wrap(go(args[0]), 51)
                return f"({a} < 0 ? -{a} : {a})", 100
            raise _Unmapped(set(), f"'{spec_expr(n)}' has no C form ({fn})")
        raise _Unmapped(set(), f"'{spec_expr(n)}' has no C form")

    text = go(node)[0]
    if missing:
        raise _Unmapped(missing)
    return text


def _dims(exprs: list[str] | str, values: dict[str, int]) -> list[ast.AST]:
    """Launch dimensions folded, trailing dimensions of 1 dropped (``[x, 1]`` launches as ``x``)."""
    items = exprs if isinstance(exprs, (list, tuple)) else [exprs]
    nodes = [fold(x, values) for x in items]
    while len(nodes) > 1 and _is_int_const(nodes[-1]) and nodes[-1].value == 1:
        nodes.pop()
    return nodes


def _launch_text(nodes: list[ast.AST], host: dict[str, str]) -> str:
    cs = [to_c(n, host) for n in nodes]
    return cs[0] if len(cs) == 1 else f"dim3({', '.join(cs)})"


# ------------------------------------------------------------------ template pieces
_VALUE_GUARD_RE = re.compile(
    r"^[ \t]*#[ \t]*ifndef[ \t]+KT_(\w+)[^\n]*\n"
    r"[ \t]*#[ \t]*define[ \t]+KT_\1\b[ \t]*([^\n]*?)[ \t]*(?://[^\n]*|/\*.*?\*/)?[ \t]*\n"
    r"[ \t]*#[ \t]*endif[^\n]*(?:\n|\Z)", re.M)
_KT_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+KT_(\w+)[ \t]+([^\n]*?)[ \t]*(?://[^\n]*)?(?:\n|\Z)", re.M)
_EXPERT_META_RE = re.compile(r"/\*\s*kerntune-expert:.*?\*/[ \t]*\n?", re.S)
_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include\b[^\n]*", re.M)


def _template_values(template: KernelTemplate, cfg: dict[str, int]) -> tuple[str, dict[str, str]]:
    """The template's text without its params header, its ``#ifndef KT_X`` defaults and its bind-time
    ``#define KT_X v`` lines; and the value of every ``KT_X`` they gave (``cfg`` over the originals over the
    defines over the defaults)."""
    body = strip_header(template.text)
    values: dict[str, str] = {}
    for m in _VALUE_GUARD_RE.finditer(body):
        values.setdefault(m.group(1), m.group(2).strip())
    body = _VALUE_GUARD_RE.sub("", body)
    for m in _KT_DEFINE_RE.finditer(body):
        values[m.group(1)] = m.group(2).strip()
    body = _KT_DEFINE_RE.sub("", body)
    values.update({k: str(v) for k, v in template.space.original_config().items()})
    values.update({k: str(v) for k, v in cfg.items()})
    return body, values


def _subst(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\bKT_([A-Za-z_]\w*)\b", lambda m: values.get(m.group(1), m.group(0)), text)


def _norm_include(line: str) -> str:
    return re.sub(r"\s+", "", line)


def _ident(s: str) -> str:
    return re.sub(r"\W", "_", s).strip("_") or "template"


def _fold_launch_bounds(head: str) -> str:
    m = re.search(r"__launch_bounds__\s*\(", head)
    if not m:
        return head
    i = m.end() - 1
    j = _match_paren(head, i)
    if j < 0:
        return head
    parts = []
    for a in _split_top(head[i + 1:j]):
        try:
            parts.append(str(expr.evaluate_int(a, {})))
        except Exception:
            parts.append(a)
    return head[:i + 1] + ", ".join(parts) + head[j:]


def _param_list(text_bytes: bytes, after: int) -> tuple[int, int] | None:
    """(start, end) byte offsets of the text inside the parameter list's parentheses that follow ``after``."""
    s = text_bytes[after:].decode("utf-8", "replace")
    m = re.match(r"\s*\(", s)
    if not m:
        return None
    j = _match_paren(s, m.end() - 1)
    if j < 0:
        return None
    return after + len(s[:m.end()].encode("utf-8")), after + len(s[:j].encode("utf-8"))


_SPECIALIZATION = re.compile(r"^[ \t]*template[ \t]*<[ \t]*>[^;{(]*?\b([A-Za-z_]\w*)[ \t]*<[^;{()]*>[ \t]*\(", re.M)


def _hoist_specializations(code: str) -> tuple[str, str]:
    """(``code`` without, the text of) the explicit specializations it makes of the shared helpers' templates
    (``template <> __device__ __nv_fp8_e4m3 from_f<__nv_fp8_e4m3>(float v) { ... }``: the helpers' ``from_f`` is
    declared in ``::kt``). An expert's device code goes into a namespace of its own inside ``kt`` (one per tuned
    configuration), where C++ allows no specialization of a template of ``kt``; so they move to ``kt`` itself, each
    guarded by its text (two configurations of one expert in a per-shape dispatch make the same one). A
    specialization of a template the code declares itself stays."""
    own = set(re.findall(r"\btemplate[ \t]*<[^<>]*(?:<[^<>]*>[^<>]*)*>[^;{(]*?\b(?:struct|class|[\w:<>,* ]+?)\s+"
                         r"([A-Za-z_]\w*)\s*[({;]", re.sub(r"template[ \t]*<[ \t]*>", "", code)))
    cuts, hoisted = [], []
    for m in _SPECIALIZATION.finditer(code):
        if m.group(1) in own:
            continue
        i, depth = m.end() - 1, 0
        while i < len(code):  # the parameter list, then the body (or the ';' of a declaration)
            c = code[i]
            depth += c in "({"
            depth -= c in ")}"
            if depth == 0 and (c == "}" or (c == ";" and code.rfind("{", m.end(), i) < 0)):
                break
            i += 1
        if i >= len(code):
            continue
        end = code.find("\n", i) + 1 or len(code)
        text = code[m.start():end]
        guard = f"KERNTUNE_SPECIALIZATION_{sha256_text(text.strip())[:12].upper()}"
        hoisted.append(f"#ifndef {guard}\n#define {guard}\n{text.rstrip()}\n#endif  // {guard}\n")
        cuts.append((m.start(), end))
    for a, b in reversed(cuts):
        code = code[:a] + code[b:]
    return code, "".join(hoisted)


def _support_and_kernel(template: KernelTemplate, cfg: dict[str, int], cf: CudaFile, k: Kernel,
                        before: str, kernel_name: str | None = None,
                        template_args: list[str] | None = None,
                        specialize: bool = True) -> tuple[str, str, dict[str, str]]:
    """(support code, the new kernel definition, parameter values) of a partial template; ``before`` is the
    file's text before the support code goes (the includes it has need not be repeated); the kernel is named
    ``kernel_name`` (default: the user's kernel's name). ``template_args``: the kernel is a template and the new
    definition is its explicit specialization for these arguments (``template <> ... k<args>(...)``, the
    template's parameters in the user's parameter list replaced by them); with ``specialize`` False, a plain
    kernel of its own (``kernel_name``) with that parameter list instead (an entry of a per-shape dispatch)."""
    kname = kernel_name or k.name
    body, values = _template_values(template, cfg)
    entry = template.entry or template.kernel
    rcf = parse_cuda(body, template.path or cf.path)
    if entry != k.name:  # a copy of the user's kernel inside the template would be defined twice
        dups = sorted((x.span for x in rcf.kernels if x.name == k.name), key=lambda s: -s.start)
        if dups:
            b = body.encode("utf-8")
            for s in dups:
                b = b[:s.start] + b[s.end:]
            body = b.decode("utf-8")
            rcf = parse_cuda(body, template.path or cf.path)
    ek = next((x for x in rcf.kernels if x.name == entry), None)
    if ek is None:
        raise KerntuneError(f"the tuned template ({template.origin}) has no __global__ function '{entry}': "
                            "optimize again", cf.path, k.span.line)
    rb = body.encode("utf-8")
    prefix = rb[:ek.span.start].decode("utf-8")
    suffix = rb[ek.span.end:].decode("utf-8")

    # the new kernel: the entry renamed, the user's parameter list, `extern "C"` only if the user had it
    ub = cf.text.encode("utf-8")
    user_head = ub[k.span.start:k.name_span.start].decode("utf-8")
    head = rb[ek.span.start:ek.name_span.start].decode("utf-8")
    plist = _param_list(rb, ek.name_span.end)
    uplist = _param_list(ub, k.name_span.end)
    if plist is None:
        raise KerntuneError(f"cannot read the parameter list of '{entry}' in the tuned template", cf.path, k.span.line)
    params_text = rb[plist[0]:plist[1]].decode("utf-8")
    if uplist is not None and [p.name for p in ek.params] == [p.name for p in k.params]:
        params_text = ub[uplist[0]:uplist[1]].decode("utf-8")
    if template_args is not None:
        from agent_core.source.instantiation import substitute_template_params
        params_text = substitute_template_params(params_text, k, template_args)
    rest = rb[plist[1]:ek.span.end].decode("utf-8")
    user_extern = re.match(r"\s*extern\s*\"C\"", user_head) is not None
    if not user_extern:
        head = re.sub(r"^\s*extern\s*\"C\"\s*", "", head)
    elif not re.match(r"\s*extern\s*\"C\"", head):
        head = 'extern "C" ' + head
    if template_args is not None and specialize:  # an explicit specialization takes no storage class
        head = "template <>\n" + re.sub(r"^\s*static\s+", "", head)
    elif re.search(r"\bstatic\b", user_head) and not re.search(r"\bstatic\b", head):
        head = "static " + head
    head = _fold_launch_bounds(_subst(head, values))
    kernel_text = _subst(f"{head}{kname}({params_text}{rest}", values)

    # the support code: includes the file lacks, helpers (guarded once per file), the device code (guarded
    # by its own content)
    meta = _EXPERT_META_RE.search(prefix)
    pre, device = (prefix[:meta.start()], prefix[meta.end():]) if meta else (prefix, "")
    lines = pre.splitlines(True)
    i, includes = 0, []
    while i < len(lines):
        s = lines[i].strip()
        if not s or s.startswith("//"):
            i += 1
        elif re.match(r"#\s*include\b", s):
            includes.append(s)
            i += 1
        else:
            break
    have = {_norm_include(m.group(0)) for m in _INCLUDE_RE.finditer(before)}
    new_includes = []
    for inc in includes:
        if _norm_include(inc) not in have and inc not in new_includes:
            new_includes.append(inc)
    rest_pre = "".join(lines[i:]).strip("\n")
    expert = template.origin.startswith("expert:")
    name = _ident(template.origin.split(":", 1)[1] if ":" in template.origin else template.origin)
    blocks: list[str] = []
    local: list[str] = []
    if meta is not None:
        # the helpers are shared by every expert kernel of the file, so they stay free of values: a macro of
        # theirs that reads KT_X (KT_DISPATCH_ITEMS) gets it from a #define around the device code using it
        helpers = "\n".join(new_includes + ([rest_pre] if rest_pre else [])).strip("\n")
        if helpers and not re.search(r"^[ \t]*#[ \t]*define[ \t]+KERNTUNE_EXPERT_HELPERS\b", before, re.M):
            blocks.append(f"#ifndef KERNTUNE_EXPERT_HELPERS\n#define KERNTUNE_EXPERT_HELPERS\n{helpers}\n"
                          "#endif  // KERNTUNE_EXPERT_HELPERS")
        code = _subst(device.strip("\n"), values)
        uncommented = re.sub(r"//[^\n]*|/\*.*?\*/", " ", helpers, flags=re.S)
        used: set[str] = set()
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:[^\n]*\\\n)*[^\n]*)", uncommented, re.M):
            if re.search(rf"\b{re.escape(m.group(1))}\b", code):
                used |= set(re.findall(r"\bKT_(\w+)\b", m.group(2))) & set(values)
        local = sorted(used)
    else:
        code = _subst("\n".join(new_includes + ([rest_pre] if rest_pre else [])).strip("\n"), values)
    if code:
        defs = "".join(f"#define KT_{n} {values[n]}\n" for n in local)
        tag = f"{name}_{sha256_text(defs + code)[:8]}"
        guard = f"KERNTUNE_{'EXPERT' if expert else 'TEMPLATE'}_{tag.upper()}"
        mo = re.search(r"^namespace[ \t]+kt[ \t]*\{[ \t]*\n", code, re.M)
        mcs = list(re.finditer(r"^\}[ \t]*//[ \t]*namespace[ \t]+kt[ \t]*$", code, re.M))
        if mo and mcs and mo.end() <= mcs[-1].start():
            mc = mcs[-1]
            inner, hoisted = _hoist_specializations(code[mo.end():mc.start()])
            code = (code[:mo.end()] + hoisted + f"namespace {tag} {{\nusing namespace ::kt;\n" + inner
                    + f"}}  // namespace {tag}\n" + code[mc.start():])
            kernel_text = re.sub(r"(?<![\w:])kt::", f"kt::{tag}::", kernel_text)
        if local:
            code = defs + code + "\n" + "".join(f"#undef KT_{n}\n" for n in local)
        if not re.search(rf"^[ \t]*#[ \t]*define[ \t]+{guard}\b", before, re.M):  # not there already
            blocks.append(f"#ifndef {guard}\n#define {guard}\n{code.rstrip()}\n#endif  // {guard}")
    if suffix.strip():
        kernel_text += "\n" + re.sub(rf"\b{re.escape(entry)}\b", kname, _subst(suffix.strip("\n"), values))
    return "\n".join(blocks), kernel_text, values


# ------------------------------------------------------------------ the spec's launch
def _toml_value_end(text: str, i: int) -> int:
    """Where the TOML value starting at ``text[i]`` ends (arrays, strings, bare values to the line end)."""
    if i >= len(text):
        return i
    c = text[i]
    if c == "[":
        j = _match_paren(text, i)
        return j + 1 if j >= 0 else len(text)
    if c in "\"'":
        if text.startswith(c * 3, i):
            j = text.find(c * 3, i + 3)
            return j + 3 if j >= 0 else len(text)
        j = i + 1
        while j < len(text) and text[j] != c and text[j] != "\n":
            j += 2 if c == '"' and text[j] == "\\" else 1
        return min(j + 1, len(text))
    m = re.compile(r"[^\n#]*").match(text, i)
    return i + len(m.group(0).rstrip())


def _toml_launch(nodes: list[ast.AST]) -> str:
    items = [json.dumps(spec_expr(n)) for n in nodes]
    return items[0] if len(items) == 1 else "[" + ", ".join(items) + "]"


def _spec_key_edits(text: str, start: int, end: int, hints: dict[str, int], first_line: int,
                    new: dict[str, str | None]) -> list[tuple[int, int, str]]:
    """Character-offset edits of ``text[start:end]`` (a spec comment or a sidecar table) setting the keys of
    ``new`` to their TOML values (None: leave the key alone); a key that is absent is added after ``block``."""
    edits = []
    found: dict[str, tuple[re.Match, int]] = {}
    line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
    for key in ("grid", "block", "smem"):
        pat = re.compile(rf"^([ \t]*(?:\*[ \t]+)?){key}([ \t]*=[ \t]*)", re.M)
        m = None
        ln = hints.get(key)
        if ln is not None and ln < len(line_starts):
            m = pat.match(text, line_starts[ln])
            if m and not start <= m.start() < end:
                m = None
        if m is None:
            m = pat.search(text, start, end)
        if m is not None:
            found[key] = (m, _toml_value_end(text, m.end()))
    for key, val in new.items():
        if val is None:
            continue
        if key in found:
            m, ve = found[key]
            edits.append((m.end(), ve, val))
        elif "block" in found or "grid" in found:
            m, ve = found.get("block") or found["grid"]
            edits.append((ve, ve, f"\n{m.group(1)}{key} = {val}"))
        else:
            raise KerntuneError("cannot find `grid` and `block` in the spec to rewrite them", None, first_line)
    return sorted(edits)


def _char_edits_to_bytes(text: str, edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    if text.isascii():
        return edits
    return [(len(text[:s].encode("utf-8")), len(text[:e].encode("utf-8")), r) for s, e, r in edits]


def _apply_char_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for s, e, r in sorted(edits):
        out += [text[pos:s], r]
        pos = e
    out.append(text[pos:])
    return "".join(out)


# ------------------------------------------------------------------ launch sites
def _host_dims(text: str, site: LaunchSite, source: str) -> list[str] | None:
    """The components of a launch dimension as the host writes it: ``dim3(a, b)``, a ``dim3`` variable
    declared before the launch, or a plain expression. None when they cannot be read."""
    t = text.strip()
    m = re.fullmatch(r"dim3\s*([({])(.*)([)}])", t, re.S)
    if m and _match_paren(t, m.start(1)) == len(t) - 1:
        return _split_top(m.group(2)) or None
    hv = site.host_vars.get(t)
    if hv is not None and re.search(r"\bdim3\b", hv.type):
        if hv.init is None:  # `dim3 grid(tokens);` reads as a function declaration to the parser
            decl = source.encode("utf-8")[hv.span.start:hv.span.end].decode("utf-8", "replace").strip()
            m = re.fullmatch(rf"{re.escape(hv.name)}\s*(\(.*\))", decl, re.S)
            if not m:
                return None
            it = "dim3" + m.group(1)
        else:
            it = hv.init.text.strip()
        m = re.fullmatch(r"[\w:]*\s*([({])(.*)([)}])", it, re.S)
        if m and _match_paren(it, m.start(1)) == len(it) - 1:
            return _split_top(m.group(2)) or None
        return [it]
    if re.fullmatch(r"dim3\s*[({].*", t, re.S):
        return None
    return [t]


def _reassigned(text: str, name: str, start: int, end: int) -> bool:
    """Whether host code between byte offsets ``start`` and ``end`` may change variable ``name``."""
    seg = text.encode("utf-8")[start:end].decode("utf-8", "replace")
    n = re.escape(name)
    return re.search(rf"\b{n}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{n}\b|\b{n}\s*(?:\+\+|--)|&\s*{n}\b",
                     seg) is not None


def _host_values(site: LaunchSite, spec: TuningSpec, old_values: dict[str, int], text: str) -> dict[str, str]:
    """What the launch site gives for the spec's names: ``ast.dump`` of a size name (or of a whole spec
    expression) -> the C text that holds its value at this launch. A kernel scalar whose spec value is an
    expression of sizes gives the argument passed at its position; a grid/block/smem component the same; a
    local variable declared before the launch (and not changed since) whose initializer is an expression of
    those gives itself (``total = (long long)tokens * heads * head_size``)."""
    from agent_core.source import spec as spec_mod
    host: dict[str, str] = {}
    by_name: dict[str, str] = {}
    products: list[tuple[list[str], str]] = []  # (the size names a product multiplies, the host text of it)

    def add(e: str, h: str) -> None:
        try:
            n = fold(e, old_values)
        except expr.ExprError:
            return
        if isinstance(n, ast.Constant) or not h.strip():
            return
        host.setdefault(ast.dump(n), h.strip())
        if isinstance(n, ast.Name):
            by_name.setdefault(n.id, h.strip())
        factors = _product_names(n)
        if factors and len(factors) > 1:
            products.append((factors, h.strip()))

    for i, a in enumerate(spec.args):
        if a.role == "scalar" and i < len(site.args):
            add(a.value, site.args[i].text)
    for idx, comps in ((0, spec.grid), (1, spec.block)):
        if idx < len(site.config):
            hc = _host_dims(site.config[idx].text, site, text)
            if hc is None:
                continue
            n = max(len(hc), len(comps))
            for e, h in zip(list(comps) + ["1"] * (n - len(comps)), hc + ["1"] * (n - len(hc))):
                add(e, h)
    if len(site.config) > 2:
        add(spec.smem or "0", site.config[2].text)
    inverse = {h: n for n, h in by_name.items() if re.fullmatch(r"[A-Za-z_]\w*", h)}
    for hv in site.host_vars.values():
        if hv.init is None or re.search(r"\bdim3\b", hv.type) or hv.name in inverse:
            continue
        cleaned = spec_mod._clean_host_expr(hv.init.text)
        if cleaned is None:
            continue
        try:
            used = expr.names(cleaned)
        except expr.ExprError:
            continue
        if not used or not used <= set(inverse) or _reassigned(text, hv.name, hv.span.end, site.span.start):
            continue
        renamed = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: inverse.get(m.group(0), m.group(0)), cleaned)
        try:
            node = fold(renamed, old_values)
        except expr.ExprError:
            continue
        if not isinstance(node, ast.Constant):
            host.setdefault(ast.dump(node), hv.name)
    # a size the launch passes only inside a product (`k` = rows * n, and `n`): the product over the others
    for factors, h in products:
        missing = [f for f in factors if f not in by_name]
        if len(missing) == 1 and factors.count(missing[0]) == 1:
            others = " * ".join(_paren(by_name[f]) for f in factors if f != missing[0])
            by_name[missing[0]] = f"{_paren(h)} / {_paren(others) if '*' in others else others}"
            host.setdefault(ast.dump(ast.Name(missing[0], ast.Load())), by_name[missing[0]])
    return host


def _product_names(n: ast.AST) -> list[str] | None:
    """The names a product of names multiplies (``rows * n`` -> [rows, n]); None for any other expression."""
    if isinstance(n, ast.Name):
        return [n.id]
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
        a, b = _product_names(n.left), _product_names(n.right)
        return a + b if a is not None and b is not None else None
    return None


def _paren(c: str) -> str:
    return c if re.fullmatch(r"[A-Za-z_][\w.]*|\d+", c.strip()) else f"({c})"


def _spec_launch_words(grid: list[ast.AST], block: list[ast.AST], smem: ast.AST) -> str:
    s = f"grid = {_toml_launch(grid)}, block = {_toml_launch(block)}"
    if not (_is_int_const(smem) and smem.value == 0):
        s += f", smem = {json.dumps(spec_expr(smem))}"
    return s


# ------------------------------------------------------------------ the rewrite
def _insertion_point(cf: CudaFile, k: Kernel, spec: TuningSpec | None, text: str) -> int:
    """Byte offset where support code goes: above the kernel's spec comment (it must stay directly above the
    kernel), outside any namespace or ``extern "C" { }`` block the kernel is in, at a line start."""
    b = text.encode("utf-8")
    point = k.span.start
    if spec is not None and spec.span is not None and spec.span.end <= k.span.start:
        point = spec.span.start
    from agent_core.source.cuda_parse import parse_tree
    node = parse_tree(b).root_node.descendant_for_byte_range(k.span.start, k.span.start)
    while node is not None:
        if node.type in ("namespace_definition", "linkage_specification") and \
                any(c.type == "declaration_list" for c in node.children):
            point = min(point, node.start_byte)
        node = node.parent
    ls = b.rfind(b"\n", 0, point) + 1
    if not b[ls:point].strip():
        point = ls
    return point


# the check an expert's wrapper makes of a run-time flag its binding holds at one value (experts.render: one line a
# flag, from Binding.pinned): read back from a stored template, which keeps no binding
_HELD = re.compile(r"if \(\(long long\)\((\w+)\) != (-?\d+)LL\) __trap\(\);  // kerntune: `\1` verified at \2 only")


def held_flags(template: KernelTemplate | None) -> dict[str, int]:
    """The run-time flags ``template`` (an expert bound to the kernel) holds at one value: the kernel's scalar
    arguments its expert does not take, verified at the spec's value only (``Binding.pinned``). Its kernel traps on
    another value; a rewrite launches it only where the flag has that value and the original kernel elsewhere."""
    if template is None:
        return {}
    return {m.group(1): int(m.group(2)) for m in _HELD.finditer(template.text)}


def _held_condition(site: LaunchSite, k: Kernel, held: dict[str, int], path: str) -> str:
    """A C condition that the launch at ``site`` passes every held flag its held value (over the launch's own
    argument expressions)."""
    names = [p.name for p in k.params]
    parts = []
    for n, v in held.items():
        if n not in names or names.index(n) >= len(site.args):
            raise KerntuneError(f"the tuned kernel is verified with `{n}` = {v} only, and this launch of '{k.name}' "
                                f"does not pass `{n}` where the rewrite could test it (so that another value launches "
                                "the original kernel): nothing was changed", path, site.span.line, site.span.col)
        a = site.args[names.index(n)].text.strip()
        parts.append(f"(long long)({a}) == {v}LL")
    return " && ".join(parts)


def _held_words(held: dict[str, int]) -> str:
    return " and ".join(f"`{n}` = {v}" for n, v in held.items())


def rewrite_file(text: str, path: str | Path, kernel: str, template: KernelTemplate, cfg: dict[str, int],
                 spec: TuningSpec | None = None, cf: CudaFile | None = None) -> Rewrite:
    """The user's file (``text``, at ``path``) with ``kernel`` tuned to ``cfg`` of ``template``.

    A whole-file template (structural, or one that kept the host code and the spec) is rendered as it is. A
    partial one (an expert's or an LLM's) is written in place: the kernel's definition becomes the template's
    support code (guarded so that a second kernel rewritten later does not define it twice) and its entry,
    renamed to the kernel, with the kernel's parameter list; the spec's grid/block/smem become the template's
    launch at ``cfg``; every launch site of the kernel in the file launches that, over the host's own values.
    Raises KerntuneError (and changes nothing) when a launch site does not give a size the launch needs."""
    path = str(path)
    if template.origin == "structural" or template.sites:
        new = render(template, cfg)
        return _whole_file_rewrite(text, path, kernel, new, cf)
    cf = cf if cf is not None else parse_cuda(text, path)
    k = cf.kernel(kernel)
    if is_whole_file(template, cf):
        new = render(template, cfg)
        return _whole_file_rewrite(text, path, kernel, new, cf)
    if held_flags(template):
        # verified at one value of a run-time flag: the original kernel stays beside it for the other values
        from agent_core.source import spec as spec_mod
        sp = spec if spec is not None else spec_mod.find_spec(cf, kernel)
        if sp is None:
            raise KerntuneError(f"'{kernel}' has no tuning spec", path, k.span.line)
        # a dispatch of that configuration for every size: rewrite_dispatch writes the original beside it
        from agent_core.agent import dispatch as dsp
        one = dsp.single(dsp.Candidate(template.template_hash, template.origin, dict(cfg), [], []), sp.sizes)
        rw = rewrite_dispatch(text, path, kernel, [(template, cfg)], one, spec, cf)
        rw.dispatch = None  # one configuration for every size, written as such
        return rw
    # a launch written inside one of the file's own macros: written out (expanded) at the uses that launch it
    expanded, cf = expand_macro_launches(text, path, kernel, spec, cf)
    if expanded != text:
        text, spec, k = expanded, None, cf.kernel(kernel)
    if k.template_params:
        return _rewrite_specialization(text, path, cf, k, template, cfg, spec)
    spec, start, old_values = _in_place_context(text, path, cf, k, spec, template)
    support, kernel_text, values = _support_and_kernel(template, cfg, cf, k,
                                                       text.encode("utf-8")[:start].decode("utf-8", "replace"))
    params = {**template.space.original_config(), **cfg}
    grid, block, smem, same = _tuned_launch(template, params, spec, old_values, path, k)
    launch_words = _spec_launch_words(grid, block, smem)

    warnings: list[str] = []
    edits: list[tuple[int, int, str]] = []  # byte offsets into text
    # launch sites
    if not same:
        macro_launch_refusal(cf, k, spec, path, f"the launch {launch_words}")
        for site in sorted(k.launch_sites, key=lambda s: s.span.start):
            host = _host_values(site, spec, old_values, text)
            edits.append((site.config[0].span.start, site.config[-1].span.end,
                          _site_config(site, grid, block, smem, host, kernel, template.origin, launch_words, path)))
        if not k.launch_sites:
            warnings.append(f"{path}: '{kernel}' is not launched in this file: its host launch must now be "
                            f"{launch_words} (in the spec's size names)")

    # the kernel and its support code
    vals = ", ".join(f"{n}={params[n]}" for n in sorted(params))
    note = f"// kerntune: {kernel} from the {template.origin} template, tuned: {vals}\n"
    edits.append((start, start, note + (support + "\n\n" if support else "")))
    edits.append((k.span.start, k.span.end, kernel_text))

    return _in_place_rewrite(text, path, k, spec, edits, warnings, None if same else (grid, block, smem))



def _whole_file_rewrite(text: str, path: str, kernel: str, new: str, cf: CudaFile | None) -> Rewrite:
    """The ``Rewrite`` of a whole-file template rendered as ``new``; refused where the kernel has a launch inside
    a macro's body (``macro_launch_refusal``) and the rendered spec launches it otherwise than the file's."""
    new_spec = _spec_of(new, path, kernel)
    if b"<<<" in text.encode("utf-8") and "define" in text:
        from agent_core.source import spec as spec_mod
        cf = cf if cf is not None else parse_cuda(text, path)
        k = next((x for x in cf.kernels if x.name == kernel), None)
        if k is not None and k.macro_launch_sites:
            old_spec = spec_mod.find_spec(cf, kernel)
            launch = (lambda sp: None if sp is None else ([" ".join(g.split()) for g in sp.grid],
                                                          [" ".join(b.split()) for b in sp.block],
                                                          " ".join((sp.smem or "0").split())))
            if launch(old_spec) is None or launch(old_spec) != launch(new_spec):
                needs = ("its launch as the rendered spec gives it" if new_spec is None else
                         f"grid {', '.join(new_spec.grid)}, block {', '.join(new_spec.block)}, dynamic shared "
                         f"memory {new_spec.smem or '0'} (the spec's names)")
                macro_launch_refusal(cf, k, old_spec, path, needs)
    return Rewrite(new, None, [], False, new_spec)


def _rewrite_specialization(text: str, path: str, cf: CudaFile, k: Kernel, template: KernelTemplate,
                            cfg: dict[str, int], spec: TuningSpec | None) -> Rewrite:
    """``rewrite_file`` for a kernel template (agent_core.source.instantiation): the template stays for every
    other instantiation; below it goes the tuned kernel as the explicit specialization of the one the spec tunes
    (``template <> __global__ void k<__half>(...)``), its support code above the template. A launch of that
    instantiation gets the tuned launch; a launch of another keeps its own; a launch whose template arguments
    are the enclosing function's (``k<T>`` in a templated launcher) becomes ``if (std::is_same<T, __half>::value)
    <tuned launch> else <its launch>``. The spec's launch becomes the tuned one (the spec describes that
    instantiation)."""
    from agent_core.source import instantiation as inst
    spec, start, old_values = _in_place_context(text, path, cf, k, spec, template, specialize=True)
    args = inst.spec_instantiation(cf, k, spec)
    name = inst.specialization_name(k, args)
    line = inst.specialized_at(cf, k, args)
    if line is not None:
        raise KerntuneError(f"'{name}' is already specialized (line {line + 1}), by an earlier apply or by hand: "
                            "undo that first, then optimize and apply again", path, line)
    sites = [(site, inst.site_instance(cf, k, site, args)) for site in sorted(k.launch_sites,
                                                                              key=lambda s: s.span.start)]
    support, kernel_text, _ = _support_and_kernel(template, cfg, cf, k,
                                                  text.encode("utf-8")[:start].decode("utf-8", "replace"),
                                                  kernel_name=name, template_args=args)
    params = {**template.space.original_config(), **cfg}
    grid, block, smem, same = _tuned_launch(template, params, spec, old_values, path, k)
    launch_words = _spec_launch_words(grid, block, smem)
    raw = text.encode("utf-8")

    warnings: list[str] = []
    edits: list[tuple[int, int, str]] = []  # byte offsets into text
    traits = False
    if not same:
        macro_launch_refusal(cf, k, spec, path, f"the launch {launch_words}")
        for site, what in sites:
            if what.kind == "other":
                continue
            host = _host_values(site, spec, old_values, text)
            cfg_text = _site_config(site, grid, block, smem, host, k.name, template.origin, launch_words, path)
            if what.kind == "same":
                edits.append((site.config[0].span.start, site.config[-1].span.end, cfg_text))
                continue
            if not what.condition:
                raise KerntuneError(f"this launch of '{k.name}' may instantiate {name} (its template arguments are "
                                    "the enclosing function's), and no condition can tell (a template template "
                                    "argument differs): launch the instantiation by name there. Nothing was changed",
                                    path, site.span.line, site.span.col)
            stmt = _launch_statement(text, site)
            if stmt is None:
                raise KerntuneError(f"this launch of '{k.name}' may instantiate {name} (its template arguments are "
                                    "the enclosing function's) and is part of a larger expression: it needs to be a "
                                    "statement of its own (`k<T><<<...>>>(...);`) for an if/else between the tuned "
                                    "launch and its own. Nothing was changed", path, site.span.line, site.span.col)
            call = raw[site.span.start:site.span.end].decode("utf-8", "replace")
            c0, c1 = site.config[0].span.start - site.span.start, site.config[-1].span.end - site.span.start
            tuned = call[:c0] + cfg_text + call[c1:] + ";"
            own = raw[stmt[0]:stmt[1]].decode("utf-8", "replace")
            indent = _indent_at(raw, stmt[0])
            inner = indent + "  "
            edits.append((stmt[0], stmt[1], f"if ({what.condition}) {{  // kerntune: the tuned {name}\n"
                                            f"{inner}{_deeper(tuned)}\n{indent}}} else {{\n{inner}{_deeper(own)}\n"
                                            f"{indent}}}"))
            traits = traits or what.needs_type_traits
        if not any(what.kind != "other" for _, what in sites):
            warnings.append(f"{path}: no launch of '{k.name}' in this file makes {name}: its host launch must be "
                            f"{launch_words} (in the spec's size names)")
    if traits:
        edits += _type_traits_include(text, raw, start, "launch")

    vals = ", ".join(f"{n}={params[n]}" for n in sorted(params))
    if support:
        edits.append((start, start, f"// kerntune: support code of {name} ({template.origin} template)\n"
                                    + support + "\n\n"))
    note = (f"// kerntune: {name} from the {template.origin} template, tuned: {vals}; the template above stays "
            "for the other instantiations\n")
    edits.append((k.span.end, k.span.end, "\n\n" + note + kernel_text))

    return _in_place_rewrite(text, path, k, spec, edits, warnings, None if same else (grid, block, smem))


_TYPE_WORDS = {"float", "double", "half", "__half", "half2", "__half2", "__nv_bfloat16", "nv_bfloat16",
               "__nv_bfloat162", "nv_bfloat162", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "int", "unsigned", "char",
               "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "bool"}


def _macro_site_other(site: LaunchSite, args: list[str] | None) -> bool:
    """A launch read through a macro certainly makes another instantiation than ``args`` (the spec's): at some
    position both are different integer literals, or different built-in type names. Anything else (the same
    arguments, names whose values are not known here) may be the spec's."""
    if args is None:
        return False
    for a, b in zip((" ".join(e.text.split()) for e in site.template_args), (" ".join(x.split()) for x in args)):
        if a == b:
            continue
        ia, ib = re.fullmatch(r"\d+[uUlL]*", a), re.fullmatch(r"\d+[uUlL]*", b)
        if ia and ib and int(a.rstrip("uUlL")) != int(b.rstrip("uUlL")):
            return True
        if a in _TYPE_WORDS and b in _TYPE_WORDS:
            return True
    return False


def macro_launch_refusal(cf: CudaFile, k: Kernel, spec: TuningSpec | None, path: str, needs: str) -> None:
    """Raise KerntuneError (nothing is written) at the first launch of ``k`` written inside a macro's body
    (``Kernel.macro_launch_sites``) that may make the instantiation the spec tunes, when what is applied changes
    the kernel's launch (``needs``: the launch it needs, in words). Such a launch is the macro's text, shared by
    every use of the macro (which may pass other arguments, or be used for other kernels) and often holding other
    statements (``block.x /= ITEMS;``): it is not rewritten, and leaving it as it is would launch the tuned kernel
    with the old configuration."""
    if not k.macro_launch_sites:
        return
    args = None
    if k.template_params and spec is not None:
        from agent_core.source import instantiation as inst
        try:
            args = inst.spec_instantiation(cf, k, spec)
        except KerntuneError:
            args = None
    for site in k.macro_launch_sites:
        if k.template_params and _macro_site_other(site, args):
            continue  # another instantiation keeps its launch (and the kernel template it launches)
        raise KerntuneError(f"this launch of '{k.name}' is written inside the macro '{site.macro}' (used here; it "
                            f"expands to `{site.expansion}`): kerntune does not rewrite a launch inside a macro's "
                            f"body (the macro's text is shared by its every use), and the tuned kernel needs "
                            f"{needs}. Nothing was changed: write that launch out at this use (or apply a "
                            "configuration that keeps the kernel's launch)", path, site.span.line, site.span.col)


# ------------------------------------------------------------------ launches written inside the file's own macros
_UNFAITHFUL_IDS = {"__LINE__": "`__LINE__` (the line would change)", "__FILE__": "`__FILE__`",
                   "__COUNTER__": "`__COUNTER__` (its value depends on the order of expansion)",
                   "__VA_OPT__": "`__VA_OPT__`"}


def _macro_unfaithful(ex, m, args_text: str | None, offset: int, seen: set[str] | None = None) -> str | None:
    """Why the use of macro ``m`` (``args_text``: between its parentheses) cannot be written out as its expansion
    exactly as the preprocessor makes it (None: it can). Checks ``m``'s body and every launching macro it calls."""
    from agent_core.source import macros as M
    seen = set() if seen is None else seen
    if m.name in seen:
        return None
    seen.add(m.name)
    toks = [x for x in M._tokens(m.body) if x[0] != "ws"]
    va = (m.params[-1][:-3].strip() or "__VA_ARGS__") if m.variadic else None
    given = M.split_args(args_text) if args_text is not None else None
    for i, (kind, t) in enumerate(toks):
        # GNU's `, ## __VA_ARGS__` where the use gives variadic arguments: just `, <them>`
        if kind == "paste" and va and given and len(given) >= len(m.params) and any(given[len(m.params) - 1:]) \
                and 0 < i < len(toks) - 1 and toks[i - 1][1] == "," and toks[i + 1][1] == va:
            continue
        if kind in ("hash", "paste"):
            return (f"the body of '{m.name}' uses `{t}` (stringizing or token pasting), which kerntune does not "
                    "write out")
        if kind == "id" and t in _UNFAITHFUL_IDS:
            return f"the body of '{m.name}' uses {_UNFAITHFUL_IDS[t]}"
        if kind == "id" and t != m.name:
            inner = ex.macro_at(t, offset)
            if inner is not None:
                why = _macro_unfaithful(ex, inner, None, offset, seen)
                if why:
                    return why
    for kind, t in M._tokens(args_text or ""):
        if kind == "id" and t in _UNFAITHFUL_IDS:
            return f"the use's arguments hold {_UNFAITHFUL_IDS[t]}"
    return None


def _balanced(text: str) -> bool:
    from agent_core.source import macros as M
    stack = []
    for kind, t in M._tokens(text):
        if kind != "other":
            continue
        if t in "([{":
            stack.append(t)
        elif t in ")]}":
            if not stack or stack.pop() != {")": "(", "]": "[", "}": "{"}[t]:
                return False
    return not stack


def _laid_out(m, data: bytes):
    """``m`` with its body keeping the ``#define``'s line breaks (continuations become newlines, the common
    indentation removed), where that is the same body as the preprocessor's one line (no ``//`` comment that a
    continuation extends); else ``m`` as it is."""
    import textwrap
    from agent_core.source import macros as M
    got = M._DEFINE.match(data, m.start)
    if got is None:
        return m
    raw = got.group(3).decode("utf-8", "replace")
    multi = M._COMMENT.sub(" ", re.sub(r"\\\r?\n", "\n", raw))
    if multi.split() != m.body.split():
        return m
    lines = [ln.rstrip() for ln in multi.split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    body = textwrap.dedent("\n".join(lines))
    return M.Macro(m.name, m.params, body, m.start, m.end)


def expand_macro_launches(text: str, path: str, kernel: str, spec: TuningSpec | None = None,
                          cf: CudaFile | None = None) -> tuple[str, CudaFile]:
    """``text`` with the uses of the file's own macros that hold a launch of ``kernel`` the rewrite must edit
    written out: each use whose expansion holds a launch that may make the instantiation the spec tunes
    (``Kernel.macro_launch_sites``), and each use whose argument holds a launch of a kernel template whose
    instantiation the expansion decides (PaddlePaddle's ``FIXED_BLOCK_DIM_CASE(k<T, kBlockDim><<<...>>>(...))``,
    ``kBlockDim`` a constant the macro's body declares). Such a use is replaced by its expansion, exactly as the
    preprocessor makes it there (the body with the use's arguments substituted, its line breaks kept), under a
    ``// kerntune: LAUNCH_X(...) expanded to tune this launch`` line, so that the launch can be rewritten like any
    launch written out. Other uses, and the ``#define``s, stay. Returns (text, its parse); ``text`` unchanged where
    there is nothing to expand. KerntuneError (nothing is written) where the expansion would not be the
    preprocessor's (``#``/``##``, ``__LINE__``, ``__VA_OPT__`` in the macro) or is not a complete statement at the
    use (unbalanced, or its launch not read back as a launch of the kernel)."""
    from agent_core.source import macros as M
    cf = cf if cf is not None else parse_cuda(text, path)
    k = next((x for x in cf.kernels if x.name == kernel), None)
    if k is None or "define" not in text:
        return text, cf
    args = None
    if k.template_params:
        from agent_core.source import instantiation as inst
        from agent_core.source import spec as spec_mod
        sp = spec if spec is not None else spec_mod.find_spec(cf, kernel)
        try:
            args = inst.spec_instantiation(cf, k, sp) if sp is not None else None
        except KerntuneError:
            args = None
    data = text.encode("utf-8")
    defs = M.scan_defines(data)
    targets: dict[int, tuple] = {}  # use start -> (the use, its Expander, the site, the refusal's words)
    if k.macro_launch_sites:
        ex = M.Expander(defs, M.launching(defs))
        found = {u[1]: u for u in M.uses(data, set(ex.defs))}
        for site in k.macro_launch_sites:
            if k.template_params and _macro_site_other(site, args):
                continue  # another instantiation: its use stays as it is
            where = (f"this launch of '{kernel}' is written inside the macro '{site.macro}' (used here; it expands "
                     f"to `{site.expansion}`)")
            targets.setdefault(site.span.start, (found.get(site.span.start), ex, site, where))
    if k.template_params and args is not None and k.launch_sites:
        from agent_core.source.instantiation import site_instance
        fn = {m.name for m in defs if m.params is not None}
        arg_uses = M.uses(data, fn) if fn else []
        for site in k.launch_sites:
            use = next((u for u in arg_uses if u[3] is not None and u[1] < site.span.start
                        and site.span.end <= u[2]), None)
            if use is None or use[1] in targets:
                continue
            try:
                if site_instance(cf, k, site, args).kind != "depends":
                    continue  # the launch's instantiation is known where it is written: rewritten in place
            except KerntuneError:
                continue
            if _launch_statement(text, site) is not None:
                continue  # a statement of its own in the argument: an if/else between the launches goes there
            # the macros the use's expansion goes through: the one used and those its body calls, transitively
            names, todo = set(), [use[0]]
            byname = {m.name: m for m in defs}
            while todo:
                n = todo.pop()
                if n in names or n not in byname:
                    continue
                names.add(n)
                todo += [t for kd, t in M._tokens(byname[n].body) if kd == "id" and t in byname]
            where = (f"this launch of '{kernel}' is written in an argument of the macro '{use[0]}', whose expansion "
                     "decides which instantiation it makes")
            targets[use[1]] = (use, M.Expander(defs, names), site, where)
    if not targets:
        return text, cf
    edits = []
    for at, (use, ex, site, where) in sorted(targets.items()):

        def refuse(why: str) -> KerntuneError:
            return KerntuneError(f"{where}: kerntune writes such a launch out at its use (the macro's expansion) to "
                                 f"tune it, but {why}. Nothing was changed: write that launch out at this use (or "
                                 "apply a configuration that keeps the kernel's launch)",
                                 path, site.span.line, site.span.col)
        m = ex.macro_at(use[0], at) if use is not None else None
        if m is None:
            raise refuse("its use is not found in the file's code")
        name, s, e, a = use
        why = _macro_unfaithful(ex, m, a, s)
        if why:
            raise refuse(why)
        laid = M.Expander([_laid_out(d, data) for d in defs], set(ex.defs))
        expansion = laid.expand_use(laid.macro_at(name, s), a, s)
        if expansion is None or expansion.split() != (ex.expand_use(m, a, s) or "").split():
            raise refuse("its expansion cannot be written out exactly")
        again = sorted({t for kd, t in M._tokens(expansion) if kd == "id" and t in ex.defs})
        if again:
            raise refuse(f"its expansion names the macro '{again[0]}' again (the preprocessor would not expand it "
                         "there, written out it would be)")
        if not _balanced(expansion):
            raise refuse("its expansion is not a complete statement at the use (its parentheses or braces are "
                         "closed by the code around the use)")
        ls = data.rfind(b"\n", 0, s) + 1
        before = data[ls:s].decode("utf-8", "replace")
        indent = before[:len(before) - len(before.lstrip())]
        lead = ""
        if before.strip():  # the use is not the first thing on its line: the expansion starts a line of its own
            indent += "  "
            lead = "\n" + indent
        written = " ".join(f"{name}({a})".split()) if a is not None else name
        if len(written) > 100:
            written = written[:96] + " ...)"
        body = ("\n" + indent).join(expansion.split("\n"))
        after = re.match(rb"[ \t]*;", data[e:])
        if after and expansion.rstrip().endswith(";"):  # `LAUNCH(4);` of a body ending in `;`: one `;`, not `;;`
            e += after.end()
        edits.append((s, e, f"{lead}// kerntune: {written} expanded to tune this launch\n{indent}{body}"))
    new = apply_edits(text, edits)
    ncf = parse_cuda(new, path)
    nk = next((x for x in ncf.kernels if x.name == kernel), None)
    shift = 0
    for (s, e, rep), (use, ex, site, where) in zip(edits, [targets[t] for t in sorted(targets)]):
        ns, ne = s + shift, s + shift + len(rep.encode("utf-8"))
        shift += len(rep.encode("utf-8")) - (e - s)
        if nk is None or any(ns <= x.span.start < ne for x in nk.macro_launch_sites) or \
                not any(ns <= x.span.start and x.span.end <= ne for x in nk.launch_sites):
            raise KerntuneError(f"{where}: written out at its use, the expansion is not read back as a launch of the "
                                "kernel (it is not a complete statement there). Nothing was changed: write that "
                                "launch out at this use", path, site.span.line, site.span.col)
    return new, ncf

def _tuned_launch(template: KernelTemplate, params: dict[str, int], spec: TuningSpec, old_values: dict[str, int],
                  path: str, k: Kernel) -> tuple[list[ast.AST], list[ast.AST], ast.AST, bool]:
    """The template's launch at ``params``, folded (``_folded_launch``), and whether it is the spec's own launch
    as the kernel has it now (then no launch site or spec changes)."""
    grid, block, smem = _folded_launch(template, params, spec, old_values, path, k)
    old_grid, old_block = _dims(spec.grid, old_values), _dims(spec.block, old_values)
    old_smem = fold(spec.smem or "0", old_values)
    same = [ast.dump(n) for n in grid + [ast.Constant(0)] + block + [ast.Constant(0), smem]] == \
        [ast.dump(n) for n in old_grid + [ast.Constant(0)] + old_block + [ast.Constant(0), old_smem]]
    return grid, block, smem, same


def _in_place_rewrite(text: str, path: str, k: Kernel, spec: TuningSpec, edits: list[tuple[int, int, str]],
                      warnings: list[str], launch: tuple[list[ast.AST], list[ast.AST], ast.AST] | None) -> Rewrite:
    """The ``Rewrite`` of an in-place rewrite: ``edits`` (byte offsets into ``text``) applied, the spec's launch
    set to ``launch`` (None: unchanged), and the kernel's spec read back from the result."""
    sidecar = None
    if launch is not None:
        edits_spec, sidecar = _spec_launch_edits(text, path, k.name, spec, _spec_values(spec, *launch))
        edits = edits + edits_spec
    new = apply_edits(text, sorted(edits, key=lambda e: (e[0], e[1])))
    new_spec = _spec_of(new, path, k.name, sidecar)
    if new_spec is None:
        raise KerntuneError(f"internal: the rewritten spec of '{k.name}' cannot be read back", path, k.span.line)
    return Rewrite(new, sidecar, warnings, True, new_spec, [(k.name, new_spec)])


def _in_place_context(text: str, path: str, cf: CudaFile, k: Kernel, spec: TuningSpec | None,
                      template: KernelTemplate, specialize: bool = False) -> tuple[TuningSpec, int, dict[str, int]]:
    """(the kernel's spec, the byte offset where support code goes, the values of the kernel's own tunables)
    for an in-place rewrite; KerntuneError when the kernel cannot be rewritten in place (a kernel template
    unless ``specialize``: then an explicit specialization is written beside it)."""
    from agent_core.source import spec as spec_mod
    if spec is None:
        spec = spec_mod.find_spec(cf, k.name)
    if spec is None:
        raise KerntuneError(f"kernel '{k.name}' has no tuning spec: cannot rewrite its launch", path, k.span.line)
    if k.template_params and not specialize:
        raise KerntuneError(f"kernel '{k.name}' is a template: a per-shape dispatch of {template.origin} kernels "
                            "cannot be written for it; apply one configuration (--single)", path, k.span.line)
    start = _insertion_point(cf, k, spec, text)
    try:
        from agent_core.templating.templatize import templatize
        old_values = templatize(cf, k.name).space.original_config()
    except Exception:
        old_values = {}
    return spec, start, old_values


def _folded_launch(template: KernelTemplate | None, params: dict[str, int], spec: TuningSpec, old_values: dict[str, int],
                   path: str, k: Kernel) -> tuple[list[ast.AST], list[ast.AST], ast.AST]:
    """The template's (or the spec's) launch at ``params``, folded: (grid, block, smem) expression trees over
    the spec's size names, checked to give the template's launch on every size set."""
    from agent_core.source import spec as spec_mod
    src = (template.launch if template is not None else None) or {"grid": spec.grid, "block": spec.block,
                                                                   "smem": spec.smem}
    lv = {**old_values, **params}
    grid, block = _dims(src["grid"], lv), _dims(src["block"], lv)
    smem = fold(src.get("smem") or "0", lv)
    for i, s in enumerate(spec.sizes):  # the folded launch is the template's, on every size set
        want = spec_mod.launch(src, s, lv)
        got = spec_mod.launch({"grid": [spec_expr(n) for n in grid], "block": [spec_expr(n) for n in block],
                               "smem": spec_expr(smem)}, s)
        if want != got:
            raise KerntuneError(f"internal: the simplified launch {got} differs from the template's {want} "
                                f"on size set {i + 1}", path, k.span.line)
    return grid, block, smem


def _unmapped_error(e: "_Unmapped", kernel: str, origin: str, needs: str, path: str, site: LaunchSite) -> KerntuneError:
    what = (f"the size(s) {', '.join(f'`{n}`' for n in sorted(e.names))} of the spec, which this launch does not "
            "pass (neither as a kernel argument whose spec value is that size nor as a launch dimension that is)"
            if e.names else e.why)
    return KerntuneError(f"cannot rewrite this launch of '{kernel}' for the tuned kernel ({origin}): it must "
                         f"{needs} (in the spec's size names), and that needs {what}. Nothing was changed: pass the "
                         "size to the launch, or change the launch by hand after applying",
                         path, site.span.line, site.span.col)


def _site_config(site: LaunchSite, grid: list[ast.AST], block: list[ast.AST], smem: ast.AST, host: dict[str, str],
                 kernel: str, origin: str, launch_words: str, path: str) -> str:
    """The text between ``<<<`` and ``>>>`` of one launch site for the folded launch, over the host's values
    (the site's stream and any further argument kept as written)."""
    try:
        g, b_ = _launch_text(grid, host), _launch_text(block, host)
        sm = to_c(smem, host)
    except _Unmapped as e:
        raise _unmapped_error(e, kernel, origin, f"launch {launch_words}", path, site) from None
    parts = [g, b_]
    if len(site.config) >= 4:
        parts += [sm] + [c.text for c in site.config[3:]]
    elif len(site.config) == 3 or sm != "0":
        parts.append(sm)
    return ", ".join(parts)


def _spec_values(spec: TuningSpec, grid: list[ast.AST], block: list[ast.AST], smem: ast.AST) -> dict[str, str | None]:
    """The spec's new ``grid``/``block``/``smem`` TOML values (``smem`` None: leave it as it is)."""
    return {"grid": _toml_launch(grid), "block": _toml_launch(block),
            "smem": json.dumps(spec_expr(smem)) if (spec.smem and spec.smem.strip() != "0") or
            not (_is_int_const(smem) and smem.value == 0) else None}


def _sidecar_table(st: str, kernel: str, sp: str) -> tuple[int, int]:
    """(start, end) character offsets of the table ``[kernel]`` in the sidecar text ``st``."""
    hdr = re.search(r"^[ \t]*\[[ \t]*" + re.escape(kernel) + r"[ \t]*\][^\n]*\n?", st, re.M)
    if hdr is None:
        raise KerntuneError(f"cannot find the table [{kernel}] in {sp}", sp)
    nxt = re.search(r"^[ \t]*\[(?!\[)", st[hdr.end():], re.M)
    return hdr.start(), (hdr.end() + nxt.start() if nxt else len(st))


def _sidecar_copy(st: str, kernel: str, name: str, sp: str) -> tuple[str, int]:
    """The kernel's tables in the sidecar text ``st`` copied for kernel ``name``: ``[kernel]`` and every table whose
    header names the kernel first (``[kernel.x]``, arrays of tables ``[[kernel.sizes]]``), each from its header to
    the next header, renamed; and where the copy of ``[kernel]`` itself ends (its keys come before any sub-table)."""
    ts, _ = _sidecar_table(st, kernel, sp)
    heads = [m.start() for m in re.finditer(r"^[ \t]*\[", st, re.M)] + [len(st)]
    own = re.compile(r"([ \t]*\[\[?[ \t]*)" + re.escape(kernel) + r"(?=[ \t]*[.\]])")
    tables = sorted(((s, e) for s, e in zip(heads, heads[1:]) if own.match(st, s)), key=lambda t: t[0] != ts)
    copies = [own.sub(lambda m: m.group(1) + name, st[s:e], count=1).rstrip("\n") + "\n" for s, e in tables]
    return "\n".join(copies), len(copies[0])


def _spec_launch_edits(text: str, path: str, kernel: str, spec: TuningSpec, new_vals: dict[str, str | None]
                       ) -> tuple[list[tuple[int, int, str]], tuple[str, str] | None]:
    """(byte edits of ``text`` where the spec is a comment, the sidecar's new text where it is a sidecar) setting
    the spec's launch keys to ``new_vals``."""
    from agent_core.source import spec as spec_mod
    if spec.span is not None:
        cs, ce = _char_offset(text, spec.span.start), _char_offset(text, spec.span.end)
        return _char_edits_to_bytes(text, _spec_key_edits(text, cs, ce, spec.lines, spec.span.line, new_vals)), None
    sp = spec.path or str(spec_mod.sidecar_path(path))
    st = Path(sp).read_text(encoding="utf-8")
    ts, te = _sidecar_table(st, kernel, sp)
    return [], (sp, _apply_char_edits(st, _spec_key_edits(st, ts, te, spec.lines, spec.lines.get("", 0), new_vals)))


# ------------------------------------------------------------------ per-shape dispatch
def _launch_statement(text: str, site: LaunchSite) -> tuple[int, int] | None:
    """(start, end) byte offsets of the expression statement that is exactly this launch (``k<<<...>>>(...);``,
    white space and line breaks before the ``;`` included); None when the launch is part of a larger expression."""
    from agent_core.source.cuda_parse import parse_tree
    b = text.encode("utf-8")
    node = parse_tree(b).root_node.descendant_for_byte_range(site.span.start, site.span.end)
    while node is not None and not (node.start_byte == site.span.start and node.end_byte == site.span.end):
        node = node.parent
    if node is None or node.parent is None or node.parent.type != "expression_statement":
        return None
    st = node.parent
    if b[st.start_byte:site.span.start].strip() or not re.fullmatch(rb"\s*;", b[site.span.end:st.end_byte]):
        return None
    return st.start_byte, st.end_byte


def _indent_at(raw: bytes, offset: int) -> str:
    """The white space that indents the line holding byte ``offset`` of ``raw``, up to it."""
    line_start = raw.rfind(b"\n", 0, offset) + 1
    return re.match(r"[ \t]*", raw[line_start:offset].decode("utf-8", "replace")).group(0)


def _type_traits_include(text: str, raw: bytes, start: int, what: str) -> list[tuple[int, int, str]]:
    """The edit that includes <type_traits> (a launch's std::is_same needs it) after the last #include before byte
    ``start`` of ``raw`` (``text`` encoded), none where ``text`` includes it already."""
    if re.search(r"^[ \t]*#[ \t]*include[ \t]*<(cuda/std/)?type_traits>", text, re.M):
        return []
    incs = list(re.finditer(rb"^[ \t]*#[ \t]*include\b[^\n]*\n", raw[:start], re.M))
    at = incs[-1].end() if incs else 0
    return [(at, at, f"#include <type_traits>  // kerntune: std::is_same at the {what} below\n")]


def _deeper(code: str) -> str:
    """``code`` (a launch statement) moved a level deeper inside a new block: each line after its first (not a line
    a ``\\`` continues) indented two more spaces."""
    return re.sub(r"(?<!\\)\n(?=[ \t]*\S)", "\n  ", code)


def _condition_c(when: list, host: dict[str, str]) -> str:
    """A dispatch rule's bounds as a C condition over the host's values (raises _Unmapped)."""
    parts = []
    for bd in when:
        x = to_c(fold(bd.name), host)
        x = x if _c_atomic(x) else f"({x})"
        if bd.above is not None:
            parts.append(f"{x} > {bd.above}")
        if bd.upto is not None:
            parts.append(f"{x} <= {bd.upto}")
    return " && ".join(parts) or "1"


def _integral(value: str, sizes: list[dict]) -> bool:
    """``value`` (a scalar argument's spec value) is an integer on every size set (``dispatch.input_value`` can
    read it)."""
    try:
        return all(isinstance(expr.evaluate_int(value, s), int) for s in sizes)
    except (expr.ExprError, TypeError, ValueError, ZeroDivisionError):
        return False


def dispatch_inputs(cf: CudaFile, kernel: str, spec: TuningSpec, old_values: dict[str, int] | None = None
                    ) -> list[str] | None:
    """What a per-shape dispatch of ``kernel`` may choose by at its launches (``dispatch.choose``'s inputs): the
    spec's size names where every launch of the tuned kernel (of a template: every launch that makes or may make the
    spec's instantiation, one inside a templated launcher too) gives
    each, as a kernel argument, a launch dimension or a host variable (``_host_values``). Where some size is
    not given, the size names that are, then the expressions of sizes the kernel's scalar arguments hold
    (``n = rows * cols``) where every launch gives them. None where the file does not launch the kernel (its
    host code must choose: every size name)."""
    k = cf.kernel(kernel)
    if k is None or not k.launch_sites or not spec.sizes:
        return None
    sites = list(k.launch_sites)
    if k.template_params:
        from agent_core.source.instantiation import site_instance, spec_instantiation
        try:
            args = spec_instantiation(cf, k, spec)
        except KerntuneError:
            return None
        sites = [x for x in sites if site_instance(cf, k, x, args).kind != "other"]  # "depends": if constexpr
        if not sites:
            return None
    hosts = [_host_values(x, spec, dict(old_values or {}), cf.text) for x in sites]

    def given(e: str) -> bool:
        for host in hosts:
            try:
                to_c(fold(e), host)
            except (_Unmapped, expr.ExprError):
                return False
        return True

    size_names = [n for n in spec.sizes[0] if all(isinstance(s.get(n), int) for s in spec.sizes)]
    names = [n for n in size_names if given(n)]
    if len(names) == len(size_names):
        return names
    seen = {ast.dump(fold(n)) for n in names}
    for a in spec.args:
        if a.role != "scalar" or not _integral(str(a.value), spec.sizes):
            continue  # a float scalar (`winv: f32 = 1.0 / W`) is no size a dispatch chooses by
        try:
            used = expr.names(str(a.value))
            node = fold(str(a.value))
        except expr.ExprError:
            continue
        if not used or not used <= set(size_names) or isinstance(node, ast.Name) or ast.dump(node) in seen:
            continue
        e = spec_expr(node)
        if given(e):
            names.append(e)
            seen.add(ast.dump(node))
    return names


def dispatch_kernel_names(text: str, cf: CudaFile, kernel: str, dispatch) -> list[str]:
    """The kernel name of each entry of ``dispatch`` as ``rewrite_dispatch`` writes them into ``text``
    (``dispatch.kernel_names``, unique against every kernel and identifier already in the file)."""
    from agent_core.agent import dispatch as dsp
    taken = {x.name for x in cf.kernels} | set(re.findall(r"\b[A-Za-z_]\w*\b", text))
    names = dsp.kernel_names(dispatch, kernel, taken - {kernel})
    k = cf.kernel(kernel)
    if k is not None and k.template_params:
        # a template stays for its other instantiations: the original entry is the template itself, every other
        # entry a kernel of its own, the default's named after its template
        names = [kernel if e.is_original else n for n, e in zip(names, dispatch.entries)]
        e0 = dispatch.entries[0]
        if not e0.is_original:
            base = f"{kernel}__" + re.sub(r"\W", "_", e0.origin.split(":", 1)[-1].lower())
            name, i = base, 2
            while name in taken or name in names:
                name, i = f"{base}_{i}", i + 1
            names[0] = name
    return names


def rewrite_dispatch(text: str, path: str | Path, kernel: str,
                     entries: list[tuple[KernelTemplate | None, dict[str, int]]], dispatch,
                     spec: TuningSpec | None = None, cf: CudaFile | None = None) -> Rewrite:
    """The user's file with ``kernel`` tuned to a per-shape dispatch (agent_core.agent.dispatch.Dispatch) whose entries
    are ``entries`` (template, configuration), ``entries[0]`` the default. An entry is one of:
    - an expert's or an LLM's partial template: written in place like ``rewrite_file`` writes one;
    - a rewrite template (agent_core.templating.rewrites): its rewritten kernel and helpers, written like a
      partial template (``rewrites.partial.kernel_only``);
    - the kernel's own structural template: the kernel with that configuration's values (its sites inside the
      kernel rendered; a ``#define`` it reads outside the kernel given the configuration's value around it with
      ``#pragma push_macro``/``pop_macro``);
    - the original kernel (the dispatch's ``ORIGINAL`` entry; its template may be None): the kernel as it is.
    The default keeps the kernel's name (a structural default: the file as applying that one configuration would
    write it); every other entry becomes a kernel of its own (``dispatch.kernel_names``: ``__orig`` for the
    original) with a copy of the spec at its own launch; every launch statement of the kernel becomes an
    ``if``/``else`` over the dispatch's rules, each branch launching its entry over the host's own values.
    Raises KerntuneError (and changes nothing) where that cannot be written: a template that is the whole file
    other than the structural one, a tuned value the kernel shares with other code, a launch that is not a
    statement of its own, a size the rules or a launch need that the site does not give."""
    from agent_core.agent import dispatch as dsp
    path = str(path)
    cf = cf if cf is not None else parse_cuda(text, path)
    k = cf.kernel(kernel)
    if len(entries) != len(dispatch.entries) or not entries or (len(entries) < 2 and not held_flags(entries[0][0])):
        raise KerntuneError(f"internal: {len(entries)} templates for a dispatch of {len(dispatch.entries)} entries",
                            path, k.span.line)
    # the rules as `select` reads them: a rule without bounds is the final else; nothing unreachable is written
    dispatch, kept = dsp.reachable(dispatch)
    entries = [entries[i] for i in kept]
    # an entry verified at one value of a run-time flag only (held_flags) is launched where the flag has it; the
    # original kernel (an entry of its own, served by no rule where the dispatch has none) everywhere else
    held = [held_flags(t) for t, _ in entries]
    fallback = next((i for i, e in enumerate(dispatch.entries) if e.is_original), None)
    if any(held) and fallback is None:
        from dataclasses import replace as _replace
        dispatch = _replace(dispatch, entries=[*dispatch.entries, dsp.original_entry()])
        entries = [*entries, (None, {})]
        held.append({})
        fallback = len(entries) - 1
    if len(entries) < 2:
        if dispatch.entries[0].is_original:
            raise KerntuneError("the per-shape dispatch's rules give every size the original kernel: nothing to "
                                "apply", path, k.span.line)
        raise KerntuneError("the per-shape dispatch's rules give every size one configuration "
                            f"({params_words(entries[0][1])}): apply that configuration "
                            "instead", path, k.span.line)
    # a rewrite template (the whole file, rewritten) goes in as its rewritten kernel alone, like an expert's
    from agent_core.templating.rewrites.partial import is_rewrite, kernel_only
    rewritten = [t is not None and is_rewrite(t) for t, _ in entries]
    templated = bool(k.template_params)
    # a templated kernel's rewrite entry: the plain kernel of the instantiation the configuration launches
    entry_args = [_rewrite_instantiation(t, cfg, kernel, path) if r and templated else None
                  for (t, cfg), r in zip(entries, rewritten)]
    entries = [(kernel_only(t) if r else t, cfg) for (t, cfg), r in zip(entries, rewritten)]
    if templated:
        from agent_core.templating.rewrites.partial import instantiated
        entries = [(instantiated(t, a) if a is not None else t, cfg) for (t, cfg), a in zip(entries, entry_args)]
    kinds = []
    for (t, _), e, r in zip(entries, dispatch.entries, rewritten):
        if e.is_original:
            kinds.append("original")
        elif r:
            kinds.append("in_place")
        elif t is not None and can_dispatch(t, cf) and is_whole_file(t, cf):
            kinds.append("structural")
        elif t is None or t.sites or is_whole_file(t, cf):
            raise KerntuneError(f"a per-shape dispatch cannot hold the {t.origin if t else '?'} template (it is "
                                "written back as the whole file): apply one configuration instead", path, k.span.line)
        else:
            kinds.append("in_place")
    if templated:
        why = templated_dispatch_refusal(cf, k, spec, [t for (t, _), kd in zip(entries, kinds) if kd != "original"],
                                         kinds)
        if why:
            raise KerntuneError(f"'{kernel}' is a template: {why}", path, k.span.line)
    own = next((t for (t, _), kd in zip(entries, kinds) if kd == "structural"), None)
    if own is None and "original" in kinds:
        try:
            from agent_core.templating.templatize import templatize
            own = templatize(cf, kernel)
        except KerntuneError:
            own = None  # nothing tunable: the original is its own launch
    orig_values = own.space.original_config() if own is not None else {}
    # the text the rewrite edits: with a structural default, the file as applying that configuration writes it
    base = render(own, {**orig_values, **entries[0][1]}) if kinds[0] == "structural" else text
    bcf = cf if base == text else parse_cuda(base, path)
    # a launch written inside one of the file's own macros: written out (expanded) at the uses that launch it
    expanded, bcf = expand_macro_launches(base, path, kernel, spec if base == text else None, bcf)
    if expanded != base:
        base, spec = expanded, None
    bk = bcf.kernel(kernel)
    first = next(t for t, _ in entries if t is not None)  # two entries at least, one of them not the original
    spec, start, old_values = _in_place_context(base, path, bcf, bk, spec if base == text else None, first,
                                                specialize=templated)
    targs = None
    if templated:
        from agent_core.source.instantiation import site_instance, spec_instantiation
        targs = spec_instantiation(bcf, bk, spec)
    if own is not None:
        old_values = {**old_values, **orig_values, **(entries[0][1] if kinds[0] == "structural" else {})}
    names = dispatch_kernel_names(base, bcf, kernel, dispatch)
    values = [{**orig_values, **cfg} if kd != "in_place" else {} for (_, cfg), kd in zip(entries, kinds)]
    if own is not None:
        from agent_core.source import spec as spec_mod
        ospec = spec if base == text else spec_mod.find_spec(cf, kernel)
        macros = _own_macros(own, text, cf, k, ospec or spec, [v for v, kd in zip(values, kinds) if kd != "in_place"],
                             old_values, path)
    else:
        macros = {}
    raw = base.encode("utf-8")
    before = raw[:start].decode("utf-8", "replace")
    supports, kernel_texts, launches, wraps = [], [], [], []
    for i, ((t, cfg), name, kd) in enumerate(zip(entries, names, kinds)):
        if kd == "in_place":
            sup, ktext, _ = _support_and_kernel(t, cfg, bcf, bk, before + "\n".join(supports), kernel_name=name,
                                                template_args=entry_args[i] or targs, specialize=False)
            launches.append(_folded_launch(t, {**t.space.original_config(), **cfg}, spec, old_values, path, bk))
            wraps.append(("", ""))
        else:
            sup = ""
            src = text if kd == "original" else render(own, values[i])
            ktext = "" if i == 0 or templated else _renamed_kernel(src, path, kernel, name)
            launches.append(_folded_launch(own, values[i], spec, old_values, path, bk))
            wraps.append(_macro_wrap(macros, values[i], old_values, src))
        supports.append(sup)
        kernel_texts.append(ktext)

    # the other entries' kernels go right above the kernel (and its spec comment): in the same namespace or
    # extern "C" block, so a launch that names the kernel qualified names them the same way
    at = spec.span.start if spec.span is not None and spec.span.end <= bk.span.start else bk.span.start
    at = max(start, raw.rfind(b"\n", 0, at) + 1 if not raw[raw.rfind(b"\n", 0, at) + 1:at].strip() else at)

    edits: list[tuple[int, int, str]] = []
    warnings: list[str] = []
    traits = False
    # every launch statement becomes the dispatch; one inside a launcher that is a template over the kernel's
    # arguments becomes `if constexpr (<its arguments are the spec's>) { the dispatch } else { its own launch }`
    macro_launch_refusal(bcf, bk, spec, path, "a per-shape dispatch between its configurations at its launch")
    for site in sorted(bk.launch_sites, key=lambda s: s.span.start):
        depends = None
        if templated:
            si = site_instance(bcf, bk, site, targs)
            if si.kind == "other":
                continue  # another instantiation keeps its launch
            depends = si if si.kind == "depends" else None
        if site.span.start < at:
            raise KerntuneError(f"this launch of '{kernel}' comes before the kernel's definition, where the "
                                "dispatch's other kernels would not be declared yet: apply one configuration, or "
                                "move the launch below the kernel", path, site.span.line, site.span.col)
        stmt = _launch_statement(base, site)
        if stmt is None:
            raise KerntuneError(f"this launch of '{kernel}' is part of a larger expression: the per-shape dispatch "
                                "needs it as a statement of its own (`k<<<...>>>(...);`) to write an if/else around "
                                "it. Nothing was changed: apply one configuration instead", path, site.span.line,
                                site.span.col)
        host = _host_values(site, spec, old_values, base)
        call = raw[site.span.start:site.span.end].decode("utf-8", "replace")
        lt = call.index("<<<")
        c0 = site.config[0].span.start - site.span.start
        c1 = site.config[-1].span.end - site.span.start
        calls = []
        for (t, _), name, (g, b_, sm), kd in zip(entries, names, launches, kinds):
            words = _spec_launch_words(g, b_, sm)
            if kd == "original" and "structural" not in kinds:
                # the original kernel, unchanged, keeps the launch it has (no tuned value of the file moved under it):
                # its configuration as written, whether or not the spec's launch is in the host's terms
                cfg_text = call[c0:c1]
            else:
                cfg_text = _site_config(site, g, b_, sm, host, kernel, t.origin if t else "original", words, path)
            prefix = call[:lt] if name == kernel else re.sub(
                rf"\b{re.escape(kernel)}(\s*<[\s\S]*>)?(\s*)$", lambda m: name + m.group(2), call[:lt])
            calls.append(_deeper(f"{prefix}{call[lt:c0]}{cfg_text}{call[c1:]};"))
        outer = _indent_at(raw, stmt[0])
        indent = outer + "  " if depends is not None else outer
        inner = indent + "  "
        conds = [_held_condition(site, bk, h, path) if h else "" for h in held]

        def placed(i: int, at: str, deeper: bool) -> str:
            """Entry i's launch written at indentation ``at``: where it holds a flag, under a test of the flag's
            value with the original kernel's launch in its else."""
            if not held[i]:
                return calls[i]
            c, f = (_deeper(calls[i]), _deeper(calls[fallback])) if deeper else (calls[i], calls[fallback])
            return (f"if ({conds[i]}) {{  // kerntune: {names[i]} is verified with {_held_words(held[i])} only\n"
                    f"{at}  {c}\n{at}}} else {{\n{at}  {f}\n{at}}}")
        if len(dispatch.rules) == 1:  # one configuration for every size, beside the original for a held flag
            code = placed(dispatch.rules[0].entry, indent, False)
        else:
            chain = []
            for i, r in enumerate(dispatch.rules[:-1]):
                try:
                    cond = _condition_c(r.when, host)
                except _Unmapped as e:
                    raise _unmapped_error(e, kernel, "per-shape dispatch", "choose its configuration by "
                                          + " and ".join(b.words() for b in r.when), path, site) from None
                chain.append(f"{'if' if i == 0 else '} else if'} ({cond}) {{\n{inner}{placed(r.entry, inner, True)}"
                             f"\n{indent}")
            chain.append(f"}} else {{\n{inner}{placed(dispatch.rules[-1].entry, inner, True)}\n{indent}}}")
            code = "".join(chain)
        if depends is not None:
            own = _deeper(raw[stmt[0]:stmt[1]].decode("utf-8", "replace"))
            code = (f"if constexpr ({depends.condition}) {{  // kerntune: the per-shape dispatch of "
                    f"{kernel}<{', '.join(targs)}>\n{indent}{code}\n{outer}}} else {{\n{indent}{own}\n{outer}}}")
            traits = traits or depends.needs_type_traits
        edits.append((stmt[0], stmt[1], code))
    if traits:
        edits += _type_traits_include(base, raw, start, "dispatch")
    if not bk.launch_sites:
        warnings.append(f"{path}: '{kernel}' is not launched in this file: its host code must now choose between "
                        + "; ".join(f"{n} ({dsp.condition_words(dispatch, i)})" for i, n in enumerate(names)))

    # the support code, the other entries' kernels (each with its spec) and the default under the kernel's name
    lines = [f"// kerntune: {kernel} tuned per shape (per-shape dispatch at its launch sites):"]
    for i, ((t, cfg), name, kd) in enumerate(zip(entries, names, kinds)):
        if kd == "original":
            where = dsp.condition_words(dispatch, i)
            others = [_held_words(h) for h in held if h]
            if where:
                lines.append(f"//   {name}: {where}: the original kernel, unchanged (no verified configuration is "
                             "faster there beyond the measured noise)")
            if others:
                many = len({n for h in held for n in h}) > 1
                lines.append(f"//   {name}{' also' if where else ''}: wherever a launch does not pass "
                             f"{' or '.join(sorted(set(others)))}: the original kernel, unchanged (the tuned "
                             f"kernel is verified at {'those values' if many else 'that value'} only)")
            continue
        params = {**t.space.original_config(), **cfg}
        vals = ", ".join(f"{n}={params[n]}" for n in sorted(params))
        lines.append(f"//   {name}: {dsp.condition_words(dispatch, i)}: {t.origin} template, {vals}")
    sidecar = None
    new_vals = [_spec_values(spec, *ln) for ln in launches]
    extra_specs: list[str] = []
    if spec.span is not None:
        cs, ce = _char_offset(base, spec.span.start), _char_offset(base, spec.span.end)
        comment = base[cs:ce]
        for nv in new_vals:
            extra_specs.append(_apply_char_edits(comment, _spec_key_edits(comment, 0, len(comment), {}, spec.span.line,
                                                                         nv)))
    # beside the kernel: every entry's kernel but the default (under the kernel's name); for a template, every
    # entry's but the original (the template itself)
    beside = [i for i in range(len(entries)) if (kinds[i] != "original" if templated else i > 0)]
    extras = "".join(wraps[i][0] + (extra_specs[i] + "\n" if extra_specs else "") + kernel_texts[i] + "\n"
                     + wraps[i][1] + "\n" for i in beside)
    support = "\n\n".join(x for x in supports if x)
    edits.append((start, start, "\n".join(lines) + "\n" + (support + "\n\n" if support else "")))
    edits.append((at, at, extras))
    if kinds[0] == "in_place" and not templated:  # the default's kernel and spec launch; a structural or original one is there already
        edits.append((bk.span.start, bk.span.end, kernel_texts[0]))
        spec_edits, sidecar = _spec_launch_edits(base, path, kernel, spec, new_vals[0])
        edits += spec_edits
    elif spec.span is None:
        from agent_core.source import spec as spec_mod
        sp = spec.path or str(spec_mod.sidecar_path(path))
        sidecar = (sp, Path(sp).read_text(encoding="utf-8"))
    if sidecar is not None:
        sp, st = sidecar
        out = st
        for name, nv in zip(names[1:], new_vals[1:]):
            copy_, main_end = _sidecar_copy(st, kernel, name, sp)
            out = out.rstrip("\n") + "\n\n" + _apply_char_edits(copy_, _spec_key_edits(copy_, 0, main_end, {}, 0, nv))
        sidecar = (sp, out)
    new = apply_edits(base, sorted(edits, key=lambda e: (e[0], e[1])))
    kernels = []
    for name in names:
        ns = _spec_of(new, path, name, sidecar)
        if ns is None:
            raise KerntuneError(f"internal: the rewritten spec of '{name}' cannot be read back", path, k.span.line)
        kernels.append((name, ns))
    return Rewrite(new, sidecar, warnings, True, kernels[0][1], kernels, dispatch)


def _rewrite_instantiation(template: KernelTemplate, cfg: dict[str, int], kernel: str, path: str) -> list[str]:
    """The template arguments a rewrite template of a templated kernel launches the kernel with at ``cfg`` (the
    spec's instantiation, with the arguments the rewrite tunes at their values)."""
    from agent_core.source import spec as spec_mod
    from agent_core.source.instantiation import spec_instantiation
    src = render(template, cfg)
    rcf = parse_cuda(src, path)
    rk = rcf.kernel(kernel)
    rspec = spec_mod.find_spec(rcf, kernel)
    if rk is None or rspec is None:
        raise KerntuneError(f"the {template.origin} template at {params_words(cfg)} has no kernel '{kernel}' with a "
                            "spec: optimize again", path)
    return spec_instantiation(rcf, rk, rspec)


def templated_dispatch_refusal(cf: CudaFile, k: Kernel, spec: TuningSpec | None, templates: list,
                               kinds: list[str] | None = None) -> str | None:
    """Why a per-shape dispatch cannot be written for the templated kernel ``k`` with entries of ``templates``
    (besides the original), or None. It can where every entry is an expert's or an LLM's partial template
    (written as a plain kernel of its own, the template's parameters replaced by the spec's instantiation) or a
    rewrite template of the kernel (its rewritten kernel written as the plain kernel of the instantiation that
    configuration launches), the original entry is the template itself, the spec is a comment in the file, and
    every launch that may make the spec's instantiation either names it or, inside a launcher that is itself a
    template over those arguments, can be tested for it (the dispatch is then written under `if constexpr`)."""
    from agent_core.source import spec as spec_mod
    from agent_core.source.instantiation import site_instance, spec_instantiation
    from agent_core.templating.rewrites.partial import is_rewrite
    if (kinds is not None and "structural" in kinds) or any(
            t is None or (is_whole_file(t, cf) and not is_rewrite(t)) for t in templates):
        return ("a per-shape dispatch of a template holds expert and rewrite configurations and the original kernel, "
                "not configurations of the kernel's own template arguments")
    spec = spec if spec is not None else spec_mod.find_spec(cf, k.name)
    if spec is None or spec.span is None:
        return "a per-shape dispatch of a template needs the spec as a comment in the file"
    try:
        args = spec_instantiation(cf, k, spec)
    except KerntuneError as e:  # which instantiation the spec tunes is not known: no dispatch can name it
        return f"a per-shape dispatch of a template names the instantiation the spec tunes: {e.message}"
    for site in k.launch_sites:
        si = site_instance(cf, k, site, args)
        if si.kind == "depends" and not si.condition:
            return (f"the launch at line {site.span.line + 1} makes an instantiation that depends on its launcher's "
                    "own template arguments in a way that cannot be tested, where a per-shape dispatch is not "
                    "written")
    return None


def _renamed_kernel(text: str, path: str, kernel: str, name: str) -> str:
    """The definition of ``kernel`` in ``text``, named ``name``."""
    kk = parse_cuda(text, path).kernel(kernel)
    b = text.encode("utf-8")
    return (b[kk.span.start:kk.name_span.start] + name.encode("utf-8") + b[kk.name_span.end:kk.span.end]).decode("utf-8")


def _define_line(text: str, macro: str) -> str | None:
    """The ``#define macro ...`` directive of ``text`` (continuation lines included)."""
    m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{re.escape(macro)}\b(?:[^\n]*\\\n)*[^\n]*", text, re.M)
    return m.group(0).strip() if m else None


def _macro_wrap(macros: dict[str, list[str]], values: dict[str, int], base_values: dict[str, int],
                src: str) -> tuple[str, str]:
    """(lines before, lines after) a kernel whose tuned values differ from the file's: each ``#define`` of such a
    value pushed, redefined as in ``src`` (the file rendered at that configuration), and popped after it."""
    names = sorted({m for p, ms in macros.items() if values.get(p) != base_values.get(p) for m in ms})
    pre, post = [], []
    for m in names:
        line = _define_line(src, m)
        if line is None:
            continue
        pre += [f'#pragma push_macro("{m}")', f"#undef {m}", line]
        post.insert(0, f'#pragma pop_macro("{m}")')
    return ("\n".join(pre) + "\n" if pre else ""), ("\n".join(post) + "\n" if post else "")


def dispatch_fixed_params(own: KernelTemplate, cf: CudaFile, k: Kernel, spec: TuningSpec) -> dict[str, str]:
    """The structural template's parameters that no per-shape dispatch may vary, each with why (``_own_macros``
    refuses them): a value the kernel shares with other code that each configuration's kernel cannot get a copy of
    (a namespace constant the host launcher also reads, a device function's, a kernel argument computed from it). A
    dispatch entry of ``own`` must keep these at the file's values (the original entry does); one configuration for
    every size may still change them."""
    base = own.space.original_config()
    out: dict[str, str] = {}
    for p in own.space.params:
        try:
            _own_macros(own, cf.text, cf, k, spec, [{**base, p: None}], base, cf.path)
        except KerntuneError as e:
            out[p] = e.message
    return out


def _own_macros(own: KernelTemplate, text: str, cf: CudaFile, k: Kernel, spec: TuningSpec,
                values: list[dict[str, int]], base_values: dict[str, int], path: str) -> dict[str, list[str]]:
    """The macros (``#define NAME value``) through which the structural template's parameters reach the kernel from
    outside it (param -> macro names), for the parameters whose values differ between the dispatch's own-kernel
    entries and the file (``base_values``). Raises KerntuneError where such a value is one the kernel shares with
    other code the dispatch cannot give each kernel its own copy of: a global constant, a device function, a
    kernel argument computed from it."""
    from agent_core.source.cuda_parse import parse_tree
    differ = {p for v in values for p in own.space.params if v.get(p) != base_values.get(p)}
    out: dict[str, list[str]] = {}
    if not differ:
        return out
    b = text.encode("utf-8")
    root = parse_tree(b).root_node
    launch_spans = [(s.span.start, s.span.end) for s in k.launch_sites]
    for site in own.sites:
        if site.param not in differ or k.span.start <= site.span.start < k.span.end:
            continue
        if spec.span is not None and spec.span.start <= site.span.start < spec.span.end:
            continue  # the spec's launch: each kernel gets its own
        if any(s <= site.span.start < e for s, e in launch_spans):
            continue  # the launch: rewritten per configuration
        node = root.descendant_for_byte_range(site.span.start, site.span.end)
        while node is not None and node.type not in ("preproc_def", "function_definition", "translation_unit"):
            node = node.parent
        where = f"line {site.span.line + 1}"
        if node is not None and node.type == "preproc_def":
            name = node.child_by_field_name("name")
            macro = b[name.start_byte:name.end_byte].decode("utf-8")
            for fn in _functions(root):
                head = b[fn.start_byte:fn.end_byte].decode("utf-8", "replace")
                body = fn.child_by_field_name("body")
                if fn.start_byte <= k.span.start < fn.end_byte or body is None:
                    continue
                if re.search(r"\b__(?:device|global)__\b", head[:body.start_byte - fn.start_byte]) and re.search(
                        rf"\b{re.escape(macro)}\b", b[body.start_byte:body.end_byte].decode("utf-8", "replace")):
                    raise KerntuneError(f"the tuned value {site.param} ({where}: #define {macro}) is also read by "
                                        f"device code outside '{k.name}' (line {fn.start_point[0] + 1}), which every "
                                        "kernel of the per-shape dispatch would share: apply one configuration "
                                        "instead", path, site.span.line, site.span.col)
            out.setdefault(site.param, [])
            if macro not in out[site.param]:
                out[site.param].append(macro)
            continue
        if node is not None and node.type == "function_definition":
            body = node.child_by_field_name("body")
            head = b[node.start_byte:body.start_byte if body is not None else node.end_byte].decode("utf-8", "replace")
            if not re.search(r"\b__(?:device|global)__\b", head):
                continue  # a value of the host code that launches the kernel: the launch is rewritten
        raise KerntuneError(f"the tuned value {site.param} ({where}) is shared by '{k.name}' and other code, so the "
                            "per-shape dispatch cannot give each of its kernels its own: apply one configuration "
                            "instead", path, site.span.line, site.span.col)
    for a in spec.args:
        if a.role == "scalar":
            try:
                used = expr.names(a.value)
            except expr.ExprError:
                continue
            if used & differ:
                raise KerntuneError(f"the kernel argument `{a.name}` is computed from the tuned value(s) "
                                    f"{', '.join(sorted(used & differ))}, which differ between the per-shape "
                                    "dispatch's kernels: apply one configuration instead", path, k.span.line)
    return out


def _functions(root):
    """Every function definition under ``root`` (tree-sitter nodes)."""
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            yield n
        stack.extend(n.children)


def _spec_of(text: str, path: str, kernel: str, sidecar: tuple[str, str] | None = None) -> TuningSpec | None:
    """The kernel's spec in ``text`` (and the sidecar's new text, when given); None when it cannot be read."""
    from agent_core.source import spec as spec_mod
    try:
        cf = parse_cuda(text, path)
        if sidecar is None:
            return spec_mod.find_spec(cf, kernel)
        data = tomllib.loads(sidecar[1])
        return spec_mod.parse_spec(data[kernel], kernel, sidecar[0], sidecar[0])
    except (KerntuneError, KeyError, tomllib.TOMLDecodeError):
        return None


def _char_offset(text: str, byte_offset: int) -> int:
    if text.isascii():
        return byte_offset
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def tuned_template(path: str | Path, kernel: str, text: str, summary: dict | None, store=None) -> KernelTemplate:
    """The template a result summary was tuned with (what `apply` and the editor's Apply best render): the
    kernel's current template when its hash matches, else the one recorded in the store, with the origin,
    launch, entry and space of its space file (an expert's or an LLM's). KerntuneError when there is none."""
    path = str(Path(path).resolve())
    if not summary or not summary.get("best_params"):
        raise KerntuneError(f"no tuned result for kernel '{kernel}'", path)
    if summary.get("stale"):
        raise KerntuneError(f"{Path(path).name} changed since kernel '{kernel}' was tuned; tune again before "
                            "applying", path)
    return template_by_hash(path, kernel, text, summary.get("template_hash") or "", summary.get("origin"), store)


def template_by_hash(path: str | Path, kernel: str, text: str, template_hash: str, origin: str | None = None,
                     store=None) -> KernelTemplate:
    """The kernel's template with this hash: its current template when the hash matches, else the one recorded
    in the store (``store``, default the workspace's), with the origin, launch, entry and space of its space file.
    KerntuneError when the store does not have it."""
    from agent_core.model import ParamSpace
    from agent_core.templating.space import space_from_toml
    from agent_core.search.tuner import prepare
    path = str(Path(path).resolve())
    try:
        prep = prepare(path, kernel, text, tuning=False)
    except KerntuneError:
        if (origin or "structural") == "structural":
            raise
        prep = None  # no spec or broken template files: an expert's result can still be applied
    own_template = prep.template if prep is not None else None  # None: not structurally tunable
    if own_template is not None and own_template.template_hash == template_hash:
        return own_template
    own = store is None
    if own:
        from agent_core.store import Store
        from agent_core.workspace import store_path_for
        store = Store(store_path_for(path))
    try:
        row = store.get_template(template_hash)
    finally:
        if own:
            store.close()
    if not row:
        raise KerntuneError("the template that was tuned is not in the store; tune again", path)
    structural = prep.structural if prep is not None else None
    same_text = structural is not None and structural.text == row["text"]
    space = structural.space if same_text else own_template.space if own_template else ParamSpace(kernel, {}, [])
    meta: dict = {}
    if row.get("space_toml"):
        # the spec's size names, so that a constraint over a size (an expert's `THREADS * VEC * ITEMS >= N`) is
        # not taken for one over an unknown parameter
        size_names = {n for sz in prep.spec.sizes for n in sz} if prep is not None and prep.spec else None
        try:
            space, meta = space_from_toml(row["space_toml"], None, size_names)
        except KerntuneError:
            pass
    origin = row.get("origin") or meta.get("origin") or (own_template.origin if own_template else "user")
    return KernelTemplate(kernel=kernel, path=path, original_text=text, text=row["text"], space=space,
                          sites=list(structural.sites) if same_text else [], origin=origin,
                          launch=meta.get("launch"), entry=meta.get("entry"))


def rewrite_result(path: str | Path, kernel: str, text: str, summary: dict | None, store=None,
                   single: bool = False, fallback: bool = False) -> tuple[Rewrite, KernelTemplate]:
    """The rewrite of ``text`` for a stored result (tuner.result_summary): its per-shape dispatch where it has
    one (and ``single`` is not set), else its best configuration. Returns (rewrite, the winner's template).

    No regression: one configuration for every size is written only where it is slower than the original on no
    size set (the dispatch's confirmation says so; a result without one, its own figures beyond
    dispatch.NOISE_FLOOR); else KerntuneError, nothing changes. A dispatch that keeps the original kernel on every
    size set gives the text unchanged (``kept`` says why). ``fallback``: where the dispatch cannot be written, the
    single best configuration is, if it may be (a warning says why)."""
    from agent_core.agent.dispatch import Dispatch
    from agent_core.templating.space import check_stored_config
    template = tuned_template(path, kernel, text, summary, store)
    where = f"the stored result of '{kernel}' (session {summary.get('session_id')})"
    best = check_stored_config(template.space, summary["best_params"], f"{where}: best configuration")
    d = summary.get("dispatch") if summary else None
    disp = Dispatch.from_dict(d) if d else None
    if disp is not None and disp.applies_nothing:
        return Rewrite(text, kept=list(disp.kept) or ["no verified configuration is faster than the original beyond "
                                                      "the measured noise on any size set"]), template
    if disp is not None and len(disp.entries) == 1 and not disp.entries[0].is_original:
        # one configuration for every size (dispatch.one_configuration: slower nowhere, confirmed), the winner or,
        # where the winner is slower somewhere, another configuration
        e = disp.entries[0]
        t = template if e.template_hash == template.template_hash else \
            template_by_hash(path, kernel, text, e.template_hash, e.origin, store)
        rw = rewrite_file(text, path, kernel, t, check_stored_config(t.space, e.params, f"{where}: its configuration"))
        if disp.instead:
            rw.warnings.append(f"'{kernel}': {disp.instead}")
        return rw, t
    if disp is not None and not single:
        entries = []
        for i, e in enumerate(disp.entries):
            if e.is_original:
                entries.append((None, dict(e.params)))
                continue
            t = template if e.template_hash == template.template_hash else \
                template_by_hash(path, kernel, text, e.template_hash, e.origin, store)
            entries.append((t, dict(check_stored_config(t.space, e.params, f"{where}: dispatch configuration {i + 1}"))))
        try:
            rw = rewrite_dispatch(text, path, kernel, entries, disp)
            rw.kept = list(disp.kept)
            return rw, template
        except KerntuneError as e:
            if not fallback:
                raise
            why = e
        rw = _single(path, kernel, text, summary, template, disp,
                     f"the per-shape dispatch cannot be written ({why.message})", best=best)
        where = f"line {why.line + 1}: " if why.line is not None else ""
        rw.warnings.insert(0, f"the per-shape dispatch of '{kernel}' cannot be written, so its single best "
                              f"configuration ({params_words(summary['best_params'])}) was applied instead. The "
                              f"dispatch's rewrite said: {where}{why.message}")
        return rw, template
    return _single(path, kernel, text, summary, template, disp, best=best), template


def single_slower(summary: dict, disp=None) -> list[int]:
    """The size sets where the result's best configuration is slower than the original: from the dispatch's
    confirmation (beyond the measured noise) where there is one, else from the result's own figures (beyond
    dispatch.NOISE_FLOOR)."""
    from agent_core.agent.dispatch import NOISE_FLOOR
    if disp is not None:
        return list(disp.single_slower)
    o, b = summary.get("original_us") or [], summary.get("best_us") or []
    return [i for i, (x, y) in enumerate(zip(o, b)) if x and y and y > x * (1 + NOISE_FLOOR)]


def _single(path, kernel: str, text: str, summary: dict, template: KernelTemplate, disp, why: str = "",
            best: dict | None = None) -> Rewrite:
    """The rewrite to the result's best configuration, refused where it is slower than the original somewhere."""
    slow = single_slower(summary, disp)
    if slow:
        sizes = disp.sizes if disp is not None else summary.get("sizes") or []
        o = disp.single_original_us if disp is not None else summary["original_us"]
        b = disp.single_us if disp is not None else summary["best_us"]
        where = "; ".join(", ".join(f"{n}={v}" for n, v in sizes[i].items()) + f" ({o[i]:.1f} -> {b[i]:.1f} us)"
                          for i in slow)
        raise KerntuneError((why + "; " if why else "") + f"one configuration for every size "
                            f"({params_words(summary['best_params'])}) is slower than the original on {where}: "
                            "nothing was changed, the original kernel is kept" + (
                                "" if disp is not None or why else
                                " (`kerntune optimize` writes a per-shape dispatch that keeps it on those sizes)"),
                            str(path))
    return rewrite_file(text, path, kernel, template, summary["best_params"] if best is None else best)
