"""Rotary position embedding, applied in place to query heads (and key heads, where the kernel has them).

Evidence: an int input of ``tokens`` positions, one or two float in/out buffers of ``tokens * heads *
head_size``, one or two float inputs (the cos/sin cache). Enumerated: which int arguments are the heads and
the head size, the rotary width (an argument, or the head size), one cache [max_pos, rot_dim] (cos half then
sin half) or two caches (cos and sin, either order, rows of rot_dim / 2 or of rot_dim), NeoX pairs (i, i +
rot/2) or GPT-J pairs (2i, 2i + 1).
"""

from __future__ import annotations

import itertools
import re

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE, FLOATS, NBYTES, Evidence, SizeExpr, div


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def _heads(ev: Evidence, per_token: tuple, hs: SizeExpr, hs_fp: tuple) -> SizeExpr | None:
    nh = div(per_token, hs_fp)
    if nh is None:
        return None
    xs = [s for s in ev.sizes(nh) if s.c != hs.c]
    return xs[0] if xs else None


def enumerate_bindings(ev: Evidence, lib) -> list[Binding]:
    e = lib.get("rotary_neox")
    if e is None or ev.bufs("out"):
        return []
    pos = [a for a in ev.bufs("in") if a.dtype in ("i32", "i64")]
    io = [a for a in ev.bufs("inout", FLOATS) if a.counts]
    caches = [a for a in ev.bufs("in", FLOATS) if a.counts]
    if len(pos) != 1 or not pos[0].counts or len(io) not in (1, 2) or len(caches) not in (1, 2) or \
            len(ev.bufs()) != 1 + len(io) + len(caches):
        return []
    if len(caches) == 2 and (caches[0].counts != caches[1].counts or caches[0].dtype != caches[1].dtype):
        return []
    p = pos[0]
    tokens = p.counts
    q = max(io, key=lambda a: a.counts) if len(io) == 2 and io[0].counts != io[1].counts else io[0]
    k = next((a for a in io if a is not q), None)
    if q.dtype != (k.dtype if k else q.dtype) or caches[0].dtype not in FLOATS:
        return []
    q_tok, k_tok = div(q.counts, tokens), div(k.counts, tokens) if k else (1,) * len(tokens)
    if q_tok is None or k_tok is None:
        return []
    T, C, P = q.dtype, caches[0].dtype, p.dtype
    # head size: an int argument that divides a token's query (and key) elements, the likelier ones first
    hss = []
    for a in ev.ints():
        if a.counts and div(q_tok, a.counts) and (k is None or div(k_tok, a.counts)) and all(v > 1 for v in a.counts):
            hss.append((ev.sizes(a.counts)[0], a.counts))
    hss.sort(key=lambda h: not re.search(r"head_?(size|dim)|hs|dim", h[0].words, re.I))
    gptj_first = ev.mentions(r"\[2\*") or ev.mentions(r"\*2\+1\]") or ev.mentions(r"\*2\]")
    pairings = [1, 0] if gptj_first else [0, 1]
    out = []
    for hi, (hs, hs_fp) in enumerate(hss):
        nh = _heads(ev, q_tok, hs, hs_fp)
        kv = _heads(ev, k_tok, hs, hs_fp) if k else SizeExpr("0", "0", "none (no key)")
        if nh is None or kv is None:
            continue
        # rotary width: an int argument no wider than the head whose rows the cache holds, or the head size
        rots = []
        for a in ev.ints():
            if a.counts and all(r <= h and r % 2 == 0 for r, h in zip(a.counts, hs_fp)):
                rots.append((ev.sizes(a.counts)[0], a.counts))
        if not any(r[1] == hs_fp for r in rots):
            rots.append((hs, hs_fp))
        rots.sort(key=lambda r: (not re.search("rot", r[0].words, re.I), r[1] != hs_fp))
        for ri, (rot, rot_fp) in enumerate(rots):
            layouts = []  # (conventions, cache call args, words, max_position spec, support)
            if len(caches) == 1:
                c = caches[0]
                if div(c.counts, rot_fp) is None:
                    continue
                layouts.append(({"KT_EXPERT_CACHE": 0}, [_cast(C, c.name, True)],
                                [f"cache={c.name} [max_pos, rot_dim] (cos half, then sin half)"],
                                f"({c.spec.size}) / ({rot.spec})", 0))
            else:
                c0, c1 = caches
                orders = [(c0, c1), (c1, c0)]
                if re.search("sin", c0.name, re.I) and not re.search("sin", c1.name, re.I):
                    orders.reverse()
                for oi, (cc, ss) in enumerate(orders):
                    for si, (stride, words) in enumerate((("(rot_dim) / 2", "rot_dim / 2"), ("rot_dim", "rot_dim"))):
                        stride_fp = tuple(r // 2 for r in rot_fp) if si == 0 else rot_fp
                        if div(cc.counts, stride_fp) is None:
                            continue
                        layouts.append(({"KT_EXPERT_CACHE": 1},
                                        [_cast(C, cc.name, True), _cast(C, ss.name, True),
                                         f"({rot.c}) / 2" if si == 0 else rot.c],
                                        [f"cos={cc.name}", f"sin={ss.name}", f"rows of {words}"],
                                        f"({cc.spec.size}) / ({stride.replace('rot_dim', rot.spec)})", -oi - si))
            for li, (conv0, cache_args, cache_words, maxpos, lsup) in enumerate(layouts):
                for pi, pairing in enumerate(pairings):
                    style = "NeoX" if pairing == 0 else "GPT-J"
                    kname = f"`{k.name}`" if k else "no key"
                    b = Binding(e, 0.85, f"rotates `{q.name}` and {kname} in place by a cos/sin row of "
                                f"`{caches[0].name}` chosen by `{p.name}[token]`, pairs half of "
                                f"`{rot.words.strip('`')}` apart → rotary embedding (NeoX)" if pairing == 0 else
                                f"rotates `{q.name}` and {kname} in place by cos/sin chosen by `{p.name}[token]`, "
                                "adjacent pairs → rotary embedding (GPT-J)", ev.kernel.name)
                    b.sizes = {"tokens": p.spec.size, "num_heads": nh.spec, "num_kv_heads": kv.spec,
                               "head_size": hs.spec, "rot_dim": rot.spec, "max_position": maxpos}
                    b.conventions = {**conv0, "KT_EXPERT_PAIRING": pairing}
                    b.template_args = [CTYPE[P], CTYPE[T], CTYPE[C]]
                    b.call_args = [_cast(P, p.name, True), _cast(T, q.name, False),
                                   _cast(T, k.name, False) if k else f"({CTYPE[T]}*)nullptr",
                                   *cache_args, rot.c, nh.c, kv.c, hs.c]
                    b.consts = {"ESIZE": NBYTES[T], "CSIZE": NBYTES[C]}
                    b.words = [f"positions={p.name}", f"query={q.name}", f"key={k.name}" if k else "no key",
                               *cache_words, f"rot_dim={rot.words}", f"num_heads={nh.words}",
                               f"num_kv_heads={kv.words}", f"head_size={hs.words}", f"{style} pairs", "in place"]
                    b.support = 20 - 3 * hi - 2 * ri + lsup - pi
                    out.append(b)
    return out
