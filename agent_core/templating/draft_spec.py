"""Drafting a tuning spec for a kernel from its signature and launch site (``kerntune spec``): it reads the
structural template, so it lives after templating."""

from __future__ import annotations

import re

from agent_core.model import CudaFile, KerntuneError
from agent_core.source.spec import FLOAT_DTYPES, _clean_host_expr, _kernel_start, _names_in, c_dtype
from agent_core.templating import templatize as tz


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _launch_info(cf: CudaFile, kernel: str) -> tuple[dict | None, set[str]]:
    """(launch_exprs with the template applied when the kernel is tunable, its parameter names)."""
    k = cf.kernel(kernel)
    if not k.launch_sites:
        return None, set()
    template = None
    try:
        template = tz.templatize(cf, kernel)
    except KerntuneError:
        template = None
    try:
        le = tz.launch_exprs(cf, kernel, template)
    except KerntuneError:
        if template is None:
            return None, set()
        template = None
        try:
            le = tz.launch_exprs(cf, kernel, None)
        except KerntuneError:
            return None, set()
    return le, set(template.space.params) if template is not None else set()


def _template_args(cf: CudaFile, kernel: str) -> tuple[list[str], str] | None:
    """(the template arguments of the launch site the draft follows, a note) when it instantiates the kernel
    explicitly (``k<float, 256><<<...>>>``); None otherwise."""
    k = cf.kernel(kernel)
    if not k.template_params or not k.launch_sites or not k.launch_sites[0].template_args:
        return None
    macros = {d.name: d.value for d in cf.defines if re.fullmatch(r"-?\d+[uUlL]*", d.value)}

    def arg(a) -> str:  # a macro that is a number compiles to the number; the instantiations are named by it
        return macros.get(a.text.strip(), a.text.strip())
    args = [arg(a) for a in k.launch_sites[0].template_args]
    others = sorted({", ".join(arg(a) for a in s.template_args) for s in k.launch_sites[1:]
                     if s.template_args} - {", ".join(args)})
    notes = []
    if len(args) != len(k.template_params):
        notes.append(f"TODO: {kernel} has {len(k.template_params)} template parameters; give every one")
    if others:
        notes.append("TODO: other launches instantiate <" + ">, <".join(others) + ">: keep the one the spec's "
                     "launch makes")
    return args, "; ".join(notes) or "the instantiation to tune (your launch's)"


def draft_spec(cf: CudaFile, kernel: str) -> str:
    """A `/* kerntune: ... */` block for ``kernel`` from its signature and launch site, with TODOs."""
    k = cf.kernel(kernel)
    le, param_names = _launch_info(cf, kernel)
    host_args = list(le.get("args") or []) if le else []
    arg_lines: list[tuple[str, str]] = []
    values: list[str] = []
    for i, p in enumerate(k.params):
        dt = c_dtype(p.type)
        notes = []
        if dt is None:
            notes.append(f"TODO: dtype of '{p.type.strip()}'")
            dt = "f32"
        if p.is_pointer:
            role = "in" if p.is_const else "out"
            arg_lines.append((f"{p.name}: {role} {dt}[COUNT_{p.name}]",
                              "; ".join(notes + [f"TODO: element count of {p.name}"] +
                                        ([] if p.is_const else ["or inout if it is read"]))))
            continue
        host = host_args[i] if i < len(host_args) else None
        val = _clean_host_expr(host) if host else None
        if dt in FLOAT_DTYPES:
            if val is None or _names_in([val]):
                notes.append(f"TODO: the value your code passes ({host.strip()})" if host else "TODO: value")
                val = "1.0"
        elif val is None:
            if host:
                notes.append(f"TODO: your code passes {host.strip()}")
            val = p.name
        if dt not in FLOAT_DTYPES:
            values.append(val)
        arg_lines.append((f"{p.name}: {dt} = {val}", "; ".join(notes)))

    launch_notes: dict[str, str] = {}
    launch_vals: dict[str, list[str]] = {}
    for key in ("grid", "block"):
        raw = (le or {}).get(key)
        raw = [raw] if isinstance(raw, str) else list(raw or [])
        cleaned = [_clean_host_expr(r) for r in raw]
        if not raw or any(c is None for c in cleaned):
            launch_vals[key] = ["TODO"]
            launch_notes[key] = ("TODO: your launch has " + ", ".join(raw) if raw else
                                 "TODO: no launch of this kernel in the file; the launch " + key)
        else:
            launch_vals[key] = cleaned  # type: ignore[assignment]
    smem_raw = str((le or {}).get("smem") or "0")
    smem = _clean_host_expr(smem_raw)
    smem_note = "" if smem is not None else f"TODO: your launch has {smem_raw}"
    smem = smem if smem is not None else "0"

    size_names = [n for n in _names_in(values + launch_vals["grid"] + launch_vals["block"] + [smem])
                  if n not in param_names and n != "TODO"]
    if not size_names:
        size_names = ["n"]
    guess = " * ".join(size_names)
    arg_lines = [(re.sub(r"\[COUNT_\w+\]", f"[{guess}]", a), c) for a, c in arg_lines]

    def with_comment(line: str, note: str) -> str:
        return f"{line}  # {note}" if note else line.rstrip()

    out = ["/* kerntune:",
           "# drafted by `kerntune spec`: fix every TODO (sizes, element counts), then `kerntune tune`"]
    out.append("args = [")
    width = max((len(_toml_str(a)) for a, _ in arg_lines), default=0) + 1
    for a, c in arg_lines:
        out.append(with_comment(f"  {(_toml_str(a) + ',').ljust(width)}", c))
    out.append("]")
    zeros = ", ".join(f"{n} = 0" for n in size_names)
    out.append("sizes = [")
    out.append(f"  {{ {zeros} }},  # TODO: a typical problem size")
    out.append(f"  {{ {zeros} }},  # TODO: one that is not a multiple of the block size (e.g. 4099)")
    out.append("]")
    for key in ("grid", "block"):
        v = launch_vals[key]
        val = _toml_str(v[0]) if len(v) == 1 else "[" + ", ".join(_toml_str(x) for x in v) + "]"
        out.append(with_comment(f"{key} = {val}", launch_notes.get(key, "")))
    if smem != "0" or smem_note:
        out.append(with_comment(f"smem = {_toml_str(smem)}", smem_note))
    targs = _template_args(cf, kernel)
    if targs is not None:
        out.append(with_comment("template_args = [" + ", ".join(_toml_str(a) for a in targs[0]) + "]", targs[1]))
    out.append("*/")
    return "\n".join(out)


def insert_spec(text: str, cf: CudaFile, kernel: str) -> str:
    """``text`` with the drafted spec inserted above the kernel (above its ``template <...>``), indented
    like the kernel."""
    k = cf.kernel(kernel)
    start = _kernel_start(text, k)
    line_start = text.rfind("\n", 0, start) + 1
    indent = re.match(r"[ \t]*", text[line_start:start]).group(0)
    block = "\n".join((indent + ln) if ln else ln for ln in draft_spec(cf, kernel).split("\n"))
    return text[:line_start] + block + "\n" + text[line_start:]
