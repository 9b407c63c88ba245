"""nvcc to cubin: compile one variant (or many in parallel), read ptxas's resource report, pick the entry.

Every nvcc run captures stdout and stderr and reads nothing from stdin (the language server's stdio is the
LSP stream). Results are cached under ``cache_dir`` by a content hash of the source, defines, arch, flags,
include dirs and nvcc version; the user headers the source includes (from nvcc's ``-MD`` list) are hashed
too, so editing a header invalidates the entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from agent_core.measure import nvrtc
from agent_core.measure import timeline
from agent_core.measure.timeline import phase, tally
from agent_core.model import Compiled, KerntuneError, Resources, sha256_text
from agent_core.source.constants import valued

DEFAULT_TIMEOUT_S = 300.0
NVRTC_SLOW_S = 1.0  # an NVRTC compile longer than this: the template's other configurations go to nvcc
CACHE_FORMAT = 1  # bump when the cached JSON changes meaning

# counts real nvcc compilations in this process (a cache hit does not add one)
stats = {"nvcc_runs": 0, "nvrtc_runs": 0}
_stats_lock = threading.Lock()


class CompileError(KerntuneError):
    """nvcc/ptxas failed, or the kernel's entry cannot be found; ``log`` is the compiler's full output."""

    def __init__(self, message: str, log: str = "", path: str | None = None, line: int | None = None,
                 col: int | None = None):
        super().__init__(message, path, line, col)
        self.log = log


# --------------------------------------------------------------------------------------------- nvcc
def nvcc_path() -> str | None:
    return shutil.which("nvcc")


@functools.lru_cache(maxsize=None)
def _nvcc_version(path: str) -> str:
    r = subprocess.run([path, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    m = re.search(r"release [\d.]+, V([\d.]+)", r.stdout)
    return m.group(1) if m else r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "unknown"


def nvcc_version() -> str:
    """nvcc's version, e.g. ``13.0.88`` (cached per nvcc path)."""
    path = nvcc_path()
    if path is None:
        raise CompileError("nvcc is not on PATH: install the CUDA toolkit or add its bin/ folder to PATH")
    return _nvcc_version(path)


@functools.lru_cache(maxsize=None)
def toolkit_root(nvcc: str) -> str:
    """The CUDA toolkit ``nvcc`` belongs to: the folder above its ``bin/`` (symbolic links followed); where ``nvcc``
    is a wrapper script elsewhere (``/usr/local/bin/nvcc`` exec'ing the toolkit's), the ``TOP`` nvcc reports for
    itself (``--dryrun``), so that its headers and its NVRTC are found."""
    root = Path(os.path.realpath(nvcc)).parent.parent
    if (root / "include" / "cuda_runtime.h").is_file():
        return str(root)
    try:
        _, out = _run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], None, 60)
    except OSError:
        return str(root)
    m = re.search(r"^#\$ TOP=(.+?)\s*$", out, re.M)
    top = Path(os.path.realpath(m.group(1))) if m else None
    return str(top) if top is not None and (top / "include" / "cuda_runtime.h").is_file() else str(root)


def _run(cmd: list[str], cwd: str | None, timeout: float) -> tuple[int, str]:
    """Run ``cmd`` with stdio captured (stdin closed); kill its whole process group on timeout."""
    p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        raise
    return p.returncode, out


# --------------------------------------------------------------------------------------------- ptxas report
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(log: str) -> dict[str, Resources]:
    """Resources of every entry function in a ``ptxas -v`` report, by (mangled) symbol.

    ``Function properties for`` blocks of non-entry (device) functions are ignored."""
    entries: dict[str, Resources] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current_entry: str | None = None  # the last "Compiling entry function"
    props_for: str | None = None  # the last "Function properties for"
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current_entry = props_for = m.group(1)
            entries.setdefault(current_entry, Resources(registers=0, static_smem=0))
            continue
        m = _PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_for is not None:
            frames[props_for] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            continue
        m = _USED.search(line)
        if m and current_entry is not None and props_for == current_entry:
            r = entries[current_entry]
            r.registers = int(m.group(1))
            s = _SMEM.search(line)
            r.static_smem = int(s.group(1)) if s else 0
    for sym, r in entries.items():
        if sym in frames:
            r.stack_bytes, r.spill_stores, r.spill_loads = frames[sym]
    return entries


# --------------------------------------------------------------------------------------------- symbols
def demangle(symbols: list[str]) -> dict[str, str]:
    """Mangled -> demangled names through ``c++filt`` (names it cannot demangle map to themselves)."""
    out = {s: s for s in symbols}
    mangled = [s for s in symbols if s.startswith("_Z")]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return out
    r = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=60)
    names = r.stdout.splitlines()
    if r.returncode == 0 and len(names) == len(mangled):
        out.update(zip(mangled, names))
    return out


def _match_back(s: str, end: int, open_c: str, close_c: str) -> int:
    """Index of the bracket that opens the one closing at ``end``."""
    depth = 0
    for i in range(end, -1, -1):
        c = s[i]
        if c == close_c:
            depth += 1
        elif c == open_c:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def split_demangled(name: str) -> tuple[str, list[str] | None]:
    """``void ns::k<4, float>(float*, int)`` -> (``ns::k``, [``4``, ``float``]); not templated: args None."""
    s = name.strip()
    if s.endswith(")"):
        i = _match_back(s, len(s) - 1, "(", ")")
        if i > 0:
            s = s[:i].rstrip()
    targs = None
    if s.endswith(">"):
        i = _match_back(s, len(s) - 1, "<", ">")
        if i > 0:
            targs = _split_top(s[i + 1:-1])
            s = s[:i].rstrip()
    m = re.search(r"[A-Za-z_][\w:]*$", s)
    return (m.group(0) if m else s), targs


# a type argument as the demangler spells it on Linux x86_64 (the typedef is gone: int32_t is int), blanks removed
_DEMANGLED_TYPE = {"int8_t": "signedchar", "uint8_t": "unsignedchar", "int16_t": "short", "uint16_t": "unsignedshort",
                   "int32_t": "int", "uint32_t": "unsignedint", "int64_t": "long", "uint64_t": "unsignedlong",
                   "size_t": "unsignedlong", "ptrdiff_t": "long", "unsigned": "unsignedint", "signed": "int",
                   "signedint": "int", "shortint": "short", "unsignedshortint": "unsignedshort", "longint": "long",
                   "unsignedlongint": "unsignedlong", "longlongint": "longlong", "unsignedlonglongint": "unsignedlonglong",
                   "half": "__half", "nv_bfloat16": "__nv_bfloat16", "half2": "__half2", "nv_bfloat162": "__nv_bfloat162"}


def _norm_arg(a: str) -> str:
    a = a.strip()
    if a.startswith("&(") and a.endswith(")"):  # a function as the demangler spells it: &(float silu<float>(float))
        qual, targs = split_demangled(a[2:-1])
        a = qual + (f"<{','.join(_norm_arg(t) for t in targs)}>" if targs is not None else "")
    a = a.lstrip("&").strip()  # `&silu<float>` and `silu<float>` name the same function
    if re.fullmatch(r"[A-Za-z_][\w:]*<.*>", a):  # a function template's arguments, each as the demangler spells it
        i = a.index("<")
        a = a[:i] + "<" + ",".join(_norm_arg(t) for t in _split_top(a[i + 1:-1])) + ">"
    a = re.sub(r"^\((?:[\w: ]+)\)(?=-?\d)", "", a)  # (char)65 -> 65, (ns::Act)2 -> 2 (an enumerator's value)
    a = re.sub(r"\s+", "", a)
    if re.fullmatch(r"-?\d+[uUlL]*", a):
        a = a.rstrip("uUlL")
    a = re.sub(r"^(::)?std::", "", a)
    return {"true": "1", "false": "0"}.get(a, _DEMANGLED_TYPE.get(a, a))


def select_symbol(report: dict[str, Resources], names: dict[str, str], kernel: str,
                  template_args: list[str] | None = None) -> str:
    """The entry symbol of ``kernel`` among ``report``'s entries (``names``: symbol -> demangled)."""
    cands: list[tuple[str, str, list[str] | None]] = []
    for sym in report:
        qual, targs = split_demangled(names.get(sym, sym))
        cands.append((sym, qual, targs))
    exact = [c for c in cands if c[1] == kernel]
    found = exact or [c for c in cands if c[1].split("::")[-1] == kernel.split("::")[-1]]
    if not found:
        have = ", ".join(sorted(names.get(s, s) for s in report)) or "none"
        raise CompileError(
            f"no entry function for kernel '{kernel}' in the compiled code (entries: {have}). A templated kernel "
            "is compiled only where host code launches it or instantiates it explicitly")
    if len(found) == 1:
        return found[0][0]
    if template_args is not None:
        want = [_norm_arg(a) for a in template_args]
        match = [c for c in found if c[2] is not None and [_norm_arg(a) for a in c[2]] == want]
        if len(match) == 1:
            return match[0][0]
    listing = "; ".join(names.get(c[0], c[0]) for c in found)
    given = f" match template arguments <{', '.join(template_args)}>" if template_args is not None else ""
    raise CompileError(f"kernel '{kernel}' has {len(found)} compiled instantiations and none{given or ' was chosen'}: "
                       f"{listing}. Give the template arguments of the one to tune")


# --------------------------------------------------------------------------------------------- diagnostics
_DIAG = re.compile(r"^(.*?)\((\d+)\): (error|warning|catastrophic error)\b", re.M)


def _diagnostics(log: str, scratch_name: str, source_path: str | None) -> tuple[str, str | None, int | None]:
    """The log with the scratch file name replaced by the user's path; the first error's path and 0-based line."""
    shown = source_path or scratch_name
    text = re.sub(rf"(?m)^{re.escape(scratch_name)}(?=\(\d+\))", lambda _: shown, log)
    text = text.replace(f'"{scratch_name}"', f'"{shown}"')
    for m in _DIAG.finditer(text):
        if m.group(3) != "warning":
            if m.group(1) == scratch_name and source_path is None:
                return text, None, None  # no user path to point at; the message carries the line
            return text, m.group(1), int(m.group(2)) - 1
    return text, source_path, None


def _error_lines(text: str) -> str:
    """The lines of a log a user reads first: errors with their context, ptxas errors."""
    keep, lines = [], text.splitlines()
    for i, ln in enumerate(lines):
        if re.search(r"\b(error|fatal)\b", ln, re.I) and "errors detected" not in ln and "error detected" not in ln:
            keep.append(ln)
            keep += [x for x in lines[i + 1:i + 3] if x.startswith(" ")]
    return "\n".join(keep[:30]) or text.strip()[-3000:]


# --------------------------------------------------------------------------------------------- cache
def _sha_file(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _read_deps(dfile: Path, cwd: Path, exclude: tuple[str, ...]) -> dict[str, str | None]:
    try:
        raw = dfile.read_text()
    except OSError:
        return {}
    raw = raw.replace("\\\n", " ")
    _, _, rest = raw.partition(":")
    deps = {}
    for tok in re.split(r"(?<!\\)\s+", rest.strip()):
        tok = tok.replace("\\ ", " ")
        if not tok:
            continue
        p = os.path.realpath(cwd / tok)
        if p.startswith(exclude) or Path(p).parent == cwd.resolve():
            continue  # the toolkit, system headers, the scratch source itself
        deps[p] = _sha_file(p)
    return deps


def _load_cached(cache: Path, key: str) -> dict | None:
    meta_p, cubin_p = cache / f"{key}.json", cache / f"{key}.cubin"
    try:
        meta = json.loads(meta_p.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != CACHE_FORMAT or not cubin_p.exists():
        return None
    if any(_sha_file(p) != h for p, h in meta.get("deps", {}).items()):
        return None
    return meta


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _store_entry(cache: Path, key: str, cubin: bytes, arch: str, flags: list[str], log: str,
                 deps: dict[str, str | None], report: dict[str, Resources], **extra) -> dict:
    """Write ``key``'s cubin and its metadata (``extra``'s fields after the common ones) to the cache; returns
    the metadata as ``_load_cached`` will read it back."""
    meta = {"format": CACHE_FORMAT, "arch": arch, "flags": flags, "log": log, "deps": deps,
            "report": {s: r.__dict__ for s, r in report.items()}, "names": demangle(list(report)), **extra}
    _atomic_write(cache / f"{key}.cubin", cubin)
    _atomic_write(cache / f"{key}.json", json.dumps(meta, indent=1).encode())
    return meta


# --------------------------------------------------------------------------------------------- compile
def compile_kernel(text: str, kernel: str, arch: str = "sm_90", defines: dict[str, int] | None = None,
                   include_dirs: list[str] = (), cache_dir: Path | None = None, extra_flags: tuple = (),
                   template_args: list[str] | None = None, source_path: str | None = None,
                   timeout: float = DEFAULT_TIMEOUT_S, exact: bool = False) -> Compiled:
    """Compile ``text`` to a cubin for ``arch`` and return the entry of ``kernel`` with its ptxas resources.

    ``source_path`` (the user's file) names the source in error messages; ``template_args`` chooses among
    several instantiations of a templated kernel. Raises CompileError (with ``.log``) on failure.
    Timed as the run's "compile" phase (ptxas runs inside nvcc: ``-Xptxas -v`` gives the resources).

    NVRTC compiles it where it can (``agent_core.measure.nvrtc``: the search's many variants, in milliseconds);
    ``exact`` asks for nvcc's binary, the one the user's build makes from the file: NVRTC's code can differ in
    places (shared-memory addresses computed in 64 bits where nvcc's hidden device symbols allow 32), so the
    figures a result reports (the confirmation of the best, the applied file's check) are nvcc's.

    Template arguments that name the file's integer constants (``<ACT_GELU>``, an enumerator) are read as their
    values (``source.constants``): the compiled instantiation's name spells values."""
    with phase("compile"):
        return _compile_kernel(text, kernel, arch, defines, include_dirs, cache_dir,
                               tuple(extra_flags), template_args, source_path, timeout, exact)


def _compile_kernel(text, kernel, arch, defines, include_dirs, cache_dir, extra_flags, template_args, source_path,
                    timeout, exact: bool = False) -> Compiled:
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc is not on PATH: install the CUDA toolkit or add its bin/ folder to PATH",
                           path=source_path)
    version = nvcc_version()
    defines = dict(defines or {})
    incs = [os.path.abspath(d) for d in include_dirs]
    flags = ["-cubin", f"-arch={arch}", "-O3", "-lineinfo", "-Xptxas", "-v"]
    flags += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    flags += [x for d in incs for x in ("-I", d)]
    flags += [str(f) for f in extra_flags]
    instance = _instance_of(text, kernel, template_args)  # (for nvcc: NVRTC's name expression instantiates it)
    key = hashlib.sha256(json.dumps({"text": text + instance, "flags": flags, "nvcc": version, "format": CACHE_FORMAT},
                                    sort_keys=True).encode()).hexdigest()[:40]
    cache = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "kerntune" / "cubin"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "tmp").mkdir(exist_ok=True)
        if not os.access(cache, os.W_OK | os.X_OK):
            raise PermissionError(f"{cache} is not writable")
    except OSError as e:
        raise KerntuneError(f"the compile cache {cache} cannot be used ({e.strerror or e}): set KERNTUNE_CACHE "
                            "to a writable folder", str(cache)) from None
    refused = None
    if not extra_flags and not exact:  # NVRTC's name expression sees the file's enumerators and constants, not its macros
        got = _nvrtc_compiled(nvcc, text, kernel, arch, defines, incs, valued(template_args, text, macros_only=True),
                              cache, source_path, timeout)
        if isinstance(got, Compiled):
            return got
        refused = got
    if exact:
        tally("nvcc: exact (the original, a confirmation)")
    meta = _load_cached(cache, key)
    if meta is None:
        t0 = time.perf_counter()
        meta = _compile_uncached(nvcc, text + instance, kernel, arch, flags, cache, key, timeout, source_path)
        tally("nvcc", time.perf_counter() - t0)
    else:
        tally("nvcc, cached")
    if refused is not None:
        try:
            _atomic_write(refused[0], refused[1].encode("utf-8", "replace"))
        except OSError:
            pass
    report = {s: Resources(**r) for s, r in meta["report"].items()}
    try:
        sym = select_symbol(report, meta["names"], kernel, valued(template_args, text))
    except CompileError as e:
        e.path, e.log = source_path, meta["log"]
        raise
    return Compiled(cubin_path=str(cache / f"{key}.cubin"), symbol=sym, resources=report[sym],
                    source_hash=sha256_text(text), log=meta["log"])


def _instance_of(text: str, kernel: str, template_args: list[str] | None) -> str:
    """Where ``kernel`` is a template and the spec names its arguments: a line that instantiates that kernel (its
    address taken in its own namespace), appended for nvcc. The file's host code may launch it only from a template
    nothing instantiates (AITemplate's launchers): nvcc would then compile no such kernel. Another instantiation of
    the same arguments names the same kernel."""
    if not template_args:
        return ""
    try:
        q = nvrtc.template_kernels(text).get(kernel.rsplit("::", 1)[-1])
    except Exception:  # noqa: BLE001 (a text the parser does not take: the file's own launches decide)
        return ""
    if q is None:
        return ""
    ns, _, name = q.rpartition("::")
    tag = hashlib.sha256(f"{q}<{template_args}>".encode()).hexdigest()[:8]
    line = f"__attribute__((used)) static void* const kt_instance_{tag} = (void*)&{name}<{', '.join(template_args)}>;"
    return f"\n// kerntune: the instantiation the spec tunes\n{f'namespace {ns} {{ {line} }}' if ns else line}\n"


def _nvrtc_compiled(nvcc, text, kernel, arch, defines, incs, template_args, cache: Path, source_path,
                    timeout: float) -> Compiled | tuple[Path, str] | None:
    """The variant compiled by NVRTC (``nvrtc``), cached like nvcc's; else nvcc compiles it: None (no NVRTC, a text
    it cannot take, or one it refused before) or (marker, NVRTC's log) when NVRTC failed on it now: the caller
    writes the marker if nvcc compiles it (NVRTC's failure was NVRTC's, not the variant's: a configuration that
    does not compile fails in both and marks nothing)."""
    version = nvrtc.available(nvcc)
    if version is None:
        tally("nvcc: no NVRTC library")
        return None
    try:
        dev = nvrtc.device_only(text)
    except nvrtc.Unsupported:
        tally("nvcc: device code not separable")
        return None
    except Exception:  # a parse the reduction did not expect: nvcc compiles the text as it is
        tally("nvcc: device code not separable")
        return None
    base = kernel.rsplit("::", 1)[-1]
    qualified = dev.names.get(base)
    if qualified is None or (base in dev.templates and not template_args):
        tally("nvcc: kernel not nameable for NVRTC")
        return None
    expr = f"&{qualified}" + (f"<{', '.join(template_args)}>" if base in dev.templates else "")
    options = [f"-arch={arch}", "-lineinfo", "-Xptxas", "-v", "-default-device"]
    options += [f"-D{k}={v}" for k, v in sorted(dev.defines.items())]
    options += [f"-I{d}" for d in [*incs, *nvrtc.include_dirs(nvcc)]]
    # a text NVRTC refused once (a host header its kernel needs, ...) goes to nvcc for every configuration: one
    # marker per text, options and NVRTC version, whatever the configuration's -D values
    tag = hashlib.sha256(json.dumps([dev.text, options, version, expr]).encode()).hexdigest()[:32]
    refused, slow = cache / f"nvrtc-refused-{tag}", cache / f"nvrtc-slow-{tag}"
    options += [f"-D{k}={v}" for k, v in sorted(defines.items())]
    key = "r" + hashlib.sha256(json.dumps({"text": dev.text, "options": options, "nvrtc": version, "expr": expr,
                                           "format": CACHE_FORMAT}, sort_keys=True).encode()).hexdigest()[:39]
    meta = _load_cached(cache, key)  # a configuration NVRTC compiled before is served whatever was marked since
    if meta is None and (refused.exists() or slow.exists()):
        tally("nvcc: NVRTC refused the text before" if refused.exists() else "nvcc: NVRTC slow on the text before")
        return None
    if meta is None:
        scratch = scratch_name(source_path)
        with _stats_lock:
            stats["nvrtc_runs"] += 1
        t0 = time.perf_counter()
        try:
            res = nvrtc.compile_cubin(nvcc, dev.text, scratch, options, [expr], timeout=timeout)
        except nvrtc.TimedOut:
            raise CompileError(f"NVRTC took longer than {timeout:.0f} s compiling kernel '{kernel}' for {arch}; "
                               "the variant was abandoned", path=source_path) from None
        except nvrtc.Unsupported:  # its process crashed: nvcc compiles it, in a process of its own
            tally("nvcc: NVRTC's process ended", time.perf_counter() - t0)
            return None
        report = parse_ptxas_report(res.log) if res.ok else {}
        took = time.perf_counter() - t0
        if res.ok and res.lowered.get(expr) not in report:
            # compiled, but no resource report (NVRTC's ptxas answers code it compiled before from the CUDA JIT
            # cache without it: the pool runs with that cache off, nvrtc._Worker); nvcc compiles this one, nothing marked
            tally("nvcc: NVRTC gave no resource report", took)
            return None
        if not res.ok:
            tally("nvcc: NVRTC refused", took)
            return refused, res.log  # marked once nvcc compiles what NVRTC refused (not a variant's own error)
        tally("NVRTC", took)
        if took > NVRTC_SLOW_S:
            # a heavy template (unrolled expert code): ptxas and the optimizer dominate, NVRTC saves little, and
            # the exact compile of the confirmation would pay nvcc again; its other configurations go to nvcc
            try:
                _atomic_write(slow, b"")
            except OSError:
                pass
        shown, _, _ = _diagnostics(res.log, scratch, source_path)
        meta = _store_entry(cache, key, res.cubin, arch, options, shown, {}, report,
                            compiler=f"nvrtc {version}", symbol=res.lowered[expr])
    else:
        tally("NVRTC, cached")
    sym = meta["symbol"]
    report = {s: Resources(**r) for s, r in meta["report"].items()}
    return Compiled(cubin_path=str(cache / f"{key}.cubin"), symbol=sym, resources=report[sym],
                    source_hash=sha256_text(text), log=meta["log"])


SCRATCH_NAME_MAX = 64  # nvcc names its own temporary files after the source (tmpxft_..._NAME.cudafe1.c): within NAME_MAX


def scratch_name(source_path: str | None) -> str:
    """The name a source is compiled under in a scratch folder: the file's own name (diagnostics name it), ending in
    .cu; a long one cut and given a hash of the whole (nvcc's temporary files add their own prefix and suffix to it, and
    a 222-character corpus name passed the file system's 255: 'File name too long')."""
    name = Path(source_path).name if source_path else "kernel.cu"
    if not name.endswith(".cu"):
        name += ".cu"
    if len(name) > SCRATCH_NAME_MAX:
        name = f"{name[:SCRATCH_NAME_MAX - 16]}_{hashlib.sha256(name.encode()).hexdigest()[:12]}.cu"
    return name


def _compile_uncached(nvcc: str, text: str, kernel: str, arch: str, flags: list[str], cache: Path, key: str,
                      timeout: float, source_path: str | None) -> dict:
    scratch_name_ = scratch_name(source_path)
    tmp_root = cache / "tmp"
    tmp_root.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nvcc-", dir=tmp_root) as tmp:
        work = Path(tmp)
        (work / scratch_name_).write_text(text, encoding="utf-8")
        cmd = [nvcc, *flags, "-MD", "-MF", "deps.d", "-o", "out.cubin", scratch_name_]
        with _stats_lock:
            stats["nvcc_runs"] += 1
        try:
            rc, log = _run(cmd, str(work), timeout)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc took longer than {timeout:.0f} s compiling kernel '{kernel}' for {arch}; "
                               "the variant was abandoned", path=source_path) from None
        shown, epath, eline = _diagnostics(log, scratch_name_, source_path)
        if rc != 0 or not (work / "out.cubin").exists():
            errs = _error_lines(shown)
            syms = sorted(set(re.findall(r"'(_Z\w+)'", errs)))
            for sym, name in demangle(syms).items():
                errs = errs.replace(f"'{sym}'", f"'{name}'")
            raise CompileError(f"nvcc could not compile kernel '{kernel}' for {arch}:\n{errs}",
                               log=shown, path=epath, line=eline)
        report = parse_ptxas_report(log)
        root = toolkit_root(nvcc)
        deps = _read_deps(work / "deps.d", work, (root, "/usr/include", "/usr/lib", "/usr/local/cuda"))
        meta = _store_entry(cache, key, (work / "out.cubin").read_bytes(), arch, flags, shown, deps, report)
    return meta


def compile_many(jobs: list[dict], workers: int | None = None,
                 on_done: Callable[[int, Compiled | CompileError], None] | None = None,
                 cancel: threading.Event | None = None) -> list[Compiled | CompileError]:
    """``compile_kernel(**job)`` for every job, ``workers`` at a time (default: CPU count); results in job
    order. ``on_done(i, result)`` is called as each finishes; once ``cancel`` is set no new nvcc starts and
    the jobs not started get a CompileError saying they were cancelled. Timed as the run's "compile" phase."""
    if not jobs:
        return []
    with phase("compile"):
        return _compile_many(jobs, workers, on_done, cancel)


def _compile_many(jobs, workers, on_done, cancel) -> list[Compiled | CompileError]:
    results: list[Compiled | CompileError | None] = [None] * len(jobs)
    lock = threading.Lock()
    run = timeline.current()  # the run's timeline, in the pool's threads too (its tallies of each compile)

    def one(i: int) -> None:
        token = timeline.bind_tallies(run)
        try:
            _one(i)
        finally:
            timeline.unbind(token)

    def _one(i: int) -> None:
        if cancel is not None and cancel.is_set():
            res: Compiled | CompileError = CompileError("compilation cancelled")
        else:
            try:
                res = compile_kernel(**jobs[i])
            except CompileError as e:
                res = e
            except KerntuneError as e:
                res = CompileError(e.message, path=e.path, line=e.line, col=e.col)
        results[i] = res
        if on_done is not None:
            with lock:
                on_done(i, res)

    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="nvcc") as ex:
        for f in [ex.submit(one, i) for i in range(len(jobs))]:
            f.result()
    return results  # type: ignore[return-value]
