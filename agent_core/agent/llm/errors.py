"""Errors of the LLM path. Each says what went wrong with the endpoint or the answer and what happens next;
none ever carries the API key (``redact``)."""

from __future__ import annotations

from agent_core.model import KerntuneError

# kinds after which the session stops asking the model (it goes on offline)
FATAL_KINDS = {"unreachable", "auth", "limit", "bad_request", "not_found"}


class LlmError(KerntuneError):
    """A model call that gave no usable answer. ``kind`` is one of: timeout, rate_limited, server_error,
    unreachable, auth, not_found, bad_request, bad_json, truncated, schema, context, limit."""

    def __init__(self, kind: str, message: str, role: str = "", attempts: int = 0):
        super().__init__(message)
        self.kind = kind
        self.role = role
        self.attempts = attempts

    @property
    def fatal(self) -> bool:
        """True when asking again in this session is pointless (offline from here on)."""
        return self.kind in FATAL_KINDS


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` (and of its longer fragments) replaced."""
    if not text or not secret:
        return text
    out = text.replace(secret, "[api key]")
    # servers echo keys partially ("sk-abc...xyz"): drop any 8+ character piece of it too
    if len(secret) >= 12:
        n = 8
        for i in range(0, len(secret) - n + 1):
            piece = secret[i:i + n]
            if piece in out:
                out = out.replace(piece, "[api key]")
    return out
