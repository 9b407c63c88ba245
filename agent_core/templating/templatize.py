"""Structural templatization: lift the hard-coded, performance-relevant constants of one kernel (block size,
fixed grid and items per thread of a grid-stride loop, ``#pragma unroll N``, ``__launch_bounds__``, integer
template arguments) into named parameters with domains and constraints -> ``model.KernelTemplate``.

A block capped by a constant (``dim3 block(std::min(hidden_size, 1024))``, ``d < 1024 ? d : 1024``, through host
variables, constexpr / ``#define`` / namespaced constants) lifts its cap: the launch and the spec's block become
``min(X, BLOCK)`` (``structural.cap`` says when that is refused).

Everything tied to the block size follows its parameter: the launch's grid (``cdiv(n, 256)``), ``__shared__``
array sizes, block-strided loop steps, a tree reduction's first stride, macros and constants of the same value,
a warp-count macro, and the spec's literal launch (which becomes the template's ``launch`` and, in a spec
comment, sites). What cannot be tied restricts the domain: a tree reduction on the block size constrains it to
powers of two; a literal that looks like the block (``if (tid < 128) s[tid] += s[tid + 128]``) fixes it, and
the parameter's ``why`` names that literal.

Also ``launch_exprs``: a launch site's configuration in the expression language, for drafting specs.

This module is the public face; the work is done in ``agent_core.templating.structural`` (one concern per
module: its package docstring lists them).
"""

from __future__ import annotations

from agent_core.templating.structural.domains import (ALL_BLOCKS, BLOCK_XS, BLOCK_YS, GRIDS, ITEMS, MIN_BLOCKS,
                                                      POW2_BLOCKS, SM_COUNT, TEMPLATE_VALUES, UNROLLS)
from agent_core.templating.structural.launch_exprs import launch_exprs
from agent_core.templating.structural.template import template_text, templatize, tunable_sites, tunable_space
from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END  # the header templates carry

__all__ = ["ALL_BLOCKS", "BLOCK_XS", "BLOCK_YS", "GRIDS", "HEADER_BEGIN", "HEADER_END", "ITEMS", "MIN_BLOCKS",
           "POW2_BLOCKS", "SM_COUNT", "TEMPLATE_VALUES", "UNROLLS", "launch_exprs", "template_text", "templatize",
           "tunable_sites", "tunable_space"]
