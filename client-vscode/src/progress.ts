// Server-initiated work-done progress shown as a notification with a Cancel button.
//
// vscode-languageclient shows a server's `window/workDoneProgress/create` progress in the status bar only
// (ProgressLocation.Window), where there is no Cancel button. The extension answers that request itself: each
// token's progress opens a notification (ProgressLocation.Notification) with the server's title, message and
// percentage, and its Cancel button sends `window/workDoneProgress/cancel` for the token when the server said
// the work is cancellable. No `vscode` import: the window is passed in (the Node tests drive this file against
// the real server through vscode-jsonrpc).

export interface WorkDoneValue {
  kind: "begin" | "report" | "end";
  title?: string;
  message?: string;
  percentage?: number;
  cancellable?: boolean;
}

export interface Disposable {
  dispose(): void;
}

/** What the bridge needs of the client's connection. */
export interface ProgressConnection {
  onProgress(token: string | number, handler: (value: WorkDoneValue) => void): Disposable;
  sendNotification(method: string, params: unknown): unknown;
}

/** One notification on screen: `report` updates it (`increment`: percentage points since the last report),
 * `close` takes it away. */
export interface ProgressNotification {
  report(message: string | undefined, increment: number | undefined): void;
  close(): void;
}

/** Opens a notification; ``onCancel`` is called when the user presses its Cancel button. */
export type OpenNotification = (title: string, cancellable: boolean, onCancel: () => void) => ProgressNotification;

export const CANCEL_METHOD = "window/workDoneProgress/cancel";

/** The handler of `window/workDoneProgress/create`: listens to the token's `$/progress` and shows it. */
export function progressCreateHandler(conn: ProgressConnection, open: OpenNotification) {
  return (params: { token: string | number }): null => {
    const token = params.token;
    let shown: ProgressNotification | undefined;
    let reported = 0;
    let cancelled = false;
    let sub: Disposable | undefined;
    const update = (v: WorkDoneValue) => {
      if (!shown) return;
      let increment: number | undefined;
      if (typeof v.percentage === "number") {
        const pct = Math.max(0, Math.min(100, v.percentage));
        increment = Math.max(0, pct - reported);
        reported += increment;
      }
      shown.report(v.message, increment);
    };
    sub = conn.onProgress(token, (v) => {
      if (v.kind === "begin") {
        if (shown) return;
        shown = open(v.title || "kerntune", !!v.cancellable, () => {
          if (cancelled) return;
          cancelled = true;
          void conn.sendNotification(CANCEL_METHOD, { token });
        });
        update(v);
      } else if (v.kind === "report") {
        update(v);
      } else if (v.kind === "end") {
        shown?.close();
        shown = undefined;
        sub?.dispose();
        sub = undefined;
      }
    });
    return null;
  };
}
