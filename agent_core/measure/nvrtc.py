"""NVRTC, in process: a variant's device code compiled to a cubin in tens of milliseconds instead of an nvcc run's
hundreds (no process, no host compiler, no host headers). The compiler tries it first and falls back to nvcc
whenever it cannot serve a variant exactly (``compiler.compile_kernel``).

NVRTC compiles device code only, so the variant's text is reduced first (``device_only``): host-only function
definitions (no ``__global__``/``__device__``, not ``constexpr``) and host explicit instantiations are blanked,
includes NVRTC has no use for are blanked or mapped (``<cstdint>`` to libcu++'s); every line keeps its number,
so diagnostics point at the user's lines. What the kernel computes is untouched: only code the device never
runs is removed. A file with a local ``#include "..."`` is left to nvcc (its ``-MD`` list keeps the compile cache
honest when a header changes). Whatever NVRTC refuses (a host header a kernel needs, host code it cannot
tell apart, a kernel symbol it did not emit) goes to nvcc, so a variant compiles exactly when it compiled before.

NVRTC runs in a pool of processes of its own (started on first use, one per compile running at once, kept): a
compile that crashes the library or runs past its time limit takes its pool process with it, never the language
server or the CLI, and a new process serves the next compile.

The library: ``KERNTUNE_NVRTC`` (a path to libnvrtc, or ``off``), else the toolkit beside nvcc
(``lib64/``, ``targets/*/lib/``), else a ``nvidia-cuda-nvrtc`` wheel whose major version is nvcc's. Calls run
in the pool's processes, so ``compile_many``'s threads compile in parallel.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import glob
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from agent_core.measure.timeline import tally

if TYPE_CHECKING:
    from tree_sitter import Node

# includes NVRTC compiles from the toolkit's include folders (device headers), kept as they are
_DEVICE_HEADERS = re.compile(r"^(?:cuda_[\w.]*\.h|cuda\.h|mma\.h|crt/.*|cooperative_groups(?:\.h|/.*)|cub/.*|"
                             r"cuda/.*|nv/.*|vector_types\.h|vector_functions\.h|device_[\w]*\.h|"
                             r"math_constants\.h|sm_\d+_[\w]*\.h|curand[\w]*\.h)$")
# host headers whose device-side content libcu++ provides for NVRTC
_MAPPED = {"cstdint": "cuda/std/cstdint", "stdint.h": "cuda/std/cstdint", "cinttypes": "cuda/std/cstdint",
           "inttypes.h": "cuda/std/cstdint", "cstddef": "cuda/std/cstddef", "stddef.h": "cuda/std/cstddef"}
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
# FLT_MAX & co. where <cfloat>/<climits> is blanked: the front end's own macros, as -D options (lines kept)
_LIMIT_MACROS = {"FLT_MAX": "__FLT_MAX__", "FLT_MIN": "__FLT_MIN__", "FLT_EPSILON": "__FLT_EPSILON__",
                 "DBL_MAX": "__DBL_MAX__", "INT_MAX": "__INT_MAX__", "INT_MIN": "(-__INT_MAX__-1)",
                 "UINT_MAX": "(__INT_MAX__*2U+1U)"}
_LIMIT_HEADERS = {"cfloat", "float.h", "climits", "limits.h"}
# what NVRTC reads otherwise than nvcc, silently: push/pop_macro pragmas are ignored; the compiler-identifying
# macros differ (__NVCC__ and the host compiler's are not defined, __CUDACC_RTC__ is)
_DIFFERS = re.compile(r"\b(?:push_macro|pop_macro|__NVCC__|__CUDACC_RTC__|__GNUC__|__GNUC_MINOR__|__clang__|"
                      r"_MSC_VER|__CUDACC_VER_\w*|__linux__|_WIN32|__x86_64__|__aarch64__|__CUDACC_DEBUG__)\b")
_CONTAINERS = ("translation_unit", "preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
               "namespace_definition", "linkage_specification", "declaration_list")


@dataclass
class DeviceSource:
    text: str  # the variant without host code: compile this
    names: dict[str, str]  # kernel name -> its qualified name (namespaces), for NVRTC's name expressions
    templates: set[str]  # the kernels that are templates (they need their arguments to be instantiated)
    defines: dict[str, str]  # macros the blanked headers defined that device code may use (FLT_MAX, ...)


class Unsupported(Exception):
    """The variant is left to nvcc (why, in words)."""


def _blank(buf: bytearray, start: int, end: int) -> None:
    for i in range(start, end):
        if buf[i] not in (0x0A, 0x0D):
            buf[i] = 0x20


def _function_of(n: Node) -> Node | None:
    """The function definition a top-level item is (a template's too), or None."""
    if n.type == "function_definition":
        return n
    if n.type == "template_declaration":
        for c in n.named_children:
            if c.type == "function_definition":
                return c
    return None


def _qualified(fn: Node, data: bytes) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type not in ("identifier", "qualified_identifier", "field_identifier"):
        d = d.child_by_field_name("declarator")
    if d is None:
        return None
    name = data[d.start_byte:d.end_byte].decode()
    p = fn.parent
    while p is not None:
        if p.type == "namespace_definition":
            nn = p.child_by_field_name("name")
            if nn is not None:
                name = data[nn.start_byte:nn.end_byte].decode() + "::" + name
        p = p.parent
    return name


def template_kernels(text: str) -> dict[str, str]:
    """The templated ``__global__`` functions of ``text``: short name -> qualified name (its namespaces)."""
    from agent_core.source.cuda_parse import parse_tree
    data = text.encode("utf-8")
    out: dict[str, str] = {}
    stack = [parse_tree(data).root_node]
    while stack:
        n = stack.pop()
        for c in n.named_children:
            if c.type in _CONTAINERS:
                stack.append(c)
                continue
            fn = _function_of(c)
            if fn is None or c.type != "template_declaration":
                continue
            body = fn.child_by_field_name("body")
            head = data[c.start_byte:body.start_byte if body is not None else c.end_byte].decode("utf-8", "replace")
            q = _qualified(fn, data) if "__global__" in head else None
            if q:
                out.setdefault(q.rsplit("::", 1)[-1], q)
    return out


def device_only(text: str) -> DeviceSource:
    """``text`` with its host-only code blanked (line numbers kept) and its includes made NVRTC's; raises
    Unsupported where nvcc must compile it."""
    from agent_core.source.cuda_parse import parse_tree
    from agent_core.source.macros import scan_defines
    includes = _INCLUDE.findall(text)
    if any(q == '"' for q, _ in includes):
        raise Unsupported("a local #include: nvcc tracks its dependencies")
    m = _DIFFERS.search(text)
    if m:
        raise Unsupported(f"{m.group(0)}: NVRTC would read it otherwise than nvcc")
    if any(h.strip() in ("cub/cub.cuh", "cub.cuh") or h.strip().startswith("thrust/") for _, h in includes):
        raise Unsupported("cub/cub.cuh and thrust bring host code NVRTC refuses (seconds lost finding out)")
    data = text.encode("utf-8")
    tree = parse_tree(data)
    # object-like macros standing in for __global__ (InfiniCore's `#define INFINIOP_CUDA_KERNEL __global__ void`), as
    # cuda_parse reads them
    kernel_words = "|".join(["__global__"] + sorted({m.name for m in scan_defines(data)
                                                      if m.params is None and "__global__" in m.body.split()}))
    device_words = re.compile(rf"\b(?:{kernel_words}|__device__|constexpr|consteval)\b")
    global_word = re.compile(rf"\b(?:{kernel_words})\b")
    buf = bytearray(data)
    names: dict[str, str] = {}
    templates: set[str] = set()
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        for c in n.named_children:
            if c.type in _CONTAINERS:
                stack.append(c)
                continue
            fn = _function_of(c)
            if fn is not None and n.type == "linkage_specification" and not device_words.search(
                    data[c.start_byte:(fn.child_by_field_name("body") or fn).start_byte].decode("utf-8", "replace")):
                _blank(buf, n.start_byte, n.end_byte)  # extern "C" void host(...) { ... }: the linkage goes too
                continue
            if fn is not None:
                body = fn.child_by_field_name("body")
                head = data[c.start_byte:body.start_byte if body is not None else c.end_byte].decode("utf-8", "replace")
                if device_words.search(head):
                    if global_word.search(head):
                        q = _qualified(fn, data)
                        if q:
                            short = q.rsplit("::", 1)[-1]
                            names.setdefault(short, q)
                            if c.type == "template_declaration":
                                templates.add(short)
                    continue
                _blank(buf, c.start_byte, c.end_byte)  # a host function: the device never runs it
            elif c.type == "template_instantiation" or (
                    c.type == "declaration" and data[c.start_byte:c.end_byte].lstrip().startswith(b"template ")
                    and b"<" in data[c.start_byte:c.end_byte]):
                if b"__global__" not in data[c.start_byte:c.end_byte]:
                    _blank(buf, c.start_byte, c.end_byte)  # an explicit instantiation of a host template
    out = buf.decode("utf-8")
    limits = False

    def include(m: re.Match) -> str:
        nonlocal limits
        h = m.group(2).strip()
        if _DEVICE_HEADERS.match(h):
            return m.group(0)
        if h in _MAPPED:
            new = f"#include <{_MAPPED[h]}>"
            return new + " " * max(0, len(m.group(0)) - len(new))
        limits = limits or h in _LIMIT_HEADERS
        return " " * len(m.group(0))  # a host header (or math: NVRTC has the math functions built in)
    out = _INCLUDE.sub(include, out)
    # name expressions are read at file scope: the kernels' namespaces opened there (after every line, so no
    # line moves), for template arguments spelled as the kernel's namespace spells them
    spaces = sorted({q.rsplit("::", 1)[0] for q in names.values() if "::" in q})
    if spaces:
        out += "\n" + "".join(f"using namespace {ns};\n" for ns in spaces)
    return DeviceSource(out, names, templates, dict(_LIMIT_MACROS) if limits else {})


# --------------------------------------------------------------------------------------------- the library
_FUNCTIONS = ("nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLog", "nvrtcGetCUBIN",
              "nvrtcAddNameExpression", "nvrtcGetLoweredName", "nvrtcGetProgramLogSize", "nvrtcGetCUBINSize",
              "nvrtcDestroyProgram")


@functools.lru_cache(maxsize=None)
def _library(nvcc: str | None) -> tuple[str, str] | None:
    """(the path of libnvrtc, its version "major.minor"), or None: KERNTUNE_NVRTC, then the toolkit beside
    ``nvcc``, then a wheel of nvcc's major version."""
    env = os.environ.get("KERNTUNE_NVRTC", "").strip()
    if env.lower() in ("off", "0", "no", "nvcc"):
        return None
    want = None
    if nvcc:
        from agent_core.measure.compiler import nvcc_version
        m = re.search(r"release (\d+)\.", nvcc_version())
        want = m.group(1) if m else None
    paths = [env] if env else []
    if nvcc:
        from agent_core.measure.compiler import toolkit_root
        root = Path(toolkit_root(nvcc))
        for pat in ("lib64/libnvrtc.so*", "targets/*/lib/libnvrtc.so*", "lib/libnvrtc.so*"):
            paths += sorted(glob.glob(str(root / pat)))
    try:
        import nvidia  # the nvidia-cuda-nvrtc wheels (namespace package)
        for base in getattr(nvidia, "__path__", []):
            paths += sorted(glob.glob(os.path.join(base, "*", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    for path in paths:
        if "builtins" in os.path.basename(path):
            continue
        try:
            lib = ctypes.CDLL(path)
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
                continue
        except OSError:
            continue
        if want is not None and str(major.value) != want and not env:
            continue  # another toolkit's NVRTC with this toolkit's headers: leave it to nvcc
        if not all(hasattr(lib, f) for f in _FUNCTIONS):
            continue
        return path, f"{major.value}.{minor.value}"
    return None


def available(nvcc: str | None) -> str | None:
    """NVRTC's version where kerntune will use it beside ``nvcc``, else None."""
    lib = _library(nvcc)
    return lib[1] if lib else None


def include_dirs(nvcc: str | None) -> list[str]:
    """The toolkit's include folders (CUDA 13 keeps CCCL's headers in include/cccl)."""
    if not nvcc:
        return []
    from agent_core.measure.compiler import toolkit_root
    root = Path(toolkit_root(nvcc)) / "include"
    return [str(d) for d in (root, root / "cccl") if d.is_dir()]


@dataclass
class Result:
    ok: bool
    log: str
    cubin: bytes | None
    lowered: dict[str, str]  # name expression -> mangled symbol


class TimedOut(Exception):
    """NVRTC ran past the time limit (its pool process was killed)."""


class _Worker:
    """One pool process: ``python -c`` running ``_serve`` (not multiprocessing: a spawned child would import the
    caller's ``__main__`` again), requests and replies pickled with a length prefix over its stdin and stdout."""

    def __init__(self, path: str):
        import subprocess
        import sys
        boot = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
                f"from agent_core.measure.nvrtc import _serve; _serve({path!r})")
        # NVRTC's ptxas answers code it compiled before from the CUDA JIT cache (~/.nv/ComputeCache) without its
        # -v resource report (cuda-python issue 1124); on the H200 every compile of a Kernel Tuner comparison's
        # second run went to nvcc for it (2026-11-29h). kerntune's compile cache is the cache: the JIT's is off here
        env = dict(os.environ, CUDA_CACHE_DISABLE="1")
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, close_fds=True, env=env)

    def call(self, request: tuple, timeout: float):
        import pickle
        import struct
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            raise Unsupported(f"NVRTC's process ended (exit code {self.proc.poll()})") from None
        box: list = []

        def read():
            try:
                head = self.proc.stdout.read(8)
                if len(head) == 8:
                    box.append(pickle.loads(self.proc.stdout.read(struct.unpack("<Q", head)[0])))
            except Exception as e:  # noqa: BLE001 (a torn reply: the process died)
                box.append(e)
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            self.kill()
            raise TimedOut(f"NVRTC took longer than {timeout:.0f} s")
        if not box or isinstance(box[0], Exception):
            self.kill()
            raise Unsupported(f"NVRTC's process ended (exit code {self.proc.poll()})")
        return box[0]

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 (already gone)
            pass


def _serve(path: str) -> None:
    """A pool process's loop: read a request, compile, write the reply; nothing else reaches its stdout."""
    import pickle
    import struct
    import sys
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray writes (the library's, Python's) go where stderr goes, not into the replies
    global _child_lib
    # NVRTC opens its builtins library by name at its first compile; a wheel's folder is not on the loader's
    # path (the 13.0 wheel's compiles all failed: "failed to open libnvrtc-builtins"): loaded first, by path
    for b in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
        try:
            ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass
    _child_lib = ctypes.CDLL(path)
    for f in _FUNCTIONS:
        getattr(_child_lib, f).restype = ctypes.c_int
    inp = sys.stdin.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        req = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        try:
            rep = _compile_here(*req)
        except Exception as e:  # noqa: BLE001 (sent back: the caller falls back to nvcc)
            rep = Unsupported(str(e))
        data = pickle.dumps(rep, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


_idle: list[_Worker] = []
_lock = threading.Lock()
_child_lib = None  # in a pool process: the loaded library


def shutdown() -> None:
    """Stop the pool's idle processes (at exit)."""
    with _lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        w.kill()


atexit.register(shutdown)


def compile_cubin(nvcc: str | None, text: str, name: str, options: list[str], expressions: list[str],
                  timeout: float = 300.0) -> Result:
    """Compile ``text`` with NVRTC in a pool process (``options`` as NVRTC takes them: -arch=sm_XX, -D, -I,
    -lineinfo, -Xptxas -v); ``expressions`` (``&ns::kernel<args>``) are instantiated and kept, and their symbols
    returned. Raises TimedOut past ``timeout`` seconds (the process is killed) and Unsupported when NVRTC is
    missing or its process died (a crash in the library). A process serves one compile at a time; as many are
    started as compiles run at once, and kept for the next."""
    got = _library(nvcc)
    if got is None:
        raise Unsupported("NVRTC is not available")
    with _lock:
        w = _idle.pop() if _idle else None
    if w is None or w.proc.poll() is not None:
        w = _Worker(got[0])
        tally("NVRTC process started")  # its start is in this compile's time
    rep = w.call((text, name, options, expressions), timeout)  # raises: the process was killed, not kept
    with _lock:
        _idle.append(w)
    if isinstance(rep, Exception):
        raise rep
    return rep


def _compile_here(text: str, name: str, options: list[str], expressions: list[str]) -> Result:
    """In a pool process: one NVRTC program, compiled."""
    lib = _child_lib
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode("utf-8"), name.encode(), 0, None, None) != 0:
        raise Unsupported("nvrtcCreateProgram failed")
    try:
        for e in expressions:
            lib.nvrtcAddNameExpression(prog, e.encode())
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode("utf-8", "replace")
        if rc != 0:
            return Result(False, log, None, {})
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        cub = ctypes.create_string_buffer(n.value)
        if n.value == 0 or lib.nvrtcGetCUBIN(prog, cub) != 0:
            return Result(False, log + "\n(no cubin)", None, {})
        lowered = {}
        for e in expressions:
            out = ctypes.c_char_p()
            if lib.nvrtcGetLoweredName(prog, e.encode(), ctypes.byref(out)) == 0 and out.value:
                lowered[e] = out.value.decode()
        return Result(True, log, cub.raw, lowered)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
