"""The corpus of styles judged against its targets (issue #11), from a `kerntune bench` results file.

    kerntune bench bench/corpus --out OUT ...          # on a GPU: every variant optimized (or a few folders of it)
    python bench/corpus_report.py OUT/bench_results.json [--markdown OUT/corpus_report.md]

Per variant (matched to `bench/corpus/corpus.toml` by file and kernel): its family, the template that won, whether
an expert template verified for it (a round of an `expert:` template with a verified configuration), its
speedup, its slowest size set and the % of copy bandwidth of its shapes moving >= 64 MB. Then the targets:
an expert verifies for >= 90% of the variants of the expert families; geomean >= 2.5x over the variants; no size
set below 0.98x; every shape moving >= 64 MB at >= 85% of the measured copy bandwidth. Variants the results file
does not hold are listed as not run, and the targets read "so far".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "corpus" / "corpus.toml"
EXPERT_VERIFIED = 0.90
GEOMEAN = 2.5
FLOOR = 0.98
BW_PCT = 85.0
BW_MIN_BYTES = 64_000_000


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def expert_verified(rec: dict) -> bool:
    """A round of an expert template found a verified configuration (its counts say so)."""
    return any(str(r.get("origin", "")).startswith("expert:") and (r.get("counts") or {}).get("ok", 0) > 0
               for r in rec.get("rounds") or [])


def _corpus_relative(file: str) -> str:
    """A variant's path from its `bench/corpus/` folder on (results name files by the absolute path of the checkout
    that ran them: a GPU machine's, another clone's)."""
    parts = Path(file).parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == "bench" and parts[i] == "corpus":
            return "/".join(parts[i + 1:])
    return str(Path(file).resolve())


def ceiling_time(shape: dict, ceiling: dict) -> float | None:
    """The time of a device copy moving the shape's bytes (gpu/experiments/copy_ceiling.py), at least the empty
    kernel's: what the shape could take at all. None where the ceiling file has no copy of its bytes."""
    us = (ceiling.get("copy_us") or {}).get(str(shape.get("bytes")))
    return None if us is None else max(float(us), float(ceiling.get("empty_kernel_us") or 0.0))


def report(results: dict, manifest: dict, ceiling: dict | None = None) -> tuple[list[dict], dict]:
    """Rows per variant and the targets. With ``ceiling`` (copy_ceiling.py's output) each row also has its
    ceiling (geomean over its shapes of original time / the copy time of its bytes) and the share of it reached
    (geomean of the copy time / the tuned time)."""
    by_file = {}
    for k in results.get("kernels", []):
        by_file[(_corpus_relative(k["file"]), k["kernel"])] = k
    rows = []
    for v in manifest["variant"]:
        rec = by_file.get((_corpus_relative(str(MANIFEST.parent / v["file"])), v["kernel"]))
        row = {"file": v["file"], "kernel": v["kernel"], "family": v["family"], "status": "not run"}
        if rec is not None:
            shapes = rec.get("shapes") or []
            sp = [s.get("speedup") for s in shapes if s.get("speedup")]
            big = [s.get("pct_copy") for s in shapes if (s.get("bytes") or 0) >= BW_MIN_BYTES and s.get("memory_bound")]
            row.update(status=rec["status"], origin=rec.get("origin"), expert=expert_verified(rec),
                       speedup=rec.get("speedup") if rec["status"] == "ok" else (1.0 if rec["status"] == "no_variant"
                                                                                 else None),
                       slowest=min(sp) if sp else None, big_pct=big, error=rec.get("error") or "")
            if ceiling is not None:
                # each big shape against a copy of its own bytes: what moving that many bytes takes at all
                row["big_same"] = [None if ct is None else ct / (s.get("tuned_us") or s["original_us"]) * 100
                                   for s in shapes if (s.get("bytes") or 0) >= BW_MIN_BYTES and s.get("memory_bound")
                                   and s.get("original_us") for ct in [ceiling_time(s, ceiling)]]
                cs = [(s["original_us"], s.get("tuned_us") or s["original_us"], ceiling_time(s, ceiling))
                      for s in shapes if s.get("original_us")]
                cs = [c for c in cs if c[2]]
                if cs:
                    row["ceiling"] = _geomean([o / c for o, _, c in cs])
                    row["of_ceiling"] = _geomean([c / t for _, t, c in cs])
        rows.append(row)
    ran = [r for r in rows if r["status"] in ("ok", "no_variant")]
    fam = [r for r in ran if not r["family"].startswith("other")]
    big = [p for r in ran for p in r.get("big_pct") or []]
    t = {
        "run": len(ran), "planned": len(rows), "complete": len(ran) == len(rows),
        "expert_verified": {"value": (sum(r["expert"] for r in fam) / len(fam)) if fam else None,
                            "of": len(fam), "target": EXPERT_VERIFIED},
        "geomean": {"value": _geomean([r["speedup"] for r in ran]), "target": GEOMEAN},
        "floor": {"value": min((r["slowest"] for r in ran if r.get("slowest")), default=None), "target": FLOOR},
        "bandwidth": {"failing": [(r["file"], None if p is None else round(p, 1)) for r in ran for p in r.get("big_pct") or []
                                  if p is None or p < BW_PCT], "checked": len(big), "target": BW_PCT},
    }
    t["expert_verified"]["met"] = t["expert_verified"]["value"] is not None and \
        t["expert_verified"]["value"] >= EXPERT_VERIFIED
    t["geomean"]["met"] = t["geomean"]["value"] is not None and t["geomean"]["value"] >= GEOMEAN
    t["floor"]["met"] = t["floor"]["value"] is not None and t["floor"]["value"] >= FLOOR
    t["bandwidth"]["met"] = bool(big) and not t["bandwidth"]["failing"]
    if ceiling is not None:
        with_c = [r for r in ran if r.get("ceiling")]
        same = [p for r in ran for p in r.get("big_same") or []]
        t["bandwidth_same_bytes"] = {
            "failing": [(r["file"], None if p is None else round(p, 1)) for r in ran for p in r.get("big_same") or []
                        if p is None or p < BW_PCT], "checked": len(same), "target": BW_PCT}
        t["bandwidth_same_bytes"]["met"] = bool(same) and not t["bandwidth_same_bytes"]["failing"]
        t["ceiling"] = {"value": _geomean([r["ceiling"] for r in with_c]),
                        "reached": _geomean([r["of_ceiling"] for r in with_c]), "of": len(with_c),
                        "device": ceiling.get("device"), "empty_kernel_us": ceiling.get("empty_kernel_us")}
    return rows, t


def markdown(rows: list[dict], t: dict) -> str:
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    c = "ceiling" in t
    out = ["| family | variant | status | winner | expert verified | speedup | slowest size set | >= 64 MB, % copy |"
           + (" >= 64 MB, % of a copy of its bytes | ceiling | % of ceiling |" if c else ""),
           "| --- | --- | --- | --- | --- | ---: | ---: | --- |" + (" --- | ---: | ---: |" if c else "")]
    for r in rows:
        out.append(f"| {r['family']} | {r['file']} | {r['status']} | {r.get('origin') or '-'} | "
                   f"{'yes' if r.get('expert') else ('no' if r['status'] != 'not run' else '-')} | "
                   f"{f(r.get('speedup'), '.2f')}x | {f(r.get('slowest'), '.2f')}x | "
                   f"{', '.join(f(p, '.0f') for p in r.get('big_pct') or []) or '-'} |"
                   + (f" {', '.join(f(p, '.0f') for p in r.get('big_same') or []) or '-'} |"
                      f" {f(r.get('ceiling'), '.2f')}x | {f(r.get('of_ceiling') and r['of_ceiling'] * 100, '.0f')} |"
                      if c else ""))
    so_far = "" if t["complete"] else " (so far)"
    mark = lambda ok: ("met" + so_far) if ok else "NOT met"  # noqa: E731
    ev = t["expert_verified"]
    out += ["", f"{t['run']} of {t['planned']} variants run.", "",
            f"- expert verified for {f(ev['value'] and ev['value'] * 100, '.0f')}% of {ev['of']} family variants "
            f"(target >= {EXPERT_VERIFIED:.0%}): {mark(ev['met'])}",
            f"- geomean {f(t['geomean']['value'], '.2f')}x (target >= {GEOMEAN}x): {mark(t['geomean']['met'])}",
            f"- slowest size set {f(t['floor']['value'], '.2f')}x (target >= {FLOOR}x): {mark(t['floor']['met'])}",
            f"- shapes moving >= 64 MB below {BW_PCT:.0f}% of the device's copy bandwidth: "
            f"{len(t['bandwidth']['failing'])} of {t['bandwidth']['checked']}: {mark(t['bandwidth']['met'])}: "
            f"{t['bandwidth']['failing'] or 'none'}"]
    if "bandwidth_same_bytes" in t:
        bs = t["bandwidth_same_bytes"]
        out += [f"- the same shapes against a copy of their own bytes (a 64-134 MB copy itself runs below the device's "
                f"large-copy bandwidth): {len(bs['failing'])} of {bs['checked']} below {BW_PCT:.0f}%: "
                f"{mark(bs['met'])}: {bs['failing'] or 'none'}"]
    if c:
        cl = t["ceiling"]
        out += [f"- ceiling (every shape at the time of a device copy of its bytes on {cl['device']}, at least an empty "
                f"kernel's {f(cl['empty_kernel_us'], '.2f')} us): geomean {f(cl['value'], '.2f')}x over {cl['of']} "
                f"variants; the tuned kernels reach {f(cl['reached'] and cl['reached'] * 100, '.0f')}% of it "
                "(geomean of copy time / tuned time)"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="bench_results.json of a run over (part of) bench/corpus")
    ap.add_argument("--markdown", default=None, help="also write the report here")
    ap.add_argument("--ceiling", default=None, help="gpu/experiments/copy_ceiling.py's output for these results: "
                                                    "each variant's ceiling and the share of it reached")
    a = ap.parse_args(argv)
    try:
        results = json.loads(Path(a.results).read_text(encoding="utf-8"))
        ceiling = json.loads(Path(a.ceiling).read_text(encoding="utf-8")) if a.ceiling else None
    except (OSError, json.JSONDecodeError) as e:
        print(f"error: cannot read {e.filename if isinstance(e, OSError) else 'a JSON file'}: {e}", file=sys.stderr)
        return 2
    rows, t = report(results, tomllib.loads(MANIFEST.read_text(encoding="utf-8")), ceiling)
    text = markdown(rows, t)
    print(text, end="")
    if a.markdown:
        Path(a.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
