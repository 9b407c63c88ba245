"""The base of the semantic rewrites: the context a rewrite reads and returns, and the ``Rewrite`` interface.

A rewrite is a deterministic refactoring of the user's kernel source. ``applies(ctx)`` says why it does not apply
(in words, for ``kerntune show``) or None; ``rewrite(ctx)`` returns a new context whose text has the kernel
rewritten; ``finish(ctx)``, run for each applied rewrite after the whole composition, may change the text once more; ``params(ctx)`` the parameters it introduces (``KT_<NAME>`` macros in the text, each with its
original value as the default) and ``constraints(ctx)`` expressions of the spec language over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tree_sitter import Node

from agent_core.model import CudaFile, Kernel, KerntuneError, Param
from agent_core.source.cuda_parse import parse_cuda, parse_tree


@dataclass
class RewriteContext:
    """One kernel's template while it is being rewritten.

    ``text`` is the whole file (the structural template's body: tunable sites are ``KT_<PARAM>`` macros, no
    header); ``params``/``constraints`` the space so far; ``launch`` the launch a variant runs on (grid, block,
    smem over size and parameter names); ``block`` the parameter that is the threads per block, if any."""
    kernel: str
    path: str
    text: str
    params: dict[str, Param]
    constraints: list[str]
    launch: dict | None
    block: str | None
    helpers: set[str] = field(default_factory=set)  # names of the helper snippets the rewritten kernel uses
    type_args: dict[str, str] = field(default_factory=dict)  # the kernel's type template parameters -> the C type
    # of the instantiation the spec tunes (``T`` -> ``__nv_bfloat16``), where known: sizes the rewrites' vectors
    notes: list[str] = field(default_factory=list)  # what each applied rewrite did, for the header and `show`

    def with_text(self, text: str, note: str, helpers: set[str] = frozenset()) -> "RewriteContext":
        return replace(self, text=text, notes=self.notes + [note], helpers=self.helpers | set(helpers),
                       params=dict(self.params), constraints=list(self.constraints))

    @property
    def capped(self) -> bool:
        """The launch's block is the block parameter as a cap (``min(d, BLOCK)``: ``structural.cap``), not the block
        itself: the kernel may run with fewer threads than ``BLOCK``, and not a whole number of warps."""
        return capped_block(self.launch, self.block)

    # ------------------------------------------------------------------------------------- the parse
    def view(self) -> "KernelView":
        return KernelView(self.text, self.kernel, self.path, self.type_args)


class KernelView:
    """The tree-sitter parse of a context's text, with the kernel's function node and its facts."""

    def __init__(self, text: str, kernel: str, path: str = "<rewrite>", type_args: dict[str, str] | None = None):
        self.text = text
        self.type_args = dict(type_args or {})  # RewriteContext.type_args
        self.data = text.encode("utf-8")
        self.cf: CudaFile = parse_cuda(text, path)
        self.k: Kernel = self.cf.kernel(kernel)
        self.tree = parse_tree(self.data)
        self.root = self.tree.root_node
        self.body: Node = self.root.named_descendant_for_byte_range(self.k.body_span.start, self.k.body_span.end)
        while self.body is not None and self.body.type != "compound_statement":
            self.body = self.body.parent

    def t(self, n: Node | None) -> str:
        return "" if n is None else self.data[n.start_byte:n.end_byte].decode("utf-8", errors="replace")

    def indent_of(self, n: Node) -> str:
        line_start = self.data.rfind(b"\n", 0, n.start_byte) + 1
        lead = self.data[line_start:n.start_byte]
        return lead.decode("utf-8") if not lead.strip() else " " * len(lead)

    def line_indent(self, n: Node) -> str:
        """The white space that indents the line ``n`` starts on (whatever stands before ``n`` on it)."""
        line_start = self.data.rfind(b"\n", 0, n.start_byte) + 1
        line = self.data[line_start:n.start_byte].decode("utf-8")
        return line[:len(line) - len(line.lstrip())]


def capped_block(launch: dict | None, block: str | None) -> bool:
    """``launch``'s block x is the smaller of something and the parameter ``block`` (``min(d, BLOCK)``,
    ``d if d < BLOCK else BLOCK``)."""
    import ast
    bx = (launch or {}).get("block")
    bx = bx[0] if isinstance(bx, (list, tuple)) and bx else bx
    if block is None or bx is None:
        return False
    try:
        top = ast.parse(str(bx).strip(), mode="eval").body
    except SyntaxError:
        return False
    name = lambda x: isinstance(x, ast.Name) and x.id == block  # noqa: E731
    if isinstance(top, ast.Call) and isinstance(top.func, ast.Name) and top.func.id == "min":
        return any(name(x) for x in top.args)
    return isinstance(top, ast.IfExp) and (name(top.body) or name(top.orelse))


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with byte ranges replaced (``(start, end, new)``, non-overlapping)."""
    data = text.encode("utf-8")
    out, pos = [], 0
    for s, e, new in sorted(edits, key=lambda x: (x[0], x[1])):
        if s < pos:
            raise KerntuneError("internal: overlapping rewrite edits")
        out += [data[pos:s], new.encode("utf-8")]
        pos = e
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")


class Rewrite:
    """One transformation. Subclasses set ``name`` and ``summary`` and implement ``why_not``/``rewrite``."""

    name = ""
    summary = ""  # one line: what it does

    def applies(self, ctx: RewriteContext) -> str | None:
        """None when the rewrite applies to ``ctx``, else why not (words for the user)."""
        try:
            return self.why_not(ctx)
        except KerntuneError as e:
            return e.message

    def why_not(self, ctx: RewriteContext) -> str | None:
        raise NotImplementedError

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        """The context with the kernel rewritten and this rewrite's parameters and constraints added."""
        raise NotImplementedError

    def params(self, ctx: RewriteContext) -> list[Param]:
        return []

    def finish(self, ctx: RewriteContext) -> RewriteContext:
        """A last step on the composed text, once every rewrite of the composition has run (for what later rewrites
        would not recognize: ``outputs_per_thread`` unswitches its loops here). The default does nothing."""
        return ctx

    def constraints(self, ctx: RewriteContext) -> list[str]:
        return []

    def _add_space(self, ctx: RewriteContext) -> RewriteContext:
        for p in self.params(ctx):
            if p.name in ctx.params:
                raise KerntuneError(f"internal: parameter {p.name} of the {self.name} rewrite exists already")
            ctx.params[p.name] = p
        for c in self.constraints(ctx):
            if c not in ctx.constraints:
                ctx.constraints.append(c)
        return ctx
