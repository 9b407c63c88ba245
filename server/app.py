"""The kerntune language server: document sync and the handlers, wired to the feature modules.

Handlers are thin: state lives in ``Documents`` / ``Results`` / ``TuningJobs``, features in lenses.py,
diagnostics.py, actions.py, hints.py, hover.py, edits.py. A crash in a handler is logged; requests are
answered with an error by pygls and notifications are reported to the client; the server keeps running.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from agent_core.model import KerntuneError

from . import __version__, commands, robust
from .actions import code_actions
from .diagnostics import diagnostics, diagnostics_json
from .documents import Documents, is_cuda_uri
from .edits import best_text, spec_text, workspace_edit
from .hints import inlay_hints
from .hover import hover
from .lenses import code_lenses
from .results import Results
from .tuning import TuningJobs

log = logging.getLogger("kerntune.server")
SLICE_S = 0.01  # the longest the analysis after a change holds the event loop before requests are served
timing = logging.getLogger("kerntune.timing")  # per-edit figures: KERNTUNE_LOG_TIMING=1 shows them
timing.setLevel(logging.INFO if os.environ.get("KERNTUNE_LOG_TIMING") else logging.WARNING)


class KerntuneProtocol(LanguageServerProtocol):
    """pygls keeps a copy of every open document and applies each change to it. kerntune keeps its own copy
    of the CUDA documents (``Documents``: the text, the line index and the tree, re-parsed incrementally), so
    pygls's copy of those is not kept: applying every keystroke a second time to a 10,000-line text costs
    milliseconds. Other documents are kept by pygls as usual."""

    def structure_message(self, data):
        """pygls's, with a message that does not fit its method answered (``robust``) instead of only logged."""
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            if not isinstance(data, dict) or "jsonrpc" not in data:
                raise
            return robust.answer_unstructurable(self, data, e, self._bad_notification)

    def _bad_notification(self, method, params, why: str) -> None:
        if method == lsp.TEXT_DOCUMENT_DID_CHANGE and isinstance(params, dict):
            uri = (params.get("textDocument") or {}).get("uri") if isinstance(params.get("textDocument"), dict) \
                else None
            server = self._server
            if isinstance(uri, str) and server.docs.raw(uri) is not None:
                server.out_of_sync(uri, f"an unreadable change ({why})")

    def handle_message(self, message):
        if isinstance(message, robust.Answered):
            return
        if not hasattr(message, "jsonrpc"):  # JSON, but not a message object
            robust.answer_not_a_request(self, message)
            return
        return super().handle_message(message)

    @lsp_method(lsp.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: lsp.DidOpenTextDocumentParams):
        td = params.text_document
        if not _ours(td.uri, td.language_id):
            self.workspace.put_text_document(td)
        if (handler := self.fm.features.get(lsp.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: lsp.DidChangeTextDocumentParams):
        if unquote(params.text_document.uri) in self.workspace.text_documents:
            for change in params.content_changes:
                self.workspace.update_text_document(params.text_document, change)
        if (handler := self.fm.features.get(lsp.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None


def _ours(uri: str, language_id: str | None) -> bool:
    return is_cuda_uri(uri) or language_id in ("cuda-cpp", "cuda")


class KerntuneServer(LanguageServer):
    def __init__(self):
        super().__init__("kerntune", __version__, protocol_cls=KerntuneProtocol,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.docs = Documents()
        self.results = Results()
        self.jobs = TuningJobs(self, self.results, self.refresh)
        self.settings: dict | None = None
        self.codicons = False  # the client renders $(name) icons in lens titles (VS Code and its builds)
        self._publishers: dict[str, asyncio.Future] = {}  # uri -> the analysis that ends in publishing
        self._arrived: dict[str, float] = {}  # uri -> when the change being analysed arrived

    def report_server_error(self, error, source):
        if robust.is_parse_error(error):  # a body that is not JSON: the client gets a parse error, as it must
            robust.answer_parse_error(self.protocol, error)
            return
        log.error("server error (%s): %r", getattr(source, "__name__", source), error, exc_info=error)
        super().report_server_error(error, source)

    def feature(self, feature_name: str, options=None):
        """pygls's decorator, with the handler guarded (``robust.guard``: clean errors, never a traceback)."""
        register = super().feature(feature_name, options)
        return lambda f: register(robust.guard(f, feature_name, robust.is_request(feature_name)))

    def command(self, command_name: str):
        register = super().command(command_name)
        return lambda f: register(robust.guard(f, command_name, True))

    def out_of_sync(self, uri: str, why: str) -> None:
        """A change to ``uri`` could not be applied: the document is re-read from disk and its analysis paused
        until the client sends the whole text (a save, a full change, reopening); the user is told once."""
        doc = self.docs.desync(uri, why)
        if doc is None:
            return
        log.warning("%s is out of sync: %s; re-read from disk, analysis paused until it is saved", uri, why)
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        self.window_show_message(lsp.ShowMessageParams(
            type=lsp.MessageType.Warning,
            message=f"kerntune: an edit to {Path(doc.path).name} could not be applied ({why}); kerntune paused "
                    "its checks of this file until it is saved or reopened"))

    @property
    def encoding(self) -> str:
        return self.docs.encoding

    def publish(self, uri: str) -> int:
        """Publish the document's diagnostics; how many. The JSON is put together from per-kernel pieces
        serialized once (``diagnostics_json``) and framed like pygls frames every message."""
        doc = self.docs.get(uri)
        if doc is None:
            return 0
        proto = self.protocol
        if proto.writer is None or not getattr(proto, "_include_headers", False):  # not over stdio: the plain way
            try:
                diags = diagnostics(self.docs, doc, self.results, self.encoding)
            except Exception:
                log.exception("diagnostics of %s failed", uri)
                diags = []
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags,
                                                                                version=doc.version))
            return len(diags)
        try:
            array, n = diagnostics_json(self.docs, doc, self.results, self.encoding, proto._converter)
        except Exception:
            log.exception("diagnostics of %s failed", uri)
            array, n = "[]", 0
        body = ('{"params": {"uri": ' + json.dumps(uri) + ', "diagnostics": ' + array + ', "version": '
                + json.dumps(doc.version) + '}, "method": "' + lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
                + '", "jsonrpc": "2.0"}').encode(proto.CHARSET)
        header = (f"Content-Length: {len(body)}\r\nContent-Type: {proto.CONTENT_TYPE}; "
                  f"charset={proto.CHARSET}\r\n\r\n").encode(proto.CHARSET)
        res = proto.writer.write(header + body)
        if inspect.isawaitable(res):
            asyncio.ensure_future(res)
        return n

    def schedule_publish(self, uri: str, arrived: float) -> None:
        """Publish the document's diagnostics once its kernels are analysed, analysing them a kernel or a few
        at a time between the requests that come in meanwhile: the parse is done (lenses need nothing more), so
        the code lens request an editor sends right after opening or changing a file is answered first, not
        after every kernel of a 10,000-line file was templatized. A newer version restarts the analysis."""
        self._arrived[uri] = arrived
        task = self._publishers.get(uri)
        if task is None or task.done():
            self._publishers[uri] = asyncio.ensure_future(self._publish_when_analysed(uri))

    async def _publish_when_analysed(self, uri: str) -> None:
        from .analysis import facts_and_shift
        while True:
            await asyncio.sleep(0)  # requests already read (the lenses after a change) go first
            doc = self.docs.get(uri)
            if doc is None:
                return
            version, cf = doc.version, doc.cf
            t_slice = time.perf_counter()
            changed = False
            try:
                for k in (cf.kernels if cf is not None else []):
                    facts_and_shift(self.docs, doc, k)  # memoized per version: what publish uses
                    if time.perf_counter() - t_slice > SLICE_S:
                        await asyncio.sleep(0)
                        t_slice = time.perf_counter()
                        if self.docs.get(uri) is not doc or doc.version != version or doc.cf is not cf:
                            changed = True
                            break
            except Exception:
                log.exception("analysing %s failed", uri)  # publish reports what it can
            if changed:
                continue
            n = self.publish(uri)
            arrived = self._arrived.pop(uri, None)
            if arrived is not None:
                timing.info("change v%s: parse %.1f ms, %d diagnostics published %.1f ms after the change arrived",
                            version, doc.parse_ms, n, (time.perf_counter() - arrived) * 1000)
            return

    def refresh(self, uri: str, final: bool) -> None:
        """After a tuning event: republish diagnostics, ask the client to re-request lenses and hints."""
        self.publish(uri)
        ws = getattr(self.client_capabilities, "workspace", None)
        if getattr(getattr(ws, "code_lens", None), "refresh_support", False):
            self.workspace_code_lens_refresh(None)
        if getattr(getattr(ws, "inlay_hint", None), "refresh_support", False):
            self.workspace_inlay_hint_refresh(None)

    async def load_settings(self) -> dict | None:
        ws = getattr(self.client_capabilities, "workspace", None)
        if not getattr(ws, "configuration", False):
            return self.settings
        try:
            got = await asyncio.wait_for(self.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="kerntune")])), 5)
            if got and isinstance(got[0], dict):
                self.settings = got[0]
        except Exception as e:
            log.info("workspace/configuration failed: %r", e)
        return self.settings

    def doc_or_error(self, uri: str):
        doc = self.docs.get(uri)
        if doc is None:
            raw = self.docs.raw(uri) if isinstance(uri, str) else None
            if raw is not None:
                raise KerntuneError(f"{uri} is out of sync with the editor ({raw.out_of_sync}): save the file")
            raise KerntuneError(f"{uri} is not open in the editor")
        return doc


def create_server() -> KerntuneServer:
    ls = KerntuneServer()

    @ls.feature(lsp.INITIALIZE)
    def initialize(ls: KerntuneServer, params: lsp.InitializeParams):
        ls.codicons = renders_codicons(params.client_info, params.initialization_options)

    @ls.feature(lsp.INITIALIZED)
    def initialized(ls: KerntuneServer, params: lsp.InitializedParams):
        enc = ls.workspace.position_encoding or "utf-16"
        ls.docs.encoding = getattr(enc, "value", enc)  # str() of the enum member is "PositionEncodingKind.Utf16"
        log.info("kerntune %s ready (position encoding %s; codicons in lenses: %s)", __version__,
                 ls.docs.encoding, ls.codicons)

    @ls.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: KerntuneServer, params: lsp.DidChangeConfigurationParams):
        """The settings are read again (pushed ones under "kerntune" are taken as they are; VS Code's client
        sends them with `synchronize.configurationSection`); the next Optimize uses them."""
        pushed = params.settings.get("kerntune") if isinstance(params.settings, dict) else None
        if isinstance(pushed, dict):
            ls.settings = pushed
        else:
            await ls.load_settings()
        log.info("settings changed")

    @ls.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: KerntuneServer, params: lsp.DidOpenTextDocumentParams):
        td = params.text_document
        if not _ours(td.uri, td.language_id):
            return
        ls.docs.open(td.uri, td.text, td.version)
        ls.schedule_publish(td.uri, time.perf_counter())

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: KerntuneServer, params: lsp.DidChangeTextDocumentParams):
        td = params.text_document
        t0 = time.perf_counter()
        try:
            doc = ls.docs.change(td.uri, list(params.content_changes), td.version)
        except ValueError as e:  # refused: nothing of the batch applied
            ls.out_of_sync(td.uri, str(e))
            return
        if doc is not None and not doc.out_of_sync:
            ls.schedule_publish(td.uri, t0)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: KerntuneServer, params: lsp.DidSaveTextDocumentParams):
        doc = ls.docs.raw(params.text_document.uri)
        if doc is not None:
            if params.text is not None and params.text != doc.text:
                ls.docs.replace(doc.uri, params.text, doc.version)
            elif doc.out_of_sync:  # saved: the editor's text is the file's now
                ls.docs.reload(doc.uri)
            doc.cache.clear()  # sidecar spec / template files may have changed with the save
            ls.results.forget(doc.path)
            ls.publish(doc.uri)

    @ls.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: KerntuneServer, params: lsp.DidCloseTextDocumentParams):
        ls.docs.close(params.text_document.uri)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                          diagnostics=[]))

    @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: KerntuneServer, params: lsp.CodeLensParams):
        doc = ls.docs.get(params.text_document.uri)
        return code_lenses(doc, ls.results, ls.encoding, ls.codicons) if doc else []

    @ls.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(
        code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.RefactorRewrite, "refactor.kerntune"]))
    def code_action(ls: KerntuneServer, params: lsp.CodeActionParams):
        doc = ls.docs.get(params.text_document.uri)
        return code_actions(doc, ls.results, params, ls.encoding) if doc else []

    @ls.feature(lsp.TEXT_DOCUMENT_HOVER)
    def on_hover(ls: KerntuneServer, params: lsp.HoverParams):
        doc = ls.docs.get(params.text_document.uri)
        return hover(ls.docs, doc, ls.results, params.position, ls.encoding) if doc else None

    @ls.feature(lsp.TEXT_DOCUMENT_INLAY_HINT)
    def inlay_hint(ls: KerntuneServer, params: lsp.InlayHintParams):
        doc = ls.docs.get(params.text_document.uri)
        return inlay_hints(ls.docs, doc, ls.results, params.range, ls.encoding) if doc else []

    # ------------------------------------------------------------------ commands (arguments: uri, kernel)
    @ls.command(commands.OPTIMIZE)
    async def optimize(ls: KerntuneServer, uri: str, kernel: str, *rest):
        """Arguments: uri, kernel[, {"budget", "strategy", "timeBudgetSeconds", "seed"}] (over the settings)."""
        options = rest[0] if rest and isinstance(rest[0], dict) else None
        doc = ls.doc_or_error(uri)
        settings = await ls.load_settings()
        return await ls.jobs.start(uri, doc.path, doc.text, kernel, settings, options)

    @ls.command(commands.CANCEL)
    def cancel(ls: KerntuneServer, uri: str, kernel: str):
        doc = ls.doc_or_error(uri)
        return {"cancelled": ls.jobs.cancel(doc.path, kernel)}

    @ls.command(commands.TEMPLATIZE)
    async def templatize_cmd(ls: KerntuneServer, uri: str, kernel: str, *rest):
        """Arguments: uri, kernel[, force] (force overwrites existing template files)."""
        force = bool(rest[0]) if rest else False
        doc = ls.doc_or_error(uri)
        loop = asyncio.get_running_loop()
        try:
            tpath, spath, written = await loop.run_in_executor(None, _templatize, doc.path, doc.text, kernel, force)
        except KerntuneError as e:
            ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error,
                                                         message=f"kerntune: cannot templatize '{kernel}': {e}"))
            return {"status": "error", "message": str(e)}
        ls.docs.kernel_cache.pop((uri, kernel), None)
        doc.cache.clear()
        if getattr(getattr(ls.client_capabilities, "window", None), "show_document", None):
            for p, focus in ((spath, False), (tpath, True)):
                try:
                    await ls.window_show_document_async(lsp.ShowDocumentParams(uri=Path(p).as_uri(),
                                                                               take_focus=focus))
                except Exception as e:
                    log.info("showDocument failed: %r", e)
        ls.publish(uri)
        return {"status": "written" if written else "exists", "template": str(tpath), "space": str(spath)}

    @ls.command(commands.APPLY_BEST)
    async def apply_best(ls: KerntuneServer, uri: str, kernel: str):
        doc = ls.doc_or_error(uri)
        summary = ls.results.summary(doc, kernel)
        version, text = doc.version, doc.text
        loop = asyncio.get_running_loop()
        try:
            new, warnings = await loop.run_in_executor(None, best_text, doc.path, text, kernel, summary)
        except KerntuneError as e:
            ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error,
                                                         message=f"kerntune: cannot apply: {e.message}"))
            return {"applied": False, "message": e.message}
        if doc.version != version:
            return {"applied": False, "message": "the document changed while the rewrite was checked; try again"}
        # recorded before the edit is sent: the client's didChange with the new text may come before its answer,
        # and a file with exactly this text is the applied result whether or not this edit wrote it
        await loop.run_in_executor(None, _record_applied, doc.path, kernel, summary, new)
        ls.results.forget(doc.path)
        edit = workspace_edit(doc, new, ls.encoding)
        res = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            edit=edit, label=f"kerntune: apply best configuration of {kernel}"))
        if res.applied:
            for w in warnings:
                ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Warning, message=f"kerntune: {w}"))
        ls.results.forget(doc.path)
        ls.refresh(uri, True)
        return {"applied": bool(res.applied), "params": summary.get("best_params") if summary else None,
                "message": res.failure_reason, "warnings": warnings}

    @ls.command(commands.CREATE_SPEC)
    async def create_spec(ls: KerntuneServer, uri: str, kernel: str):
        doc = ls.doc_or_error(uri)
        try:
            new = spec_text(doc, kernel)
        except KerntuneError as e:
            return {"applied": False, "message": e.message}
        res = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(
            edit=workspace_edit(doc, new, ls.encoding), label=f"kerntune: tuning spec for {kernel}"))
        return {"applied": bool(res.applied)}

    @ls.command(commands.SHOW_RESULT)
    def show_result(ls: KerntuneServer, uri: str, kernel: str):
        doc = ls.doc_or_error(uri)
        s = ls.results.summary(doc, kernel)
        live = ls.results.live.get((doc.path, kernel))
        if live is not None and not live.finished:
            return {"running": True, "done": live.done, "total": live.total, "speedup": live.speedup}
        return s

    @ls.feature(lsp.SHUTDOWN)
    def shutdown(ls: KerntuneServer, *args):
        ls.jobs.shutdown()
        ls.results.close()

    return ls


CODICON_CLIENTS = ("visual studio code", "code - oss", "code-server", "vscodium", "cursor", "windsurf")


def renders_codicons(client_info, init_options) -> bool:
    """Whether lens titles may carry ``$(icon)`` codicons: VS Code and its builds (by ``clientInfo.name``:
    vscode-languageclient sends the application's name), or a client that says so in its initialization options
    (``{"codicons": true}``). Other clients (Neovim, Emacs, Helix, ...) would show the text literally."""
    if isinstance(init_options, dict) and isinstance(init_options.get("codicons"), bool):
        return init_options["codicons"]
    name = (getattr(client_info, "name", None) or "").lower()
    return any(c in name for c in CODICON_CLIENTS)


def _record_applied(path: str, kernel: str, summary: dict, new_text: str) -> None:
    from agent_core.search.tuner import record_applied
    from agent_core.store import Store
    from agent_core.workspace import store_path_for

    store = Store(store_path_for(path))
    try:
        record_applied(store, summary, path, kernel, new_text)
    finally:
        store.close()


def _templatize(path: str, text: str, kernel: str, force: bool):
    from agent_core.templating.space import template_file_names
    from agent_core.templating.workfiles import write_template_files
    from agent_core.templating.templatize import templatize
    from agent_core.search.tuner import parse_checked
    from agent_core.workspace import workdir_for

    cf, _ = parse_checked(path, kernel, text)
    wd = workdir_for(path)
    tname, sname = template_file_names(path, kernel)
    if (wd / sname).exists() and (wd / tname).exists() and not force:
        return wd / tname, wd / sname, False
    t = templatize(cf, kernel)
    tpath, spath = write_template_files(t, wd)
    return tpath, spath, True
