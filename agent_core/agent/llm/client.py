"""The model client: one role call = one chat completion with a JSON-schema answer, through the ``openai``
package against any OpenAI-compatible endpoint.

It refuses a call the user's limits or the model's context do not allow (before sending anything), retries
timeouts, refused connections, 429 and 5xx with exponential backoff (honouring Retry-After), and checks the
answer: complete (not cut at the token limit), JSON, and matching the role's schema. Every failure is an
``LlmError`` with a message that says what happened; the API key never appears in one, nor in the logs.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable

import openai

from . import schemas as schemas_mod
from .config import LlmSettings
from .errors import LlmError, redact, redact_obj
from .limits import Limits, Spend
from .tokens import context_problem, estimate_tokens
from .transcript import Recorder

log = logging.getLogger("kerntune.llm")

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.S)


@dataclass
class Reply:
    role: str
    data: object  # the parsed JSON answer (checked against the schema)
    content: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    wall_s: float
    finish_reason: str

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "attempts": self.attempts, "wall_s": round(self.wall_s, 3)}


def _retry_after(e: openai.APIStatusError) -> float | None:
    try:
        v = e.response.headers.get("retry-after")
        return float(v) if v is not None else None
    except (AttributeError, ValueError, TypeError):
        return None


def _short(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."


class LlmClient:
    """Calls the model for the roles; keeps what the session spent (``spend``) against ``limits``."""

    def __init__(self, settings: LlmSettings, limits: Limits | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.limits = limits or Limits()
        self.spend = Spend()
        self.sleep = sleep
        self.recorder = Recorder(settings.record_path) if settings.record_path else None
        self._openai = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "unused",
                                     timeout=settings.timeout_s, max_retries=0)

    def __repr__(self) -> str:
        return f"LlmClient({self.settings.model!r} at {self.settings.base_url!r})"

    def _err(self, kind: str, message: str, role: str, attempts: int) -> LlmError:
        msg = redact(f"LLM {role}: {message}", self.settings.api_key)
        log.warning("%s", msg)
        return LlmError(kind, msg, role, attempts)

    def ask(self, role: str, messages: list[dict], schema: dict | None = None,
            max_output_tokens: int | None = None) -> Reply:
        """One role call. ``schema`` defaults to the role's (agent_core.agent.llm.schemas). Raises LlmError."""
        s = self.settings
        schema = schema if schema is not None else schemas_mod.SCHEMAS[role]
        max_out = max_output_tokens or s.max_output_tokens
        estimate = estimate_tokens(messages)
        why = context_problem(estimate, max_out, s.context_tokens)
        if why:
            raise self._err("context", f"not sent: {why}", role, 0)
        why = self.spend.refusal(self.limits, estimate)
        if why:
            raise self._err("limit", f"not sent: {why}; the session goes on without the model", role, 0)
        if self.limits.max_tokens is not None:
            max_out = max(1, min(max_out, self.limits.max_tokens - self.spend.tokens - estimate))
        kwargs = dict(model=s.model, messages=messages, timeout=s.timeout_s,
                      response_format={"type": "json_schema",
                                       "json_schema": {"name": role, "schema": schema, "strict": True}})
        kwargs[s.token_param] = max_out
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        attempts = 0
        t0 = time.monotonic()
        try:
            while True:
                attempts += 1
                try:
                    resp = self._openai.chat.completions.create(**kwargs)
                    break
                except openai.APIStatusError as e:
                    self._account(role, 0, 0)
                    self._record(role, {"status": e.status_code, "body": e.body})
                    kind, retry = self._classify(e)
                    detail = _short(getattr(e, "message", "") or str(e))
                    if not retry or attempts > s.max_retries:
                        tail = f" after {attempts} attempts" if attempts > 1 else ""
                        raise self._err(kind, f"the endpoint answered HTTP {e.status_code}{tail}: {detail}",
                                        role, attempts) from None
                    wait = self._backoff(attempts, _retry_after(e))
                    log.warning("%s", redact(f"LLM {role}: HTTP {e.status_code}, retrying in {wait:.1f} s", s.api_key))
                except openai.APITimeoutError:
                    self._record(role, {"drop": True, "note": "timeout"})
                    if attempts > s.max_retries:
                        raise self._err("timeout", f"no answer within {s.timeout_s:g} s ({attempts} attempts); "
                                        "raise KERNTUNE_LLM_TIMEOUT_S for a slow model", role, attempts) from None
                    wait = self._backoff(attempts, None)
                    log.warning("LLM %s: timed out, retrying in %.1f s", role, wait)
                except openai.APIConnectionError as e:
                    self._record(role, {"drop": True, "note": "connection"})
                    if attempts > s.max_retries:
                        cause = _short(str(e.__cause__ or e), 200)
                        raise self._err("unreachable", f"cannot reach {s.base_url} ({cause}) after {attempts} "
                                        "attempts; check KERNTUNE_LLM_BASE_URL", role, attempts) from None
                    wait = self._backoff(attempts, None)
                    log.warning("LLM %s: connection failed, retrying in %.1f s", role, wait)
                except (openai.OpenAIError, ValueError) as e:  # a body that is not a chat completion
                    raise self._err("bad_json", f"the endpoint's response is not a chat completion: "
                                    f"{_short(str(e))}", role, attempts) from None
                self.sleep(wait)
        finally:
            self.spend.wall_s += time.monotonic() - t0
        return self._answer(role, resp, schema, estimate, attempts, time.monotonic() - t0)

    # ------------------------------------------------------------------ helpers
    def _classify(self, e: openai.APIStatusError) -> tuple[str, bool]:
        code = e.status_code
        if code == 429:
            return "rate_limited", True
        if code >= 500:
            return "server_error", True
        if code in (401, 403):
            return "auth", False
        if code == 404:
            return "not_found", False
        text = f"{getattr(e, 'message', '')} {json.dumps(e.body) if e.body is not None else ''}"
        if re.search(r"context|too long|maximum.*tokens", text, re.I):
            return "context", False
        return "bad_request", False

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        wait = retry_after if retry_after is not None else s.backoff_s * 2 ** (attempt - 1)
        wait = max(0.0, min(wait, s.max_backoff_s))
        if self.limits.max_wall_s is not None and self.spend.wall_s + wait > self.limits.max_wall_s:
            wait = max(0.0, self.limits.max_wall_s - self.spend.wall_s)
        return wait

    def _account(self, role: str, prompt: int, completion: int) -> None:
        self.spend.add(role, prompt, completion)

    def _record(self, role: str, answer: dict) -> None:
        if self.recorder is not None:
            try:  # an error body may echo the key: it never reaches the file
                self.recorder.add(role, redact_obj(answer, self.settings.api_key))
            except OSError as e:
                log.warning("cannot record the LLM transcript: %s", e)

    def _answer(self, role: str, resp, schema: dict, estimate: int, attempts: int, wall: float) -> Reply:
        usage = getattr(resp, "usage", None)
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        content = (choice.message.content if choice is not None and choice.message is not None else None) or ""
        finish = (choice.finish_reason if choice is not None else None) or "stop"
        p = getattr(usage, "prompt_tokens", None) or estimate
        c = getattr(usage, "completion_tokens", None) or -(-len(content) // 3)
        self._account(role, p, c)
        self._record(role, {"content": content, "finish_reason": finish,
                            "usage": {"prompt_tokens": p, "completion_tokens": c}})
        if choice is None:
            raise self._err("bad_json", "the endpoint answered without a choice", role, attempts)
        if finish == "length":
            raise self._err("truncated", f"the answer was cut off at the token limit ({c} tokens): its JSON is "
                            "incomplete; raise KERNTUNE_LLM_MAX_OUTPUT_TOKENS", role, attempts)
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise self._err("schema", f"the model refused: {_short(refusal)}", role, attempts)
        text = content.strip()
        m = _FENCE.match(text)
        if m:
            text = m.group(1)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise self._err("bad_json", f"the answer is not JSON ({e.msg} at character {e.pos}): "
                            f"{_short(content, 120)!r}", role, attempts) from None
        problems = schemas_mod.check(data, schema)
        if problems:
            raise self._err("schema", "the answer does not follow the schema: " + "; ".join(problems[:5]),
                            role, attempts)
        log.info("LLM %s: answered in %.1f s, %d+%d tokens", role, wall, p, c)
        return Reply(role, data, content, p, c, attempts, wall, finish)
