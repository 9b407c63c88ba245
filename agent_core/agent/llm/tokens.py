"""Token estimates, to refuse a prompt that would not fit the model's context before sending it."""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 3.0  # conservative for code (BPE tokenizers give ~3.5-4 for English, less for CUDA)
PER_MESSAGE = 4


def estimate_tokens(messages: list[dict]) -> int:
    """An upper-leaning estimate of the prompt tokens of chat messages (no tokenizer needed)."""
    total = 3
    for m in messages:
        total += PER_MESSAGE + math.ceil(len(str(m.get("content") or "")) / CHARS_PER_TOKEN)
    return total


def context_problem(prompt_tokens: int, max_output: int, context_tokens: int) -> str | None:
    """None when the prompt plus the answer fits; else the reason, with the numbers."""
    if prompt_tokens + max_output <= context_tokens:
        return None
    return (f"the prompt is about {prompt_tokens} tokens and the answer may take {max_output}: more than the "
            f"model's context of {context_tokens} tokens. Use a model with a larger context "
            "(KERNTUNE_LLM_CONTEXT_TOKENS) or a smaller file")
