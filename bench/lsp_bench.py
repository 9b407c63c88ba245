"""Language-server benchmark: a generated 10,000-line .cu file, driven over stdio by a pygls client.

Measures (wall time on the client side, so it includes the JSON-RPC round trip):
  open -> first diagnostics; an edit -> its diagnostics (publishDiagnostics for that version); code lenses
  after an edit; hover on a kernel name and on a tunable; inlay hints for a screenful and for the whole file;
  and the server's resident memory (VmRSS / VmHWM). Writes a JSON of the figures.

    python bench/lsp_bench.py --out bench/lsp_bench.json [--lines 10000] [--edits 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parent.parent

UNIT = """\
/* kerntune:
args  = ["out: out f32[n]", "x: in f32[n]", "n: i32 = n"]
sizes = [{{ n = 1048576 }}, {{ n = 1000003 }}]
grid  = "cdiv(n, 256)"
block = "256"
*/
__global__ void scale_{i}(float* out, const float* x, int n) {{
  int i = blockIdx.x * 256 + threadIdx.x;
  float acc = 0.f;
  #pragma unroll 4
  for (int k = 0; k < 8; ++k) acc += x[(i + k) % n];
  if (i < n) out[i] = 2.0f * x[i] + acc * {i}.0f;
}}

void run_{i}(float* out, const float* x, int n) {{
  scale_{i}<<<(n + 255) / 256, 256>>>(out, x, n);
}}
"""

FILLER = """\
static int host_helper_{i}_{j}(int a, int b) {{
  // host code between kernels: parsed, not tuned (µs)
  int s = 0;
  for (int k = 0; k < a; ++k) s += k * b;
  return s;
}}
"""


def generate(lines: int) -> str:
    parts, n, i = ["#include <cuda_runtime.h>\n"], 1, 0
    while n < lines:
        unit = UNIT.format(i=i)
        parts.append(unit)
        n += unit.count("\n")
        for j in range(10):
            if n >= lines:
                break
            f = FILLER.format(i=i, j=j)
            parts.append(f)
            n += f.count("\n")
        i += 1
    return "".join(parts)


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs), 2), "p95_ms": round(xs[int(0.95 * (len(xs) - 1))], 2),
            "max_ms": round(xs[-1], 2), "n": len(xs)}


def rss(pid: int) -> dict:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":", 1)
                out[k] = round(int(v.split()[0]) / 1024, 1)
    except OSError:
        pass
    return {"rss_mib": out.get("VmRSS"), "peak_rss_mib": out.get("VmHWM")}


async def main(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="kerntune-bench-"))
    path = tmp / "big.cu"
    text = generate(args.lines)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client = LanguageClient("kerntune-bench", "0")
    diags: dict[int, float] = {}
    got = asyncio.Event()

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diags(params: lsp.PublishDiagnosticsParams):
        diags[params.version or 0] = time.perf_counter()
        on_diags.last = params
        got.set()

    for m in (lsp.WINDOW_LOG_MESSAGE, lsp.WINDOW_SHOW_MESSAGE):
        client.feature(m)(lambda params: None)

    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNTUNE_LOG_LEVEL": "warning"}
    await client.start_io(sys.executable, "-m", "server", env=env, cwd=str(REPO))
    pid = client._server.pid
    caps = lsp.ClientCapabilities(general=lsp.GeneralClientCapabilities(position_encodings=["utf-16"]))
    await client.initialize_async(lsp.InitializeParams(capabilities=caps, process_id=os.getpid()))
    client.initialized(lsp.InitializedParams())
    mem_before = rss(pid)
    td = lsp.TextDocumentIdentifier(uri=uri)

    t0 = time.perf_counter()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(
        uri=uri, language_id="cuda-cpp", version=1, text=text)))
    while 1 not in diags:
        await asyncio.sleep(0.001)
    open_ms = (diags[1] - t0) * 1000
    first = on_diags.last
    lines = text.split("\n")
    target = next(i for i, ln in enumerate(lines) if ln.startswith("__global__ void scale_50("))
    body_line = target + 2  # "  float acc = 0.f;"

    edit_ms, lens_ms = [], []
    version = 1
    for e in range(args.edits):
        version += 1
        ch = lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=body_line, character=2), end=lsp.Position(line=body_line, character=2)),
            text=" " if e % 2 == 0 else "\n")
        t0 = time.perf_counter()
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[ch]))
        while version not in diags:
            await asyncio.sleep(0.0005)
        edit_ms.append((diags[version] - t0) * 1000)
        t1 = time.perf_counter()
        lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))
        lens_ms.append((time.perf_counter() - t1) * 1000)

    # the current text's lines, for hover / hint positions
    kernel_line = target + 1 + 0  # unchanged: edits were below the kernel line
    name_char = len("__global__ void ") + 2
    hover_kernel, hover_site, hints_screen, hints_all = [], [], [], []
    tun = next((d for d in first.diagnostics if d.code == "tunable" and d.range.start.line > target), None)
    for _ in range(args.queries):
        t = time.perf_counter()
        await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=lsp.Position(
            line=target, character=name_char)))
        hover_kernel.append((time.perf_counter() - t) * 1000)
        if tun is not None:
            t = time.perf_counter()
            await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=tun.range.start))
            hover_site.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=lsp.Range(
            start=lsp.Position(line=max(0, target - 30), character=0), end=lsp.Position(line=target + 30, character=0))))
        hints_screen.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=lsp.Range(
            start=lsp.Position(line=0, character=0), end=lsp.Position(line=len(lines) + 100, character=0))))
        hints_all.append((time.perf_counter() - t) * 1000)
    mem_after = rss(pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {
        "file": {"lines": text.count("\n") + 1, "bytes": len(text.encode()), "kernels": text.count("__global__"),
                 "diagnostics_on_open": len(first.diagnostics), "lenses": len(lenses)},
        "open_to_diagnostics_ms": round(open_ms, 1),
        "edit_to_diagnostics": stats(edit_ms),
        "code_lens_after_edit": stats(lens_ms),
        "hover_kernel_name": stats(hover_kernel),
        "hover_tunable": stats(hover_site) if hover_site else None,
        "inlay_hints_60_lines": stats(hints_screen),
        "inlay_hints_whole_file": stats(hints_all),
        "server_memory_before_open": mem_before,
        "server_memory_after": mem_after,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10000)
    ap.add_argument("--edits", type=int, default=30)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--out", default=str(REPO / "bench" / "lsp_bench.json"))
    a = ap.parse_args()
    res = asyncio.run(main(a))
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
