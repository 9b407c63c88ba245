// The kerntune VS Code extension: starts the kerntune language server for CUDA files.
// Lenses, diagnostics, code actions, hovers, inlay hints and the server's commands (Optimize, Templatize,
// Apply best, Cancel) all come from the server; the client registers only its own commands.

import * as fs from "fs";
import * as os from "os";
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  WorkDoneProgress,
  WorkDoneProgressCreateRequest,
} from "vscode-languageclient/node";
import { OpenNotification, progressCreateHandler, WorkDoneValue } from "./progress";
import { findInstallSource, serverLaunch, serverOptions, ServerSettings, startFailureMessage } from "./serverCommand";

const SECRET_KEY = "kerntune.llm.apiKey";

let client: LanguageClient | undefined;
let output: vscode.LogOutputChannel;
let status: vscode.LanguageStatusItem;

function settings(): ServerSettings {
  const c = vscode.workspace.getConfiguration("kerntune");
  return {
    command: c.get<string[]>("server.command", []),
    interpreter: c.get<string>("interpreter", ""),
    env: c.get<Record<string, string>>("server.env", {}),
    logLevel: c.get<string>("logLevel", "info"),
  };
}

function setStatus(text: string, severity: vscode.LanguageStatusSeverity, detail?: string) {
  status.text = text;
  status.severity = severity;
  status.detail = detail;
}

async function startClient(context: vscode.ExtensionContext): Promise<void> {
  const apiKey = await context.secrets.get(SECRET_KEY);
  const launch = serverLaunch(settings(), process.env, apiKey, os.homedir());
  output.info(`starting the server: ${launch.command} ${launch.args.join(" ")} --stdio`);
  // vscode-languageclient appends --stdio (TransportKind.stdio); tests/node/launch.test.mjs launches these options
  const options: ServerOptions = serverOptions(launch);
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "cuda-cpp" },
      { scheme: "file", pattern: "**/*.{cu,cuh}" },
    ],
    outputChannel: output,
    traceOutputChannel: output,
    synchronize: { configurationSection: "kerntune" },
    initializationOptions: { codicons: true },
  };
  client = new LanguageClient("kerntune", "kerntune", options, clientOptions);
  client.onDidChangeState((e) => {
    if (e.newState === State.Running) setStatus("kerntune", vscode.LanguageStatusSeverity.Information, "server running");
    else if (e.newState === State.Starting) setStatus("kerntune: starting", vscode.LanguageStatusSeverity.Information);
    else setStatus("kerntune: stopped", vscode.LanguageStatusSeverity.Warning, "use 'kerntune: Restart'");
  });
  setStatus("kerntune: starting", vscode.LanguageStatusSeverity.Information);
  try {
    await client.start();
    // tuning progress as a notification with Cancel (the client's own handler shows it in the status bar only)
    const c = client;
    c.onRequest(
      WorkDoneProgressCreateRequest.type,
      progressCreateHandler(
        {
          onProgress: (token, handler) => c.onProgress(WorkDoneProgress.type, token, (v) => handler(v as WorkDoneValue)),
          sendNotification: (method, params) => c.sendNotification(method, params),
        },
        notification,
      ),
    );
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    output.error(`the server did not start: ${msg}`);
    setStatus("kerntune: not running", vscode.LanguageStatusSeverity.Error, msg);
    const folders = (vscode.workspace.workspaceFolders || []).map((f) => f.uri.fsPath);
    const from = findInstallSource(
      folders,
      (p) => {
        try {
          return fs.readFileSync(p, "utf8");
        } catch {
          return undefined;
        }
      },
      (p) => {
        try {
          return fs.readdirSync(p);
        } catch {
          return [];
        }
      },
    );
    const text = startFailureMessage(launch, msg, from);
    output.error(text);
    void vscode.window
      .showErrorMessage(text, "Open settings", "Show output")
      .then((choice) => {
        if (choice === "Open settings") void vscode.commands.executeCommand("workbench.action.openSettings", "kerntune");
        if (choice === "Show output") output.show();
      });
  }
}

/** A progress notification with the server's title; Cancel calls ``onCancel``. */
const notification: OpenNotification = (title, cancellable, onCancel) => {
  let progress: vscode.Progress<{ message?: string; increment?: number }> | undefined;
  let resolve: (() => void) | undefined;
  let closed = false;
  const pending: { message?: string; increment?: number }[] = [];
  void vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title, cancellable },
    (p, token) => {
      if (closed) return Promise.resolve();
      progress = p;
      token.onCancellationRequested(onCancel);
      for (const r of pending.splice(0)) p.report(r);
      return new Promise<void>((r) => (resolve = r));
    },
  );
  return {
    report: (message, increment) => {
      if (progress) progress.report({ message, increment });
      else pending.push({ message, increment });
    },
    close: () => {
      closed = true;
      resolve?.();
    },
  };
};

async function stopClient(): Promise<void> {
  if (!client) return;
  const c = client;
  client = undefined;
  try {
    await c.stop();
  } catch (err) {
    output.warn(`stopping the server: ${err instanceof Error ? err.message : String(err)}`);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("kerntune", { log: true });
  status = vscode.languages.createLanguageStatusItem("kerntune.status", { language: "cuda-cpp" });
  status.name = "kerntune";
  status.command = { title: "Show output", command: "kerntune.showOutput" };
  context.subscriptions.push(output, status);

  context.subscriptions.push(
    vscode.commands.registerCommand("kerntune.restart", async () => {
      await stopClient();
      await startClient(context);
    }),
    vscode.commands.registerCommand("kerntune.showOutput", () => output.show()),
    vscode.commands.registerCommand("kerntune.setApiKey", async () => {
      const key = await vscode.window.showInputBox({ prompt: "API key for the LLM endpoint", password: true });
      if (key === undefined) return;
      await context.secrets.store(SECRET_KEY, key);
      const again = await vscode.window.showInformationMessage("kerntune: API key stored. Restart the server?", "Restart");
      if (again) await vscode.commands.executeCommand("kerntune.restart");
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (
        e.affectsConfiguration("kerntune.server") ||
        e.affectsConfiguration("kerntune.interpreter") ||
        e.affectsConfiguration("kerntune.logLevel")
      ) {
        const choice = await vscode.window.showInformationMessage(
          "kerntune: the server settings changed. Restart the server?",
          "Restart",
        );
        if (choice) await vscode.commands.executeCommand("kerntune.restart");
      }
    }),
  );
  await startClient(context);
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
