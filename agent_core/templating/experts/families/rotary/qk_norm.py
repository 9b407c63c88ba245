"""Qwen3's per-head q / k RMSNorm fused into the rotary (``_qk_norm``; the expert's KT_EXPERT_QK_NORM): vLLM's and
SGLang's fused_qk_norm_rope, TensorRT-LLM's fusedQKNormRope, MNN's ropeC4 (behind run-time flags).

Read from what the body computes, never from names: one reciprocal root (``rsqrtf``/``rsqrt``) of ``sum / n + eps``
(n an int argument: the head size, checked by the binder; eps a float argument, a literal, or one of two chosen with
the query), its value held by one local (perhaps ``flag ? rsqrtf(...) : 1.0f``); two float input buffers (the
weights), each element the query or key reads multiplied in place by (that local * a weight element) (``x *= r *
w[d]``: the product of the root and the weight first, one rounding at the store, the form all four use); a sum of
squares of the values read (``s += v * v``) feeding the root. Which weight, eps and flag belong to the query and which
to the key: the conditional expression that picks the query or the key (``isQ ? q : k``) and the same condition
picking the others (``isQ ? qGamma : kGamma``); one eps or one flag used for both is shared. A run-time flag is the
scalar (or the local one of two scalars the same condition picks) whose truth guards every weight multiply (an ``if``
around it, perhaps also the root's ``flag ? rsqrtf(...) : 1.0f``); the binding passes it to the expert, which checks
it at run time (nothing is assumed of the spec's values). Anything else (a weight used outside such a multiply, a
guard that is not a flag, the rounding of aiter's ``(x * r) * w`` form, the weights picked by separate code) is not
read: no binding rather than one that drops the norm.

``_row_strides``: a token's rows of the query and key as the index shows them (``token * rowStride`` with the stride
one of two int arguments the same condition picks: MNN's packed hidden size), for KT_EXPERT_TOKEN_STRIDE."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import (FLOATS, ArgUse, Evidence, additive_terms, assignments, closing,
                                                    factors, flows, index_sites, plain, statements, ternary,
                                                    unparen, value_holders)

_ROOT = re.compile(r"(?<![\w.])(?:rsqrtf|rsqrt)\(")
_FLOAT_LIT = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fF]?")
_ONE = re.compile(r"1(?:\.0*)?[fF]?|1\.")


class _Norm(NamedTuple):
    """The norm as the binder passes it: the query's and the key's weight, eps (C) and run-time flag (C, ``true``
    where there is none), the int argument the sum of squares is divided by (the head size), words."""
    q_gamma: ArgUse
    k_gamma: ArgUse
    q_eps: str
    k_eps: str
    q_flag: str
    k_flag: str
    divisor: ArgUse
    words: list[str]


def _base(term: str) -> str | None:
    """The buffer or local a term reads as it is (``w[d]``, ``(w)[d]``, ``w``), else None."""
    m = re.fullmatch(r"[(]*([A-Za-z_]\w*)[)]*(?:\[[^\[\]]*\])?[)]*", term)
    return m.group(1) if m else None


def _statements(body: str) -> list[tuple[int, str]]:
    """The body's statements (split at ``;``, ``{``, ``}``) with where each starts."""
    out, start = [], 0
    for m in re.finditer(r"[;{}]", body):
        out.append((start, body[start:m.start()]))
        start = m.end()
    return out


def _guards(body: str, at: int) -> list[str]:
    """The conditions (whitespace-free) of every ``if`` whose statement or block holds the position ``at``, and
    ``None`` for an ``else`` that follows one of those blocks is not looked at: the norm off is the plain rotation."""
    out = []
    for m in re.finditer(r"\bif\s*\(", body[:at]):
        i = closing(body, m.end())
        rest = body[i:]
        lead = len(rest) - len(rest.lstrip())
        if rest[lead:lead + 1] == "{":
            j = closing(body, i + lead + 1, "{", "}")
        else:
            j = body.find(";", i) + 1
        if i <= at < j:
            out.append(re.sub(r"\s+", "", body[m.end():i - 1]))
    return out


def _flag_of(cond: str, scalars: set[str], once: dict[str, str]) -> tuple[str, bool] | None:
    """(the name a flag condition tests, whether the norm is on where it is true): ``f``, ``!f``, ``f != 0``, ``f ==
    0``, ``f == true``, ``f == false``, with ``f`` a non-float scalar argument or a local one of two of them."""
    c = unparen(cond)
    on = True
    while c.startswith("!") and not c.startswith("!="):
        c, on = unparen(c[1:]), not on
    m = re.fullmatch(r"([A-Za-z_]\w*)(?:(!=|==)(0|1|true|false|nullptr))?", c)
    if m is None:
        return None
    if m.group(2):
        truth = m.group(3) in ("1", "true")
        on = on if (m.group(2) == "==") == truth else not on
    name = m.group(1)
    if name in scalars:
        return name, on
    t = ternary(once.get(name, ""))
    if t and t[1] in scalars and t[2] in scalars:
        return name, on
    return None


def _once(ev: Evidence) -> dict[str, str]:
    """The locals assigned exactly once (a store into one of their elements is not an assignment): name → the value,
    whitespace-free, casts and widening conversions gone."""
    seen: dict[str, list[str]] = {}
    for target, at, stmt in statements(ev.body):
        if target is None or "[" in stmt[:at]:
            continue  # a store into an element (``x[i] = ...``) is no assignment of the local
        for t, value in assignments(stmt):
            seen.setdefault(t, []).append(plain(value))
    moved = set(re.findall(r"\b([A-Za-z_]\w*)\s*(?:[-+*/%&|^]|<<|>>)=(?!=)", ev.body))
    return {n: v[0] for n, v in seen.items() if len(v) == 1 and n not in moved}


def _selector(ev: Evidence, qi: ArgUse, ki: ArgUse, once: dict[str, str]) -> tuple[str, bool] | None:
    """(the condition that picks the query or the key, whether the query is picked where it is true): a local
    pointer assigned ``c ? q : k`` (or ``c ? k : q``); None where none or two conditions disagree."""
    found = set()
    for value in once.values():
        t = ternary(value)
        if t and {t[1], t[2]} == {qi.name, ki.name}:
            found.add((t[0], t[1] == qi.name))
    return found.pop() if len(found) == 1 else None


def _pair(name: str, sel: tuple[str, bool], once: dict[str, str], ok) -> tuple[str, str] | None:
    """(the query's, the key's) of what ``name`` stands for: itself where ``ok(name)`` (shared), or the two branches
    of the conditional it is assigned once, under the selector's condition (reads of them: ``c ? a[d] : b[d]``)."""
    if ok(name):
        return name, name
    t = ternary(once.get(name, ""))
    if t is None or t[0] != sel[0]:
        return None
    a, b = _base(t[1]), _base(t[2])
    if a is None or b is None or not ok(a) or not ok(b):
        return None
    return (a, b) if sel[1] else (b, a)


def _qk_norm(ev: Evidence, qi: ArgUse, ki: ArgUse | None, q: ArgUse, k: ArgUse | None, inputs: list[ArgUse]
             ) -> tuple[_Norm, list[ArgUse]] | None:
    """The norm the body applies to each query and key head before the rotation, and the float inputs left (the
    cos/sin caches); None where the body shows no such norm or one this reading cannot tell apart."""
    if ki is None or k is None or not _ROOT.search(ev.body):
        return None
    once = _once(ev)
    sel = _selector(ev, qi, ki, once)
    if sel is None:
        return None
    flat = plain(ev.body)
    roots = {a for m in _ROOT.finditer(flat) for a in [flat[m.end():closing(flat, m.end()) - 1]]}
    if len(roots) != 1:
        return None
    arg = roots.pop()
    terms = additive_terms(arg)
    if len(terms) != 2 or any(s < 0 for s, _ in terms):
        return None
    parts = _factors_div(unparen(terms[0][1]))
    if parts is None:
        return None
    total, n = (unparen(x) for x in parts)
    ints = {a.name: a for a in ev.ints()}
    n = n if n in ints else once.get(n, "") if once.get(n, "") in ints else None
    if n is None:
        return None
    floats = {a.name for a in ev.floats()}
    eps = unparen(terms[1][1])
    if _FLOAT_LIT.fullmatch(eps):
        eps_pair = (f"(float)({eps if eps[-1] in 'fF' or 'e' in eps.lower() or '.' in eps else eps + '.0f'})",) * 2
    else:
        got = _pair(eps, sel, once, lambda x: x in floats)
        if got is None:
            return None
        eps_pair = tuple(f"(float)({x})" for x in got)
    # the one local that holds the root (perhaps behind a flag: c ? rsqrtf(...) : 1.0f)
    holders = [(t, v) for t, v in once.items() if _ROOT.search(v)]
    if len(holders) != 1:
        return None
    r, rv = holders[0]
    root_guard = None
    if not _ROOT.match(rv):
        t = ternary(rv)
        if t is None or not _ROOT.match(t[1]) or not _ONE.fullmatch(t[2]):
            return None
        root_guard = t[0]
    # the weights: each value read from the query or key multiplied in place by (r * w[d]), w[d] an element of a
    # float input (through a local pointer one of two of them, or a local holding the element read)
    cands = {a.name for a in inputs if a.dtype in FLOATS}
    qk_names = {qi.name, ki.name} | {nm for nm, src in ev.aliases.items() if src <= {qi.name, ki.name}}
    values = set()
    for nm in qk_names:
        values |= value_holders(ev, nm)[1]
    scalars = {a.name for a in ev.args if a.role == "scalar" and a.dtype not in ("f32", "f64", "f16", "bf16")}
    muls = []  # (where the multiply is, the weight factor's buffer or local)
    for at0, raw in _statements(ev.body):
        st = statements(raw)
        if len(st) != 1 or st[0][0] is None or st[0][1] <= 0 or raw[st[0][1] - 1] != "*":
            continue
        fs = [unparen(f) for f in factors(plain(raw[st[0][1] + 1:]))]
        if r not in fs:
            continue
        if len(fs) != 2 or st[0][0] not in values:
            return None  # the root another way, or not on a value read from the query or key
        w = fs[1 - fs.index(r)]
        muls.append((at0 + st[0][1], _base(w), "[" in w))
    if not muls:
        return None
    pointers = {n for n, src in ev.aliases.items() if src <= cands} | cands
    wvals = {t for t, v in once.items() if _base(v) in pointers and "[" in v}
    wvals |= {t for t, v in once.items() if (tt := ternary(v)) and _base(tt[1]) in pointers
              and _base(tt[2]) in pointers and "[" in tt[1] and "[" in tt[2]}
    if any(b not in pointers | wvals or (b in pointers) != read for _, b, read in muls):
        return None
    used = {b for _, b, _ in muls}
    # a sum of squares of the values read, feeding the root
    flow = flows(ev.body, declarators=True)
    head = _base(total)
    sums = []  # (where, the local summed into) of each ``s += v * v``
    for at0, raw in _statements(ev.body):
        mm = re.fullmatch(r"([A-Za-z_]\w*)\+=([A-Za-z_]\w*)\*\2", plain(raw))
        if mm and mm.group(2) in values:
            sums.append((at0 + raw.index("+="), mm.group(1)))
    sums = [(at, x) for at, x in sums if head is not None and x in {head} | flow.get(head, set())]
    if not sums:
        return None
    # the flag: one condition guards every weight multiply (and the root, where it has one)
    conds = set()
    for at, _, _ in muls:
        flagged = [c for c in _guards(ev.body, at) if _flag_of(c, scalars, once)]
        if len(flagged) > 1:
            return None
        conds.add(flagged[0] if flagged else None)
    if len(conds) != 1:
        return None
    cond = conds.pop()
    # the sum of squares behind no flag or behind the multiplies' own (one behind a flag the multiplies are not:
    # with the flag off they would multiply by rsqrt(eps), which the expert does not)
    for at, _ in sums:
        if any(c != cond for c in _guards(ev.body, at) if _flag_of(c, scalars, once)):
            return None
    if cond is None:
        if root_guard is not None:
            return None  # the root behind a flag, the weight always multiplied: not this convention
        flag_pair, flag_words = ("true", "true"), "always"
    else:
        name, on = _flag_of(cond, scalars, once)
        if root_guard is not None and _flag_of(root_guard, scalars, once) != (name, on):
            return None
        got = _pair(name, sel, once, lambda x: x in scalars)
        if got is None:
            return None
        flag_pair = tuple(f"({x}) != 0" if on else f"({x}) == 0" for x in got)
        flag_words = f"where {'`' + got[0] + '`' if got[0] == got[1] else '`' + got[0] + '` / `' + got[1] + '`'}" \
                     f"{'' if on else ' is false'} (checked at run time)"
    # the weights of the query and the key
    pairs = set()
    for b in used:
        if b in cands:
            return None  # a weight read directly: which part's it is would be a guess
        if b in wvals:
            t = ternary(once[b])
            got = _pair(b, sel, once, lambda x: x in cands) if t else None
            if got is None:  # a value read through a pointer one of two weights
                base = _base(once[b])
                got = _pair(base, sel, once, lambda x: x in cands) if base else None
        else:
            got = _pair(b, sel, once, lambda x: x in cands)
        if got is None or got[0] == got[1]:
            return None
        pairs.add(got)
    if len(pairs) != 1:
        return None
    qg, kg = pairs.pop()
    qg_a, kg_a = ev.arg(qg), ev.arg(kg)
    if qg_a.counts != kg_a.counts or qg_a.dtype != kg_a.dtype:
        return None
    # nothing else reads the weights (their pointers, the values read) or uses the root: only their declarations and
    # the multiplies
    keep = used | {qg, kg, r} | {nm for nm, src in ev.aliases.items() if src <= {qg, kg}}
    mul_at = {at for at, _, _ in muls}
    for at0, raw in _statements(ev.body):
        if not set(re.findall(r"[A-Za-z_]\w*", raw)) & keep:
            continue
        st = statements(raw)
        target, ai = st[0][:2] if len(st) == 1 else (None, -1)
        if target is not None and at0 + ai in mul_at:
            continue
        if target in keep - {qg, kg} and raw[ai - 1] not in "+-*/%&|^<>!=":
            continue  # the declaration of a pointer, a value or the root
        return None
    left = [a for a in inputs if a.name not in (qg, kg)]
    words = [f"q/k RMSNorm before the rotation (gamma={qg} / {kg}, eps="
             f"{eps_pair[0][8:-1]}{'' if eps_pair[0] == eps_pair[1] else ' / ' + eps_pair[1][8:-1]}, "
             f"x * (rsqrt(sum / `{n}` + eps) * gamma), {flag_words})"]
    return _Norm(qg_a, kg_a, eps_pair[0], eps_pair[1], flag_pair[0], flag_pair[1], ints[n], words), left


def _factors_div(term: str) -> tuple[str, str] | None:
    """``a / b`` at the top level of a term: (a, b); None where the term is not one quotient."""
    depth, at = 0, -1
    for i, ch in enumerate(term):
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "/" and depth == 0:
            if at >= 0:
                return None
            at = i
        elif ch in "*%" and depth == 0:
            return None
    return (term[:at], term[at + 1:]) if at > 0 else None


def _row_strides(ev: Evidence, qi: ArgUse, ki: ArgUse, q_tok: tuple, k_tok: tuple) -> tuple[str, str, str] | None:
    """(the query's token stride, the key's, words) as C where the index of the buffer picked between them multiplies
    by a local that the same condition picks from two int arguments, a token's rows on every size set (MNN's
    ``hiddenPack = isQ ? qHiddenPack : kHiddenPack``); None where the index shows no such stride."""
    once = _once(ev)
    sel = _selector(ev, qi, ki, once)
    if sel is None:
        return None
    ints = {a.name: a for a in ev.ints()}
    found = set()
    for name, src in ev.aliases.items():
        if src != {qi.name, ki.name}:
            continue
        for terms in index_sites(ev, name):
            for _, t in terms:
                for f in factors(unparen(t)):
                    got = _pair(unparen(f), sel, once, lambda x: x in ints)
                    if got and got[0] != got[1] and ints[got[0]].counts == q_tok and ints[got[1]].counts == k_tok:
                        found.add(got)
    if len(found) != 1:
        return None
    qs, ks = found.pop()
    return f"(long long)({qs})", f"(long long)({ks})", f"token rows of `{qs}` / `{ks}` elements"
