"""The structural template's public results: the tunable sites of a kernel, its parameter space, and the
template itself (the whole file with every site replaced by its macro, behind the params header)."""

from __future__ import annotations

import os

from agent_core.model import CudaFile, KernelTemplate, KerntuneError, Param, ParamSpace, Site, macro_name, site_text
from agent_core.templating.structural.analysis import analyze
from agent_core.templating.structural.state import Analysis
from agent_core.templating.text_kind import HEADER_BEGIN, HEADER_END


def tunable_sites(cf: CudaFile, kernel: str) -> list[Site]:
    """The hard-coded tunable places of ``kernel`` (empty when there are none or it cannot be analyzed)."""
    try:
        a = analyze(cf, kernel)
    except KerntuneError:
        return []
    if all(len(p.values) == 1 for p in a.params.values()):
        return []  # templatize says why there is nothing to tune
    return a.sites()


def template_text(cf: CudaFile, kernel: str, params: dict[str, Param], sites: list[Site],
                  launch: dict | None = None) -> str:
    """The file with every site replaced by its macro, behind the params header.

    nvcc does not macro-expand ``#pragma unroll N`` but evaluates N as a constant expression, so a parameter
    used there becomes a ``constexpr int`` of the macro's name (the macro is read, then undefined). The
    header's last line is a ``#line`` directive continued onto the end marker, so that nvcc reports the
    user's own line numbers and ``apply.strip_header`` still removes the whole header. A ``launch`` (the
    spec's, tied to the parameters) is written in the header too: variants of the same text launched
    differently are different templates."""
    data = cf.text.encode("utf-8")
    out, pos = [], 0
    for s in sorted(sites, key=lambda s: s.span.start):
        out += [data[pos:s.span.start], site_text(s.render, s.param).encode()]
        pos = s.span.end
    out.append(data[pos:])
    body = b"".join(out).decode("utf-8")
    in_pragma = {p.name for p in params.values() if p.kind == "unroll"}
    lines = [HEADER_BEGIN,
             f"// kerntune: structural template of kernel '{kernel}'; compile with -DKT_<PARAM>=<value>"]
    if launch:
        lines.append("// kerntune: launched on grid ({}) x block ({}), smem {}".format(
            ", ".join(_as_list(launch.get("grid"))), ", ".join(_as_list(launch.get("block"))), launch.get("smem") or 0))
    for p in params.values():
        m = macro_name(p.name)
        lines += [f"// {p.name} ({p.kind}): {p.why}", f"#ifndef {m}", f"#define {m} {p.original}", "#endif"]
        if p.name in in_pragma:
            lines += [f"constexpr int kerntune_{p.name}_value = {m};  // #pragma unroll does not expand macros",
                      f"#undef {m}", f"constexpr int {m} = kerntune_{p.name}_value;"]
    if cf.path and not cf.path.startswith("<"):
        path = os.path.abspath(cf.path).replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'#line 1 "{path}" \\')  # continued onto the end marker: the next line is line 1
    lines.append(HEADER_END)
    return "\n".join(lines) + "\n" + body


def tunable_space(cf: CudaFile, kernel: str) -> ParamSpace:
    """The parameter space ``templatize`` would give ``kernel``, without the template's text (which is the
    whole file: ``kerntune show`` over a file of thousands of kernels stays linear in its size)."""
    a = _tunable(cf, kernel)
    return ParamSpace(kernel=kernel, params=_params(a), constraints=list(a.constraints))


def templatize(cf: CudaFile, kernel: str) -> KernelTemplate:
    """Lift ``kernel``'s tunable constants into parameters; raise KerntuneError (with the kernel's location
    and the reason) when there is nothing to tune or the kernel cannot be analyzed."""
    a = _tunable(cf, kernel)
    params = _params(a)
    sites = a.sites()
    space = ParamSpace(kernel=kernel, params=params, constraints=list(a.constraints))
    return KernelTemplate(kernel=kernel, path=cf.path, original_text=cf.text,
                          text=template_text(cf, kernel, params, sites, a.launch), space=space, sites=sites,
                          origin="structural", launch=a.launch, entry=None)


def _tunable(cf: CudaFile, kernel: str) -> Analysis:
    """The analysis of a kernel with something to tune; KerntuneError (located) when there is nothing."""
    a = analyze(cf, kernel)
    k = a.k
    if not a.params or all(len(p.values) == 1 for p in a.params.values()):
        raise KerntuneError(f"nothing to tune in kernel '{kernel}': {a.why_nothing()}. kerntune lifts constant "
                            "block sizes at a launch in this file, or the constant that caps one (min(d, 1024)), with "
                            "what assumes them, fixed grids and items per thread of grid-stride loops, #pragma unroll "
                            "N, __launch_bounds__ and integer template arguments",
                            cf.path, k.name_span.line, k.name_span.col)
    return a


def _params(a: Analysis) -> dict[str, Param]:
    return {n: Param(name=n, values=p.values, original=p.original, kind=p.kind, why=p.why,
                     template_param=a.tp_of.get(n)) for n, p in a.params.items()}


def _as_list(v) -> list[str]:
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]
