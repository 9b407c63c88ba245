// How the language server is started, from the extension's settings (no `vscode` import: unit-tested in Node).

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
}

/** `kerntune.server.command` if set, else `<interpreter> -m server`, else `kerntune lsp` from PATH. */
export function serverLaunch(
  s: ServerSettings,
  baseEnv: Record<string, string | undefined>,
  apiKey?: string,
): ServerLaunch {
  let command = "kerntune";
  let args = ["lsp"];
  const cmd = (s.command || []).filter((x) => x.trim() !== "");
  if (cmd.length > 0) {
    command = cmd[0];
    args = cmd.slice(1);
  } else if (s.interpreter && s.interpreter.trim() !== "") {
    command = s.interpreter.trim();
    args = ["-m", "server"];
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(baseEnv)) {
    if (v !== undefined) env[k] = v;
  }
  for (const [k, v] of Object.entries(s.env || {})) env[k] = String(v);
  env["KERNTUNE_LOG_LEVEL"] = s.logLevel || "info";
  env["PYTHONUNBUFFERED"] = "1";
  if (apiKey && !env["KERNTUNE_LLM_API_KEY"]) env["KERNTUNE_LLM_API_KEY"] = apiKey;
  return { command, args, env };
}
