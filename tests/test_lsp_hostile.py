"""Hostile and broken editor traffic (issue #15), written as raw frames to the server's stdin: every request is
answered (a JSON-RPC error where it must be: -32700, -32600, -32602, -32803, -32603 without a traceback),
a change that cannot be applied is refused as a whole and the document re-synchronised (from disk after a
save), never guessed, and the server stays up throughout."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "node" / "fixtures" / "kernels.cu"


class RawClient:
    """Frames written by hand to a `python -m server` process; every message it sends back is collected."""

    def __init__(self, cwd: Path):
        env = {**os.environ, "PYTHONPATH": str(REPO), "KERNTUNE_BACKEND": "", "KERNTUNE_LOG_LEVEL": "warning",
               "KERNTUNE_CACHE": str(cwd / "cache")}
        for v in ("KERNTUNE_STORE", "KERNTUNE_WORKDIR"):
            env.pop(v, None)
        self.proc = subprocess.Popen([sys.executable, "-m", "server"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(cwd / "server.log", "wb"))
        self.inbox: queue.Queue = queue.Queue()
        self.got: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line in (b"\r\n", b"\n"):
                    break
            self.inbox.put(json.loads(out.read(length)))

    def frame(self, body: bytes) -> None:
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def send(self, msg: dict) -> None:
        self.frame(json.dumps({"jsonrpc": "2.0", **msg}).encode())

    def request(self, id_, method, params) -> None:
        self.send({"id": id_, "method": method, "params": params})

    def notify(self, method, params) -> None:
        self.send({"method": method, "params": params})

    def wait(self, pred, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        for m in self.got:
            if pred(m):
                return m
        while time.monotonic() < deadline:
            try:
                m = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.got.append(m)
            if pred(m):
                return m
        raise AssertionError(f"no such message in {timeout} s; got {[_short(m) for m in self.got]}")

    def reply(self, id_, timeout: float = 30.0) -> dict:
        return self.wait(lambda m: m.get("id") == id_ and ("result" in m or "error" in m) and "method" not in m,
                         timeout)

    def close(self) -> None:
        try:
            self.request(9999, "shutdown", None)
            self.reply(9999, 10)
            self.notify("exit", None)
            self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _short(m: dict) -> str:
    return json.dumps(m)[:160]


@pytest.fixture
def raw(tmp_path):
    cu = tmp_path / "kernels.cu"
    shutil.copy(FIXTURE, cu)
    c = RawClient(tmp_path)
    c.request(1, "initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    assert "result" in c.reply(1, 60)
    c.notify("initialized", {})
    c.uri, c.path = cu.as_uri(), cu
    c.notify("textDocument/didOpen", {"textDocument": {"uri": c.uri, "languageId": "cuda-cpp", "version": 1,
                                                        "text": cu.read_text()}})
    yield c
    c.close()


def _lens_lines(c: RawClient, id_) -> list[int]:
    c.request(id_, "textDocument/codeLens", {"textDocument": {"uri": c.uri}})
    r = c.reply(id_)
    assert "result" in r, r
    return sorted({lens["range"]["start"]["line"] for lens in r["result"] or []})


def test_every_malformed_request_is_answered(raw):
    c = raw
    doc = {"uri": c.uri}
    c.request(10, "textDocument/hover", {"textDocument": doc, "position": "the middle"})
    c.request(11, "textDocument/codeAction", {"textDocument": doc, "range": [1, 2], "context": {"diagnostics": []}})
    c.request(12, "textDocument/hover", {"textDocument": doc})  # no position
    c.request(13, "textDocument/inlayHint", {"textDocument": doc,
                                             "range": {"start": {"line": -4, "character": 0}, "end": 7}})
    c.frame(b"{this is not json")
    c.frame(b"\xff\xfe\x00 not utf-8")
    c.frame(b"[1, 2, 3]")
    c.frame(b'"a string"')
    c.frame(b"[" * 100000 + b"]" * 100000)
    c.request(14, "workspace/executeCommand", {"command": "kerntune.optimize", "arguments": []})
    c.request(15, "workspace/executeCommand", {"command": "kerntune.showResult",
                                               "arguments": ["file:///nowhere/x.cu", "k"]})
    c.request(16, "workspace/executeCommand", {"command": "kerntune.showResult", "arguments": [{"a": 1}, 5]})
    c.request(17, "textDocument/hover", {"textDocument": doc, "position": {"line": 10 ** 6, "character": 10 ** 6}})
    c.request(18, "kerntune/noSuchMethod", {})
    for i in (10, 11, 12, 13):
        r = c.reply(i)
        assert r["error"]["code"] == -32602, r
        assert "Traceback" not in json.dumps(r)
    c.wait(lambda m: sum(1 for x in c.got if x.get("error", {}).get("code") in (-32600, -32700)) >= 5)
    codes = sorted(x["error"]["code"] for x in c.got if x.get("error", {}).get("code") in (-32600, -32700))
    assert codes.count(-32700) >= 2 and codes.count(-32600) >= 2, codes
    assert all(x["id"] is None for x in c.got if x.get("error", {}).get("code") in (-32600, -32700))
    r = c.reply(14)
    assert r["error"]["code"] == -32602 and "traceback" not in json.dumps(r).lower(), r
    r = c.reply(15)
    assert r["error"]["code"] == -32803 and "not open in the editor" in r["error"]["message"], r
    r = c.reply(16)
    assert "error" in r and "traceback" not in json.dumps(r).lower(), r
    assert "result" in c.reply(17)  # a position past the end is clamped, as LSP says
    assert c.reply(18)["error"]["code"] == -32601
    assert c.proc.poll() is None
    assert _lens_lines(c, 19)  # still serving


def test_a_change_that_cannot_be_applied_is_refused_whole_and_resynchronised(raw):
    c = raw
    before = _lens_lines(c, 20)
    insert = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
              "text": "// one\n// two\n"}
    reversed_ = {"range": {"start": {"line": 5, "character": 0}, "end": {"line": 2, "character": 0}}, "text": ""}
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 2},
                                        "contentChanges": [insert, reversed_]})
    warn = c.wait(lambda m: m.get("method") == "window/showMessage")
    assert "could not be applied" in warn["params"]["message"]
    cleared = c.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics" and not m["params"]["diagnostics"])
    assert cleared
    # out of sync: nothing is computed on a guessed text, and requests are still answered
    assert _lens_lines(c, 21) == []
    c.request(22, "workspace/executeCommand", {"command": "kerntune.showResult", "arguments": [c.uri, "scale"]})
    assert "out of sync" in c.reply(22)["error"]["message"]
    # further edits relative to the editor's text are not guessed either
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 3}, "contentChanges": [insert]})
    assert _lens_lines(c, 23) == []
    # the editor saves: its text is the file's, which the server reads back
    text = c.path.read_text()
    c.path.write_text("// one\n// two\n// one\n// two\n" + text)
    c.notify("textDocument/didSave", {"textDocument": {"uri": c.uri}})
    assert _lens_lines(c, 24) == [x + 4 for x in before]
    # a whole text brings it in sync too; then edits apply again
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 5}, "contentChanges": [
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}, "text": "x"},
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "bad"}]})
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 6},
                                        "contentChanges": [{"text": text}]})
    assert _lens_lines(c, 25) == before
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 7}, "contentChanges": [insert]})
    assert _lens_lines(c, 26) == [x + 2 for x in before]
    assert c.proc.poll() is None


def test_a_malformed_change_notification_desynchronises_instead_of_guessing(raw):
    c = raw
    before = _lens_lines(c, 30)
    c.notify("textDocument/didChange", {"textDocument": {"uri": c.uri, "version": 2},
                                        "contentChanges": [{"range": "everything", "text": 5}]})
    c.wait(lambda m: m.get("method") == "window/showMessage")
    assert _lens_lines(c, 31) == []
    c.notify("textDocument/didSave", {"textDocument": {"uri": c.uri}})
    assert _lens_lines(c, 32) == before
