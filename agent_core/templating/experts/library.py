"""The expert library: load and validate the expert files (``templates/experts/*.cu``).

An expert is a parameterized ``__device__`` implementation of one kernel family with a TOML header
(``/* kerntune-expert: ... */``): its roles, parameters, constraints and launch. Its bind-time conventions
(the layouts and numeric conventions one source serves: which half of a gated row is the gate, NeoX or GPT-J
pairs, eps inside or outside the root, ...) are declared in lines of their own::

    // kt:bind KT_EXPERT_GATE_LAYOUT = 0  (0: [gate | up] halves, 1: [up | gate], ...)

and used in preprocessor lines marked ``// kt:bind`` (``#if COND  // kt:bind``, ``#elif``, ``#else``, ``#endif``).
A convention may launch its own grid (``// kt:bind-grid KT_EXPERT_NAME = ["expression", ...]``, used by the
bindings that set it) or its own block (``// kt:bind-block KT_EXPERT_NAME = [...]``: no more threads than the
header's block or ``bounds`` allow, the kernel's ``__launch_bounds__``) or its own dynamic shared memory size
(``// kt:bind-smem KT_EXPERT_NAME = ["expression"]``: a size the kernel's arguments lack, read back from it with
``%dynamic_smem_size``). Such a grid may use sizes the header has no
role for where the convention declares them (``// kt:bind-sizes KT_EXPERT_NAME = ["name", ...]``): each binding that
sets the convention gives them in its ``sizes`` (an expression over the spec's size names, e.g. the batches of a key
range read from a buffer's length).
Binding resolves those lines for the binding's conventions (``render.resolve_conventions``): the code bound to a
user's kernel holds only the branch it uses, and every ``kt:bind`` line goes.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agent_core import expr
from agent_core.model import KerntuneError, Param, macro_name

EXPERT_DIR = Path(__file__).resolve().parents[3] / "templates" / "experts"
COMMON = "_common.cuh"
HEADER = re.compile(r"/\*\s*kerntune-expert:\s*\n(.*?)\*/", re.S)
# `// kt:bind NAME = DEFAULT  (what the values mean)`: a bind-time convention of the expert
CONVENTION = re.compile(r"^\s*//\s*kt:bind\s+(KT_EXPERT_\w+)\s*=\s*(-?\d+)\s*(.*)$")
# `#if COND  // kt:bind` and its #elif / #else / #endif: resolved when the expert is bound
DIRECTIVE = re.compile(r"^\s*#\s*(if|elif|else|endif)\b(.*?)//\s*kt:bind\s*$")
# `// kt:bind-grid KT_EXPERT_NAME = ["grid expression", ...]`: the launch grid of a binding that sets the convention
GRID_WHEN = re.compile(r"^\s*//\s*kt:bind-grid\s+(KT_EXPERT_\w+)\s*=\s*(.*)$")
# `// kt:bind-block KT_EXPERT_NAME = ["block expression", ...]`: the launch block of a binding that sets the convention
BLOCK_WHEN = re.compile(r"^\s*//\s*kt:bind-block\s+(KT_EXPERT_\w+)\s*=\s*(.*)$")
# `// kt:bind-sizes KT_EXPERT_NAME = ["name", ...]`: sizes of no role that the convention's grid or block may use; a
# binding that sets the convention gives each in its `sizes`
# `// kt:bind-smem KT_EXPERT_NAME = ["expression"]`: the dynamic shared memory (bytes) of a binding that sets it
SMEM_WHEN = re.compile(r"^\s*//\s*kt:bind-smem\s+(KT_EXPERT_\w+)\s*=\s*(.*)$")
SIZES_WHEN = re.compile(r"^\s*//\s*kt:bind-sizes\s+(KT_EXPERT_\w+)\s*=\s*(.*)$")


@dataclass
class Expert:
    name: str
    family: str
    description: str
    function: str  # the __device__ function the wrapper calls, e.g. "kt::rms_norm"
    roles: list[str]
    params: dict[str, Param]
    constraints: list[str]
    launch: dict  # {"grid": [...], "block": [...], "smem": "..."} over role sizes and parameter names
    source: str  # the whole expert file
    path: str
    helpers: list[str] = field(default_factory=list)  # helper files (templates/experts/) put inside its namespace kt
    serves: str | None = None  # the sizes this expert is for (a regime, e.g. few rows): an expression over role sizes
    conventions: dict[str, int] = field(default_factory=dict)  # bind-time conventions and their defaults
    convention_words: dict[str, str] = field(default_factory=dict)  # what each convention's values mean


def load_library(directory: str | Path | None = None) -> list[Expert]:
    """Every expert in the directory (default templates/experts/), validated; KerntuneError on a bad file."""
    d = Path(directory) if directory else EXPERT_DIR
    experts = [load_expert(p) for p in sorted(d.glob("*.cu"))]
    names = [e.name for e in experts]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise KerntuneError(f"expert names used twice: {', '.join(sorted(dup))}", str(d))
    return experts


def load_expert(path: str | Path) -> Expert:
    path = str(path)
    text = Path(path).read_text(encoding="utf-8")
    m = HEADER.search(text)
    if not m:
        raise KerntuneError("no `/* kerntune-expert: ... */` header comment", path, 0)
    line = text[:m.start(1)].count("\n")
    try:
        meta = tomllib.loads(m.group(1))
    except tomllib.TOMLDecodeError as e:
        raise KerntuneError(f"expert header is not valid TOML: {e}", path, line) from None
    for key in ("name", "family", "description", "function", "roles", "params", "launch"):
        if key not in meta:
            raise KerntuneError(f"expert header lacks `{key}`", path, line, field_name=key)
    params = {}
    for pname, p in meta["params"].items():
        vals = p.get("values")
        if not vals or not all(isinstance(v, int) for v in vals):
            raise KerntuneError(f"parameter {pname}: `values` must be a non-empty list of integers", path, line,
                                field_name=f"params.{pname}.values")
        if p.get("default") not in vals:
            raise KerntuneError(f"parameter {pname}: `default` must be one of its values", path, line,
                                field_name=f"params.{pname}.default")
        if f"#define {macro_name(pname)}" not in text:
            raise KerntuneError(f"parameter {pname} has no `#ifndef {macro_name(pname)} / #define` default", path,
                                line, field_name=f"params.{pname}")
        params[pname] = Param(pname, list(vals), p["default"], p.get("kind", "expert"), p.get("why", ""),
                              closed=True)  # an expert lists every value its code supports
    launch = meta["launch"]
    role_sizes = role_size_names(meta["roles"])
    known = set(params) | role_sizes | {"ESIZE", "CSIZE"}
    exprs = [("constraints", c) for c in meta.get("constraints", [])]
    exprs += [("launch.grid", g) for g in launch.get("grid", [])] + [("launch.block", b) for b in launch.get("block", [])]
    exprs.append(("launch.smem", launch.get("smem", "0")))
    bounds = launch.get("bounds")  # optional: the kernel's __launch_bounds__ where the block depends on sizes
    if bounds is not None:
        exprs.append(("launch.bounds", bounds))
    if launch.get("min_blocks") is not None:  # optional: __launch_bounds__'s second argument (needs `bounds`)
        if bounds is None:
            raise KerntuneError("launch.min_blocks needs launch.bounds (it is __launch_bounds__'s second argument)",
                                path, line, field_name="launch.min_blocks")
        exprs.append(("launch.min_blocks", launch["min_blocks"]))
    for fname, e in exprs:
        try:
            unknown = expr.names(e) - known
        except KerntuneError as err:
            raise KerntuneError(f"{fname}: {err.message}", path, line, field_name=fname) from None
        if unknown:
            raise KerntuneError(f"{fname}: `{e}` uses unknown names {sorted(unknown)} (parameters: "
                                f"{sorted(params)}, role sizes: {sorted(role_sizes)})", path, line, field_name=fname)
    if not launch.get("grid") or not launch.get("block"):
        raise KerntuneError("launch needs `grid` and `block`", path, line, field_name="launch")
    ldict = {"grid": list(launch["grid"]), "block": list(launch["block"]), "smem": str(launch.get("smem", "0"))}
    # optional: constants of the kernel (parameters only): __launch_bounds__ where the block depends on sizes, and
    # the thread-block cluster size (__cluster_dims__; the grid must be a multiple of it)
    for key, what in (("bounds", "__launch_bounds__"), ("min_blocks", "__launch_bounds__'s blocks per SM"),
                      ("cluster", "__cluster_dims__")):
        v = launch.get(key)
        if v is None:
            continue
        try:
            sizes_used = expr.names(str(v)) - set(params)
        except KerntuneError as err:
            raise KerntuneError(f"launch.{key}: {err.message}", path, line, field_name=f"launch.{key}") from None
        if sizes_used:
            raise KerntuneError(f"launch.{key}: `{v}` may use parameters only (it becomes the kernel's {what}), not "
                                f"{sorted(sizes_used)}", path, line, field_name=f"launch.{key}")
        ldict[key] = str(v)
    helpers = meta.get("helpers", [])
    if not isinstance(helpers, list) or not all(isinstance(h, str) for h in helpers):
        raise KerntuneError("`helpers` must be a list of file names", path, line, field_name="helpers")
    for h in helpers:
        if not (Path(path).parent / h).is_file():
            raise KerntuneError(f"helper file {h} not found beside the expert", path, line, field_name="helpers")
    if helpers and not re.search(r"^namespace kt \{\n", text[m.end():], re.M):
        raise KerntuneError("an expert with `helpers` needs a `namespace kt {` line to put them in", path, line,
                            field_name="helpers")
    serves = meta.get("serves")
    if serves is not None:
        try:
            unknown = expr.names(str(serves)) - role_sizes
        except KerntuneError as err:
            raise KerntuneError(f"serves: {err.message}", path, line, field_name="serves") from None
        if unknown:
            raise KerntuneError(f"serves: `{serves}` may use role sizes only ({sorted(role_sizes)}), not "
                                f"{sorted(unknown)}", path, line, field_name="serves")
    conventions, words = _conventions(text, path)
    sizes = _bind_sizes(text, path, conventions, known)
    if sizes:
        ldict["sizes_when"] = sizes
    grids = _bind_grids(text, path, conventions, known, sizes=sizes)
    if grids:
        ldict["grid_when"] = grids
    blocks = _bind_grids(text, path, conventions, known, BLOCK_WHEN, "kt:bind-block", sizes)
    if blocks:
        ldict["block_when"] = blocks
    smems = _bind_grids(text, path, conventions, known, SMEM_WHEN, "kt:bind-smem", sizes)
    for conv, v in smems.items():
        if len(v) != 1:
            raise KerntuneError(f"kt:bind-smem {conv}: one expression (the bytes of dynamic shared memory)", path)
    if smems:
        ldict["smem_when"] = {c: v[0] for c, v in smems.items()}
    return Expert(meta["name"], meta["family"], meta["description"], meta["function"], list(meta["roles"]), params,
                  list(meta.get("constraints", [])), ldict, text, path, list(helpers),
                  str(serves) if serves is not None else None, conventions, words)


def _conventions(text: str, path: str) -> tuple[dict[str, int], dict[str, str]]:
    """The expert's bind-time conventions (``// kt:bind NAME = DEFAULT  words``) with their defaults; every
    ``// kt:bind`` preprocessor line is checked: balanced, its condition over declared conventions only."""
    conv, words = {}, {}
    for i, ln in enumerate(text.splitlines()):
        m = CONVENTION.match(ln)
        if m:
            if m.group(1) in conv:
                raise KerntuneError(f"convention {m.group(1)} declared twice", path, i)
            conv[m.group(1)] = int(m.group(2))
            words[m.group(1)] = m.group(3).strip().strip("()").strip()
    depth = 0
    for i, ln in enumerate(text.splitlines()):
        if "kt:bind" not in ln or CONVENTION.match(ln) or GRID_WHEN.match(ln) or BLOCK_WHEN.match(ln) \
                or SIZES_WHEN.match(ln) or SMEM_WHEN.match(ln):
            continue
        d = DIRECTIVE.match(ln)
        if d is None:
            raise KerntuneError(f"a `kt:bind` line must be `// kt:bind KT_EXPERT_NAME = DEFAULT` or a preprocessor "
                                f"line #if/#elif/#else/#endif ending in `// kt:bind`: {ln.strip()}", path, i)
        kind, cond = d.group(1), d.group(2).strip()
        if kind == "if":
            depth += 1
        elif depth == 0:
            raise KerntuneError(f"`#{kind}  // kt:bind` without its `#if  // kt:bind`", path, i)
        if kind == "endif":
            depth -= 1
        if kind in ("if", "elif"):
            try:
                unknown = expr.names(cond) - set(conv)
            except KerntuneError as err:
                raise KerntuneError(f"kt:bind condition `{cond}`: {err.message}", path, i) from None
            if unknown:
                raise KerntuneError(f"kt:bind condition `{cond}` uses undeclared conventions {sorted(unknown)} "
                                    f"(declared: {sorted(conv)})", path, i)
    if depth:
        raise KerntuneError("a `#if  // kt:bind` is never closed by `#endif  // kt:bind`", path)
    return conv, words


def _bind_sizes(text: str, path: str, conventions: dict[str, int], known: set[str]) -> dict[str, list[str]]:
    """The sizes of no role that a convention's grid or block may use (``// kt:bind-sizes KT_EXPERT_X = ["name"]``),
    checked: a declared convention, a non-empty list of new names (not a role size or parameter)."""
    out: dict[str, list[str]] = {}
    for i, ln in enumerate(text.splitlines()):
        g = SIZES_WHEN.match(ln)
        if g is None:
            continue
        conv = g.group(1)
        if conv not in conventions:
            raise KerntuneError(f"kt:bind-sizes: {conv} is not a declared convention (`// kt:bind {conv} = ...`)",
                                path, i)
        try:
            names = tomllib.loads(f"g = {g.group(2)}")["g"]
        except tomllib.TOMLDecodeError:
            names = None
        if not isinstance(names, list) or not names or not all(
                isinstance(x, str) and re.fullmatch(r"[A-Za-z_]\w*", x) and x not in known for x in names):
            raise KerntuneError(f"kt:bind-sizes {conv}: a non-empty list of names that are not already role sizes "
                                "or parameters", path, i)
        out[conv] = list(names)
    return out


def _bind_grids(text: str, path: str, conventions: dict[str, int], known: set[str], pattern: re.Pattern = GRID_WHEN,
                what: str = "kt:bind-grid", sizes: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """The grid of each binding-set convention that launches its own (``// kt:bind-grid KT_EXPERT_X = [...]``: a
    kernel whose own arguments lack a size reads it back from that grid, the tokens of a merge from gridDim.x), or
    with ``BLOCK_WHEN`` its block (``// kt:bind-block``: the rotated heads of a fused row read back from blockDim.y),
    checked: a declared convention, a non-empty list of expressions over known names and the sizes the convention
    declares (``sizes``: ``_bind_sizes``)."""
    out: dict[str, list[str]] = {}
    kind = what.rpartition("-")[2]
    for i, ln in enumerate(text.splitlines()):
        g = pattern.match(ln)
        if g is None:
            continue
        conv = g.group(1)
        if conv not in conventions:
            raise KerntuneError(f"{what}: {conv} is not a declared convention (`// kt:bind {conv} = ...`)",
                                path, i)
        try:
            grid = tomllib.loads(f"g = {g.group(2)}")["g"]
        except tomllib.TOMLDecodeError:
            grid = None
        if not isinstance(grid, list) or not grid or len(grid) > 3 or not all(isinstance(x, str) for x in grid):
            raise KerntuneError(f"{what} {conv}: a non-empty list of {kind} expressions", path, i)
        for x in grid:
            try:
                unknown = expr.names(x) - known - set((sizes or {}).get(conv, []))
            except KerntuneError as err:
                raise KerntuneError(f"{what} {conv}: {err.message}", path, i) from None
            if unknown:
                raise KerntuneError(f"{what} {conv}: `{x}` uses unknown names {sorted(unknown)}", path, i)
        out[conv] = list(grid)
    return out


def role_size_names(roles: list[str]) -> set[str]:
    out = set()
    for r in roles:
        name, _, rest = r.partition(":")
        if "[" in rest:
            out |= set(re.findall(r"[A-Za-z_]\w*", rest.split("[", 1)[1].split("]")[0]))
        else:
            out.add(name.strip())
    return out
