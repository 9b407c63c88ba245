"""Semantics-preserving style mutations of a kernel file, for checking that expert matching reads what a kernel
computes and not how it is written (tests/test_style_invariance.py).

Each mutation is a small function ``Source -> Source | None``: a file's text and the name of the kernel under
test in, the rewritten text (and the kernel's name, which only ``rename_kernel`` changes) out, or None where the
mutation does not apply (nothing to rewrite, or a rewrite that could not be proven legal from the parse). Every
rewrite is made from the tree-sitter CUDA parse (``agent_core.source.cuda_parse``): identifiers, literals,
declarations and launch sites are nodes, so comments, strings and field names are never touched. The kernel's
``/* kerntune: ... */`` spec follows each rewrite that changes what it describes (parameter names and order,
scalar dtypes); launchers follow a reordering (their launch arguments) and a dropped ``const``.

``MUTATIONS`` maps a name to a ``Mutation``; ``numerics=True`` marks the rewrites that change rounding (fast-math
intrinsics): those are not semantics-preserving, and an expert must then bind with the matching convention.
``python -m tests.style_mutations [--files ...]`` prints the full (mutation, file) matrix: what the CI test
samples, everywhere.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from agent_core.source.cuda_parse import parse_cuda, parse_tree, walk

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "corpus"


@dataclasses.dataclass(frozen=True)
class Source:
    text: str
    kernel: str


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    fn: Callable[[Source], Source | None]
    what: str
    numerics: bool = False  # changes rounding: not semantics-preserving (reported apart)


# ------------------------------------------------------------------------------------------- plumbing
def _edit(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """Apply byte-range replacements (non-overlapping; insertions are empty ranges)."""
    out, pos = [], 0
    for s, e, new in sorted(edits, key=lambda x: (x[0], x[1])):
        if s < pos:
            raise ValueError(f"overlapping edits at byte {s}")
        out += [data[pos:s], new]
        pos = e
    out.append(data[pos:])
    return b"".join(out)


class _File:
    """A parsed file: text, bytes, CudaFile, tree, the kernel and its function node."""

    def __init__(self, src: Source):
        self.src = src
        self.data = src.text.encode()
        self.cf = parse_cuda(src.text)
        self.k = self.cf.kernel(src.kernel)
        self.tree = parse_tree(self.data)
        self.root = self.tree.root_node
        self.fn = None  # the kernel's function_definition
        for n in walk(self.root):
            if n.type == "function_definition" and n.start_byte <= self.k.body_span.start \
                    and n.end_byte >= self.k.body_span.end:
                if self.fn is None or n.end_byte - n.start_byte < self.fn.end_byte - self.fn.start_byte:
                    self.fn = n
        self.body = self.fn.child_by_field_name("body") if self.fn is not None else None

    def t(self, n) -> str:
        return self.data[n.start_byte:n.end_byte].decode()

    def nodes(self, under=None, types: tuple[str, ...] = ()):
        for n in walk(under if under is not None else self.root):
            if not types or n.type in types:
                yield n

    def words(self) -> set[str]:
        return set(re.findall(r"[A-Za-z_]\w*", self.src.text))

    def done(self, edits, kernel: str | None = None) -> Source | None:
        if not edits:
            return None
        return Source(_edit(self.data, edits).decode(), kernel or self.src.kernel)


def _in_preproc(n) -> bool:
    p = n.parent
    while p is not None:
        if p.type.startswith("preproc_") and p.type not in ("preproc_if", "preproc_ifdef", "preproc_else",
                                                            "preproc_elif"):
            return True
        if p.type in ("preproc_if", "preproc_elif") and n.start_byte < (
                p.child_by_field_name("condition").end_byte if p.child_by_field_name("condition") else 0):
            return True
        p = p.parent
    return False


def _declared_name(d):
    """The identifier a declarator declares (through init/pointer/array/reference declarators)."""
    while d is not None and d.type != "identifier":
        if d.type in ("init_declarator", "pointer_declarator", "array_declarator", "reference_declarator",
                      "parenthesized_declarator", "attributed_declarator", "function_declarator"):
            d = d.child_by_field_name("declarator") or next((c for c in d.named_children
                                                             if c.type.endswith("declarator") or c.type == "identifier"),
                                                            None)
        else:
            return None
    return d


def _spec_region(f: _File) -> tuple[int, int] | None:
    """Byte range of the kernel's /* kerntune: ... */ comment."""
    s = f.data.rfind(b"kerntune:", 0, f.k.span.start)
    if s < 0:
        return None
    s = f.data.rfind(b"/*", 0, s)
    e = f.data.find(b"*/", s) + 2
    return (s, e) if s >= 0 and e <= f.k.span.start + 2 else None


def _spec_args(f: _File) -> list[tuple[int, int]]:
    """Byte ranges of the contents of the spec's ``args`` strings, in order."""
    reg = _spec_region(f)
    if reg is None:
        return []
    s, e = reg
    m = re.compile(rb"(?m)^[\s*]*args\s*=\s*\[").search(f.data, s, e)
    if m is None:
        return []
    out, i = [], m.end()
    while i < e:
        c = f.data[i:i + 1]
        if c == b"]":
            break
        if c in (b'"', b"'"):
            j = i + 1
            while f.data[j:j + 1] != c:
                j += 2 if f.data[j:j + 1] == b"\\" and c == b'"' else 1
            out.append((i + 1, j))
            i = j + 1
        elif c == b"#":
            i = f.data.find(b"\n", i)
        else:
            i += 1
    return out


def _top_insert_point(f: _File) -> int:
    """After the last top-level #include (or 0): where file-scope helpers go."""
    last = 0
    for n in f.root.children:
        if n.type == "preproc_include":
            last = n.end_byte
        elif n.type not in ("comment", "preproc_include"):
            break
    return last


def _uses(f: _File, name: str, under=None):
    return [n for n in f.nodes(under if under is not None else f.fn, ("identifier",)) if f.t(n) == name]


def _is_written(f: _File, name: str) -> bool:
    for n in f.nodes(f.body, ("assignment_expression", "update_expression")):
        target = n.child_by_field_name("left") or n.child_by_field_name("argument")
        if target is not None and target.type == "identifier" and f.t(target) == name:
            return True
    return False


def _editable_launches(f: _File):
    """The kernel's launch sites when every launch of it can be edited in place (none through a macro)."""
    if f.k.macro_launch_sites or any(ls.macro for ls in f.k.launch_sites):
        return None
    return f.k.launch_sites


# ------------------------------------------------------------------------------------------- (1) names
def _new_names(f: _File, prefix: str, n: int) -> list[str]:
    taken = f.words()
    p = prefix if not any(w.startswith(prefix) and w[len(prefix):].isdigit() for w in taken) else "kt_" + prefix
    return [f"{p}{i}" for i in range(n)]


def _rename_in_kernel(f: _File, mapping: dict[str, str]) -> list[tuple[int, int, bytes]]:
    edits = []
    for n in f.nodes(f.fn, ("identifier",)):
        name = f.t(n)
        if name not in mapping or _in_preproc(n):
            continue
        if n.parent is not None and n.parent.type == "qualified_identifier" and n.prev_sibling is not None:
            continue  # Foo::name is not ours
        edits.append((n.start_byte, n.end_byte, mapping[name].encode()))
    # `MatF g(gate, cols);` in the body parses as a function declaration whose parameter TYPES are the names it is
    # made from (C++'s most vexing parse): those are our identifiers too
    for n in f.nodes(f.fn, ("type_identifier",)):
        name, par = f.t(n), n.parent
        if name not in mapping or par is None or par.type != "parameter_declaration" or \
                par.child_by_field_name("declarator") is not None:
            continue
        fd = par.parent.parent if par.parent is not None else None
        if fd is not None and fd.type == "function_declarator" and fd.parent is not None and \
                fd.parent.type == "declaration":
            edits.append((n.start_byte, n.end_byte, mapping[name].encode()))
    return edits


def _macro_words(f: _File) -> set[str]:
    return {w for d in f.cf.defines for w in re.findall(r"[A-Za-z_]\w*", d.value or "")}


def rename_params(src: Source) -> Source | None:
    """Kernel parameters to a0, a1, ... (kernel body and spec args)."""
    f = _File(src)
    names = [p.name for p in f.k.params]
    if not names or set(names) & _macro_words(f):
        return None  # a macro's body reads a parameter by name: renaming would change what it expands to
    mapping = dict(zip(names, _new_names(f, "a", len(names))))
    edits = _rename_in_kernel(f, mapping)
    args = _spec_args(f)
    if len(args) != len(names):
        return None
    for (s, e), old in zip(args, names):
        m = re.match(rb"\s*([A-Za-z_]\w*)", f.data[s:e])
        edits.append((s + m.start(1), s + m.end(1), mapping[old].encode()))
    return f.done(edits)


def _locals(f: _File) -> list[str]:
    out = []
    for n in f.nodes(f.body, ("declaration", "for_range_loop", "parameter_declaration")):
        ds = n.children_by_field_name("declarator")
        for d in ds:
            idn = _declared_name(d)
            if idn is not None and f.t(idn) not in out:
                out.append(f.t(idn))
    return out


def rename_locals(src: Source) -> Source | None:
    """The kernel's local variables to v0, v1, ..."""
    f = _File(src)
    names = [n for n in _locals(f) if n not in {p.name for p in f.k.params}]
    names = [n for n in names if n not in _macro_words(f)]
    if not names:
        return None
    return f.done(_rename_in_kernel(f, dict(zip(names, _new_names(f, "v", len(names))))))


def rename_kernel(src: Source) -> Source | None:
    """The kernel's own name (its definition, declarations and launches) to kt_kernel0."""
    f = _File(src)
    new = _new_names(f, "kt_kernel", 1)[0]
    if sum(1 for k in f.cf.kernels if k.name == src.kernel) != 1 or _editable_launches(f) is None:
        return None
    if src.kernel in _macro_words(f):
        return None
    edits = [(n.start_byte, n.end_byte, new.encode()) for n in f.nodes(None, ("identifier", "type_identifier"))
             if f.t(n) == src.kernel and not _in_preproc(n)]
    return f.done(edits, new)


def rename_helpers(src: Source) -> Source | None:
    """Every __device__ function defined in the file to kt_f0, kt_f1, ... (definitions and calls)."""
    f = _File(src)
    names = []
    for n in f.nodes(None, ("function_definition",)):
        if n is f.fn or "__device__" not in f.t(n).split("{")[0] or "__global__" in f.t(n).split("{")[0]:
            continue
        idn = _declared_name(n.child_by_field_name("declarator"))
        if idn is not None and f.t(idn) not in names and f.t(idn) not in {k.name for k in f.cf.kernels}:
            names.append(f.t(idn))
    names = [x for x in names if x not in _macro_words(f) and not x.startswith("operator")]
    if not names:
        return None
    mapping = dict(zip(names, _new_names(f, "kt_f", len(names))))
    edits = [(n.start_byte, n.end_byte, mapping[f.t(n)].encode())
             for n in f.nodes(None, ("identifier", "type_identifier"))  # `ns::helper<T>` as a template argument
             if f.t(n) in mapping and not _in_preproc(n)]
    region = _spec_region(f)  # a helper the spec's template_args name (a function as a template argument)
    if region is not None:
        a, b = region
        for m in re.finditer(rb"\b(" + b"|".join(re.escape(x.encode()) for x in mapping) + rb")\b", f.data[a:b]):
            if b"template_args" in f.data[a:b][:m.start()].rsplit(b"\n", 1)[-1]:
                edits.append((a + m.start(), a + m.end(), mapping[m.group(1).decode()].encode()))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (2) namespaces
def namespace_file(src: Source) -> Source | None:
    """Everything after the includes inside ``namespace kt_style { ... }``."""
    f = _File(src)
    if re.search(r"\bint\s+main\s*\(", src.text):
        return None
    at = _top_insert_point(f)
    return f.done([(at, at, b"\nnamespace kt_style {\n"), (len(f.data), len(f.data), b"\n}  // namespace kt_style\n")])


def namespace_kernel(src: Source) -> Source | None:
    """The kernel and what precedes it (helpers) inside a namespace; the launchers after it `using` it."""
    f = _File(src)
    top = f.fn.parent if f.fn.parent is not None and f.fn.parent.type == "template_declaration" else f.fn
    if top.parent is None or top.parent.type != "translation_unit":
        return None  # inside a namespace or a linkage block of its own: braces would not nest
    at = _top_insert_point(f)
    end = f.k.span.end
    return f.done([(at, at, b"\nnamespace kt_style {\n"),
                   (end, end, b"\n}  // namespace kt_style\nusing namespace kt_style;\n")])


def extern_c(src: Source) -> Source | None:
    """``extern "C"`` on a non-template kernel (dropping a ``static`` that cannot go with it)."""
    f = _File(src)
    if f.k.template_params or sum(1 for k in f.cf.kernels if k.name == src.kernel) != 1:
        return None
    head = f.data[f.k.span.start:f.k.name_span.start]
    if b'extern "C"' in head or re.search(rb"\b__global__\b[^;{}]*\b" + src.kernel.encode() + rb"\s*\([^;{]*\)\s*;",
                                          f.data):
        return None  # already, or forward-declared (the declarations would have to agree)
    edits = [(f.k.span.start, f.k.span.start, b'extern "C" ')]
    for m in re.finditer(rb"\bstatic\s+", head):
        edits.append((f.k.span.start + m.start(), f.k.span.start + m.end(), b""))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (3) constants
_INT_LIT = re.compile(r"^\(?\s*(\d+)\s*\)?$")


def _preproc_conditional_words(text: str) -> set[str]:
    return {w for line in re.findall(r"(?m)^\s*#\s*(?:if|ifdef|ifndef|elif|undef)\b.*$", text)
            for w in re.findall(r"[A-Za-z_]\w*", line)}


def define_to_constexpr(src: Source) -> Source | None:
    """Every ``#define NAME <integer>`` to ``constexpr int NAME = <integer>;``."""
    f = _File(src)
    cond = _preproc_conditional_words(src.text)
    edits = []
    for d in f.cf.defines:
        m = _INT_LIT.match(d.value or "")
        if not m or d.name in cond or int(m[1]) >= 2 ** 31 or "(" in f.data[d.span.start:d.span.end].decode().split(d.name)[1][:1]:
            continue
        end = d.span.end
        while end > d.span.start and f.data[end - 1:end] in b"\r\n":
            end -= 1
        edits.append((d.span.start, end, f"constexpr int {d.name} = {m[1]};".encode()))
    return f.done(edits)


def constexpr_to_define(src: Source) -> Source | None:
    """Every file- or namespace-scope ``constexpr <int type> NAME = <integer>;`` to ``#define NAME <integer>``."""
    f = _File(src)
    edits = []
    for n in f.nodes(None, ("declaration",)):
        if n.parent is None or n.parent.type not in ("translation_unit", "declaration_list"):
            continue
        m = re.fullmatch(r"(?:static\s+)?(?:inline\s+)?constexpr\s+(?:static\s+)?(?:const\s+)?"
                         r"(?:int|unsigned|unsigned int|int32_t|uint32_t|size_t|int64_t|long)\s+([A-Za-z_]\w*)\s*=\s*"
                         r"(\d+)\s*;", f.t(n).strip())
        if not m:
            continue
        name = m[1]
        bad = re.search(r"(\.|->|::)\s*" + name + r"\b|\b" + name + r"\s*::", src.text)
        decls = re.findall(r"\b(?:int|float|auto|unsigned|size_t|int64_t|const)\s+" + name + r"\b", src.text)
        if bad or len(decls) > 1:
            continue
        edits.append((n.start_byte, n.end_byte, f"#define {name} {m[2]}\n".encode()))
    return f.done(edits)


def _kernel_literals(f: _File) -> dict[int, list]:
    """Decimal integer literals >= 2 (no suffix) in the kernel (signature, bounds, body), not in preprocessor lines."""
    out: dict[int, list] = {}
    for n in f.nodes(f.fn, ("number_literal",)):
        t = f.t(n)
        if re.fullmatch(r"[1-9]\d*", t) and int(t) >= 2 and not _in_preproc(n):
            out.setdefault(int(t), []).append(n)
    return out


def _literals_to_names(src: Source, how: str) -> Source | None:
    f = _File(src)
    lits = _kernel_literals(f)
    if not lits:
        return None
    taken = f.words()
    edits, defs = [], []
    for v, nodes in sorted(lits.items()):
        name = f"KT_C{v}" if f"KT_C{v}" not in taken else f"KT_CONST_{v}"
        defs.append(f"#define {name} {v}\n" if how == "define" else f"constexpr int {name} = {v};\n")
        edits += [(n.start_byte, n.end_byte, name.encode()) for n in nodes]
    at = _top_insert_point(f)
    edits.append((at, at, ("\n" + "".join(defs)).encode()))
    return f.done(edits)


def literals_to_define(src: Source) -> Source | None:
    """Each integer literal of the kernel to a ``#define``d name (at the top of the file)."""
    return _literals_to_names(src, "define")


def literals_to_constexpr(src: Source) -> Source | None:
    """Each integer literal of the kernel to a file-scope ``constexpr int``."""
    return _literals_to_names(src, "constexpr")


def define_inline(src: Source) -> Source | None:
    """Every integer ``#define`` inlined into its uses (code and other macros) and removed."""
    f = _File(src)
    cond = _preproc_conditional_words(src.text)
    vals = {}
    for d in f.cf.defines:
        m = _INT_LIT.match(d.value or "")
        if m and d.name not in cond and not f.data[d.span.start:d.span.end].decode().split(d.name, 1)[1].startswith("("):
            vals[d.name] = m[1]
    if not vals:
        return None
    edits = [(n.start_byte, n.end_byte, vals[f.t(n)].encode())
             for n in f.nodes(None, ("identifier", "type_identifier"))  # `Block<float, N>`: N read as a type
             if f.t(n) in vals and not _in_preproc(n)]
    for n in f.nodes(None, ("preproc_arg",)):  # other macros' bodies, #pragma unroll N
        t = f.t(n)
        new = re.sub(r"\b(" + "|".join(map(re.escape, vals)) + r")\b", lambda m: vals[m[1]], t)
        if new != t:
            edits.append((n.start_byte, n.end_byte, new.encode()))
    for d in f.cf.defines:
        if d.name in vals:
            edits.append((d.span.start, d.span.end, b"\n" if f.data[d.span.end - 1:d.span.end] == b"\n" else b""))
    return f.done(edits)


def block_size_template_param(src: Source) -> Source | None:
    """A non-template kernel's block-size literal (its launch's literal block, or its largest power-of-two literal
    >= 32) to a defaulted template parameter ``template <int KT_BLOCK = V>``; launches keep deducing the default."""
    f = _File(src)
    if f.k.template_params or b'extern "C"' in f.data[f.k.span.start:f.k.name_span.start]:
        return None  # a template cannot have C linkage
    lits = _kernel_literals(f)
    v = None
    for ls in f.k.launch_sites:
        if len(ls.config) > 1 and re.fullmatch(r"\d+", ls.config[1].text.strip()):
            v = int(ls.config[1].text)
    if v not in lits:
        pow2 = [x for x in lits if x >= 32 and x & (x - 1) == 0]
        v = max(pow2) if pow2 else None
    if v is None:
        return None
    name = "KT_BLOCK" if "KT_BLOCK" not in f.words() else "KT_BLOCK_SIZE"
    edits = [(n.start_byte, n.end_byte, name.encode()) for n in lits[v]]
    edits.append((f.k.span.start, f.k.span.start, f"template <int {name} = {v}>\n".encode()))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (4) qualifiers
def _param_name_node(f: _File, p):
    for n in f.nodes(f.fn.child_by_field_name("declarator"), ("identifier",)):
        if n.start_byte >= p.span.start and n.end_byte <= p.span.end and f.t(n) == p.name:
            return n
    return None


def add_restrict(src: Source) -> Source | None:
    """``__restrict__`` on every pointer parameter that lacks it."""
    f = _File(src)
    edits = []
    for p in f.k.params:
        if p.is_pointer and "restrict" not in p.type and "*" in p.type:
            n = _param_name_node(f, p)
            if n is not None:
                edits.append((n.start_byte, n.start_byte, b"__restrict__ "))
    return f.done(edits)


def drop_restrict(src: Source) -> Source | None:
    """No ``__restrict__`` on any parameter."""
    f = _File(src)
    edits = []
    for p in f.k.params:
        for m in re.finditer(rb"\b(__restrict__|__restrict|restrict)\b\s*", f.data[p.span.start:p.span.end]):
            edits.append((p.span.start + m.start(), p.span.start + m.end(), b""))
    return f.done(edits)


def _only_read_by_subscript(f: _File, name: str) -> bool:
    for n in _uses(f, name, f.body):
        par = n.parent
        if par.type == "subscript_expression" and par.child_by_field_name("argument") == n:
            top = par.parent
            if top.type in ("assignment_expression",) and top.child_by_field_name("left") == par:
                return False
            if top.type == "update_expression" or (top.type == "pointer_expression" and f.t(top).startswith("&")):
                return False
            continue
        if par.type == "argument_list" and par.parent.type == "call_expression" and \
                f.t(par.parent.child_by_field_name("function")) == "__ldg":
            continue
        return False
    return True


def add_pointee_const(src: Source) -> Source | None:
    """``const`` pointees on the spec's ``in`` buffers the kernel only reads by subscript."""
    f = _File(src)
    args = _spec_args(f)
    if len(args) != len(f.k.params):
        return None
    edits = []
    for p, (s, e) in zip(f.k.params, args):
        role = re.match(rb"\s*\w+\s*:\s*(\w+)", f.data[s:e])
        if p.is_pointer and not p.is_const and role and role[1] == b"in" and p.type.count("*") == 1 \
                and _only_read_by_subscript(f, p.name):
            edits.append((p.span.start, p.span.start, b"const "))
    return f.done(edits)


_UNCONST = b"template <typename T> __host__ __device__ inline T* kt_unconst(const T* p) { return const_cast<T*>(p); }\n"


def drop_pointee_const(src: Source) -> Source | None:
    """No ``const`` on pointees (``const T*`` -> ``T*``); each launch passes its argument through a const_cast."""
    f = _File(src)
    launches = _editable_launches(f)
    if launches is None:
        return None
    edits = []
    idx = []
    for i, p in enumerate(f.k.params):
        t = f.data[p.span.start:p.span.end]
        if p.is_pointer and p.is_const and t.count(b"*") == 1:
            m = re.search(rb"\bconst\b\s*", t[:t.index(b"*")])
            if m:
                edits.append((p.span.start + m.start(), p.span.start + m.end(), b""))
                idx.append(i)
    if not edits:
        return None
    for ls in launches:
        if len(ls.args) != len(f.k.params):
            return None
        for i in idx:
            a = ls.args[i].span
            edits += [(a.start, a.start, b"kt_unconst("), (a.end, a.end, b")")]
    at = _top_insert_point(f)
    edits.append((at, at, b"\n" + _UNCONST))
    return f.done(edits)


def add_scalar_const(src: Source) -> Source | None:
    """Top-level ``const`` on scalar parameters the kernel never assigns."""
    f = _File(src)
    edits = [(p.span.start, p.span.start, b"const ") for p in f.k.params
             if not p.is_pointer and not re.match(r"\s*const\b", p.type) and "&" not in p.type
             and not _is_written(f, p.name)]
    return f.done(edits)


def drop_scalar_const(src: Source) -> Source | None:
    """No top-level ``const`` on scalar parameters."""
    f = _File(src)
    edits = []
    for p in f.k.params:
        t = f.data[p.span.start:p.span.end]
        m = re.match(rb"const\s+", t)
        if not p.is_pointer and m and b"&" not in t:
            edits.append((p.span.start, p.span.start + m.end(), b""))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (5) index types
def _ensure_cstdint(f: _File, edits):
    if "<cstdint>" not in f.src.text and "<stdint.h>" not in f.src.text:
        edits.append((0, 0, b"#include <cstdint>\n"))


def widen_int_locals(src: Source) -> Source | None:
    """``int`` locals of the kernel to ``int64_t`` (same values: widening cannot overflow where int did not)."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("declaration",)):
        ty = n.child_by_field_name("type")
        if ty is not None and f.t(ty) == "int" and not any(c.type == "storage_class_specifier" for c in n.children) \
                and "__shared__" not in f.t(n):
            edits.append((ty.start_byte, ty.end_byte, b"int64_t"))
    if edits:
        _ensure_cstdint(f, edits)
    return f.done(edits)


def widen_int_params(src: Source) -> Source | None:
    """``int`` scalar parameters to ``int64_t`` (spec dtype i32 -> i64; launchers convert implicitly)."""
    f = _File(src)
    args = _spec_args(f)
    if len(args) != len(f.k.params):
        return None
    edits = []
    for p, (s, e) in zip(f.k.params, args):
        if p.is_pointer or re.sub(r"\bconst\b", "", p.type).strip() != "int":
            continue
        t = f.data[p.span.start:p.span.end]
        m = re.search(rb"\bint\b", t)
        edits.append((p.span.start + m.start(), p.span.start + m.end(), b"int64_t"))
        a = f.data[s:e]
        m2 = re.search(rb":\s*(i32)\b", a)
        if m2 is None:
            return None
        edits.append((s + m2.start(1), s + m2.end(1), b"i64"))
    if edits:
        _ensure_cstdint(f, edits)
    return f.done(edits)


def _fits_int32(f: _File) -> bool:
    from agent_core.source import spec as S
    spec = S.find_spec(f.cf, f.k.name)
    for sizes in spec.sizes:
        env = S.size_env(spec, spec.sizes.index(sizes))
        for a in spec.args:
            n = S.buffer_elems(spec, sizes).get(a.name, 0)
            if n * S.dtype_info(a.dtype)[1] >= 2 ** 31:
                return False
        if any(abs(v) >= 2 ** 31 for v in env.values() if isinstance(v, int)):
            return False
    return True


def narrow_index_locals(src: Source) -> Source | None:
    """64-bit / size_t integer locals of the kernel to ``int`` when every buffer of every size set is under 2 GiB
    (no index or byte offset into them can overflow an int)."""
    f = _File(src)
    if not _fits_int32(f):
        return None
    edits = []
    for n in f.nodes(f.body, ("declaration",)):
        ty = n.child_by_field_name("type")
        if ty is not None and f.t(ty) in ("int64_t", "size_t", "long", "long long", "long int", "uint64_t", "int64",
                                          "std::size_t", "std::int64_t", "ptrdiff_t"):
            if any(c.type == "storage_class_specifier" for c in n.children) or "__shared__" in f.t(n):
                continue
            edits.append((ty.start_byte, ty.end_byte, b"int"))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (6) order
def _reorder(src: Source, perm: Callable[[int], list[int]]) -> Source | None:
    f = _File(src)
    ps = f.k.params
    launches = _editable_launches(f)
    args = _spec_args(f)
    if len(ps) < 2 or launches is None or len(args) != len(ps) or any("..." in p.type for p in ps):
        return None
    order = perm(len(ps))
    if order == list(range(len(ps))):
        return None
    edits = []

    def permute(spans: list[tuple[int, int]]):
        texts = [f.data[s:e] for s, e in spans]
        for (s, e), j in zip(spans, order):
            edits.append((s, e, texts[j]))
    permute([(p.span.start, p.span.end) for p in ps])
    permute(args)
    for ls in launches:
        if len(ls.args) != len(ps):
            return None
        permute([(a.span.start, a.span.end) for a in ls.args])
    return f.done(edits)


def reverse_params(src: Source) -> Source | None:
    """Kernel parameters in reverse order (spec args and every launch follow)."""
    return _reorder(src, lambda n: list(range(n))[::-1])


def rotate_params(src: Source) -> Source | None:
    """Kernel parameters rotated by one: the last first (spec args and every launch follow)."""
    return _reorder(src, lambda n: [n - 1] + list(range(n - 1)))


def outputs_last(src: Source) -> Source | None:
    """Pointer parameters the spec writes (out/inout) moved after the others (spec args and launches follow)."""
    f = _File(src)
    roles = [re.match(rb"\s*\w+\s*:\s*(\w+)", f.data[s:e]) for s, e in _spec_args(f)]
    if not roles or None in roles:
        return None
    outs = [i for i, r in enumerate(roles) if r[1] in (b"out", b"inout")]
    rest = [i for i in range(len(roles)) if i not in outs]
    return _reorder(src, lambda n: rest + outs)


# ------------------------------------------------------------------------------------------- (7) indices
_GLOBAL_IDX = {"blockIdx.x*blockDim.x+threadIdx.x", "blockDim.x*blockIdx.x+threadIdx.x",
               "threadIdx.x+blockIdx.x*blockDim.x", "threadIdx.x+blockDim.x*blockIdx.x"}


def global_index_helper(src: Source) -> Source | None:
    """``blockIdx.x * blockDim.x + threadIdx.x`` (any order) to a call of a ``__device__`` helper."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("binary_expression",)):
        if re.sub(r"\s+", "", f.t(n)) in _GLOBAL_IDX and not _in_preproc(n):
            edits.append((n.start_byte, n.end_byte, b"kt_global_thread_index()"))
    if not edits:
        return None
    at = _top_insert_point(f)
    edits.append((at, at, b"\n__device__ __forceinline__ unsigned int kt_global_thread_index() {\n"
                          b"  return blockIdx.x * blockDim.x + threadIdx.x;\n}\n"))
    return f.done(edits)


def _builtin_to_local(src: Source, builtin: str, local: str) -> Source | None:
    f = _File(src)
    a, b = builtin.split(".")
    edits = []
    for n in f.nodes(f.body, ("field_expression",)):
        if re.sub(r"\s+", "", f.t(n)) == builtin and not _in_preproc(n):
            edits.append((n.start_byte, n.end_byte, local.encode()))
    if not edits or local in f.words() or any(n.type == "lambda_expression" for n in f.nodes(f.body)):
        return None
    at = f.body.start_byte + 1
    edits.append((at, at, f"\n  const unsigned int {local} = {builtin};".encode()))
    return f.done(edits)


def thread_index_local(src: Source) -> Source | None:
    """``threadIdx.x`` read through a local ``const unsigned int tx`` declared first in the kernel."""
    return _builtin_to_local(src, "threadIdx.x", "kt_tx")


def block_index_local(src: Source) -> Source | None:
    """``blockIdx.x`` read through a local ``const unsigned int bx`` declared first in the kernel."""
    return _builtin_to_local(src, "blockIdx.x", "kt_bx")


# ------------------------------------------------------------------------------------------- (7b) loop spellings
def _pragma_before(f: _File, n) -> bool:
    """Whether a ``#pragma`` (``unroll``) stands right before ``n``: it must stay next to its loop."""
    before = f.data[:n.start_byte].rstrip()
    line = before[before.rfind(b"\n") + 1:]
    return line.lstrip().startswith(b"#pragma")


def hoist_for_init(src: Source) -> Source | None:
    """``for (int i = a; c; u) s`` -> ``{ int i = a; for (; c; u) s }`` (the loop variable declared before its loop)."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("for_statement",)):
        init = n.child_by_field_name("initializer")
        if init is None or init.type != "declaration" or _in_preproc(n) or _pragma_before(f, n):
            continue
        decl = f.t(init).strip()
        edits += [(n.start_byte, n.start_byte, b"{ " + decl.encode() + b" "), (init.start_byte, init.end_byte, b";"),
                  (n.end_byte, n.end_byte, b" }")]
    return f.done(edits)


def _loop_bodies(f: _File):
    for n in f.nodes(f.body, ("for_statement", "while_statement")):
        body = n.child_by_field_name("body")
        if body is not None and not _in_preproc(n):
            yield n, body


def add_loop_braces(src: Source) -> Source | None:
    """A loop's body of one statement written without braces gets them (``for (...) s += x[i];`` -> ``{ ... }``)."""
    f = _File(src)
    return f.done([(b.start_byte, b.end_byte, b"{ " + f.t(b).encode() + b" }") for _, b in _loop_bodies(f)
                   if b.type != "compound_statement"])


def drop_loop_braces(src: Source) -> Source | None:
    """A loop's body of braces around one expression statement loses them (``{ s += x[i]; }`` -> ``s += x[i];``)."""
    f = _File(src)
    edits = []
    for _, b in _loop_bodies(f):
        inner = [c for c in b.named_children if c.type != "comment"]
        if b.type == "compound_statement" and len(inner) == 1 and inner[0].type == "expression_statement":
            edits.append((b.start_byte, b.end_byte, f.t(inner[0]).encode()))
    # an edit inside another one's range would overlap: keep the outermost of nested bodies only
    edits.sort(key=lambda e: (e[0], -e[1]))
    kept = []
    for e in edits:
        if not kept or e[0] >= kept[-1][1]:
            kept.append(e)
    return f.done(kept)


def for_to_while(src: Source) -> Source | None:
    """``for (init; c; u) s`` -> ``{ init; while (c) { s u; } }`` (loops without ``continue``: it would skip u)."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("for_statement",)):
        init, cond = n.child_by_field_name("initializer"), n.child_by_field_name("condition")
        upd, body = n.child_by_field_name("update"), n.child_by_field_name("body")
        if None in (cond, upd, body) or _in_preproc(n) or _pragma_before(f, n) or "continue" in f.t(body) \
                or any(m.type == "for_statement" for m in f.nodes(body)):
            continue  # innermost loops only: an edit inside another's range would overlap
        head = (f.t(init).strip() if init is not None else "")
        head = head if head.endswith(";") or not head else head + ";"
        inner = f.t(body)[1:-1] if body.type == "compound_statement" else f.t(body)
        edits.append((n.start_byte, n.end_byte,
                      f"{{ {head} while ({f.t(cond)}) {{ {inner} {f.t(upd)}; }} }}".encode()))
    return f.done(edits)


def split_compound_assign(src: Source) -> Source | None:
    """``a += b`` -> ``a = a + (b)`` for a plain local (``+=``, ``*=``, ``-=``; not in a for's update)."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("assignment_expression",)):
        op, left, right = n.child_by_field_name("operator"), n.child_by_field_name("left"), n.child_by_field_name("right")
        if op is None or f.t(op) not in ("+=", "-=", "*=") or left is None or left.type != "identifier" \
                or right is None or _in_preproc(n) or (n.parent is not None and n.parent.type == "for_statement"):
            continue
        edits.append((n.start_byte, n.end_byte, f"{f.t(left)} = {f.t(left)} {f.t(op)[0]} ({f.t(right)})".encode()))
    return f.done(edits)


def c_casts_to_static(src: Source) -> Source | None:
    """``(float)e`` / ``(int)e`` -> ``static_cast<float>(e)`` in the kernel's body."""
    f = _File(src)
    edits = []
    for n in f.nodes(f.body, ("cast_expression",)):
        ty, val = n.child_by_field_name("type"), n.child_by_field_name("value")
        if ty is None or val is None or _in_preproc(n) or f.t(ty).strip() not in ("float", "int", "double",
                                                                                   "long long", "int64_t", "size_t"):
            continue
        if any(m.type == "cast_expression" for m in f.nodes(val)):
            continue  # a cast inside another's value would overlap
        edits.append((n.start_byte, n.end_byte, f"static_cast<{f.t(ty).strip()}>({f.t(val)})".encode()))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- (8) numerics
def _calls(f: _File, name: str):
    for n in f.nodes(None, ("call_expression",)):
        fn = n.child_by_field_name("function")
        if fn is not None and f.t(fn) == name and not _in_preproc(n):
            yield n, fn


def _swap_call(src: Source, old: str, new: str) -> Source | None:
    f = _File(src)
    return f.done([(fn.start_byte, fn.end_byte, new.encode()) for _, fn in _calls(f, old)])


def fast_expf(src: Source) -> Source | None:
    """``expf`` -> ``__expf`` everywhere (numerics: the fast intrinsic rounds differently)."""
    return _swap_call(src, "expf", "__expf")


def accurate_expf(src: Source) -> Source | None:
    """``__expf`` -> ``expf`` everywhere (numerics)."""
    return _swap_call(src, "__expf", "expf")


def rsqrt_to_div_sqrt(src: Source) -> Source | None:
    """``rsqrtf(x)`` -> ``(1.0f / sqrtf(x))`` everywhere (numerics: two roundings, not one approximation)."""
    f = _File(src)
    edits = []
    for call, fn in _calls(f, "rsqrtf"):
        args = call.child_by_field_name("arguments")
        edits.append((call.start_byte, call.end_byte, f"(1.0f / sqrtf{f.t(args)})".encode()))
    return f.done(edits)


def div_sqrt_to_rsqrt(src: Source) -> Source | None:
    """``1.0f / sqrtf(x)`` -> ``rsqrtf(x)`` everywhere (numerics)."""
    f = _File(src)
    edits = []
    for n in f.nodes(None, ("binary_expression",)):
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        op = n.child_by_field_name("operator")
        if op is not None and f.t(op) == "/" and left is not None and f.t(left) in ("1.0f", "1.f", "1.0F") \
                and right is not None and right.type == "call_expression" \
                and f.t(right.child_by_field_name("function")) == "sqrtf":
            edits.append((n.start_byte, n.end_byte, f"rsqrtf{f.t(right.child_by_field_name('arguments'))}".encode()))
    return f.done(edits)


# ------------------------------------------------------------------------------------------- registry
_ALL = [
    (rename_params, False), (rename_locals, False), (rename_kernel, False), (rename_helpers, False),
    (namespace_file, False), (namespace_kernel, False), (extern_c, False),
    (define_to_constexpr, False), (constexpr_to_define, False), (literals_to_define, False),
    (literals_to_constexpr, False), (define_inline, False), (block_size_template_param, False),
    (add_restrict, False), (drop_restrict, False), (add_pointee_const, False), (drop_pointee_const, False),
    (add_scalar_const, False), (drop_scalar_const, False),
    (widen_int_locals, False), (widen_int_params, False), (narrow_index_locals, False),
    (reverse_params, False), (rotate_params, False), (outputs_last, False),
    (global_index_helper, False), (thread_index_local, False), (block_index_local, False),
    (hoist_for_init, False), (add_loop_braces, False), (drop_loop_braces, False), (for_to_while, False),
    (split_compound_assign, False), (c_casts_to_static, False),
    (fast_expf, True), (accurate_expf, True), (rsqrt_to_div_sqrt, True), (div_sqrt_to_rsqrt, True),
]
MUTATIONS: dict[str, Mutation] = {fn.__name__: Mutation(fn.__name__, fn, (fn.__doc__ or "").strip(), num)
                                  for fn, num in _ALL}
STYLE = [m for m in MUTATIONS.values() if not m.numerics]
NUMERICS = [m for m in MUTATIONS.values() if m.numerics]


def apply(name: str, src: Source) -> Source | None:
    return MUTATIONS[name].fn(src)


# ------------------------------------------------------------------------------------------- the kernels
CORPUS_EXPERT = {  # corpus family -> the expert families serving it (as tests/test_corpus_candidates.py)
    "gated_act": {"gated_activation"}, "rms_norm": {"rms_norm"}, "fused_add_rms_norm": {"fused_add_rms_norm"},
    "layer_norm": {"layer_norm"}, "softmax": {"softmax"}, "merge_attn_states": {"merge_attn_states"},
    "rotary": {"rotary_embedding"}, "group_quant": {"group_quant"},
}


def cases() -> list[tuple[str, str]]:
    """(path relative to the repository, kernel) of every corpus variant of a family with an expert, then every
    bench kernel."""
    out = []
    manifest = CORPUS / "corpus.toml"
    if manifest.is_file():
        for v in tomllib.loads(manifest.read_text())["variant"]:
            if not v["family"].startswith("other:"):
                out.append((f"bench/corpus/{v['file']}", v["kernel"]))
    for p in sorted((ROOT / "bench").glob("*.cu")):
        cf = parse_cuda(p.read_text(), str(p))
        out += [(f"bench/{p.name}", k.name) for k in cf.kernels]
    return out


def read(rel: str, kernel: str) -> Source:
    return Source((ROOT / rel).read_text(encoding="utf-8"), kernel)


def matching(src: Source, path: str = "<mutated>") -> tuple[frozenset[str], int] | None:
    """(families with a candidate, number of candidate bindings) of the source's kernel; None when the file no
    longer parses cleanly around the kernel or its spec is not found."""
    from agent_core.source import spec as S
    from agent_core.source.cuda_parse import kernel_has_errors
    from agent_core.templating import experts
    cf = parse_cuda(src.text, path)
    if not any(k.name == src.kernel for k in cf.kernels) or kernel_has_errors(cf, src.kernel):
        return None
    spec = S.find_spec(cf, src.kernel)
    if spec is None:
        return None
    got = experts.candidates(cf, src.kernel, spec)
    return frozenset(b.expert.family for b in got), len(got)


def main(argv: list[str] | None = None) -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", nargs="*", help="substrings of the case paths to run (default all)")
    ap.add_argument("--mutations", nargs="*", help="mutation names (default all)")
    a = ap.parse_args(argv)
    for rel, kernel in cases():
        if a.files and not any(s in rel for s in a.files):
            continue
        src = read(rel, kernel)
        base = matching(src, rel)
        for m in MUTATIONS.values():
            if a.mutations and m.name not in a.mutations:
                continue
            try:
                out = m.fn(src)
            except Exception as e:  # noqa: BLE001 - the report shows it
                print(f"ERROR {m.name} {rel}: {type(e).__name__}: {e}")
                continue
            if out is None:
                continue
            got = matching(out, rel)
            tag = "same" if got == base else ("UNPARSED" if got is None else
                                              ("FAMILY" if got[0] != base[0] else "COUNT"))
            print(f"{tag:8} {'N' if m.numerics else 'S'} {m.name:28} {rel} {kernel} {base} -> {got}", flush=True)


if __name__ == "__main__":
    main()
