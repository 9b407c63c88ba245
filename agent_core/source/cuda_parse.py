"""tree-sitter-cuda -> ``model.CudaFile``: kernels, launch sites, host variables, ``#define``s, pragmas, errors.

Spans are UTF-8 byte offsets with 0-based lines and byte columns (tree-sitter's points); all text is sliced
from the UTF-8 bytes. ``parse_tree`` + ``build_file`` let the language server re-parse incrementally.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from bisect import bisect_right
from collections.abc import Callable

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree

from agent_core.model import (CudaFile, Define, Expr, HostVar, Kernel, KernelParam, LaunchSite, ParseIssue, Pragma, Span,
                    TemplateParam)

LANGUAGE = Language(tree_sitter_cuda.language())
_local = threading.local()
# What ``build`` looks at, found by tree-sitter in C rather than by walking every node in Python.
_FILE_QUERY = Query(LANGUAGE, """
(preproc_def) @define
(function_definition "__global__") @function
(call_expression (kernel_call_syntax)) @launch
(translation_unit (declaration) @global)
(declaration_list (declaration) @global)
(preproc_ifdef (declaration) @global)
(preproc_if (declaration) @global)
(preproc_else (declaration) @global)
""")
# Every function: when a macro stands for __global__, any of them can be a kernel.
_FUNCTION_QUERY = Query(LANGUAGE, "(function_definition) @function")
# The last trees parsed, by source: the language server parses a version, then the engine (templatize)
# parses the same bytes again for each kernel it analyses; a copy of the cached tree is returned instead.
_TREE_CACHE: dict[bytes, Tree] = {}
_TREE_CACHE_SIZE = 2
_tree_lock = threading.Lock()

_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_COMMENT_RE = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)



def walk(n: Node):
    """``n`` and every named node under it, in source order (iterative: deep trees are fine)."""
    stack = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.named_children))

def _parser() -> Parser:
    p = getattr(_local, "parser", None)
    if p is None:
        p = _local.parser = Parser(LANGUAGE)
    return p


# Attributes tree-sitter-cuda 0.21's grammar reads as syntax errors: Hopper's compile-time cluster size, the
# per-kernel register cap, and CUDA's alignment specifier (vLLM's `struct __align__(16) vec_t`, CUTLASS's
# `__align__(sizeof(T) * N)`): masked for the parse only, the compiled text keeps them.
_NEWER_ATTRIBUTES = re.compile(rb"\b(?:__cluster_dims__|__maxnreg__|__align__)\s*\(")


def mask_newer_attributes(source: bytes) -> bytes:
    """``source`` with each ``__cluster_dims__(...)``, ``__maxnreg__(...)`` and ``__align__(...)`` blanked (spaces,
    newlines kept), so tree-sitter parses the kernel around them and every byte offset stays that of ``source``."""
    if b"__cluster_dims__" not in source and b"__maxnreg__" not in source and b"__align__" not in source:
        return source
    out = bytearray(source)
    for m in _NEWER_ATTRIBUTES.finditer(source):
        j = _group_end(source, m.end() - 1)
        if j is None:
            continue  # unbalanced (being typed): leave it to the grammar
        for i in range(m.start(), j + 1):
            if out[i] != 0x0A:
                out[i] = 0x20
    return bytes(out)


def _group_end(source: bytes, at: int) -> int | None:
    """The offset of the ``)`` that closes the ``(`` at ``at``; None where the source ends first (being typed)."""
    depth = 0
    for j in range(at, len(source)):
        depth += source[j] == 0x28  # (
        depth -= source[j] == 0x29  # )
        if depth == 0:
            return j
    return None


# A C header's linkage guard (`#ifdef __cplusplus` / `extern "C" {` / `#endif`, and the closing `}` guarded alike):
# tree-sitter sees a brace opened in one preprocessor branch and closed in another as a syntax error ("missing
# #endif"); nvcc always defines __cplusplus, so the parse reads the guarded lines as the compiler does.
_CPLUSPLUS_GUARD = re.compile(
    rb"^[ \t]*#[ \t]*if(?:def[ \t]+__cplusplus|[ \t]+defined[ \t]*\(?[ \t]*__cplusplus[ \t]*\)?)[ \t]*(?://[^\n]*)?\n"
    rb"([ \t]*(?:extern[ \t]*\"C\"[ \t]*\{|\})[ \t]*(?://[^\n]*)?\n)"
    rb"[ \t]*#[ \t]*endif\b[^\n]*", re.M)


def mask_cplusplus_guards(source: bytes) -> bytes:
    """``source`` with the ``#ifdef __cplusplus`` and ``#endif`` lines around an ``extern "C" {`` or its closing ``}``
    blanked (newlines kept), so the parse reads the linkage block the compiler sees (nvcc defines __cplusplus) and
    every byte offset stays that of ``source``."""
    if b"__cplusplus" not in source:
        return source
    out = bytearray(source)
    for m in _CPLUSPLUS_GUARD.finditer(source):
        for i in list(range(m.start(), m.start(1))) + list(range(m.end(1), m.end())):
            if out[i] != 0x0A:
                out[i] = 0x20
    return bytes(out)


_DECLTYPE = re.compile(rb"\bdecltype\s*\(")


def mask_decltype_casts(source: bytes) -> bytes:
    """``source`` with each ``decltype(e)`` that is the type of a functional cast or a braced initialization
    (``decltype(x){0}``, ``decltype(acc)(1)``: syntax errors to tree-sitter-cuda 0.21's grammar, which reads a
    ``decltype`` only as a declaration's type) written as an identifier of the same length (``kt_dt________``), so the
    kernel around it parses and every byte offset stays that of ``source``."""
    if b"decltype" not in source:
        return source
    out = bytearray(source)
    for m in _DECLTYPE.finditer(source):
        j = _group_end(source, m.end() - 1)
        nxt = source[j + 1:].lstrip(b" \t")[:1] if j is not None else b""
        if j is None or nxt not in (b"{", b"(") or b"\n" in source[m.start():j + 1]:
            continue  # a declaration's type, or unbalanced (being typed): left to the grammar
        out[m.start():j + 1] = (b"kt_dt" + b"_" * (j + 1 - m.start()))[:j + 1 - m.start()]
    return bytes(out)


def parse_tree(source: bytes, old_tree: Tree | None = None) -> Tree:
    """Parse UTF-8 ``source``; pass the edited previous tree (``tree.edit(...)``) to re-parse incrementally.
    Every call returns a tree of its own (safe to edit; trees are not shared between threads). Attributes the
    grammar does not know are masked first (``mask_newer_attributes``), and so are a C header's ``__cplusplus`` guards
    around its ``extern "C" {`` (``mask_cplusplus_guards``) and a ``decltype`` cast's types
    (``mask_decltype_casts``), the uses of the file's launching macros (``macros.mask_launch_macro_uses``), of its
    function-qualifier macros, written as the qualifiers they
    stand for (``macros.mask_qualifier_macros``: ``HOSTDEVICE`` for ``__host__ __device__``), and of its attribute
    macros, blanked (``macros.mask_attribute_macros``: ``LAUNCH_BOUNDS()``); a source that has any is parsed whole."""
    source = bytes(source)
    with _tree_lock:
        hit = _TREE_CACHE.get(source)
        if hit is not None:
            return hit.copy()
    from agent_core.source.macros import mask_attribute_macros, mask_launch_macro_uses, mask_qualifier_macros
    masked = mask_attribute_macros(mask_qualifier_macros(mask_launch_macro_uses(mask_decltype_casts(
        mask_cplusplus_guards(mask_newer_attributes(source))))))
    if masked is not source:
        old_tree = None  # the masking may change bytes outside the edited ranges: no incremental re-parse
    tree = _parser().parse(masked, old_tree) if old_tree is not None else _parser().parse(masked)
    with _tree_lock:
        _TREE_CACHE[source] = tree.copy()
        while len(_TREE_CACHE) > _TREE_CACHE_SIZE:
            del _TREE_CACHE[next(iter(_TREE_CACHE))]
    return tree


def parse_cuda(text: str, path: str = "<memory>") -> CudaFile:
    """Parse a .cu file's text into a ``CudaFile``."""
    return build_file(parse_tree(text.encode("utf-8")), text, path)


def node_span(n: Node) -> Span:
    return Span(n.start_byte, n.end_byte, n.start_point.row, n.start_point.column, n.end_point.row,
                n.end_point.column)


def kernel_has_errors(cf: CudaFile, kernel: Kernel | str) -> list[ParseIssue]:
    """The syntax errors inside ``kernel``'s span (a Kernel or its name)."""
    k = cf.kernel(kernel) if isinstance(kernel, str) else kernel
    return [e for e in cf.errors if e.span.start < k.span.end and e.span.end > k.span.start
            or (e.span.start == e.span.end and k.span.start <= e.span.start <= k.span.end)]


# --------------------------------------------------------------------------------------------- building
class _Builder:
    def __init__(self, tree: Tree, text: str, path: str):
        self.tree, self.text, self.path = tree, text, path
        self.data = text.encode("utf-8")
        self._lb_macros: dict | None = None  # the file's __launch_bounds__ macros, read at the first kernel

    def t(self, n: Node) -> str:
        return self.data[n.start_byte:n.end_byte].decode("utf-8", errors="replace")

    def expr(self, n: Node) -> Expr:
        return Expr(self.t(n), node_span(n))

    def sub_span(self, n: Node, start: int, end: int) -> Span:
        """Span of bytes [start, end) (absolute offsets) inside single-line-or-not node ``n``."""
        return Span(start, end, *self._point(n, start), *self._point(n, end))

    def _point(self, n: Node, off: int) -> tuple[int, int]:
        seg = self.data[n.start_byte:off]
        nl = seg.count(b"\n")
        if nl == 0:
            return n.start_point.row, n.start_point.column + len(seg)
        return n.start_point.row + nl, len(seg) - seg.rfind(b"\n") - 1

    def build(self, previous: CudaFile | None = None) -> CudaFile:
        """The file's kernels (with their launch sites), defines and errors. The file is cut into chunks (the
        top-level constructs, and those of large #if / namespace / extern "C" blocks); a chunk with the same
        text as one of ``previous`` (an earlier version of the same file) reuses its facts, moved to where
        it now stands, so that an edit re-analyses only the chunks it touched."""
        root = self.tree.root_node
        prev = getattr(previous, "_chunks", None) if previous is not None and previous.path == self.path else None
        chunks = _chunks(root, self.data)
        if prev is not None:
            prev_index, prev_macros, _ = prev
            for ch in chunks:
                got = prev_index.get(ch.key)
                if got is None or ch.error:
                    continue
                if got.empty:  # nothing in it (most chunks: host code, comments): nothing to move
                    ch.facts = got
                    continue
                pt = ch.node.start_point
                if pt.column == got.col:  # on another column its facts' columns would be off: redone
                    ch.facts = got.moved_to(ch.start, pt.row)
        missing = [ch for ch in chunks if ch.facts is None]
        found = self._query(missing)
        for ch in missing:  # defines first: kernels declared through a macro depend on all of them
            pt = ch.node.start_point
            ch.facts = _ChunkFacts(ch.start, pt.row, pt.column,
                                   defines=[d for d in map(self.define, found[id(ch)]["define"]) if d is not None])
        defines = [d for ch in chunks for d in ch.facts.defines]
        macro_globals = {d.name for d in defines if "__global__" in d.value.split()}
        if prev is not None and macro_globals != prev_macros and len(missing) < len(chunks):
            return self.build(None)  # which functions are kernels changed: everything again
        if macro_globals:
            for ch_id, got in self._query(missing, _FUNCTION_QUERY).items():
                found[ch_id]["function"] = got["function"]
        for ch in missing:
            f, got = ch.facts, found[id(ch)]
            f.kernels = [k for k in (self.kernel(n, macro_globals) for n in got["function"]) if k is not None]
            f.launches = [x for x in (self.launch(n, []) for n in got["launch"]) if x is not None]
            f.consts = [(g.end_byte, self.declared(g)) for g in got["global"] if _is_constant_decl(self, g)]
        kernels = [_with(k, launch_sites=[], macro_launch_sites=[]) for ch in chunks for k in ch.facts.kernels]
        consts = [c for ch in chunks for c in ch.facts.consts]  # file-scope constants, in order
        by_name = {k.name: k for k in kernels}
        for ch in chunks:
            for site in ch.facts.launches:
                k = by_name.get(site.kernel)
                if k is None:
                    continue
                host_vars: dict[str, HostVar] = {}
                for end, vs in consts:  # file-scope constants declared before the launch, then its locals
                    if end > site.span.start:
                        break
                    for v in vs:
                        host_vars[v.name] = v
                host_vars.update(site.host_vars)
                k.launch_sites.append(_with(site, host_vars=host_vars))
        errors = self.errors(root)
        if by_name and b"<<<" in self.data and b"define" in self.data:
            uses = []
            for site in self.macro_launches(root, consts):
                uses.append((site.span.start, site.span.end))
                k = by_name.get(site.kernel)
                if k is not None:
                    k.macro_launch_sites.append(site)
            if uses and errors:  # `{ LAUNCH(4) }`, `LAUNCH(float, 4);`: no syntax error once the macro is expanded
                errors = [e for e in errors if not any(s <= e.span.start and e.span.end <= t for s, t in uses)]
        if b"__global__" in self.data and b"define" in self.data:
            from agent_core.source.macros import macro_kernels
            mk = {name: (macro, self.sub_span(root, s, e)) for name, macro, s, e in macro_kernels(self.data)
                  if name not in by_name}
        else:
            mk = {}
        cf = CudaFile(self.path, self.text, kernels, defines, errors, mk)
        cf._chunks = ({ch.key: ch.facts for ch in chunks if not ch.error}, macro_globals, [ch.facts for ch in chunks])
        return cf

    def _query(self, chunks: list["_Chunk"], query: Query = _FILE_QUERY) -> dict[int, dict[str, list[Node]]]:
        """The nodes ``build`` looks at inside each of ``chunks``, by chunk id and capture name, in document
        order (an enclosing node before what it encloses); one query per run of adjacent chunks."""
        out: dict[int, dict[str, list[Node]]] = {id(ch): {"define": [], "function": [], "launch": [], "global": []}
                                                for ch in chunks}
        if not chunks:
            return out
        runs: list[list[_Chunk]] = [[chunks[0]]]
        for ch in chunks[1:]:
            if ch.node.start_byte - runs[-1][-1].node.end_byte <= 256:
                runs[-1].append(ch)
            else:
                runs.append([ch])
        root = self.tree.root_node
        for run in runs:
            lo, hi = run[0].node.start_byte, run[-1].node.end_byte
            cur = QueryCursor(query)
            cur.set_byte_range(lo, hi)
            starts = [ch.node.start_byte for ch in run]
            for name, nodes in cur.captures(root).items():
                for n in nodes:
                    i = bisect_right(starts, n.start_byte) - 1
                    if i >= 0 and n.end_byte <= run[i].node.end_byte:
                        out[id(run[i])][name].append(n)
        for d in out.values():
            for nodes in d.values():
                nodes.sort(key=lambda n: (n.start_byte, -n.end_byte))
        return out

    # ------------------------------------------------------------------------------------- errors
    def errors(self, root: Node) -> list[ParseIssue]:
        out: list[ParseIssue] = []
        if not root.has_error:
            return out
        # the function-like macros that expand to a loop's head (Caffe's `CUDA_1D_KERNEL_LOOP(i, n)`: `for (...)`)
        from agent_core.source.macros import scan_defines
        loops = {m.name for m in scan_defines(self.data) if m.params is not None
                 and re.match(r"(?:for|while)\b", m.body.strip())} if b"define" in self.data else set()
        stack = [root]
        while stack:
            n = stack.pop()
            if n.is_missing:
                if not self._loop_macro_head(n, loops):
                    out.append(ParseIssue(f"syntax error: missing '{n.type}'", node_span(n)))
                continue
            if n.is_error:
                snippet = " ".join(self.t(n).split())
                snippet = snippet if len(snippet) <= 40 else snippet[:37] + "..."
                out.append(ParseIssue(f"syntax error: cannot parse '{snippet}'" if snippet else "syntax error",
                                      node_span(n)))
                continue
            if n.has_error:
                stack.extend(reversed(n.children))
        out.sort(key=lambda e: e.span.start)
        return out

    def _loop_macro_head(self, n: Node, loops: set[str]) -> bool:
        """A `;` the grammar misses after a loop macro's head (``CUDA_1D_KERNEL_LOOP(i, M * S * N) { ... }``, the
        macro a `for` in the file's `#define`): read as a call statement before its block, which is what the macro
        expands to (a head that takes its block as the loop's body); no syntax error once the macro is expanded."""
        p = n.parent
        if n.type != ";" or not loops or p is None or p.type != "expression_statement":
            return False
        call = p.named_children[0] if p.named_child_count else None
        fn = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
        nxt = p.next_named_sibling
        return fn is not None and fn.type == "identifier" and self.t(fn) in loops and nxt is not None and \
            nxt.type == "compound_statement"

    # ------------------------------------------------------------------------------------- defines
    def define(self, n: Node) -> Define | None:
        name = n.child_by_field_name("name")
        if name is None:
            return None
        val = n.child_by_field_name("value")
        end_node = val if val is not None else name
        whole = self.sub_span(n, n.start_byte, end_node.end_byte)
        if val is None:
            return Define(self.t(name), "", whole, None)
        raw = self.data[val.start_byte:val.end_byte]
        cleaned = _COMMENT_RE.sub(lambda m: b" " * len(m.group(0)), raw)
        stripped = cleaned.strip()
        if not stripped:
            return Define(self.t(name), "", whole, None)
        s = val.start_byte + (len(cleaned) - len(cleaned.lstrip()))
        e = s + len(stripped)
        value = self.data[s:e].decode("utf-8", errors="replace")
        return Define(self.t(name), value, whole, self.sub_span(val, s, e))

    # ------------------------------------------------------------------------------------- kernels
    def kernel(self, fn: Node, macro_globals: set[str]) -> Kernel | None:
        is_global = any(c.type == "__global__" for c in fn.children)
        if not is_global:
            body = fn.child_by_field_name("body")
            head_end = body.start_byte if body is not None else fn.end_byte
            head = self.data[fn.start_byte:head_end].decode("utf-8", errors="replace")
            if not macro_globals or not (set(re.findall(r"\w+", head)) & macro_globals):
                return None
        fdecl = _function_declarator(fn)
        if fdecl is None:
            return None
        name_node = fdecl.child_by_field_name("declarator")
        if name_node is None:
            return None
        if is_explicit_specialization(name_node):
            # `template <> __global__ void k<__half>(...)`: an instantiation of the kernel template `k`, written
            # out (kerntune's apply writes one); not a kernel of its own (agent_core.source.instantiation)
            return None
        if name_node.type in ("qualified_identifier", "template_function"):
            nn = name_node.child_by_field_name("name")
            name_node = nn if nn is not None else name_node
        outer = fn
        tparams: list[TemplateParam] = []
        if fn.parent is not None and fn.parent.type == "template_declaration":
            outer = fn.parent
            tparams = template_params_of(fn, self.t)
        elif fn.parent is not None and fn.parent.type == "linkage_specification":
            outer = fn.parent  # extern "C" __global__ ...
        body = fn.child_by_field_name("body")
        if body is None:
            return None
        params = []
        plist = fdecl.child_by_field_name("parameters")
        if plist is not None:
            params = [p for p in (self.param(c) for c in plist.named_children) if p is not None]
        lb = next((c for c in fn.named_children if c.type == "launch_bounds"), None)
        launch_bounds = [self.expr(c) for c in lb.named_children if c.type != "comment"] if lb is not None else []
        signature = self.data[outer.start_byte:body.start_byte].decode("utf-8", errors="replace").rstrip()
        from agent_core.source.macros import launch_bounds_macros, macro_launch_bounds
        if self._lb_macros is None:
            self._lb_macros = launch_bounds_macros(self.data)
        return Kernel(name=self.t(name_node), span=node_span(outer), name_span=node_span(name_node),
                      body_span=node_span(body), params=params, template_params=tparams,
                      launch_bounds=launch_bounds, pragmas=self.pragmas(body), launch_sites=[],
                      signature=signature,
                      macro_launch_bounds=[] if launch_bounds else macro_launch_bounds(self._lb_macros, signature))

    def param(self, p: Node) -> KernelParam | None:
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            return None
        decl = p.child_by_field_name("declarator")
        ident, is_pointer = _innermost_identifier(decl)
        if ident is None:
            return None
        before = self.data[p.start_byte:ident.start_byte]
        after = self.data[ident.end_byte:p.end_byte]
        if p.type == "optional_parameter_declaration":
            d = p.child_by_field_name("default_value")
            if d is not None:
                after = self.data[ident.end_byte:d.start_byte].rstrip().rstrip(b"=")
        typ = " ".join((before + after).decode("utf-8", errors="replace").split())
        is_const = any(c.type == "type_qualifier" and self.t(c) == "const" for c in p.children)
        return KernelParam(name=self.t(ident), type=typ, is_pointer=is_pointer, is_const=is_const,
                           span=node_span(p))

    def pragmas(self, body: Node) -> list[Pragma]:
        out: list[Pragma] = []
        stack = [body]
        while stack:
            n = stack.pop()
            if n.type == "preproc_call":
                p = self.pragma(n)
                if p is not None:
                    out.append(p)
                continue
            stack.extend(reversed(n.named_children))
        return out

    def pragma(self, n: Node) -> Pragma | None:
        d = n.child_by_field_name("directive")
        if d is None or self.t(d).replace(" ", "") != "#pragma":
            return None
        arg = n.child_by_field_name("argument")
        end = arg.end_byte if arg is not None else d.end_byte
        raw = self.data[arg.start_byte:arg.end_byte] if arg is not None else b""
        cleaned = _COMMENT_RE.sub(lambda m: b" " * len(m.group(0)), raw)
        text = cleaned.decode("utf-8", errors="replace").strip()
        if arg is not None and cleaned.rstrip() != cleaned:
            end = arg.start_byte + len(cleaned.rstrip())
        value = value_span = None
        m = re.match(rb"\s*unroll\s*(\(\s*)?(\d+)[uUlL]*\s*\)?\s*$", cleaned)
        if m and arg is not None:
            value = int(m.group(2))
            value_span = self.sub_span(arg, arg.start_byte + m.start(2), arg.start_byte + m.end(2))
        loop = n.next_named_sibling
        while loop is not None and loop.type == "comment":
            loop = loop.next_named_sibling
        loop_span = node_span(loop) if loop is not None and loop.type in _LOOPS else None
        return Pragma(text=text, value=value, span=self.sub_span(n, n.start_byte, end), value_span=value_span,
                      loop_span=loop_span)

    # ------------------------------------------------------------------------------------- launches
    @staticmethod
    def _kcs(call: Node) -> Node | None:
        return next((c for c in call.named_children if c.type == "kernel_call_syntax"), None)

    def launch(self, call: Node, globals_: list[Node]) -> LaunchSite | None:
        fn = call.child_by_field_name("function")
        if fn is None:
            return None
        targs: list[Expr] = []
        if fn.type == "template_function":
            al = fn.child_by_field_name("arguments")
            if al is not None:
                targs = [self.expr(c) for c in al.named_children if c.type != "comment"]
            fn = fn.child_by_field_name("name") or fn
        if fn.type == "qualified_identifier":
            while fn is not None and fn.type == "qualified_identifier":
                fn = fn.child_by_field_name("name")
            if fn is None:
                return None
            if fn.type == "template_function":
                al = fn.child_by_field_name("arguments")
                if al is not None:
                    targs = [self.expr(c) for c in al.named_children if c.type != "comment"]
                fn = fn.child_by_field_name("name") or fn
        if fn.type != "identifier":
            return None
        kcs = self._kcs(call)
        config = [self.expr(c) for c in kcs.named_children if c.type != "comment"]
        al = call.child_by_field_name("arguments")
        args = [self.expr(c) for c in al.named_children if c.type != "comment"] if al is not None else []
        host_name, host_vars = self._host_context(call, globals_)
        return LaunchSite(kernel=self.t(fn), span=node_span(call), template_args=targs, config=config, args=args,
                          host_function=host_name, host_vars=host_vars)

    def _host_context(self, call: Node, globals_: list[Node], at: int | None = None
                      ) -> tuple[str | None, dict[str, HostVar]]:
        """The host function around ``call`` (its name; None in a lambda) and the variables in scope before it.
        ``at``: a byte offset inside ``call`` (the smallest node around a macro's use, blanked for the parse),
        then the variables in scope before that offset, ``call``'s own declarations included."""
        pos = call.start_byte if at is None else at
        host_fn = call.parent if at is None else call
        while host_fn is not None and host_fn.type not in ("function_definition", "lambda_expression"):
            host_fn = host_fn.parent
        host_name = None
        host_vars: dict[str, HostVar] = {}
        for g in globals_:  # file-scope constants declared before the launch
            if g.end_byte <= pos and _is_constant_decl(self, g):
                for v in self.declared(g):
                    host_vars[v.name] = v
        if host_fn is not None:
            if host_fn.type == "function_definition":
                fd = _function_declarator(host_fn)
                nn = fd.child_by_field_name("declarator") if fd is not None else None
                host_name = self.t(nn) if nn is not None else None
            body = host_fn.child_by_field_name("body")
            if body is not None:  # declarations in scope: children of the call's ancestors, before the call
                scoped = []
                a = call.parent if at is None else call
                while a is not None and a != host_fn:
                    scoped += [d for d in self._child_declarations(a) if d.end_byte <= pos]
                    a = a.parent
                for decl in sorted(scoped, key=lambda d: d.start_byte):
                    for v in self.declared(decl):
                        host_vars[v.name] = v
        return host_name, host_vars

    def macro_launches(self, root: Node, consts: list[tuple[int, list[HostVar]]]) -> list[LaunchSite]:
        """The launches written inside macro bodies, read at each use of such a macro in the file's code
        (``LAUNCH(4);``, ``{ LAUNCH(4) }`` without its ``;``, ``LAUNCH;``): the use expanded (agent_core.source.macros),
        the expansion parsed, each launch in it a LaunchSite with ``macro`` and ``expansion`` set, its expressions
        the expansion's text (in the macro's actual arguments) and every span the use's. Its host variables: the
        file's constants and the host function's locals before the use, then those the expansion declares."""
        from agent_core.source import macros as M
        defs = M.scan_defines(self.data)  # as the parse saw them (mask_launch_macro_uses)
        names = M.launching(defs)
        if not names:
            return []
        ex = M.Expander(defs, names)
        out: list[LaunchSite] = []
        for name, start, end, args_text in M.uses(self.data, names):
            m = ex.macro_at(name, start)
            if m is None or (m.params is None) != (args_text is None):
                continue
            expansion = ex.expand_use(m, args_text, start)
            if expansion is None or "<<<" not in expansion:
                continue
            wrapper = "void __kt_macro_expansion__() {\n" + expansion + ";\n}\n"
            sub = _Builder(_parser().parse(wrapper.encode("utf-8")), wrapper, self.path)
            at = self.sub_span(root, start, end)
            host_name, host_vars = self._host_context(root.descendant_for_byte_range(start, start), [], at=start)
            local: dict[str, HostVar] = {}
            for c_end, vs in consts:
                if c_end > start:
                    break
                local.update((v.name, v) for v in vs)
            local.update(host_vars)
            for n in walk(sub.tree.root_node):
                if n.type != "call_expression" or self._kcs(n) is None:
                    continue
                site = sub.launch(n, [])
                if site is None:
                    continue
                here = dict(local)
                here.update((v.name, _with(v, span=at, init=_at(v.init, at))) for v in site.host_vars.values())
                out.append(LaunchSite(kernel=site.kernel, span=at, template_args=[_at(e, at) for e in site.template_args],
                                      config=[_at(e, at) for e in site.config], args=[_at(e, at) for e in site.args],
                                      host_function=host_name, host_vars=here, macro=m.name,
                                      expansion=" ".join(expansion.split())))
        out.sort(key=lambda s: s.span.start)
        return out

    def _child_declarations(self, n: Node) -> list[Node]:
        """The ``declaration`` children of ``n`` (cached per node: a host function with thousands of launches
        asks for the same blocks' declarations for each one)."""
        cache = self.__dict__.setdefault("_decl_cache", {})
        got = cache.get(n.id)
        if got is None:
            got = cache[n.id] = [c for c in n.named_children if c.type == "declaration"]
        return got

    def declared(self, decl: Node) -> list[HostVar]:
        """The variables a declaration introduces, with their initializers."""
        decls = [c for i, c in enumerate(decl.children) if decl.field_name_for_child(i) == "declarator"]
        if not decls:
            return []
        typ = " ".join(self.data[decl.start_byte:decls[0].start_byte].decode("utf-8", errors="replace").split())
        base_type = decl.child_by_field_name("type")
        base = self.t(base_type) if base_type is not None else typ
        out: list[HostVar] = []
        for d in decls:
            init = None
            target = d
            if d.type == "init_declarator":
                target = d.child_by_field_name("declarator")
                val = d.child_by_field_name("value")
                if val is not None:
                    if val.type in ("argument_list", "initializer_list"):  # dim3 g(a, b) / dim3 g{a, b}
                        inner = ", ".join(self.t(c) for c in val.named_children if c.type != "comment")
                        init = Expr(f"{base}({inner})", node_span(val))
                    else:
                        init = self.expr(val)
            elif d.type == "function_declarator" and base == "dim3":
                # `dim3 block(kThreadsX, kRows);` parses as a function declaration (its arguments are bare
                # names, which could be types): inside a function body it is a dim3 built from those names
                plist = d.child_by_field_name("parameters")
                ps = [c for c in plist.named_children if c.type != "comment"] if plist is not None else []
                if ps and all(c.type == "parameter_declaration" and c.named_child_count == 1
                              and c.named_children[0].type in ("type_identifier", "qualified_identifier")
                              for c in ps):  # `dim3 block(kThreadsX, kRows)`, `dim3 block(ns::kX, ns::kY)`
                    init = Expr(f"dim3({', '.join(self.t(c) for c in ps)})", node_span(plist))
                    target = d.child_by_field_name("declarator")
            ident, _ = _innermost_identifier(target)
            if ident is None:
                continue
            out.append(HostVar(name=self.t(ident), type=typ, init=init, span=node_span(d)))
        return out


def _at(e: Expr | None, span: Span) -> Expr | None:
    """``e``'s text at ``span`` (a macro launch's expressions stand at the macro's use)."""
    return None if e is None else Expr(e.text, span)


def _is_constant_decl(b: _Builder, decl: Node) -> bool:
    quals = {b.t(c) for c in decl.children if c.type == "type_qualifier"}
    return bool(quals & {"const", "constexpr"})


def is_explicit_specialization(name_node: Node) -> bool:
    """The declarator name of a function definition names template arguments (``k<__half>``, ``ns::k<4>``)."""
    n = name_node
    while n is not None and n.type == "qualified_identifier":
        n = n.child_by_field_name("name")
    return n is not None and n.type == "template_function"


def _function_declarator(fn: Node) -> Node | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def template_param(c: Node, t: Callable[[Node], str]) -> TemplateParam | None:
    """One parameter of a template parameter list (``t``: a node's text); None for a kind it does not read."""
    if c.type == "template_template_parameter_declaration":  # template <typename> class Activation
        inner = [x for x in c.named_children if x.type in ("type_parameter_declaration",
                                                           "optional_type_parameter_declaration",
                                                           "variadic_type_parameter_declaration")]
        decl = inner[-1] if inner else None
        name = next((x for x in decl.named_children if x.type == "type_identifier"), None) if decl else None
        default = decl.child_by_field_name("default_type") if decl is not None else None
        return TemplateParam("template", "template", t(name) if name is not None else "",
                             t(default) if default is not None else None, node_span(c))
    if c.type in ("type_parameter_declaration", "optional_type_parameter_declaration",
                  "variadic_type_parameter_declaration"):
        name = c.child_by_field_name("name") or next(
            (x for x in c.named_children if x.type == "type_identifier"), None)
        default = c.child_by_field_name("default_type")
        kw = next((t(x) for x in c.children if x.type in ("typename", "class")), "typename")
        return TemplateParam("type", kw, t(name) if name is not None else "",
                             t(default) if default is not None else None, node_span(c))
    if c.type in ("parameter_declaration", "optional_parameter_declaration"):
        ident, _ = _innermost_identifier(c.child_by_field_name("declarator"))
        typ = c.child_by_field_name("type")
        default = c.child_by_field_name("default_value")
        return TemplateParam("value", t(typ) if typ is not None else "",
                             t(ident) if ident is not None else "",
                             t(default) if default is not None else None, node_span(c))
    return None


def template_params_of(fn: Node, t: Callable[[Node], str]) -> list[TemplateParam]:
    """The template parameters of the function definition ``fn`` (a kernel, or a ``__device__`` helper the evidence
    reads), in order; none where it is no template."""
    decl = fn.parent
    plist = decl.child_by_field_name("parameters") if decl is not None and decl.type == "template_declaration" else None
    return [tp for tp in (template_param(c, t) for c in plist.named_children) if tp is not None] \
        if plist is not None else []


def _innermost_identifier(d: Node | None) -> tuple[Node | None, bool]:
    """(identifier, is_pointer) of a (possibly pointer/array/reference) declarator."""
    is_pointer = False
    while d is not None:
        if d.type in ("identifier", "field_identifier"):
            return d, is_pointer
        if d.type in ("pointer_declarator", "array_declarator", "abstract_pointer_declarator"):
            is_pointer = True
        nxt = d.child_by_field_name("declarator")
        if nxt is None:  # reference_declarator has no field: its named child
            nxt = next((c for c in d.named_children if c.type not in ("type_qualifier", "comment")), None)
            if d.type == "reference_declarator":
                pass
        d = nxt
    return None, is_pointer


def build_file(tree: Tree, text: str, path: str = "<memory>", previous: CudaFile | None = None) -> CudaFile:
    """A ``CudaFile`` from a tree of ``text`` (as parsed by ``parse_tree``). ``previous``: the ``CudaFile`` of
    an earlier version of the same file, whose facts are reused for the parts that did not change (the
    result is the same as without it, only faster)."""
    return _Builder(tree, text, path).build(previous)


def file_constants(tree: Tree, text: str) -> dict[str, HostVar]:
    """File-scope ``const`` / ``constexpr`` variables (``constexpr int TILE = 32;``), by name."""
    b = _Builder(tree, text, "")
    out: dict[str, HostVar] = {}
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        for c in n.named_children:
            if c.type == "declaration" and _is_constant_decl(b, c):
                for v in b.declared(c):
                    out[v.name] = v
            elif c.type in ("declaration_list", "preproc_ifdef", "preproc_if", "preproc_else",
                            "namespace_definition", "linkage_specification"):
                stack.append(c)
    return out


def file_scope_constants(cf: CudaFile) -> list[HostVar]:
    """The file-scope ``const`` / ``constexpr`` variables of a file built by ``build_file``, in order."""
    chunks = getattr(cf, "_chunks", None)
    if chunks is None:
        return list(file_constants(parse_tree(cf.text.encode("utf-8")), cf.text).values())
    return [v for f in chunks[2] for _, vs in f.consts for v in vs]


# --------------------------------------------------------------------------------------------- chunks
_CONTAINERS = ("preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
               "namespace_definition", "linkage_specification", "declaration_list")
_SPLIT_BYTES = 4096  # containers larger than this are cut into their children


@dataclasses.dataclass
class _ChunkFacts:
    """What ``build`` found in one chunk: positions as they were when the chunk stood at (start, row, col)."""
    start: int
    row: int
    col: int
    defines: list[Define] = dataclasses.field(default_factory=list)
    kernels: list[Kernel] = dataclasses.field(default_factory=list)  # without launch sites
    launches: list[LaunchSite] = dataclasses.field(default_factory=list)  # host_vars: the locals only
    consts: list[tuple[int, list[HostVar]]] = dataclasses.field(default_factory=list)  # (end byte, vars)

    @property
    def empty(self) -> bool:
        return not (self.defines or self.kernels or self.launches or self.consts)

    def moved_to(self, start: int, row: int) -> "_ChunkFacts":
        db, dr = start - self.start, row - self.row
        if db == 0 and dr == 0:
            return self
        return _ChunkFacts(start, row, self.col, _moved(self.defines, db, dr), _moved(self.kernels, db, dr),
                           _moved(self.launches, db, dr), [(end + db, _moved(vs, db, dr)) for end, vs in self.consts])


class _Chunk:
    __slots__ = ("node", "key", "start", "error", "facts")

    def __init__(self, node: Node, key: tuple, start: int):
        self.node, self.key, self.start = node, key, start
        self.error = node.has_error
        self.facts: _ChunkFacts | None = None


def _chunks(root: Node, data: bytes) -> list[_Chunk]:
    """The file cut into chunks, in order. A chunk's key is what its facts depend on: its text, its type and
    the type of what contains it (the column it starts at is checked when its facts are reused)."""
    out: list[_Chunk] = []
    stack = [(root, iter(root.children))]  # iterative: containers may nest thousands deep
    while stack:
        parent, children = stack[-1]
        c = next(children, None)
        if c is None:
            stack.pop()
            continue
        s, e, t = c.start_byte, c.end_byte, c.type
        if t in _CONTAINERS and e - s > _SPLIT_BYTES:
            stack.append((c, iter(c.children)))
        else:
            out.append(_Chunk(c, (parent.type, t, data[s:e]), s))
    return out


def _with(x, **changes):
    """A shallow copy of dataclass ``x`` with ``changes`` (``dataclasses.replace`` without re-running
    ``__init__``: the chunk facts are copied for every build)."""
    y = object.__new__(type(x))
    y.__dict__.update(x.__dict__)
    y.__dict__.update(changes)
    return y


_MOVABLE: dict[type, tuple[str, ...]] = {}  # per dataclass: the fields that can hold a Span
_SPANNY = ("Span", "Expr", "list", "dict", "Param", "Pragma", "HostVar", "LaunchSite", "Kernel", "Define")


def _moved(x, db: int, dr: int):
    """``x`` with every Span in it moved by ``db`` bytes and ``dr`` lines (columns are unchanged)."""
    t = type(x)
    if t is Span:
        return Span(x.start + db, x.end + db, x.line + dr, x.col, x.end_line + dr, x.end_col)
    if t is list:
        return [_moved(v, db, dr) for v in x]
    if x is None or t is str or t is int:
        return x
    if t is dict:
        return {k: _moved(v, db, dr) for k, v in x.items()}
    names = _MOVABLE.get(t)
    if names is None:
        if not dataclasses.is_dataclass(x):
            return x
        names = _MOVABLE[t] = tuple(f.name for f in dataclasses.fields(x) if any(w in str(f.type) for w in _SPANNY))
    y = object.__new__(t)
    y.__dict__.update(x.__dict__)
    for n in names:
        y.__dict__[n] = _moved(x.__dict__[n], db, dr)
    return y
