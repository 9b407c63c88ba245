"""Code knobs of the kernel itself: ``__launch_bounds__`` (tied to the block, or a parameter of its own with
its min blocks per SM), each ``#pragma unroll N``, and a block x of 32 that stays fixed in a kernel written
for warps of 32 lanes."""

from __future__ import annotations

import re

from agent_core.templating.structural.domains import MIN_BLOCKS, POW2_BLOCKS, UNROLLS
from agent_core.templating.structural.source import Resolver, Source
from agent_core.templating.structural.state import Analysis


def launch_bounds(a: Analysis) -> None:
    lb = a.k.launch_bounds
    if not lb:
        _macro_launch_bounds(a)
        return
    r = Resolver(a.f, None)
    src = r.resolve(a.f.node(lb[0].span))
    lb_name = None
    if src is None:
        if lb[0].text.strip() not in {tp.name for tp in a.k.template_params}:  # a template parameter follows
            a.notes.append(f"__launch_bounds__({lb[0].text}) is not a constant")
    elif src.key in a.by_key:
        lb_name = a.by_key[src.key]
    elif a.block is not None and src.value == a.params[a.block].original:
        a.tie(src, a.block)
        lb_name = a.block
    else:
        if a.block is not None:
            values = sorted(set(POW2_BLOCKS) | {src.value})
        else:  # the block size is not ours: only values the original launch is sure to fit
            values = [v for v in POW2_BLOCKS if v >= src.value]
        lb_name = a.add(src, "LAUNCH_BOUNDS", "launch_bounds", values,
                        f"__launch_bounds__ max threads per block, from {src.where}")
        if a.block is not None:
            a.constrain(f"{lb_name} >= {a.block}")
        a.constrain(f"{lb_name} <= 1024")
    if len(lb) > 1:
        msrc = r.resolve(a.f.node(lb[1].span))
        if msrc is not None and msrc.key not in a.by_key:
            mname = a.add(msrc, "MIN_BLOCKS", "launch_bounds", MIN_BLOCKS,
                          f"__launch_bounds__ min blocks per SM, from {msrc.where}")
            if lb_name is not None:
                a.constrain(f"{lb_name} * {mname} <= 2048")


def _macro_launch_bounds(a: Analysis) -> None:
    """A ``__launch_bounds__`` written through a macro (``LAUNCH_BOUNDS()``) is not tuned (the macro may serve other
    kernels), but the block may not pass its max threads: a launch with more fails."""
    args = a.k.macro_launch_bounds
    if not args:
        return
    a.notes.append(f"__launch_bounds__({', '.join(args)}) is written through a macro: kept")
    if a.block is None:
        return
    if re.fullmatch(r"\d+", args[0]):
        a.constrain(f"{a.block} <= {int(args[0])}")
    elif re.fullmatch(r"[A-Za-z_]\w*", args[0]):  # the file's constant (DSSTNE's SM_6X_THREADS_PER_BLOCK)
        src = Resolver(a.f, None).resolve_name(args[0])
        if src is not None and src.key in a.by_key:  # a lifted constant: the bound follows its parameter
            if a.by_key[src.key] != a.block:
                a.constrain(f"{a.block} <= {a.by_key[src.key]}")
        elif src is not None:
            a.constrain(f"{a.block} <= {src.value}")


def unroll(a: Analysis) -> None:
    prs = [p for p in a.k.pragmas if p.value is not None and p.value_span is not None]
    for p in prs:
        src = Source(p.value_span, p.value, str(p.value), None, f"#pragma {p.text} at line {p.span.line + 1}")
        name = "UNROLL" if len(prs) == 1 else f"UNROLL_{p.span.line + 1}"
        loop = f" on the loop at line {p.loop_span.line + 1}" if p.loop_span else ""
        a.add(src, name, "unroll", UNROLLS, f"unroll factor{loop}, from {src.where}")
    if not prs:
        a.notes.append("no #pragma unroll N")


def warp_lanes(a: Analysis) -> None:
    """A block whose x size is 32 in a kernel written for warps of 32 lanes (a warp per row in a 2-D block,
    or one warp per block without shared memory, with warp shuffles or lane arithmetic on threadIdx.x) keeps
    x = 32: its shuffles, masks and `threadIdx.x & 31` assume it, and any other value fails verification."""
    if a.block is None:
        return
    p = a.params[a.block]
    if p.original != 32 or len(p.values) == 1:
        return
    lanes = re.search(r"__shfl\w*_sync|threadIdx\.x\s*[&%]\s*(?:31|32|WARP_SIZE)\b|\blane"
                      r"|=\s*threadIdx\.x\s*;[^;]*;[^)]*\+=\s*32\b", a.body_text)  # a stride of 32 lanes
    lanes = lanes or re.search(r"__shfl\w*_sync", a.cf.text)  # a warp-reduce helper of the file
    if not lanes or not (a.block_2d or "__shared__" not in a.body_text):
        return
    p.values = [32]
    a.notes.append(f"the block's x size {p.name} = 32 stays fixed: the kernel works in warps of 32 lanes")
