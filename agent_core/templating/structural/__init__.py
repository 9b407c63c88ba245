"""Structural templatization, one concern per module (``agent_core.templating.templatize`` is the public face):

- ``domains``: the values each kind of parameter is offered (block sizes, grids, unroll factors, ...).
- ``source``: the parsed file (nodes at spans, line offsets) and the resolver from a C expression to the
  integer literal it is; ``syntax``: small tree-sitter walks shared by the analyses.
- ``state``: the analysis state (parameters, their sites, constraints, notes) and its registry operations.
- ``launch``: the launch site read first, its template arguments and its block size (a constant, or the constant
  that caps it: ``std::min(d, 1024)``).
- ``cap``: what a capped block's parameter must satisfy (the kernel strides by its block, nothing else the launch
  computes depends on the cap); otherwise the cap is refused and the analysis runs again without it.
- ``grid``: the launch's grid: a fixed grid of a grid-stride loop, a grid that follows the block, items per
  thread.
- ``block``: what inside the kernel assumes the block size: constants tied to it, powers of two for a tree
  reduction, literals that cannot be tied and so fix it.
- ``knobs``: ``__launch_bounds__``, ``#pragma unroll N``, and warp-lane kernels that keep x = 32.
- ``spec_edits``: the spec's launch and template arguments rewritten in terms of the parameters.
- ``kernel``: finding the kernel by name (with a helpful error) and refusing what cannot be analyzed.
- ``analysis``: the order the steps run in.
- ``template``: the public results: the template text, the parameter space, the tunable sites.
- ``launch_exprs``: a launch site's configuration in the expression language, for drafting specs.
"""
