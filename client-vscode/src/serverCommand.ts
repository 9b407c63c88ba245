// How the language server is started, from the extension's settings (no `vscode` import: the Node tests load
// this very file from the packaged extension and launch the server with it, the way vscode-languageclient does).

import * as path from "path";

export interface ServerSettings {
  command: string[]; // kerntune.server.command
  interpreter: string; // kerntune.interpreter
  env: Record<string, string>; // kerntune.server.env
  logLevel: string; // kerntune.logLevel
}

export interface ServerLaunch {
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Where the extension looked for kerntune, in words (for the error message when the server does not start). */
  lookedIn: string;
  /** The Python to install kerntune into, when the launch names one. */
  python?: string;
}

/** `~`, `~/...` and `${userHome}` expanded to ``home`` (settings are not run through a shell). */
export function expandHome(p: string, home: string): string {
  let s = p.trim().split("${userHome}").join(home);
  if (s === "~") return home;
  if (s.startsWith("~/") || s.startsWith("~\\")) s = path.join(home, s.slice(2));
  return s;
}

/** `kerntune.server.command` if set, else `<interpreter> -P -m server`, else `kerntune lsp` from PATH.
 *
 * `-P` (Python >= 3.11, which kerntune requires) keeps the working directory (the workspace folder) off
 * `sys.path`: a workspace with its own `server.py` or `server/` must not be run in place of kerntune's server. */
export function serverLaunch(
  s: ServerSettings,
  baseEnv: Record<string, string | undefined>,
  apiKey?: string,
  home: string = baseEnv["HOME"] || baseEnv["USERPROFILE"] || "",
): ServerLaunch {
  let command = "kerntune";
  let args = ["lsp"];
  let lookedIn = "for `kerntune` on PATH (kerntune.interpreter and kerntune.server.command are not set)";
  let python: string | undefined;
  const cmd = (s.command || []).filter((x) => x.trim() !== "");
  if (cmd.length > 0) {
    command = expandHome(cmd[0], home);
    args = cmd.slice(1).map((a) => expandHome(a, home));
    lookedIn = `at ${command} (kerntune.server.command)`;
    if (/python[\d.]*(\.exe)?$/i.test(path.basename(command))) python = command;
    else if (path.isAbsolute(command)) python = path.join(path.dirname(command), "python");
  } else if (s.interpreter && s.interpreter.trim() !== "") {
    command = expandHome(s.interpreter, home);
    args = ["-P", "-m", "server"];
    lookedIn = `in the Python at ${command} (kerntune.interpreter)`;
    python = command;
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(baseEnv)) {
    if (v !== undefined) env[k] = v;
  }
  for (const [k, v] of Object.entries(s.env || {})) env[k] = String(v);
  env["KERNTUNE_LOG_LEVEL"] = s.logLevel || "info";
  env["PYTHONUNBUFFERED"] = "1";
  if (apiKey && !env["KERNTUNE_LLM_API_KEY"]) env["KERNTUNE_LLM_API_KEY"] = apiKey;
  return { command, args, env, lookedIn, python };
}

/** vscode-languageclient's `TransportKind.stdio` (the client appends `--stdio` to the arguments). */
export const TRANSPORT_STDIO = 0;

/** The `ServerOptions` (an `Executable`) the extension gives vscode-languageclient. */
export function serverOptions(launch: ServerLaunch): {
  command: string;
  args: string[];
  transport: 0;
  options: { env: Record<string, string> };
} {
  return { command: launch.command, args: launch.args, transport: TRANSPORT_STDIO, options: { env: launch.env } };
}

/** Where the user can install kerntune from: a workspace folder that is a kerntune checkout, or a wheel in one. */
export interface InstallSource {
  checkout?: string;
  wheel?: string;
}

/** The message shown when the server did not start: what ran, where the extension looked for kerntune, and the
 * install command that works from where the user is (kerntune is not on PyPI: a checkout or a wheel). */
export function startFailureMessage(launch: ServerLaunch, error: string, from: InstallSource): string {
  const py = launch.python ?? "python3";
  const venv = launch.python ? "" : "python3 -m venv ~/.kerntune && ";
  const pip = launch.python ? `${py} -m pip` : "~/.kerntune/bin/pip";
  let install: string;
  if (from.wheel) install = `${venv}${pip} install '${from.wheel}[gpu]'`;
  else if (from.checkout) install = `${venv}${pip} install -e '${from.checkout}[gpu]'`;
  else
    install =
      `${venv}${pip} install -e '/path/to/kerntune[gpu]' (a kerntune checkout; or a wheel built there with ` +
      "`python3 -m pip wheel --no-deps /path/to/kerntune`)";
  const then = launch.python ? "" : ", then set kerntune.interpreter to ~/.kerntune/bin/python";
  return (
    `kerntune: the language server did not start (${[launch.command, ...launch.args].join(" ")}: ${error}). ` +
    `The extension looked ${launch.lookedIn}. Install kerntune there: ${install}${then}.`
  );
}

/** A kerntune checkout or wheel among the workspace folders (``read`` returns a file's text or undefined,
 * ``list`` a folder's entries). */
export function findInstallSource(
  folders: string[],
  read: (p: string) => string | undefined,
  list: (p: string) => string[],
): InstallSource {
  for (const f of folders) {
    for (const dir of [f, path.join(f, "dist")]) {
      const whl = list(dir).filter((n) => /^kerntune-.*\.whl$/.test(n)).sort().pop();
      if (whl) return { wheel: path.join(dir, whl) };
    }
    const py = read(path.join(f, "pyproject.toml"));
    if (py && /^\s*name\s*=\s*["']kerntune["']/m.test(py)) return { checkout: f };
  }
  return {};
}
