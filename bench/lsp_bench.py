"""Language-server benchmark: a generated 10,000-line .cu file (130 kernels with specs, launch sites and
hard-coded tunables, host code between them), driven over stdio by a pygls client, as an editor would.

Measured on the client side (wall time, so it includes the JSON-RPC round trip and the client's decoding):
  open -> first diagnostics; an edit -> the diagnostics of that version (typing a character on a line, and
  breaking a line, which moves every kernel below it); code lenses after an edit; hover on a kernel name and
  on a tunable; inlay hints for a screenful and for the whole file. On the server side (its
  KERNTUNE_LOG_TIMING lines): from the change's arrival to its diagnostics sent, and the re-parse within it.
  The server's resident memory (VmRSS, VmHWM) before the open, after it, and at the end.

Results for the hovers and hints: with --results (the default when tests/data/stores/examples.sqlite is
there), every kernel gets, in the benchmark's own temporary store, a finished session whose summary is the
recorded row_sum session from that H100 recording (kernel name and file changed), so that hovers render their
tables and inlay hints their values. Those figures are the row_sum kernel's, not the generated kernels': they
are there to exercise the server, and nothing here reports them.

    python bench/lsp_bench.py [--lines 10000] [--edits 40] [--queries 30] [--out bench/lsp_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "tests" / "data" / "stores" / "examples.sqlite"

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

TIMING = re.compile(r"change v(\d+): parse ([\d.]+) ms, (\d+) diagnostics published ([\d.]+) ms")


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


def stats(xs: list[float]) -> dict | None:
    if not xs:
        return None
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


def store_results(store_path: Path, path: Path, text: str) -> str | None:
    """Give every kernel of ``path`` a finished session with the recorded row_sum summary (see the module
    docstring); the recording's description, or None when there is no recording."""
    sys.path.insert(0, str(REPO))
    from agent_core.model import sha256_text
    from agent_core.store import Store

    if not RECORDING.is_file():
        return None
    rec = Store(RECORDING)
    try:
        row = next(r for r in rec.sessions(kernel="row_sum") if r["status"] == "finished")
    finally:
        rec.close()
    store = Store(store_path)
    try:
        h = sha256_text(text)
        for name in re.findall(r"__global__ void (scale_\d+)\(", text):
            s = dict(row["summary"], kernel=name, path=str(path), original_hash=h)
            sid = store.start_session(str(path), name, h, row["template_hash"], row["spec_hash"], row["device"],
                                      row["strategy"], row["budget"], row["seed"], row["origin"])
            store.finish_session(sid, "finished", s)
    finally:
        store.close()
    return f"row_sum session {row['id']} of {RECORDING.relative_to(REPO)} ({row['device']})"


async def main(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="kerntune-bench-"))
    path = tmp / "big.cu"
    text = generate(args.lines)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    results = store_results(tmp / "results.sqlite", path.resolve(), text) if args.results else None

    client = LanguageClient("kerntune-bench", "0")
    diags: dict[int, float] = {}
    server_side: dict[int, tuple[float, float, int]] = {}

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diags(params: lsp.PublishDiagnosticsParams):
        diags[params.version or 0] = time.perf_counter()
        on_diags.last = params

    for m in (lsp.WINDOW_LOG_MESSAGE, lsp.WINDOW_SHOW_MESSAGE):
        client.feature(m)(lambda params: None)
    for m in (lsp.WORKSPACE_CODE_LENS_REFRESH, lsp.WORKSPACE_INLAY_HINT_REFRESH):
        client.feature(m)(lambda params: None)

    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNTUNE_LOG_LEVEL": "warning", "KERNTUNE_LOG_TIMING": "1",
           "KERNTUNE_STORE": str(tmp / "results.sqlite"), "KERNTUNE_WORKDIR": str(tmp / ".kerntune")}
    await client.start_io(sys.executable, "-m", "server", env=env, cwd=str(REPO))
    proc = client._server
    pid = proc.pid

    async def drain_stderr():  # the server's log: its timing lines (and never a full pipe)
        while line := await proc.stderr.readline():
            m = TIMING.search(line.decode("utf-8", "replace"))
            if m:
                server_side[int(m.group(1))] = (float(m.group(4)), float(m.group(2)), int(m.group(3)))
            elif args.verbose:
                sys.stderr.write(line.decode("utf-8", "replace"))

    drain = asyncio.ensure_future(drain_stderr())
    caps = lsp.ClientCapabilities(general=lsp.GeneralClientCapabilities(position_encodings=["utf-16"]))
    await client.initialize_async(lsp.InitializeParams(capabilities=caps, process_id=os.getpid()))
    client.initialized(lsp.InitializedParams())
    await asyncio.sleep(0.2)
    mem_before = rss(pid)
    td = lsp.TextDocumentIdentifier(uri=uri)

    t0 = time.perf_counter()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(
        uri=uri, language_id="cuda-cpp", version=1, text=text)))
    while 1 not in diags:
        await asyncio.sleep(0.001)
    open_ms = (diags[1] - t0) * 1000
    first = on_diags.last
    mem_open = rss(pid)
    lines = text.split("\n")
    target = next(i for i, ln in enumerate(lines) if ln.startswith("__global__ void scale_50("))
    body_line = target + 2  # "  float acc = 0.f;"

    edit_ms: dict[str, list[float]] = {"type a character": [], "break a line": []}
    lens_ms: list[float] = []
    kind_of: dict[int, str] = {}
    version = 1
    lenses = []
    for e in range(args.edits):
        version += 1
        kind = "type a character" if e % 2 == 0 else "break a line"
        kind_of[version] = kind
        ch = lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=body_line, character=2), end=lsp.Position(line=body_line, character=2)),
            text=" " if kind == "type a character" else "\n  ")
        if kind == "break a line":
            body_line += 1
        t0 = time.perf_counter()
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[ch]))
        while version not in diags:
            await asyncio.sleep(0.0002)
        edit_ms[kind].append((diags[version] - t0) * 1000)
        t1 = time.perf_counter()
        lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))
        lens_ms.append((time.perf_counter() - t1) * 1000)
    await asyncio.sleep(0.2)  # the last timing lines

    # hovers and hints: the kernel line did not move (the edits were below it)
    name_char = len("__global__ void ") + 2
    tun = next((d for d in first.diagnostics if d.code == "tunable" and d.range.start.line < target - 50), None)
    hover_kernel, hover_site, hints_screen, hints_all = [], [], [], []
    sample = {}
    for _ in range(args.queries):
        t = time.perf_counter()
        h = await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=lsp.Position(
            line=target, character=name_char)))
        hover_kernel.append((time.perf_counter() - t) * 1000)
        sample["hover_kernel_chars"] = len(h.contents.value) if h else 0
        if tun is not None:
            t = time.perf_counter()
            h = await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=tun.range.start))
            hover_site.append((time.perf_counter() - t) * 1000)
            sample["hover_tunable_chars"] = len(h.contents.value) if h else 0
        t = time.perf_counter()
        got = await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=lsp.Range(
            start=lsp.Position(line=max(0, target - 30), character=0), end=lsp.Position(line=target + 30, character=0))))
        hints_screen.append((time.perf_counter() - t) * 1000)
        sample["hints_screen"] = len(got or [])
        t = time.perf_counter()
        got = await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=lsp.Range(
            start=lsp.Position(line=0, character=0), end=lsp.Position(line=len(lines) + 100, character=0))))
        hints_all.append((time.perf_counter() - t) * 1000)
        sample["hints_whole_file"] = len(got or [])
    mem_after = rss(pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    drain.cancel()

    server_edit = {k: [server_side[v][0] for v, kk in kind_of.items() if kk == k and v in server_side]
                   for k in edit_ms}
    server_parse = [server_side[v][1] for v in kind_of if v in server_side]
    return {
        "file": {"lines": text.count("\n") + 1, "bytes": len(text.encode()), "kernels": text.count("__global__"),
                 "diagnostics": len(first.diagnostics), "lenses": len(lenses)},
        "stored_results": results,
        "open_to_diagnostics_ms": round(open_ms, 1),
        "edit_to_diagnostics": {k: stats(v) for k, v in edit_ms.items()},
        "edit_to_diagnostics_all": stats([x for v in edit_ms.values() for x in v]),
        "server_change_to_diagnostics_sent": {k: stats(v) for k, v in server_edit.items()},
        "server_reparse": stats(server_parse),
        "code_lens_after_edit": stats(lens_ms),
        "hover_kernel_name": stats(hover_kernel),
        "hover_tunable": stats(hover_site),
        "inlay_hints_60_lines": stats(hints_screen),
        "inlay_hints_whole_file": stats(hints_all),
        "answers": sample,
        "server_memory": {"before_open": mem_before, "after_open": mem_open, "at_the_end": mem_after},
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }


def markdown(r: dict) -> str:
    def row(name, s, target=None):
        if not s:
            return f"| {name} | — | — | |"
        ok = "" if target is None else ("yes" if s["median_ms"] < target else "**no**")
        return f"| {name} | {s['median_ms']:.1f} | {s['p95_ms']:.1f} | {ok} |"

    f = r["file"]
    out = [f"{f['lines']} lines, {f['kernels']} kernels, {f['diagnostics']} diagnostics, {f['lenses']} code lenses; "
           f"stored results: {r['stored_results'] or 'none'}", "",
           "| measure (client side unless noted) | median ms | p95 ms | target met |", "|---|--:|--:|:-:|",
           f"| open → diagnostics | {r['open_to_diagnostics_ms']:.0f} | | |"]
    for k, s in r["edit_to_diagnostics"].items():
        out.append(row(f"edit ({k}) → its diagnostics (< 50 ms)", s, 50))
    for k, s in r["server_change_to_diagnostics_sent"].items():
        out.append(row(f"server side: change ({k}) → diagnostics sent", s))
    out.append(row("server side: incremental re-parse", r["server_reparse"]))
    out.append(row("code lenses after an edit (< 50 ms)", r["code_lens_after_edit"], 50))
    out.append(row("hover on a kernel name (< 20 ms)", r["hover_kernel_name"], 20))
    out.append(row("hover on a tunable (< 20 ms)", r["hover_tunable"], 20))
    out.append(row("inlay hints, 60 lines (< 20 ms)", r["inlay_hints_60_lines"], 20))
    out.append(row("inlay hints, whole file (< 20 ms)", r["inlay_hints_whole_file"], 20))
    m = r["server_memory"]
    out += ["", f"Server memory (RSS): {m['before_open']['rss_mib']} MiB before the open, "
                f"{m['after_open']['rss_mib']} MiB with the file open, {m['at_the_end']['rss_mib']} MiB at the end "
                f"(peak {m['at_the_end']['peak_rss_mib']} MiB). Python {r['python']}, {r['cpu_count']} CPUs."]
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10000)
    ap.add_argument("--edits", type=int, default=40)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--no-results", dest="results", action="store_false", help="no stored results (see above)")
    ap.add_argument("--verbose", action="store_true", help="pass the server's log through")
    ap.add_argument("--out", default=str(REPO / "bench" / "lsp_bench.json"))
    a = ap.parse_args()
    res = asyncio.run(main(a))
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    print()
    print(markdown(res))
