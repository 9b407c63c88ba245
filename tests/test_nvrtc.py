"""agent_core.measure.nvrtc: the device-only reduction (offline), and NVRTC against nvcc where both are here."""

import glob
import os
import shutil
from pathlib import Path

import pytest

from agent_core.measure import compiler, nvrtc

ROOT = Path(__file__).resolve().parent.parent

HOSTY = r'''#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cfloat>
#include <vector>
#include <algorithm>

namespace ops {
constexpr int div_up(int a, int b) { return (a + b - 1) / b; }

template <typename T, int VEC>
__global__ void scale(T* __restrict__ y, const T* __restrict__ x, float s, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = (T)((float)x[i] * s + FLT_MAX * 0.f);
}

int pick_threads(int n) { return std::min(n, 256); }

template <typename T>
void launch(T* y, const T* x, float s, int64_t n, cudaStream_t st) {
  std::vector<int> unused(3);
  int t = pick_threads((int)n);
  scale<T, 1><<<div_up((int)n, t), t, 0, st>>>(y, x, s, n);
}
template void launch<half>(half*, const half*, float, int64_t, cudaStream_t);
}  // namespace ops

extern "C" void run(half* y, const half* x, float s, int64_t n) { ops::launch<half>(y, x, s, n, 0); }
'''


def test_device_only_blanks_host_code_and_keeps_every_line():
    dev = nvrtc.device_only(HOSTY)
    assert dev.text.count("\n") >= HOSTY.count("\n")
    assert dev.text.splitlines()[:len(HOSTY.splitlines())] == [  # line for line: kept or blanked
        a if a.strip() in (b.strip(), "") or a == b else a for a, b in zip(dev.text.splitlines(), HOSTY.splitlines())]
    kept = dev.text
    assert "__global__ void scale" in kept and "constexpr int div_up" in kept
    for host in ("pick_threads", "std::vector", "template void launch", 'extern "C"', "<<<", "#include <vector>",
                 "#include <algorithm>", "#include <cfloat>"):
        assert host not in kept, host
    assert "#include <cuda/std/cstdint>" in kept and "#include <cuda_fp16.h>" in kept
    for a, b in zip(kept.splitlines(), HOSTY.splitlines()):  # a line is the user's line or blank
        assert a == b or a.strip() == "" or a.startswith("#include <cuda/std/"), (a, b)
    assert dev.names == {"scale": "ops::scale"} and dev.templates == {"scale"}
    assert dev.defines["FLT_MAX"] == "__FLT_MAX__"  # <cfloat> blanked: its macros come as -D options
    assert kept.rstrip().endswith("using namespace ops;")  # template arguments spelled as inside the namespace


def test_a_local_include_is_left_to_nvcc():
    with pytest.raises(nvrtc.Unsupported):
        nvrtc.device_only('#include "common.cuh"\n__global__ void k(float* x) { x[0] = 1.f; }\n')


@pytest.mark.parametrize("line", ['#pragma push_macro("BLOCK")', "#ifdef __NVCC__", "#if defined(__CUDACC_RTC__)",
                                  "#if __GNUC__ > 9"])
def test_what_nvrtc_reads_otherwise_is_left_to_nvcc(line):
    # NVRTC ignores push/pop_macro (a dispatch written by apply uses them) and defines other compiler macros
    with pytest.raises(nvrtc.Unsupported, match="otherwise than nvcc"):
        nvrtc.device_only(line + "\n__global__ void k(float* x) { x[0] = 1.f; }\n")


def test_device_and_host_device_functions_stay():
    src = ("__host__ __device__ inline float sq(float v) { return v * v; }\n"
           "__device__ __forceinline__ float cube(float v) { return v * sq(v); }\n"
           "__host__ float host_only(float v) { return v; }\n"
           "static __global__ void k(float* x) { x[0] = cube(x[0]); }\n")
    dev = nvrtc.device_only(src)
    assert "sq(float v)" in dev.text and "cube(float v)" in dev.text and "host_only" not in dev.text
    assert dev.names == {"k": "k"} and not dev.templates


def test_a_kernel_declared_through_a_global_macro_stays():
    src = ("#define INFINIOP_CUDA_KERNEL __global__ void\n"
           "namespace op { INFINIOP_CUDA_KERNEL k(float* x) { x[0] = 1.f; } }\n"
           "template <int B> INFINIOP_CUDA_KERNEL t(float* x) { x[B] = 1.f; }\n"
           "void host(float* x) { op::k<<<1, 1>>>(x); }\n")
    dev = nvrtc.device_only(src)
    assert "INFINIOP_CUDA_KERNEL k(" in dev.text and "INFINIOP_CUDA_KERNEL t(" in dev.text and "host(" not in dev.text
    assert dev.names == {"k": "op::k", "t": "t"} and dev.templates == {"t"}


def _nvrtc_here():
    nvcc = compiler.nvcc_path()
    return nvcc is not None and nvrtc.available(nvcc) is not None


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or not _nvrtc_here(),
                    reason="needs nvcc and an NVRTC of its major version (KERNTUNE_NVRTC names one)")
def test_nvrtc_serves_a_kernel_with_host_code_and_nvcc_the_rest(tmp_path):
    nvcc = compiler.nvcc_path()
    before = dict(compiler.stats)
    c = compiler.compile_kernel(HOSTY, "scale", template_args=["half", "4"], cache_dir=tmp_path)
    assert Path(c.cubin_path).name.startswith("r") and compiler.stats["nvrtc_runs"] == before["nvrtc_runs"] + 1
    assert compiler.stats["nvcc_runs"] == before["nvcc_runs"]
    assert c.resources.registers > 0 and "scale" in c.symbol
    again = compiler.compile_kernel(HOSTY, "scale", template_args=["half", "4"], cache_dir=tmp_path)
    assert again == c and compiler.stats["nvrtc_runs"] == before["nvrtc_runs"] + 1  # from the cache
    # a kernel NVRTC cannot take (a host header its device code needs) goes to nvcc, and is remembered
    src = "#include <cmath>\n__global__ void k(float* x) { x[0] = std::sqrt(x[1]); }\n"
    c2 = compiler.compile_kernel(src, "k", cache_dir=tmp_path)
    assert not Path(c2.cubin_path).name.startswith("r") and list(tmp_path.glob("nvrtc-refused-*"))
    n = compiler.stats["nvrtc_runs"]
    compiler.compile_kernel(src, "k", defines={"X": 1}, cache_dir=tmp_path)  # another configuration: nvcc at once
    assert compiler.stats["nvrtc_runs"] == n
    # a template whose NVRTC compile is slow (heavy unrolled code: ptxas dominates, NVRTC saves little, the exact
    # confirmation would pay nvcc again) sends its other configurations to nvcc
    old = compiler.NVRTC_SLOW_S
    compiler.NVRTC_SLOW_S = 0.0
    try:
        slow = "__global__ void s(float* x) { x[threadIdx.x] += SCALE; }\n"
        first = compiler.compile_kernel(slow, "s", defines={"SCALE": 1}, cache_dir=tmp_path / "s")
        second = compiler.compile_kernel(slow, "s", defines={"SCALE": 2}, cache_dir=tmp_path / "s")
    finally:
        compiler.NVRTC_SLOW_S = old
    assert Path(first.cubin_path).name.startswith("r") and not Path(second.cubin_path).name.startswith("r")
    # a variant's own error fails in both and marks nothing: nvcc's message is the one reported
    bad = "__global__ void k(float* x) { x[0] = undefined_name; }\n"
    with pytest.raises(compiler.CompileError, match="undefined_name"):
        compiler.compile_kernel(bad, "k", cache_dir=tmp_path / "b")
    assert not list((tmp_path / "b").glob("nvrtc-refused-*"))
    assert nvcc


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or not _nvrtc_here(),
                    reason="needs nvcc and an NVRTC of its major version (KERNTUNE_NVRTC names one)")
def test_nvrtc_serves_a_kernel_declared_through_a_global_macro(tmp_path):
    src = ("#define OP_KERNEL __global__ void\n"
           "template <int B> OP_KERNEL k(float* x) { x[threadIdx.x] *= (float)B; }\n"
           "void host(float* x) { k<4><<<1, 32>>>(x); }\n")
    before = dict(compiler.stats)
    c = compiler.compile_kernel(src, "k", template_args=["4"], cache_dir=tmp_path)
    assert Path(c.cubin_path).name.startswith("r") and compiler.stats["nvrtc_runs"] == before["nvrtc_runs"] + 1
    assert c.resources.registers > 0


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or not _nvrtc_here(),
                    reason="needs nvcc and an NVRTC of its major version (KERNTUNE_NVRTC names one)")
def test_nvrtc_and_nvcc_agree_on_a_sample_of_the_corpus(tmp_path):
    from agent_core.source import spec as S
    from agent_core.source.cuda_parse import parse_cuda
    files = sorted(glob.glob(str(ROOT / "bench" / "corpus" / "*" / "*.cu")))[::9]
    served = 0
    for f in files:
        text = Path(f).read_text()
        cf = parse_cuda(text, f)
        for k in cf.kernels:
            sp = S.find_spec(cf, k.name)
            if sp is None:
                continue
            targs = S.instantiation(sp, k)
            try:
                a = compiler.compile_kernel(text, k.name, template_args=targs, cache_dir=tmp_path / "a",
                                            include_dirs=[str(Path(f).parent)], source_path=f)
            except compiler.CompileError:
                continue
            saved = os.environ.get("KERNTUNE_NVRTC")
            os.environ["KERNTUNE_NVRTC"] = "off"
            nvrtc._library.cache_clear()
            try:
                b = compiler.compile_kernel(text, k.name, template_args=targs, cache_dir=tmp_path / "b",
                                            include_dirs=[str(Path(f).parent)], source_path=f)
            except compiler.CompileError:
                continue  # nvcc alone cannot pick this instantiation either (the loop compiles it otherwise)
            finally:
                if saved is None:
                    del os.environ["KERNTUNE_NVRTC"]
                else:
                    os.environ["KERNTUNE_NVRTC"] = saved
                nvrtc._library.cache_clear()
            served += Path(a.cubin_path).name.startswith("r")
            assert a.resources.static_smem == b.resources.static_smem, f
    assert served >= len(files) // 2


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or not _nvrtc_here(),
                    reason="needs nvcc and an NVRTC of its major version (KERNTUNE_NVRTC names one)")
def test_a_crashed_nvrtc_process_costs_the_compile_nothing(tmp_path):
    # each compile's code differs (X is used): NVRTC 13 answers a program whose code it has compiled before from
    # its own cache, without ptxas's resource report, and such a compile goes to nvcc
    src = "__global__ void k(float* x) { x[threadIdx.x] *= 2.f + X; }\n"
    compiler.compile_kernel(src, "k", defines={"X": 0}, cache_dir=tmp_path / "a")  # a pool process is up and idle
    assert nvrtc._idle
    dying = nvrtc._Worker(str(tmp_path / "no-such-libnvrtc.so"))  # dies at start, as a crash in the library would
    with pytest.raises(nvrtc.Unsupported, match="process ended"):
        dying.call(("x", "k.cu", [], []), timeout=60)
    for w in nvrtc._idle:
        w.proc.kill()  # every idle process killed under the pool
        w.proc.wait()
    c = compiler.compile_kernel(src, "k", defines={"X": 2}, cache_dir=tmp_path / "c")
    why = [m.read_text()[:2000] for m in (tmp_path / "c").glob("nvrtc-refused-*")]
    assert Path(c.cubin_path).name.startswith("r"), (why, [w.proc.poll() for w in nvrtc._idle])  # NVRTC again
    # past the time limit: the process is killed and the compile is an error, as nvcc's would be
    heavy = "__global__ void h(float* x) {\n" + "".join(
        f"  #pragma unroll\n  for (int i{i} = 0; i{i} < 4096; ++i{i}) x[i{i} % 7] = sinf(x[i{i} % 5]);\n"
        for i in range(40)) + "}\n"
    with pytest.raises(compiler.CompileError, match="longer than"):
        compiler.compile_kernel(heavy, "h", cache_dir=tmp_path / "d", timeout=0.05)


def test_nvrtc_pool_processes_run_with_the_cuda_jit_cache_off(tmp_path, monkeypatch):
    """NVRTC's ptxas answers code it compiled before from the CUDA JIT cache without its -v resource report (on the
    H200 every compile of a second run over the same programs went to nvcc for it): the pool's processes run with
    CUDA_CACHE_DISABLE=1 (kerntune's own compile cache is the cache), whatever the caller's environment says."""
    import subprocess
    seen = {}

    class Popen:
        def __init__(self, cmd, **kw):
            seen.update(kw)
            raise OSError("not started")
    monkeypatch.setenv("CUDA_CACHE_DISABLE", "0")
    monkeypatch.setattr(subprocess, "Popen", Popen)
    with pytest.raises(OSError):
        nvrtc._Worker(str(tmp_path / "libnvrtc.so"))
    assert seen["env"]["CUDA_CACHE_DISABLE"] == "1" and seen["env"]["PATH"] == os.environ["PATH"]
