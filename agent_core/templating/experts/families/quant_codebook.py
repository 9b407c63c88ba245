"""Blockwise 4-bit codebook quantization (bitsandbytes' quantize_4bit: NF4 and FP4), a convention of the group
quantization expert (KT_EXPERT_CODEBOOK).

Evidence: one float input the body reads, two outputs it writes: one byte buffer of half the input's count rounded up
(two codes a byte) and one fp32 buffer of one value per group of ``G`` consecutive values of the flat input (the last
group may be short: cdiv(n, G) values); an int argument holding the input's count; a helper the kernel calls that maps
one float value to a code of at most 4 bits through comparisons with constants (``evidence.decisions``: its thresholds,
the code of each interval and of NaN read by running it, whatever it is called; every call of such a helper the same
step function); the value stored per group fed by an absolute value (the absmax), never compared with 0 (a kernel that
treats an all-zero group apart is not this convention: the expert's all-zero group codes 0 * (1 / 0) as the kernel's
helper codes NaN).

Enumerated: the group size (an int argument with cdiv(n, G) values stored, else the one even constant the counts allow,
the instantiation's own first), the nibble order (the even element in the high nibble, bitsandbytes' CUDA kernels, or in
the low one, its CPU / XPU / HPU backends: first the one where the value shifted by 4 is not read one element further,
``+1``), and the value coded: x * (1 / absmax) (first where the helper's argument is a product) or x / absmax.
"""

from __future__ import annotations

import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, Decision, Evidence, SizeExpr, _expand_locals,
                                                    _once, assignments, decisions, feeding, flows, uncast, unparen)

ABS_CALLS = {"fabsf", "fabs", "abs", "__habs", "__habs2"}
ORDERS = {1: "the even element in the high nibble", 2: "the even element in the low nibble"}
RECIPS = {1: "coded x * (1 / absmax)", 0: "coded x / absmax"}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _float_text(v: float) -> str:
    """The shortest decimal float literal (``f`` suffix) that is the float32 value ``v`` (checked by rounding it back
    as a compiler does: once, exactly)."""
    from agent_core.templating.experts.evidence import f32_of_text
    if v == 0:
        return "0.f"
    for p in range(6, 18):
        t = f"{v:.{p}g}"
        if f32_of_text(t) == v:
            break
    if "e" not in t and "." not in t:
        t += "."
    return t + "f"


def _known(d: Decision) -> str:
    """The codebook's name where its values say it (within 1e-6 of bitsandbytes' tables), else what it is."""
    nf4 = [-0.8480964, -0.6106329, -0.4599953, -0.3396794, -0.2346074, -0.1379117, -0.0455250, 0.0397901, 0.1202552,
           0.2035213, 0.2920138, 0.3893125, 0.5016634, 0.6427869, 0.8614784]
    fp4 = [-0.8333333, -0.583333, -0.4166667, -0.29166667, -0.20833333, -0.0859375, -0.00260417, 0.0, 0.00260417,
           0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333]
    ts = [t for t, _ in d.thresholds]
    if len(ts) == 15 and all(abs(a - b) < 1e-6 for a, b in zip(ts, nf4)) and d.codes == list(range(16)):
        return "NF4"
    if len(ts) == 15 and all(abs(a - b) < 1e-6 for a, b in zip(ts, fp4)) and d.codes[8:] == [0, 1, 6, 7, 4, 5, 2, 3]:
        return "FP4 (sign and magnitude)"
    return f"a 4-bit codebook of {len(ts)} thresholds"


def _group_sizes(ev: Evidence, n_counts: tuple, s_counts: tuple) -> list[SizeExpr]:
    """The group size G with cdiv(n, G) = the values stored on every size set, G even: an int argument that holds it,
    else one constant (the instantiation's template arguments or the file's constants first, then a power of two,
    then the least)."""
    out = [SizeExpr(f"(int)({a.name})", str(a.spec.value), f"`{a.name}`") for a in ev.ints()
           if a.counts and all(g and g > 0 and g % 2 == 0 and _cdiv(n, g) == s
                               for n, g, s in zip(n_counts, a.counts, s_counts))]
    lo = max(_cdiv(n, s) for n, s in zip(n_counts, s_counts) if s > 0) if all(s > 0 for s in s_counts) else None
    if lo is None:
        return out
    hi = min((n - 1) // (s - 1) if s > 1 else 1 << 40 for n, s in zip(n_counts, s_counts))
    if lo > hi:
        return out
    named = set()
    for a in ev.spec.template_args or []:
        if re.fullmatch(r"\d+", str(a).strip()):
            named.add(int(str(a).strip()))
    named |= {int(v) for v in ev.constants.values() if float(v).is_integer() and v > 0}
    cands = sorted({g for g in named if lo <= g <= hi and g % 2 == 0})
    if not cands:
        cands = [1 << k for k in range(1, 31) if lo <= 1 << k <= hi]
    if not cands and hi - lo < 4096:
        cands = [g for g in range(lo, hi + 1) if g % 2 == 0][:1]
    out += [SizeExpr(str(cands[0]), str(cands[0]), f"the constant {cands[0]}")] if cands else []
    return out


def _stored_absmax(ev: Evidence, sc) -> bool:
    """Whether what the body writes to ``sc`` is the group's absmax itself: a local (or an element of one) fed by an
    absolute value and never set to a product or a quotient (a scale absmax / qmax, a reciprocal), which the body
    never compares with 0 (an all-zero group treated apart)."""
    flow = flows(ev.body)
    writes = [unparen(uncast(w)) for w in re.findall(rf"\b{re.escape(sc.name)}\)?\[[^\]]*\]=(?!=)([^;]*)", ev.flat)]
    if not writes or not all(re.fullmatch(r"[A-Za-z_][\w.]*(?:\[[^\]]*\])?", w) and feeding(flow, w) & ABS_CALLS
                             for w in writes):
        return False
    names = {w.split("[")[0] for w in writes}
    if any(t.split("[")[0] in names and _top_operator(re.sub(r"\s+", "", v)) for t, v in assignments(ev.body)):
        return False
    for n in names:
        v = re.escape(n)
        zero = r"\(?0(?:\.0*)?[fF]?\)?(?![\w.])"
        if re.search(rf"(?<![\w.*/+\-]){v}\)?(?:==|!=|>=|<=|>|<){zero}|(?<![\w.])0(?:\.0*)?[fF]?(?:==|!=|<|>|<=|>=)"
                     rf"\(?{v}(?![\w\[])|(?<![\w.*/+\-]){v}\)?\?", ev.flat):
            return False
    return True


def _low_first(ev: Evidence) -> bool:
    """Whether the code shifted up by 4 is that of the element one further (``c0 | (c1 << 4)``, ``x[2 * i + 1]``): the
    even element in the low nibble."""
    once = _once(uncast(ev.body))
    for m in re.finditer(r"<<4(?!\d)", ev.flat):
        i = m.start()
        j = i
        if ev.flat[i - 1:i] == ")":
            depth = 0
            while j > 0:
                j -= 1
                depth += (ev.flat[j] == ")") - (ev.flat[j] == "(")
                if depth == 0:
                    break
            k = re.search(r"[\w.]*$", ev.flat[:j])
            operand = ev.flat[k.start():i] if k else ev.flat[j:i]
        else:
            k = re.search(r"[\w.]+(?:\[[^\]]*\])?$", ev.flat[:i])
            operand = k.group(0) if k else ""
        if re.search(r"\+1(?![\d.])", re.sub(r"\s+", "", _expand_locals(operand, once))):
            return True
    return False


def _top_operator(text: str) -> str | None:
    """The last ``*`` or ``/`` of ``text`` outside parentheses and brackets (its outer parentheses dropped): how the
    value coded is made."""
    t = text
    while t.startswith("(") and t.endswith(")"):
        depth = 0
        for i, ch in enumerate(t):
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and i < len(t) - 1:
                break
        else:
            t = t[1:-1]
            continue
        break
    depth, op = 0, None
    for ch in t:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch in "*/" and depth == 0:
            op = ch
    return op


def codebook_bindings(ev: Evidence, e) -> list[Binding]:
    if e is None or "KT_EXPERT_CODEBOOK" not in e.conventions:
        return []
    ins = [a for a in ev.bufs("in", FLOATS) if a.read]
    outs = [a for a in ev.bufs("out") if a.written]
    q = [a for a in outs if a.dtype == "u8"]
    sc = [a for a in outs if a.dtype == "f32"]
    if len(ins) != 1 or len(q) != 1 or len(sc) != 1 or len(outs) != 2:
        return []
    x, q, sc = ins[0], q[0], sc[0]
    if not x.counts or not q.counts or not sc.counts or q.counts != tuple(_cdiv(v, 2) for v in x.counts):
        return []
    ns = [s for s in ev.sizes(x.counts) if not s.c[0].isdigit()]
    if not ns:
        return []
    ds = [d for d in decisions(ev) if len(d.thresholds) <= 15 and len(set(d.codes)) >= 3
          and max(d.codes + [d.nan_code]) <= 15]
    if not ds or any((d.thresholds, d.codes, d.nan_code) != (ds[0].thresholds, ds[0].codes, ds[0].nan_code)
                     for d in ds):
        return []
    if any(re.search(r"\b(?:fminf|fmaxf|fmin|fmax|min|max|clamp|__saturatef)\(", d.source) for d in ds):
        return []  # the value clamped before it is coded (NaN clamped too): not the expert's coding
    if not _stored_absmax(ev, sc):
        return []
    groups = _group_sizes(ev, x.counts, sc.counts)
    if not groups:
        return []
    d = ds[0]
    # the 15 thresholds ascending, padded with the largest float passed at > (only +inf passes it: the top code)
    ts = d.thresholds + [(3.4028234663852886e38, False)] * (15 - len(d.thresholds))
    codes = d.codes + [d.codes[-1]] * (16 - len(d.codes))
    defines = {"KT_CODEBOOK_THRESHOLDS": ", ".join(d.literals.get(t) or _float_text(t) for t, _ in ts),
               "KT_CODEBOOK_GE": sum(1 << k for k, (_, ge) in enumerate(ts) if ge),
               "KT_CODEBOOK_CODES": ", ".join(f"{c}u" for c in codes),
               "KT_CODEBOOK_NAN": d.nan_code}
    n = ns[0]
    n_c = n.c.replace("(int)(", "(long long)(")
    orders = [2, 1] if _low_first(ev) else [1, 2]
    # how the value coded is made: the helper's argument, through the locals it names (`lo = x[i] * inv`)
    made = re.sub(r"\s+", "", _expand_locals(d.source, _once(uncast(ev.body))))
    recips = [0, 1] if _top_operator(made) == "/" else [1, 0]
    name = _known(d)
    out = []
    for gi, gs in enumerate(groups[:2]):
        rows = f"(int)((({n_c}) + ({gs.c}) - 1) / ({gs.c}))"
        for oi, order in enumerate(orders):
            for ri, recip in enumerate(recips):
                b = Binding(e, 0.85, f"{name}: each value's code by comparisons with constants ({len(d.thresholds)} "
                            f"thresholds), two codes a byte, one fp32 absmax per group of `{gs.words.strip('`')}` "
                            "consecutive values of the flat input → blockwise codebook quantization", ev.kernel.name)
                b.sizes = {"group_size": gs.spec, "rows": sc.spec.size}
                b.template_args = [CTYPE[x.dtype]]
                b.call_args = [f"(const {CTYPE[x.dtype]}*)({x.name})", f"(uint8_t*)({q.name})", f"(float*)({sc.name})",
                               gs.c, rows, n_c]
                b.defines = dict(defines)
                b.conventions = {"KT_EXPERT_CODEBOOK": order, "KT_EXPERT_SCALE_RECIP": recip}
                b.fixed = {"VEC": [v for v in e.params["VEC"].values if v >= 2]}
                b.consts = {"ESIZE": NBYTES[x.dtype]}
                b.words = [f"x={x.name}", f"q={q.name} ({name} codes, two a byte, {ORDERS[order]})",
                           f"scales={sc.name} (the fp32 absmax of each group)", f"group_size={gs.words}",
                           f"n={n.words}", RECIPS[recip]]
                b.support = 30 - 4 * gi - 2 * oi - ri
                out.append(b)
    return out
