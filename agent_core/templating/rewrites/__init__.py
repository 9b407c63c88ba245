"""Semantic rewrites of the user's own kernel (one module per transformation; ``compose`` applies them)."""

from agent_core.templating.rewrites.compose import REWRITES, Outcome, compose, rewrite_template

__all__ = ["REWRITES", "Outcome", "compose", "rewrite_template"]
