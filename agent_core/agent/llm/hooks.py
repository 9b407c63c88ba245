"""Wiring for the CLI and the server: the LLM roles as the agent loop's templater and planner, or None when
no endpoint is configured (then the loop runs offline, exactly as before)::

    hooks = llm_hooks(store)          # settings from the environment
    optimize(path, kernel, backend, store, planner=hooks.planner if hooks else None,
             templaters=[expert_templater, *hooks.templaters, rewrite_templater] if hooks else None)
    print(hooks.spend.line())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .client import LlmClient
from .config import LlmSettings, settings_from_env
from .limits import Limits, Spend
from .roles import LlmAnalyst, LlmPlanner, LlmRoles, LlmTemplater, LlmTestDesigner


@dataclass
class LlmHooks:
    roles: LlmRoles
    templater: LlmTemplater
    analyst: LlmAnalyst
    planner: LlmPlanner
    test_designer: LlmTestDesigner

    @property
    def templaters(self) -> list:
        return [self.templater]

    @property
    def spend(self) -> Spend:
        return self.roles.spend

    def report(self) -> dict:
        """What the session spent and whether it went offline (for the CLI, hovers and the store)."""
        return {**self.roles.client.settings.describe(), "spent": self.spend.to_dict(),
                "limits": self.roles.client.limits.__dict__, "offline": self.roles.offline}


def llm_hooks(store=None, settings: LlmSettings | None = None, limits: Limits | None = None,
              arch: str | None = None, budget_per_round: int = 40, max_rounds: int = 4,
              env: Mapping[str, str] | None = None, compile_check: bool = True) -> LlmHooks | None:
    settings = settings or settings_from_env(env=env)
    if settings is None:
        return None
    client = LlmClient(settings, limits or Limits.from_env(env))
    roles = LlmRoles(client, store, arch or "sm_90", compile_check)
    templater = LlmTemplater(roles)
    analyst = LlmAnalyst(roles)
    planner = LlmPlanner(roles, templater, analyst, budget_per_round=budget_per_round, max_rounds=max_rounds)
    return LlmHooks(roles, templater, analyst, planner, LlmTestDesigner(roles))
