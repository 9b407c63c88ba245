// Drives `python -m server` through vscode-jsonrpc, VS Code's own message parser: any byte on the
// server's stdout that is not an LSP message makes the reader fail ("Header must provide a Content-Length
// property"), which Python clients tolerate. Also checks the extension's server-command resolution.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";
import fs from "node:fs";
import os from "node:os";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");
const client = path.join(repo, "client-vscode");
const require = createRequire(path.join(client, "package.json"));
const rpc = require("vscode-jsonrpc/node");
const python = process.env.KERNTUNE_PYTHON || "python3";

function startServer(env = {}, args = ["-m", "server"], answers = {}) {
  const proc = spawn(python, args, {
    cwd: repo,
    env: { ...process.env, PYTHONPATH: repo, KERNTUNE_BACKEND: "", ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d.toString()));
  const reader = new rpc.StreamMessageReader(proc.stdout);
  const writer = new rpc.StreamMessageWriter(proc.stdin);
  const readerErrors = [];
  reader.onError((e) => readerErrors.push(e));
  const conn = rpc.createMessageConnection(reader, writer);
  const notes = [];
  conn.onNotification((method, params) => notes.push({ method, params }));
  // $/progress is not a plain notification to vscode-jsonrpc: it goes to the token's handler, if any
  conn.onUnhandledProgress((params) => notes.push({ method: "$/progress", params }));
  conn.onRequest((method, params) => {
    if (method in answers) return answers[method](params);
    if (method === "workspace/configuration") return [{ tuning: { budget: 4 } }];
    if (method === "window/workDoneProgress/create") return null;
    if (method === "workspace/codeLens/refresh" || method === "workspace/inlayHint/refresh") return null;
    return new rpc.ResponseError(-32601, `unhandled ${method}`);
  });
  conn.listen();
  return { proc, conn, notes, readerErrors, stderr: () => stderr };
}

async function waitFor(pred, ms = 20000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    const v = pred();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error("timed out waiting");
}

test("server speaks clean LSP on stdout through vscode-jsonrpc", { timeout: 90000 }, async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kerntune-node-"));
  const file = path.join(tmp, "kernels.cu");
  const text = fs.readFileSync(path.join(here, "fixtures", "kernels.cu"), "utf8");
  fs.writeFileSync(file, text);
  const uri = pathToFileURL(file).href;
  const s = startServer({ KERNTUNE_CACHE: path.join(tmp, "cache") });
  try {
    const init = await s.conn.sendRequest("initialize", {
      processId: process.pid,
      rootUri: pathToFileURL(tmp).href,
      capabilities: {
        window: { workDoneProgress: true, showDocument: { support: true } },
        workspace: { configuration: true, applyEdit: true },
        general: { positionEncodings: ["utf-16"] },
      },
    });
    assert.equal(init.serverInfo.name, "kerntune");
    assert.ok(init.capabilities.codeLensProvider);
    assert.ok(init.capabilities.hoverProvider);
    assert.ok(init.capabilities.inlayHintProvider);
    assert.ok(init.capabilities.executeCommandProvider.commands.includes("kerntune.optimize"));
    await s.conn.sendNotification("initialized", {});
    await s.conn.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "cuda-cpp", version: 1, text },
    });
    const diags = await waitFor(() => s.notes.find((n) => n.method === "textDocument/publishDiagnostics"));
    assert.equal(diags.params.uri, uri);
    const codes = diags.params.diagnostics.map((d) => d.code);
    assert.ok(codes.includes("missing-spec"), `diagnostics: ${JSON.stringify(codes)}`);

    const lenses = await s.conn.sendRequest("textDocument/codeLens", { textDocument: { uri } });
    const titles = lenses.map((l) => l.command.title);
    assert.equal(titles.filter((t) => t === "Optimize kernel").length, 2);
    // the scale kernel starts on line 9 (0-based), after the spec comment
    assert.ok(lenses.some((l) => l.range.start.line === 9 && l.command.arguments[1] === "scale"));

    const hover = await s.conn.sendRequest("textDocument/hover", {
      textDocument: { uri },
      position: { line: 9, character: 18 },
    });
    assert.match(hover.contents.value, /scale/);

    // edit inside the line with the emoji (UTF-16 positions), then an invalid edit: the server must survive
    await s.conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: 2 },
      contentChanges: [{ range: { start: { line: 10, character: 2 }, end: { line: 10, character: 2 } }, text: "/* ü */" }],
    });
    await s.conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: 3 },
      contentChanges: [{ text: "__global__ void broken(int* p { p[0] = 1; " }],
    });
    const lenses2 = await s.conn.sendRequest("textDocument/codeLens", { textDocument: { uri } });
    assert.ok(Array.isArray(lenses2));

    // Optimize without a GPU: a clear answer, nothing on stdout (nvcc and the GPU probe inherit fd 1)
    await s.conn.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: 4 },
      contentChanges: [{ text }],
    });
    const res = await s.conn.sendRequest("workspace/executeCommand", {
      command: "kerntune.optimize",
      arguments: [uri, "scale"],
    });
    assert.ok(["no-gpu", "error"].includes(res.status), JSON.stringify(res));
    if (res.status === "no-gpu") assert.match(res.message, /no CUDA device/);

    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
    const code = await new Promise((r) => s.proc.on("exit", r));
    assert.equal(code, 0);
    assert.deepEqual(s.readerErrors.map(String), [], "stdout carried something that is not an LSP message");
  } finally {
    s.proc.kill();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test("extension resolves the server command from its settings", () => {
  const { serverLaunch } = require(path.join(client, "dist", "serverCommand.js"));
  const base = { command: [], interpreter: "", env: {}, logLevel: "info" };
  assert.deepEqual(serverLaunch(base, {}).command, "kerntune");
  assert.deepEqual(serverLaunch(base, {}).args, ["lsp"]);
  const py = serverLaunch({ ...base, interpreter: "/venv/bin/python" }, {});
  // -P: the workspace folder (the server's working directory) is not put on sys.path
  assert.deepEqual([py.command, ...py.args], ["/venv/bin/python", "-P", "-m", "server"]);
  assert.match(py.lookedIn, /\/venv\/bin\/python \(kerntune.interpreter\)/);
  // ~ and ${userHome} are expanded (settings do not go through a shell)
  const home = serverLaunch({ ...base, interpreter: "~/.kerntune/bin/python" }, {}, undefined, "/home/u");
  assert.equal(home.command, "/home/u/.kerntune/bin/python");
  const homeCmd = serverLaunch({ ...base, command: ["${userHome}/k/bin/kerntune", "lsp"] }, { HOME: "/h" });
  assert.equal(homeCmd.command, "/h/k/bin/kerntune");
  assert.equal(serverLaunch({ ...base, interpreter: "~" }, {}, undefined, "/h").command, "/h");
  const cmd = serverLaunch({ ...base, command: ["/x/kerntune", "lsp"], interpreter: "/ignored" }, { A: "1" }, "sk");
  assert.deepEqual([cmd.command, ...cmd.args], ["/x/kerntune", "lsp"]);
  assert.equal(cmd.env.A, "1");
  assert.equal(cmd.env.KERNTUNE_LLM_API_KEY, "sk");
  const keep = serverLaunch(base, { KERNTUNE_LLM_API_KEY: "env" }, "secret");
  assert.equal(keep.env.KERNTUNE_LLM_API_KEY, "env");
});

test("the message when the server does not start names the Python and an install command that works", () => {
  const { serverLaunch, startFailureMessage, findInstallSource } = require(path.join(client, "dist", "serverCommand.js"));
  const base = { command: [], interpreter: "", env: {}, logLevel: "info" };
  const files = { "/ws/pyproject.toml": '[project]\nname = "kerntune"\n' };
  const dirs = { "/w2/dist": ["kerntune-0.1.0-py3-none-any.whl", "other-1.0.whl"] };
  const read = (p) => files[p];
  const list = (p) => dirs[p] || [];
  assert.deepEqual(findInstallSource(["/ws"], read, list), { checkout: "/ws" });
  assert.deepEqual(findInstallSource(["/elsewhere", "/w2"], read, list), { wheel: "/w2/dist/kerntune-0.1.0-py3-none-any.whl" });
  assert.deepEqual(findInstallSource(["/elsewhere"], read, list), {});
  const py = serverLaunch({ ...base, interpreter: "~/venv/bin/python" }, {}, undefined, "/home/u");
  let m = startFailureMessage(py, "spawn ENOENT", { checkout: "/ws" });
  assert.match(m, /looked in the Python at \/home\/u\/venv\/bin\/python \(kerntune.interpreter\)/);
  assert.match(m, /\/home\/u\/venv\/bin\/python -m pip install -e '\/ws\[gpu\]'/);
  assert.doesNotMatch(m, /pip install kerntune/);
  m = startFailureMessage(serverLaunch(base, {}), "spawn kerntune ENOENT", { wheel: "/w2/dist/kerntune-0.1.0-py3-none-any.whl" });
  assert.match(m, /looked for `kerntune` on PATH/);
  assert.match(m, /python3 -m venv ~\/.kerntune && ~\/.kerntune\/bin\/pip install '\/w2\/dist\/kerntune-0.1.0-py3-none-any.whl\[gpu\]', then set kerntune.interpreter to ~\/.kerntune\/bin\/python/);
  m = startFailureMessage(serverLaunch(base, {}), "x", {});
  assert.match(m, /pip wheel --no-deps/);
});

// The stdout guard itself: noise written to fd 1 after it (a print, a child process such as nvcc inheriting
// the descriptor) must never reach the client, or vscode-jsonrpc's reader breaks.
const NOISY_SERVER = `
import os, sys
import server.main as m
setup = m.setup_logging
def noisy():
    setup()
    print("noise from print")
    sys.stdout.write("noise from sys.stdout\\n")
    os.system("echo noise from a child process")
    os.write(1, b"noise on fd 1\\n")
m.setup_logging = noisy
m.run_stdio()
`;

test("noise on stdout after the guard never reaches the client", { timeout: 60000 }, async () => {
  const s = startServer({}, ["-c", NOISY_SERVER]);
  try {
    let answered = false;
    const broken = waitFor(() => answered || s.readerErrors.length > 0, 30000).then(() => {
      if (!answered) throw new Error(`stdout carried something that is not an LSP message: ${s.readerErrors.map(String)}`);
    });
    const init = await Promise.race([
      s.conn.sendRequest("initialize", { processId: process.pid, rootUri: null, capabilities: {} }), broken]);
    answered = true;
    assert.equal(init.serverInfo.name, "kerntune");
    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
    assert.equal(await new Promise((r) => s.proc.on("exit", r)), 0);
    assert.deepEqual(s.readerErrors.map(String), [], "stdout carried something that is not an LSP message");
    assert.match(s.stderr(), /noise from a child process/); // it went to stderr instead
  } finally {
    s.proc.kill();
  }
});

// Optimize over the H100 recording (replay backend) through VS Code's parser: progress with percentage and the
// best so far, the result in hover and inlay hints, Apply best as a workspace edit (nvcc checks the rewrite
// when it is on PATH: its output must not reach stdout either).
test("optimize over a replayed recording, hover, hints and apply through vscode-jsonrpc", { timeout: 120000 }, async (t) => {
  const recording = path.join(repo, "tests", "data", "stores", "examples.sqlite");
  if (!fs.existsSync(recording)) {
    t.skip("no recorded store at tests/data/stores/examples.sqlite (gpu/run_examples.sh records it on a GPU)");
    return;
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kerntune-node-replay-"));
  const file = path.join(tmp, "row_sum.cu");
  const text = fs.readFileSync(path.join(here, "fixtures", "row_sum.cu"), "utf8");
  fs.writeFileSync(file, text);
  fs.copyFileSync(recording, path.join(tmp, "recording.sqlite"));
  const uri = pathToFileURL(file).href;
  const edits = [];
  const s = startServer({
    KERNTUNE_BACKEND: `replay:${path.join(tmp, "recording.sqlite")}`,
    KERNTUNE_STORE: path.join(tmp, "results.sqlite"),
    KERNTUNE_WORKDIR: path.join(tmp, ".kerntune"),
    KERNTUNE_CACHE: path.join(tmp, "cache"),
    KERNTUNE_REPLAY_DELAY_S: "0.02",
  }, ["-m", "server"], {
    "workspace/configuration": () => [{ tuning: { strategy: "exhaustive", budget: 200 } }],
    "workspace/applyEdit": (p) => { edits.push(p.edit); return { applied: true }; },
  });
  try {
    await s.conn.sendRequest("initialize", {
      processId: process.pid,
      rootUri: pathToFileURL(tmp).href,
      capabilities: {
        window: { workDoneProgress: true },
        workspace: { configuration: true, applyEdit: true, workspaceEdit: { documentChanges: true } },
      },
    });
    await s.conn.sendNotification("initialized", {});
    await s.conn.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "cuda-cpp", version: 1, text },
    });
    await waitFor(() => s.notes.find((n) => n.method === "textDocument/publishDiagnostics"));
    const res = await s.conn.sendRequest("workspace/executeCommand", { command: "kerntune.optimize", arguments: [uri, "row_sum"] });
    assert.equal(res.status, "started", JSON.stringify(res));
    const progress = () => s.notes.filter((n) => n.method === "$/progress" && n.params.token === res.token).map((n) => n.params.value);
    const end = await waitFor(() => progress().find((v) => v.kind === "end"), 60000).catch((e) => {
      throw new Error(`${e.message}: no end of progress; messages ${JSON.stringify(s.notes.filter((n) => n.method !== "textDocument/publishDiagnostics").slice(-8))}; stderr ${s.stderr().slice(-2000)}`);
    });
    assert.match(end.message, /finished, 1\.\d\dx/);
    const reports = progress().filter((v) => v.kind === "report");
    assert.ok(reports.some((v) => v.percentage > 0 && /best \d\.\d\dx/.test(v.message)), JSON.stringify(reports));

    const lines = text.split("\n");
    const row = lines.findIndex((l) => l.includes("void row_sum("));
    const hover = await s.conn.sendRequest("textDocument/hover", {
      textDocument: { uri }, position: { line: row, character: lines[row].indexOf("row_sum") + 2 },
    });
    assert.match(hover.contents.value, /NVIDIA H100/);
    assert.match(hover.contents.value, /\| size set \| original µs \| best µs \| speedup \| GB\/s \| % copy bw \|/);
    const hints = await s.conn.sendRequest("textDocument/inlayHint", {
      textDocument: { uri }, range: { start: { line: 0, character: 0 }, end: { line: lines.length, character: 0 } },
    });
    const labels = hints.map((h) => h.label).sort();
    // BLOCK=256, UNROLL=8: within 1% of the lowest objective (UNROLL=16) and less total time (the tie rule)
    assert.ok(labels.includes("→ 256") && labels.includes("→ 8"), JSON.stringify(labels));

    const applied = await s.conn.sendRequest("workspace/executeCommand", { command: "kerntune.applyBest", arguments: [uri, "row_sum"] });
    assert.equal(applied.applied, true, JSON.stringify(applied));
    const newTexts = edits[0].documentChanges[0].edits.map((e) => e.newText).join(" ");
    assert.match(newTexts, /256/);

    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
    assert.equal(await new Promise((r) => s.proc.on("exit", r)), 0);
    assert.deepEqual(s.readerErrors.map(String), [], "stdout carried something that is not an LSP message");
  } finally {
    s.proc.kill();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
