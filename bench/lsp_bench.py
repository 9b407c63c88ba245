"""Language-server benchmark: a generated 10,000-line .cu file (130 kernels with specs, launch sites and
hard-coded tunables, host code between them), driven over stdio the way an editor drives it: a minimal
JSON-RPC client (Content-Length framing, json.loads; the time an answer is taken is when it is parsed, as
VS Code's client would have it), so that what is measured is the server and the pipe, not a Python LSP
client's decoding of a thousand diagnostics into objects.

Measured on the client side (wall time, so it includes the JSON-RPC round trip and the parsing):
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


def cpu_ms(pid: int) -> float:
    """The process's CPU time so far (user + system), in ms: what the server spent, whatever else the machine
    runs (the wall-clock figures include waiting for a CPU on a loaded machine)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


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


class RawClient:
    """Just enough of an LSP client: framed JSON over the server's stdin/stdout, answers to the server's
    requests, notifications kept with the time they were parsed."""

    def __init__(self, proc):
        self.proc = proc
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.on_notification = lambda method, params, t: None
        self.task = asyncio.ensure_future(self._read())

    def _send(self, msg: dict) -> None:
        body = json.dumps(msg).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params) -> object:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        await self.proc.stdin.drain()
        return await fut

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = await out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            body = await out.readexactly(length)
            msg = json.loads(body)
            t = time.perf_counter()
            if "method" in msg and "id" in msg:  # a request from the server
                result = [{}] if msg["method"] == "workspace/configuration" else None
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            elif "method" in msg:
                self.on_notification(msg["method"], msg.get("params"), t)
            else:
                fut = self.pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    if "error" in msg:
                        fut.set_exception(RuntimeError(str(msg["error"])))
                    else:
                        fut.set_result(msg.get("result"))


def pos(line: int, character: int) -> dict:
    return {"line": line, "character": character}


async def main(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="kerntune-bench-"))
    path = tmp / "big.cu"
    text = generate(args.lines)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    results = store_results(tmp / "results.sqlite", path.resolve(), text) if args.results else None

    pythonpath = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "PYTHONPATH": pythonpath, "KERNTUNE_LOG_LEVEL": "warning", "KERNTUNE_LOG_TIMING": "1",
           "KERNTUNE_STORE": str(tmp / "results.sqlite"), "KERNTUNE_WORKDIR": str(tmp / ".kerntune")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "server", env=env, cwd=str(REPO),
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, limit=1 << 26)
    pid = proc.pid
    client = RawClient(proc)
    diags: dict[int, float] = {}
    published: dict[int, dict] = {}
    server_side: dict[int, tuple[float, float, int]] = {}

    def on_notification(method, params, t):
        if method == "textDocument/publishDiagnostics":
            diags[params.get("version") or 0] = t
            published[params.get("version") or 0] = params

    client.on_notification = on_notification
    log_tail: list[str] = []

    async def drain_stderr():  # the server's log: its timing lines (and never a full pipe)
        while line := await proc.stderr.readline():
            text_ = line.decode("utf-8", "replace")
            m = TIMING.search(text_)
            if m:
                server_side[int(m.group(1))] = (float(m.group(4)), float(m.group(2)), int(m.group(3)))
                continue
            log_tail[:] = (log_tail + [text_])[-40:]
            if args.verbose:
                sys.stderr.write(text_)

    drain = asyncio.ensure_future(drain_stderr())
    try:
        await asyncio.wait_for(client.request("initialize", {
            "processId": os.getpid(), "rootUri": None,
            "capabilities": {"general": {"positionEncodings": ["utf-16"]}}}), 60)
    except Exception:
        await asyncio.sleep(0.5)
        sys.stderr.write("the server did not start; its log:\n" + "".join(log_tail))
        raise
    client.notify("initialized", {})
    await asyncio.sleep(0.2)
    mem_before = rss(pid)
    td = {"uri": uri}

    cpu0 = cpu_ms(pid)
    t0 = time.perf_counter()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "cuda-cpp", "version": 1,
                                                            "text": text}})
    # what an editor does right after opening: ask for the lenses (the user sees them, or not)
    await client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    open_lens_ms = (time.perf_counter() - t0) * 1000
    open_lens_cpu = cpu_ms(pid) - cpu0
    while 1 not in diags:
        await asyncio.sleep(0.001)
    open_ms = (diags[1] - t0) * 1000
    first = published[1]
    mem_open = rss(pid)
    lines = text.split("\n")
    target = next(i for i, ln in enumerate(lines) if ln.startswith("__global__ void scale_50("))
    body_line = target + 2  # "  float acc = 0.f;"

    edit_ms: dict[str, list[float]] = {"type a character": [], "break a line": []}
    lens_ms: list[float] = []
    # per change shape (the protocol allows both; several editors send the whole text on every change): the time
    # from sending the change to the answer of the code lens request sent right after it, and to its diagnostics
    change_lens_ms: dict[str, list[float]] = {"incremental": [], "whole document": []}
    change_diag_ms: dict[str, list[float]] = {"incremental": [], "whole document": []}
    kind_of: dict[int, str] = {}
    version = 1
    lenses = []
    doc_lines = list(lines)
    change_cpu: dict[str, float] = {}
    for shape in ("incremental", "whole document"):
        cpu0 = cpu_ms(pid)
        for e in range(args.edits):
            version += 1
            kind = "type a character" if e % 2 == 0 else "break a line"
            kind_of[version] = kind
            new_text = " " if kind == "type a character" else "\n  "
            change = {"range": {"start": pos(body_line, 2), "end": pos(body_line, 2)}, "text": new_text}
            ln = doc_lines[body_line]
            doc_lines[body_line:body_line + 1] = (ln[:2] + new_text + ln[2:]).split("\n")
            if shape == "whole document":
                change = {"text": "\n".join(doc_lines)}
            if kind == "break a line":
                body_line += 1
            t0 = time.perf_counter()
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [change]})
            lenses = await client.request("textDocument/codeLens", {"textDocument": td})
            change_lens_ms[shape].append((time.perf_counter() - t0) * 1000)
            while version not in diags:
                await asyncio.sleep(0.0002)
            change_diag_ms[shape].append((diags[version] - t0) * 1000)
            if shape == "incremental":
                edit_ms[kind].append((diags[version] - t0) * 1000)
            t1 = time.perf_counter()
            lenses = await client.request("textDocument/codeLens", {"textDocument": td})
            lens_ms.append((time.perf_counter() - t1) * 1000)
        change_cpu[shape] = round((cpu_ms(pid) - cpu0) / args.edits, 1)
    await asyncio.sleep(0.2)  # the last timing lines
    assert published[version]["version"] == version

    # hovers and hints: the kernel line did not move (the edits were below it)
    name_char = len("__global__ void ") + 2
    tun = next((d for d in first["diagnostics"] if d.get("code") == "tunable"
                and d["range"]["start"]["line"] < target - 50), None)
    hover_kernel, hover_site, hints_screen, hints_all = [], [], [], []
    sample = {}
    for _ in range(args.queries):
        t = time.perf_counter()
        h = await client.request("textDocument/hover", {"textDocument": td, "position": pos(target, name_char)})
        hover_kernel.append((time.perf_counter() - t) * 1000)
        sample["hover_kernel_chars"] = len(h["contents"]["value"]) if h else 0
        if tun is not None:
            t = time.perf_counter()
            h = await client.request("textDocument/hover", {"textDocument": td, "position": tun["range"]["start"]})
            hover_site.append((time.perf_counter() - t) * 1000)
            sample["hover_tunable_chars"] = len(h["contents"]["value"]) if h else 0
        t = time.perf_counter()
        got = await client.request("textDocument/inlayHint", {"textDocument": td, "range": {
            "start": pos(max(0, target - 30), 0), "end": pos(target + 30, 0)}})
        hints_screen.append((time.perf_counter() - t) * 1000)
        sample["hints_screen"] = len(got or [])
        t = time.perf_counter()
        got = await client.request("textDocument/inlayHint", {"textDocument": td, "range": {
            "start": pos(0, 0), "end": pos(len(lines) + 100, 0)}})
        hints_all.append((time.perf_counter() - t) * 1000)
        sample["hints_whole_file"] = len(got or [])
    mem_after = rss(pid)
    await client.request("shutdown", None)
    client.notify("exit", None)
    await proc.wait()
    drain.cancel()
    client.task.cancel()

    server_edit = {k: [server_side[v][0] for v, kk in kind_of.items() if kk == k and v in server_side]
                   for k in edit_ms}
    server_parse = [server_side[v][1] for v in kind_of if v in server_side]
    return {
        "file": {"lines": text.count("\n") + 1, "bytes": len(text.encode()), "kernels": text.count("__global__"),
                 "diagnostics": len(first["diagnostics"]), "lenses": len(lenses or [])},
        "stored_results": results,
        "open_to_diagnostics_ms": round(open_ms, 1),
        "open_to_first_code_lens_ms": round(open_lens_ms, 1),
        "server_cpu_ms": {"open_to_first_code_lens": round(open_lens_cpu, 1),
                          "per_change_with_diagnostics_and_two_lens_answers": change_cpu},
        "load_average": os.getloadavg(),
        "change_to_next_code_lens": {k: stats(v) for k, v in change_lens_ms.items()},
        "change_to_diagnostics_by_shape": {k: stats(v) for k, v in change_diag_ms.items()},
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
           f"| open → diagnostics | {r['open_to_diagnostics_ms']:.0f} | | |",
           f"| open → first code lens (≤ 500 ms) | {r['open_to_first_code_lens_ms']:.0f} | | "
           f"{'yes' if r['open_to_first_code_lens_ms'] <= 500 else '**no**'} |"]
    for k, s in r["change_to_next_code_lens"].items():
        out.append(row(f"change ({k}) → the next code lens answered (≤ 50 ms)", s, 50))
    for k, s in r["change_to_diagnostics_by_shape"].items():
        out.append(row(f"change ({k}) → its diagnostics", s))
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
    c = r["server_cpu_ms"]
    out += ["", f"Server CPU time (user + system, from /proc; what the server spent whatever else the machine ran): "
                f"{c['open_to_first_code_lens']:.0f} ms from the open to the first code lens answered; per change, "
                "with its diagnostics and two code lens answers: "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in c["per_change_with_diagnostics_and_two_lens_answers"].items())
                + f". Load average during the run: {', '.join(f'{x:.1f}' for x in r['load_average'])}."]
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
