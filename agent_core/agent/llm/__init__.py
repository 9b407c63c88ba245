"""The LLM path: templating, test design, analysis and planning through any OpenAI-compatible endpoint.

The model proposes templates, spaces, sizes and next steps; the search and the measurements decide. Nothing
a model writes runs on the host: templates are only compiled (and run on the GPU by the worker, as kernels),
expressions go through agent_core.expr.
"""
