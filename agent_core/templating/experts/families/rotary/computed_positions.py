"""No positions and no cache (DeepSpeed's apply_rotary_pos_half; a head-major [batch * heads, seq, head_size] query,
the keys inside a KV cache of their own sequence length): each token's position is its index in its sequence, plus
an offset, computed in the body and fed to the angle (``_computed_positions``).

Read by sampling, as ``implicit_positions`` reads a cos index: the query's and key's indices for one thread and the
int locals that feed a sine or cosine argument, down to thread and block indices (each drawn at random, the
unknowns only an index has set to the start of a row). A local is the position where, on every sample, it is
``offset + (query index / row) % seq`` (the offset an int argument or 0, row and seq sizes the arguments make) and
the key's row (its index over a row of its own) is ``(t / seq) * key_seq + t % seq`` of the same token t = query
index / row: key_seq = seq for keys beside the query's tokens, another size for keys in a cache (KT_EXPERT_KEY_ROWS).
The position taken is the local fed by the others (``seq_idx = cur_seq_idx + seq_offset``, not ``cur_seq_idx``).
Exactly one reading must fit, else nothing is offered."""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from agent_core.templating.experts.evidence import (ArgUse, Evidence, SizeExpr, _once as _ONCE, call_arguments,
                                                    counts_of, div, feeding, flows, prod)
from agent_core.templating.experts.families.rotary.angles import _TRIG
from agent_core.templating.experts.index_reading import bare as _bare, exits, inline_moves, launch_bounds, \
    resolve as _resolve, sites as _sites, size_env, sum_text
from agent_core.templating.experts.families.rotary.indexing import _IDENT, _MEMBER


class _Computed(NamedTuple):
    """The reading: the query (in, out) and key (in, out; None: a kernel of one tensor) buffers, a token's query row ``row`` and key row ``krow``
    (values), the tokens (values, spec), the sequence length, the offset argument (or None), the key's rows a
    sequence where they differ from the query's (a KV cache; None: the same), the query heads a token has where only
    the launch's grid counts them (``(int)blockDim.y`` in the expert's block of (THREADS / heads, heads); else None)."""
    q: tuple
    k: tuple
    row: tuple
    krow: tuple
    tokens: tuple
    tokens_spec: str
    seq: SizeExpr
    offset: ArgUse | None
    key_seq: SizeExpr | None
    heads: SizeExpr | None = None  # the query heads a token has where only the launch counts them (its grid)


def _text(ev: Evidence) -> str:
    """The body as ``implicit_positions`` reads it, namespace qualifiers dropped (``rot_half::threads``) and a call
    of an object's method without arguments (``group.thread_rank()``) one opaque name, ``sizeof(T)`` another; an
    argument moved once at the top (``q += token * row;``, ``pos += token;``) read as moved where it is used
    (``inline_moves``)."""
    text = re.sub(r"\b[A-Za-z_]\w*\s*::\s*(?=[A-Za-z_])", "", inline_moves(_bare(ev), {a.name for a in ev.args},
                                                                           {a.name for a in ev.bufs()}))
    text = re.sub(r"\b([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\(\s*\)", r"kt_\1_\2", text)
    return re.sub(r"\bsizeof\s*\(\s*([A-Za-z_]\w*)\s*\)", r"kt_sizeof_\1", text)


def _index(text: str, once: dict[str, str], name: str) -> str | None:
    sites = _sites(text, name)
    if not sites:
        return None
    return _resolve(once, sum_text(sites[0]))


def _samples(ev: Evidence, exprs: list[str], bounds: list[tuple], size: int, draws: int = 400,
             guards: tuple[str, ...] = ()) -> list[tuple]:
    """Values of ``exprs`` for one thread on size set ``size``: the unknowns the last expression (the position) has
    drawn at random (fixed seed), the others (a lane's place in a row) 0, or 1 where 0 divides; only the samples
    whose first expressions stay inside their buffers (``bounds``) and that no early return (``guards``, conditions
    over the same names) ends first kept."""
    from agent_core import expr as _expr
    env = {**size_env(ev, size), **_launch_extents(ev, size)}
    try:
        names = [_expr.names(x) - set(env) for x in exprs]
        gnames = set().union(set(), *(_expr.names(g) for g in guards)) - set(env)
    except Exception:  # noqa: BLE001
        return []
    drawn, rest = sorted(names[-1]), sorted((set().union(*names) | gnames) - names[-1])
    launch = launch_bounds(ev, size)
    # a block index the position does not read is drawn too where the launch bounds it (the batch a token's
    # sequence is in: with it at 0 every token would seem to sit in one sequence)
    blocks = [n for n in rest if n.startswith("kt_blockIdx") and n in launch]
    rest = [n for n in rest if n not in blocks]
    rng = random.Random(4321 + size)
    out = []
    for _ in range(draws):
        at = dict(env)
        for n in drawn:  # below the launch's extent where the spec gives it
            at[n] = rng.randrange(launch[n] if n in launch else rng.choice((2, 8, 64, 512, 4096, 32768)))
        for n in blocks:
            at[n] = rng.randrange(launch[n])
        got = None
        for lane in (0, 1):
            at.update({n: lane for n in rest})
            try:
                got = tuple(_expr.evaluate_int(x, at) for x in exprs)
                if any(_expr.evaluate(g, at) for g in guards):
                    got = None  # the thread returns before it gets there
                break
            except Exception:  # noqa: BLE001
                continue
        if got and all(0 <= v < b[size] for v, b in zip(got, bounds)):
            out.append(got)
    return out


def _launch_extents(ev: Evidence, size: int) -> dict[str, int]:
    """The grid's and the block's extents on size set ``size`` as ``_resolve`` names them (``kt_gridDim_x``,
    ``kt_blockDim_x``): a kernel that counts its heads by its grid (``q += token * gridDim.x * head_size``)."""
    return {n.replace("blockIdx", "gridDim").replace("threadIdx", "blockDim"): v
            for n, v in launch_bounds(ev, size).items()}


_SUM_OF_TWO = re.compile(r"\(\s*([A-Za-z_][\w.]*\s*\+\s*[A-Za-z_][\w.]*)\s*\)")  # `(start_pos + s)`


def _computed_positions(ev: Evidence, pairs: list[tuple[ArgUse, ArgUse]]) -> _Computed | None:
    """The reading of a kernel without positions and cache whose body computes each token's position (module
    docstring); ``pairs`` its query and key buffers, (input, output) each (in place: the same), either order, or the
    query's alone (a kernel that rotates one tensor: InferLLM's and Koifish's ropes)."""
    if len(pairs) not in (1, 2):
        return None
    text = _text(ev)
    once = _ONCE(text)
    flow = flows(_MEMBER.sub("", ev.body), declarators=True)  # `int b = blockIdx.x, t = blockIdx.y;`: two locals,
    # neither `x` nor `y`
    fed = set().union(*(feeding(flow, args[0]) for _, args in call_arguments(ev.body, _TRIG) if args and args[0]))
    ints = [a for a in ev.ints() if a.counts]
    cands = [n for n in once if n in fed and n not in {a.name for a in ev.args}]
    # and a sum of two names written inline where a local fed to the angle is assigned (`(float)(start_pos + s)`), or
    # in a sine's or cosine's argument itself (`sincosf((start + blockIdx.x) * f, ...)`: a moved start position)
    def sums(t: str) -> list[str]:
        return [re.sub(r"\s+", " ", m.group(1)) for m in _SUM_OF_TWO.finditer(t)]
    for n in list(cands):
        for x in sums(once[n]):
            if x not in cands and re.sub(r"[\s()]+", "", once[n]) != x.replace(" ", ""):  # (not the whole of the
                # local's value: the local itself, `pos = (float)(past_len + s)`)
                cands.append(x)
    for x in (x for _, args in call_arguments(text, _TRIG) for x in sums(args[0] if args else "")):
        if x not in cands:
            cands.append(x)
    n = len(ev.spec.sizes)
    values: dict[tuple, SizeExpr] = {}
    for a in ints:
        for s in ev.sizes(a.counts):
            values.setdefault(a.counts, s)
    for a in ints:
        for b in ints:
            if a is not b:
                t = tuple(x * y for x, y in zip(a.counts, b.counts))
                if t not in values:
                    xs = ev.sizes(t)
                    if xs:
                        values[t] = xs[0]
    # a token's query row where only the launch counts its heads (ManagedLlama2's `q += token * gridDim.x *
    # head_size`): a grid extent the body reads by gridDim that no argument holds, times an argument; the expert's
    # block then holds those heads (KT_EXPERT_BLOCK_HEADS: blockDim.y)
    launch_heads: dict[tuple, SizeExpr] = {}
    for axis, g in zip("xyz", ev.spec.grid or []):
        h = counts_of(str(g), ev.spec)
        if not h or h in values or not re.search(rf"\bgridDim\s*\.\s*{axis}\b", ev.body):
            continue
        heads = SizeExpr("(int)blockDim.y", str(g), f"the launch grid's `{g}` (gridDim.{axis})")
        for a in ints:
            t = tuple(x * y for x, y in zip(h, a.counts))
            if t not in values:
                values[t] = SizeExpr(f"(int)blockDim.y * (int)({a.name})", f"({g}) * ({a.spec.value})",
                                     f"the launch grid's `{g}` * `{a.name}`")
                launch_heads[t] = heads
    offsets = [None] + [a for a in ints if all(v >= 0 for v in a.counts) and any(v > 0 for v in a.counts)]
    found = []
    for (qi, qo), (ki, ko) in ((pairs, pairs[::-1]) if len(pairs) == 2 else ((pairs[0], pairs[0]),)):
        qx, kx = _index(text, once, qi.name), _index(text, once, ki.name)
        if qx is None or kx is None:
            continue
        guards = exits(text, once, ki.name) if ki is not qi else ()  # the key's early returns (GQA's kv heads)
        for pname in cands:
            px = _resolve(once, pname)
            if px is None or not _IDENT.search(px):
                continue
            samples = [_samples(ev, [qx, kx, px], [qi.counts, ki.counts], s, guards=guards) for s in range(n)]
            if any(len(s) < 24 for s in samples):
                continue
            for row in values:
                tokens = div(qi.counts, row)
                if tokens is None:
                    continue
                ts = [[(q // row[i], k, p) for q, k, p in samples[i]] for i in range(n)]
                # the sequence length: a size the arguments make; else (none fits) one sequence of every token, whose
                # length no argument holds (a prompt's chunk at positions offset + t: llama2.cu's pos + t)
                before = len(found)
                for seq in [*values, None]:
                    if seq is None and len(found) > before:
                        continue
                    if seq is not None and div(tokens, seq) is None:
                        continue
                    seq = seq or tokens
                    for off in offsets:
                        if not all(p == (off.counts[i] if off else 0) + t % seq[i]
                                   for i in range(n) for t, _, p in ts[i]):
                            continue
                        seq_ex = values.get(seq) or SizeExpr("2147483647", f"({qi.spec.size}) / ({values[row].spec})",
                                                             "all the")
                        if len(pairs) == 1:  # the query alone: no key rows to read
                            found.append((pname, _Computed(
                                (qi, qo), None, row, (1,) * n, tokens, f"({qi.spec.size}) / ({values[row].spec})",
                                seq_ex, off, None, launch_heads.get(row))))
                            continue
                        for krow in values:
                            krows = div(ki.counts, krow)
                            if krows is None:
                                continue
                            for kseq in [*values, *([seq] if seq not in values else [])]:
                                if prod(div(tokens, seq), kseq) != krows or any(a < b for a, b in zip(kseq, seq)):
                                    continue
                                if all(k // krow[i] == t // seq[i] * kseq[i] + t % seq[i]
                                       for i in range(n) for t, k, _ in ts[i]):
                                    found.append((pname, _Computed(
                                        (qi, qo), (ki, ko), row, krow, tokens,
                                        f"({qi.spec.size}) / ({values[row].spec})", seq_ex, off,
                                        None if kseq == seq else values[kseq], launch_heads.get(row))))
    if not found:
        return None
    # both ways round where the two tensors are rotated alike (each a row a token, the same positions): the order the
    # buffers were read in (the query the one with more heads)
    first = [(p, c) for p, c in found if c.q[0] is pairs[0][0]]
    found = first or found
    # the position: the local the other fitting ones feed (the offset added last)
    names = {p for p, _ in found}
    last = [p for p in names if (names - {p}) <= feeding(flow, p)]  # (a sum: what its names are computed from)
    got = [c for p, c in found if p in last]
    return got[0] if len(last) == 1 and len(got) == 1 else None
