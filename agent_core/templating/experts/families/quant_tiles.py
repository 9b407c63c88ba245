"""Block-wise quantization with one scale per 2-D tile (the ``block_quant_2d`` expert of the group_quant family):
DeepSeek-V3's 128 x 128 fp8 weight blocks as DeepGEMM's ``per_block_cast_to_fp8`` makes them, vLLM's and SGLang's
block fp8 linear, Transformer Engine's 2-D block scaling. A row-major [rows, cols] matrix is cut into tiles of
tile_rows x tile_cols elements; each tile gets one fp32 scale from its absolute maximum.

Evidence (never a name): one float input, one byte output of the input's count whose type or conversion shows fp8
e4m3, one fp32 output of the tile count, and nothing else; an absolute value taken (fabsf, ...) and a maximum. The
shape: an int argument the input's index multiplies by (the row length, cols) and the rows (the input's elements
over it: an argument, or an expression of them), and tile sides (powers of two from 16 to 512, or the file's
integer constants) with cdiv(rows, tile_rows) * cdiv(cols, tile_cols) the scale count on every size set, both
sides above 1 (a tile spans rows and columns: per-token groups are the other expert's). The scales' layout: what
the index of the body's writes of them multiplies a tile index by, a factor known before the launch: the count of
tile columns (row-major, [tile rows, tile columns]) or of tile rows (column-major, [tile columns, tile rows]), or
neither (``gridDim.x``: both, row-major first).
Numerics, each first where the body shows it: the values multiplied by the factor qmax / amax (the body divides the
type's largest value by something that is no constant) or by 1 / scale or divided by scale = amax / qmax; what is
stored, the inverse of the factor (the write's value is 1 / something) or amax / qmax; an all-zero tile given the
scale 1 (a choice of 1 when the maximum is not above 0) or the maximum floored at eps (a float argument, a small
literal or a named constant an fmaxf takes with the maximum; assumed 1e-10 where there is none); the scale rounded up
to a power of two (exp2f of ceilf(log2f)); clamped to [qmin, qmax] before the saturating conversion where a minimum
takes 448 (or the qmax argument), else the conversion alone.
"""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, Evidence, SizeExpr, additive_terms,
                                                    call_arguments, div, factors, fp8_formats, index_parts, number,
                                                    statements, term_values, uncast, unparen)
from agent_core.templating.experts.families.quant import ABS_CALLS, _factor, _numerics

EXPERT = "block_quant_2d"
TILE_SIDES = (128, 64, 256, 32, 512, 16)  # the family's tile sides (DeepSeek-V3 / DeepGEMM / TE: 128) first
RECIP_WORDS = {0: "divided by the scale amax / qmax", 1: "multiplied by 1 / scale (scale = amax / qmax)",
               2: "multiplied by the factor qmax / amax"}
_ONE = r"\(*1(?:\.0*)?[fF]?\)*"
_ZERO = r"\(*0(?:\.0*)?[fF]?\)*"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tiles(ev: Evidence, rows: tuple, cols: tuple, scales: tuple) -> list[tuple[int, int]]:
    """(tile_rows, tile_cols), powers of two (the expert's sweeps need them), with cdiv(rows, tile_rows) *
    cdiv(cols, tile_cols) the scale count on every size set: square tiles first, then sides the file names (a
    constant or a literal of the body), the family's usual sides first."""
    named = {int(v) for v in ev.constants.values() if float(v).is_integer() and 8 <= v <= 1024}
    named |= {int(t) for t in re.findall(r"(?<![\w.])(\d+)(?![\w.])", ev.body) if 8 <= int(t) <= 1024}
    sides = list(TILE_SIDES) + sorted(s for s in named if s & (s - 1) == 0 and s not in TILE_SIDES)
    out = [(a, b) for a, b in itertools.product(sides, sides)
           if all(_cdiv(r, a) * _cdiv(c, b) == n for r, c, n in zip(rows, cols, scales))]
    return sorted(out, key=lambda t: (t[0] != t[1], not (t[0] in named and t[1] in named)))


def _shapes(ev: Evidence, x, sc) -> list[tuple[int, SizeExpr, SizeExpr, int, int, tuple, tuple]]:
    """(support, rows, cols, tile_rows, tile_cols, the tile rows' and tile columns' counts): cols an int argument,
    rows the input's elements over it, the tiles those of the scale count. Only the arguments the input's index multiplies by (the row length) where some
    is."""
    parts = index_parts(ev, x.name)

    def multiplies(name: str) -> bool:
        n = re.escape(name)
        return any(re.search(rf"(?<![\w.]){n}\)*\*|\*\(*{n}(?!\w)", p) for p in parts)

    out = []
    for c in ev.ints():
        if not c.counts or any(v is None or v < 1 for v in c.counts):
            continue
        rv = div(x.counts, c.counts)
        rs = [s for s in ev.sizes(rv, exclude=(c.name,)) if not s.c[0].isdigit()] if rv else []
        if not rs:
            continue
        C = SizeExpr(f"(int)({c.name})", str(c.spec.value), f"`{c.name}`")
        for t1, t2 in _tiles(ev, rv, c.counts, sc.counts)[:2]:
            out.append((0 if multiplies(c.name) else -6, rs[0], C, t1, t2,
                        tuple(_cdiv(v, t1) for v in rv), tuple(_cdiv(v, t2) for v in c.counts)))
    if any(s == 0 for s, *_ in out):
        out = [o for o in out if o[0] == 0]
    return out


def _layouts(ev: Evidence, sc, tiles_r: tuple, tiles_c: tuple) -> list[int]:
    """0 row-major, 1 column-major: what the index of the body's writes of the scales multiplies a tile index by, a
    factor known before the launch (``term_values``) that is the count of tile columns (row-major) or of tile rows
    (column-major) on every size set; both, row-major first, where it shows neither (``gridDim.x``)."""
    found = set()
    for idx in re.findall(rf"\b{re.escape(sc.name)}\)?\[([^\]]*)\]=[^=]", uncast(ev.body).replace(" ", "")):
        for _, term in additive_terms(idx):
            for f in factors(unparen(term)):
                v = term_values(ev, f) if re.search(r"[A-Za-z_]", f) else None
                if v == tiles_c:
                    found.add(0)
                elif v == tiles_r:
                    found.add(1)
    return sorted(found) if len(found) == 1 else [0, 1]


def _stores_inverse(ev: Evidence, sc) -> bool:
    """Whether the body stores 1 / something as the tile's scale (the inverse of the factor: scale_inv)."""
    n = re.escape(sc.name)
    vals = re.findall(rf"\b{n}\)?\[[^\]]*\]=(?!=)([^;]*)", ev.flat)
    assigned: dict[str, list[str]] = {}
    for target, at, stmt in statements(ev.body):
        if target is not None:
            assigned.setdefault(target, []).append(re.sub(r"\s+", "", stmt[at + 1:]))
    vals += [a for v in vals if re.fullmatch(r"[A-Za-z_]\w*", v) for a in assigned.get(v, [])]
    return any(re.match(rf"(?:\(float\))?{_ONE}/", v) or v.startswith("__frcp_rn(") for v in vals)


def _zero_tile(ev: Evidence) -> bool:
    """Whether the body gives an all-zero tile the scale 1: a choice of 1 where the maximum is (not) above 0
    (``amax > 0.f ? 448.f / amax : 1.f``, ``amax == 0 ? 1.f : ...``, ``if (amax == 0.f) s = 1.f;``)."""
    f = ev.flat
    cond = re.search(rf"(?:>|!=|==|<=){_ZERO}\?", f)
    one = re.search(rf"(?:\?{_ONE}:|:{_ONE}[;),])", f)
    stmt = re.search(rf"if\([^(){{}}]*(?:==|<=){_ZERO}\)\{{?\w+={_ONE};", f)
    return bool((cond and one) or stmt)


def _clamps(ev: Evidence, qmax) -> bool:
    """Whether a minimum takes the type's largest value (448, a constant of it) or the qmax argument: the value is
    clamped before the conversion."""
    for _, args in call_arguments(ev.body, r"(?:std::|::)?(fminf|fmin|min)"):
        for a in args:
            a = a.strip()
            if number(a, ev.constants) == 448.0 or (qmax is not None and a == qmax.name):
                return True
    return False


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get(EXPERT)
    if e is None:
        return []
    ins = ev.bufs("in", FLOATS)
    if len(ins) != 1 or len(ev.bufs()) != 3 or not ins[0].counts:
        return []
    x = ins[0]
    qs = [a for a in ev.bufs("out") if a.dtype == "u8" and a.counts == x.counts]
    scs = [a for a in ev.bufs("out", ("f32",)) if a.counts and a.counts != x.counts]
    if len(qs) != 1 or len(scs) != 1 or "__nv_fp8_e4m3" not in fp8_formats(ev, qs[0]):
        return []
    q, sc = qs[0], scs[0]
    if not ev.has(*ABS_CALLS) or not ev.has("fmaxf", "fmax", "max", "__hmax", "__hmax2"):
        return []
    shapes = _shapes(ev, x, sc)
    if not shapes:
        return []
    qmin, qmax, eps_c, _, _, _, recips = _numerics(ev, [q])
    recips = ([2] if _factor(ev, qmax, "uint8_t") else []) + recips + ([] if _factor(ev, qmax, "uint8_t") else [2])
    stores = [1, 0] if _stores_inverse(ev, sc) else [0, 1]
    zero = _zero_tile(ev)
    real_eps = [c for c in eps_c if not c[1].endswith("(assumed)")]
    pow2s = [1, 0] if ev.has("exp2f", "ldexpf", "exp2") and ev.has("ceilf", "log2f") else [0]
    clamp = int(_clamps(ev, qmax))
    qmin_c = f"(float)({qmin.name})" if qmin else "-448.f"
    qmax_c = f"(float)({qmax.name})" if qmax else "448.f"
    out = []
    for sup, R, C, t1, t2, tiles_r, tiles_c in shapes:
        for li, layout in enumerate(_layouts(ev, sc, tiles_r, tiles_c)):
            for (ci, recip), (zi, z), (pi, pow2) in itertools.product(
                    enumerate(recips), enumerate([1, 0] if zero else [0]), enumerate(pow2s)):
                if pow2 and recip == 2:
                    continue  # a power-of-two scale is not amax / qmax: its values take 1 / scale (exact)
                epss = (real_eps[:1] or [("0.f", "no eps")]) if z else eps_c[:2]
                for (si, store), (ei, (eps, eps_words)) in itertools.product(
                        enumerate(stores if recip == 2 else [0]), enumerate(epss)):
                    out.append(_binding(e, ev, x, q, sc, R, C, t1, t2, layout, recip, store, z, pow2, clamp, eps,
                                        eps_words, qmin_c, qmax_c, qmin, qmax,
                                        20 + sup - 5 * li - 2 * ci - 2 * si - 3 * zi - 2 * pi - ei))
    return out


def _binding(e, ev, x, q, sc, R, C, t1, t2, layout, recip, store, zero, pow2, clamp, eps, eps_words, qmin_c, qmax_c,
             qmin, qmax, support) -> Binding:
    tiles_r, tiles_c = f"(({R.c}) + {t1 - 1}) / {t1}", f"(({C.c}) + {t2 - 1}) / {t2}"
    b = Binding(e, 0.85, f"tiles of {t1} x {t2} elements (the scales' count is cdiv(rows, {t1}) * cdiv(cols, {t2})): "
                f"absolute maximum (fabsf, max reduction) over a tile of rows and columns, one fp32 scale per tile, "
                "fp8 e4m3 output → block-wise (2-D tile) quantization", ev.kernel.name)
    b.sizes = {"rows": R.spec, "cols": C.spec, "tile_rows": str(t1), "tile_cols": str(t2)}
    b.template_args = [CTYPE[x.dtype], "uint8_t", str(t1), str(t2)]
    b.call_args = [f"(const {CTYPE[x.dtype]}*)({x.name})", f"(uint8_t*)({q.name})", f"(float*)({sc.name})", R.c, C.c,
                   eps, qmin_c, qmax_c] + ([tiles_c, "1"] if layout == 0 else ["1", tiles_r])
    b.conventions = {"KT_EXPERT_SCALE_RECIP": recip, "KT_EXPERT_SCALE_STORE": store, "KT_EXPERT_ZERO_TILE": zero,
                     "KT_EXPERT_SCALE_POW2": pow2, "KT_EXPERT_CLAMP": clamp}
    b.consts = {"ESIZE": NBYTES[x.dtype]}
    grid = (f"row-major [cdiv({R.words}, {t1}), cdiv({C.words}, {t2})]" if layout == 0 else
            f"column-major [cdiv({C.words}, {t2}), cdiv({R.words}, {t1})]")
    b.words = [f"x={x.name}", f"q={q.name} (fp8 e4m3 (bytes))", f"scales={sc.name} (one fp32 per {t1} x {t2} tile, {grid})",
               f"rows={R.words}", f"cols={C.words}", eps_words,
               f"qmin={qmin.name}" if qmin else "qmin of the type", f"qmax={qmax.name}" if qmax else "qmax of the type",
               RECIP_WORDS[recip]] + (
        ["stored 1 / factor (the scale's inverse)" if store else "stored amax / qmax"] if recip == 2 else []) + (
        ["an all-zero tile: scale 1"] if zero else []) + (
        ["scales rounded up to powers of two (exp2f(ceilf(log2f)))"] if pow2 else []) + (
        ["clamped to [qmin, qmax] before the conversion"] if clamp else ["the saturating conversion alone"])
    b.support = support
    return b
