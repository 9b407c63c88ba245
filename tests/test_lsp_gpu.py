"""The whole editor flow against a real GPU, through the LSP (marked gpu: skipped without one): open a file,
Optimize kernel with progress, the result in diagnostics / lenses / hover / hints, Apply best, and the applied
file compiles and runs faster. Figures are printed as `[gpu-lsp] ...` (run with -s)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.test_lsp_server import (ENV, REPO, apply_text_edits, diagnostics_for, execute, hints, hover_text, lenses,
                                   lsp_server, open_doc, progress_end, wait_until)

pytestmark = pytest.mark.gpu


async def test_optimize_and_apply_on_the_gpu_through_the_lsp(tmp_path: Path):
    src = tmp_path / "silu.cu"
    shutil.copy(REPO / "examples" / "silu.cu", src)
    text = src.read_text(encoding="utf-8")
    import os
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # pycuda's folder
    env = {**ENV, "PYTHONPATH": pythonpath, "KERNTUNE_BACKEND": "gpu", "KERNTUNE_STORE": str(tmp_path / "results.sqlite"),
           "KERNTUNE_WORKDIR": str(tmp_path / ".kerntune")}
    lines = text.split("\n")
    row = next(i for i, ln in enumerate(lines) if "void silu(" in ln)
    name_pos = lsp.Position(line=row, character=lines[row].index("silu(") + 2)
    async with lsp_server(env) as client:
        uri = open_doc(client, src)
        await diagnostics_for(client, uri)
        t0 = time.monotonic()
        res = await execute(client, "kerntune.optimize", uri, "silu", {"strategy": "tpe", "budget": 40, "rounds": 2})
        assert res["status"] == "started", res
        token = res["token"]
        end = await wait_until(lambda: progress_end(client, token), "the end of tuning on the GPU", 400)
        wall = time.monotonic() - t0
        reports = [r for r in client.progress_reports[token] if isinstance(r, lsp.WorkDoneProgressReport)]
        assert reports and "finished" in end.message, end.message
        print(f"[gpu-lsp] optimize silu: {len(reports)} progress reports, {wall:.0f} s; end: {end.message}")
        diags = await wait_until(lambda: [d for d in client.diagnostics.get(uri, []) if d.code == "result"],
                                 "the result diagnostic")
        print(f"[gpu-lsp] diagnostic: {diags[0].message}")
        md = await hover_text(client, uri, name_pos)
        assert "NVIDIA H100" in md or "NVIDIA" in md
        print("[gpu-lsp] hover:\n" + md)
        labels = [h.label for h in await hints(client, uri)]
        print(f"[gpu-lsp] inlay hints: {labels}")
        assert labels and all(lb.startswith("→ ") for lb in labels)
        assert any(t.startswith("Apply best") for t, _ in await lenses(client, uri))
        applied = await execute(client, "kerntune.applyBest", uri, "silu")
        assert applied["applied"] is True, applied
        new = apply_text_edits(text, client.applied_edits[-1])
    src.write_text(new, encoding="utf-8")
    print("[gpu-lsp] applied:\n" + "\n".join(ln for ln in new.split("\n") if "int blocks" in ln or "int threads" in ln))
    # the applied file compiles and is verified + faster on the GPU (the CLI's verify_rewrite)
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import verify_rewrite
    be = GpuBackend()
    try:
        ev, confirmed = verify_rewrite(str(src), "silu", text, new, be)
    finally:
        be.close()
    assert ev.ok, ev.error
    o = [t.median_us for t in confirmed[0]]
    b = [t.median_us for t in confirmed[1]]
    print("[gpu-lsp] applied file vs original, interleaved: " + ", ".join(f"{x:.1f} -> {y:.1f} us" for x, y in zip(o, b)))
    assert all(y < x for x, y in zip(o, b))
