"""The per-shape dispatch on a real GPU (marked gpu: skipped without pycuda and a CUDA device).

The optimize loop tunes the bench's SiLU-and-mul on the GPU; a dispatch over its verified configurations (forced:
any size set where another configuration is faster at all gets it, so the rewrite holds several kernels) is
written into the file, the file compiles, and every kernel of the rewrite passes verification against the
original on every size set at the launch its own spec gives, then is timed interleaved with it.
"""

import shutil
from pathlib import Path

import pytest

from agent_core.agent import dispatch as dsp
from agent_core.agent.loop import AgentOptions, optimize
from agent_core.apply import check_compiles, rewrite_dispatch, template_by_hash
from agent_core.store import Store

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent


def test_a_dispatch_written_into_the_file_verifies_on_the_gpu(tmp_path, monkeypatch):
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import verify_kernels
    src = tmp_path / "silu_and_mul.cu"
    shutil.copy(ROOT / "bench" / "silu_and_mul.cu", src)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    text = src.read_text()
    store = Store(tmp_path / "s.sqlite")
    be = GpuBackend()
    try:
        res = optimize(str(src), "silu_and_mul_kernel", be, store, AgentOptions(budget_per_round=16, max_rounds=1, dispatch=False))
        assert res.best is not None and res.best.template.origin == "expert:act_and_mul"
        r = res.rounds[0]
        sid = r.summary["session_id"]
        orig = r.summary["original_us"]
        cands = [dsp.Candidate(r.template.template_hash, r.template.origin, e.params,
                               [t.median_us for t in e.timings], orig)
                 for e in store.evaluations(session_id=sid) if e.ok]
        d = dsp.choose(cands, (r.template.template_hash, r.summary["best_params"]), r.summary["sizes"],
                       min_gain=0.0)
        assert d is not None and len(d.entries) >= 2

        entries = [(template_by_hash(src, "silu_and_mul_kernel", text, e.template_hash, e.origin, store), e.params)
                   for e in d.entries]
        rw = rewrite_dispatch(text, src, "silu_and_mul_kernel", entries, d)
        check_compiles(rw.text, src, host=True)
        results = verify_kernels(str(src), "silu_and_mul_kernel", text, rw.text, be, rw.kernels)
        for (name, _), (ev, confirmed) in zip(rw.kernels, results):
            assert ev.ok, (name, ev.status, ev.error)
            o = [t.median_us for t in confirmed[0]]
            v = [t.median_us for t in confirmed[1]]
            print(f"[gpu] {name}: " + ", ".join(f"{a:.1f} -> {b:.1f} us" for a, b in zip(o, v)))
            assert all(b < a for a, b in zip(o, v)), name  # every configuration beats the original everywhere
    finally:
        be.close()
        store.close()
