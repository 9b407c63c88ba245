"""Merge `kerntune bench` results files into one (a corpus measured over several runs): a kernel of a later file
replaces the same kernel (its file, relative to bench/ or the repository, and its name) of an earlier one; the
merged file keeps the first file's header, the kernels in first-seen order, and a note naming every source.

    python bench/merge_results.py OUT.json FIRST.json LATER.json ... [--note "what each later run was"]

bench/corpus_report.py reads the result like any results file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def kernel_key(k: dict) -> tuple[str, str]:
    """(the file from its `bench/` folder on, else its name; the kernel): the same variant wherever it ran."""
    parts = Path(k.get("file", "")).parts
    rel = "/".join(parts[parts.index("bench"):]) if "bench" in parts else Path(k.get("file", "")).name
    return rel, k.get("kernel", k.get("name", ""))


def merge(results: list[dict]) -> tuple[dict, list[tuple[str, str]]]:
    """The merged results and the keys a later file replaced."""
    if not results:
        raise ValueError("nothing to merge")
    out = dict(results[0])
    kernels: dict[tuple[str, str], dict] = {}
    replaced = []
    for res in results:
        for k in res.get("kernels", []):
            key = kernel_key(k)
            if key in kernels:
                replaced.append(key)
            kernels[key] = k
    out["kernels"] = list(kernels.values())
    return out, replaced


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--note", default="", help="appended to the merged file's note")
    a = ap.parse_args(argv)
    try:
        results = [json.loads(Path(p).read_text(encoding="utf-8")) for p in a.inputs]
    except (OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [p for p, r in zip(a.inputs, results) if not isinstance(r, dict) or not isinstance(r.get("kernels"), list)]
    if bad:
        print(f"error: not a kerntune bench results file: {', '.join(bad)}", file=sys.stderr)
        return 2
    merged, replaced = merge(results)
    note = (results[0].get("note") or "").strip()
    merged["note"] = "; ".join(x for x in (note, f"merged with {', '.join(a.inputs[1:])}" if a.inputs[1:] else "",
                                           a.note) if x)
    Path(a.out).write_text(json.dumps(merged, indent=1), encoding="utf-8")
    print(f"{len(merged['kernels'])} kernels ({len(replaced)} replaced by a later file) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
