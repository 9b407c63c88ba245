"""Query and key as strided views of their rotary channels (DeepSeek MLA's q_pe and k_pe): the uniform offset the
kernel adds to a buffer (``_offset``) and the head layouts it gives (``_views``)."""

from __future__ import annotations

import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import ArgUse, Evidence, SizeExpr, div, offset_values, pointer_offsets
from agent_core.templating.experts.families.rotary.buffers import _heads, _rotary_widths
from agent_core.templating.experts.families.rotary.indexing import _head_sizes_first
from agent_core.templating.experts.index_reading import index_strides as _index_strides


class _View(NamedTuple):
    """Query and key as strided views of their rotary channels (vLLM's rotary over query_stride / key_stride /
    head_stride; DeepSeek MLA's q_pe = q[..., qk_nope_head_dim:] and k_pe = kv_a[..., kv_lora_rank:], as vLLM and
    SGLang rotate them in place): each pointer moved by the offset the kernel adds to it (None: none), the token
    strides in C (long long), and words."""
    q_off: SizeExpr | None
    k_off: SizeExpr | None
    q_stride: str
    k_stride: str
    words: list[str]


def _offset(ev: Evidence, buf: ArgUse) -> tuple[tuple, SizeExpr] | None:
    """The uniform offset the kernel adds to a buffer wherever it indexes it (``pointer_offsets``), on every size set
    and as C, spec and words; None when it adds none."""
    terms = pointer_offsets(ev, buf.name)
    vals = offset_values(ev, terms) if terms else None
    if not vals or not any(vals):
        return None
    ints = {a.name: a for a in ev.ints()}

    def text(form) -> str:
        out = ""
        for sign, t in terms:
            t = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: form(m.group(0)), t)
            out += ("-" if sign < 0 else "") + t if not out else (" - " if sign < 0 else " + ") + t
        return f"({out})"

    c = text(lambda n: f"(long long)({n})" if n in ints else str(int(ev.constants[n])))
    spec = text(lambda n: f"({ints[n].spec.value})" if n in ints else str(int(ev.constants[n])))
    words = text(lambda n: n)[1:-1]
    return vals, SizeExpr(c, spec, f"`{words}`")


def _long(c: str) -> str:
    return re.sub(r"\(int\)\((\w+)\)", r"(long long)(\1)", c)


def _views(ev: Evidence, q: ArgUse, k: ArgUse | None, q_tok: tuple, k_tok: tuple
           ) -> list[tuple[SizeExpr, tuple, SizeExpr, SizeExpr, list, _View]]:
    """The head layouts of a kernel that rotates strided views in place (DeepSeek MLA, partial rotary of each head's
    tail): its index arithmetic adds a uniform offset (an int argument, a difference of two, a constant of the file)
    to the query's head base, or to the key's row base. The query's rotary channels are then the tail of each head
    (rot_dim = head_size - offset); the key is one head at its offset into rows of a stride of their own (k_pe inside
    kv_a), or heads like the query's where it has the same offset and a whole number of them. (head size, its
    values, q heads, kv heads, rotary widths, the view)."""
    qo, ko = _offset(ev, q), _offset(ev, k) if k else None
    if qo is None and ko is None:
        return _strided_rows(ev, q, k, q_tok)
    if (qo and any(v <= 0 for v in qo[0])) or (ko and any(v < 0 for v in ko[0])):
        return []  # no offset, or one that is not an offset into every size set's rows
    q_off = qo[0] if qo else (0,) * len(q_tok)
    k_off = ko[0] if ko else (0,) * len(q_tok)
    hss = []
    for a in ev.ints():
        if a.counts and div(q_tok, a.counts) and all(h > max(o, 1) for h, o in zip(a.counts, q_off)):
            hss.append((ev.sizes(a.counts)[0], a.counts))
    for a in ev.ints():  # a head size the kernel has at compile time: a token's elements over a head-count argument
        c = div(q_tok, a.counts) if a.counts else None
        if c and len(set(c)) == 1 and c[0] > max(2, *q_off) and all(h[1] != c for h in hss):
            hss.append((SizeExpr(str(c[0]), str(c[0]), f"the constant {c[0]}"), c))
    # the head size the query's index multiplies first (its head stride), then in the arguments' order
    _head_sizes_first(ev, hss, q, k, q_tok, k_tok)
    q_stride = next((f"(long long)({a.name})" for a in ev.ints() if a.counts == q_tok), None)
    k_stride = None
    if k:
        ks = ev.sizes(k_tok)
        if not ks:
            return []
        k_stride = _long(ks[0].c) if ks[0].c.startswith("(int)") else f"(long long)({ks[0].c})"
    out = []
    for hs, hs_fp in hss:
        nh = _heads(ev, q_tok, hs, hs_fp)
        if nh is None:
            continue
        if qo:  # the tail of each head
            rot_fp = tuple(h - o for h, o in zip(hs_fp, q_off))
            if any(r % 2 for r in rot_fp):
                continue
            held = [s for s in ev.sizes(rot_fp) if re.fullmatch(r"\(int\)\(\w+\)", s.c) or s.c.isdigit()]
            rot = held[0] if held else SizeExpr(f"(int)({hs.c}) - (int){qo[1].c}", f"({hs.spec}) - {qo[1].spec}",
                                                f"`{hs.words.strip('`')} - {qo[1].words.strip('`')}`")
            rots = [(rot, rot_fp)]
        else:
            rots = _rotary_widths(ev, hs, hs_fp)
        words = [f"query rotary channels from {qo[1].words} to the end of each head" if qo else
                 "query rotary channels at the start of each head"]
        if k is None:
            kv = SizeExpr("0", "0", "none (no key)")
        elif k_off == q_off and div(k_tok, hs_fp):
            kv = _heads(ev, k_tok, hs, hs_fp) or SizeExpr("1", "1", "1")
            words.append(f"key heads like the query's, rows of {ev.sizes(k_tok)[0].words}")
        else:  # one head (k_pe) at its offset into each row of the key's own stride
            rots = [r for r in rots if all(o + v <= t for o, v, t in zip(k_off, r[1], k_tok))]
            kv = SizeExpr("1", "1", f"one head (`{k.name}` rows of {ev.sizes(k_tok)[0].words})")
            words.append(f"key rotary channels {'from ' + ko[1].words if ko else 'at the start'} of each row of "
                         f"{ev.sizes(k_tok)[0].words}")
        if not rots:
            continue
        words.append("strided views of the rotary channels (MLA's q_pe and k_pe)")
        view = _View(qo[1] if qo else None, ko[1] if ko else None,
                     q_stride or f"(long long)({nh.c}) * ({hs.c})", k_stride or "0", words)
        out.append((hs, hs_fp, nh, kv, rots, view))
    return out


def _strided_rows(ev: Evidence, q: ArgUse, k: ArgUse | None, q_tok: tuple
                  ) -> list[tuple[SizeExpr, tuple, SizeExpr, SizeExpr, list, _View]]:
    """The head layouts of a query rotated in place as a strided view of fewer heads than its rows hold, with no
    offset and no key (LoongServe's rope over the q slice of a fused qkv row: ``token * x_stride_0 + head *
    x_stride_1``, ``num_heads`` an argument): the token stride an int argument that holds a token's elements and that
    the query's index multiplies a varying term by, the heads an int argument that gives fewer heads of the head size
    than that stride holds on some size set (and no more on any; not 1 on every size set: a unit stride). The heads
    past them are left as they are."""
    if k is not None:
        return []
    strides = _index_strides(ev, q.name, True)
    row = next((a for a in ev.ints() if a.counts == q_tok and a.counts in strides), None)
    if row is None:
        return []
    hss = [(ev.sizes(a.counts)[0], a.counts) for a in ev.ints()
           if a.counts and div(q_tok, a.counts) and a.counts in strides and all(h > 1 for h in a.counts)]
    _head_sizes_first(ev, hss, q, None, q_tok, q_tok)
    out = []
    for hs, hs_fp in hss:
        rots = _rotary_widths(ev, hs, hs_fp)
        for a in ev.ints():
            if not a.counts or a is row or any(c < 1 or c * h > t for c, h, t in zip(a.counts, hs_fp, q_tok)) \
                    or all(c * h == t for c, h, t in zip(a.counts, hs_fp, q_tok)) or all(c == 1 for c in a.counts):
                continue
            nh = ev.sizes(a.counts)[0]
            words = [f"query rows {ev.sizes(q_tok)[0].words} apart, the first {nh.words} heads of each rotated, "
                     "the rest untouched"]
            out.append((hs, hs_fp, nh, SizeExpr("0", "0", "none (no key)"), rots,
                        _View(None, None, f"(long long)({row.name})", "0", words)))
    return out
