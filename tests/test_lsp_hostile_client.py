"""Hostile traffic through a real LSP client (pytest-lsp over stdio, as tests/test_lsp_server.py drives the
server): malformed requests are answered with JSON-RPC errors, and edits the server cannot apply leave its copy
of the document in sync with the editor's (refused whole, re-read after a save), never guessed."""

from __future__ import annotations

import asyncio
import sys

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.test_lsp_server import ENV, add_editor_handlers, client_capabilities, cu, open_doc, wait_until  # noqa: F401


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "server"], server_env=ENV))
async def client(lsp_client: LanguageClient):
    import os
    add_editor_handlers(lsp_client)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), process_id=os.getpid()))
    yield
    await lsp_client.shutdown_session()


async def lens_lines(client: LanguageClient, uri: str) -> list[int]:
    got = await client.text_document_code_lens_async(lsp.CodeLensParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri)))
    return sorted({x.range.start.line for x in got or []})


async def _raw(client: LanguageClient, method: str, params: dict):
    """A request with params as given: the client's own request machinery (its future, its reply handling),
    with the message written as plain JSON, since lsprotocol would not let malformed params out."""
    import uuid
    from concurrent.futures import Future
    msg_id = str(uuid.uuid4())
    fut: Future = Future()
    client.protocol._request_futures[msg_id] = fut
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return await asyncio.wait_for(asyncio.wrap_future(fut), 30)


def _pos(line: int, ch: int = 0) -> lsp.Position:
    return lsp.Position(line=line, character=ch)


def _edit(s: lsp.Position, e: lsp.Position, text: str):
    return lsp.TextDocumentContentChangePartial(range=lsp.Range(start=s, end=e), text=text)


async def test_malformed_requests_are_answered_with_errors(client: LanguageClient, cu):
    uri = open_doc(client, cu)
    await wait_until(lambda: uri in client.diagnostics, "diagnostics")
    for method, params in (
            ("textDocument/hover", {"textDocument": {"uri": uri}, "position": "here"}),
            ("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": 3, "context": {}}),
            ("textDocument/inlayHint", {"textDocument": {"uri": uri}})):
        with pytest.raises(JsonRpcException) as ei:
            await _raw(client, method, params)
        assert ei.value.code == -32602 and method in ei.value.message
    with pytest.raises(JsonRpcException) as ei:
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="kerntune.templatize", arguments=[uri]))
    assert ei.value.code == -32602 and "Traceback" not in ei.value.message
    with pytest.raises(JsonRpcException) as ei:
        await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="kerntune.showResult", arguments=["file:///not/open.cu", "k"]))
    assert ei.value.code == -32803 and "not open in the editor" in ei.value.message
    assert await lens_lines(client, uri)  # and it goes on serving


async def test_a_bad_edit_in_a_batch_is_refused_whole_and_the_document_resynchronised(client: LanguageClient, cu):
    uri = open_doc(client, cu)
    before = await lens_lines(client, uri)
    assert before
    text = cu.read_text()
    # the editor inserts two lines, then sends an edit the server cannot apply (its range is reversed)
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[_edit(_pos(0), _pos(0), "// a\n// b\n"), _edit(_pos(6), _pos(3), "")]))
    await wait_until(lambda: any("could not be applied" in m.message for m in client.messages), "the warning")
    assert await lens_lines(client, uri) == []  # nothing is computed on a guessed text
    # the editor saves what it has: the server reads it back and is in sync again
    new_text = "// a\n// b\n" + text
    cu.write_text(new_text)
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert await lens_lines(client, uri) == [x + 2 for x in before]
    # edits apply again, on the text the editor has
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=3),
        content_changes=[_edit(_pos(0), _pos(2), "")]))
    assert await lens_lines(client, uri) == before
