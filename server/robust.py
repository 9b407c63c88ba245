"""Request-level robustness: every request the client sends gets a reply, and no reply carries a traceback.

- A message whose params do not fit its method (a hover without a position, a code action whose range is a
  string) is answered ``-32602 invalid params`` naming the method (pygls only logs it: the client would wait
  forever); a malformed notification is logged and dropped (a ``didChange`` that cannot be read marks the
  document out of sync, see ``documents.py``).
- A body that is not JSON (or not UTF-8) is answered ``-32700 parse error`` with a null id; JSON that is not a
  request object is answered ``-32600 invalid request``.
- A handler that fails answers with a clean error: ``-32803 request failed`` with the message of a
  ``KerntuneError`` (the user can act on it), ``-32603 internal error`` naming the exception otherwise; the
  traceback goes to the server's log only.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any, Callable

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from agent_core.model import KerntuneError

log = logging.getLogger("kerntune.server")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR, REQUEST_FAILED = -32700, -32600, -32602, -32603, -32803


class Answered:
    """What ``structure_message`` hands on for a message it already answered (or dropped): nothing to do."""
    jsonrpc = None

    def __init__(self, what: str):
        self.what = what


def is_request(method: str) -> bool:
    """True when ``method`` expects a response (LSP requests, and unknown methods sent with an id)."""
    types = lsp.METHOD_TO_TYPES.get(method)
    return types is None or types[1] is not None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _cause(exc: BaseException) -> str:
    """The innermost reason of a params error (cattrs wraps the field's own error)."""
    seen = exc
    while seen.__cause__ is not None:
        seen = seen.__cause__
    subs = getattr(seen, "exceptions", None)
    if subs:
        notes = getattr(subs[0], "__notes__", None) or []
        return f"{notes[0] if notes else ''} {_short(subs[0])}".strip()
    return _short(seen)


def reply_error(protocol, msg_id, code: int, message: str) -> None:
    """Send a JSON-RPC error response through the protocol's writer (``"id": null`` kept, as JSON-RPC wants
    when the id could not be read)."""
    protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def answer_unstructurable(protocol, data: dict, exc: Exception, on_bad_notification: Callable | None) -> Answered:
    """A top-level message whose params do not fit its method: answer it (request) or log it (notification)."""
    method = data.get("method")
    msg_id = data.get("id")
    if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
        msg_id = None
    why = _cause(exc)
    if "id" in data and method is not None:
        log.warning("invalid params for %s (id %r): %s", method, msg_id, why)
        reply_error(protocol, msg_id, INVALID_PARAMS, f"invalid params for {method}: {why}")
        return Answered("invalid params")
    if "id" in data:  # a response to one of our requests that cannot be read: fail what waits on it
        log.warning("unreadable response to request %r: %s", msg_id, why)
        fut = protocol._request_futures.pop(msg_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(JsonRpcException(message=f"unreadable response: {why}", code=INVALID_PARAMS))
        return Answered("unreadable response")
    log.warning("dropped a malformed %s notification: %s", method, why)
    if on_bad_notification is not None:
        on_bad_notification(method, data.get("params"), why)
    return Answered("malformed notification")


def answer_not_a_request(protocol, message: Any) -> None:
    """JSON that is not a JSON-RPC message object."""
    msg_id = message.get("id") if isinstance(message, dict) else None
    if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
        msg_id = None
    log.warning("not a JSON-RPC message: %.200r", message)
    reply_error(protocol, msg_id, INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 message object")


def answer_parse_error(protocol, exc: BaseException) -> None:
    log.warning("a message body is not JSON: %s", _short(exc))
    reply_error(protocol, None, PARSE_ERROR, f"parse error: {_short(exc)}")


def is_parse_error(exc: BaseException) -> bool:
    return isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError, RecursionError))


def _clean(exc: Exception, method: str) -> JsonRpcException:
    if isinstance(exc, JsonRpcException):
        return exc
    if isinstance(exc, KerntuneError):
        return JsonRpcException(message=str(exc), code=REQUEST_FAILED)
    if isinstance(exc, TypeError) and "argument" in str(exc):  # a command called with the wrong arguments
        return JsonRpcException(message=f"invalid params for {method}: {_short(exc)}", code=INVALID_PARAMS)
    return JsonRpcException(message=f"kerntune: {method} failed: {type(exc).__name__}: {_short(exc)} "
                                    "(the server's log has the details)", code=INTERNAL_ERROR)


def guard(fn: Callable, method: str, request: bool) -> Callable:
    """``fn`` (a feature or command handler) with its failures turned into clean errors (requests) or logged
    (notifications); the signature is kept, so pygls passes the server and command arguments as before."""
    if asyncio.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def guarded_async(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("%s failed", method)
                if request:
                    raise _clean(e, method) from None
                return None
        return guarded_async

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            log.exception("%s failed", method)
            if request:
                raise _clean(e, method) from None
            return None
    return guarded
