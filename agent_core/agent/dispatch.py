"""Per-shape dispatch: the fastest verified configuration for each regime of problem sizes.

A round's search ranks configurations by the geometric mean over the size sets, so its winner is the best
single compromise: a configuration that is clearly faster where rows are few, or where the row length rules
out the winner's vector width, loses there. Every configuration the search verified was verified on every
size set, so any of them may serve any size. ``choose`` keeps, for each size set where another verified
configuration beats the winner by at least MIN_GAIN, that configuration, and finds the rule that sends each
size set to its configuration: thresholds on one size name (``tokens <= 72``), halfway (geometrically)
between the measured values on either side. The rule is what the tuned rewrite writes at the launch site
(agent_core.apply), so it is also what the user reads and may edit.

``confirm`` times every configuration of a dispatch interleaved with the original (the figures a report
quotes) and gives back to the winner every size set where the confirmation does not keep a gain of
CONFIRM_GAIN. Then no regression: a size set whose configuration is not faster than the original beyond the
measured noise (``faster``: by more than ``margin``) is served by the original kernel itself, unchanged: the
dispatch's ``ORIGINAL`` entry. ``single`` is the dispatch of the winner alone (what is confirmed when no other
configuration gains), ``original_only`` the answer where one configuration would be slower somewhere and none
may be written per shape. Nothing here runs code: the caller passes the measuring function.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Callable

from agent_core.model import KerntuneError, Timing, params_key, params_words

MIN_GAIN = 0.05  # a size set gets its own configuration only where that is at least 5% faster (search figures)
CONFIRM_GAIN = 0.01  # ... and still at least 1% faster when timed interleaved with the original
TIE = 0.01  # configurations within 1% of the fastest on a size set count as equally fast there
MAX_ENTRIES = 4  # configurations in one dispatch: each becomes a kernel in the user's file
NOISE_FLOOR = 0.01  # a size set counts as faster (or slower) than the original only beyond 1% ...
# ... or beyond the timings' own spread where that is wider (``margin``)
ORIGINAL = "original"  # the template hash (and origin) of the entry that is the user's original kernel, unchanged


@dataclass
class Candidate:
    """One verified configuration with its times on every size set of the spec (from one tuning session)."""
    template_hash: str
    origin: str
    params: dict[str, int]
    us: list[float]  # median time per size set
    original_us: list[float]  # the original's median per size set, timed in the same session

    @property
    def key(self) -> tuple[str, str]:
        return self.template_hash, params_key(self.params)

    @property
    def ratio(self) -> list[float]:
        """Variant time / original time per size set (lower is better): comparable across sessions."""
        return [u / o for u, o in zip(self.us, self.original_us)]


@dataclass
class Entry:
    """One configuration of a dispatch: the template it instantiates and its parameter values; or (template hash
    ``ORIGINAL``) the user's original kernel as it is, its params the values of its own tunables."""
    template_hash: str
    origin: str
    params: dict[str, int]

    @property
    def key(self) -> tuple[str, str]:
        return self.template_hash, params_key(self.params)

    @property
    def is_original(self) -> bool:
        return self.template_hash == ORIGINAL


def original_entry(params: dict[str, int] | None = None) -> Entry:
    """The dispatch entry that is the original kernel (``params``: its own tunables' values, for the words)."""
    return Entry(ORIGINAL, ORIGINAL, dict(params or {}))


# --------------------------------------------------------------------------------------------- noise
def margin(original: Timing, variant: Timing) -> float:
    """How much faster than the original a configuration must be on a size set to count as faster there (and how
    much slower to count as slower): NOISE_FLOOR, or, where the two timings spread more, half the original's
    interquartile range plus half the variant's, each relative to its median (beyond it, the variant's upper
    quartile lies below the original's lower quartile)."""
    spread = 0.0
    for t in (original, variant):
        if t.median_us > 0 and t.iqr_us is not None and math.isfinite(t.iqr_us):
            spread += 0.5 * t.iqr_us / t.median_us
    return max(NOISE_FLOOR, spread)


def faster(original: Timing, variant: Timing) -> bool:
    """The variant beats the original beyond the measured noise (``margin``)."""
    return variant.median_us * (1 + margin(original, variant)) < original.median_us


def slower(original: Timing, variant: Timing) -> bool:
    """The variant loses to the original beyond the measured noise (``margin``)."""
    return variant.median_us > original.median_us * (1 + margin(original, variant))


def input_value(name: str, sizes: dict[str, int]) -> int:
    """The value of a dispatch input (a size name, or an expression of size names such as ``rows * cols``: what a
    launch passes where it does not pass the sizes themselves) for one size set."""
    v = sizes.get(name)
    if v is not None:
        return v
    from agent_core import expr
    try:
        return expr.evaluate_int(name, sizes)
    except expr.ExprError:
        raise KerntuneError(f"the dispatch reads the size `{name}`, which this size set does not give") from None


@dataclass
class Bound:
    """``above < name <= upto`` (either side may be open); ``name`` is a size name or an expression of them
    (``rows * cols``), one of the dispatch's inputs."""
    name: str
    above: int | None = None
    upto: int | None = None

    def holds(self, sizes: dict[str, int]) -> bool:
        v = input_value(self.name, sizes)
        return (self.above is None or v > self.above) and (self.upto is None or v <= self.upto)

    def words(self) -> str:
        if self.above is not None and self.upto is not None:
            return f"{self.above} < {self.name} <= {self.upto}"
        return f"{self.name} > {self.above}" if self.above is not None else f"{self.name} <= {self.upto}"


@dataclass
class Rule:
    """Sizes for which every bound holds go to ``entry``; the last rule has no bounds (everything else)."""
    when: list[Bound]
    entry: int  # index into Dispatch.entries


@dataclass
class Dispatch:
    """Which configuration serves which sizes: the first rule whose bounds all hold. ``entries[0]`` is the
    default (the configuration most size sets chose; it keeps the kernel's name in the rewrite), the others
    become kernels of their own, each used only for sizes like the ones it was measured fastest on (within
    the geometric midpoints to the other measured values of every size name)."""
    rules: list[Rule]
    entries: list[Entry]
    winner: Entry  # the single best configuration (the search's winner), which every gain is measured against
    sizes: list[dict[str, int]]
    serve: list[int]  # the entry the rules give each size set
    original_us: list[float]  # per size set: the original, timed with the serving configuration
    tuned_us: list[float]  # per size set: the serving configuration
    single_original_us: list[float]  # per size set: the original, timed with the winner
    single_us: list[float]  # per size set: the winner
    confirmed: bool = False  # figures from interleaved confirmation (else the search's)
    dropped: list[str] = field(default_factory=list)  # what the confirmation gave back to the winner, in words
    backend: str = ""  # what measured the figures ("gpu", "replay": a recording's figures)
    kept: list[str] = field(default_factory=list)  # the size sets the original kernel serves, and why, in words
    single_slower: list[int] = field(default_factory=list)  # size sets where the winner alone is slower than
    # the original beyond the noise, under confirmation: one configuration for every size must not be written then
    instead: str = ""  # why one configuration other than the search's winner serves every size set (one_configuration)
    inputs: list[str] = field(default_factory=list)  # what the rules may test: size names, or expressions of them
    # that the launches pass (``rows * cols``) where they do not pass every size; empty: the size names

    @property
    def original_kept(self) -> list[int]:
        """The size sets the original kernel serves (no verified configuration is faster there beyond the noise)."""
        return [i for i, e in enumerate(self.serve) if self.entries[e].is_original]

    @property
    def applies_nothing(self) -> bool:
        """Every size set keeps the original kernel: applying changes nothing."""
        return all(e.is_original for e in self.entries)

    @property
    def speedup(self) -> float:
        return _geomean([o / t for o, t in zip(self.original_us, self.tuned_us)])

    @property
    def single_speedup(self) -> float:
        return _geomean([o / t for o, t in zip(self.single_original_us, self.single_us)])

    def to_dict(self) -> dict:
        return {"rules": [{"when": [{"name": b.name, "above": b.above, "upto": b.upto} for b in r.when],
                           "entry": r.entry} for r in self.rules],
                "entries": [_entry_dict(e) for e in self.entries], "winner": _entry_dict(self.winner),
                "sizes": self.sizes, "serve": self.serve, "original_us": self.original_us, "tuned_us": self.tuned_us,
                "single_original_us": self.single_original_us, "single_us": self.single_us,
                "confirmed": self.confirmed, "dropped": self.dropped, "backend": self.backend, "speedup": self.speedup,
                "single_speedup": self.single_speedup, "kept": self.kept, "single_slower": self.single_slower,
                "instead": self.instead, "inputs": self.inputs,
                "original_kept": self.original_kept}

    @staticmethod
    def from_dict(d: dict) -> "Dispatch":
        try:
            out = Dispatch(rules=[Rule([Bound(b["name"], b.get("above"), b.get("upto")) for b in r["when"]],
                                        int(r["entry"])) for r in d["rules"]],
                            entries=[Entry(e["template_hash"], e["origin"], dict(e["params"])) for e in d["entries"]],
                            winner=Entry(d["winner"]["template_hash"], d["winner"]["origin"],
                                         dict(d["winner"]["params"])),
                            sizes=[dict(s) for s in d["sizes"]], serve=[int(x) for x in d["serve"]],
                            original_us=list(d["original_us"]), tuned_us=list(d["tuned_us"]),
                            single_original_us=list(d["single_original_us"]), single_us=list(d["single_us"]),
                            confirmed=bool(d.get("confirmed")), dropped=list(d.get("dropped") or []),
                            backend=str(d.get("backend") or ""), kept=list(d.get("kept") or []),
                            single_slower=[int(x) for x in d.get("single_slower") or []],
                            instead=str(d.get("instead") or ""), inputs=[str(x) for x in d.get("inputs") or []])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise KerntuneError(f"not a per-shape dispatch record ({type(e).__name__}: {e})") from None
        d_ = out
        for i, e in enumerate(d_.entries + [d_.winner]):  # parameter values: apply checks them (space.check_config)
            if not isinstance(e.template_hash, str) or not isinstance(e.origin, str):
                raise KerntuneError(f"per-shape dispatch, configuration {i + 1}: malformed template reference")
        for r in d_.rules:
            if not 0 <= r.entry < len(d_.entries):
                raise KerntuneError(f"per-shape dispatch: a rule names configuration {r.entry + 1} of "
                                    f"{len(d_.entries)}")
            for b in r.when:  # written into the user's host code: a size name (or an expression of size names)
                # and integer bounds only
                if not isinstance(b.name, str) or not _input_name(b.name, d_.sizes) or not all(
                        x is None or (isinstance(x, int) and not isinstance(x, bool) and x.bit_length() <= 63)
                        for x in (b.above, b.upto)):
                    raise KerntuneError(f"per-shape dispatch: the bound {str(b.name)[:40]!r} "
                                        f"({b.above!r}, {b.upto!r}) is not a size name (or an expression of size "
                                        "names) with integer bounds")
        if not all(isinstance(x, int) and 0 <= x < len(d_.entries) for x in d_.serve):
            raise KerntuneError("per-shape dispatch: `serve` names a configuration it does not have")
        return out


def _input_name(name: str, sizes: list[dict[str, int]]) -> bool:
    """``name`` is a size name, or a short expression over the size names of ``sizes`` only."""
    if re.fullmatch(r"[A-Za-z_]\w{0,127}", name):
        return True
    from agent_core import expr
    try:
        used = expr.names(name)
    except expr.ExprError:
        return False
    known = {n for s in sizes for n in s}
    return len(name) <= 256 and bool(used) and used <= known


def _entry_dict(e: Entry) -> dict:
    return {"template_hash": e.template_hash, "origin": e.origin, "params": dict(e.params)}


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# --------------------------------------------------------------------------------------------- the rules
def select(d: Dispatch, sizes: dict[str, int]) -> int:
    """The entry the dispatch's rules give for one size set (any sizes, measured or not)."""
    for r in d.rules:
        if all(b.holds(sizes) for b in r.when):
            return r.entry
    return d.rules[-1].entry


def reachable(d: Dispatch) -> tuple[Dispatch, list[int]]:
    """``d`` with only what ``select`` reaches, and the index in ``d.entries`` of each entry kept: the rules up to
    the first one without bounds (it takes every size the rules before it leave, so later rules are never read),
    the last of them without bounds (``select`` gives its entry to every size the others leave), and the entries
    those rules give, in their order. ``choose`` and ``confirm`` build dispatches that are so already (one rule
    without bounds, the last): those come back unchanged. A record edited by hand or by other code may not be."""
    if not d.rules:
        raise KerntuneError("a per-shape dispatch without rules")
    cut = next((i for i, r in enumerate(d.rules) if not r.when), len(d.rules) - 1)
    kept = sorted({r.entry for r in d.rules[:cut + 1]})
    if cut == len(d.rules) - 1 and not d.rules[-1].when and kept == list(range(len(d.entries))):
        return d, kept
    out = replace(d, rules=[Rule(list(r.when) if i < cut else [], kept.index(r.entry))
                            for i, r in enumerate(d.rules[:cut + 1])], entries=[d.entries[i] for i in kept])
    out.serve = [select(out, s) for s in d.sizes]
    return out, kept


def _boundary(a: int, b: int) -> int:
    """A threshold t with a <= t < b: the geometric midpoint for positive sizes, else the arithmetic one."""
    t = math.isqrt(a * b) if a > 0 and b > 0 else (a + b) // 2
    return min(max(t, a), b - 1)


def _box(inside: list[int], outside: list[int], sizes: list[dict[str, int]], names: list[str]) -> list[Bound] | None:
    """Bounds on every input ``names`` (``sizes``: each size set's value of each) that hold for the size sets
    ``inside``, reaching halfway (geometrically) to the nearest value of the other size sets on each side; None
    when some size set of ``outside`` satisfies them all (no box separates them)."""
    bounds = []
    for n in names:
        vin = [sizes[i][n] for i in inside]
        vout = [sizes[j][n] for j in outside]
        lo, hi = min(vin), max(vin)
        below, above = [v for v in vout if v < lo], [v for v in vout if v > hi]
        b = Bound(n, _boundary(max(below), lo) if below else None, _boundary(hi, min(above)) if above else None)
        if b.above is not None or b.upto is not None:
            bounds.append(b)
    if any(all(b.holds(sizes[j]) for b in bounds) for j in outside):
        return None
    return bounds


def input_values(sizes: list[dict[str, int]], inputs: list[str] | None = None) -> tuple[list[str], list[dict]]:
    """(the inputs, each size set's value of each): ``inputs`` (size names or expressions of them), or where
    none are given the size names every size set gives as integers."""
    names = list(inputs) if inputs else [n for n in sizes[0] if all(n in s and isinstance(s[n], int) for s in sizes)]
    return names, [{n: input_value(n, s) for n in names} for s in sizes]


def _rules(labels: list[tuple[str, str]], sizes: list[dict[str, int]], winner: tuple[str, str],
           score: Callable[[tuple[str, str]], float], inputs: list[str] | None = None
           ) -> list[tuple[list[Bound], tuple[str, str]]] | None:
    """The decision list giving every size set its label: the label most size sets have is the default (ties:
    the winner, then the lower ``score``); every other label gets a box (``_box``) around its size sets, over
    the dispatch's ``inputs`` (default: the size names), or one box per size set where one box would take in a
    size set of another label. None when a size set cannot be boxed apart from the others (two size sets equal
    in every input but with different labels)."""
    names, sizes = input_values(sizes, inputs)
    counts: dict[tuple[str, str], int] = {}
    for lab in labels:
        counts[lab] = counts.get(lab, 0) + 1
    default = min(counts, key=lambda lab: (-counts[lab], lab != winner, score(lab), lab))
    out = []
    for lab in sorted((x for x in counts if x != default), key=lambda x: (-counts[x], score(x), x)):
        inside = [i for i, x in enumerate(labels) if x == lab]
        outside = [j for j, x in enumerate(labels) if x != lab]
        box = _box(inside, outside, sizes, names)
        if box is not None:
            out.append((box, lab))
            continue
        for i in inside:
            one = _box([i], outside, sizes, names)
            if one is None:
                return None
            out.append((one, lab))
    out.append(([], default))
    return out


# --------------------------------------------------------------------------------------------- choosing
def choose(candidates: list[Candidate], winner: tuple[str, dict[str, int]], sizes: list[dict[str, int]],
           min_gain: float = MIN_GAIN, max_entries: int = MAX_ENTRIES, inputs: list[str] | None = None
           ) -> Dispatch | None:
    """A dispatch over ``candidates`` (verified configurations of templates the rewrite can hold, each timed on
    every size set of ``sizes``) against ``winner`` ((template hash, parameters) of the single best, which must
    be among them); None when no size set gains ``min_gain`` from a configuration of its own. ``inputs``: what
    its rules may test (what the kernel's launches give: ``apply.dispatch_inputs``); default the size names."""
    n = len(sizes)
    by_key: dict[tuple[str, str], Candidate] = {}
    for c in candidates:
        if len(c.us) == n and len(c.original_us) == n and all(
                x is not None and math.isfinite(x) and x > 0 for x in c.us + c.original_us):
            by_key.setdefault(c.key, c)
    w = by_key.get((winner[0], params_key(winner[1])))
    if w is None or n < 2:
        return None
    cands = sorted(by_key.values(), key=lambda c: c.key)
    labels = _cover(cands, w, n, min_gain)
    while True:
        if all(lab == w.key for lab in labels):
            return None
        rules = _rules(labels, sizes, w.key, lambda k: sum(by_key[k].ratio), inputs)
        if rules is not None and len(set(labels)) <= max_entries:
            break
        # the weakest gain goes back to the winner, and the rules are sought again
        weakest = min((i for i in range(n) if labels[i] != w.key),
                      key=lambda i: (w.ratio[i] / by_key[labels[i]].ratio[i], i))
        labels[weakest] = w.key
    return _build(rules, labels, by_key, w, sizes, inputs)


def _cover(cands: list[Candidate], w: Candidate, n: int, min_gain: float) -> list[tuple[str, str]]:
    """A label (candidate key) per size set: the winner, or a configuration at least ``min_gain`` faster there;
    where several are about equally fast (within TIE), the one that also serves the most other size sets, so
    the dispatch needs as few configurations as it can."""
    options: list[set[tuple[str, str]]] = []
    for i in range(n):
        better = [c for c in cands if w.ratio[i] >= c.ratio[i] * (1 + min_gain)]
        if better:
            fastest = min(c.ratio[i] for c in better)
            options.append({c.key for c in better if c.ratio[i] <= fastest * (1 + TIE)})
        else:
            options.append(set())
    labels = [w.key] * n
    remaining = {i for i in range(n) if options[i]}
    by_key = {c.key: c for c in cands}
    while remaining:
        def score(k):
            covered = [i for i in remaining if k in options[i]]
            return (-len(covered), sum(by_key[k].ratio[i] for i in covered), k)
        pick = min({k for i in remaining for k in options[i]}, key=score)
        for i in [i for i in remaining if pick in options[i]]:
            labels[i] = pick
            remaining.discard(i)
    return labels


def _build(rules: list[tuple[list[Bound], tuple[str, str]]], labels: list[tuple[str, str]],
           by_key: dict[tuple[str, str], Candidate], w: Candidate, sizes: list[dict[str, int]],
           inputs: list[str] | None = None) -> Dispatch:
    keys: list[tuple[str, str]] = [rules[-1][1]]
    for _, lab in rules:
        if lab not in keys:
            keys.append(lab)
    entries = [Entry(by_key[k].template_hash, by_key[k].origin, dict(by_key[k].params)) for k in keys]
    d = Dispatch(rules=[Rule(when, keys.index(lab)) for when, lab in rules], entries=entries,
                 winner=Entry(w.template_hash, w.origin, dict(w.params)), sizes=[dict(s) for s in sizes], serve=[],
                 original_us=[], tuned_us=[], single_original_us=list(w.original_us), single_us=list(w.us),
                 inputs=list(inputs or []))
    d.serve = [select(d, s) for s in sizes]
    for i, e in enumerate(d.serve):
        if keys[e] != labels[i]:
            raise AssertionError(f"internal: the dispatch rules send size set {i + 1} to another configuration")
        c = by_key[keys[e]]
        d.original_us.append(c.original_us[i])
        d.tuned_us.append(c.us[i])
    return d


# --------------------------------------------------------------------------------------------- confirming
Measure = Callable[[Entry], "tuple[list[Timing], list[Timing]]"]


def single(winner: Candidate, sizes: list[dict[str, int]], inputs: list[str] | None = None) -> Dispatch:
    """The dispatch of the winner alone on every size set (confirmed like any other: ``confirm`` then keeps the
    original where the winner is not faster, with rules over ``inputs``)."""
    w = Entry(winner.template_hash, winner.origin, dict(winner.params))
    return Dispatch(rules=[Rule([], 0)], entries=[w], winner=w, sizes=[dict(s) for s in sizes],
                    serve=[0] * len(sizes), original_us=list(winner.original_us), tuned_us=list(winner.us),
                    single_original_us=list(winner.original_us), single_us=list(winner.us),
                    inputs=list(inputs or []))


def one_configuration(c: Candidate, timed: tuple[list[Timing], list[Timing]], winner: Entry,
                      winner_timed: tuple[list[Timing], list[Timing]], sizes: list[dict[str, int]], why: str
                      ) -> Dispatch:
    """Configuration ``c`` alone on every size set in place of the search's ``winner``: where one configuration
    must serve every size and the winner is slower than the original on some size set, another configuration of
    the winner's template that is slower nowhere. ``timed``/``winner_timed``: (original, variant) timings of each,
    confirmed interleaved; ``single_slower`` stays the winner's (why it is not written), ``instead`` says why."""
    e = Entry(c.template_hash, c.origin, dict(c.params))
    med = lambda ts: [t.median_us for t in ts]  # noqa: E731
    return Dispatch(rules=[Rule([], 0)], entries=[e], winner=winner, sizes=[dict(s) for s in sizes],
                    serve=[0] * len(sizes), original_us=med(timed[0]), tuned_us=med(timed[1]),
                    single_original_us=med(winner_timed[0]), single_us=med(winner_timed[1]), confirmed=True,
                    instead=why, single_slower=slower_at(*winner_timed))


def slower_at(original: list[Timing], variant: list[Timing]) -> list[int]:
    """The size sets on which ``variant`` is slower than ``original`` beyond the noise."""
    return [i for i, (o, v) in enumerate(zip(original, variant)) if slower(o, v)]


def slower_anywhere(original: list[Timing], variant: list[Timing]) -> bool:
    return bool(slower_at(original, variant))


def original_only(d: Dispatch, original_params: dict[str, int], why: str) -> Dispatch:
    """``d`` (confirmed) turned into the original kernel on every size set: where one configuration must serve
    every size (no per-shape dispatch) and the winner is slower than the original on some size set."""
    o = original_entry(original_params)
    return replace(d, rules=[Rule([], 0)], entries=[o], serve=[0] * len(d.sizes),
                   original_us=list(d.single_original_us), tuned_us=list(d.single_original_us),
                   kept=list(d.kept) + [why])


def confirm(d: Dispatch, measure: Measure, min_gain: float = CONFIRM_GAIN,
            original_params: dict[str, int] | None = None) -> Dispatch | None:
    """The dispatch with confirmed figures: ``measure(entry)`` times the entry's configuration interleaved with
    the original on every size set ((original timings, variant timings), e.g. Backend.confirm). A size set whose
    configuration is not at least ``min_gain`` faster than the winner under confirmation goes back to the
    winner; then a size set whose configuration (or, failing it, the winner) is not ``faster`` than the original
    beyond the measured noise is served by the original kernel (an ``ORIGINAL`` entry with ``original_params``).
    None when the winner alone serves every size set."""
    timings: dict[tuple[str, str], tuple[list[Timing], list[Timing]]] = {}
    for e in d.entries + [d.winner]:
        if e.key not in timings and not e.is_original:
            o, v = measure(e)
            if len(o) != len(d.sizes) or len(v) != len(d.sizes):
                raise KerntuneError(f"confirmation of {e.params} gave {len(v)} timings for {len(d.sizes)} size sets")
            timings[e.key] = (list(o), list(v))
    figures = {k: ([t.median_us for t in o], [t.median_us for t in v]) for k, (o, v) in timings.items()}
    wk = d.winner.key
    wo, wv = figures[wk]
    orig = original_entry(original_params if original_params is not None else next(
        (e.params for e in d.entries if e.is_original), {}))
    ok = orig.key
    labels, dropped, kept = [], [], []
    for i, ei in enumerate(d.serve):
        e = d.entries[ei]
        if e.is_original:  # a recorded dispatch confirmed again: the winner is asked first
            e = d.winner
        o, v = figures[e.key]
        if e.key != wk and not (wv[i] / wo[i] >= (v[i] / o[i]) * (1 + min_gain)):
            dropped.append(f"{_label(d.sizes[i])}: {params_words(e.params)} {v[i]:.1f} us against the winner's "
                           f"{wv[i]:.1f} us when confirmed")
            labels.append(wk)
        else:
            labels.append(e.key)
    params_of = {e.key: e.params for e in d.entries + [d.winner]}

    def keep_original(i: int, lab: tuple[str, str]) -> bool:
        """Whether size set ``i`` must go to the original (its configuration, then the winner, not faster)."""
        o, v = timings[lab][0][i], timings[lab][1][i]
        if faster(o, v):
            return False
        if lab != wk and faster(timings[wk][0][i], timings[wk][1][i]):
            dropped.append(f"{_label(d.sizes[i])}: {params_words(params_of[lab])} {v.median_us:.1f} us is not "
                           f"faster than the original's {o.median_us:.1f} us beyond the noise "
                           f"({margin(o, v):.1%}); the winner is")
            labels[i] = wk
            return False
        o, v = timings[wk][0][i], timings[wk][1][i]
        kept.append(f"{_label(d.sizes[i])}: the best verified configuration ({params_words(params_of[wk])}) takes "
                    f"{v.median_us:.1f} us against the original's {o.median_us:.1f} us, not faster beyond the "
                    f"noise ({margin(o, v):.1%}): the original kernel serves it")
        return True

    for i, lab in enumerate(list(labels)):
        if keep_original(i, lab):
            labels[i] = ok
    single_slower = slower_at(*timings[wk])
    if all(lab == wk for lab in labels):
        return None
    cands = {e.key: Candidate(e.template_hash, e.origin, dict(e.params), figures[e.key][1], figures[e.key][0])
             for e in d.entries + [d.winner] if not e.is_original}
    cands[ok] = Candidate(ORIGINAL, ORIGINAL, dict(orig.params), list(wo), list(wo))

    def score(k: tuple[str, str]) -> float:
        return sum(cands[k].ratio)

    _, vals = input_values(d.sizes, d.inputs)
    rules = _rules(labels, d.sizes, wk, score, d.inputs)
    while rules is None:
        # Some size sets cannot be told apart by their sizes any more (the default moved): the size sets of the
        # configuration that gains least against the winner go back to it (or to the original where the winner
        # is not faster), until the rest can be told apart; then the winner's size sets alike in every size to
        # one the original serves go to the original too.
        others = {lab for lab in labels if lab not in (wk, ok)}
        if others:
            gain = {lab: sum(wv[i] / figures[lab][1][i] - 1 for i, x in enumerate(labels) if x == lab)
                    for lab in others}
            worst = min(others, key=lambda lab: (gain[lab], lab))
            for i, lab in enumerate(labels):
                if lab == worst:
                    dropped.append(f"{_label(d.sizes[i])}: {params_words(cands[lab].params)} cannot be told apart "
                                   "from the winner's size sets by its sizes")
                    labels[i] = ok if keep_original(i, wk) else wk
        else:
            alike = [i for i, lab in enumerate(labels) if lab == wk and any(
                labels[j] == ok and vals[i] == vals[j] for j in range(len(labels)))]
            for i in alike or [i for i, lab in enumerate(labels) if lab == wk]:
                kept.append(f"{_label(d.sizes[i])}: cannot be told apart by its sizes from a size set the original "
                            "kernel serves: the original kernel serves it too")
                labels[i] = ok
        if all(lab == wk for lab in labels):
            return None
        rules = _rules(labels, d.sizes, wk, score, d.inputs)
    out = _build(rules, labels, cands, cands[wk], d.sizes, d.inputs)
    out.confirmed = True
    out.dropped = dropped
    out.kept = kept
    out.single_slower = single_slower
    return out


# --------------------------------------------------------------------------------------------- words
def size_label(sizes: dict) -> str:
    """A size set in words: ``4096×1024``."""
    return "×".join(str(v) for v in sizes.values())


_label = size_label


def condition_words(d: Dispatch, entry_index: int) -> str:
    """The sizes an entry serves, in the spec's words (``tokens <= 72 and hidden > 4097``; ``otherwise``)."""
    parts = []
    for r in d.rules:
        if r.entry == entry_index:
            parts.append(" and ".join(b.words() for b in r.when) if r.when else "otherwise")
    return " or ".join(f"({p})" if len(parts) > 1 and " and " in p else p for p in parts)


def describe(d: Dispatch) -> list[str]:
    """One line per entry: the sizes it serves, its template and values, and the size sets measured with it."""
    lines = []
    for ei, e in enumerate(d.entries):
        shapes = [i for i, s in enumerate(d.serve) if s == ei]
        figs = ", ".join(f"{_label(d.sizes[i])} {d.original_us[i] / d.tuned_us[i]:.2f}x"
                         + (f" (one configuration: {d.single_original_us[i] / d.single_us[i]:.2f}x)"
                            if e.key != d.winner.key else "") + (" (original kept)" if e.is_original else "")
                         for i in shapes)
        what = "the original kernel, unchanged" if e.is_original else f"{e.origin} {params_words(e.params)}"
        lines.append(f"{condition_words(d, ei)}: {what}" + (f" — {figs}" if figs else ""))
    return lines


def kernel_names(d: Dispatch, kernel: str, taken: set[str] | None = None) -> list[str]:
    """The kernel name of each entry in the rewrite: the kernel's own for entries[0] (the default); for the
    others ``<kernel>__<what differs>``: the values that differ from the default's (``__vec2_items8``), led by
    the expert's name where the template differs; ``<kernel>__orig`` for the original kernel; made unique
    against ``taken``. The kernel's structural template and the original count as one template (the original
    is the structural template at its own values): ``row_sum__block256``."""
    taken = set(taken or ()) | {kernel}
    names = [kernel]
    base_entry = d.entries[0]
    own = {ORIGINAL, "structural"}
    for e in d.entries[1:]:
        parts = []
        same = e.template_hash == base_entry.template_hash or {e.origin, base_entry.origin} <= own
        if e.is_original:
            parts.append("orig")
        else:
            if not same:
                parts.append(e.origin.split(":", 1)[-1])
            parts += [f"{k}{v}" for k, v in e.params.items() if base_entry.params.get(k) != v or not same]
        base = f"{kernel}__" + re.sub(r"\W", "_", "_".join(parts).lower() or "alt")
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        names.append(name)
    return names
