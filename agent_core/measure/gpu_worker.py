"""The GPU worker: runs in a child process that owns the CUDA context.

``serve`` is the child's request loop (any handler object; the parent side is ``gpu_backend``).
``GpuWorker`` is the handler that measures: it fills inputs on the GPU (counter-based hash RNG), runs the
reference, poisons outputs, verifies a variant against the reference on the GPU, and times kernels with
CUDA events (L2 flush, batches of back-to-back launches queued behind a spin kernel, median of many
repetitions). pycuda is imported only inside ``GpuWorker``, so this module imports anywhere.

Run as ``python -m agent_core.measure.gpu_worker profile REQUEST.pkl``: launch a variant once (for ``ncu``).
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from agent_core.source import spec as spec_mod
from agent_core.measure.backend import Launch, Problem, Variant
from agent_core.model import ArgSpec, DeviceInfo, Evaluation, KerntuneError, Status, Timing

KERNELS_CU = Path(__file__).with_name("gpu_kernels.cu")

# scalar argument -> struct format char of the kernel parameter (f16/bf16 go as their raw 16 bits)
SCALAR_FORMAT = {"f32": "f", "f64": "d", "f16": "H", "bf16": "H", "i8": "b", "u8": "B", "i16": "h", "u16": "H",
                 "i32": "i", "u32": "I", "i64": "q", "u64": "Q"}
POINTER_FORMAT = np.dtype(np.uintp).char
DIST = {"normal": 0, "uniform": 1, "randint": 2, "ones": 3, "zeros": 4}

BATCH_SINGLE_US = 50.0  # a reference at least this long is timed one launch per repetition
BATCH_TARGET_US = 200.0  # else a batch of back-to-back launches makes a repetition at least this long
BATCH_MAX = 512
FLUSH_MIN_BYTES = 256 << 20
TIME_BUDGET_S = 1.0  # timing of one kernel on one size set
MIN_REPS, MAX_REPS, WARMUP_REPS = 20, 100, 3
CONFIRM_MIN_REPS = 10  # per interleaved round of a confirmation (5 rounds: at least 50 repetitions a side)
MEDIAN_PRECISION = 0.002  # stop repeating once the median's standard error is below this fraction of it
SLOW_FACTOR = 4.0  # a variant this many times slower than the original after the warm-up is timed no further
RACE_FACTOR = 1.25  # nor one this much slower than the fastest timed on that size set so far: it cannot win there
MAX_COPIES = 256  # buffer copies a batch rotates through, so that its launches find a cold L2


# --------------------------------------------------------------------------------------------- protocol
def serve(conn, factory: Callable, args: tuple = ()) -> None:
    """The child's loop: build ``factory(*args, beat=...)``, then answer ``(op, args, kwargs)`` requests.

    Replies: ``("ready", None)`` once built, ``("beat",)`` while working (the parent's watchdog counts from
    the last one), ``("part", obj, phases)`` for each finished piece of a batch request (the handler's ``send_part``,
    when it has that attribute; progress too), ``("ok", result, exit_after, phases)`` or ``("error", message, exit_after, phases)``, where
    ``phases`` is the handler's ``phases`` dict after the request (seconds it spent per phase: verification,
    timing, ...; the handler's attribute is emptied before each request; {} when it has none);
    ``("init_error", message)`` when the handler cannot be built. The process exits after a reply with ``exit_after`` (the
    handler set ``exit_requested``: its CUDA context is poisoned) and on ``("stop", (), {})``.
    """
    os.dup2(2, 1)  # the parent's stdout may be a protocol stream (the language server): never write to it
    sys.stdout = sys.stderr

    def beat() -> None:
        conn.send(("beat",))

    def part(obj) -> None:  # one finished piece of a batch request (and the phases so far); progress too
        conn.send(("part", obj, _phases(handler)))

    try:
        handler = factory(*args, beat=beat)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        conn.send(("init_error", describe(e)))
        os._exit(2)
    if hasattr(handler, "send_part"):
        handler.send_part = part
    conn.send(("ready", None))
    while True:
        try:
            op, a, kw = conn.recv()
        except (EOFError, OSError):
            break
        if op == "stop":
            break
        if isinstance(getattr(handler, "phases", None), dict):
            handler.phases = {}
        try:
            if op.startswith("_") or not callable(getattr(handler, op, None)):
                raise KerntuneError(f"the worker has no operation '{op}'")
            result = getattr(handler, op)(*a, **kw)
            reply = ("ok", result, bool(getattr(handler, "exit_requested", False)), _phases(handler))
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            reply = ("error", describe(e), bool(getattr(handler, "exit_requested", False)), _phases(handler))
        conn.send(reply)
        if reply[2]:
            sys.stderr.flush()
            os._exit(3)  # no clean-up: the context may be poisoned
    close = getattr(handler, "close", None)
    if close:
        close()
    conn.close()


def _phases(handler) -> dict:
    p = getattr(handler, "phases", None)
    return dict(p) if isinstance(p, dict) else {}


def describe(e: BaseException) -> str:
    """An exception as one line for the user (pycuda's messages already name the failing call)."""
    text = str(e).strip()
    if isinstance(e, KerntuneError) or " failed: " in text:
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# --------------------------------------------------------------------------------------------- helper kernels
def helper_cubin(arch: str, cache_dir: Path | None = None) -> Path:
    """``gpu_kernels.cu`` compiled with nvcc for ``arch`` (cached by content hash)."""
    src = KERNELS_CU.read_bytes()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise KerntuneError("nvcc is not on PATH: the GPU worker compiles its helper kernels with it "
                            "(install the CUDA toolkit or add its bin/ to PATH)")
    key = hashlib.sha256(src + arch.encode()).hexdigest()[:16]
    if cache_dir is None:
        from agent_core.workspace import cache_dir as default_cache
        cache_dir = default_cache()
    out = Path(cache_dir) / f"kt_helpers_{arch}_{key}.cubin"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    r = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-O3", "-o", str(tmp), str(KERNELS_CU)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise KerntuneError(f"cannot compile the GPU worker's helper kernels for {arch}: {r.stderr.strip()}",
                            str(KERNELS_CU))
    os.replace(tmp, out)
    return out


def derive_seed(*parts: int) -> int:
    """A 64-bit seed from integers (problem seed, evaluation counter, size set, argument)."""
    h = hashlib.sha256(",".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little")


def scalar_arg(dtype: str, value: int | float) -> int | float:
    """A scalar kernel argument as packed: f16/bf16 as their raw bits."""
    if dtype == "f16":
        return int(np.array(value, dtype=np.float16).view(np.uint16))
    if dtype == "bf16":
        b = int(np.array(value, dtype=np.float32).view(np.uint32))
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even
    return value


def element_value(dtype: str, raw: bytes) -> float | int:
    """One element's value from its bytes."""
    if dtype == "bf16":
        return float((np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)[0])
    if dtype == "f16":
        return float(np.frombuffer(raw, np.float16)[0])
    v = np.frombuffer(raw, spec_mod.dtype_info(dtype)[0])[0]
    return float(v) if dtype in spec_mod.FLOAT_DTYPES else int(v)


def fmt_value(v: float | int) -> str:
    return str(v) if isinstance(v, int) else f"{v:.6g}"


def summarize(samples_us: list[float], batch: int, l2: str) -> Timing:
    a = np.asarray(samples_us, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return Timing(median_us=float(med), min_us=float(a.min()), max_us=float(a.max()), iqr_us=float(q3 - q1),
                  reps=len(a), batch=batch, l2=l2)


def median_is_precise(samples_us: list[float], precision: float = MEDIAN_PRECISION) -> bool:
    """Whether the median of ``samples_us`` is known to ``precision`` (a fraction of it): its standard error,
    0.93 IQR / sqrt(n) (the normal approximation of the median's spread), below ``precision`` x median."""
    q1, med, q3 = np.percentile(np.asarray(samples_us, dtype=np.float64), [25, 50, 75])
    return med > 0 and 0.93 * (q3 - q1) / math.sqrt(len(samples_us)) <= precision * med


def race_limit(ss: "_SizeSet") -> float | None:
    """The median per launch above which a variant's warm-up ends its timing on ``ss``: ``SLOW_FACTOR`` times the
    original's (a variant that much slower cannot win), or ``RACE_FACTOR`` times the fastest timed there so far
    (nor can one that much slower than it), whichever is lower. Only the search's evaluations race; the original,
    the confirmations and ``time`` are timed in full."""
    limits = [f * us for f, us in ((SLOW_FACTOR, ss.reference_us), (RACE_FACTOR, ss.best_us)) if us]
    return min(limits) if limits else None


def choose_batch(reference_us: float) -> int:
    """Launches per timed repetition for a kernel that takes ``reference_us`` on its own."""
    if reference_us >= BATCH_SINGLE_US:
        return 1
    return max(1, min(BATCH_MAX, math.ceil(BATCH_TARGET_US / max(reference_us, 0.5))))


# --------------------------------------------------------------------------------------------- the GPU handler
@dataclass
class _Buf:
    arg: ArgSpec
    n: int
    nbytes: int
    dev: Any  # DeviceAllocation: what the kernel gets
    ref: Any = None  # out/inout: the reference's output
    pristine: Any = None  # inout: the input, to restore before each run
    arg_index: int = 0  # position among the kernel's arguments


@dataclass
class _SizeSet:
    index: int
    sizes: dict[str, int]
    bufs: list[_Buf]
    args: list  # kernel arguments in order (pointers and packed scalars)
    working_set: int
    batch: int = 1
    flush: bool = True
    l2: str = "flushed"
    names: dict[str, _Buf] = field(default_factory=dict)
    copies: list[list[Any]] = field(default_factory=list)  # extra copies of every buffer, for batches
    reference_us: float | None = None  # the original's median per launch here, once known
    best_us: float | None = None  # the fastest median per launch timed here so far (the original's included)
    arg_sets: list[list] = field(default_factory=list)  # kernel arguments of the original and each copy

    def where(self) -> str:
        return f"size set {self.index + 1}: " + ", ".join(f"{k}={v}" for k, v in self.sizes.items())


class CudaFault(Exception):
    """A CUDA error that may have poisoned the context."""


class GpuWorker:
    """The measuring handler of a worker process (see the module docstring). One CUDA context."""

    def __init__(self, device_index: int = 0, beat: Callable[[], None] | None = None):
        import pycuda.driver as cuda
        self.cuda = cuda
        self.beat = beat or (lambda: None)
        self.exit_requested = False
        cuda.init()
        self.dev = cuda.Device(device_index)
        self.ctx = self.dev.make_context()
        self.info = self.device_info()
        self.helpers = cuda.module_from_file(str(helper_cubin(self.info.arch)))
        self.fill_fn, self.compare_fn = {}, {}
        for dt in SCALAR_FORMAT:
            self.fill_fn[dt] = self.helpers.get_function(f"kt_fill_{dt}").prepare(POINTER_FORMAT + "QQidd")
            self.compare_fn[dt] = self.helpers.get_function(f"kt_compare_{dt}").prepare(
                POINTER_FORMAT * 2 + "Qddi" + POINTER_FORMAT)
        self.spin_fn = self.helpers.get_function("kt_spin").prepare("Q")
        self.stream = cuda.Stream()
        self.ev_start, self.ev_end = cuda.Event(), cuda.Event()
        self.flush_bytes = max(FLUSH_MIN_BYTES, 4 * self.info.l2_bytes)
        self.flush_buf = cuda.mem_alloc(self.flush_bytes)
        self.res_buf = cuda.mem_alloc(3 * 8)
        self.sets: list[_SizeSet] = []
        self.problem: Problem | None = None
        self.reference = None  # (module, function)
        self.variant_module = None
        self.launch_ns = 5_000.0  # host cost of one launch, learned while timing (a running mean, see _time_reps)
        self.phases: dict[str, float] = {}  # seconds per phase of the current request (serve empties it)
        self._timing_phase = "time"  # what _time's seconds count as: "time", "original" or "confirm"
        self.send_part: Callable[[Any], None] = lambda obj: None  # serve sets it: one result of a batch

    def _spent(self, name: str, t0: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    # ------------------------------------------------------------------ device
    def device_info(self) -> DeviceInfo:
        from agent_core.measure.hardware import device_info_from_pycuda
        return device_info_from_pycuda(self.dev)

    def copy_bandwidth(self, nbytes: int = 1 << 30, reps: int = 10) -> float:
        """GB/s of a device-to-device copy of ``nbytes`` (bytes read + written), median of ``reps``."""
        cuda = self.cuda
        t0 = time.perf_counter()
        src, dst = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
        try:
            cuda.memset_d32_async(src, 0x3F800000, nbytes // 4, self.stream)
            for _ in range(2):
                cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)
            self.stream.synchronize()
            ms = []
            for _ in range(reps):
                self.ev_start.record(self.stream)
                cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)
                self.ev_end.record(self.stream)
                self.ev_end.synchronize()
                ms.append(self.ev_start.time_till(self.ev_end))
                self.beat()
            return 2 * nbytes / (float(np.median(ms)) * 1e-3) / 1e9
        finally:
            src.free()
            dst.free()
            self._spent("copy_bandwidth", t0)

    # ------------------------------------------------------------------ setup
    def start(self, problem: Problem, batches: list[int] | None = None,
              time_original: bool = True, reference_us: list[float] | None = None
              ) -> tuple[list[Timing] | None, list[int]]:
        """Allocate every size set, fill inputs, run the reference; choose each set's batch (unless
        given) and time the original (``reference_us``: its medians from earlier, where it is not timed now).
        Returns (original timings or None, batches)."""
        t0, before = time.perf_counter(), self.phases.get("original", 0.0)
        self._timing_phase = "original"
        try:
            return self._start(problem, batches, time_original, reference_us)
        finally:
            self._timing_phase = "time"
            self.phases["original"] = before + time.perf_counter() - t0

    def _start(self, problem: Problem, batches: list[int] | None, time_original: bool,
               reference_us: list[float] | None = None) -> tuple[list[Timing] | None, list[int]]:
        self._free()
        self.problem = problem
        spec = problem.spec
        if len(problem.reference_launches) != len(spec.sizes):
            raise KerntuneError(f"{len(problem.reference_launches)} reference launches for "
                                f"{len(spec.sizes)} size sets")
        self.reference = self._load(problem.reference.cubin_path, problem.reference.symbol,
                                    problem.reference_launches, "the original kernel")
        for i, sizes in enumerate(spec.sizes):
            ss = self._alloc(i, sizes)
            self.sets.append(ss)
        timings: list[Timing] | None = [] if time_original else None
        out_batches = []
        for ss in self.sets:
            launch = problem.reference_launches[ss.index]
            self._fill(ss, 0)
            self._run_reference(ss)
            if batches is not None:
                ss.batch = batches[ss.index]
            else:
                probe = self._time(self.reference[1], ss, launch, 1, reps=10)
                ss.batch = choose_batch(float(np.median(probe)))
            self._make_copies(ss)
            out_batches.append(ss.batch)
            if timings is not None:
                timings.append(summarize(self._time(self.reference[1], ss, launch, ss.batch), ss.batch, ss.l2))
                ss.reference_us = timings[-1].median_us
            elif reference_us is not None and ss.index < len(reference_us):
                ss.reference_us = reference_us[ss.index]
            ss.best_us = ss.reference_us
            self.beat()
        return timings, out_batches

    def _alloc(self, index: int, sizes: dict[str, int]) -> _SizeSet:
        cuda = self.cuda
        spec = self.problem.spec
        try:
            elems = spec_mod.buffer_elems(spec, sizes)
            scalars = spec_mod.scalar_values(spec, sizes)
        except KerntuneError as e:
            raise KerntuneError(f"size set {index + 1}: {e.message}", spec.path, field_name="sizes") from None
        total = sum((3 if a.role == "inout" else 2 if a.role == "out" else 1) * elems[a.name] *
                    spec_mod.dtype_info(a.dtype)[1] for a in spec.args if a.role != "scalar")
        free, _ = cuda.mem_get_info()
        if total > free:
            raise KerntuneError(f"size set {index + 1} needs {total / 2**30:.1f} GiB of GPU memory for its buffers "
                                f"and reference copies; {free / 2**30:.1f} GiB are free. Use smaller sizes.",
                                spec.path, field_name="sizes")
        bufs, args, fmt, ws = [], [], "", 0
        for a in spec.args:
            if a.role == "scalar":
                fmt += SCALAR_FORMAT[a.dtype]
                args.append(scalar_arg(a.dtype, scalars[a.name]))
                continue
            n = elems[a.name]
            if n < 0:
                raise KerntuneError(f"size set {index + 1}: buffer {a.name} has {n} elements", spec.path,
                                    field_name="args")
            nbytes = n * spec_mod.dtype_info(a.dtype)[1]
            alloc = max(nbytes, 256)
            b = _Buf(a, n, nbytes, cuda.mem_alloc(alloc), arg_index=len(args))
            if a.role in ("out", "inout"):
                b.ref = cuda.mem_alloc(alloc)
            if a.role == "inout":
                b.pristine = cuda.mem_alloc(alloc)
            bufs.append(b)
            args.append(int(b.dev))
            fmt += POINTER_FORMAT
            ws += nbytes
        try:
            import pycuda._pvt_struct as pvt
            pvt.pack(fmt, *args)
        except Exception as e:  # noqa: BLE001
            raise KerntuneError(f"size set {index + 1}: a scalar argument does not fit its type ({e})",
                                spec.path, field_name="args") from None
        ss = _SizeSet(index, dict(sizes), bufs, args, ws, names={b.arg.name: b for b in bufs}, arg_sets=[args])
        ss.flush = ws <= 3 * self.info.l2_bytes  # larger working sets cannot be served from L2 anyway
        ss.l2 = "flushed" if ss.flush else "warm"
        return ss

    def _free(self) -> None:
        for ss in self.sets:
            for b in ss.bufs:
                for m in (b.dev, b.ref, b.pristine):
                    if m is not None:
                        m.free()
            for copy in ss.copies:
                for m in copy:
                    m.free()
        self.sets = []

    def _make_copies(self, ss: _SizeSet) -> None:
        """For a batch over a working set that fits L2: copies of every buffer, so that the batch's
        launches rotate through more memory than L2 holds and each one starts cold. Sets ``ss.l2``."""
        l2 = self.info.l2_bytes
        if not ss.flush:
            ss.l2 = "warm"  # larger than 3x L2: no flush, and L2 cannot hold it anyway
            return
        k = 1
        if ss.batch > 1 and ss.working_set <= 2 * l2:
            free, _ = self.cuda.mem_get_info()
            k = min(ss.batch, MAX_COPIES, math.ceil(3 * l2 / max(ss.working_set, 1)),
                    max(1, int(free // 2 // max(ss.working_set, 1))))
            for _ in range(k - 1):
                copy = [self.cuda.mem_alloc(max(b.nbytes, 256)) for b in ss.bufs]
                args = list(ss.args)
                for b, m in zip(ss.bufs, copy):
                    args[b.arg_index] = int(m)
                ss.copies.append(copy)
                ss.arg_sets.append(args)
        ss.l2 = "flushed" if ss.batch == 1 or ss.working_set > l2 or k * ss.working_set >= 2 * l2 else "warm"

    def _load(self, cubin: str, symbol: str, launches: list[Launch], what: str):
        cuda = self.cuda
        try:
            mod = cuda.module_from_file(str(cubin))
            fn = mod.get_function(symbol)
        except cuda.Error as e:
            raise KerntuneError(f"cannot load {what} ({symbol} from {cubin}): {e}") from None
        fn.prepare(self._arg_format())
        smem = max((ln.smem for ln in launches), default=0)
        if smem > self.info.smem_per_block:
            fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        return mod, fn

    def _load_variant(self, variant: Variant):
        """The variant's function; its module stays loaded until the next variant's replaces it (unloading
        it in a context that the variant has just poisoned would only add noise)."""
        self.variant_module = None
        self.variant_module, fn = self._load(variant.compiled.cubin_path, variant.compiled.symbol,
                                             variant.launches, "the variant")
        return fn

    def _arg_format(self) -> str:
        return "".join(SCALAR_FORMAT[a.dtype] if a.role == "scalar" else POINTER_FORMAT
                       for a in self.problem.spec.args)

    # ------------------------------------------------------------------ data
    def _fill(self, ss: _SizeSet, counter: int, scale: float = 1.0) -> None:
        """Fresh inputs for ``ss`` (seeded by the problem's seed and ``counter``); ``scale`` multiplies the random
        floating-point inputs (normal or uniform; not ones, zeros or integer draws)."""
        cuda = self.cuda
        for k, b in enumerate(ss.bufs):
            if b.arg.role == "out":
                continue
            target = b.pristine if b.arg.role == "inout" else b.dev
            kind, lo, hi = spec_mod.init_params(b.arg.init, ss.sizes)  # bounds may name sizes
            if scale != 1.0 and b.arg.dtype in spec_mod.FLOAT_DTYPES:
                if kind == "uniform":
                    lo, hi = lo * scale, hi * scale
                elif kind == "normal":
                    hi = scale  # the fill kernel's normal draw is multiplied by a non-zero hi
            if b.n:
                grid = (max(1, min(-(-b.n // 256), self.info.sm_count * 16)), 1, 1)
                self.fill_fn[b.arg.dtype].prepared_async_call(
                    grid, (256, 1, 1), self.stream, int(target), b.n,
                    derive_seed(self.problem.seed, counter, ss.index, k), DIST[kind],
                    float(lo or 0.0), float(hi or 0.0))
            if b.arg.role == "inout":
                cuda.memcpy_dtod_async(b.dev, b.pristine, b.nbytes, self.stream)

    def _poison(self, ss: _SizeSet) -> None:
        """NaN (floats) or 0xFF bytes (integers) into every out buffer; inout buffers get their input back."""
        cuda, s = self.cuda, self.stream
        for b in ss.bufs:
            if b.arg.role == "inout":
                cuda.memcpy_dtod_async(b.dev, b.pristine, b.nbytes, s)
            elif b.arg.role == "out" and b.n:
                dt = b.arg.dtype
                if dt == "f32":
                    cuda.memset_d32_async(b.dev, 0x7FC00000, b.n, s)
                elif dt == "f64":
                    cuda.memset_d32_async(b.dev, 0x7FF80000, 2 * b.n, s)  # 0x7FF800007FF80000: a NaN
                elif dt == "f16":
                    cuda.memset_d16_async(b.dev, 0x7E00, b.n, s)
                elif dt == "bf16":
                    cuda.memset_d16_async(b.dev, 0x7FC0, b.n, s)
                else:
                    cuda.memset_d8_async(b.dev, 0xFF, b.nbytes, s)

    def _launch(self, fn, ss: _SizeSet, launch: Launch) -> None:
        fn.prepared_async_call(launch.grid, launch.block, self.stream, *ss.args, shared_size=launch.smem)

    def _sync(self) -> None:
        try:
            self.stream.synchronize()
        except self.cuda.Error as e:
            self.exit_requested = True
            raise CudaFault(str(e)) from None

    def _run_reference(self, ss: _SizeSet) -> None:
        """Run the original on the current inputs and keep its outputs."""
        self._poison(ss)
        try:
            self._launch(self.reference[1], ss, self.problem.reference_launches[ss.index])
            self._sync()
        except (CudaFault, self.cuda.Error) as e:
            self.exit_requested = self.exit_requested or not self._healthy()
            raise KerntuneError(f"the original kernel failed on {ss.where()}: {e}") from None
        for b in ss.bufs:
            if b.ref is not None:
                self.cuda.memcpy_dtod_async(b.ref, b.dev, b.nbytes, self.stream)

    def _healthy(self) -> bool:
        try:
            self.cuda.Context.synchronize()
            return True
        except self.cuda.Error:
            return False

    def _compare(self, ss: _SizeSet, scale: float = 1.0) -> str | None:
        """None when every out/inout buffer matches the reference, else what differs (the first buffer); the
        absolute tolerance is multiplied by ``scale`` (inputs were scaled by it)."""
        cuda, s = self.cuda, self.stream
        for b in ss.bufs:
            if b.ref is None or not b.n:
                continue
            rtol, atol = spec_mod.tolerances(self.problem.spec, b.arg.dtype)
            atol *= scale
            exact = int(b.arg.dtype not in spec_mod.FLOAT_DTYPES and rtol == 0 and atol == 0)
            cuda.memcpy_htod_async(self.res_buf, np.array([0, 0, 2**64 - 1], np.uint64), s)
            grid = (max(1, min(-(-b.n // 256), self.info.sm_count * 8)), 1, 1)
            self.compare_fn[b.arg.dtype].prepared_async_call(grid, (256, 1, 1), s, int(b.dev), int(b.ref), b.n,
                                                             float(rtol), float(atol), exact, int(self.res_buf))
            res = np.zeros(3, np.uint64)
            cuda.memcpy_dtoh_async(res, self.res_buf, s)
            self._sync()
            count, first = int(res[0]), int(res[2])
            if not count:
                continue
            maxerr = float(res[1:2].view(np.float64)[0])
            isz = spec_mod.dtype_info(b.arg.dtype)[1]
            got, want = np.empty(isz, np.uint8), np.empty(isz, np.uint8)
            cuda.memcpy_dtoh(got, int(b.dev) + first * isz)
            cuda.memcpy_dtoh(want, int(b.ref) + first * isz)
            g, w = element_value(b.arg.dtype, got.tobytes()), element_value(b.arg.dtype, want.tobytes())
            hint = ""
            if (isinstance(g, float) and math.isnan(g)) or got.tobytes() == b"\xff" * isz:
                hint = " (the poison value: never written?)"
            tol = "exact" if exact else f"rtol {rtol:g}, atol {atol:g}"
            return (f"{b.arg.name}[{first}] = {fmt_value(g)} vs {fmt_value(w)}{hint} ({ss.where()}); "
                    f"{count} of {b.n} elements differ (max abs error {maxerr:.3g}, {tol})")
        return None

    # ------------------------------------------------------------------ timing
    def _time(self, fn, ss: _SizeSet, launch: Launch, batch: int, reps: int | None = None,
              min_reps: int = MIN_REPS, slow_us: float | None = None) -> list[float]:
        """Per-launch times (us) of ``batch`` back-to-back launches per repetition, queued behind a spin
        kernel so host launch latency is not timed; L2 flushed and inout buffers restored before each."""
        t_start = time.perf_counter()
        try:
            return self._time_reps(fn, ss, launch, batch, reps, min_reps, slow_us)
        finally:
            self._spent(self._timing_phase, t_start)

    def _time_reps(self, fn, ss: _SizeSet, launch: Launch, batch: int, reps: int | None,
                   min_reps: int = MIN_REPS, slow_us: float | None = None) -> list[float]:
        """``reps`` repetitions, or (None) as many as the median needs: at least ``min_reps``, then until its
        standard error (0.93 IQR / sqrt(n), the normal approximation) is below ``MEDIAN_PRECISION`` of it, at
        most ``MAX_REPS`` and about ``TIME_BUDGET_S`` seconds. A kernel whose warm-up median is above ``slow_us``
        gets no more than its warm-up: it cannot win, and a pathological one (seconds per launch) would hold the
        GPU for minutes."""
        cuda, s = self.cuda, self.stream
        for copy in ss.copies:  # the copies get the current inputs
            for b, m in zip(ss.bufs, copy):
                if b.arg.role != "out":
                    cuda.memcpy_dtod_async(m, b.pristine if b.pristine is not None else b.dev, b.nbytes, s)
        self._sync()
        arg_sets = ss.arg_sets[:batch]

        def one() -> float:
            # The spin kernel holds the stream while the host queues the timed launches, so it must outlast
            # their queueing: twice the learned per-launch host cost. That cost is a running mean (a host
            # hiccup raises the next spin, then the spin shrinks back; it used to ratchet up for good, each
            # repetition paying the longest hiccup ever seen); a repetition whose queueing outlasted most of the
            # spin is dropped and redone with a longer one.
            while True:
                spin_ns = int(20_000 + 2 * (batch + 2) * self.launch_ns)
                for b in ss.bufs:
                    if b.pristine is not None:
                        cuda.memcpy_dtod_async(b.dev, b.pristine, b.nbytes, s)
                        for copy in ss.copies:
                            cuda.memcpy_dtod_async(copy[ss.bufs.index(b)], b.pristine, b.nbytes, s)
                if ss.flush:
                    cuda.memset_d32_async(self.flush_buf, 0, self.flush_bytes // 4, s)
                t0 = time.perf_counter()
                self.spin_fn.prepared_async_call((1, 1, 1), (1, 1, 1), s, spin_ns)
                self.ev_start.record(s)
                for j in range(batch):
                    fn.prepared_async_call(launch.grid, launch.block, s, *arg_sets[j % len(arg_sets)],
                                           shared_size=launch.smem)
                self.ev_end.record(s)
                host_ns = (time.perf_counter() - t0) * 1e9
                try:
                    self.ev_end.synchronize()
                except cuda.Error as e:
                    self.exit_requested = True
                    raise CudaFault(str(e)) from None
                per_launch = host_ns / (batch + 2)
                if host_ns > 0.7 * spin_ns and spin_ns < 500_000_000:
                    self.launch_ns = max(self.launch_ns, 1.5 * per_launch)  # the GPU may have waited: again
                    continue
                self.launch_ns = max(1_000.0, 0.8 * self.launch_ns + 0.2 * per_launch)
                return self.ev_start.time_till(self.ev_end) * 1e3 / batch

        t0 = time.perf_counter()
        warm = []
        for _ in range(WARMUP_REPS):
            warm.append(one())
            self.beat()
            if reps is None and slow_us is not None and warm[-1] > SLOW_FACTOR * slow_us:
                return warm  # far slower still: one repetition says enough
        per_rep = (time.perf_counter() - t0) / WARMUP_REPS
        if reps is None and slow_us is not None and float(np.median(warm)) > slow_us:
            return warm
        if reps is not None:
            out = []
            for _ in range(reps):
                out.append(one())
                self.beat()
            return out
        most = int(min(MAX_REPS, max(min_reps, TIME_BUDGET_S / max(per_rep, 1e-6))))
        out = []
        while len(out) < most:
            out.append(one())
            self.beat()
            if len(out) >= min_reps and len(out) % 5 == 0 and median_is_precise(out):
                break
        return out

    # ------------------------------------------------------------------ variants
    def evaluate(self, variant: Variant, counter: int) -> Evaluation:
        """Verify ``variant`` on fresh inputs for every size set, then time it (Evaluation without
        gbps/objective/resources: the parent adds those). The cheap check comes first: size sets are verified
        smallest working set first, and the first failure ends the evaluation, so a wrong variant costs the
        smallest verification; nothing is timed before every size set has passed."""
        ev = Evaluation(params=dict(variant.params), status=Status.OK)
        if self.problem is None:
            raise KerntuneError("the worker has no problem: start(problem) first")
        if len(variant.launches) != len(self.sets):
            ev.status, ev.error = Status.LAUNCH_ERROR, f"{len(variant.launches)} launches for {len(self.sets)} size sets"
            return ev
        fn = self._verify(variant, counter, sorted(self.sets, key=lambda x: (x.working_set, x.index)), ev)
        if fn is None:
            return ev
        for ss in self.sets:
            try:
                samples = self._time(fn, ss, variant.launches[ss.index], ss.batch, slow_us=race_limit(ss))
            except CudaFault as e:
                ev.status, ev.error = Status.CRASHED, f"{e} (while timing, {ss.where()})"
                return ev
            t = summarize(samples, ss.batch, ss.l2)
            ev.timings.append(t)
            ss.best_us = min(ss.best_us or math.inf, t.median_us)
        return ev

    def evaluate_many(self, variants: list[Variant], counters: list[int]) -> list[Evaluation]:
        """``evaluate`` for each variant in turn, in one request; each result is also sent as it is ready
        (``send_part``), so that the parent keeps the results before a variant that crashes or hangs."""
        out = []
        for v, c in zip(variants, counters):
            ev = self.evaluate(v, c)
            out.append(ev)
            self.send_part(ev)
            if self.exit_requested:  # the context is poisoned: the rest goes to a fresh worker
                break
        return out

    def check(self, variant: Variant, counter: int, size_sets: list[int], scale: float = 1.0) -> Evaluation:
        """Verify ``variant`` on fresh inputs for the size sets ``size_sets`` only; time nothing. ``scale``: the
        random floating-point inputs multiplied by it, the absolute tolerance too (``Backend.check``)."""
        ev = Evaluation(params=dict(variant.params), status=Status.OK)
        if self.problem is None:
            raise KerntuneError("the worker has no problem: start(problem) first")
        if len(variant.launches) != len(self.sets):
            ev.status, ev.error = Status.LAUNCH_ERROR, f"{len(variant.launches)} launches for {len(self.sets)} size sets"
            return ev
        bad = [i for i in size_sets if not 0 <= i < len(self.sets)]
        if bad or not size_sets:
            raise KerntuneError(f"check: size sets {size_sets} are not among the {len(self.sets)} of the problem")
        if not (math.isfinite(scale) and scale > 0):
            raise KerntuneError(f"check: the input scale must be a positive number, not {scale!r}")
        self._verify(variant, counter, [self.sets[i] for i in size_sets], ev, scale)
        return ev

    def _verify(self, variant: Variant, counter: int, sets: list[_SizeSet], ev: Evaluation, scale: float = 1.0):
        """Load the variant and verify it on ``sets`` (fresh inputs, poisoned outputs); the loaded function, or
        None with ev's status and error set."""
        t0 = time.perf_counter()
        try:
            return self._verify_sets(variant, counter, sets, ev, scale)
        finally:
            self._spent("verify", t0)

    def _verify_sets(self, variant: Variant, counter: int, sets: list[_SizeSet], ev: Evaluation,
                     scale: float = 1.0):
        try:
            fn = self._load_variant(variant)
        except (KerntuneError, self.cuda.Error) as e:
            ev.status, ev.error = Status.LAUNCH_ERROR, str(e)
            return None
        for ss in sets:
            launch = variant.launches[ss.index]
            self._fill(ss, counter, scale)
            self._run_reference(ss)
            self._poison(ss)
            if self._run_variant(fn, ss, launch, ev):
                return None
            diff = self._compare(ss, scale)
            if diff:
                ev.status, ev.error = Status.VERIFY_FAILED, diff
                return None
            self.beat()
        return fn

    def _run_variant(self, fn, ss: _SizeSet, launch: Launch, ev: Evaluation) -> bool:
        """Launch once; on failure set ev's status (LAUNCH_ERROR, or CRASHED and exit) and return True."""
        cuda = self.cuda
        try:
            self._launch(fn, ss, launch)
        except cuda.Error as e:
            if self._healthy():
                ev.status = Status.LAUNCH_ERROR
                ev.error = f"{e} (grid {launch.grid}, block {launch.block}, smem {launch.smem}; {ss.where()})"
            else:
                self.exit_requested = True
                ev.status, ev.error = Status.CRASHED, f"{e} ({ss.where()})"
            return True
        try:
            self._sync()
        except CudaFault as e:
            ev.status, ev.error = Status.CRASHED, f"{e} ({ss.where()})"
            return True
        return False

    def confirm(self, variant: Variant, rounds: int = 5) -> tuple[list[Timing], list[Timing]]:
        """The original and the variant timed interleaved ``rounds`` times each, per size set."""
        fn = self._load_variant(variant)
        orig, var = [], []
        self._timing_phase = "confirm"
        try:
            for ss in self.sets:
                o, v = [], []
                for _ in range(rounds):
                    o += self._time(self.reference[1], ss, self.problem.reference_launches[ss.index], ss.batch,
                                    min_reps=CONFIRM_MIN_REPS)
                    v += self._time(fn, ss, variant.launches[ss.index], ss.batch, min_reps=CONFIRM_MIN_REPS)
                orig.append(summarize(o, ss.batch, ss.l2))
                var.append(summarize(v, ss.batch, ss.l2))
        finally:
            self._timing_phase = "time"
        return orig, var

    def launch_once(self, variant: Variant, size_index: int = 0) -> None:
        """Fill inputs and launch the variant once on one size set (what ``ncu`` profiles)."""
        ss = self.sets[size_index]
        fn = self._load_variant(variant)
        self._fill(ss, 1)
        self._poison(ss)
        self._launch(fn, ss, variant.launches[size_index])
        self._sync()

    def release(self) -> None:
        """Free the problem's buffers and forget it; the context stays (a worker kept warm between runs holds no
        more device memory than its context)."""
        self._free()
        self.problem = None

    def close(self) -> None:
        self._free()
        self.ctx.pop()
        self.ctx.detach()


# --------------------------------------------------------------------------------------------- ncu entry point
def _profile_main(request: str) -> int:
    """Set up the problem without running the reference, launch the variant once (run under ncu)."""
    os.dup2(2, 1)
    with open(request, "rb") as f:
        device_index, problem, variant, size_index = pickle.load(f)
    w = GpuWorker(device_index)
    w.problem = problem
    w.sets = [w._alloc(i, s) for i, s in enumerate(problem.spec.sizes)]
    w.launch_once(variant, size_index)
    w.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "profile":
        sys.exit(_profile_main(sys.argv[2]))
    print("usage: python -m agent_core.measure.gpu_worker profile REQUEST.pkl", file=sys.stderr)
    sys.exit(2)
