"""A real OpenAI-compatible chat-completions server on 127.0.0.1 (ephemeral port, a thread) that replays
a transcript (agent_core.agent.llm.transcript): each POST to /v1/chat/completions gets the next exchange.
It keeps every request it received (headers and JSON body) for the tests to inspect."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agent_core.agent.llm.transcript import completion_body, load

TRANSCRIPTS = Path(__file__).parent / "data" / "transcripts"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        srv: ReplayServer = self.server.owner  # type: ignore[attr-defined]
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        with srv.lock:
            srv.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            ex = srv.exchanges.pop(0) if srv.exchanges else None
        if not self.path.endswith("/chat/completions"):
            return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        if ex is None:
            return self._send(500, {"error": {"message": "transcript exhausted", "type": "test_server"}})
        problem = _check(ex.get("expect") or {}, body)
        if problem:
            srv.mismatches.append(problem)
            return self._send(400, {"error": {"message": f"test server: {problem}", "type": "test_server"}})
        if ex.get("delay_s"):
            time.sleep(float(ex["delay_s"]))
        if ex.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        headers = ex.get("headers") or {}
        if "raw" in ex:
            return self._send(int(ex.get("status", 200)), ex["raw"], headers)
        if "status" in ex and int(ex["status"]) != 200:
            return self._send(int(ex["status"]), ex.get("body") or {}, headers)
        content = json.dumps(ex["reply"]) if "reply" in ex else ex.get("content")
        model = (body or {}).get("model", "replay")
        self._send(200, completion_body(model, content, ex.get("finish_reason", "stop"), ex.get("usage")), headers)

    def _send(self, status: int, payload, headers: dict | None = None):
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass


def _check(expect: dict, body: dict | None) -> str | None:
    if not expect:
        return None
    if body is None:
        return "request body is not JSON"
    role = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    if "role" in expect and role != expect["role"]:
        return f"expected a {expect['role']} request, got {role}"
    if "contains" in expect:
        last = (body.get("messages") or [{}])[-1].get("content") or ""
        if expect["contains"] not in last:
            return f"last message does not contain {expect['contains']!r}"
    return None


class ReplayServer:
    """``with ReplayServer(exchanges) as srv: srv.base_url`` (ends with /v1)."""

    def __init__(self, exchanges: list[dict] | str | Path):
        if isinstance(exchanges, (str, Path)):
            p = Path(exchanges)
            exchanges = load(p if p.suffix else TRANSCRIPTS / f"{p}.json")["exchanges"]
        self.exchanges = [dict(e) for e in exchanges]
        self.requests: list[dict] = []
        self.mismatches: list[str] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ReplayServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def remaining(self) -> int:
        return len(self.exchanges)


def free_port() -> int:
    """A port with nothing listening on it (bound, then released)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":  # serve a transcript by hand: python -m tests.llm_server row_sum_loop
    import sys
    with ReplayServer(sys.argv[1]) as srv:
        print(f"KERNTUNE_LLM_BASE_URL={srv.base_url}", flush=True)
        try:
            while srv.remaining:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        time.sleep(0.5)
        print(f"served {len(srv.requests)} requests; mismatches: {srv.mismatches or 'none'}")
