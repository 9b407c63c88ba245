"""Parameter spaces: enumerate configurations, check constraints, read and write the template files.

A space file (``STEM.KERNEL.space.toml`` in ``.kerntune/``) is TOML written by ``space_to_toml`` with
comments for the user; an edited file is what the search uses, as long as the source has not changed.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
import tomllib
from pathlib import Path
from typing import Iterable, Iterator

from agent_core import expr
from agent_core.model import KernelTemplate, KerntuneError, Param, ParamSpace
from agent_core.source.spec import toml_error_line
from agent_core.store import check_params

TOP_KEYS = ("kernel", "source", "template", "original_hash", "origin", "entry", "constraints", "params", "launch")
PARAM_KEYS = ("values", "original", "kind", "why", "template_param")
LAUNCH_KEYS = ("grid", "block", "smem")


# --------------------------------------------------------------------------------------------- enumeration
def iter_configs(space: ParamSpace) -> Iterator[dict[str, int]]:
    """Every configuration of the space (cartesian product, parameters in order, values in order)."""
    names = list(space.params)
    for combo in itertools.product(*(space.params[n].values for n in names)):
        yield dict(zip(names, combo))


def _fmt_sizes(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def check_config(space: ParamSpace, cfg: dict[str, int], sizes: list[dict[str, int]] | None = None) -> str | None:
    """None when ``cfg`` is in the space and meets every constraint for every size set; else the reason."""
    sizes = sizes or []
    for name, p in space.params.items():
        if name not in cfg:
            return f"no value for parameter {name}"
        if cfg[name] not in p.values:
            return f"{name}={cfg[name]} is not in its values {p.values}"
    for extra in cfg:
        if extra not in space.params:
            return f"{extra} is not a parameter of this space (parameters: {', '.join(space.params) or 'none'})"
    for c in space.constraints:
        try:
            uses_sizes = bool(expr.names(c) - set(space.params))
        except expr.ExprError as e:
            return f"constraint '{c}' cannot be parsed: {e.message}"
        envs = [(i, s) for i, s in enumerate(sizes)] if uses_sizes and sizes else [(None, {})]
        for i, s in envs:
            env = {**s, **cfg}
            where = f" for size set {i + 1} ({_fmt_sizes(s)})" if i is not None else ""
            try:
                ok = expr.evaluate(c, env)
            except expr.ExprError as e:
                return f"constraint '{c}' cannot be evaluated{where}: {e.message}"
            if not ok:
                return f"constraint '{c}' fails{where}"
    return None


def valid_configs(space: ParamSpace, sizes: list[dict[str, int]] | None = None,
                  limit: int | None = None) -> list[dict[str, int]]:
    """The configurations that pass ``check_config``, in ``iter_configs`` order (at most ``limit``)."""
    out = []
    for cfg in iter_configs(space):
        if check_config(space, cfg, sizes) is None:
            out.append(cfg)
            if limit is not None and len(out) >= limit:
                break
    return out


# --------------------------------------------------------------------------------------------- TOML out
def _q(s: str) -> str:
    """A TOML basic string (JSON escapes are valid TOML escapes)."""
    return json.dumps(str(s), ensure_ascii=False)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return _q(v)


def template_file_names(source_path: str | Path, kernel: str) -> tuple[str, str]:
    """(``STEM.KERNEL.kt.cu``, ``STEM.KERNEL.space.toml``) for a source file and kernel."""
    stem = Path(source_path).stem
    return f"{stem}.{kernel}.kt.cu", f"{stem}.{kernel}.space.toml"


def space_to_toml(template: KernelTemplate, source: str | None = None) -> str:
    """The space file text for ``template``; ``source`` is the source path relative to the workdir's parent
    (default: the source's file name)."""
    sp = template.space
    tname, _ = template_file_names(template.path, template.kernel)
    lines = [
        "# kerntune parameter space — edit values / constraints; `kerntune tune` uses this file.",
        "# Each [params.NAME] is the macro KT_NAME in the template file; `values` is the search domain and",
        "# must contain `original` (the value in your code). Delete a [params.X] table and its KT_X uses stay",
        "# at the header's default. Constraints are expressions over parameter and size names (Python syntax,",
        "# C integer semantics; cdiv round_up min max is_pow2 divides log2); every one must hold.",
        f"kernel = {_q(template.kernel)}",
        f"source = {_q(source or Path(template.path).name)}           # relative to this file's directory's parent",
        f"template = {_q(tname)}",
        f"original_hash = {_q(template.original_hash)}  # sha256 of the source when templatized",
        f"origin = {_q(template.origin)}",
    ]
    if template.entry:
        lines.append(f"entry = {_q(template.entry)}  # the __global__ function run in the template")
    if sp.constraints:
        lines.append("constraints = [")
        lines += [f"  {_q(c)}," for c in sp.constraints]
        lines.append("]")
    else:
        lines.append("constraints = []")
    if template.launch:
        lines += ["", "# how a variant is launched: expressions over size and parameter names"]
        lines.append("[launch]")
        for k in LAUNCH_KEYS:
            if k in template.launch and template.launch[k] is not None:
                lines.append(f"{k} = {_toml_value(template.launch[k])}")
    for name, p in sp.params.items():
        lines.append("")
        lines.append(f"[params.{name}]")
        lines.append(f"values = {_toml_value(list(p.values))}")
        lines.append(f"original = {p.original}")
        lines.append(f"kind = {_q(p.kind)}")
        lines.append(f"why = {_q(p.why)}")
        if p.template_param:
            lines.append(f"template_param = {_q(p.template_param)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- TOML in
def _line_of(text: str, table: str | None, key: str | None) -> int | None:
    """0-based line of ``key`` in ``[table]`` (top level when table is None), or of the table header."""
    lines = text.splitlines()
    start, in_table = 0, table is None
    if table is not None:
        hdr = re.compile(r"^\s*\[\s*" + re.escape(table).replace(r"\.", r"\s*\.\s*") + r"\s*\]")
        for i, ln in enumerate(lines):
            if hdr.match(ln):
                start, in_table = i, True
                break
        if not in_table:
            return None
        if key is None:
            return start
        start += 1
    keyre = re.compile(r"^\s*" + re.escape(key or "") + r"\s*=")
    for i in range(start, len(lines)):
        if re.match(r"^\s*\[", lines[i]):
            break
        if key is not None and keyre.match(lines[i]):
            return i
    return start if table is not None else None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_constraint_names(constraints: list[str], params: Iterable[str], size_names: set[str] | None,
                            err) -> None:
    params = set(params)
    for i, c in enumerate(constraints):
        try:
            used = expr.names(c)
        except expr.ExprError as e:
            raise err(f"constraints[{i}]: {e.message}", "constraints", f"constraints[{i}]")
        for n in sorted(used - params):
            if size_names is not None:
                if n in size_names:
                    continue
            else:
                # sizes are not known here: flag what looks like a parameter (upper case or a near miss)
                if not (n.isupper() or difflib.get_close_matches(n, params, 1, 0.75)):
                    continue
            close = difflib.get_close_matches(n, list(params) + sorted(size_names or ()), 1, 0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            known = ", ".join(sorted(params | (size_names or set()))) or "none"
            raise err(f"constraint '{c}' uses unknown name '{n}' (known: {known}){hint}", "constraints",
                      f"constraints[{i}]")


def space_from_toml(text: str, path: str | None = None,
                    size_names: set[str] | None = None) -> tuple[ParamSpace, dict]:
    """Parse a space file → (ParamSpace, meta) where meta has kernel, source, template, original_hash,
    origin, launch (dict or None) and entry. ``size_names``, when known, lets constraints be checked
    exactly; without them, only names that look like parameters are reported as unknown."""
    path = str(path) if path is not None else None

    def err(msg: str, table: str | None, field: str, key: str | None = None) -> KerntuneError:
        line = _line_of(text, table, key if key is not None else (field.split("[")[0] if table is None else None))
        return KerntuneError(msg, path, line, field_name=field)

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg, line, col = toml_error_line(e, text)
        raise KerntuneError(f"space file is not valid TOML: {msg}", path, line, col) from None
    except (RecursionError, MemoryError):
        raise KerntuneError("space file is nested too deeply to be read", path) from None

    for k in data:
        if k not in TOP_KEYS:
            raise err(f"unknown key '{k}' (expected: {', '.join(TOP_KEYS)})", None, k)
    kernel = data.get("kernel")
    if not isinstance(kernel, str) or not kernel:
        raise err("`kernel` must be the kernel's name, e.g. kernel = \"row_sum\"", None, "kernel")
    for k in ("source", "template", "original_hash", "origin", "entry"):
        if k in data and not isinstance(data[k], str):
            raise err(f"`{k}` must be a string", None, k)

    params_raw = data.get("params", {})
    if not isinstance(params_raw, dict):
        raise err("`params` must be tables: [params.NAME] with values = [...] and original = N", None, "params")
    params: dict[str, Param] = {}
    for name, p in params_raw.items():
        tbl = f"params.{name}"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise err(f"parameter name '{name}' must be an identifier (it becomes the macro KT_{name})",
                      tbl, f"params.{name}")
        if not isinstance(p, dict):
            raise err(f"params.{name} must be a table with values = [...] and original = N", None,
                      f"params.{name}", "params")
        for k in p:
            if k not in PARAM_KEYS:
                raise err(f"params.{name}: unknown key '{k}' (expected: {', '.join(PARAM_KEYS)})", tbl,
                          f"params.{name}.{k}", k)
        values = p.get("values")
        fld = f"params.{name}.values"
        if not isinstance(values, list) or not all(_is_int(v) for v in values):
            raise err(f"params.{name}.values must be a list of integers, e.g. values = [64, 128, 256]",
                      tbl, fld, "values")
        if not values:
            raise err(f"params.{name}.values is empty: give at least the original value", tbl, fld, "values")
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            raise err(f"params.{name}.values repeats {', '.join(map(str, dup))}", tbl, fld, "values")
        original = p.get("original")
        if not _is_int(original):
            raise err(f"params.{name}.original must be the integer value in your code", tbl,
                      f"params.{name}.original", "original")
        if original not in values:
            raise err(f"params.{name}: original value {original} is not in values {values}; add it to "
                      "values (the original configuration is the reference every variant is compared with)",
                      tbl, fld, "values")
        for k in ("kind", "why", "template_param"):
            if k in p and not isinstance(p[k], str):
                raise err(f"params.{name}.{k} must be a string", tbl, f"params.{name}.{k}", k)
        params[name] = Param(name=name, values=list(values), original=original, kind=p.get("kind", "user"),
                             why=p.get("why", ""), template_param=p.get("template_param"))

    constraints = data.get("constraints", [])
    if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
        raise err("`constraints` must be a list of expression strings, e.g. [\"BLOCK % 32 == 0\"]", None,
                  "constraints")
    _check_constraint_names(constraints, params, size_names,
                            lambda m, f, fn: err(m, None, fn, "constraints"))

    launch = data.get("launch")
    if launch is not None:
        if not isinstance(launch, dict):
            raise err("`launch` must be a table with grid, block and smem", None, "launch")
        for k, v in launch.items():
            if k not in LAUNCH_KEYS:
                raise err(f"launch: unknown key '{k}' (expected: grid, block, smem)", "launch", f"launch.{k}", k)
            items = v if isinstance(v, list) else [v]
            if not items or len(items) > 3 or not all(isinstance(x, (str, int)) and not isinstance(x, bool)
                                                       for x in items):
                raise err(f"launch.{k} must be an expression or a list of 1 to 3 expressions", "launch",
                          f"launch.{k}", k)
            for x in items:
                try:
                    expr.parse(str(x))
                except expr.ExprError as e:
                    raise err(f"launch.{k}: {e.message}", "launch", f"launch.{k}", k) from None
        if "grid" not in launch or "block" not in launch:
            raise err("`launch` needs both grid and block", "launch", "launch", None)

    meta = {k: data.get(k) for k in ("kernel", "source", "template", "original_hash", "origin", "entry")}
    meta["launch"] = dict(launch) if launch is not None else None
    return ParamSpace(kernel=kernel, params=params, constraints=list(constraints)), meta


# --------------------------------------------------------------------------------------------- files


def served_size_sets(template: KernelTemplate, sizes: list[dict]) -> list[int]:
    """The size sets a regime template (``serves``) is meant for."""
    out = []
    for i, sz in enumerate(sizes):
        try:
            if expr.evaluate(template.serves, sz):
                out.append(i)
        except expr.ExprError:
            continue
    return out


def check_stored_config(space: ParamSpace, params, what: str) -> dict[str, int]:
    """``params`` when it is a configuration of ``space`` (integers within range, the same names, each value
    one of its domain's), else a KerntuneError saying what is wrong (``what``: where it was read).
    Configurations read from a results store pass here before ``apply`` writes them into a file: a store may
    come from anywhere."""
    check_params(params, what)
    missing, extra = sorted(set(space.params) - set(params)), sorted(set(params) - set(space.params))
    if missing or extra:
        raise KerntuneError(f"{what}: its parameters ({', '.join(sorted(params)) or 'none'}) are not the "
                            f"template's ({', '.join(space.params) or 'none'}); it is not written")
    for n, v in params.items():
        if v not in space.params[n].values:
            raise KerntuneError(f"{what}: {n} = {v} is not in the parameter's domain {space.params[n].values}; "
                                "it is not written")
    return params
