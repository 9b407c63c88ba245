"""Warp reductions: a shared-memory tree reduction over the whole block becomes warp shuffles plus one shared
slot per warp, so the block size is no longer tied to the ``__shared__`` array's size or to a power of two.

Recognized (``s`` a ``__shared__`` array, ``tid`` = ``threadIdx.x``)::

    s[tid] = v;
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {      // or blockDim.x / 2, k /= 2, k >= 1
      if (tid < k) s[tid] += s[tid + k];          // or s[tid] = fmaxf(s[tid], s[tid + k]) (max, min, + forms)
      __syncthreads();
    }
    ... s[0] ...

becomes a shuffle reduction of ``v`` in each warp, one partial per warp in shared memory, a shuffle reduction
of the partials in the first warp, whose lane 0 writes the result to ``s[0]``, and a barrier: every read of
``s[0]`` after it sees the same value as before. Only sums, maxima and minima (associative and commutative)
are rewritten; a loop without a barrier in it (a race) or a tree that does not start at half the block is left
alone. When every access of ``s`` is then ``s[0]``, its size becomes 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from agent_core.model import Param
from agent_core.templating.rewrites.base import KernelView, Rewrite, RewriteContext, apply_edits
from agent_core.templating.rewrites.syntax import KernelFacts, base_type, squash, walk

_OPS = {"fmaxf": "max", "max": "max", "fmax": "max", "fminf": "min", "min": "min", "fmin": "min"}


@dataclass
class Tree:
    array: str
    elem: str
    store: Node  # `s[tid] = v;`
    barrier: Node  # the `__syncthreads();` after it
    loop: Node
    value: str  # v
    op: str  # "sum", "max", "min"
    combine: str  # C expression over kt_a, kt_b


def _shared_arrays(v: KernelView) -> dict[str, tuple[str, Node]]:
    """``__shared__`` arrays of the kernel: name -> (element type, the size node)."""
    out = {}
    for n in walk(v.body):
        if n.type == "declaration" and "__shared__" in v.t(n).split("[")[0].split():
            typ = n.child_by_field_name("type")
            for c in n.named_children:
                if c.type == "array_declarator":
                    name, size = c.child_by_field_name("declarator"), c.child_by_field_name("size")
                    if name is not None and name.type == "identifier" and size is not None:
                        out[v.t(name)] = (base_type(v.t(typ)), size)
    return out


def _stmt_is_sync(v: KernelView, n: Node | None) -> bool:
    return n is not None and n.type == "expression_statement" and squash(v.t(n)).rstrip(";") == "__syncthreads()"


def _combine(v: KernelView, facts: KernelFacts, stmt: Node, arr: str, k: str) -> tuple[str, str] | None:
    """(op, combine expression over kt_a, kt_b) of ``s[tid] op= s[tid + k]``, or None."""
    s = squash(v.t(stmt)).rstrip(";")
    tids = sorted(facts.tid_names, key=len, reverse=True)
    for t in tids:
        me, other = f"{arr}[{t}]", (f"{arr}[{t}+{k}]", f"{arr}[{k}+{t}]")
        for o in other:
            if s == f"{me}+={o}" or s in (f"{me}={me}+{o}", f"{me}={o}+{me}"):
                return "sum", "kt_a + kt_b"
            m = re.fullmatch(rf"{re.escape(me)}=(\w+)\((.*)\)", s)
            if m and m.group(1) in _OPS and m.group(2) in (f"{me},{o}", f"{o},{me}"):
                return _OPS[m.group(1)], f"{m.group(1)}(kt_a, kt_b)"
            for cmp, op in ((">", "max"), ("<", "min")):
                if s in (f"{me}={me}{cmp}{o}?{me}:{o}", f"{me}=({me}{cmp}{o})?{me}:{o}"):
                    return op, f"(kt_a {cmp} kt_b ? kt_a : kt_b)"
    return None


def find_trees(v: KernelView, facts: KernelFacts) -> tuple[list[Tree], list[str]]:
    shared = _shared_arrays(v)
    trees, why = [], []
    for loop in walk(v.body):
        if loop.type != "for_statement":
            continue
        init, cond = loop.child_by_field_name("initializer"), loop.child_by_field_name("condition")
        upd, body = loop.child_by_field_name("update"), loop.child_by_field_name("body")
        line = loop.start_point.row + 1
        if init is None or cond is None or upd is None or body is None:
            continue
        m = re.fullmatch(r"(?:int|unsigned|unsignedint|constint)?(\w+)=(.+)", squash(v.t(init)).rstrip(";"))
        if not m:
            continue
        k, first = m.group(1), m.group(2)
        if not any(re.search(rf"\b{re.escape(a)}\s*\[", v.t(body)) for a in shared):
            continue  # not over shared memory (a shuffle loop, say)
        if squash(v.t(upd)) not in (f"{k}>>=1", f"{k}/=2", f"{k}={k}>>1", f"{k}={k}/2"):
            continue  # not a halving loop
        if squash(v.t(cond)) not in (f"{k}>0", f"{k}>=1", f"0<{k}"):
            why.append(f"halving loop at line {line}: its condition `{v.t(cond)}` does not run down to 1")
            continue
        halves = {f"{b}/2" for b in facts.block_names} | {f"{b}>>1" for b in facts.block_names}
        if first not in halves:
            why.append(f"halving loop at line {line}: it starts at `{first}`, not at half the block "
                       f"({' or '.join(sorted(facts.block_names))} / 2)")
            continue
        stmts = [c for c in body.named_children if c.type != "comment"] if body.type == "compound_statement" else [body]
        if len(stmts) != 2 or stmts[0].type != "if_statement" or not _stmt_is_sync(v, stmts[1]):
            why.append(f"halving loop at line {line}: its body is not `if (tid < {k}) s[tid] op= s[tid + {k}]; "
                       "__syncthreads();` (a tree without a barrier in each step races)")
            continue
        ifs = stmts[0]
        if ifs.child_by_field_name("alternative") is not None or \
                squash(v.t(ifs.child_by_field_name("condition"))) not in {f"{t}<{k}" for t in facts.tid_names}:
            why.append(f"halving loop at line {line}: its guard is not `if (tid < {k})`")
            continue
        cons = ifs.child_by_field_name("consequence")
        if cons.type == "compound_statement":
            inner = [c for c in cons.named_children if c.type != "comment"]
            cons = inner[0] if len(inner) == 1 else None
        arr = None
        for name in shared:
            if cons is not None and v.t(cons).lstrip().startswith(name):
                arr = name
        got = _combine(v, facts, cons, arr, k) if arr and cons is not None else None
        if got is None:
            why.append(f"halving loop at line {line}: `{v.t(cons) if cons is not None else '?'}` is not a sum, max "
                       "or min of two shared elements (only those are associative and commutative)")
            continue
        prev = loop.prev_named_sibling
        while prev is not None and prev.type == "comment":
            prev = prev.prev_named_sibling
        store = prev.prev_named_sibling if prev is not None else None
        while store is not None and store.type == "comment":
            store = store.prev_named_sibling
        if not _stmt_is_sync(v, prev) or store is None or store.type != "expression_statement":
            why.append(f"halving loop at line {line}: not preceded by `{arr}[tid] = value; __syncthreads();`")
            continue
        a = store.named_children[0]
        lhs = a.child_by_field_name("left") if a.type == "assignment_expression" else None
        if lhs is None or v.t(a.child_by_field_name("operator")) != "=" or \
                squash(v.t(lhs)) not in {f"{arr}[{t}]" for t in facts.tid_names}:
            why.append(f"halving loop at line {line}: not preceded by `{arr}[tid] = value; __syncthreads();`")
            continue
        value = v.t(a.child_by_field_name("right"))
        if arr in value:
            why.append(f"halving loop at line {line}: the value stored reads {arr}")
            continue
        trees.append(Tree(arr, shared[arr][0], store, prev, loop, value, got[0], got[1]))
    return trees, why


def _others_read_only_slot0(v: KernelView, trees: list[Tree], arr: str) -> bool:
    """Every access of ``arr`` outside its trees is ``arr[0]``."""
    spans = [(t.store.start_byte, t.loop.end_byte) for t in trees if t.array == arr]
    for n in walk(v.body):
        if n.type == "subscript_expression" and v.t(n.child_by_field_name("argument")) == arr:
            if any(a <= n.start_byte < b for a, b in spans):
                continue
            if squash(v.t(n)) != f"{arr}[0]":
                return False
    return True


def reduction_text(v: KernelView, t: Tree, n: int) -> str:
    ind = v.indent_of(t.store)
    i1, i2 = ind + "  ", ind + "    "
    pad = "kt_w[0]" if t.op in ("max", "min") else f"({t.elem})0"
    shfl = (f"for (int kt_o = 16; kt_o > 0; kt_o >>= 1) {{ const {t.elem} kt_b = __shfl_xor_sync(0xffffffffu, kt_a, "
            f"kt_o); kt_a = {t.combine.replace('kt_b', 'kt_b')}; }}")
    return "\n".join([
        f"{{  // kerntune warp_reduce: the shared-memory tree ({t.op}) over {t.array}[] became warp shuffles and "
        f"one shared slot per warp; the result is in {t.array}[0] as before",
        f"{i1}__shared__ {t.elem} kt_w[32];  // one partial per warp",
        f"{i1}{t.elem} kt_a = {t.value};",
        "#pragma unroll",
        f"{i1}{shfl}",
        f"{i1}if ((threadIdx.x & 31) == 0) kt_w[threadIdx.x >> 5] = kt_a;",
        f"{i1}__syncthreads();",
        f"{i1}if (threadIdx.x < 32) {{",
        f"{i2}kt_a = threadIdx.x < ((blockDim.x + 31) >> 5) ? kt_w[threadIdx.x] : {pad};",
        "#pragma unroll",
        f"{i2}{shfl}",
        f"{i2}if (threadIdx.x == 0) {t.array}[0] = kt_a;",
        f"{i1}}}",
        f"{i1}__syncthreads();",
        f"{ind}}}"])


class WarpReduce(Rewrite):
    name = "warp_reduce"
    summary = "shared-memory tree reductions (sum/max/min) over the block become warp shuffles + one slot per warp"

    def _trees(self, ctx: RewriteContext):
        v = ctx.view()
        facts = KernelFacts(v, ctx.block)
        trees, why = find_trees(v, facts)
        return v, trees, why

    def why_not(self, ctx: RewriteContext) -> str | None:
        v, trees, why = self._trees(ctx)
        if "threadIdx.y" in v.t(v.body) or "threadIdx.z" in v.t(v.body):
            return "the kernel uses a 2D block"
        if ctx.block is None or f"{ctx.block} % 32 == 0" not in ctx.constraints:
            return "the block size is not a parameter kept to a multiple of 32 (warps must be whole)"
        if ctx.capped:
            return (f"the launch's block `{ctx.launch['block'][0]}` is only capped by {ctx.block}: it may end in a "
                    "partial warp (warps must be whole)")
        if not trees:
            return "no shared-memory tree reduction over the block" + (f" ({'; '.join(why)})" if why else "")
        arrays = {t.array for t in trees}
        bad = [a for a in arrays if not _others_read_only_slot0(v, trees, a)]
        if bad:
            return f"{', '.join(bad)} is read at other slots than [0] after its reduction"
        if why:
            return f"another halving loop is left that kerntune cannot rewrite ({'; '.join(why)})"
        return None

    def rewrite(self, ctx: RewriteContext) -> RewriteContext:
        v, trees, _ = self._trees(ctx)
        edits = [(t.store.start_byte, t.loop.end_byte, reduction_text(v, t, i)) for i, t in enumerate(trees)]
        shared = _shared_arrays(v)
        for a in sorted({t.array for t in trees}):
            size = shared[a][1]
            edits.append((size.start_byte, size.end_byte, "1 /* kerntune warp_reduce: only [0] is used now */"))
        what = ", ".join(f"{t.op} over {t.array}[] at line {t.loop.start_point.row + 1}" for t in trees)
        ctx = ctx.with_text(apply_edits(ctx.text, edits),
                            f"warp_reduce: {what} became warp shuffles; the block size is free of powers of two")
        b = ctx.params[ctx.block]
        if len(b.values) > 1:  # the tree tied it to powers of two
            b = Param(b.name, sorted(set(range(32, 1025, 32)) | {b.original}), b.original, b.kind, b.why, b.closed)
            ctx.params[ctx.block] = b
            ctx.constraints = [c for c in ctx.constraints if c != f"is_pow2({ctx.block})"]
        return ctx
