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

function startServer(env = {}) {
  const proc = spawn(python, ["-m", "server"], {
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
  conn.onRequest((method, params) => {
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
  assert.deepEqual([py.command, ...py.args], ["/venv/bin/python", "-m", "server"]);
  const cmd = serverLaunch({ ...base, command: ["/x/kerntune", "lsp"], interpreter: "/ignored" }, { A: "1" }, "sk");
  assert.deepEqual([cmd.command, ...cmd.args], ["/x/kerntune", "lsp"]);
  assert.equal(cmd.env.A, "1");
  assert.equal(cmd.env.KERNTUNE_API_KEY, "sk");
  const keep = serverLaunch(base, { KERNTUNE_API_KEY: "env" }, "secret");
  assert.equal(keep.env.KERNTUNE_API_KEY, "env");
});
