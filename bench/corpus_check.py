"""How many corpus kernels kerntune reads: `prepare()` (what `tune` and `optimize` call) over every variant of
bench/corpus/corpus.toml, one line per variant (ok, with what it found, or refused and why) and a total.

    PYTHONPATH=. python bench/corpus_check.py [--structural]

With --structural a variant also counts as refused when it has no structural template (the tunable sites of
the user's own kernel), and says why. With --compile (needs nvcc) the original kernel is also compiled the way a
session compiles its reference (for sm_90, the spec's template_args choosing the instantiation); a compile error
counts as refused.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent_core.measure.compiler import compile_kernel  # noqa: E402
from agent_core.model import KerntuneError  # noqa: E402
from agent_core.search.tuner import prepare  # noqa: E402
from agent_core.source import spec as spec_mod  # noqa: E402

CORPUS = REPO / "bench" / "corpus"


def check(v: dict, structural: bool, compile_: bool) -> tuple[bool, str]:
    try:
        prep = prepare(str(CORPUS / v["file"]), v["kernel"], use_workspace_files=False)
        if compile_:
            compile_kernel(prep.text, prep.kernel.name, arch="sm_90", include_dirs=[str(Path(prep.path).parent)],
                           template_args=spec_mod.instantiation(prep.spec, prep.kernel), source_path=prep.path)
    except KerntuneError as e:
        return False, e.message.splitlines()[0]
    st = getattr(prep, "structural", None)
    if st is None:
        why = getattr(prep, "structural_why", None)
        why = why.message.splitlines()[0] if why is not None else "?"
        return not structural, f"no structural template ({why})"
    dom = ", ".join(f"{n}={p.values}" if len(p.values) <= 8 else f"{n}={p.values[0]}..{p.values[-1]}"
                    for n, p in st.space.params.items())
    return True, f"structural: {dom}"


def main(argv: list[str]) -> int:
    structural, compile_ = "--structural" in argv, "--compile" in argv
    variants = tomllib.loads((CORPUS / "corpus.toml").read_text())["variant"]
    ok = 0
    for v in variants:
        good, what = check(v, structural, compile_)
        ok += good
        print(f"{'ok     ' if good else 'refused'} {v['file']}:{v['kernel']}: {what}")
    print(f"total: {ok} of {len(variants)} prepared, {len(variants) - ok} refused")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
