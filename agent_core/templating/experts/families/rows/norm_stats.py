"""Norms that also store one fp32 value per row for the backward pass, as training code bases' kernels do: RMSNorm
its reciprocal RMS (Transformer Engine's rsigma, Apex's invvar: ``_rms_norm_stats``), LayerNorm its mean and either
the reciprocal standard deviation or (PaddlePaddle) the variance itself (``_layer_norm_stats``, for the plain
LayerNorm). Which one is read from what the kernel stores: a value computed from a root is the reciprocal; a value
the root's argument adds eps to is the variance."""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import (CTYPE, FLOATS, NBYTES, ArgUse, Evidence, assignments, closing, div,
                                                    feeding, flows, statements)
from agent_core.templating.experts.families.rows.common import ROOTS, _cast, _hidden_candidates, _rows
from agent_core.templating.experts.families.rows.norm_conventions import (_eps_candidates, _flagged_offsets,
                                                                          _norm_conventions)
from agent_core.templating.experts.library import Expert


_SQRT_CALL = re.compile(r"\b(\w*sqrt\w*)\s*\(")
_RECIP_ROOT = re.compile(r"rsqrt|(?<![\w.])1(?:\.0*)?[fF]?/\(?(?:\w*sqrt)")


def _stat_store(ev: Evidence, name: str) -> tuple[str, set[str]] | None:
    """The value the kernel stores to ``name[...]`` (text) and the locals a chained assignment also gives it
    (``var[i] = var_share = ...``); None when the body stores it nowhere (or only by a compound assignment)."""
    for _, at, stmt in statements(ev.body):
        if at <= 0 or stmt[at - 1] in "+-*/%&|^<>" \
                or not re.search(rf"\b{re.escape(name)}\)?\s*\[[^\]]*\]\s*$", stmt[:at]):  # `(var)[i]`: a helper's
            continue
        value, aliases = stmt[at + 1:], set()
        while (m := re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", value)) is not None:
            aliases.add(m.group(1))
            value = value[m.end():]
        return value, aliases
    return None


def _stat_definition(ev: Evidence, value: str) -> str:
    """The stored value's text, a local it names alone replaced by what it is assigned (the last such)."""
    v = value.strip()
    if re.fullmatch(r"[A-Za-z_]\w*", v):
        defs = [val for t, val in assignments(ev.body) if t == v]
        if defs:
            return defs[-1]
    return v


def _stat_is_reciprocal_root(ev: Evidence, name: str) -> bool:
    """The value stored to ``name`` is computed from a reciprocal root (``rsqrtf(ms + eps)``, ``1.f / sqrtf(...)``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    value, _ = st
    flow = flows(ev.body)
    texts = [re.sub(r"\s+", "", t) for t in [value] + [val for t, val in assignments(ev.body)
                                                        if t in feeding(flow, value)]]
    if any(_RECIP_ROOT.search(t) for t in texts):
        return True
    # one over a local a root computes (rms = sqrtf(ms + eps); inv = 1.f / rms)
    return any("sqrt" in n for t in texts for m in re.finditer(r"(?<![\w.])1(?:\.0*)?[fF]?/\(?([A-Za-z_]\w*)", t)
               for n in feeding(flow, m.group(1)))


def _stat_is_variance(ev: Evidence, name: str) -> bool:
    """The value stored to ``name`` is the variance: computed from no root, and what a root's argument adds eps to
    (``var[row] = var_share = ...; rsqrt(var_share + eps)``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    value, aliases = st
    if any("sqrt" in n for n in feeding(flows(ev.body), value)) or _SQRT_CALL.search(value):
        return False
    names = set(aliases)
    if re.fullmatch(r"\s*[A-Za-z_]\w*\s*", value):
        names.add(value.strip())
    flat_value = re.sub(r"\s+", "", value)
    for m in _SQRT_CALL.finditer(ev.body):
        arg = re.sub(r"\s+", "", ev.body[m.end():closing(ev.body, m.end()) - 1])
        if "+" not in arg:
            continue
        if names & set(re.findall(r"\b[A-Za-z_]\w*\b", arg)) or (len(flat_value) > 3 and flat_value in arg):
            return True
    return False


def _one_pass_variance(ev: Evidence, name: str) -> bool:
    """The stored variance is mean(x^2) - mean^2: its expression subtracts a square last (``... - m * m``)."""
    st = _stat_store(ev, name)
    if st is None:
        return False
    flat = re.sub(r"\s+", "", _stat_definition(ev, st[0]))
    return re.search(r"-\(?([A-Za-z_][\w.]*)\)?\*\(?\1\)?$", flat) is not None


def _layer_norm_stats(ev: Evidence, st: list[ArgUse], b: Binding) -> dict:
    """The statistics conventions of a LayerNorm binding whose per-row outputs are ``st`` (mean first): the second
    one the variance where the kernel stores that (KT_EXPERT_STATS_VAR, its words say var=), computed in one pass
    where the stored expression shows it (KT_EXPERT_VAR_ONEPASS); else nothing (1 / sqrt(var + eps))."""
    if not st or any(_stat_is_reciprocal_root(ev, a.name) for a in st) \
            or not any(_stat_is_variance(ev, a.name) for a in st):
        return {}
    b.words = [f"var={st[1].name}" if w == f"rstd={st[1].name}" else w for w in b.words]
    conv = {"KT_EXPERT_STATS_VAR": 1}
    if _stat_is_variance(ev, st[1].name) and _one_pass_variance(ev, st[1].name):
        conv["KT_EXPERT_VAR_ONEPASS"] = 1
        b.words.append("variance as mean(x^2) - mean^2")
    return conv


def _rms_norm_stats(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    """RMSNorm that also stores each row's reciprocal RMS (fp32, one per row) for the backward pass: one row input,
    one row output of its type, one weight, the statistic an fp32 output the rows' count long whose stored value
    comes from a reciprocal root (KT_EXPERT_STATS). The weight possibly offset by 1 where a flag says so."""
    e = lib.get("rms_norm")
    if e is None or "KT_EXPERT_STATS" not in e.conventions or not ev.has(*ROOTS) \
            or any(a.dtype not in FLOATS for a in ev.bufs()):
        return []
    sized = [a for a in ev.bufs() if a.counts]
    if len(sized) != len(ev.bufs()) or not sized:
        return []
    big = max(a.counts for a in sized)
    main = [a for a in sized if a.counts == big]
    in_main = [a for a in main if a.role == "in"]
    out_main = [a for a in main if a.role == "out"]
    small = [a for a in ev.bufs("in") if a.counts != big]
    stats = [a for a in ev.bufs("out", ("f32",)) if a.counts != big]
    if len(in_main) != 1 or len(out_main) != 1 or len(main) != 2 or in_main[0].dtype != out_main[0].dtype \
            or len(small) != 1 or len(stats) != 1 or len(small) + len(stats) + 2 != len(ev.bufs()):
        return []
    x, o, w, st = in_main[0], out_main[0], small[0], stats[0]
    if not _stat_is_reciprocal_root(ev, st.name):
        return []
    T, W = x.dtype, w.dtype
    out: list[Binding] = []
    for hidden, hfp in _hidden_candidates(ev, big, small):
        rows_fp = div(big, hfp)
        if rows_fp != st.counts:
            continue
        hname = hidden.words.strip("`")
        offsets = _flagged_offsets(ev, e, small)
        for ei, (eps_c, eps_words, eps_support) in enumerate(_eps_candidates(ev)):
            for (conv, conv_words, conv_support), (off_c, off_words, off_support) in itertools.product(
                    _norm_conventions(ev, e, T), offsets):
                if off_c == eps_c:
                    continue
                b = Binding(e, 0.9, f"reads rows of `{hname}` elements, {ev.reduction_words()}, rsqrtf, one weight "
                            f"of `{hname}`, each row's reciprocal RMS stored to `{st.name}` → RMSNorm with its "
                            "statistic", ev.kernel.name)
                b.sizes["hidden"] = hidden.spec
                b.words += [f"out={o.name}", f"x={x.name}", f"weight={w.name}", f"rstd={st.name}",
                            f"hidden={hidden.words}", eps_words]
                rows = _rows(ev, rows_fp, f"({x.spec.size}) / ({hidden.spec})", hidden, b)
                b.words += conv_words + ([off_words] if off_c else [])
                b.template_args = [CTYPE[T], CTYPE[W]]
                b.call_args = [_cast(T, o.name, False), _cast(T, x.name, True), _cast(W, w.name, True), eps_c, rows,
                               hidden.c, f"(float*)({st.name})"] + ([off_c] if off_c else [])
                b.consts = {"ESIZE": max(NBYTES[T], NBYTES[W])}
                b.conventions = dict(conv, KT_EXPERT_STATS=1)
                if off_c:
                    b.conventions["KT_EXPERT_WEIGHT_OFFSET"] = 1
                b.support = 10 + 2 * ev.uses(hidden) - ei + eps_support + conv_support + off_support
                out.append(b)
    return out
