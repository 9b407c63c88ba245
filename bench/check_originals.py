"""Before a GPU sitting: every kernel with a spec (bench, corpus, examples) compiled at its original configuration
the way the tuner's reference compile does it (nvcc, exact; the instantiation the spec names or the file shows), on
a machine with nvcc and no GPU. A kernel whose original does not compile, or compiles to no entry the spec's
instantiation names, fails on the GPU before any variant is measured (AITemplate's launcher that nothing
instantiates; a `half2` template argument, 2026-11-29c); this lists them in minutes instead.

    python bench/check_originals.py [--jobs N] [--cache DIR]
"""
import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agent_core.measure.compiler import compile_kernel  # noqa: E402
from agent_core.model import KerntuneError  # noqa: E402
from agent_core.source import instantiation as inst  # noqa: E402
from agent_core.source import spec as S  # noqa: E402
from agent_core.source.cuda_parse import parse_cuda  # noqa: E402


def jobs(root: Path) -> list[tuple]:
    files = sorted(root.glob("bench/corpus/*/*.cu")) + sorted(root.glob("bench/*.cu")) + sorted(root.glob("examples/*.cu"))
    out = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        cf = parse_cuda(text, str(f))
        for k in cf.kernels:
            sp = S.find_spec(cf, k.name)
            if sp is None:
                continue
            if sp.template_args is None and k.template_params:
                try:  # the instantiation the file shows, as tuner.prepare reads it
                    sp.inferred_template_args = inst.spec_instantiation(cf, k, sp)
                except KerntuneError:
                    pass
            out.append((str(f), text, k, sp))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="compiles at once")
    ap.add_argument("--cache", default=None, help="compile cache (default: a fresh temporary folder)")
    a = ap.parse_args()
    cache = a.cache or tempfile.mkdtemp(prefix="kt-originals-")

    def one(j):
        f, text, k, sp = j
        try:
            compile_kernel(text, k.name, template_args=S.instantiation(sp, k), exact=True, cache_dir=cache,
                           source_path=f)
            return None
        except Exception as e:  # noqa: BLE001 (reported, the others go on)
            return f, k.name, str(e).splitlines()[0][:300]

    todo = jobs(Path(__file__).resolve().parents[1])
    with ThreadPoolExecutor(a.jobs) as ex:
        bad = [r for r in ex.map(one, todo) if r]
    print(f"{len(todo)} kernels with a spec; {len(bad)} whose original does not compile as the reference compile does")
    for f, k, why in bad:
        print(f"  {f}: {k}: {why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
