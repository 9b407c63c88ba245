"""What the user lets a session spend on the model (calls, tokens, wall time) and what it has spent."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from agent_core.model import KerntuneError


@dataclass(frozen=True)
class Limits:
    max_calls: int | None = None
    max_tokens: int | None = None  # prompt + completion, over the session
    max_wall_s: float | None = None  # time spent waiting on the model, backoff included

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None, **explicit) -> "Limits":
        """Explicit values first, then $KERNTUNE_LLM_MAX_CALLS / _MAX_TOKENS / _MAX_WALL_S."""
        env = os.environ if env is None else env
        vals = {}
        for fld, name, cast in (("max_calls", "KERNTUNE_LLM_MAX_CALLS", int),
                                ("max_tokens", "KERNTUNE_LLM_MAX_TOKENS", int),
                                ("max_wall_s", "KERNTUNE_LLM_MAX_WALL_S", float)):
            v = explicit.get(fld)
            if v is None and env.get(name):
                try:
                    v = cast(env[name])
                except ValueError:
                    raise KerntuneError(f"${name} must be a number, got '{env[name]}'", field_name=name) from None
            if v is not None and v < 0:
                raise KerntuneError(f"the LLM limit {fld} must not be negative (got {v})", field_name=name)
            vals[fld] = v
        return Limits(**vals)


@dataclass
class Spend:
    calls: int = 0  # requests answered by the endpoint (any status), retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    failures: int = 0  # role calls that gave no usable answer
    by_role: dict = field(default_factory=dict)  # role -> {"calls", "tokens"}

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, role: str, prompt: int, completion: int) -> None:
        self.calls += 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        r = self.by_role.setdefault(role, {"calls": 0, "tokens": 0})
        r["calls"] += 1
        r["tokens"] += prompt + completion

    def refusal(self, limits: Limits, prompt_estimate: int = 0) -> str | None:
        """Why the next call may not be made, or None."""
        if limits.max_calls is not None and self.calls >= limits.max_calls:
            return f"the LLM call limit ({limits.max_calls}) is spent"
        if limits.max_tokens is not None and self.tokens + prompt_estimate > limits.max_tokens:
            return (f"the LLM token limit ({limits.max_tokens}) would be exceeded: {self.tokens} spent, "
                    f"this prompt is about {prompt_estimate}")
        if limits.max_wall_s is not None and self.wall_s >= limits.max_wall_s:
            return f"the LLM time limit ({limits.max_wall_s:g} s) is spent ({self.wall_s:.1f} s)"
        return None

    def to_dict(self) -> dict:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens": self.tokens,
                "wall_s": round(self.wall_s, 3), "failures": self.failures,
                "by_role": {k: dict(v) for k, v in self.by_role.items()}}

    def line(self) -> str:
        """One line for the CLI and hovers."""
        return (f"LLM: {self.calls} calls, {self.tokens} tokens ({self.prompt_tokens} in, "
                f"{self.completion_tokens} out), {self.wall_s:.1f} s" +
                (f", {self.failures} failed" if self.failures else ""))
