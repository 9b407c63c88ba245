"""Prompt templates (``templates/prompts/ROLE.md``): a ``# system`` and a ``# user`` section each, with
``$name`` placeholders (string.Template) filled from the role's inputs."""

from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path

from agent_core.model import KerntuneError

PROMPT_DIR = Path(__file__).resolve().parents[3] / "templates" / "prompts"
_SECTION = re.compile(r"^# (system|user)\s*$", re.M)


@lru_cache(maxsize=None)
def _sections(name: str) -> tuple[tuple[str, str], ...]:
    path = PROMPT_DIR / f"{name}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        raise KerntuneError(f"prompt template {path} is missing (reinstall kerntune)", str(path)) from None
    parts = _SECTION.split(text)
    return tuple((parts[i], parts[i + 1].strip("\n")) for i in range(1, len(parts) - 1, 2))


def render(name: str, **values) -> list[dict]:
    """Chat messages of prompt ``name`` with its placeholders filled; KerntuneError for a missing one."""
    out = []
    for role, body in _sections(name):
        try:
            content = string.Template(body).substitute({k: str(v) for k, v in values.items()})
        except (KeyError, ValueError) as e:
            raise KerntuneError(f"prompt {name}: no value for placeholder {e}") from None
        out.append({"role": role, "content": content.strip() + "\n"})
    return out
