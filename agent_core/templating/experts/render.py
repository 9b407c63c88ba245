"""The text of a bound expert: the shared helpers, the expert's source with its bind-time conventions resolved,
and a ``__global__`` wrapper with the user's exact parameter list that calls the expert's function."""

from __future__ import annotations

import re
from pathlib import Path

from agent_core import expr
from agent_core.model import CudaFile, Kernel, KerntuneError, macro_name
from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import CTYPE
from agent_core.templating.experts.library import (BLOCK_WHEN, COMMON, CONVENTION, DIRECTIVE, EXPERT_DIR, GRID_WHEN,
                                                   HEADER, SIZES_WHEN, SMEM_WHEN, Expert)


def subst(e: str, names: dict[str, str]) -> str:
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda mo: names.get(mo.group(0), mo.group(0)), e)


def resolve_conventions(source: str, values: dict[str, int], path: str = "<expert>") -> str:
    """The source with every ``kt:bind`` line gone: declarations dropped, ``#if/#elif/#else/#endif  // kt:bind``
    resolved for ``values`` (the expert's defaults overridden by the binding), only the taken branches kept, and
    a convention's name left in the code replaced by its value."""
    out = []
    stack: list[list[bool]] = []  # per open #if: [this branch is taken, some branch was taken]
    for ln in source.splitlines(keepends=True):
        if CONVENTION.match(ln) or GRID_WHEN.match(ln) or BLOCK_WHEN.match(ln) or SIZES_WHEN.match(ln) \
                or SMEM_WHEN.match(ln):
            continue
        d = DIRECTIVE.match(ln.rstrip("\n"))
        if d is None:
            if all(s[0] for s in stack):
                out.append(ln)
            continue
        kind, cond = d.group(1), d.group(2).strip()
        try:
            if kind == "if":
                v = bool(expr.evaluate(cond, values))
                stack.append([v, v])
            elif kind == "elif":
                v = not stack[-1][1] and bool(expr.evaluate(cond, values))
                stack[-1] = [v, stack[-1][1] or v]
            elif kind == "else":
                stack[-1] = [not stack[-1][1], True]
            else:
                stack.pop()
        except (KerntuneError, IndexError) as e:
            raise KerntuneError(f"kt:bind line `{ln.strip()}`: {e}", path) from None
    # a convention used in the code itself (a template argument) becomes its value: the bound code defines none
    return subst("".join(out), {n: str(v) for n, v in values.items()}) if values else "".join(out)


def with_helpers(e: Expert, source: str | None = None) -> str:
    """The expert's source with its helper files (``helpers``) inside its first ``namespace kt {``: they are part
    of the expert's own device code (written into a user's file with it, in its namespace)."""
    src = e.source if source is None else source
    if not e.helpers:
        return src
    text = "".join((Path(e.path).parent / h).read_text(encoding="utf-8").replace("#pragma once\n", "")
                   for h in e.helpers)
    at = HEADER.search(src).end()
    m = re.search(r"^namespace kt \{\n", src[at:], re.M)
    at += m.end()
    return src[:at] + text + src[at:]


# type names a parameter may spell that the wrapper can spell too (the language's, <cstdint>'s, the CUDA headers')
_KNOWN_TYPES = set("""void bool char short int long float double signed unsigned const volatile __restrict__ __restrict
restrict size_t ptrdiff_t uint ushort ulong uchar int8_t uint8_t int16_t uint16_t int32_t uint32_t int64_t uint64_t intptr_t uintptr_t
std::size_t std::int8_t std::uint8_t std::int16_t std::uint16_t std::int32_t std::uint32_t std::int64_t std::uint64_t
half half2 __half __half2 nv_half nv_half2 __nv_bfloat16 __nv_bfloat162 nv_bfloat16 nv_bfloat162 __nv_fp8_e4m3
__nv_fp8_e5m2 __nv_fp8x2_e4m3 __nv_fp8x2_e5m2 __nv_fp8x4_e4m3 __nv_fp8x4_e5m2 __nv_fp8_storage_t __nv_fp8x2_storage_t
__nv_fp8_e8m0 char1 char2 char3 char4 uchar1 uchar2 uchar3 uchar4 short1 short2 short3 short4 ushort1 ushort2
ushort3 ushort4 int1 int2 int3 int4 uint1 uint2 uint3 uint4 long1 long2 long3 long4 ulong1 ulong2 ulong3 ulong4
longlong1 longlong2 longlong3 longlong4 ulonglong1 ulonglong2 ulonglong3 ulonglong4 float1 float2 float3 float4
double1 double2 double3 double4 dim3""".split())
_TYPE_NAME = re.compile(r"\b[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*\b")


def wrapper_signature(k: Kernel, cf: CudaFile, spec_dtypes: dict[str, str]) -> str:
    """The kernel's parameter list as the wrapper declares it. A templated kernel's type parameters have no value
    in a plain ``__global__`` function: they are replaced by the spec's dtype of the argument that uses them. The
    wrapper stands at file scope after the user's includes only, so a type the user's own code names (a typedef
    such as llm.c's ``floatX``, a namespace's ``cuda::index_t``) is spelled as the spec's dtype of the argument
    (the element type of a pointer, else the scalar's): the same type, spelled where the wrapper can."""
    types = {tp.name for tp in k.template_params if tp.kind == "type"}
    parts = []
    for p in k.params:
        ty = p.type
        used = types & set(re.findall(r"\b[A-Za-z_]\w*\b", ty))
        if used and p.name in spec_dtypes:
            alts = "|".join(map(re.escape, used))
            # a member type of a type parameter (FlashAttention's `typename Kernel_traits::Element*`) is the dtype too
            ty = re.sub(r"\b(?:typename\s+)?(?:" + alts + r")\s*::\s*[A-Za-z_]\w*", CTYPE[spec_dtypes[p.name]], ty)
            ty = re.sub(r"\b(" + alts + r")\b", CTYPE[spec_dtypes[p.name]], ty)
        own = [m for m in _TYPE_NAME.findall(ty) if re.sub(r"\s+", "", m) not in _KNOWN_TYPES]
        if own and spec_dtypes.get(p.name) in CTYPE:
            ty = _TYPE_NAME.sub(lambda m: m.group(0) if re.sub(r"\s+", "", m.group(0)) in _KNOWN_TYPES
                                else CTYPE[spec_dtypes[p.name]], ty)
        parts.append(f"{ty} {p.name}")
    return ", ".join(parts)


def render(b: Binding, k: Kernel, cf: CudaFile, entry: str, spec_dtypes: dict[str, str] | None = None) -> str:
    e = b.expert
    common = (EXPERT_DIR / COMMON).read_text(encoding="utf-8").replace("#pragma once\n", "")
    includes = [ln for ln in cf.text.splitlines() if re.match(r"\s*#\s*include\s*<", ln)]
    macros = {n: macro_name(n) for n in e.params}
    # __launch_bounds__ needs a constant: the header's `bounds` (the most threads a block of this configuration
    # has) where the block depends on sizes, else the block's own extent.
    bounds = (f"({subst(e.launch['bounds'], macros)})" if "bounds" in e.launch
              else " * ".join(f"({subst(bb, macros)})" for bb in e.launch["block"]))
    if "min_blocks" in e.launch:  # the fewest blocks per SM ptxas must leave room for (registers)
        bounds += f", ({subst(e.launch['min_blocks'], macros)})"
    cluster = f" __cluster_dims__(({subst(e.launch['cluster'], macros)}), 1, 1)" if "cluster" in e.launch else ""
    sig = wrapper_signature(k, cf, spec_dtypes or {})
    targs = f"<{', '.join(b.template_args)}>" if b.template_args else ""
    source = resolve_conventions(e.source, {**e.conventions, **b.conventions}, e.path)
    lines = [f"// kerntune: expert template `{e.name}` ({e.family}) bound to kernel `{k.name}` of {Path(cf.path).name}",
             f"// why: {b.reason}", *includes]
    lines += [f"#define {n} {v}" for n, v in b.defines.items()]
    lines += [common, with_helpers(e, source),
              f'extern "C" __global__ void __launch_bounds__({bounds}){cluster} {entry}({sig}) {{',
              # a flag the binding holds at its spec value: another value stops the kernel (a launch error) rather
              # than computing the branch the expert does not have
              *[f"  if ((long long)({n}) != {v}LL) __trap();  // kerntune: `{n}` verified at {v} only"
                for n, v in b.pinned.items()],
              f"  {e.function}{targs}({', '.join(b.call_args)});", "}", ""]
    return "\n".join(lines)
