"""What the rewrites read in a kernel's parse: names that stand for the block size and the thread index,
pointer element types, and the thread-strided loops over contiguous elements (block-strided over a row,
grid-stride over the whole problem)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from agent_core.model import macro_name
from agent_core.source.cuda_parse import file_constants, walk
from agent_core.templating.rewrites.base import KernelView

# element sizes of the scalar types a vector rewrite can pack (bytes)
ELEM_BYTES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4,
              "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "short": 2, "int16_t": 2,
              "uint16_t": 2, "char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1,
              "long long": 8, "int64_t": 8, "uint64_t": 8, "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1,
              "__nv_fp8_storage_t": 1}
_QUALIFIERS = {"const", "__restrict__", "__restrict", "restrict", "volatile"}
_SIDE_EFFECTS = {"assignment_expression", "update_expression", "call_expression"}
_PURE_CALLS = {"min", "max", "fminf", "fmaxf", "umin", "umax"}


def squash(text: str) -> str:
    """An expression's text without spaces, integer casts and redundant outer parentheses (for comparing
    small expressions such as a loop's start against ``blockIdx.x*blockDim.x+threadIdx.x``)."""
    s = re.sub(r"\s+", "", text)
    s = re.sub(r"\((?:long|longlong|int64_t|size_t|unsigned|unsignedint|int|uint64_t|int32_t|ptrdiff_t)\)", "", s)
    s = re.sub(r"static_cast<[\w]+>", "", s)
    changed = True
    while changed:
        changed = False
        m = re.fullmatch(r"\((.*)\)", s)
        if m and _balanced(m.group(1)):
            s, changed = m.group(1), True
    return s


def _balanced(s: str) -> bool:
    d = 0
    for c in s:
        d += c == "("
        d -= c == ")"
        if d < 0:
            return False
    return d == 0


def base_type(type_text: str) -> str:
    """``const float* __restrict__`` -> ``float``."""
    words = [w for w in re.split(r"[\s*&]+", type_text) if w and w not in _QUALIFIERS]
    return " ".join(words)


class KernelFacts:
    """Names with a fixed meaning in one kernel: the block size, the thread index, pointer element types."""

    def __init__(self, v: KernelView, block_param: str | None, launch: dict | None = None):
        self.v = v
        self.block_names = {"blockDim.x"}
        if block_param:
            self.block_names.add(macro_name(block_param))
        named = {d.name: d.value for d in v.cf.defines}  # macros, and file-scope constants, by their values
        named.update({c.name: c.init.text for c in file_constants(v.tree, v.text).values() if c.init is not None})
        for site in v.k.launch_sites:  # a template parameter launched as the block (k<KT_BLOCK><<<g, KT_BLOCK>>>)
            for tp, arg in zip(v.k.template_params, site.template_args):
                if tp.kind == "value" and block_param and squash(arg.text) == macro_name(block_param):
                    self.block_names.add(tp.name)
        changed = True
        while changed:  # names defined as one of them (#define THREADS KT_THREADS, constexpr int kThreads = ...)
            changed = False
            for name, value in named.items():
                if name not in self.block_names and squash(value) in self.block_names:
                    self.block_names.add(name)
                    changed = True
        self.assigned = self._assigned()
        self.global_index_names: set[str] = set()  # filled below, once the block and thread names are known
        self.grid_thread_names: set[str] = set()
        # the kernel's own locals for the block size (``const int num_threads = blockDim.x;``): loop strides only,
        # never looked for in host code (block_token), where the same name may mean something else
        self.block_locals = set().union(*(self._aliases(b) for b in sorted(self.block_names))) - self.block_names
        self.block_names |= self.block_locals
        self.tid_names = {"threadIdx.x"} | self._aliases("threadIdx.x")
        # locals holding the thread's global index or the grid's thread count (``const size_t stride =
        # (size_t)blockDim.x * gridDim.x;``), so a loop written over them reads as the grid-stride loop it is
        for n in walk(self.v.body):
            if n.type == "init_declarator":
                d, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                if d is None or d.type != "identifier" or val is None or self.assigned.get(self.v.t(d)):
                    continue
                if self.is_global_index(self.v.t(val)):
                    self.global_index_names.add(self.v.t(d))
                elif self.is_grid_threads(self.v.t(val)):
                    self.grid_thread_names.add(self.v.t(d))
        self.named = named
        self.groups = self._groups(launch)
        self.thread_varying = self._thread_varying()
        self.pointers = self._pointers()
        self.shared_names = self._shared_names()
        self.sizes = {**ELEM_BYTES, **self._type_arg_sizes()}  # element type (as written) -> bytes

    def _groups(self, launch: dict | None) -> dict[str, tuple[set[str], set[str]]]:
        """Groups of threads that split a range between them besides the block's and the grid's: kind ->
        (names of a thread's index in the group, names of the group's size). ``warp``: the lane
        (``threadIdx.x % 32``, ``& 31``, ``& 0x1f``, by any name of 32, ``warpSize`` among them) and 32. ``x``: ``threadIdx.x`` and the launch's block
        x where it is a parameter or a literal (a 2-D block's row of threads). ``flat``: the linear index of a
        2-D block (``threadIdx.y * blockDim.x + threadIdx.x``) and its thread count. Only the launch the
        template runs with says what the block is, so ``x`` and ``flat`` need it."""
        thirty_two = {"32", "warpSize"} | {n for n, val in self.named.items() if squash(val) == "32"} | \
            self._aliases("32")
        tids = sorted(self.tid_names)
        lanes = {f"{t}{op}{w}" for t in tids for op, ws in (("%", thirty_two), ("&", {"31", "0x1f", "0x1F"} | {
            f"({w}-1)" for w in thirty_two})) for w in ws}
        out: dict[str, tuple[set[str], set[str]]] = {"warp": (self._aliases_of(lanes) | lanes, thirty_two)}
        block = (launch or {}).get("block") or []
        if block and len(block) <= 2:
            bx = squash(str(block[0]))
            if re.fullmatch(r"[A-Za-z_]\w*", bx):
                xs = {macro_name(bx)} | {n for n, val in self.named.items() if squash(val) == macro_name(bx)}
            elif bx.isdigit():
                xs = {bx} | {n for n, val in self.named.items() if squash(val) == bx} | self._aliases(bx)
            else:
                xs = set()
            if xs:
                out["x"] = (set(self.tid_names), xs)
            dims = ("blockDim.x", "blockDim.y")
            flat = {f"{a}*{b}+threadIdx.x" for a, b in (("threadIdx.y", dims[0]), (dims[0], "threadIdx.y"))}
            flat |= {f"threadIdx.x+{f.split('+')[0]}" for f in flat}
            count = {"blockDim.x*blockDim.y", "blockDim.y*blockDim.x"}
            out["flat"] = (flat | self._aliases_of(flat), count | self._aliases_of(count))
        return out

    def _thread_varying(self) -> set[str]:
        """``threadIdx`` and every local whose value is computed from it (transitively), or from a shuffle or a
        lane id: names whose value may differ between the threads of one group."""
        out = {"threadIdx"}
        defs: dict[str, list[Node]] = {}
        for n in walk(self.v.body):
            if n.type == "init_declarator":
                d, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                while d is not None and d.type in ("pointer_declarator", "reference_declarator"):
                    d = d.child_by_field_name("declarator")
                if d is not None and d.type == "identifier" and val is not None:
                    defs.setdefault(self.v.t(d), []).append(val)
            elif n.type == "assignment_expression":
                t = n.child_by_field_name("left")
                if t is not None and t.type == "identifier":
                    defs.setdefault(self.v.t(t), []).append(n.child_by_field_name("right"))
        changed = True
        while changed:
            changed = False
            for name, vals in defs.items():
                if name not in out and any(val is not None and ({self.v.t(x) for x in walk(val) if x.type ==
                                                                 "identifier"} & out or "__shfl" in self.v.t(val))
                                           for val in vals):
                    out.add(name)
                    changed = True
        return out

    def _aliases_of(self, values: set[str]) -> set[str]:
        out: set[str] = set()
        for what in sorted(values):
            out |= self._aliases(what)
        return out

    def group_of(self, start: str, step: str) -> str | None:
        """The group of threads (``block``, ``grid``, ``warp``, ``x``, ``flat``) whose index ``start`` is and whose
        size ``step`` is, or None."""
        if self.is_tid(start) and self.is_block(step):
            return "block"
        if self.is_global_index(start) and self.is_grid_threads(step):
            return "grid"
        s, t = squash(start), squash(step)
        for kind, (index, size) in self.groups.items():
            if s in index and t in size:
                return kind
        return None

    def _type_arg_sizes(self) -> dict[str, int]:
        """A type template parameter of the kernel (``T``, ``scalar_t``) -> the size of the scalar type it is
        instantiated with (``KernelView.type_args``, decided by ``compose``): the rewrites size their vectors by
        it and keep writing ``T``, so the code stays right for any instantiation that fits the vector."""
        return {name: ELEM_BYTES[base_type(arg)] for name, arg in self.v.type_args.items()
                if base_type(arg) in ELEM_BYTES}

    def _assigned(self) -> dict[str, int]:
        """How often each local name is assigned or incremented after its declaration."""
        out: dict[str, int] = {}
        for n in walk(self.v.body):
            target = None
            if n.type == "assignment_expression":
                target = n.child_by_field_name("left")
            elif n.type == "update_expression":
                target = n.child_by_field_name("argument")
            if target is not None and target.type == "identifier":
                out[self.v.t(target)] = out.get(self.v.t(target), 0) + 1
        return out

    def _aliases(self, what: str) -> set[str]:
        """Locals declared as exactly ``what`` and never assigned (``const int tid = threadIdx.x;``)."""
        if not hasattr(self, "_by_value"):  # one walk of the body: squashed initializer -> the locals it declares
            self._by_value: dict[str, set[str]] = {}
            for n in walk(self.v.body):
                if n.type == "init_declarator":
                    d, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                    if d is not None and d.type == "identifier" and val is not None \
                            and not self.assigned.get(self.v.t(d)):
                        self._by_value.setdefault(squash(self.v.t(val)), set()).add(self.v.t(d))
        return set(self._by_value.get(what, ()))

    def _pointers(self) -> dict[str, str]:
        """Pointer name -> element type, for the kernel's pointer parameters and local pointers."""
        out = {p.name: base_type(p.type) for p in self.v.k.params if p.is_pointer}
        for n in walk(self.v.body):
            if n.type != "declaration":
                continue
            typ = n.child_by_field_name("type")
            for i, c in enumerate(n.children):
                if n.field_name_for_child(i) != "declarator":
                    continue
                d = c.child_by_field_name("declarator") if c.type == "init_declarator" else c
                if d is not None and d.type == "pointer_declarator":
                    inner = d.child_by_field_name("declarator")
                    if inner is not None and inner.type == "identifier":
                        out[self.v.t(inner)] = base_type(self.v.t(typ))
        return out

    def _shared_names(self) -> set[str]:
        """The kernel's shared-memory arrays and the local pointers into them (``float* vals = smem + 32;``), whose
        loads are not global loads (no ``ld.global`` hint may be written for them)."""
        out = set()
        for n in walk(self.v.body):
            if n.type == "declaration" and "__shared__" in self.v.t(n).split("[")[0].split("=")[0]:
                for x in walk(n):
                    if x.type in ("identifier", "field_identifier") and x.parent is not None and \
                            x.parent.type in ("array_declarator", "init_declarator", "declaration",
                                              "pointer_declarator") and x.parent.child_by_field_name("declarator") == x:
                        out.add(self.v.t(x))
        changed = True
        while changed:
            changed = False
            for n in walk(self.v.body):
                if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None and \
                        n.child_by_field_name("declarator").type == "pointer_declarator":  # pointers only
                    d, val = n.child_by_field_name("declarator"), n.child_by_field_name("value")
                    while d is not None and d.type == "pointer_declarator":
                        d = d.child_by_field_name("declarator")
                    if d is not None and d.type == "identifier" and val is not None and self.v.t(d) not in out and \
                            {self.v.t(x) for x in walk(val) if x.type == "identifier"} & out:
                        out.add(self.v.t(d))
                        changed = True
        return out

    def is_block(self, text: str) -> bool:
        return squash(text) in self.block_names

    def is_tid(self, text: str) -> bool:
        return squash(text) in self.tid_names

    def is_global_index(self, text: str) -> bool:
        """``blockIdx.x * blockDim.x + threadIdx.x`` in any operand order (block size by any of its names)."""
        s = squash(text)
        if s in self.global_index_names:
            return True
        for b in self.block_names:
            for t in self.tid_names:
                for prod in (f"blockIdx.x*{b}", f"{b}*blockIdx.x"):
                    if s in (f"{prod}+{t}", f"{t}+{prod}", f"({prod})+{t}", f"{t}+({prod})"):
                        return True
        return False

    def is_grid_threads(self, text: str) -> bool:
        s = squash(text)
        if s in self.grid_thread_names:
            return True
        return any(s in (f"{b}*gridDim.x", f"gridDim.x*{b}") for b in self.block_names)


def pure(v: KernelView, n: Node | None) -> bool:
    """``n`` has no side effects (no assignment, increment, or call other than min/max)."""
    if n is None:
        return False
    for x in walk(n):
        if x.type in ("assignment_expression", "update_expression"):
            return False
        if x.type == "call_expression":
            fn = x.child_by_field_name("function")
            if fn is None or v.t(fn) not in _PURE_CALLS:
                return False
    return True


def subscript_parts(x: Node) -> tuple[Node | None, Node | None]:
    """(array, index) of a subscript expression ``a[i]``; the index is None when it is not one expression."""
    arr = x.child_by_field_name("argument")
    idx = x.child_by_field_name("index") or next((c for c in x.named_children if c != arr), None)
    if idx is not None and idx.type == "subscript_argument_list":
        idx = idx.named_children[0] if idx.named_child_count == 1 else None
    return arr, idx


def names_in(v: KernelView, n: Node) -> set[str]:
    return {v.t(x) for x in walk(n) if x.type == "identifier"}


@dataclass
class StridedLoop:
    """``for (T var = START; var < BOUND; var += STEP) BODY`` where START is the thread's index and STEP the
    number of threads: ``kind`` "block" (threadIdx.x, blockDim.x) or "grid" (global index, blockDim.x *
    gridDim.x)."""
    node: Node
    var: str
    var_type: str
    start: Node
    bound: Node
    step: Node
    body: Node
    kind: str
    # groups=True only: the thread's index in its group (START without FIRST) and the loop-invariant offset of
    # the group's first element (``for (j = tid + num_threads; ...)``, the first slice peeled off); "" if none
    index: str = ""
    first: str = ""


def strided_loop(v: KernelView, facts: KernelFacts, n: Node, groups: bool = False) -> tuple[StridedLoop | None, str]:
    """The strided loop ``n`` is, or (None, why not). With ``groups``, also a loop strided by a warp, a 2-D block's
    row of threads or its whole block (``KernelFacts.group_of``: kinds ``warp``, ``x``, ``flat``), and one that
    starts a loop-invariant offset past the thread's index (``j = tid + num_threads``: ``first``), the same for
    every thread of the group."""
    if n.type != "for_statement":
        return None, "not a for loop"
    init = n.child_by_field_name("initializer")
    cond = n.child_by_field_name("condition")
    upd = n.child_by_field_name("update")
    body = n.child_by_field_name("body")
    if init is None or cond is None or upd is None or body is None or init.type != "declaration":
        return None, "the loop does not declare its index in its header"
    decls = [c for c in init.named_children if c.type == "init_declarator"]
    typ = init.child_by_field_name("type")
    if len(decls) != 1 or typ is None:
        return None, "the loop header declares more than one variable"
    var_node, start = decls[0].child_by_field_name("declarator"), decls[0].child_by_field_name("value")
    if var_node is None or var_node.type != "identifier" or start is None:
        return None, "the loop index is not a plain variable"
    var = v.t(var_node)
    if cond.type != "binary_expression" or v.t(cond.child_by_field_name("operator")) != "<" \
            or v.t(cond.child_by_field_name("left")) != var:
        return None, f"the condition is not `{var} < bound`"
    bound = cond.child_by_field_name("right")
    if upd.type != "assignment_expression" or v.t(upd.child_by_field_name("operator")) != "+=" \
            or v.t(upd.child_by_field_name("left")) != var:
        return None, f"the update is not `{var} += step`"
    step = upd.child_by_field_name("right")
    for what, x in (("bound", bound), ("step", step), ("start", start)):
        if not pure(v, x) or var in names_in(v, x):
            return None, f"the loop's {what} `{v.t(x)}` is not a plain expression"
    kind, index, first = None, v.t(start), ""
    if facts.is_tid(v.t(start)) and facts.is_block(v.t(step)):
        kind = "block"
    elif facts.is_global_index(v.t(start)) and facts.is_grid_threads(v.t(step)):
        kind = "grid"
    elif groups:
        for index, first, at in _index_and_offset(v, start):
            if at is not None and names_in(v, at) & facts.thread_varying:
                continue  # the offset must be the same for every thread of the group
            kind = facts.group_of(index, v.t(step))
            if kind is not None:
                break
    if kind is None:
        return None, (f"the loop `{var} = {v.t(start)}; ...; {var} += {v.t(step)}` is not strided by the threads of "
                      "the block or grid (its stride may depend on data)")
    changed = {x for x in names_in(v, bound) | names_in(v, step) | names_in(v, start) if _assigned_in(v, body, x)}
    if changed or _assigned_in(v, body, var):
        return None, f"the loop body assigns {', '.join(sorted(changed or {var}))}"
    return StridedLoop(n, var, " ".join(v.t(typ).split()), start, bound, step, body, kind, index, first), ""


def _index_and_offset(v: KernelView, start: Node) -> list[tuple[str, str, Node | None]]:
    """The ways to read a loop's start as a thread's index plus an offset (index, offset, the offset's node):
    (start, "", None) and, for ``a + b``, (a, b) and (b, a)."""
    out: list[tuple[str, str, Node | None]] = [(v.t(start), "", None)]
    n = start
    while n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    if n.type == "binary_expression" and v.t(n.child_by_field_name("operator")) == "+":
        a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
        out += [(v.t(a), v.t(b), b), (v.t(b), v.t(a), a)]
    return out


def _assigned_in(v: KernelView, n: Node, name: str) -> bool:
    for x in walk(n):
        target = None
        if x.type == "assignment_expression":
            target = x.child_by_field_name("left")
        elif x.type == "update_expression":
            target = x.child_by_field_name("argument")
        if target is not None and v.t(target) == name:
            return True
    return False


def enclosing_statements(n: Node) -> list[Node]:
    out = []
    p = n.parent
    while p is not None:
        out.append(p)
        p = p.parent
    return out
