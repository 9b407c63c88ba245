"""Screen every candidate expert binding of every bench and corpus kernel, as `kerntune optimize` does before
round 1 (agent_core.agent.screen): one cheap configuration per binding, compiled in parallel, checked against the
original kernel on the smallest size set. Prints one row per kernel: its family, the candidates per expert, and
the binding that verified (or none).

    python bench/gpu_screen_bindings.py --backend gpu [--json OUT.json] [FILE.cu[:KERNEL] ...]
    python bench/gpu_screen_bindings.py --backend replay:tests/data/stores/bench.sqlite   # recorded answers
    python bench/gpu_screen_bindings.py --backend none [--compile]   # offline: candidates (and nvcc) only
    ... --family rms_norm --family softmax   # a part of the kernels (bench, a corpus family, other)

Without files: bench/*.cu and every variant of bench/corpus/corpus.toml (when it exists).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_core.agent.screen import FAILED, VERIFIED, screen, size_words, smallest_size_set  # noqa: E402
from agent_core.model import KerntuneError, macro_name  # noqa: E402
from agent_core.search.tuner import open_backend, prepare  # noqa: E402
from agent_core.source import spec as spec_mod  # noqa: E402
from agent_core.source.cuda_parse import parse_cuda  # noqa: E402
from agent_core.templating import experts  # noqa: E402

CORPUS = ROOT / "bench" / "corpus" / "corpus.toml"


def kernels(args: list[str], corpus: Path = CORPUS) -> list[tuple[str, str, str]]:
    """(path, kernel, family) to screen: the arguments, else the bench files and the corpus variants."""
    out = []
    if args:
        for a in args:
            path, _, kernel = a.partition(":")
            out += [(path, k, "?") for k in ([kernel] if kernel else _spec_kernels(path))]
        return out
    for p in sorted((ROOT / "bench").glob("*.cu")):
        out += [(str(p), k, "bench") for k in _spec_kernels(str(p))]
    if corpus.is_file():
        for v in tomllib.loads(corpus.read_text())["variant"]:
            out.append((str(corpus.parent / v["file"]), v["kernel"], v["family"]))
    return out


def _spec_kernels(path: str) -> list[str]:
    cf = parse_cuda(Path(path).read_text(), path)
    return [k.name for k in cf.kernels if spec_mod.find_spec(cf, k.name) is not None]


def compile_all(prep, bindings) -> dict[int, str]:
    """nvcc on each binding's default configuration (offline check): index -> error, for those that fail."""
    from agent_core.measure.compiler import compile_many
    jobs = []
    for b in bindings:
        t = experts.bind(b, prep.cf, prep.spec)
        jobs.append(dict(text=t.text, kernel=t.entry, arch="sm_90",
                         defines={macro_name(n): v for n, v in t.space.original_config().items()}))
    return {i: str(r)[:200] for i, r in enumerate(compile_many(jobs)) if isinstance(r, BaseException)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--backend", default="gpu", help="gpu | replay:PATH | none (offline: candidates only)")
    ap.add_argument("--compile", action="store_true", help="with --backend none: compile every binding (nvcc)")
    ap.add_argument("--json", default=None, help="write every verdict here")
    ap.add_argument("--corpus", default=str(CORPUS), help="the corpus manifest (default bench/corpus/corpus.toml)")
    ap.add_argument("--family", action="append", default=None,
                    help="only these families (bench, gated_act, rms_norm, ..., other; repeatable)")
    a = ap.parse_args()
    try:
        backend = None if a.backend == "none" else open_backend(a.backend)
    except KerntuneError as e:
        print(f"error: {e.message} (--backend none lists the candidates offline)", file=sys.stderr)
        return 3
    rows, doc = [], []
    try:
        for path, kernel, family in kernels(a.files, Path(a.corpus)):
            if a.family and family.split(":")[0] not in a.family:
                continue
            name = f"{Path(path).stem}:{kernel}"
            t0 = time.monotonic()
            try:
                prep = prepare(path, kernel, use_workspace_files=False)
            except KerntuneError as e:
                rows.append((name, family, "-", f"not prepared: {e.message[:80]}", ""))
                doc.append({"kernel": name, "family": family, "error": e.message})
                continue
            bs = experts.candidates(prep.cf, kernel, prep.spec)
            counts = ", ".join(f"{n} {len(g)}" for n, g in experts.family_groups(bs).items()) or "none"
            entry = {"kernel": name, "family": family, "candidates": [f"{b.expert.name}: {b.describe()}" for b in bs]}
            if not bs:
                rows.append((name, family, counts, "no expert candidate", ""))
            elif backend is None:
                bad = compile_all(prep, bs) if a.compile else {}
                note = (f"{len(bs) - len(bad)}/{len(bs)} compile" if a.compile else "not checked (no backend)")
                rows.append((name, family, counts, note, f"{time.monotonic() - t0:.1f}s"))
                entry["compile_errors"] = bad
            else:
                try:
                    s = screen(prep, backend)
                except KerntuneError as e:  # e.g. the original does not compile as the spec says: this kernel only
                    rows.append((name, family, counts, f"error: {str(e).splitlines()[0][:200]}",
                                 f"{time.monotonic() - t0:.1f}s"))
                    entry["error"] = str(e)
                    doc.append(entry)
                    print(" | ".join(rows[-1]), flush=True)
                    continue
                ok = [v for v in s.verdicts if v.status == VERIFIED]
                tally = {st: sum(v.status == st for v in s.verdicts) for st in {v.status for v in s.verdicts}}
                best = (f"{ok[0].binding.expert.name}: {ok[0].binding.describe()}" if ok else
                        "none verified" + (f" ({tally.get(FAILED, 0)} failed)" if tally.get(FAILED) else ""))
                rows.append((name, family, counts, best,
                             f"{time.monotonic() - t0:.1f}s " + " ".join(f"{k}={n}" for k, n in sorted(tally.items()))))
                entry.update(size_set=size_words(prep.spec, smallest_size_set(prep.spec)),
                             verdicts=[v.to_dict(s.size_set) for v in s.verdicts])
            doc.append(entry)
            print(" | ".join(rows[-1]), flush=True)
    finally:
        if backend is not None:
            backend.close()
    with_cand = [r for r in rows if r[2] not in ("-", "none")]
    verified = [r for r in with_cand if not r[3].startswith(("none verified", "not checked", "no expert"))
                and "compile" not in r[3]]
    print(f"\n{len(rows)} kernels, {len(with_cand)} with an expert candidate"
          + (f", {len(verified)} with a verified binding" if backend is not None else ""))
    print("| kernel | family | candidates | verified binding | time, verdicts |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
