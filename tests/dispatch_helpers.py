"""Per-shape dispatches built by hand for the tests (test_apply writes and compiles them; test_dispatch_gpu runs them)."""

from pathlib import Path


def rewrite_dispatch_of(path: Path, kernel: str, cfgs: list[dict | None], inputs: list[str] | None = None):
    """(rewrite, its kernel names, the rewrite template) of a dispatch whose entries are the kernel's rewrite template
    at ``cfgs`` (None: the original kernel), the first entry serving the first size set, the others the rest; its
    rules read ``inputs[0]`` (default: the first size name)."""
    from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, input_value, original_entry, select
    from agent_core.search.tuner import prepare
    from agent_core.templating.rewrites import compose
    from agent_core.apply import rewrite_dispatch
    text = path.read_text()
    prep = prepare(str(path), kernel, text, use_workspace_files=False)
    t = compose(prep.cf, kernel, prep.spec, prep.structural).template
    orig = prep.structural.space.original_config()
    entries = [original_entry(orig) if c is None else Entry(t.template_hash, t.origin, c) for c in cfgs]
    sizes = [dict(s) for s in prep.spec.sizes]
    name = inputs[0] if inputs else next(iter(sizes[0]))
    first = input_value(name, sizes[0])
    rules = [Rule([Bound(name, first - 1, None)], 0), Rule([Bound(name, None, 100)], 1), Rule([], len(cfgs) - 1)]
    n = len(sizes)
    d = Dispatch(rules=rules, entries=entries, winner=entries[0], sizes=sizes, serve=[], original_us=[1.0] * n,
                 tuned_us=[1.0] * n, single_original_us=[1.0] * n, single_us=[1.0] * n, inputs=list(inputs or []))
    d.serve = [select(d, s) for s in sizes]
    rw = rewrite_dispatch(text, path, kernel, [(t if c is not None else None, c or orig) for c in cfgs], d)
    return rw, [n for n, _ in rw.kernels], t


def twin_dispatch_of(path: Path, kernel: str, cfg_twin: dict, cfg_base: dict, bound: tuple[str, int]):
    """(rewrite, its kernel names, the twin template) of a dispatch whose default is the kernel's first rewrite
    twin (cluster_split) at ``cfg_twin`` and whose other entry, for size sets with ``bound[0] <= bound[1]``, is the
    rewrite template itself at ``cfg_base``."""
    from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, select
    from agent_core.search.tuner import prepare
    from agent_core.templating.rewrites import compose
    from agent_core.apply import rewrite_dispatch
    text = path.read_text()
    prep = prepare(str(path), kernel, text, use_workspace_files=False)
    got = compose(prep.cf, kernel, prep.spec, prep.structural)
    base, twin = got.template, got.twins[0]
    entries = [Entry(twin.template_hash, twin.origin, cfg_twin), Entry(base.template_hash, base.origin, cfg_base)]
    sizes = [dict(s) for s in prep.spec.sizes]
    n = len(sizes)
    d = Dispatch(rules=[Rule([Bound(bound[0], None, bound[1])], 1), Rule([], 0)], entries=entries, winner=entries[0],
                 sizes=sizes, serve=[], original_us=[1.0] * n, tuned_us=[1.0] * n, single_original_us=[1.0] * n,
                 single_us=[1.0] * n)
    d.serve = [select(d, s) for s in sizes]
    rw = rewrite_dispatch(text, path, kernel, [(twin, cfg_twin), (base, cfg_base)], d)
    return rw, [k for k, _ in rw.kernels], twin


def copy_with_recording(tmp_path: Path, src: Path, recording: Path, name: str | None = None) -> tuple[Path, Path]:
    """(a copy of ``src`` in ``tmp_path`` (named ``name``), a copy of the recorded store ``recording`` whose sessions
    of ``src``'s file name point at that copy): a recorded optimize replayed on a file the test may change."""
    import shutil
    import sqlite3
    f = tmp_path / (name or src.name)
    shutil.copy(src, f)
    store = tmp_path / "rec.sqlite"
    shutil.copy(recording, store)
    with sqlite3.connect(store) as c:
        c.execute("UPDATE sessions SET path = ? WHERE path LIKE ?", (str(f.resolve()), f"%/{src.name}"))
    return f, store


def applied_from_recording(tmp_path: Path, src: Path, recording: Path, kernel: str):
    """(the copy of ``src``, its text, the rewrite ``apply`` makes of it) from the best result the recording holds for
    ``kernel`` (falling back to the original where it wins), as ``kerntune apply`` writes it."""
    from agent_core.apply import rewrite_result
    from agent_core.search.tuner import result_summary
    from agent_core.store import Store
    f, db = copy_with_recording(tmp_path, src, recording)
    text = f.read_text()
    st = Store(db)
    try:
        s = result_summary(st, str(f), kernel, text)
        assert s and s.get("best_params"), "the recording holds no result"
        rw, _ = rewrite_result(str(f), kernel, text, s, st, fallback=True)
    finally:
        st.close()
    return f, text, rw
