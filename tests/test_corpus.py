"""The corpus of kernel styles (bench/corpus): the manifest, every variant's spec read and validated by the
project's own code, the family counts, the size sets (a large one, a tail), and, with nvcc, every file built
with its host launcher for sm_90 and run on the host with launch-capturing runtime stubs, so that each launch
the launcher makes is compared with the spec's grid/block/smem for every size set.

The nvcc part compiles each variant once (in parallel) and keeps the captured launches in the kerntune cache,
keyed by the variant's text, the harness, the stubs and the nvcc version: a run with nothing changed takes
seconds, a first run one nvcc build per variant.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import kernel_has_errors, parse_cuda
from agent_core.model import KerntuneError
from agent_core.templating.templatize import templatize
from agent_core.search.tuner import read_source
from tests.nvcc_check import CHECK_FLAGS

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "bench" / "corpus"
MANIFEST = tomllib.loads((CORPUS / "corpus.toml").read_text())["variant"]
FAMILIES = ("gated_act", "rms_norm", "fused_add_rms_norm", "layer_norm", "softmax", "merge_attn_states", "rotary",
            "group_quant")
LARGE_BYTES = 64 * 2 ** 20
IDS = [v["file"] for v in MANIFEST]


def _read(v: dict):
    """(parsed file, kernel, spec, tunable parameter names) of one manifest entry."""
    path = CORPUS / v["file"]
    cf = parse_cuda(read_source(str(path)), str(path))
    k = cf.kernel(v["kernel"])
    try:
        names = set(templatize(cf, v["kernel"]).space.params)
    except KerntuneError:
        names = set()  # not tunable by kerntune's structural templater; the spec must still be valid
    return cf, k, spec_mod.find_spec(cf, v["kernel"]), names


# --------------------------------------------------------------------------------------------- manifest
def test_manifest_entries_are_complete_and_unique():
    keys = {"file", "kernel", "family", "style", "dtype", "launch", "call"}
    for v in MANIFEST:
        assert set(v) == keys, f"{v.get('file')}: fields {sorted(set(v) ^ keys)}"
        assert all(isinstance(v[k], str) and v[k].strip() for k in keys), v["file"]
        assert v["family"] in FAMILIES or re.fullmatch(r"other:\w+", v["family"]), v["family"]
        assert v["file"].split("/")[0] == ("other" if v["family"].startswith("other:") else v["family"]), v["file"]
    assert len(IDS) == len(set(IDS))


def test_every_corpus_file_is_in_the_manifest():
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.cu")}
    assert on_disk == set(IDS)


def test_family_counts():
    count: dict[str, int] = {}
    for v in MANIFEST:
        fam = "other" if v["family"].startswith("other:") else v["family"]
        count[fam] = count.get(fam, 0) + 1
    for fam in FAMILIES:
        assert count.get(fam, 0) >= 4, f"{fam}: {count.get(fam, 0)} variants"
    assert count.get("other", 0) >= 8


# --------------------------------------------------------------------------------------------- specs
@pytest.mark.parametrize("v", MANIFEST, ids=IDS)
def test_variant_parses_and_its_spec_validates(v):
    cf, k, spec, names = _read(v)
    assert not cf.errors, [e.message for e in cf.errors]
    assert not kernel_has_errors(cf, v["kernel"])
    assert spec is not None, f"{v['file']}: no spec for {v['kernel']}"
    spec_mod.validate_spec(spec, k, names)
    assert len(spec.sizes) == 3


@pytest.mark.parametrize("v", MANIFEST, ids=IDS)
def test_variant_has_a_large_and_a_tail_size_set(v):
    _, _, spec, _ = _read(v)
    moved = [spec_mod.bytes_moved(spec, s) for s in spec.sizes]
    assert max(moved) >= LARGE_BYTES, f"{v['file']}: largest size set moves {max(moved)} bytes"
    # a tail: some size that no power-of-two block size or vector width divides
    assert any(any(x % 2 for x in s.values()) for s in spec.sizes), f"{v['file']}: no size set with an odd size"
    for s in spec.sizes:  # every launch of the spec evaluates for every size set
        ln = spec_mod.launch(spec, s)
        assert all(d >= 1 for d in ln.grid + ln.block) and ln.smem >= 0


# --------------------------------------------------------------------------------------------- nvcc
STUBS = r"""
// Launch-capturing replacements for the CUDA runtime entry points that nvcc's generated host code calls
// (linked with -cudart none): registration is recorded, each launch is printed, nothing runs on a device.
#include <cuda_runtime.h>
#include <cstdio>
#include <map>
#include <string>

static std::map<const void*, std::string>& names() { static std::map<const void*, std::string> m; return m; }
static dim3 g_grid, g_block;
static size_t g_smem;
static void* g_stream;

static void record(const void* fn, dim3 g, dim3 b, size_t smem) {
  auto it = names().find(fn);
  std::printf("LAUNCH %s %u %u %u %u %u %u %zu\n", it == names().end() ? "?" : it->second.c_str(), g.x, g.y, g.z,
              b.x, b.y, b.z, smem);
}

extern "C" {
void** __cudaRegisterFatBinary(void*) { static void* handle = nullptr; return &handle; }
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
char __cudaInitModule(void**) { return 0; }
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterFunction(void**, const char* hostFun, char*, const char* deviceName, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {
  names()[hostFun] = deviceName;
}
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream) {
  g_grid = gridDim; g_block = blockDim; g_smem = sharedMem; g_stream = stream;
  return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  *gridDim = g_grid; *blockDim = g_block; *sharedMem = g_smem; *(void**)stream = g_stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* fn) { *kernel = (cudaKernel_t)fn; return cudaSuccess; }
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void**, size_t smem, cudaStream_t) {
  record((const void*)k, g, b, smem); return cudaSuccess;
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 g, dim3 b, void**, size_t smem, cudaStream_t) {
  record((const void*)k, g, b, smem); return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void* fn, dim3 g, dim3 b, void**, size_t smem, cudaStream_t) {
  record(fn, g, b, smem); return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
}
"""

NVCC_FLAGS = ["-arch=sm_90", "-std=c++17", "-cudart", "none", "-w", *CHECK_FLAGS]  # the device code is never run


def _harness(v: dict, spec) -> str:
    """A .cu that includes the variant and calls its host launcher once per size set."""
    lines = [f'#include "{CORPUS / v["file"]}"', "#include <cstdio>", "", "int main() {"]
    for i, sizes in enumerate(spec.sizes):
        decl = ", ".join(f"{n} = {val}LL" for n, val in sizes.items())
        lines += ["  {", f"    const long long {decl};"] + [f"    (void){n};" for n in sizes]
        lines += [f'    std::printf("SET {i}\\n");', f"    {v['call']};", "  }"]
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def _cache() -> Path:
    from agent_core.workspace import cache_dir
    d = cache_dir().parent / "corpus-launches"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _run(cmd: list[str], cwd: str) -> tuple[int, str]:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
    return r.returncode, r.stdout + r.stderr


def _build_and_run(nvcc: str, version: str, stubs_obj: Path, v: dict, spec) -> tuple[bool, str]:
    """(ok, the harness's output or the error) for one variant; outputs of successful runs are cached."""
    text = _harness(v, spec)
    key = hashlib.sha256(json.dumps([(CORPUS / v["file"]).read_text(), text, STUBS, version, NVCC_FLAGS]).encode())
    hit = _cache() / f"{key.hexdigest()[:40]}.out"
    if hit.is_file():
        return True, hit.read_text()
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        (Path(tmp) / "harness.cu").write_text(text)
        rc, log = _run([nvcc, *NVCC_FLAGS, "harness.cu", str(stubs_obj), "-o", "harness"], tmp)
        if rc != 0:
            return False, f"nvcc failed:\n{log[-4000:]}"
        rc, out = _run([str(Path(tmp) / "harness")], tmp)
        if rc != 0:
            return False, f"the harness exited with {rc}:\n{out[-4000:]}"
    _atomic_write(hit, out.encode())
    return True, out


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """{file: (ok, output)} for every variant, built in parallel."""
    from agent_core.measure.compiler import nvcc_version
    nvcc = shutil.which("nvcc")
    version = nvcc_version()
    stubs_obj = _cache() / f"stubs-{hashlib.sha256((STUBS + version).encode()).hexdigest()[:40]}.o"
    if not stubs_obj.is_file():
        tmp = tmp_path_factory.mktemp("stubs")
        (tmp / "stubs.cpp").write_text(STUBS)
        rc, log = _run([nvcc, "-std=c++17", "-c", "stubs.cpp", "-o", "stubs.o"], str(tmp))
        assert rc == 0, f"the launch-capturing stubs do not build with this nvcc ({version}):\n{log}"
        _atomic_write(stubs_obj, (tmp / "stubs.o").read_bytes())
    specs = {v["file"]: _read(v)[2] for v in MANIFEST}
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as ex:
        futs = {v["file"]: ex.submit(_build_and_run, nvcc, version, stubs_obj, v, specs[v["file"]])
                for v in MANIFEST}
        return {f: fut.result() for f, fut in futs.items()}


def _kernel_of(mangled: str) -> str:
    from agent_core.measure.compiler import demangle, split_demangled
    return split_demangled(demangle([mangled])[mangled])[0].split("::")[-1]


@pytest.mark.nvcc
@pytest.mark.timeout(1800)  # a first run builds every variant; later runs read the cache
@pytest.mark.parametrize("v", MANIFEST, ids=IDS)
def test_variant_builds_and_its_launcher_launches_what_the_spec_says(v, launches):
    ok, out = launches[v["file"]]
    assert ok, f"{v['file']}: {out}"
    _, _, spec, _ = _read(v)
    got: dict[int, list[tuple]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("SET "):
            current = int(line.split()[1])
            got[current] = []
        elif line.startswith("LAUNCH "):
            _, name, *nums = line.split()
            got[current].append((name, *map(int, nums)))
    assert sorted(got) == list(range(len(spec.sizes))), out
    for i, sizes in enumerate(spec.sizes):
        assert len(got[i]) == 1, f"size set {i + 1}: the launcher made {len(got[i])} launches: {got[i]}"
        name, gx, gy, gz, bx, by, bz, smem = got[i][0]
        assert _kernel_of(name) == v["kernel"], f"size set {i + 1} launched {name}"
        want = spec_mod.launch(spec, sizes)
        assert ((gx, gy, gz), (bx, by, bz), smem) == (tuple(want.grid), tuple(want.block), want.smem), \
            f"size set {i + 1} {sizes}: launcher <<<({gx}, {gy}, {gz}), ({bx}, {by}, {bz}), {smem}>>>, spec {want}"
