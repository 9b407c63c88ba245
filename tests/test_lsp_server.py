"""End to end through a real LSP client (pytest-lsp) driving `python -m server` (what `kerntune lsp` runs):
open, diagnostics, lenses, code actions, the spec quick fix, templatize, optimize without a GPU, hover,
bad documents; optimize over a replayed H100 recording with progress and cancel, hover / inlay hints from
the store, apply best, restart and see the results again.

Every wait is bounded: nothing here waits for a notification that may already have arrived."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Union

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "node" / "fixtures" / "kernels.cu"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "KERNTUNE_BACKEND": "", "KERNTUNE_LOG_LEVEL": "debug"}
ENV.pop("KERNTUNE_STORE", None)
ENV.pop("KERNTUNE_WORKDIR", None)


def fix_code_action_decoding(client: LanguageClient) -> None:
    """lsprotocol's client-side hook decodes every ``(Command | CodeAction)`` that has a "command" key as a
    Command, so a CodeAction that carries a command comes back as a Command without its kind. Tell them apart
    the way vscode-languageclient does: a Command's "command" is a string, a CodeAction's is an object."""
    conv = client.protocol._converter

    def hook(obj, _):
        if isinstance(obj.get("command"), str):
            return conv.structure(obj, lsp.Command)
        return conv.structure(obj, lsp.CodeAction)

    conv.register_structure_hook(Union[lsp.Command, lsp.CodeAction], hook)


def add_editor_handlers(client: LanguageClient) -> None:
    """What VS Code answers and pytest-lsp does not: applyEdit (recorded) and the refresh requests; the
    version of the last diagnostics per document (pytest-lsp keeps only the diagnostics)."""
    fix_code_action_decoding(client)
    client.applied_edits = []
    client.refreshes = 0
    client.diag_versions = {}
    client.diag_count = 0
    features = client.protocol.fm.features
    publish = features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def publish_diagnostics(params: lsp.PublishDiagnosticsParams):
        client.diag_versions[params.uri] = params.version
        client.diag_count += 1
        return publish(params)

    features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish_diagnostics

    @client.feature(lsp.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: lsp.ApplyWorkspaceEditParams):
        client.applied_edits.append(params.edit)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params):
        client.refreshes += 1
        return None

    @client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)
    def hint_refresh(params):
        return None


async def wait_until(pred, what: str, timeout: float = 20.0):
    """Poll ``pred()`` until it is truthy (and return it); fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        got = pred()
        if got:
            return got
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.01)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "server"], server_env=ENV))
async def client(lsp_client: LanguageClient):
    add_editor_handlers(lsp_client)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), process_id=os.getpid()))
    yield
    await lsp_client.shutdown_session()


def open_doc(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(
        uri=uri, language_id="cuda-cpp", version=version, text=path.read_text() if text is None else text)))
    return uri


async def diagnostics_for(client: LanguageClient, uri: str, version: int | None = None) -> list[lsp.Diagnostic]:
    """The diagnostics published for ``uri`` (for its ``version`` when given), waiting for them if needed."""
    await wait_until(lambda: uri in client.diagnostics and (version is None or client.diag_versions.get(uri) == version),
                     f"diagnostics of {uri} (version {version})")
    return list(client.diagnostics[uri])


def apply_text_edits(text: str, edit: lsp.WorkspaceEdit) -> str:
    """Apply a WorkspaceEdit's TextEdits (UTF-16 positions) the way an editor does."""
    (change,) = edit.document_changes
    lines = text.split("\n")

    def offset(p: lsp.Position) -> int:
        before = "\n".join(lines[:p.line]) + ("\n" if p.line else "")
        line = lines[p.line] if p.line < len(lines) else ""
        units, i = 0, 0
        while i < len(line) and units < p.character:
            units += 2 if ord(line[i]) > 0xFFFF else 1
            i += 1
        return len(before) + i

    spans = sorted(((offset(e.range.start), offset(e.range.end), e.new_text) for e in change.edits), reverse=True)
    for s, e, r in spans:
        text = text[:s] + r + text[e:]
    return text


@pytest.fixture
def cu(tmp_path) -> Path:
    p = tmp_path / "kernels.cu"
    shutil.copy(FIXTURE, p)
    return p


async def test_open_publishes_tunables_and_missing_spec(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    diags = await diagnostics_for(client, uri)
    by_code = {}
    for d in diags:
        by_code.setdefault(d.code, []).append(d)
    assert "missing-spec" in by_code, [d.message for d in diags]
    (missing,) = by_code["missing-spec"]
    assert missing.data["kernel"] == "shift" and missing.severity == lsp.DiagnosticSeverity.Information
    tunables = by_code.get("tunable", [])
    assert tunables, [d.message for d in diags]
    # the scale kernel's hard-coded 256 on the line with the emoji: its UTF-16 column
    line10 = cu.read_text().split("\n")[9]
    hits = [d for d in tunables if d.range.start.line == 9]
    if hits:
        utf16 = len(line10[:line10.index("256")].encode("utf-16-le")) // 2
        assert hits[0].range.start.character == utf16
    assert all(d.source == "kerntune" for d in diags)


async def test_code_lenses_and_actions(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    await diagnostics_for(client, uri)
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri)))
    titles = sorted((lz.range.start.line, lz.command.title, lz.command.arguments[1]) for lz in lenses)
    assert (9, "Optimize kernel", "scale") in titles and (9, "Templatize", "scale") in titles
    assert any(t[1] == "Optimize kernel" and t[2] == "shift" for t in titles)
    assert all(lz.command.arguments[0] == uri for lz in lenses)

    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(start=lsp.Position(line=14, character=0), end=lsp.Position(line=14, character=0)),
        context=lsp.CodeActionContext(diagnostics=[])))
    titles = [a.title for a in actions]
    assert any("Optimize kernel 'shift'" in t for t in titles) and any("Templatize 'shift'" in t for t in titles)


async def test_create_spec_quick_fix_inserts_the_draft(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    diags = await diagnostics_for(client, uri)
    missing = [d for d in diags if d.code == "missing-spec"]
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=missing[0].range,
        context=lsp.CodeActionContext(diagnostics=missing)))
    fixes = [a for a in actions if a.kind == lsp.CodeActionKind.QuickFix]
    assert len(fixes) == 1 and "Create tuning spec" in fixes[0].title
    new = apply_text_edits(cu.read_text(), fixes[0].edit)
    assert new.count("/* kerntune:") == 2
    assert new.index("/* kerntune:", new.index("void scale")) < new.index("__global__ void shift")

    # the same through the command: a workspace/applyEdit the client applies
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.createSpec", arguments=[uri, "shift"]))
    assert res["applied"] is True and len(client.applied_edits) == 1


async def test_templatize_writes_the_template_and_space(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    await diagnostics_for(client, uri)
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.templatize", arguments=[uri, "scale"]))
    assert res["status"] == "written", res
    tpath, spath = Path(res["template"]), Path(res["space"])
    assert tpath.parent == cu.parent / ".kerntune" and tpath.is_file() and spath.is_file()
    assert "KT_" in tpath.read_text()
    assert "[params" in spath.read_text() or "params" in spath.read_text()
    again = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.templatize", arguments=[uri, "scale"]))
    assert again["status"] == "exists"  # never overwrites the user's edits


async def test_optimize_without_a_gpu_says_so(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    await diagnostics_for(client, uri)
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.optimize", arguments=[uri, "scale"]))
    assert res["status"] == "no-gpu", res
    assert "no CUDA device" in res["message"]
    # the message is sent before the answer: it is already there (or on its way), never waited for blindly
    await wait_until(lambda: any("no CUDA device" in m.message for m in client.messages), "the no-GPU message")
    # a kernel without a spec fails before the device is looked for, with the spec's problem
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.optimize", arguments=[uri, "shift"]))
    assert res["status"] == "error" and "spec" in res["message"]


async def test_hover_on_kernel_and_tunable_without_results(client: LanguageClient, cu: Path):
    uri = open_doc(client, cu)
    diags = await diagnostics_for(client, uri)
    text = cu.read_text().split("\n")
    h = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        position=lsp.Position(line=9, character=text[9].index("scale") + 2)))
    assert h is not None and "scale" in h.contents.value and "No tuning result yet" in h.contents.value
    tun = next(d for d in diags if d.code == "tunable")
    h = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=tun.range.start))
    assert h is not None and "Domain" in h.contents.value


async def test_incremental_edits_keep_positions(client: LanguageClient, cu: Path):
    text = cu.read_text()
    lines0 = ("// ünïcödé 😀\n" + text).split("\n")
    uri = open_doc(client, cu, text)
    await diagnostics_for(client, uri)
    # insert a line with non-ASCII above everything: every lens moves down by one
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
            text="// ünïcödé 😀\n")]))
    # type inside the comment right after the emoji on the kernel's line (a UTF-16 column past a surrogate pair)
    emoji_line = lines0[10]
    after_emoji = len(emoji_line[:emoji_line.index("😀") + 1].encode("utf-16-le")) // 2
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=3),
        content_changes=[lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=10, character=after_emoji),
                            end=lsp.Position(line=10, character=after_emoji)),
            text=" é€𝄞")]))
    # and break a line inside the kernel body: everything below moves down once more
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=4),
        content_changes=[lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=11, character=2), end=lsp.Position(line=11, character=2)),
            text="\n  ")]))
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri)))
    scale = [lz for lz in lenses if lz.command.arguments[1] == "scale"]
    assert scale and scale[0].range.start.line == 10
    diags = await diagnostics_for(client, uri, version=4)
    assert any(d.code == "missing-spec" and d.range.start.line == 15 for d in diags), \
        [(d.code, d.range.start.line) for d in diags]
    line10 = ("// ünïcödé 😀\n" + text).split("\n")[10]
    line10 = line10[:line10.index("😀") + 1] + " é€𝄞" + line10[line10.index("😀") + 1:]
    col256 = len(line10[:line10.index("256")].encode("utf-16-le")) // 2
    assert any(d.code == "tunable" and (d.range.start.line, d.range.start.character) == (10, col256) for d in diags)
    # the incrementally re-parsed document says exactly what a fresh parse of the same text says
    lines = ("// ünïcödé 😀\n" + text).split("\n")
    lines[10] = line10
    lines[11] = lines[11][:2] + "\n  " + lines[11][2:]
    fresh = cu.with_name("fresh.cu")
    fresh.write_text("\n".join(lines), encoding="utf-8")
    furi = open_doc(client, fresh)
    fdiags = await diagnostics_for(client, furi)

    def key(ds):
        return sorted((d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character,
                       d.message) for d in ds)

    assert key(diags) == key(fdiags)


@pytest.mark.parametrize("text", [
    "",
    "\x00\x01 garbage ☃ <<<>>> {{{{",
    "__global__ void broken(int* p { p[0] = 1; ",
    "#define __global__\n__global__ void k(float* x) { x[0] = 1; }\n",
    "template <int N> __global__ void t(float* x) {\n#pragma unroll\n for (int i = 0; i < N; ++i) x[i] = 0; }\n",
])
async def test_bad_documents_never_break_the_server(client: LanguageClient, tmp_path: Path, text: str):
    p = tmp_path / "bad.cu"
    p.write_text(text)
    uri = open_doc(client, p, text)
    await diagnostics_for(client, uri)
    td = lsp.TextDocumentIdentifier(uri=uri)
    await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))
    await client.text_document_hover_async(lsp.HoverParams(text_document=td, position=lsp.Position(line=0, character=3)))
    await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=td, range=lsp.Range(
        start=lsp.Position(line=0, character=0), end=lsp.Position(line=99, character=0))))
    # a command on a kernel that is not there is an error answer, not a dead server
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="kerntune.optimize", arguments=[uri, "nope"]))
    assert res["status"] == "error"
    # an unknown document is an error response
    with pytest.raises(Exception):
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="kerntune.applyBest", arguments=["file:///nowhere.cu", "k"]))
    # still alive
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=td))
    assert isinstance(lenses, (list, tuple))  # lsprotocol decodes JSON arrays as tuples
