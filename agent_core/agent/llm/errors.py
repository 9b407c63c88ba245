"""Errors of the LLM path. Each says what went wrong with the endpoint or the answer and what happens next;
none ever carries the API key (``redact``)."""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

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


_MASK = "[api key]"
# key-like things, whoever's key they are: auth headers, bearer tokens, sk-… style tokens
_KEYLIKE = [
    re.compile(r"(?i)\b((?:proxy-)?authorization|x-api-key|api[-_]?key|openai[-_]api[-_]key)(\"?\s*[:=]\s*\"?)"
               r"(?:(?:bearer|basic|token)\s+)?[^\s\"',;}]+"),
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\b(?:sk|pk|rk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{16,}"),
]
_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_PCT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~+-])*%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2}|[A-Za-z0-9._~+-])*")
_HEX_RUN = re.compile(r"[0-9A-Fa-f]{24,}")


def _contains_secret(text: str, secret: str) -> bool:
    low = text.lower()
    if secret.lower() in low:
        return True
    return len(secret) >= 12 and any(secret[i:i + 8].lower() in low for i in range(0, len(secret) - 7))


def _decoded_b64(run: str) -> list[str]:
    """What a base64 (or url-safe base64) run decodes to, at each of the alignments a key inside a longer
    encoded text could have."""
    out = []
    core = run.rstrip("=")
    for alphabet in (None, b"-_"):
        for skip in range(4):
            chunk = core[skip:]
            chunk = chunk[:len(chunk) - len(chunk) % 4] if len(chunk) % 4 != 1 else chunk[:-1]
            if not chunk:
                continue
            try:
                raw = base64.b64decode(chunk + "=" * (-len(chunk) % 4), altchars=alphabet, validate=False)
            except (binascii.Error, ValueError):
                continue
            out.append(raw.decode("latin-1"))
    return out


def redact(text: str, secret: str | None) -> str:
    """``text`` with the API key in any form replaced: literally or in another case, its 8+ character
    fragments, base64 (plain or url-safe, at any alignment), percent- and hex-encoded; and with anything
    key-like masked whoever's it is: ``Authorization:``/``api-key:`` header values, ``Bearer …`` tokens and
    ``sk-…`` style tokens. What is written to the store, a transcript or a log passes here first."""
    if not text:
        return text
    out = text
    if secret:
        out = re.sub(re.escape(secret), _MASK, out, flags=re.I)
        if len(secret) >= 12:  # servers echo keys partially ("sk-abc...xyz"): drop any 8+ character piece too
            for i in range(0, len(secret) - 7):
                out = re.sub(re.escape(secret[i:i + 8]), _MASK, out, flags=re.I)
        out = _B64_RUN.sub(lambda m: _MASK if any(_contains_secret(d, secret) for d in _decoded_b64(m.group(0)))
                           else m.group(0), out)
        out = _PCT_RUN.sub(lambda m: _MASK if _contains_secret(urllib.parse.unquote_plus(m.group(0)), secret)
                           else m.group(0), out)
        out = _HEX_RUN.sub(lambda m: _MASK if any(_contains_secret(d, secret) for d in _unhex(m.group(0)))
                           else m.group(0), out)
    out = _KEYLIKE[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{_MASK}", out)
    out = _KEYLIKE[1].sub(lambda m: f"{m.group(1)}{m.group(2)}{_MASK}", out)
    out = _KEYLIKE[2].sub(_MASK, out)
    return out


def _unhex(run: str) -> list[str]:
    """The run decoded as hex at both alignments (a hex digit just before the encoded key shifts it by one)."""
    out = []
    for skip in (0, 1):
        chunk = run[skip:]
        try:
            out.append(bytes.fromhex(chunk[:len(chunk) // 2 * 2]).decode("latin-1"))
        except ValueError:
            continue
    return out


def redact_obj(obj, secret: str | None):
    """``redact`` applied to every string (keys included) of a JSON-like value."""
    if isinstance(obj, str):
        return redact(obj, secret)
    if isinstance(obj, dict):
        return {redact_obj(k, secret) if isinstance(k, str) else k: redact_obj(v, secret) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(x, secret) for x in obj]
    return obj
