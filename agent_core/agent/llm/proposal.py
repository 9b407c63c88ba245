"""Validation of a templater's proposal before it is used: parameters and their macros, includes, entry,
space and constraints, launch expressions, and a compile of the original configuration. A proposal that
passes becomes a ``KernelTemplate`` (origin "llm") that the tuner verifies and times like any other.

Nothing from the proposal is executed on the host: expressions go through agent_core.expr, the source only
through nvcc (and later the GPU worker, as a kernel)."""

from __future__ import annotations

import re
from pathlib import Path

from agent_core import expr
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.model import KernelTemplate, KerntuneError, Param, ParamSpace, macro_name
from agent_core.templating.space import check_config, space_from_toml, space_to_toml

MAX_CONFIGS = 1_000_000
MAX_TEMPLATE_CHARS = 200_000
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include(?:_next)?\b(.*)$", re.M)
_DEFAULT = re.compile(r"^[ \t]*#[ \t]*(?:ifndef|define|undef|ifdef)[ \t]+(KT_\w+)", re.M)


class ProposalError(KerntuneError):
    """A proposal that cannot be used; ``stage`` says which check it failed."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def _size_names(spec) -> set[str]:
    return set(spec.sizes[0]) if spec.sizes else set()


def check_includes(text: str, original_text: str) -> None:
    """Only standard/CUDA headers (<name> without '..' or an absolute path) or includes the original file has."""
    allowed = {m.group(0).strip() for m in _INCLUDE.finditer(original_text)}
    for m in _INCLUDE.finditer(text):
        line, rest = m.group(0).strip(), m.group(1).strip()
        if line in allowed:
            continue
        ok = re.fullmatch(r"<[A-Za-z0-9_][A-Za-z0-9_./+-]*>", rest) and ".." not in rest
        if not ok:
            raise ProposalError("includes", f"'{line}' is not allowed: include only CUDA or C++ standard headers "
                                            "(<name>) or headers the original file includes")


def _params(data: dict, size_names: set[str]) -> dict[str, Param]:
    params: dict[str, Param] = {}
    for i, p in enumerate(data["params"]):
        name = p["name"]
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            raise ProposalError("params", f"params[{i}]: name '{name}' must be an upper-case identifier "
                                          "(it becomes the macro KT_{name})")
        if name in params:
            raise ProposalError("params", f"parameter {name} is given twice")
        if name in size_names:
            raise ProposalError("params", f"parameter {name} has the name of a problem size; rename it")
        vals = p["values"]
        if len(set(vals)) != len(vals):
            raise ProposalError("params", f"{name}: values repeat ({vals})")
        if p["original"] not in vals:
            raise ProposalError("params", f"{name}: original {p['original']} is not one of its values {vals}")
        params[name] = Param(name, list(vals), p["original"], p.get("kind") or "llm", p.get("why") or "")
    return params


def _check_macros(text: str, params: dict[str, Param]) -> str:
    """Every parameter is used as KT_NAME; add a default #define for the ones without. Returns the text."""
    body = "\n".join(l for l in text.splitlines() if not _DEFAULT.match(l))
    for name in params:
        if not re.search(rf"\b{macro_name(name)}\b", body):
            raise ProposalError("macros", f"parameter {name} is never used: the template must use the macro "
                                          f"{macro_name(name)} where the value goes")
    defined = {m.group(1) for m in _DEFAULT.finditer(text)}
    header = "".join(f"#ifndef {macro_name(n)}\n#define {macro_name(n)} {p.original}\n#endif\n"
                     for n, p in params.items() if macro_name(n) not in defined)
    return header + text if header else text


def _check_entry(text: str, entry: str, n_args: int) -> None:
    cf = parse_cuda(text, "<proposal>")
    names = [k.name for k in cf.kernels]
    k = next((k for k in cf.kernels if k.name == entry), None)
    if k is None:
        raise ProposalError("entry", f"the template has no __global__ function '{entry}' "
                                     f"(it has: {', '.join(names) or 'none'})")
    if len(k.params) != n_args:
        raise ProposalError("entry", f"'{entry}' takes {len(k.params)} arguments; the original kernel takes "
                                     f"{n_args}: keep the original signature")


def _check_launch(launch: dict, params: dict[str, Param], spec) -> dict:
    known = set(params) | _size_names(spec)
    out = {"grid": list(launch["grid"]), "block": list(launch["block"]), "smem": launch["smem"] or "0"}
    for k in ("grid", "block", "smem"):
        for e in (out[k] if isinstance(out[k], list) else [out[k]]):
            try:
                unknown = expr.names(e) - known
            except expr.ExprError as err:
                raise ProposalError("launch", f"launch.{k}: {err.message}") from None
            if unknown:
                raise ProposalError("launch", f"launch.{k} '{e}' uses unknown name(s) {', '.join(sorted(unknown))} "
                                              f"(known: {', '.join(sorted(known))})")
    orig = {n: p.original for n, p in params.items()}
    for i, sizes in enumerate(spec.sizes):
        try:
            ln = spec_mod.launch(out, sizes, orig)
        except KerntuneError as err:
            raise ProposalError("launch", f"launch for size set {i + 1} at the original values: {err.message}") from None
        if min(ln.grid) < 1 or min(ln.block) < 1 or ln.smem < 0:
            raise ProposalError("launch", f"launch for size set {i + 1} at the original values gives grid "
                                          f"{ln.grid}, block {ln.block}, smem {ln.smem}: dimensions must be >= 1")
        if ln.threads > 1024:
            raise ProposalError("launch", f"launch for size set {i + 1} at the original values has {ln.threads} "
                                          "threads per block (at most 1024)")
    return out


def template_from_proposal(data: dict, prep, compile_check: bool = True, arch: str = "sm_90") -> KernelTemplate:
    """A validated KernelTemplate from a templater answer (schema already checked); ProposalError otherwise.
    ``prep`` is the tuner's Prepared (the user's file, kernel and spec)."""
    spec, kernel = prep.spec, prep.kernel
    text = data["template"]
    if len(text) > MAX_TEMPLATE_CHARS:
        raise ProposalError("template", f"the template is {len(text)} characters (at most {MAX_TEMPLATE_CHARS})")
    sizes = _size_names(spec)
    params = _params(data, sizes)
    space = ParamSpace(kernel.name, params, list(data["constraints"]))
    if space.size() > MAX_CONFIGS:
        raise ProposalError("params", f"the space has {space.size()} configurations (at most {MAX_CONFIGS}): "
                                      "give fewer values")
    check_includes(text, prep.text)
    text = _check_macros(text, params)
    entry = data.get("entry") or kernel.name
    _check_entry(text, entry, len(kernel.params))
    for i, c in enumerate(space.constraints):
        try:
            unknown = expr.names(c) - set(params) - sizes
        except expr.ExprError as e:
            raise ProposalError("constraints", f"constraints[{i}]: {e.message}") from None
        if unknown:
            raise ProposalError("constraints", f"constraint '{c}' uses unknown name(s) {', '.join(sorted(unknown))}")
    why = check_config(space, space.original_config(), spec.sizes)
    if why:
        raise ProposalError("constraints", f"the original values {space.original_config()} are not valid: {why}")
    launch = _check_launch(data["launch"], params, spec)
    t = KernelTemplate(kernel=kernel.name, path=prep.path, original_text=prep.text, text=text, space=space,
                       origin="llm", launch=launch, entry=None if entry == kernel.name else entry)
    try:  # the space file kerntune writes for this template must read back
        space_from_toml(space_to_toml(t), None, sizes)
    except KerntuneError as e:
        raise ProposalError("space", f"the space does not round-trip through its file: {e.message}") from None
    if compile_check:
        from agent_core.measure.compiler import CompileError, compile_kernel
        from agent_core.workspace import cache_dir
        try:
            compile_kernel(text, entry, arch=arch, defines={macro_name(n): v for n, v in space.original_config().items()},
                           include_dirs=[str(Path(prep.path).parent)], cache_dir=cache_dir())
        except CompileError as e:
            log = (e.log or "").strip()
            raise ProposalError("compile", f"nvcc failed at the original values: {e.message}"
                                           + (f"\n{log[-2000:]}" if log else "")) from None
    return t
