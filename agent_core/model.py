"""Shared data types of the engine.

Every module of ``agent_core`` exchanges these types and nothing else, so that each module can be read,
tested and replaced on its own. Source positions are kept as UTF-8 byte offsets plus 0-based lines and
byte columns (what tree-sitter gives); the language server converts them to UTF-16 positions.
"""

from __future__ import annotations

import enum
import hashlib
import re
import json
from dataclasses import dataclass, field
from typing import Any


# --------------------------------------------------------------------------------------------- errors
class KerntuneError(Exception):
    """A problem the user can act on. ``str()`` gives ``path:line:col: message`` (1-based line/col)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 col: int | None = None, field_name: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line  # 0-based
        self.col = col  # 0-based
        self.field_name = field_name  # spec/space field the error is about, when there is one

    def __str__(self) -> str:
        where = ""
        if self.path:
            where = self.path
            if self.line is not None:
                where += f":{self.line + 1}"
                if self.col is not None:
                    where += f":{self.col + 1}"
            where += ": "
        return where + self.message


class NoGpuError(KerntuneError):
    """No CUDA device (or no pycuda) on this machine."""


# --------------------------------------------------------------------------------------------- source
@dataclass(frozen=True)
class Span:
    start: int  # UTF-8 byte offset, inclusive
    end: int  # UTF-8 byte offset, exclusive
    line: int  # 0-based line of start
    col: int  # 0-based byte column of start
    end_line: int
    end_col: int


@dataclass
class Expr:
    """A piece of source text (an expression, an argument) and where it stands."""
    text: str
    span: Span


@dataclass
class KernelParam:
    name: str
    type: str  # as written, without the name, e.g. "const float* __restrict__"
    is_pointer: bool
    is_const: bool  # for pointers: the pointee is const (an input buffer)
    span: Span


@dataclass
class TemplateParam:
    kind: str  # "type" (typename/class T), "value" (int N, ...) or "template" (template <typename> class Op)
    type: str  # "typename" or the value type, e.g. "int"
    name: str
    default: str | None
    span: Span


@dataclass
class Pragma:
    text: str  # e.g. "unroll 4"
    value: int | None  # the literal count of `#pragma unroll N`, None when absent or not a literal
    span: Span  # the whole `#pragma ...` line
    value_span: Span | None  # the literal N, when there is one
    loop_span: Span | None  # the loop the pragma governs


@dataclass
class Define:
    name: str
    value: str  # the replacement text, stripped
    span: Span  # the whole `#define` line
    value_span: Span | None  # the replacement text


@dataclass
class HostVar:
    """A local variable of the host function that launches a kernel (``int threads = 256;``)."""
    name: str
    type: str
    init: Expr | None
    span: Span


@dataclass
class LaunchSite:
    kernel: str
    span: Span  # the whole call expression `k<<<...>>>(...)`
    template_args: list[Expr]  # `k<4, float><<<...>>>` -> ["4", "float"]
    config: list[Expr]  # grid, block, [smem, [stream]] as written
    args: list[Expr]
    host_function: str | None  # name of the enclosing host function
    host_vars: dict[str, HostVar] = field(default_factory=dict)  # locals defined before the launch
    # A launch written inside a macro's body (`#define LAUNCH(N) k<N><<<g, b>>>(...)`) and read from the macro's
    # expansion at one of its uses: the macro's name and the expansion's text. Then `span` and every Expr's span
    # are the use's (`LAUNCH(4)`), not the launch's: its text is the expansion's, not the file's (see
    # Kernel.macro_launch_sites).
    macro: str | None = None
    expansion: str | None = None


@dataclass
class Kernel:
    name: str
    span: Span  # whole definition, including a `template <...>` prefix
    name_span: Span
    body_span: Span
    params: list[KernelParam]
    template_params: list[TemplateParam]
    launch_bounds: list[Expr]  # arguments of __launch_bounds__(...), empty when absent
    pragmas: list[Pragma]
    launch_sites: list[LaunchSite]
    signature: str  # the declaration text up to the body
    # Launches read through a macro's expansion at the macro's uses (LaunchSite.macro): not in `launch_sites`,
    # whose spans are the launch's own text (they are edited in place); these can only be read.
    macro_launch_sites: list[LaunchSite] = field(default_factory=list)
    # The arguments of a `__launch_bounds__` the head writes through a macro (DSSTNE's `LAUNCH_BOUNDS()` standing for
    # `__launch_bounds__(128, 8)`), its parameters replaced by the use's arguments; empty where there is none.
    macro_launch_bounds: list[str] = field(default_factory=list)


@dataclass
class ParseIssue:
    message: str
    span: Span


@dataclass
class CudaFile:
    path: str
    text: str
    kernels: list[Kernel]
    defines: list[Define]
    errors: list[ParseIssue]  # syntax errors tree-sitter found (location of each ERROR/MISSING node)
    # __global__ functions a macro's use defines (candle's `ROPE_OP(float, rope_f32, ...)` expanding to
    # `extern "C" __global__ void rope_f32(...) {...}`): name -> (the macro, the use's span). Not kernels of the
    # file (their text is the macro's): named so that asking for one says why it is not read.
    macro_kernels: dict[str, tuple[str, Span]] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel:
        by = self.__dict__.get("_kernel_index")  # name -> first index; a file of thousands of kernels asks often
        if by is None or by[0] is not self.kernels or by[1] != len(self.kernels):
            idx: dict[str, int] = {}
            for i, k in enumerate(self.kernels):
                idx.setdefault(k.name, i)
            by = self.__dict__["_kernel_index"] = (self.kernels, len(self.kernels), idx)
        i = by[2].get(name)
        if i is not None and self.kernels[i].name == name:
            return self.kernels[i]
        for k in self.kernels:
            if k.name == name:
                return k
        have = ", ".join(k.name for k in self.kernels) or "none"
        if name in self.macro_kernels:
            macro, at = self.macro_kernels[name]
            raise KerntuneError(f"'{name}' is defined by the macro {macro} (used here): kerntune reads and rewrites a "
                                "kernel whose definition is written out in the file, not one a macro's use expands "
                                f"to. Write '{name}' out to tune it (a one-line __global__ wrapper that calls the "
                                f"macro's device function is enough); kernels in this file: {have}", self.path,
                                at.line, at.col)
        raise KerntuneError(f"no __global__ kernel named '{name}' (kernels in this file: {have})", self.path)


# --------------------------------------------------------------------------------------------- template
@dataclass
class Param:
    name: str  # e.g. "BLOCK"; appears in the template source as the macro KT_<name>
    values: list[int]  # the domain, in order
    original: int  # the value in the user's original code
    kind: str  # "block_size", "grid_size", "unroll", "launch_bounds", "template_arg", "define", "items_per_thread", ...
    why: str = ""  # one line for the user: where it comes from and what it controls
    closed: bool = False  # the domain already lists every value the template supports: the planner never widens it
    template_param: str | None = None  # the kernel's template parameter this is the argument of, if any


@dataclass
class ParamSpace:
    kernel: str
    params: dict[str, Param]
    constraints: list[str]  # expressions (agent_core.expr) over parameter and size names; all must hold
    seeds: list[dict[str, int]] = field(default_factory=list)  # where a model-based search starts, after the
    # original: configurations the template itself proposes (a rewrite's widest vectors at common block sizes)

    def original_config(self) -> dict[str, int]:
        return {n: p.original for n, p in self.params.items()}

    def size(self) -> int:
        total = 1
        for p in self.params.values():
            total *= len(p.values)
        return total


@dataclass
class Site:
    """One place in the original file that a parameter controls."""
    param: str
    span: Span  # in the original file
    original_text: str
    render: str = "{value}"  # str.format template of the replacement; {value} is the parameter's value


def macro_name(param: str) -> str:
    return f"KT_{param}"


# the C type of an integer literal's suffix (a site that keeps it: ``std::min(n / 8, 1024U)`` needs an unsigned)
_SUFFIX_TYPES = {"u": "unsigned", "l": "long", "ul": "unsigned long", "lu": "unsigned long", "ll": "long long",
                 "ull": "unsigned long long", "llu": "unsigned long long"}
_SUFFIXED = re.compile(r"\{value\}([uUlL]{1,3})")


def site_text(render: str, param: str) -> str:
    """A site's text in a template: its ``render`` with the parameter's macro for ``{value}``. A literal's suffix the
    site keeps (render ``{value}U``: ``512U`` where a configuration is applied) is a cast of the macro there
    (``((unsigned)KT_BLOCK)``): a macro cannot take a suffix."""
    m = _SUFFIXED.fullmatch(render)
    if m is not None and m.group(1).lower() in _SUFFIX_TYPES:
        return f"(({_SUFFIX_TYPES[m.group(1).lower()]}){macro_name(param)})"
    return render.format(value=macro_name(param))


def site_expr(render: str, name: str) -> str:
    """A site's render with ``name`` for ``{value}``, in the expression language (a kept suffix dropped)."""
    m = _SUFFIXED.fullmatch(render)
    return name if m is not None else render.format(value=name)


@dataclass
class KernelTemplate:
    """A parameterized version of one kernel's file.

    ``text`` is the whole file with every site replaced by its parameter's macro (``KT_<NAME>``) and a
    header that defines each macro to its original value when it is not given with ``-D``. A variant is
    ``text`` compiled with ``-DKT_<NAME>=<value>`` for every parameter; applying a configuration rewrites
    the macros back to literal values (``agent_core.apply``).
    """
    kernel: str
    path: str  # the user's .cu file
    original_text: str  # the user's file as it was when templatized
    text: str  # the template source
    space: ParamSpace
    sites: list[Site] = field(default_factory=list)
    origin: str = "structural"  # "structural", "expert:<name>", "llm", "user"
    # How a variant is launched, over size and parameter names: {"grid": [...], "block": [...], "smem": "..."}.
    # None: the spec's grid/block/smem (structural templates keep the original launch expressions).
    launch: dict | None = None
    entry: str | None = None  # the __global__ function to run in ``text``; None: ``kernel``
    # A template for one regime of sizes (an expert's ``serves``: e.g. few rows): an expression over the spec's
    # size names that holds on the size sets it is meant for. The planner searches it for the per-shape dispatch
    # where the best so far lags on those size sets, never as the next template for the whole kernel.
    serves: str | None = None

    @property
    def template_hash(self) -> str:
        return template_hash_of(self.text)

    @property
    def original_hash(self) -> str:
        return sha256_text(self.original_text)


# --------------------------------------------------------------------------------------------- spec
@dataclass
class ArgSpec:
    name: str
    role: str  # "in", "out", "inout", "scalar"
    dtype: str  # f32 f16 bf16 f64 i8 u8 i16 i32 u32 i64 u64
    size: str | None = None  # buffers: element count expression over size names
    value: str | None = None  # scalars: value expression over size names
    init: str = "normal"  # buffers: "normal", "uniform(lo, hi)", "randint(lo, hi)", "zeros", "ones"


@dataclass
class TuningSpec:
    kernel: str
    args: list[ArgSpec]  # in the kernel's parameter order
    sizes: list[dict[str, int]]  # at least two problem-size sets
    grid: list[str]  # 1..3 expressions over size and parameter names
    block: list[str]  # 1..3 expressions
    smem: str = "0"  # dynamic shared memory bytes
    bytes_moved: str | None = None  # expression; default: inputs read once + outputs written once
    flops: str | None = None
    rtol: float | None = None  # default by dtype
    atol: float | None = None
    template_args: list[str] | None = None  # C template arguments of the instantiation to tune (templated kernels)
    origin: str = ""  # "comment:<line>" or the sidecar path
    span: Span | None = None  # the comment block, when the spec is one
    path: str = ""  # the file the spec was read from (the .cu file or the sidecar), for error locations
    lines: dict[str, int] = field(default_factory=dict)  # 0-based line of each field ("args[2]", "grid", ...)
    # a templated kernel's instantiation read from the file where the spec names none (its launches, else its buffers'
    # types: source.instantiation.spec_instantiation), set when the kernel is prepared for tuning; not the user's
    inferred_template_args: list[str] | None = None

    @property
    def spec_hash(self) -> str:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("origin", "span", "path", "lines", "inferred_template_args")}
        if d.get("template_args") is None:
            del d["template_args"]  # a spec without it keeps the hash it was recorded under
        d["args"] = [a.__dict__ for a in self.args]
        return sha256_text(json.dumps(d, sort_keys=True))


# --------------------------------------------------------------------------------------------- device
@dataclass
class DeviceInfo:
    name: str
    arch: str  # "sm_90"
    sm_count: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    smem_per_sm: int = 233472  # bytes (228 KB)
    smem_per_block: int = 49152  # without opt-in (static limit)
    smem_per_block_optin: int = 232448  # 227 KB
    reserved_smem_per_block: int = 1024
    l2_bytes: int = 52428800
    warp_size: int = 32
    copy_bandwidth_gbps: float | None = None  # measured device-to-device copy, bytes read + written

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "DeviceInfo":
        return DeviceInfo(**json.loads(text))


@dataclass
class Resources:
    """What ptxas reports for one compiled kernel, plus the occupancy it implies at a launch."""
    registers: int
    static_smem: int  # bytes
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    occupancy: float | None = None  # theoretical, 0..1, at the variant's block size
    blocks_per_sm: int | None = None


@dataclass
class Compiled:
    cubin_path: str
    symbol: str  # mangled entry name to load
    resources: Resources
    source_hash: str
    log: str = ""


# --------------------------------------------------------------------------------------------- results
class Status(str, enum.Enum):
    OK = "ok"
    PRUNED = "pruned"  # rejected before running: constraint or hardware limit (reason in error)
    COMPILE_ERROR = "compile_error"
    VERIFY_FAILED = "verify_failed"
    CRASHED = "crashed"  # illegal address, worker died
    TIMEOUT = "timeout"  # watchdog
    LAUNCH_ERROR = "launch_error"  # launch refused (too many resources, bad config)


@dataclass
class Timing:
    median_us: float
    min_us: float
    max_us: float
    iqr_us: float  # spread: interquartile range
    reps: int
    batch: int  # launches per timed repetition
    l2: str  # "flushed" or "warm"


@dataclass
class Evaluation:
    params: dict[str, int]
    status: Status
    timings: list[Timing | None] = field(default_factory=list)  # one per size set
    gbps: list[float | None] = field(default_factory=list)  # achieved bandwidth per size set
    resources: Resources | None = None
    error: str = ""
    objective: float | None = None  # geometric mean over size sets of time / original time (lower is better)
    from_store: bool = False  # answered from a store without measuring (a replay answers from its recording)
    reused: bool = False  # found in this workspace's store: an earlier session measured it (resume)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


def params_key(params: dict[str, int]) -> str:
    return json.dumps({k: params[k] for k in sorted(params)}, separators=(",", ":"))


def params_words(params: dict | None) -> str:
    """Parameter values for people: ``THREADS=256, VEC=8``; ``-`` for none."""
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items()) or "-"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_LINE_DIRECTIVE_PATH = re.compile(r'^(\s*#\s*line\s+\d+)\s+"[^"\n]*"', re.MULTILINE)


def template_hash_of(text: str) -> str:
    """A template's identity in the store: its text without the file names of its ``#line`` directives, so
    that a file moved or checked out elsewhere keeps its measurements (the code compiled is the same)."""
    return sha256_text(_LINE_DIRECTIVE_PATH.sub(r"\1", text))


def to_plain(obj: Any) -> Any:
    """Dataclasses/enums -> JSON-able structures."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_plain(v) for k, v in obj.__dict__.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


@dataclass(frozen=True)
class Launch:
    """One kernel launch: grid and block extents, dynamic shared memory in bytes."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int = 0

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]
