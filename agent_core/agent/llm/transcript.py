"""Transcripts: the exchanges of a session with the endpoint, in a JSON file a test server can replay.

A transcript is ``{"description": str, "exchanges": [EXCHANGE, ...]}``; each exchange answers one HTTP
request to ``/chat/completions``, in order:

- ``expect``: optional checks of the request: ``{"role": NAME}`` (the response_format schema name),
  ``{"contains": TEXT}`` (in the last message).
- an answer, one of: ``reply`` (a JSON value, sent as the message content), ``content`` (raw content text),
  ``status`` + ``body`` (an HTTP error, e.g. 429 with ``{"error": {...}}``), ``raw`` (a raw response body),
  ``drop`` (close the connection without answering).
- optional ``finish_reason`` (default "stop"), ``usage`` ({"prompt_tokens", "completion_tokens"}),
  ``headers`` (e.g. {"retry-after": "1"}), ``delay_s`` (wait before answering: timeouts).

``Recorder`` writes what a real endpoint answered in this format (the API key is never part of it).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from agent_core.model import KerntuneError


def load(path: str | Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise KerntuneError(f"cannot read transcript {path}: {e}", str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("exchanges"), list):
        raise KerntuneError("a transcript is an object with a list of exchanges", str(path))
    return data


def completion_body(model: str, content: str | None, finish_reason: str = "stop", usage: dict | None = None,
                    created: int | None = None) -> dict:
    """An OpenAI chat.completion response object with one choice."""
    usage = usage or {}
    p, c = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {
        "id": "chatcmpl-kerntune", "object": "chat.completion", "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": None,
                     "message": {"role": "assistant", "content": content, "refusal": None}}],
        "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
    }


class Recorder:
    """Appends each exchange to a transcript file (rewritten whole after each, so it is always valid)."""

    def __init__(self, path: str | Path, description: str = "recorded by kerntune"):
        self.path = Path(path)
        self.lock = threading.Lock()
        if self.path.is_file():
            self.data = load(self.path)
        else:
            self.data = {"description": description, "exchanges": []}

    def add(self, role: str, answer: dict, last_message: str = "") -> None:
        ex = {"expect": {"role": role}, **answer}
        with self.lock:
            self.data["exchanges"].append(ex)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
            tmp.replace(self.path)
