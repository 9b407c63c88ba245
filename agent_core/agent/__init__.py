"""The optimize loop: planning, per-shape dispatch, the LLM roles."""
