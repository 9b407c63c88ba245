"""What every row binder reads of a kernel's rows: the root and exponential calls that tell the families, the
row length (``_hidden_candidates``; whether a loop walks it: ``_bounds_a_loop``), the row count inside the
wrapper (``_rows``), the stride of rows read at a stride of their own (``_row_stride``), a buffer cast to the
expert's element type (``_cast``), the scalar flag that guards a statement (``_guarding_flag``)."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, ArgUse, Evidence, SizeExpr, closing, div


ROOTS = ("rsqrtf", "sqrtf", "rsqrt", "sqrt", "__frsqrt_rn", "__fsqrt_rn", "hrsqrt", "h2rsqrt", "hsqrt", "powf", "pow")
EXPS = ("expf", "__expf", "exp", "exp2f", "exp2", "hexp", "h2exp", "__exp2f")


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def _hidden_candidates(ev: Evidence, big: tuple, small: list[ArgUse]) -> list[tuple[SizeExpr, tuple]]:
    """(the row length as the wrapper computes it, its value per size set): a weight's length where there is a
    weight (an int argument that holds it, or the constant it is on every size set), else every int argument (or
    product of two) that divides the rows and is not all of them, and a constant the rows' index moves a block by."""
    block_rows: set[tuple] = set()
    if small:
        targets = [small[0].counts]
    else:
        targets = []
        for a in ev.ints():
            if a.counts and div(big, a.counts) and a.counts != big and all(v > 1 for v in a.counts):
                targets.append(a.counts)
        for a, b in itertools.combinations(ev.ints(), 2):
            if a.counts and b.counts:
                t = tuple(x * y for x, y in zip(a.counts, b.counts))
                if div(big, t) and t != big and all(v > 1 for v in t):
                    targets.append(t)
        # a row length the kernel has at compile time only (a template constant), where the rows' index multiplies
        # the block index by it (`blockIdx.x * n + threadIdx.x`: a block a row of n)
        block_rows = _block_strides(ev, [a for a in ev.bufs() if a.counts == big])
        targets += [t for t in block_rows if t not in targets]
    out, seen = [], set()
    for t in targets:
        if t in seen:
            continue
        seen.add(t)
        if div(big, t) is None or t == big:
            continue
        xs = ev.sizes(t)
        # a constant only as a weight's length (a row length fixed at compile time, a template argument such as
        # a head size) or as the stride the rows' index moves a block by; without either a constant that divides
        # the rows is no evidence of a row
        if xs and (not xs[0].c[0].isdigit() or small or t in block_rows):
            out.append((xs[0], t))
    return out


def _block_strides(ev: Evidence, bufs: list[ArgUse]) -> set[tuple]:
    """The constants (the same on every size set, above 1) by which an index of every buffer of ``bufs`` multiplies
    a term of the block index: ``blockIdx.x * n`` (a block a row of n elements)."""
    from agent_core.templating.experts.evidence import _once, factors, index_sites, known_factors, uncast
    once = _once(uncast(ev.body))

    def of_block(f: str) -> bool:  # the factor is the block index itself, or a local holding it (`row = blockIdx.x`)
        for _ in range(8):
            if re.sub(r"[\s()]", "", f) == "blockIdx.x":
                return True
            new = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({once[m.group(0)]})" if m.group(0) in once
                         else m.group(0), f)
            if new == f:
                return False
            f = new
        return False
    found = None
    for a in bufs:
        got = set()
        for site in index_sites(ev, a.name):
            for _, t in site:
                # (a namespace's constant by its own name: `norm::kWidth` is the file's kWidth)
                parts = factors(re.sub(r"\b[A-Za-z_]\w*\s*::\s*", "", t))
                v = known_factors(ev, parts) if any(of_block(f) for f in parts) else None
                if v and len(set(v)) == 1 and v[0] > 1:
                    got.add(v)
        found = got if found is None else found & got
    return found or set()


def _rows(ev: Evidence, rows_fp: tuple, rows_spec: str, hidden: SizeExpr, b: Binding, factor: str = "") -> str:
    """The row count inside the wrapper: an int argument that holds it, else (``factor``: an argument the rows are
    a multiple of, a causal mask's query count) the product of it and another argument, else gridDim.x (one row per
    block: ROWS fixed to 1)."""
    b.sizes["rows"] = rows_spec
    xs = ev.held(rows_fp)
    if not xs and factor:
        xs = [x for x in ev.sizes(rows_fp) if " * " in x.c and f"(int)({factor})" in x.c.split(" * ")]
    if not xs:
        xs = _row_product(ev, rows_fp, rows_spec, hidden)
    if xs:
        b.words.append(f"rows={xs[0].words}")
        return xs[0].c
    b.fixed["ROWS"] = [1]
    b.words.append("rows=the grid (no row-count argument)")
    return "(int)gridDim.x"


def _shorter_somewhere(short: tuple, long: tuple) -> bool:
    """Whether ``short`` is at most ``long`` on every size set and less on one: a row's live part within a padded
    row, the row within the stride its rows are laid out at."""
    return all(a <= b for a, b in zip(short, long)) and any(a < b for a, b in zip(short, long))


def _row_product(ev: Evidence, rows_fp: tuple, rows_spec: str, hidden: SizeExpr) -> list[SizeExpr]:
    """The row count as a product of two or three of the kernel's int arguments (attention scores' ``batch * heads
    * q_len``; the row length among them where the rows are a square's, ``heads * batch * seq``): one that is the
    spec's row count as an expression (the same value for
    any sizes, checked on the spec's size sets and on random ones), so a block may hold several rows (without it
    the row count is the grid's, one row a block). Empty where no product is."""
    import random
    from agent_core import expr
    ints = [a for a in ev.ints() if a.counts and a.spec.value is not None]
    names = set(expr.names(rows_spec))
    rng = random.Random(0)
    envs = [{n: rng.randint(2, 97) for n in sorted(names | {x for a in ints for x in expr.names(str(a.spec.value))})}
            for _ in range(4)]
    for r in (2, 3):
        for combo in itertools.combinations(ints, r):
            got = tuple(1 for _ in rows_fp)
            for a in combo:
                got = tuple(x * y for x, y in zip(got, a.counts))
            if got != rows_fp:
                continue
            product = " * ".join(f"({a.spec.value})" for a in combo)
            try:
                same = all(expr.evaluate_int(product, env) == expr.evaluate_int(rows_spec, env) for env in envs)
            except Exception:  # noqa: BLE001 - an expression the evaluator refuses is no evidence
                same = False
            if same:
                return [SizeExpr(" * ".join(f"(int)({a.name})" for a in combo), product,
                                 "`" + " * ".join(a.name for a in combo) + "`")]
    return []


def _row_stride(ev: Evidence, counts: tuple, rows_fp: tuple, hfp: tuple) -> SizeExpr | None:
    """The stride of rows read at a stride of their own (each row the first ``hidden`` elements of a wider one): an
    int argument that holds the strided buffer's length (``counts``) over the rows, never less than the row length
    (``hfp``); None where there is none."""
    stride_fp = div(counts, rows_fp)
    strides = ev.held(stride_fp)
    if not strides or any(st < h for st, h in zip(stride_fp, hfp)):
        return None
    return strides[0]


def _guarding_flag(ev: Evidence, stmt: str) -> str | None:
    """The scalar argument whose truth alone is the condition of an ``if`` around the statement ``stmt`` (text of
    the body), or None."""
    at = ev.body.find(stmt)
    scalars = {a.name for a in ev.args if a.role == "scalar"}
    for m in re.finditer(r"\bif\s*\(", ev.body[:max(at, 0)]):
        i = closing(ev.body, m.end())
        cond = re.fullmatch(r"\s*\(?\s*(\w+)\s*\)?\s*(?:!=\s*(?:0|false)|==\s*(?:1|true))?\s*", ev.body[m.end():i - 1])
        if cond is None or cond.group(1) not in scalars:
            continue
        rest = ev.body[i:]
        lead = len(rest) - len(rest.lstrip())
        if rest[lead:lead + 1] == "{":
            depth, j = 1, i + lead + 1
            while j < len(ev.body) and depth:
                depth += {"{": 1, "}": -1}.get(ev.body[j], 0)
                j += 1
        else:
            j = ev.body.find(";", i) + 1
        if i <= at < j:
            return cond.group(1)
    return None


def _bounds_a_loop(ev: Evidence, hidden: SizeExpr) -> bool:
    """Whether the arguments of the row length are, all and only, those of some loop's bound (``k < k_len``, a
    row's keys): a row length the kernel walks, not a product of sizes it never walks as one."""
    args = set(re.findall(r"\(int\)\((\w+)\)", hidden.c))
    return any(set(re.findall(r"\b[A-Za-z_]\w*\b", bound)) - {"int", "long", "size_t", "int64_t"} == args
               for bound in re.findall(r"for\([^;]*;[\w.]+<([^;]+);", ev.flat))


_ROOT_CALL = re.compile(r"\b(?:" + "|".join(ROOTS) + r")\s*\(")


def _read_before_root(ev: Evidence, name: str) -> bool:
    """Whether the body names the buffer ``name`` before its first root call: an input used in the sum, before the
    statistics, rather than a weight applied after them. Where the root is taken in a helper the kernel calls (its
    body read after the kernel's, ``callees``), the kernel handing the pointer on whole (``layerNorm(..., beta,
    gamma, out)``, TensorRT's) reads nothing: the helpers' bodies, in the order they are called, tell where it is
    read."""
    root = _ROOT_CALL.search(ev.body)
    if root is None:
        return False
    handed = 0 <= ev.own_end <= root.start()
    for use in re.finditer(rf"(?<![\w.]){re.escape(name)}\b", ev.body[:root.start()]):
        if handed and use.start() < ev.own_end and re.fullmatch(r"[(,]", ev.body[:use.start()].rstrip()[-1:]) \
                and re.match(r"\s*[,)]", ev.body[use.end():]):
            continue  # an argument of a call, whole: a helper's body reads it where it does
        return True
    return False


def _indexed_before_root(ev: Evidence, name: str) -> bool:
    """Whether the body reads or writes an element of the buffer ``name`` (or of a pointer made from it) before its
    first root call: a row summed into the statistics, not one added after them (a post-norm residual, a pointer set
    up early and indexed only after the root)."""
    from agent_core.templating.experts.evidence import pointer_aliases, uncast
    text = uncast(ev.body)
    root = _ROOT_CALL.search(text)
    if root is None:
        return False
    names = pointer_aliases(text, name)  # and the pointers made from it (`T* row = x + off;`), transitively
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\s*\[", text[:root.start()]) for n in names)
