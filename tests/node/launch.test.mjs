// The packaged extension's own server launch (client-vscode/ci.sh runs this after `vsce package`, with
// KERNTUNE_EXTENSION_DIR set to the unpacked .vsix's extension/ folder; skipped without it).
//
// The extension builds its ServerOptions with serverLaunch() + serverOptions() from dist/serverCommand.js (the
// file the package ships) and hands them to vscode-languageclient, which appends `--stdio` (TransportKind.stdio)
// and spawns the command in the workspace folder. This test takes the same options from the package and
// launches them the way vscode-languageclient 9's node client does (its Executable branch, checked below
// against the installed source), then drives the whole editor flow through vscode-jsonrpc, VS Code's own
// message parser: open, lenses, hover, a replayed optimize with the progress notification (the extension's
// progress bridge from dist/progress.js) and its Cancel button, optimize to the end, Apply best as VS Code applies
// a workspace edit, and the lens after it.
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
const clientDir = path.join(repo, "client-vscode");
const require = createRequire(path.join(clientDir, "package.json"));
const extDir = process.env.KERNTUNE_EXTENSION_DIR;
const python = process.env.KERNTUNE_PYTHON || "python3";
const skip = extDir ? false : "KERNTUNE_EXTENSION_DIR is not set (client-vscode/ci.sh sets it after packaging)";

function packaged(name) {
  return require(path.join(extDir, "dist", name));
}

/** vscode-languageclient 9's launch of an `Executable` with TransportKind.stdio (lib/node/main.js). */
function spawnLikeLanguageClient(serverOptions, workspaceFolder) {
  const args = serverOptions.args !== undefined ? serverOptions.args.slice(0) : [];
  if (serverOptions.transport === 0 /* TransportKind.stdio */) args.push("--stdio");
  const options = Object.assign({}, serverOptions.options);
  options.cwd = options.cwd || workspaceFolder;
  return { proc: spawn(serverOptions.command, args, options), args, cwd: options.cwd };
}

test("the launch above is vscode-languageclient's own", { skip }, () => {
  const main = fs.readFileSync(require.resolve("vscode-languageclient/lib/node/main.js"), "utf8");
  const exec = main.slice(main.indexOf("else if (Executable.is(json) && json.command)"));
  assert.ok(exec.length > 0, "vscode-languageclient's Executable branch moved: update spawnLikeLanguageClient");
  assert.match(exec, /if \(transport === TransportKind\.stdio\) \{\s*args\.push\('--stdio'\);/);
  assert.match(exec, /options\.cwd = options\.cwd \|\| serverWorkingDir;/);
  assert.match(exec, /cp\.spawn\(command\.command, args, options\)/);
  const { TransportKind } = (() => {
    // TransportKind.stdio is 0 in the installed client (the extension's serverOptions() uses 0)
    const m = /TransportKind\[TransportKind\["stdio"\] = (\d+)\] = "stdio"/.exec(main);
    return { TransportKind: { stdio: Number(m[1]) } };
  })();
  assert.equal(packaged("serverCommand.js").serverOptions({ command: "x", args: [], env: {} }).transport, TransportKind.stdio);
});

function connect(proc, answers = {}) {
  const rpc = require("vscode-jsonrpc/node");
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
    if (method in answers) return answers[method](params);
    if (method === "workspace/codeLens/refresh" || method === "workspace/inlayHint/refresh") return null;
    return new rpc.ResponseError(-32601, `unhandled ${method}`);
  });
  conn.listen();
  return { rpc, conn, notes, readerErrors, stderr: () => stderr };
}

async function waitFor(pred, what, ms = 30000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    const v = pred();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A workspace folder with its own server.py and server/ (a project of the user's): never run in kerntune's place. */
function workspaceWithDecoys() {
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), "kerntune-ws-"));
  const decoy = 'import sys\nsys.stdout.write("this is the workspace\'s own server module\\n")\nsys.exit(3)\n';
  fs.mkdirSync(path.join(ws, "server"));
  fs.writeFileSync(path.join(ws, "server", "__init__.py"), decoy);
  fs.writeFileSync(path.join(ws, "server", "__main__.py"), decoy);
  fs.writeFileSync(path.join(ws, "server.py"), decoy);
  return ws;
}

function applyEdits(text, edits) {
  // positions are UTF-16 code units: JavaScript string indices
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text[i] === "\n") starts.push(i + 1);
  const off = (p) => starts[p.line] + p.character;
  const sorted = [...edits].sort((a, b) => off(b.range.start) - off(a.range.start));
  for (const e of sorted) text = text.slice(0, off(e.range.start)) + e.newText + text.slice(off(e.range.end));
  return text;
}

const base = { command: [], interpreter: "", env: {}, logLevel: "info" };

test("kerntune.interpreter with ~ starts kerntune's server, not the workspace's server module", { skip, timeout: 60000 }, async () => {
  const { serverLaunch, serverOptions } = packaged("serverCommand.js");
  // the interpreter written the README's way: ~/... (HOME is the folder the virtual environment is in)
  const venvParent = path.dirname(path.dirname(path.dirname(python)));
  const rel = path.relative(venvParent, python);
  const ws = workspaceWithDecoys();
  const launch = serverLaunch({ ...base, interpreter: `~/${rel}` }, { ...process.env, PYTHONPATH: repo }, undefined, venvParent);
  assert.equal(launch.command, python);
  const so = serverOptions(launch);
  const { proc, args, cwd } = spawnLikeLanguageClient(so, ws);
  assert.deepEqual(args, ["-P", "-m", "server", "--stdio"]);
  assert.equal(cwd, ws);
  const s = connect(proc);
  try {
    const init = await s.conn.sendRequest("initialize", { processId: process.pid, rootUri: pathToFileURL(ws).href, capabilities: {} });
    assert.equal(init.serverInfo.name, "kerntune");
    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
    assert.equal(await new Promise((r) => proc.on("exit", r)), 0);
    assert.deepEqual(s.readerErrors.map(String), []);
  } finally {
    proc.kill();
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test("the default launch (kerntune lsp from PATH, --stdio appended): open, lenses, hover, optimize with progress and Cancel, apply, the lens after it",
  { skip, timeout: 180000 }, async (t) => {
  const recording = path.join(repo, "tests", "data", "stores", "examples.sqlite");
  const bin = path.dirname(python);
  if (!fs.existsSync(recording) || !fs.existsSync(path.join(bin, "kerntune"))) {
    t.skip(`needs ${recording} and the kerntune console script beside ${python}`);
    return;
  }
  const { serverLaunch, serverOptions } = packaged("serverCommand.js");
  const { progressCreateHandler, CANCEL_METHOD } = packaged("progress.js");
  const ws = workspaceWithDecoys();
  const file = path.join(ws, "row_sum.cu");
  let text = fs.readFileSync(path.join(here, "fixtures", "row_sum.cu"), "utf8");
  fs.writeFileSync(file, text);
  fs.copyFileSync(recording, path.join(ws, "recording.sqlite"));
  const uri = pathToFileURL(file).href;
  // what a user puts in kerntune.server.env to replay a recording (no GPU here)
  const env = {
    KERNTUNE_BACKEND: `replay:${path.join(ws, "recording.sqlite")}`, KERNTUNE_STORE: path.join(ws, "results.sqlite"),
    KERNTUNE_WORKDIR: path.join(ws, ".kerntune"), KERNTUNE_CACHE: path.join(ws, "cache"), KERNTUNE_REPLAY_DELAY_S: "0.05",
  };
  const launch = serverLaunch({ ...base, env }, { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH}` });
  assert.deepEqual([launch.command, ...launch.args], ["kerntune", "lsp"]);
  const { proc, args } = spawnLikeLanguageClient(serverOptions(launch), ws);
  assert.deepEqual(args, ["lsp", "--stdio"]);

  let version = 1;
  const shown = []; // the progress notifications the extension would open
  const s = connect(proc, {
    "workspace/configuration": () => [{ tuning: { strategy: "exhaustive", budget: 200 } }],
    "workspace/applyEdit": (p) => {
      // as VS Code does: apply the edit to the document, send the change, answer
      const edits = p.edit.documentChanges[0].edits;
      text = applyEdits(text, edits);
      version += 1;
      s.conn.sendNotification("textDocument/didChange", {
        textDocument: { uri, version },
        contentChanges: [...edits].sort((a, b) => b.range.start.line - a.range.start.line || b.range.start.character - a.range.start.character)
          .map((e) => ({ range: e.range, text: e.newText })),
      });
      return { applied: true };
    },
  });
  s.conn.onRequest("window/workDoneProgress/create", progressCreateHandler({
    onProgress: (token, handler) => s.conn.onProgress(new s.rpc.ProgressType(), token, handler),
    sendNotification: (method, params) => s.conn.sendNotification(method, params),
  }, (title, cancellable, onCancel) => {
    const n = { title, cancellable, onCancel, reports: [], closed: false, pct: 0 };
    shown.push(n);
    return { report: (message, increment) => { n.reports.push(message); n.pct += increment || 0; }, close: () => { n.closed = true; } };
  }));
  const cancels = [];
  const send = s.conn.sendNotification.bind(s.conn);
  s.conn.sendNotification = (method, params) => { if (method === CANCEL_METHOD) cancels.push(params); return send(method, params); };
  try {
    const init = await s.conn.sendRequest("initialize", {
      processId: process.pid, rootUri: pathToFileURL(ws).href, clientInfo: { name: "Visual Studio Code", version: "1.99.3" },
      initializationOptions: { codicons: true },
      capabilities: {
        window: { workDoneProgress: true },
        workspace: { configuration: true, applyEdit: true, workspaceEdit: { documentChanges: true },
                     codeLens: { refreshSupport: true }, inlayHint: { refreshSupport: true } },
      },
    });
    assert.equal(init.serverInfo.name, "kerntune");
    await s.conn.sendNotification("initialized", {});
    await s.conn.sendNotification("textDocument/didOpen", { textDocument: { uri, languageId: "cuda-cpp", version: 1, text } });
    await waitFor(() => s.notes.find((n) => n.method === "textDocument/publishDiagnostics"), "diagnostics");
    const lenses = async () => (await s.conn.sendRequest("textDocument/codeLens", { textDocument: { uri } })).map((l) => l.command.title);
    assert.deepEqual(await lenses(), ["Optimize kernel", "Templatize"]);
    const lines = text.split("\n");
    const row = lines.findIndex((l) => l.includes("void row_sum("));
    const namePos = { line: row, character: lines[row].indexOf("row_sum") + 2 };
    const hover = async () => (await s.conn.sendRequest("textDocument/hover", { textDocument: { uri }, position: namePos })).contents.value;
    assert.match(await hover(), /No tuning result yet/);

    // Optimize; the progress notification opens, cancellable; its Cancel button stops the session
    let res = await s.conn.sendRequest("workspace/executeCommand", { command: "kerntune.optimize", arguments: [uri, "row_sum"] });
    assert.equal(res.status, "started", JSON.stringify(res));
    const first = await waitFor(() => shown[0], "the progress notification");
    assert.equal(first.title, "kerntune: tuning row_sum");
    assert.equal(first.cancellable, true);
    await waitFor(() => first.reports.some((m) => /best \d\.\d\dx/.test(m || "")), "a report with the best so far");
    const live = await lenses();
    assert.ok(live.some((t) => t.startsWith("$(sync~spin) Tuning ")) && live.includes("Cancel tuning"), JSON.stringify(live));
    first.onCancel();
    assert.deepEqual(cancels, [{ token: res.token }]);
    await waitFor(() => first.closed, "the notification to close after Cancel");
    await waitFor(() => s.notes.find((n) => n.method === "window/showMessage" && /row_sum: cancelled/.test(n.params.message)), "the cancelled message");

    // again, to the end
    res = await s.conn.sendRequest("workspace/executeCommand", { command: "kerntune.optimize", arguments: [uri, "row_sum"] });
    assert.equal(res.status, "started", JSON.stringify(res));
    const second = await waitFor(() => shown[1], "the second progress notification");
    await waitFor(() => second.closed, "the end of the session", 120000);
    assert.ok(second.pct > 0 && second.pct <= 100, String(second.pct));
    const done = s.notes.filter((n) => n.method === "window/showMessage").map((n) => n.params.message);
    assert.ok(done.some((m) => /row_sum: finished, \d\.\d\dx with BLOCK=256, UNROLL=8/.test(m)), JSON.stringify(done));
    const after = await lenses();
    const apply = after.find((t) => t.startsWith("Apply best ("));
    assert.ok(apply, JSON.stringify(after));
    const x = /\((\d\.\d\dx)\)/.exec(apply)[1];
    assert.match(await hover(), /\| size set \| original µs \| best µs \| speedup \| GB\/s \| % copy bw \|/);

    // Apply best: the edit comes back as a change; the file is then the applied result, not a stale one
    const applied = await s.conn.sendRequest("workspace/executeCommand", { command: "kerntune.applyBest", arguments: [uri, "row_sum"] });
    assert.equal(applied.applied, true, JSON.stringify(applied));
    assert.match(text, /#define BLOCK 256/);
    await waitFor(() => s.notes.find((n) => n.method === "textDocument/publishDiagnostics" && n.params.version === version), "diagnostics of the applied text");
    assert.deepEqual(await lenses(), ["Optimize kernel", "Templatize", `Applied best (${x}, BLOCK=256, UNROLL=8)`]);
    const diags = s.notes.filter((n) => n.method === "textDocument/publishDiagnostics" && n.params.version === version).pop().params.diagnostics;
    assert.ok(!diags.some((d) => d.code === "tunable"), JSON.stringify(diags.map((d) => d.message)));
    assert.match(await hover(), /\*\*Applied\*\*/);

    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
    assert.equal(await new Promise((r) => proc.on("exit", r)), 0);
    assert.deepEqual(s.readerErrors.map(String), [], "stdout carried something that is not an LSP message");
  } catch (e) {
    e.message += `\nserver stderr (tail): ${s.stderr().slice(-3000)}`;
    throw e;
  } finally {
    proc.kill();
    fs.rmSync(ws, { recursive: true, force: true });
  }
});
