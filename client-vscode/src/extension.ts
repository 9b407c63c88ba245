// The kerntune VS Code extension: starts the kerntune language server for CUDA files.
// Lenses, diagnostics, code actions, hovers, inlay hints and the server's commands (Optimize, Templatize,
// Apply best, Cancel) all come from the server; the client registers only its own commands.

import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { serverLaunch, ServerSettings } from "./serverCommand";

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
  const launch = serverLaunch(settings(), process.env, apiKey);
  output.info(`starting the server: ${launch.command} ${launch.args.join(" ")}`);
  const serverOptions: ServerOptions = {
    command: launch.command,
    args: launch.args,
    transport: TransportKind.stdio,
    options: { env: launch.env },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "cuda-cpp" },
      { scheme: "file", pattern: "**/*.{cu,cuh}" },
    ],
    outputChannel: output,
    traceOutputChannel: output,
    synchronize: { configurationSection: "kerntune" },
  };
  client = new LanguageClient("kerntune", "kerntune", serverOptions, clientOptions);
  client.onDidChangeState((e) => {
    if (e.newState === State.Running) setStatus("kerntune", vscode.LanguageStatusSeverity.Information, "server running");
    else if (e.newState === State.Starting) setStatus("kerntune: starting", vscode.LanguageStatusSeverity.Information);
    else setStatus("kerntune: stopped", vscode.LanguageStatusSeverity.Warning, "use 'kerntune: Restart'");
  });
  setStatus("kerntune: starting", vscode.LanguageStatusSeverity.Information);
  try {
    await client.start();
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    output.error(`the server did not start: ${msg}`);
    setStatus("kerntune: not running", vscode.LanguageStatusSeverity.Error, msg);
    void vscode.window
      .showErrorMessage(
        `kerntune: the language server did not start (${launch.command}). Install kerntune ` +
          "(pip install kerntune) and set kerntune.interpreter or kerntune.server.command.",
        "Open settings",
        "Show output",
      )
      .then((choice) => {
        if (choice === "Open settings") void vscode.commands.executeCommand("workbench.action.openSettings", "kerntune");
        if (choice === "Show output") output.show();
      });
  }
}

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
