"""What inside the kernel assumes the block size. Constants that follow it are tied to the block parameter
(``__shared__`` sizes, block strides, a tree reduction's first stride, a warp-count macro); a tree reduction
on the block size narrows it to powers of two; a literal that looks like the block size but cannot be tied
(``if (tid < 128) s[tid] += s[tid + 128]``) fixes it, and the parameter's ``why`` names that literal."""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core import expr
from agent_core.templating.structural.source import Resolver, Source, int_literal, span_of
from agent_core.templating.structural.state import Analysis
from agent_core.templating.structural.syntax import statement_of, strip_comments, walk

# a kernel that splits its block into warps (warp ids, lanes, shuffles)
_WARP_RE = re.compile(r"/\s*(?:32|warpSize|WARP_SIZE)\b|>>\s*5\b|%\s*(?:32|warpSize|WARP_SIZE)\b|&\s*31\b|"
                      r"\bwarpSize\b|__shfl")


def block_assumptions(a: Analysis) -> None:
    """Constants in the kernel that assume the block size follow the block parameter: ``__shared__`` array
    sizes, the step of a ``threadIdx``-strided loop, ``blockIdx.x * 256`` and the first stride
    ``s = 128`` of a tree reduction, whether written as a literal or as a constant of their own
    (``#define SMEM 256``); a padded dimension (``[256 + 1]``, ``[257]``) follows as ``BLOCK + 1``; a
    macro or constant that is the warp count (``#define NWARPS 8`` sizing a ``__shared__`` array, with
    256 threads, in a kernel that computes warp ids) follows as ``BLOCK / 32``."""
    if a.block is None or a.body is None:
        return
    bp = a.params[a.block]
    orig = bp.original
    r = Resolver(a.f, None)
    warps = bool(_WARP_RE.search(strip_comments(a.body_text)))
    tvars = _thread_vars(a)
    for n in walk(a.body):
        cands: list[tuple[Node | None, bool]] = []  # (node, is a __shared__ array size)
        if n.type == "declaration" and "__shared__" in [a.f.t(c) for c in n.children
                                                         if c.type in ("type_qualifier", "storage_class_specifier",
                                                                       "attribute_specifier")]:
            for x in walk(n):
                if x.type == "array_declarator":
                    cands.append((x.child_by_field_name("size"), True))
        elif n.type == "binary_expression" and a.f.t(n.child_by_field_name("operator")) == "*":
            lt, rt = n.child_by_field_name("left"), n.child_by_field_name("right")
            if lt is not None and rt is not None:  # blockIdx.x * 256
                if a.f.t(lt).replace(" ", "") == "blockIdx.x":
                    cands.append((rt, False))
                elif a.f.t(rt).replace(" ", "") == "blockIdx.x":
                    cands.append((lt, False))
        elif n.type == "assignment_expression":  # i += 256 / i = i + 256 on a threadIdx-derived i
            op, lt, rt = (n.child_by_field_name(x) for x in ("operator", "left", "right"))
            if op is not None and lt is not None and rt is not None and lt.type == "identifier" \
                    and a.f.t(lt) in tvars:
                if a.f.t(op) == "+=":
                    cands.append((rt, False))
                elif a.f.t(op) == "=" and rt.type == "binary_expression" and \
                        a.f.t(rt.child_by_field_name("operator")) == "+":
                    u, v = rt.child_by_field_name("left"), rt.child_by_field_name("right")
                    if u is not None and v is not None:
                        if a.f.t(u) == a.f.t(lt):
                            cands.append((v, False))
                        elif a.f.t(v) == a.f.t(lt):
                            cands.append((u, False))
        if n.type == "for_statement" and orig % 2 == 0:  # for (s = 128; s > 0; s >>= 1)
            upd = n.child_by_field_name("update")
            init = n.child_by_field_name("initializer")
            if upd is not None and init is not None and re.search(r">>=\s*1\b|/=\s*2\b", a.f.t(upd)):
                for x in walk(init):
                    if x.type == "number_literal" and x.parent is not None and \
                            x.parent.type in ("init_declarator", "assignment_expression") and \
                            int_literal(a.f.t(x)) == orig // 2:
                        src = Source(span_of(x), orig // 2, a.f.t(x), None, "")
                        a.tie(src, a.block, "{value} / 2")
        for c, shared in cands:
            _tie_block_constant(a, c, r, shared, warps)


def _tie_block_constant(a: Analysis, c: Node | None, r: Resolver, shared: bool, warps: bool) -> None:
    if c is None:
        return
    orig = a.params[a.block].original
    if shared and c.type == "binary_expression" and a.f.t(c.child_by_field_name("operator")) == "+":
        # [256 + 1]: padding after the block constant
        _tie_block_constant(a, c.child_by_field_name("left"), r, shared, warps)
        return
    if c.type not in ("number_literal", "identifier"):
        return
    src = r.resolve(c)
    if src is None or src.key in a.by_key:
        return  # not a constant, or a name that follows the block parameter already
    if src.value == orig:
        a.tie(src, a.block)
    elif shared and src.value == orig + 1 and c.type == "number_literal":
        a.tie(src, a.block, "{value} + 1")
    elif shared and warps and src.name and orig // 32 >= 2 and src.value == orig // 32:
        a.tie(src, a.block, "({value} / 32)")


def block_pow2(a: Analysis) -> None:
    """A tree reduction whose first stride comes from the block size (``for (s = BLOCK / 2; s > 0;
    s >>= 1)``) needs a power-of-two block: the domain is narrowed to powers of two and constrained."""
    if a.block is None:
        return
    p = a.params[a.block]
    if p.kind != "block_size":
        return
    line = _tree_reduction(a)
    if line is None or not expr.FUNCTIONS["is_pow2"](p.original):
        return
    p.values = sorted({v for v in p.values if expr.FUNCTIONS["is_pow2"](v)} | {p.original})
    a.constrain(f"is_pow2({p.name})")


def _tree_reduction(a: Analysis) -> int | None:
    """The 0-based line of a halving update (``s >>= 1``, ``s /= 2``, ``s = s / 2``) of a variable whose
    start comes from the block size, or whose start is unknown; None when there is none."""
    if a.body is None:
        return None
    names = _block_names(a)
    bp = a.params[a.block] if a.block else None
    halvings: list[tuple[str, Node]] = []
    inits: dict[str, list[Node]] = {}
    for n in walk(a.body):
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and v is not None and d.type == "identifier":
                inits.setdefault(a.f.t(d), []).append(v)
            continue
        if n.type != "assignment_expression":
            continue
        op, lt, rt = (n.child_by_field_name(x) for x in ("operator", "left", "right"))
        if op is None or lt is None or rt is None or lt.type != "identifier":
            continue
        v, o = a.f.t(lt), a.f.t(op)
        if (o == ">>=" and int_literal(a.f.t(rt)) == 1) or (o == "/=" and int_literal(a.f.t(rt)) == 2):
            halvings.append((v, n))
        elif o == "=" and rt.type == "binary_expression" and a.f.t(rt.child_by_field_name("left")) == v \
                and (a.f.t(rt.child_by_field_name("operator")), int_literal(
                    a.f.t(rt.child_by_field_name("right")))) in ((">>", 1), ("/", 2)):
            halvings.append((v, n))
        elif o == "=":
            inits.setdefault(v, []).append(rt)

    def from_block(x: Node) -> bool:
        for y in walk(x):
            if y.type in ("identifier", "type_identifier") and a.f.t(y) in names:
                return True
            if y.type == "number_literal":
                if a.by_key.get((y.start_byte, y.end_byte)) == a.block:
                    return True
                if bp is not None and int_literal(a.f.t(y)) in (bp.original, bp.original // 2):
                    return True
        return False

    for v, n in halvings:
        starts = inits.get(v, [])
        if not starts or any(from_block(x) for x in starts):
            return n.start_point.row
    return None


def untied_block_literals(a: Analysis) -> None:
    """A literal in the kernel that looks like the block size (or half of it, or its warp count) next to
    thread indices, but is not tied to the parameter (``if (tid < 128) red[tid] += red[tid + 128];``):
    kerntune cannot tell what it means, so the block size stays fixed, and ``why`` says which literal."""
    if a.body is None:
        return
    if a.warps is not None:  # a block of WARPS * 32 threads
        p = a.params[a.warps]
        if len(p.values) > 1:
            suspects = {p.original * 32: "the block size"}
            if p.original >= 2:
                suspects[p.original] = "the warp count of the block"
            _fix_at_untied_literal(a, p, suspects, "(or blockDim.x / 32)", "the warp count")
        return
    if a.block is None:
        return
    p = a.params[a.block]
    if p.kind != "block_size" or len(p.values) == 1:
        return
    orig = p.original
    suspects = {orig: "the block size"}
    if orig // 2 >= 16:
        suspects.setdefault(orig // 2, "half the block size")
    if _WARP_RE.search(strip_comments(a.body_text)) and orig // 32 >= 2:
        suspects.setdefault(orig // 32, "the warp count of the block")
    _fix_at_untied_literal(a, p, suspects, "(or blockDim.x)", "the block size")


def _fix_at_untied_literal(a: Analysis, p, suspects: dict[int, str], spelled: str, what: str) -> None:
    """Fix ``p`` at its original value where a literal of ``suspects`` stands next to thread indices (or sizes a
    ``__shared__`` array) without being tied to it; ``why`` and the notes name the literal."""
    orig = p.original
    tvars = _thread_vars(a) | {"threadIdx"}
    for x in walk(a.body):
        if x.type != "number_literal" or (x.start_byte, x.end_byte) in a.by_key:
            continue
        v = int_literal(a.f.t(x))
        if v not in suspects:
            continue
        par = x.parent
        if v == 32 and v != orig and par is not None and par.type == "binary_expression" and \
                par.child_by_field_name("right") == x and \
                a.f.t(par.child_by_field_name("operator")) in ("/", "%"):
            continue  # `kThreads / 32`, `threadIdx.x % 32`: the warp size, dividing, not the warp count
        ctx = statement_of(x)
        ids = {a.f.t(y) for y in walk(ctx) if y.type == "identifier"} if ctx is not None else set()
        shared = ctx is not None and ctx.type == "declaration" and "__shared__" in a.f.t(ctx).split()
        if not (ids & tvars or shared):
            continue
        line = x.start_point.row + 1
        p.values = [orig]
        p.why += (f"; fixed at {orig}: the literal {a.f.t(x)} at line {line} looks like {suspects[v]} "
                  f"but kerntune cannot tie it to {p.name}; write it from {p.name} {spelled} to tune "
                  f"{what}")
        a.notes.append(f"{what} {orig} stays fixed: the literal {a.f.t(x)} at line {line} looks like "
                       f"{suspects[v]} but is not written from it")
        return


def _thread_vars(a: Analysis) -> set[str]:
    """Variables of the kernel computed from ``threadIdx`` (``int tid = threadIdx.x; int i = tid;``)."""
    out: set[str] = set()
    decls = []
    for n in walk(a.body):
        if n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if d is not None and v is not None:
                decls.append((a.f.t(d), v))
        elif n.type == "assignment_expression" and a.f.t(n.child_by_field_name("operator")) == "=":
            d, v = n.child_by_field_name("left"), n.child_by_field_name("right")
            if d is not None and v is not None and d.type == "identifier":
                decls.append((a.f.t(d), v))
    changed = True
    while changed:
        changed = False
        for name, v in decls:
            if name in out:
                continue
            ids = {a.f.t(x) for x in walk(v) if x.type == "identifier"}
            if "threadIdx" in ids or ids & out:
                out.add(name)
                changed = True
    return out


def _block_names(a: Analysis) -> set[str]:
    """Names that stand for the block size inside the kernel: ``blockDim``, the macro / constant / template
    parameter of the block parameter, and macros and constants defined from those."""
    names = {"blockDim"}
    if a.block is None:
        return names
    names |= {s.name for s in a.params[a.block].sites if s.name}
    if a.block_tp:
        names.add(a.block_tp)
    changed = True
    while changed:
        changed = False
        for d in a.f.cf.defines:
            if d.name not in names and set(re.findall(r"[A-Za-z_]\w*", d.value)) & names:
                names.add(d.name)
                changed = True
        for cname, hv in a.f.consts.items():
            if cname not in names and hv.init is not None and \
                    set(re.findall(r"[A-Za-z_]\w*", hv.init.text)) & names:
                names.add(cname)
                changed = True
    return names
