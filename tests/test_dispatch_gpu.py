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


def test_a_structural_dispatch_with_the_original_kept_verifies_kernel_by_kernel_on_the_gpu(tmp_path, monkeypatch):
    """examples/row_sum.cu, its own structural template tuned on the GPU (no experts). The loop's answer (one
    configuration, or a dispatch that may keep the original on some size set) is written and verified when it is
    a dispatch; then a dispatch of three kernels is written whatever the GPU measured: the winner under the
    kernel's name, the original kernel kept as `row_sum__orig` for the 8192-row size set, and a verified
    configuration with another BLOCK (its own #define around it, push_macro/pop_macro) for the other one. The file
    compiles, every kernel passes verification against the original on every size set at its own spec's launch,
    and is timed interleaved with it (printed)."""
    from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, original_entry, select
    from agent_core.apply import rewrite_result
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import result_summary, verify_kernels
    src = tmp_path / "row_sum.cu"
    shutil.copy(ROOT / "examples" / "row_sum.cu", src)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    text = src.read_text()
    store = Store(tmp_path / "s.sqlite")
    be = GpuBackend()

    def verify(new_text, kernels, what):
        check_compiles(new_text, src, host=True)
        results = verify_kernels(str(src), "row_sum", text, new_text, be, kernels)
        for (name, _), (ev, confirmed) in zip(kernels, results):
            assert ev.ok, (what, name, ev.status, ev.error)
            o = [t.median_us for t in confirmed[0]]
            v = [t.median_us for t in confirmed[1]]
            print(f"[gpu] {what} {name}: " + ", ".join(f"{a:.1f} -> {b:.1f} us" for a, b in zip(o, v)))
    try:
        res = optimize(str(src), "row_sum", be, store, AgentOptions(budget_per_round=12, max_rounds=1,
                                                                     use_experts=False))
        r = res.rounds[0]
        t = r.template
        assert t.origin == "structural"
        if res.dispatch is not None:
            d = res.dispatch
            print("[gpu] the loop's dispatch: " + "; ".join(dsp.describe(d)) + " | kept: " + "; ".join(d.kept))
            s = result_summary(store, str(src), "row_sum", text)
            if not d.applies_nothing:
                rw, _ = rewrite_result(src, "row_sum", text, s, store)
                verify(rw.text, rw.kernels, "loop")
        else:
            print("[gpu] the loop's answer: one configuration", r.summary["best_params"])
        winner = r.summary["best_params"]
        ok = [e.params for e in store.evaluations(session_id=r.summary["session_id"]) if e.ok]
        other = next(p for p in ok if p["BLOCK"] != winner["BLOCK"] and p["BLOCK"] != 128)
        orig = t.space.original_config()
        entries = [Entry(t.template_hash, "structural", winner), original_entry(orig),
                   Entry(t.template_hash, "structural", other)]
        sizes = r.summary["sizes"]
        n = len(sizes)
        d = Dispatch(rules=[Rule([Bound("rows", 2862, None)], 1), Rule([Bound("cols", 4097, None)], 2), Rule([], 0)],
                     entries=entries, winner=entries[0], sizes=sizes, serve=[], original_us=[1.0] * n,
                     tuned_us=[1.0] * n, single_original_us=[1.0] * n, single_us=[1.0] * n)
        d.serve = [select(d, s) for s in sizes]
        assert sorted(d.serve) == [1, 2]  # 8192 x 4096: the original; 1000 x 4099: the other configuration
        from agent_core.apply import rewrite_dispatch
        rw = rewrite_dispatch(text, src, "row_sum", [(t, winner), (None, orig), (t, other)], d)
        assert [name for name, _ in rw.kernels][1] == "row_sum__orig"
        assert f'#define BLOCK {other["BLOCK"]}' in rw.text and '#pragma push_macro("BLOCK")' in rw.text
        verify(rw.text, rw.kernels, "forced")
    finally:
        be.close()
        store.close()


@pytest.mark.parametrize("name, kernel, cfgs", [
    ("bias_gelu_residual_fp16.cu", "bias_gelu_residual_kernel",
     [{"BLOCK": 96, "ITEMS": 2, "VEC": 8, "MIN_BLOCKS": 3}, {"BLOCK": 352, "ITEMS": 1, "VEC": 2, "MIN_BLOCKS": 4}, None]),
    ("softmax_three_pass_f32.cu", "softmax_three_pass",
     [{"THREADS": 256, "VEC": 4, "CACHE_ROW": 1, "FAST_MATH": 1, "MIN_BLOCKS": 1},
      {"THREADS": 64, "VEC": 1, "CACHE_ROW": 0, "FAST_MATH": 0, "MIN_BLOCKS": 1}, None]),
])
def test_a_rewrite_dispatch_verifies_kernel_by_kernel_on_the_gpu(tmp_path, monkeypatch, name, kernel, cfgs):
    """Two configurations of the kernel's rewrite template and the original kernel, written as a per-shape dispatch
    (each rewrite configuration as the rewritten kernel alone, beside the original): the file compiles and every
    kernel passes verification against the original on every size set at its own spec's launch (the spec's sizes,
    not only the ones its rule gives it), then is timed interleaved with it (printed)."""
    from tests.dispatch_helpers import rewrite_dispatch_of
    src = tmp_path / name
    shutil.copy(ROOT / "bench" / "corpus" / "other" / name, src)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    text = src.read_text()
    rw, names, _ = rewrite_dispatch_of(src, kernel, cfgs)
    _verifies_kernel_by_kernel(src, kernel, text, rw)


def test_a_templated_kernels_rewrite_dispatch_by_the_launchs_product_verifies_on_the_gpu(tmp_path, monkeypatch):
    """GELU-tanh, `template <int BLOCK_SIZE>` launched with n = rows * cols only: two rewrite configurations, each
    the plain kernel of its own instantiation (<736>, <256>), chosen by `n` at the launch, beside the template (the
    original entry). The file compiles and every kernel verifies against the original on every size set."""
    from tests.dispatch_helpers import rewrite_dispatch_of
    src = tmp_path / "gelu_tanh_gridstride_bf16.cu"
    shutil.copy(ROOT / "bench" / "corpus" / "other" / src.name, src)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    text = src.read_text()
    big = {"BLOCK_SIZE": 736, "ITEMS": 1, "VEC": 4, "LOAD_HINT": 1, "FAST_MATH": 0, "MIN_BLOCKS": 1}
    rw, names, _ = rewrite_dispatch_of(src, "gelu_tanh_kernel", [big, {**big, "BLOCK_SIZE": 256, "ITEMS": 2}, None],
                                       inputs=["rows * cols"])
    assert "gelu_tanh_kernel" in names and len(names) == 3
    _verifies_kernel_by_kernel(src, "gelu_tanh_kernel", text, rw)


def _verifies_kernel_by_kernel(src, kernel: str, text: str, rw) -> None:
    """The dispatch ``rw`` written over ``text`` compiles with its host code, and every kernel of it verifies
    against the original on every size set at its own spec's launch; their interleaved timings are printed."""
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import verify_kernels
    check_compiles(rw.text, src, host=True)
    be = GpuBackend()
    try:
        results = verify_kernels(str(src), kernel, text, rw.text, be, rw.kernels)
        for (kname, _), (ev, confirmed) in zip(rw.kernels, results):
            assert ev.ok, (kname, ev.status, ev.error)
            o = [t.median_us for t in confirmed[0]]
            v = [t.median_us for t in confirmed[1]]
            print(f"[gpu] {kname}: " + ", ".join(f"{a:.1f} -> {b:.1f} us" for a, b in zip(o, v)))
    finally:
        be.close()


def test_a_cluster_twin_dispatch_verifies_kernel_by_kernel_on_the_gpu(tmp_path, monkeypatch):
    """The column sum's cluster_split twin (8 blocks of a thread-block cluster, distributed shared memory) beside its
    in-block split_reduction, written as a per-shape dispatch: the file compiles and both kernels verify against
    the original on every size set (odd column counts included), then are timed interleaved with it (printed)."""
    from tests.dispatch_helpers import twin_dispatch_of
    src = tmp_path / "column_sum_f32.cu"
    shutil.copy(ROOT / "bench" / "corpus" / "other" / src.name, src)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    text = src.read_text()
    rw, _, _ = twin_dispatch_of(src, "column_sum_kernel", {"BLOCK": 32, "SPLIT": 8, "CLUSTER": 8},
                                {"BLOCK": 64, "SPLIT": 16}, ("rows", 178))
    _verifies_kernel_by_kernel(src, "column_sum_kernel", text, rw)
