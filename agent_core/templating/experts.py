"""Expert templates: load the library, match a user's kernel to a family, bind an expert to its signature.

An expert (``templates/experts/<name>.cu``) is a parameterized ``__device__`` implementation of one kernel
family with a TOML header (``/* kerntune-expert: ... */``): its roles, parameters, constraints and launch.
``match`` reads the user's kernel (its spec: roles, dtypes, sizes; its body: loops, reductions, math calls)
and proposes the experts whose family fits, each with a score and the reason in words. ``bind`` writes a
``__global__`` wrapper with the user's exact parameter list that calls the expert with the user's arguments
mapped to the expert's roles, and returns a ``KernelTemplate`` the tuner verifies like any other: a wrong
match costs a failed verification, never a wrong rewrite.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from agent_core import expr
from agent_core.model import (ArgSpec, CudaFile, Kernel, KernelTemplate, KerntuneError, Param, ParamSpace, TuningSpec,
                    macro_name)

EXPERT_DIR = Path(__file__).resolve().parents[2] / "templates" / "experts"
COMMON = "_common.cuh"
_HEADER = re.compile(r"/\*\s*kerntune-expert:\s*\n(.*?)\*/", re.S)

CTYPE = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "f64": "double", "i8": "int8_t",
         "u8": "uint8_t", "i16": "int16_t", "i32": "int", "u32": "unsigned", "i64": "int64_t", "u64": "uint64_t"}
NBYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i8": 1, "u8": 1, "i16": 2, "i32": 4, "u32": 4, "i64": 8,
          "u64": 8}
FLOATS = ("f32", "f16", "bf16")


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


@dataclass
class Match:
    expert: Expert
    score: float  # 0..1, higher is a surer match
    reason: str  # in words: what in the kernel suggests the family
    kernel: str
    call_args: list[str] = field(default_factory=list)  # C expressions over the user's parameter names
    template_args: list[str] = field(default_factory=list)  # C types for the expert function
    sizes: dict[str, str] = field(default_factory=dict)  # role size name -> expression over spec size names
    consts: dict[str, int] = field(default_factory=dict)  # ESIZE, CSIZE, ...: substituted into constraints
    defines: dict[str, int] = field(default_factory=dict)  # bind-time macros (KT_EXPERT_ACT, ...)
    fixed: dict[str, list[int]] = field(default_factory=dict)  # parameters whose domain the binding narrows


# --------------------------------------------------------------------------------------------- library
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
    m = _HEADER.search(text)
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
    role_sizes = _role_size_names(meta["roles"])
    known = set(params) | role_sizes | {"ESIZE", "CSIZE"}
    exprs = [("constraints", c) for c in meta.get("constraints", [])]
    exprs += [("launch.grid", g) for g in launch.get("grid", [])] + [("launch.block", b) for b in launch.get("block", [])]
    exprs.append(("launch.smem", launch.get("smem", "0")))
    bounds = launch.get("bounds")  # optional: the kernel's __launch_bounds__ where the block depends on sizes
    if bounds is not None:
        exprs.append(("launch.bounds", bounds))
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
    for key, what in (("bounds", "__launch_bounds__"), ("cluster", "__cluster_dims__")):
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
    return Expert(meta["name"], meta["family"], meta["description"], meta["function"], list(meta["roles"]), params,
                  list(meta.get("constraints", [])), ldict, text, path, list(helpers),
                  str(serves) if serves is not None else None)


def _role_size_names(roles: list[str]) -> set[str]:
    out = set()
    for r in roles:
        name, _, rest = r.partition(":")
        if "[" in rest:
            out |= set(re.findall(r"[A-Za-z_]\w*", rest.split("[", 1)[1].split("]")[0]))
        else:
            out.add(name.strip())
    return out


# --------------------------------------------------------------------------------------------- kernel facts
@dataclass
class _Facts:
    """What match() needs to know about one kernel: its spec in numbers and its body in words."""
    kernel: Kernel
    spec: TuningSpec
    body: str
    calls: set[str]
    args: list[ArgSpec]
    fp: dict[str, tuple | None]  # arg name -> its size/value on every size set

    def bufs(self, role: str, dtypes=None) -> list[ArgSpec]:
        return [a for a in self.args if a.role == role and (dtypes is None or a.dtype in dtypes)]

    def ints(self) -> list[ArgSpec]:
        return [a for a in self.args if a.role == "scalar" and a.dtype in ("i32", "i64", "u32", "u64")]

    def floats(self) -> list[ArgSpec]:
        return [a for a in self.args if a.role == "scalar" and a.dtype in ("f32", "f64")]

    def scalar_with(self, values: tuple | None) -> ArgSpec | None:
        for a in self.ints():
            if values is not None and self.fp.get(a.name) == values:
                return a
        return None

    def has(self, *names: str) -> bool:
        return any(n in self.calls for n in names)


def _fingerprint(e: str | None, spec: TuningSpec) -> tuple | None:
    if e is None:
        return None
    try:
        return tuple(expr.evaluate(e, s) for s in spec.sizes)
    except Exception:
        return None


def _div(a: tuple | None, b: tuple | None) -> tuple | None:
    if a is None or b is None or any(y == 0 or x % y for x, y in zip(a, b)):
        return None
    return tuple(x // y for x, y in zip(a, b))


def _facts(cf: CudaFile, kernel: Kernel, spec: TuningSpec) -> _Facts:
    raw = cf.text.encode("utf-8")
    body = raw[kernel.body_span.start:kernel.body_span.end].decode("utf-8", "replace")
    body = re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)
    calls = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", body))
    if "__shared__" in body:
        calls.add("__shared__")
    fp = {a.name: _fingerprint(a.size if a.role != "scalar" else a.value, spec) for a in spec.args}
    return _Facts(kernel, spec, body, calls, list(spec.args), fp)


def _reduction_words(f: _Facts) -> str:
    if f.has("__shfl_xor_sync", "__shfl_down_sync", "__shfl_sync"):
        return "reduces with warp shuffles"
    if "__shared__" in f.calls and f.has("__syncthreads"):
        return "reduces with a shared-memory tree"
    return "reduces over the row"


# --------------------------------------------------------------------------------------------- matchers
def _rows_binding(f: _Facts, rows_fp: tuple, rows_expr: str, m: Match) -> str:
    """The C expression of the row count inside the wrapper: a scalar argument that holds it, or gridDim.x
    when none does (then one row per block: ROWS is fixed to 1)."""
    s = f.scalar_with(rows_fp)
    m.sizes["rows"] = rows_expr
    if s is not None:
        return f"(int)({s.name})"
    m.fixed["ROWS"] = [1]
    return "(int)gridDim.x"


def _hidden_arg(f: _Facts, main: ArgSpec, prefer: tuple | None) -> ArgSpec | None:
    """The int scalar that holds the row length: divides the main buffer; the weight's length when given."""
    if prefer is not None and f.scalar_with(prefer):
        return f.scalar_with(prefer)
    for a in f.ints():
        if _div(f.fp[main.name], f.fp[a.name]) and f.fp[a.name] != f.fp[main.name] and \
                all(v > 1 for v in f.fp[a.name] or ()):
            return a
    return None


def _cast(dtype: str, name: str, const: bool) -> str:
    return f"({'const ' if const else ''}{CTYPE[dtype]}*)({name})"


def _match_rows(f: _Facts, lib: dict[str, Expert]) -> list[Match]:
    """RMSNorm, fused add + RMSNorm, LayerNorm, softmax: one row of `hidden` elements at a time."""
    ins, outs, inouts = f.bufs("in", FLOATS), f.bufs("out", FLOATS), f.bufs("inout", FLOATS)
    if len(f.bufs("in")) != len(ins) or len(f.bufs("out")) != len(outs) or len(f.bufs("inout")) != len(inouts):
        return []
    sized = [a for a in ins + outs + inouts if f.fp[a.name]]
    if not sized:
        return []
    big = max(f.fp[a.name] for a in sized)
    main = [a for a in sized if f.fp[a.name] == big]
    small = [a for a in ins if f.fp[a.name] != big]
    if len({a.dtype for a in main}) != 1:
        return []
    T = main[0].dtype
    x0 = next((a for a in main if a.role in ("in", "inout")), None)
    if x0 is None:
        return []
    hid = _hidden_arg(f, x0, f.fp[small[0].name] if small else None)
    if hid is None:
        return []
    hidden_fp = f.fp[hid.name]
    if any(f.fp[a.name] != hidden_fp for a in small):
        return []
    rows_fp = _div(big, hidden_fp)
    if rows_fp is None:
        return []
    red = _reduction_words(f)
    hname = hid.name
    eps = f.floats()[0].name if f.floats() else None
    sqrt = f.has("rsqrtf", "sqrtf", "rsqrt", "sqrt", "__frsqrt_rn")
    out: list[Match] = []

    def new(expert: str, score: float, reason: str) -> Match | None:
        if expert not in lib:
            return None
        m = Match(lib[expert], score, reason, f.kernel.name)
        m.sizes["hidden"] = hid.value
        return m

    W = small[0].dtype if small else T
    esize = max(NBYTES[T], NBYTES[W])
    in_main = [a for a in main if a.role == "in"]
    out_main = [a for a in main if a.role == "out"]
    io_main = [a for a in main if a.role == "inout"]
    words = f"reads rows of `{hname}` elements, {red}"
    if sqrt and eps and len(in_main) == 1 and len(out_main) == 1 and not io_main and len(small) == 1:
        m = new("rms_norm", 0.9, f"{words}, rsqrtf, one weight of `{hname}` → RMSNorm")
        if m:
            rows = _rows_binding(f, rows_fp, f"({x0.size}) / ({hid.value})", m)
            m.template_args = [CTYPE[T], CTYPE[W]]
            m.call_args = [_cast(T, out_main[0].name, False), _cast(T, in_main[0].name, True),
                           _cast(W, small[0].name, True), f"(float)({eps})", rows, f"(int)({hname})"]
            m.consts = {"ESIZE": esize}
            out.append(m)
    if sqrt and eps and len(io_main) == 2 and not in_main and not out_main and len(small) == 1:
        m = new("fused_add_rms_norm", 0.9, f"{words}, adds two in/out rows (both written), rsqrtf, one weight "
                                           f"→ fused add + RMSNorm")
        if m:
            rows = _rows_binding(f, rows_fp, f"({x0.size}) / ({hid.value})", m)
            x, r = _fused_add_roles(f, io_main)
            m.template_args = [CTYPE[T], CTYPE[W]]
            m.call_args = [_cast(T, x.name, False), _cast(T, r.name, False), _cast(W, small[0].name, True),
                           f"(float)({eps})", rows, f"(int)({hname})"]
            m.consts = {"ESIZE": esize}
            out.append(m)
    if sqrt and eps and len(in_main) == 1 and len(out_main) == 1 and not io_main and len(small) == 2 \
            and small[0].dtype == small[1].dtype:
        m = new("layer_norm", 0.85, f"{words} (mean and variance), rsqrtf, scale and shift of `{hname}` → LayerNorm")
        if m:
            rows = _rows_binding(f, rows_fp, f"({x0.size}) / ({hid.value})", m)
            g, b = small
            if re.search(r"beta|bias|shift", g.name, re.I) and not re.search(r"beta|bias|shift", b.name, re.I):
                g, b = b, g
            m.template_args = [CTYPE[T], CTYPE[W]]
            m.call_args = [_cast(T, out_main[0].name, False), _cast(T, in_main[0].name, True),
                           _cast(W, g.name, True), _cast(W, b.name, True), f"(float)({eps})", rows,
                           f"(int)({hname})"]
            m.consts = {"ESIZE": esize}
            out.append(m)
    if f.has("expf", "__expf", "exp", "exp2f") and f.has("fmaxf", "max", "fmax") and not small and \
            len(in_main) == 1 and len(out_main) == 1 and not io_main:
        m = new("softmax", 0.85, f"{words}, a max and a sum of expf over the row → softmax")
        if m:
            rows = _rows_binding(f, rows_fp, f"({x0.size}) / ({hid.value})", m)
            m.template_args = [CTYPE[T]]
            m.call_args = [_cast(T, out_main[0].name, False), _cast(T, in_main[0].name, True), rows,
                           f"(int)({hname})"]
            m.consts = {"ESIZE": NBYTES[T]}
            out.append(m)
    return out + [t for t in (_cluster_twin(m, lib) for m in out) if t is not None]


def _cluster_twin(m: Match, lib: dict[str, Expert]) -> Match | None:
    """The same binding of the family's cluster expert (``<name>_cluster``: each row split over the blocks of a
    thread-block cluster, for few rows), proposed after the family's own expert; rows read from the grid
    (``gridDim.x``) are the grid over the cluster size there."""
    twin = lib.get(f"{m.expert.name}_cluster")
    if twin is None:
        return None
    t = Match(twin, round(m.score - 0.3, 2), f"{m.reason}; for few rows, each row split over a thread-block cluster",
              m.kernel)
    t.call_args = ["(int)(gridDim.x / KT_CLUSTER)" if a == "(int)gridDim.x" else a for a in m.call_args]
    t.template_args, t.sizes, t.consts, t.defines = list(m.template_args), dict(m.sizes), dict(m.consts), dict(m.defines)
    return t


def _fused_add_roles(f: _Facts, io: list[ArgSpec]) -> tuple[ArgSpec, ArgSpec]:
    """(x, residual): the residual is the one named so, else the one the body writes first."""
    a, b = io
    if re.search(r"resid", a.name, re.I) and not re.search(r"resid", b.name, re.I):
        return b, a
    if re.search(r"resid", b.name, re.I):
        return a, b
    wa = f.body.find(f"{a.name}[")
    return (b, a) if re.search(rf"\b{re.escape(a.name)}\s*\[[^\]]*\]\s*=[^=]", f.body) and wa >= 0 else (a, b)


def _match_gated(f: _Facts, lib: dict[str, Expert]) -> list[Match]:
    ins, outs = f.bufs("in", FLOATS), f.bufs("out", FLOATS)
    if len(ins) != 1 or len(outs) != 1 or f.bufs("inout") or len(f.args) != len(ins) + len(outs) + len(f.ints()):
        return []
    x, o = ins[0], outs[0]
    if x.dtype != o.dtype or not f.fp[x.name] or not f.fp[o.name]:
        return []
    if any(a != 2 * b for a, b in zip(f.fp[x.name], f.fp[o.name])):
        return []
    d = next((a for a in f.ints() if _div(f.fp[o.name], f.fp[a.name]) and f.fp[a.name] != f.fp[o.name]), None)
    if d is None or "act_and_mul" not in lib:
        return []
    if f.has("erff", "erf", "normcdff"):
        act, words = 1, "erff → GELU-and-mul"
    elif f.has("tanhf", "tanh"):
        act, words = 2, "tanhf → GELU(tanh)-and-mul"
    elif f.has("expf", "__expf", "exp"):
        act, words = 0, "x / (1 + expf(-x)) → SiLU-and-mul"
    else:
        return []
    m = Match(lib["act_and_mul"], 0.85, f"reads two halves of a `2 * {d.name}` row and writes one of `{d.name}`, "
              + words, f.kernel.name)
    m.sizes = {"rows": f"({o.size}) / ({d.value})", "d": d.value}
    m.defines = {"KT_EXPERT_ACT": act}
    m.template_args = [CTYPE[x.dtype]]
    m.call_args = [_cast(x.dtype, o.name, False), _cast(x.dtype, x.name, True), f"(int)({d.name})"]
    m.consts = {"ESIZE": NBYTES[x.dtype]}
    return [m]


def _match_merge(f: _Facts, lib: dict[str, Expert]) -> list[Match]:
    vals_in = f.bufs("in", FLOATS)
    if "merge_attn_states" not in lib or not f.has("expf", "__expf", "exp") or not f.has("logf", "log", "__logf"):
        return []
    big = max((f.fp[a.name] for a in vals_in if f.fp[a.name]), default=None)
    if big is None:
        return []
    pv = [a for a in vals_in if f.fp[a.name] == big]
    lse = [a for a in vals_in if a.dtype == "f32" and f.fp[a.name] != big]
    outs = f.bufs("out")
    ov = [a for a in outs if f.fp[a.name] == big]
    olse = [a for a in outs if a.dtype == "f32" and f.fp[a.name] != big]
    if len(pv) != 2 or len(lse) != 2 or len(ov) != 1 or len(olse) > 1 or len(outs) != len(ov) + len(olse):
        return []
    T = pv[0].dtype
    if pv[1].dtype != T or ov[0].dtype != T or f.fp[lse[0].name] != f.fp[lse[1].name]:
        return []
    L = f.fp[lse[0].name]
    if olse and f.fp[olse[0].name] != L:
        return []
    hs = f.scalar_with(_div(big, L))
    if hs is None:
        return []
    rest = [a for a in f.ints() if a is not hs]
    pair = None
    for a, b in itertools.permutations(rest, 2):
        if f.fp[a.name] and f.fp[b.name] and tuple(x * y for x, y in zip(f.fp[a.name], f.fp[b.name])) == L:
            if pair is None or (re.search("tok", a.name, re.I) and not re.search("tok", pair[0].name, re.I)):
                pair = (a, b)
    if pair is None:
        return []
    tok, heads = pair
    token_major = bool(re.search(rf"\*\s*{re.escape(heads.name)}\s*\+", f.body)) and not \
        re.search(rf"\*\s*{re.escape(tok.name)}\s*\+", f.body)
    m = Match(lib["merge_attn_states"], 0.9, f"two value buffers and two fp32 log-sum-exps of "
              f"`{tok.name} * {heads.name}`, weights from expf(lse - max) and the merged lse from logf → merge "
              "attention states", f.kernel.name)
    m.sizes = {"tokens": tok.value, "heads": heads.value, "head_size": hs.value}
    m.defines = {"KT_EXPERT_LSE_TOKEN_MAJOR": int(token_major)}
    m.template_args = [CTYPE[T]]
    m.call_args = [_cast(T, ov[0].name, False), f"(float*)({olse[0].name})" if olse else "(float*)nullptr",
                   _cast(T, pv[0].name, True), f"(const float*)({lse[0].name})", _cast(T, pv[1].name, True),
                   f"(const float*)({lse[1].name})", f"(int)({tok.name})", f"(int)({heads.name})",
                   f"(int)({hs.name})"]
    m.consts = {"ESIZE": NBYTES[T]}
    return [m]


def _named(args: list[ArgSpec], *patterns: str, exclude: str | None = None) -> ArgSpec | None:
    for p in patterns:
        for a in args:
            if re.search(p, a.name, re.I) and not (exclude and re.search(exclude, a.name, re.I)):
                return a
    return None


def _match_rotary(f: _Facts, lib: dict[str, Expert]) -> list[Match]:
    io = f.bufs("inout", FLOATS)
    pos = [a for a in f.bufs("in") if a.dtype in ("i32", "i64")]
    cache = f.bufs("in", FLOATS)
    if "rotary_neox" not in lib or len(io) != 2 or len(pos) != 1 or len(cache) != 1 or f.bufs("out"):
        return []
    if not re.search(rf"\b{re.escape(pos[0].name)}\s*\[", f.body):
        return []
    if re.search(r"\[\s*2\s*\*|\*\s*2\s*\+\s*1\s*\]", f.body):  # interleaved (GPT-J) pairs: another layout
        return []
    ints = f.ints()
    rot = _named(ints, r"rot")
    kv = _named(ints, r"kv")
    hs = _named(ints, r"head_?(size|dim)")
    nh = _named([a for a in ints if a not in (rot, kv, hs)], r"head")
    if None in (rot, kv, hs, nh):
        return []
    q, k = io
    tokens = f.fp[pos[0].name]
    prod = lambda *xs: tuple(__import__("math").prod(v) for v in zip(*xs))  # noqa: E731
    if not tokens or prod(tokens, f.fp[nh.name], f.fp[hs.name]) != f.fp[q.name] or \
            prod(tokens, f.fp[kv.name], f.fp[hs.name]) != f.fp[k.name] or _div(f.fp[cache[0].name], f.fp[rot.name]) is None:
        return []
    T, C = q.dtype, cache[0].dtype
    m = Match(lib["rotary_neox"], 0.85, f"rotates `{q.name}` and `{k.name}` in place by a cos/sin row of "
              f"`{cache[0].name}` chosen by `{pos[0].name}[token]`, pairs half of `{rot.name}` apart → rotary "
              "embedding (NeoX)", f.kernel.name)
    m.sizes = {"tokens": pos[0].size, "num_heads": nh.value, "num_kv_heads": kv.value, "head_size": hs.value,
               "rot_dim": rot.value, "max_position": f"({cache[0].size}) / ({rot.value})"}
    m.template_args = [CTYPE[pos[0].dtype], CTYPE[T], CTYPE[C]]
    m.call_args = [_cast(pos[0].dtype, pos[0].name, True), _cast(T, q.name, False), _cast(T, k.name, False),
                   _cast(C, cache[0].name, True), f"(int)({rot.name})", f"(int)({nh.name})", f"(int)({kv.name})",
                   f"(int)({hs.name})"]
    m.consts = {"ESIZE": NBYTES[T], "CSIZE": NBYTES[C]}
    return [m]


def _match_quant(f: _Facts, lib: dict[str, Expert]) -> list[Match]:
    ins = f.bufs("in", FLOATS)
    q = [a for a in f.bufs("out") if a.dtype in ("i8", "u8")]
    sc = f.bufs("out", ("f32",))
    if "per_token_group_quant" not in lib or len(ins) != 1 or len(q) != 1 or len(sc) != 1 or f.bufs("inout"):
        return []
    x = ins[0]
    if f.fp[x.name] != f.fp[q[0].name] or not f.has("fabsf", "fabs", "abs", "__habs"):
        return []
    gs_fp = _div(f.fp[x.name], f.fp[sc[0].name])
    gs = f.scalar_with(gs_fp)
    if gs is None:
        return []
    fl = f.floats()
    eps = _named(fl, "eps") or (fl[0] if len(fl) == 1 else None)
    qmin, qmax = _named(fl, "min", exclude="eps"), _named(fl, "max", exclude="eps")
    if eps is None:
        return []
    if f.has("__float2int_rn", "rintf", "lrintf", "nearbyintf", "__float2int_rn"):
        rnd = 0
    elif f.has("roundf", "lroundf"):
        rnd = 2
    else:
        rnd = 1
    Q = "int8_t" if q[0].dtype == "i8" else "uint8_t"
    kind = "int8" if Q == "int8_t" else "fp8 e4m3 (bytes)"
    m = Match(lib["per_token_group_quant"], 0.85, f"groups of `{gs.name}` elements: absolute maximum (fabsf, "
              f"max reduction), one fp32 scale per group, {kind} output → per-token-group quantization",
              f.kernel.name)
    m.sizes = {"group_size": gs.value}
    rows = _rows_binding(f, f.fp[sc[0].name], sc[0].size, m)
    m.template_args = [CTYPE[x.dtype], Q]
    qm = f"kt::QuantOut<{Q}>"
    m.call_args = [_cast(x.dtype, x.name, True), f"({Q}*)({q[0].name})", f"(float*)({sc[0].name})",
                   f"(int)({gs.name})", rows, f"(float)({eps.name})",
                   f"(float)({qmin.name})" if qmin else f"{qm}::qmin", f"(float)({qmax.name})" if qmax else f"{qm}::qmax"]
    m.defines = {"KT_EXPERT_ROUND": rnd}
    m.consts = {"ESIZE": NBYTES[x.dtype]}
    return [m]


_MATCHERS = (_match_rows, _match_gated, _match_merge, _match_rotary, _match_quant)


def match(cf: CudaFile, kernel_name: str, spec: TuningSpec, library: list[Expert] | None = None) -> list[Match]:
    """Experts whose family the kernel's spec and body suggest, best first; [] when nothing fits."""
    k = cf.kernel(kernel_name)
    if k.template_params or len(spec.args) != len(k.params):
        return []
    lib = {e.name: e for e in (library if library is not None else load_library())}
    f = _facts(cf, k, spec)
    out: list[Match] = []
    for fn in _MATCHERS:
        out += fn(f, lib)
    return sorted(out, key=lambda m: -m.score)


# --------------------------------------------------------------------------------------------- binding
def _subst(e: str, names: dict[str, str]) -> str:
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda mo: names.get(mo.group(0), mo.group(0)), e)


def _valid_configs(params: dict[str, Param], constraints: list[str], sizes: list[dict]) -> list[dict[str, int]]:
    names = list(params)
    ok = []
    for combo in itertools.product(*(params[n].values for n in names)):
        cfg = dict(zip(names, combo))
        if all(expr.evaluate(c, {**s, **cfg}) for s in sizes for c in constraints):
            ok.append(cfg)
    return ok


def bind(m: Match, cf: CudaFile, spec: TuningSpec) -> KernelTemplate:
    """The expert bound to the user's kernel: a template whose entry has the kernel's exact parameter list."""
    e = m.expert
    k = cf.kernel(m.kernel)
    subs = {n: f"({v})" for n, v in m.sizes.items()}
    subs.update({n: str(v) for n, v in m.consts.items()})
    constraints = [_subst(c, subs) for c in e.constraints]
    params = {n: Param(p.name, [v for v in p.values if v in m.fixed.get(n, p.values)], p.original, p.kind, p.why,
                       closed=p.closed) for n, p in e.params.items()}
    try:
        valid = _valid_configs(params, constraints, spec.sizes)
    except KerntuneError as err:
        raise KerntuneError(f"expert {e.name}: {err.message}", cf.path, k.span.line) from None
    if not valid:
        raise KerntuneError(f"expert {e.name}: no configuration satisfies its constraints on every size set "
                            f"({'; '.join(constraints)})", cf.path, k.span.line)
    default = {n: p.original for n, p in params.items()}
    start = default if default in valid else valid[0]
    for n, p in params.items():
        p.values = sorted({cfg[n] for cfg in valid})
        p.original = start[n]
    launch = {"grid": [_subst(g, subs) for g in e.launch["grid"]],
              "block": [_subst(b, subs) for b in e.launch["block"]],
              "smem": _subst(e.launch["smem"], subs)}
    entry = f"kt_{e.name}_{k.name}"
    text = _render(m, k, cf, entry)
    space = ParamSpace(k.name, params, constraints)
    return KernelTemplate(kernel=k.name, path=cf.path, original_text=cf.text, text=text, space=space, sites=[],
                          origin=f"expert:{e.name}", launch=launch, entry=entry,
                          serves=_subst(e.serves, subs) if e.serves else None)


def _render(m: Match, k: Kernel, cf: CudaFile, entry: str) -> str:
    e = m.expert
    common = (EXPERT_DIR / COMMON).read_text(encoding="utf-8").replace("#pragma once\n", "")
    includes = [ln for ln in cf.text.splitlines() if re.match(r"\s*#\s*include\s*<", ln)]
    pnames = set(e.params)
    macros = {n: macro_name(n) for n in pnames}
    # __launch_bounds__ needs a constant: the header's `bounds` (the most threads a block of this configuration
    # has) where the block depends on sizes, else the block's own extent.
    bounds = (f"({_subst(e.launch['bounds'], macros)})" if "bounds" in e.launch
              else " * ".join(f"({_subst(b, macros)})" for b in e.launch["block"]))
    cluster = f" __cluster_dims__(({_subst(e.launch['cluster'], macros)}), 1, 1)" if "cluster" in e.launch else ""
    sig = ", ".join(f"{p.type} {p.name}" for p in k.params)
    targs = f"<{', '.join(m.template_args)}>" if m.template_args else ""
    lines = [f"// kerntune: expert template `{e.name}` ({e.family}) bound to kernel `{k.name}` of {Path(cf.path).name}",
             f"// why: {m.reason}", *includes]
    lines += [f"#define {n} {v}" for n, v in m.defines.items()]
    lines += [common, _with_helpers(e),
              f'extern "C" __global__ void __launch_bounds__({bounds}){cluster} {entry}({sig}) {{',
              f"  {e.function}{targs}({', '.join(m.call_args)});", "}", ""]
    return "\n".join(lines)


def _with_helpers(e: Expert) -> str:
    """The expert's source with its helper files (``helpers``) inside its first ``namespace kt {``: they are part
    of the expert's own device code (written into a user's file with it, in its namespace)."""
    if not e.helpers:
        return e.source
    text = "".join((Path(e.path).parent / h).read_text(encoding="utf-8").replace("#pragma once\n", "")
                   for h in e.helpers)
    m = re.search(r"^namespace kt \{\n", e.source[_HEADER.search(e.source).end():], re.M)
    at = _HEADER.search(e.source).end() + m.end()
    return e.source[:at] + text + e.source[at:]
