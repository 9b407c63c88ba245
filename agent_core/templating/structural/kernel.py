"""Which kernel to analyze: the one named (else an error naming the file's kernels and the closest name),
refused with a located reason when it is declared through a macro or does not parse."""

from __future__ import annotations

import difflib
import re

from agent_core.model import CudaFile, Kernel, KerntuneError
from agent_core.source.cuda_parse import kernel_has_errors
from agent_core.templating.structural.syntax import strip_comments


def global_macro(cf: CudaFile, k: Kernel) -> str | None:
    """The object-like macro of the file standing in for ``__global__`` that declares ``k`` (InfiniCore's
    ``#define INFINIOP_CUDA_KERNEL __global__ void``), None where ``__global__`` is written."""
    words = re.findall(r"\w+", k.signature)
    if "__global__" in words:
        return None
    return next((d.name for d in cf.defines if "__global__" in d.value.split() and d.name in words), None)


def check_supported(cf: CudaFile, k: Kernel) -> None:
    """KerntuneError (located) when ``k`` cannot be analyzed: a syntax error (a ``__global__`` macro the parser
    cannot read around, ``KERNEL void k(...)``, says so). A macro that stands for ``__global__ void`` reads as a
    return type and is analyzed like ``__global__`` written."""
    errors = kernel_has_errors(cf, k)
    written = "__global__" in re.findall(r"\w+", k.signature)
    macro = None if written else global_macro(cf, k)
    if not written and (errors or macro is None):
        what = f"the macro {macro}" if macro else "a macro"
        raise KerntuneError(f"kernel '{k.name}' is declared through {what} standing in for __global__, which the "
                            "parser cannot read there: write __global__ in its declaration (or a macro that stands "
                            "for `__global__ void`) so kerntune can read and templatize it",
                            cf.path, k.span.line, k.span.col)
    if errors:
        e = errors[0]
        raise KerntuneError(f"kernel '{k.name}' does not parse here ({e.message}); fix the syntax (a #pragma "
                            "between `if (...)` and an unbraced body is a common cause) before templatizing",
                            cf.path, e.span.line, e.span.col)


def find_kernel(cf: CudaFile, name: str) -> Kernel:
    """The kernel named ``name``; else a KerntuneError naming the file, the kernels it has (with their lines)
    and the closest name, located at a function of that name that is not a kernel, the closest kernel, or the
    file's first line."""
    try:
        return cf.kernel(name)
    except KerntuneError:
        pass
    fn = re.compile(rf"\b{re.escape(name)}\s*\(")
    plain = next((i for i, text in enumerate(strip_comments(cf.text).split("\n")) if fn.search(text)), None)
    note = f"; '{name}' at line {plain + 1} is not a __global__ function" if plain is not None else ""
    if not cf.kernels:
        raise KerntuneError(f"no __global__ kernel named '{name}': this file has no __global__ kernels{note}",
                            cf.path, plain or 0, 0)
    close = difflib.get_close_matches(name, [k.name for k in cf.kernels], 1, 0.5)
    at = next(k for k in cf.kernels if k.name == close[0]) if close else cf.kernels[0]
    have = ", ".join(f"{k.name} (line {k.name_span.line + 1})" for k in cf.kernels)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    line, col = (plain, 0) if plain is not None else (at.name_span.line, at.name_span.col)
    raise KerntuneError(f"no __global__ kernel named '{name}' (kernels in this file: {have}){note}{hint}", cf.path,
                        line, col)
