"""Where the model lives: endpoint, model name, API key and client settings, from explicit arguments or the
environment (``KERNTUNE_LLM_BASE_URL``, ``KERNTUNE_LLM_MODEL``, ``KERNTUNE_LLM_API_KEY`` or
``OPENAI_API_KEY``; client settings ``KERNTUNE_LLM_TIMEOUT_S``, ``_CONTEXT_TOKENS``, ``_MAX_OUTPUT_TOKENS``,
``_MAX_RETRIES``, ``_BACKOFF_S``, ``_TOKEN_PARAM``, ``_RECORD``). No endpoint configured:
``settings_from_env`` returns None and the agent runs offline."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from agent_core.model import KerntuneError

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class LlmSettings:
    base_url: str
    model: str
    api_key: str = field(default="", repr=False)  # never printed, logged or stored
    timeout_s: float = 120.0  # one request
    max_retries: int = 3  # after the first attempt, for timeouts, 429, 5xx, refused connections
    backoff_s: float = 2.0  # first wait; doubles each retry (a Retry-After header wins, up to max_backoff_s)
    max_backoff_s: float = 30.0
    context_tokens: int = 128_000  # the model's context window
    max_output_tokens: int = 8192  # per answer
    temperature: float | None = 0.2
    token_param: str = "max_tokens"  # or "max_completion_tokens" (newer OpenAI reasoning models)
    record_path: str | None = None  # append every exchange to this transcript file (agent_core.agent.llm.transcript)

    def __str__(self) -> str:
        return f"{self.model} at {self.base_url}"

    def describe(self) -> dict:
        """What may be shown or stored about the endpoint (no key)."""
        return {"base_url": self.base_url, "model": self.model, "api_key_set": bool(self.api_key)}


def _num(env: Mapping[str, str], name: str, cast):
    v = env.get(name)
    if v is None or v == "":
        return None
    try:
        return cast(v)
    except ValueError:
        raise KerntuneError(f"${name} must be a number, got '{v}'", field_name=name) from None


def settings_from_env(base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                      env: Mapping[str, str] | None = None, **overrides) -> LlmSettings | None:
    """Settings from explicit arguments, then the environment; None when no endpoint is configured
    (neither a base URL nor a model given). Raises KerntuneError when half configured."""
    env = os.environ if env is None else env
    base_url = base_url or env.get("KERNTUNE_LLM_BASE_URL") or None
    model = model or env.get("KERNTUNE_LLM_MODEL") or None
    if not base_url and not model:
        return None
    if not model:
        raise KerntuneError(f"an LLM endpoint is set ({base_url}) but no model: set KERNTUNE_LLM_MODEL "
                            "(or pass --llm-model)", field_name="KERNTUNE_LLM_MODEL")
    key = api_key if api_key is not None else (env.get("KERNTUNE_LLM_API_KEY") or env.get("OPENAI_API_KEY") or "")
    extra = {}
    for name, fld, cast in (("KERNTUNE_LLM_TIMEOUT_S", "timeout_s", float),
                            ("KERNTUNE_LLM_CONTEXT_TOKENS", "context_tokens", int),
                            ("KERNTUNE_LLM_MAX_OUTPUT_TOKENS", "max_output_tokens", int),
                            ("KERNTUNE_LLM_MAX_RETRIES", "max_retries", int),
                            ("KERNTUNE_LLM_BACKOFF_S", "backoff_s", float)):
        v = _num(env, name, cast)
        if v is not None:
            extra[fld] = v
    if env.get("KERNTUNE_LLM_TOKEN_PARAM"):
        extra["token_param"] = env["KERNTUNE_LLM_TOKEN_PARAM"]
    if env.get("KERNTUNE_LLM_RECORD"):
        extra["record_path"] = env["KERNTUNE_LLM_RECORD"]
    extra.update({k: v for k, v in overrides.items() if v is not None})
    if extra.get("token_param", "max_tokens") not in ("max_tokens", "max_completion_tokens"):
        raise KerntuneError("token_param must be max_tokens or max_completion_tokens", field_name="token_param")
    return LlmSettings(base_url=(base_url or DEFAULT_BASE_URL).rstrip("/"), model=model, api_key=key, **extra)
