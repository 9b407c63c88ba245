"""A launch whose block is capped by a constant (``const dim3 block(std::min(tile_size, sampler::kMaxThreads));``,
``min(d, 1024)``, ``d < 1024 ? d : 1024``): ``launch.block_size`` makes the cap the block parameter, so the launch
becomes ``min(X, BLOCK)``. The kernel then gets blocks of any size up to BLOCK: X where X is smaller (as the
original did below its cap), BLOCK where X is larger (as the original did at its cap, with a larger block). What
in the kernel assumes the cap (a ``__shared__`` array sized by it, a stride of it, ``__launch_bounds__``) follows
the parameter as it follows a constant block (block.py, knobs.py); a tree reduction still constrains it to powers
of two, and a literal that cannot be tied fixes it, which refuses the cap here.

``check_cap`` refuses the cap (``Analysis.refuse_cap``; ``analysis.analyze`` then runs again with the block left
alone, the template exactly what it was without this step) where kerntune cannot be sure every value is right:

- the kernel never reads its block size (no ``blockDim``, no block size of cooperative groups, no constant tied
  to the cap): it covers as many elements as it has threads, and a smaller cap would skip the rest;
- another launch of the kernel has a block that does not follow the parameter;
- the launch's ``dim3`` block is changed after its declaration (``block.x = 32 * ((block.x + 31) / 32);``);
- the launch passes the kernel an argument computed from the cap, or computes the grid's y or z from it;
- the grid's x is computed from it (``cdiv(n, threads)``) and the spec's grid does not write the cap as a number
  that can follow (``spec_edits`` checks that, and that the spec's block is the same min, last).
"""

from __future__ import annotations

import re

from tree_sitter import Node

from agent_core.model import LaunchSite
from agent_core.source.macros import device_head, function_head, qualifier_macros
from agent_core.templating.structural.source import Resolver, dim3_components
from agent_core.templating.structural.state import Analysis
from agent_core.templating.structural.syntax import strip_comments, walk

# what reads the block's size in a kernel: blockDim, or a cooperative-groups block's size
_READS_BLOCK = re.compile(r"\bblockDim\b|\.\s*(?:size|num_threads|dim_threads|group_dim)\s*\(\s*\)")


def check_cap(a: Analysis, sites: list[LaunchSite]) -> None:
    """Refuse the capped block where a value of the parameter could be wrong (see the module docstring)."""
    if a.block_cap is None or a.block is None or not sites:
        return
    p = a.params[a.block]
    keys = {s.key for s in p.sites}
    shown = " ".join(a.block_cap.text.split())
    if not _reads_block(a, keys):
        a.refuse_cap(f"its cap `{shown}` is not tuned: the kernel never reads its block size (blockDim.x), so "
                     "a smaller cap would leave the elements past its threads undone")
        return
    for site in sites:
        r = Resolver(a.f, site.host_vars)
        other = _untied_block(a, r, site, keys) if site is not sites[0] else None
        if other:
            a.refuse_cap(f"its cap `{shown}` is not tuned: the launch at line {site.span.line + 1} has a block "
                         f"`{other}` that does not follow it")
            return
        changed = _dim3_changed(a, r, site)
        if changed:
            a.refuse_cap(f"its cap `{shown}` is not tuned: the block `{changed}` is changed after it is declared")
            return
        for arg in site.args:
            if _reaches(a, r, a.f.node(arg.span), keys):
                a.refuse_cap(f"its cap `{shown}` is not tuned: the launch at line {site.span.line + 1} passes "
                             f"`{arg.text}`, computed from it, to the kernel")
                return
        if not site.config:
            continue
        node = a.f.node(site.config[0].span)
        comps = dim3_components(a.f, r, node)
        comps = comps if comps else [node]
        for i, c in enumerate(comps):
            if not _reaches(a, r, c, keys):
                continue
            if i > 0:
                a.refuse_cap(f"its cap `{shown}` is not tuned: the grid's {'xyz'[i]} `{a.f.t(c)}` is computed "
                             "from it")
                return
            a.grid_tied = True  # the spec's grid must write the cap where the launch's does (spec_edits)


def _untied_block(a: Analysis, r: Resolver, site: LaunchSite, keys: set[tuple[int, int]]) -> str | None:
    """The block of another launch of the kernel where it does not follow the parameter (the kernel's constants
    that follow the cap would not fit it), else None."""
    if len(site.config) < 2:
        return None
    node = a.f.node(site.config[1].span)
    comps = dim3_components(a.f, r, node)
    x = comps[0] if comps else node
    cap = r.cap(x)
    src = cap.src if cap is not None else r.resolve(x)
    if src is not None and src.key in keys and all(s.key in keys for s in (cap.also if cap else [])) and \
            not (comps and len(comps) > 1):
        return None
    return site.config[1].text


def _dim3_changed(a: Analysis, r: Resolver, site: LaunchSite) -> str | None:
    """The statement that assigns a component of the launch's ``dim3`` block variable after its declaration, before
    the launch (``block.x = 32 * ((block.x + 31) / 32);``), or None."""
    if len(site.config) < 2:
        return None
    hv = r.vars.get(site.config[1].text.strip())
    if hv is None or "dim3" not in hv.type:
        return None
    seg = a.f.data[hv.span.end:site.span.start]
    m = re.search(rb"\b" + re.escape(hv.name.encode()) + rb"\s*\.\s*[xyz]\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)[^;]*;", seg)
    return " ".join(m.group(0).decode("utf-8", "replace").split()) if m else None


def _reads_block(a: Analysis, keys: set[tuple[int, int]]) -> bool:
    """The kernel (or a ``__device__`` function of the file it calls) reads its block size, or a constant that
    follows the cap is in it."""
    body = a.k.body_span
    if any(body.start <= k[0] < body.end for k in keys):
        return True
    names = {s.name for s in a.params[a.block].sites if s.name}
    text = strip_comments(a.body_text + "\n" + "\n".join(_callee_texts(a)))
    return bool(_READS_BLOCK.search(text)) or any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _callee_texts(a: Analysis, depth: int = 4) -> list[str]:
    """The bodies of the file's ``__device__`` functions the kernel calls, a few calls deep."""
    fns: dict[str, list[Node]] = {}
    macros = qualifier_macros(a.f.data)  # `#define HOSTDEVICE __host__ __device__` declares device functions too
    for n in walk(a.f.root):
        if n.type != "function_definition":
            continue
        body, d = n.child_by_field_name("body"), n.child_by_field_name("declarator")
        while d is not None and d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
        name = d.child_by_field_name("declarator") if d is not None else None
        head = function_head(a.f.data, n.start_byte, body.start_byte, macros) if body is not None else b""
        if body is None or name is None or (b"__device__" not in head and not device_head(head, macros)):
            continue
        fns.setdefault(a.f.t(name).split("::")[-1], []).append(body)
    out, seen, todo = [], set(), [a.body]
    for _ in range(depth):
        nxt = []
        for node in todo:
            for x in walk(node) if node is not None else ():
                if x.type != "call_expression" or x.child_by_field_name("function") is None:
                    continue
                name = a.f.t(x.child_by_field_name("function")).split("<")[0].split("::")[-1].strip()
                if name in fns and name not in seen:
                    seen.add(name)
                    out += [a.f.t(b) for b in fns[name]]
                    nxt += fns[name]
        todo = nxt
    return out


def _reaches(a: Analysis, r: Resolver, node: Node | None, keys: set[tuple[int, int]]) -> bool:
    """``node`` is computed from one of the literals at ``keys`` (through host variables, constants and macros)."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n is None:
            continue
        for x in walk(n):
            if x.type == "number_literal" and (x.start_byte, x.end_byte) in keys:
                return True
            if x.type not in ("identifier", "qualified_identifier"):
                continue
            name = a.f.t(x).split("::")[-1].strip()
            if name in seen:
                continue
            seen.add(name)
            src = r.resolve_name(name)
            if src is not None and src.key in keys:
                return True
            hv = r.vars.get(name)
            if hv is not None and hv.init is not None:
                todo.append(a.f.node(hv.init.span))
    return False
