"""ptxas report parsing (on logs captured from nvcc 13.0), entry selection, cache, parallel compiles."""

import os
import threading

import pytest

from agent_core.measure import compiler
from agent_core.measure.compiler import CompileError, compile_kernel, compile_many, parse_ptxas_report
from agent_core.model import KerntuneError, Resources

KERNELS = r"""
__device__ __noinline__ float helper(float x) { float a[16]; for (int i = 0; i < 16; ++i) a[i] = x * i; return a[(int)x & 15]; }

__global__ void heavy(const float* __restrict__ x, float* out, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = x[threadIdx.x + i * n];
  float s = 0;
#pragma unroll
  for (int j = 0; j < 64; ++j) for (int i = 0; i < 64; ++i) s += acc[i] * acc[(i + j) & 63];
  out[threadIdx.x] = s + helper(s);
}

__global__ void tiled(const float* x, float* out) {
  __shared__ float tile[32][33];
  tile[threadIdx.y][threadIdx.x] = x[threadIdx.y * 32 + threadIdx.x];
  __syncthreads();
  out[threadIdx.x * 32 + threadIdx.y] = tile[threadIdx.x][threadIdx.y];
}

template <int N, typename T>
__global__ void scale(T* x, T a) { for (int i = 0; i < N; ++i) x[threadIdx.x * N + i] *= a; }

extern "C" __global__ void plain(int* p) { p[threadIdx.x] = 1; }

namespace ns { __global__ void scale(float* x) { x[0] = 0; } }

void host(float* x, float* y) {
  scale<4, float><<<1, 32>>>(x, 2.0f);
  scale<8, double><<<1, 32>>>((double*)x, 2.0);
  ns::scale<<<1,1>>>(x);
}
"""

# `nvcc -cubin -arch=sm_90 -O3 -lineinfo -Xptxas -v -maxrregcount=32` on KERNELS, nvcc 13.0.88
CAPTURED_LOG = """\
ptxas info    : Overriding maximum register limit 256 for '_ZN2ns5scaleEPf' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleILi8EdEvPT0_S0_' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5scaleILi4EfEvPT0_S0_' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'plain' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5tiledPKfPf' with  32 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for '_Z5heavyPKfPfi' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2ns5scaleEPf' for 'sm_90'
ptxas info    : Function properties for _ZN2ns5scaleEPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, used 0 barriers
ptxas info    : Compile time = 2.433 ms
ptxas info    : Compiling entry function '_Z5scaleILi8EdEvPT0_S0_' for 'sm_90'
ptxas info    : Function properties for _Z5scaleILi8EdEvPT0_S0_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 22 registers, used 0 barriers
ptxas info    : Compile time = 1.831 ms
ptxas info    : Compiling entry function '_Z5scaleILi4EfEvPT0_S0_' for 'sm_90'
ptxas info    : Function properties for _Z5scaleILi4EfEvPT0_S0_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 0 barriers
ptxas info    : Compile time = 1.074 ms
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 0.630 ms
ptxas info    : Compiling entry function '_Z5tiledPKfPf' for 'sm_90'
ptxas info    : Function properties for _Z5tiledPKfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 4224 bytes smem
ptxas info    : Compile time = 1.213 ms
ptxas info    : Compiling entry function '_Z5heavyPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z5heavyPKfPfi
    9872 bytes stack frame, 9792 bytes spill stores, 20640 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 9872 bytes cumulative stack size
ptxas info    : Compile time = 1047.287 ms
ptxas info    : Function properties for _Z6helperf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

# the CUDA 12 layout of the same report (cmem on the "Used" line, no barriers)
CUDA12_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5tiledPKfPf' for 'sm_80'
ptxas info    : Function properties for _Z5tiledPKfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 4224 bytes smem, 368 bytes cmem[0]
"""

NAMES = {"_ZN2ns5scaleEPf": "ns::scale(float*)",
         "_Z5scaleILi8EdEvPT0_S0_": "void scale<8, double>(double*, double)",
         "_Z5scaleILi4EfEvPT0_S0_": "void scale<4, float>(float*, float)",
         "plain": "plain", "_Z5tiledPKfPf": "tiled(float const*, float*)",
         "_Z5heavyPKfPfi": "heavy(float const*, float*, int)"}


def test_parse_captured_report():
    rep = parse_ptxas_report(CAPTURED_LOG)
    assert set(rep) == set(NAMES)  # the non-entry helper is not an entry
    assert rep["_Z5heavyPKfPfi"] == Resources(registers=32, static_smem=0, stack_bytes=9872, spill_stores=9792,
                                              spill_loads=20640)
    assert rep["_Z5tiledPKfPf"] == Resources(registers=12, static_smem=4224)
    assert rep["plain"].registers == 10
    assert rep["_Z5scaleILi8EdEvPT0_S0_"].registers == 22 and rep["_Z5scaleILi4EfEvPT0_S0_"].registers == 14
    assert parse_ptxas_report(CUDA12_LOG) == {"_Z5tiledPKfPf": Resources(registers=12, static_smem=4224)}
    assert parse_ptxas_report("") == {}


def test_split_demangled():
    assert compiler.split_demangled("void scale<8, double>(double*, double)") == ("scale", ["8", "double"])
    assert compiler.split_demangled("ns::scale(float*)") == ("ns::scale", None)
    assert compiler.split_demangled("void k<4u, true, (char)65>()") == ("k", ["4u", "true", "(char)65"])
    assert compiler.split_demangled("void k<foo<int, 2>, 3>(foo<int, 2>*)") == ("k", ["foo<int, 2>", "3"])
    assert compiler.split_demangled("plain") == ("plain", None)


def test_select_symbol():
    rep = parse_ptxas_report(CAPTURED_LOG)
    sel = compiler.select_symbol
    assert sel(rep, NAMES, "plain") == "plain"
    assert sel(rep, NAMES, "heavy") == "_Z5heavyPKfPfi"
    assert sel(rep, NAMES, "ns::scale") == "_ZN2ns5scaleEPf"
    assert sel(rep, NAMES, "scale", ["4", "float"]) == "_Z5scaleILi4EfEvPT0_S0_"
    assert sel(rep, NAMES, "scale", ["8", " double "]) == "_Z5scaleILi8EdEvPT0_S0_"
    with pytest.raises(CompileError) as e:
        sel(rep, NAMES, "scale")
    assert "scale<8, double>" in e.value.message and "scale<4, float>" in e.value.message
    with pytest.raises(CompileError, match="none match template arguments <16, float>"):
        sel(rep, NAMES, "scale", ["16", "float"])
    with pytest.raises(CompileError, match="no entry function for kernel 'missing'.*plain"):
        sel(rep, NAMES, "missing")
    # literal spellings: 4 matches 4u, 1 matches true, 65 matches (char)65
    k = {"_Z1kILj4ELb1ELc65EEvv": "void k<4u, true, (char)65>()", "_Z1kILj2ELb1ELc65EEvv": "void k<2u, true, (char)65>()"}
    assert sel({s: Resources(1, 0) for s in k}, k, "k", ["4", "1", "65"]) == "_Z1kILj4ELb1ELc65EEvv"
    # fixed-width typedefs as the demangler spells them (int32_t is int, uint64_t unsigned long on Linux x86_64)
    k = {"a": "void ns::k<true, 8u, __nv_bfloat16, int>(int const*)",
         "b": "void ns::k<true, 8u, __nv_bfloat16, long>(long const*)",
         "c": "void ns::k<false, 8u, __nv_bfloat16, unsigned long>(unsigned long const*)"}
    res = {s: Resources(1, 0) for s in k}
    assert sel(res, k, "ns::k", ["true", "8", "__nv_bfloat16", "int32_t"]) == "a"
    assert sel(res, k, "ns::k", ["true", "8", "nv_bfloat16", "std::int64_t"]) == "b"
    assert sel(res, k, "ns::k", ["false", "8", "__nv_bfloat16", "uint64_t"]) == "c"
    # a function as a template argument (ColossalAI's ACT_FN): `silu_kernel<T>` as the demangler spells the pointer
    k = {"f": "void k<__nv_bfloat16, &(__nv_bfloat16 silu_kernel<__nv_bfloat16>(__nv_bfloat16 const&))>(long)",
         "h": "void k<__half, &(__half silu_kernel<__half>(__half const&))>(long)"}
    res = {s: Resources(1, 0) for s in k}
    assert sel(res, k, "k", ["__nv_bfloat16", "silu_kernel<__nv_bfloat16>"]) == "f"
    assert sel(res, k, "k", ["half", "&silu_kernel<half>"]) == "h"
    # the CUDA headers' pair types by their short names (rtp-llm's <half2, 512, 4, 1>)
    k = {"p": "void atex::impl::k<__half2, 512u, 4u, 1u>(__half2 const*)",
         "q": "void atex::impl::k<__half2, 1024u, 4u, 1u>(__half2 const*)",
         "r": "void atex::impl::k<__nv_bfloat162, 512u, 4u, 1u>(__nv_bfloat162 const*)"}
    res = {s: Resources(1, 0) for s in k}
    assert sel(res, k, "k", ["half2", "512", "4", "1"]) == "p"
    assert sel(res, k, "k", ["nv_bfloat162", "512", "4", "1"]) == "r"


# --------------------------------------------------------------------------------------------- with nvcc
@pytest.mark.nvcc
def test_compile_entries_and_resources(tmp_path):
    c = compile_kernel(KERNELS, "heavy", cache_dir=tmp_path, extra_flags=("-maxrregcount=32",))
    assert c.symbol == "_Z5heavyPKfPfi"
    assert c.resources.registers <= 32 and c.resources.spill_stores > 0 and c.resources.spill_loads > 0
    assert os.path.getsize(c.cubin_path) > 0 and "Compiling entry function" in c.log
    assert parse_ptxas_report(c.log)[c.symbol] == c.resources
    assert compile_kernel(KERNELS, "tiled", cache_dir=tmp_path).resources.static_smem == 32 * 33 * 4
    assert compile_kernel(KERNELS, "plain", cache_dir=tmp_path).symbol == "plain"
    assert compile_kernel(KERNELS, "ns::scale", cache_dir=tmp_path).symbol == "_ZN2ns5scaleEPf"
    a = compile_kernel(KERNELS, "scale", cache_dir=tmp_path, template_args=["4", "float"])
    b = compile_kernel(KERNELS, "scale", cache_dir=tmp_path, template_args=["8", "double"])
    assert (a.symbol, b.symbol) == ("_Z5scaleILi4EfEvPT0_S0_", "_Z5scaleILi8EdEvPT0_S0_")
    with pytest.raises(CompileError, match=r"2 compiled instantiations.*scale<8, double>.*scale<4, float>") as e:
        compile_kernel(KERNELS, "scale", cache_dir=tmp_path)
    assert "Compiling entry function" in e.value.log


NAMED_BY_CONSTANTS = r"""
#define ACT_SILU 0
#define ACT_GELU (ACT_SILU + 1)
typedef enum Fmt_t { FP4 = 1, NF4 } Fmt_t;
template <int ACT, int FMT>
__global__ void act(float* x) { x[threadIdx.x] *= ACT == ACT_GELU ? 0.5f : (FMT == NF4 ? 2.f : 1.f); }
void launch(float* x, bool gelu) {
  if (gelu) act<ACT_GELU, NF4><<<1, 32>>>(x); else act<ACT_SILU, FP4><<<1, 32>>>(x);
}
"""


ENUM_TYPED = r"""
enum DataType_t { FP4 = 1, NF4 = 2 };
template <typename T, DataType_t DT>
__global__ void quant(T* x) { x[threadIdx.x] *= DT == NF4 ? T(2) : T(1); }
void launch(float* x, bool nf4) { if (nf4) quant<float, NF4><<<1, 32>>>(x); else quant<float, FP4><<<1, 32>>>(x); }
"""


@pytest.mark.nvcc
def test_an_enumerator_of_an_enum_typed_template_parameter(tmp_path):
    """bitsandbytes' <half, 256, 2, 0, NF4> with DATA_TYPE of an enum type: nvcc's entry chosen by the value (the
    demangled name spells 2), NVRTC's name expression keeps the enumerator (an int is no argument of an enum type)."""
    from agent_core.measure import compiler
    before = dict(compiler.stats)
    c = compile_kernel(ENUM_TYPED, "quant", cache_dir=tmp_path, template_args=["float", "NF4"])
    assert c.symbol == "_Z5quantIfL10DataType_t2EEvPT_"
    assert not list(tmp_path.glob("nvrtc-refused-*"))  # NVRTC, where it is here, served it (or nvcc did, unmarked)
    if compiler.stats["nvrtc_runs"] > before["nvrtc_runs"]:
        assert compiler.stats["nvcc_runs"] == before["nvcc_runs"]
    assert compile_kernel(ENUM_TYPED, "quant", cache_dir=tmp_path, template_args=["float", "FP4"],
                          exact=True).symbol == "_Z5quantIfL10DataType_t1EEvPT_"


@pytest.mark.nvcc
def test_template_arguments_named_by_the_files_constants(tmp_path):
    """A spec names the instantiation as the host code does (<ACT_GELU, NF4>): a macro and an enumerator, read as
    their values where the compiled entries spell values (act<1, 2>)."""
    a = compile_kernel(NAMED_BY_CONSTANTS, "act", cache_dir=tmp_path, template_args=["ACT_GELU", "NF4"])
    b = compile_kernel(NAMED_BY_CONSTANTS, "act", cache_dir=tmp_path, template_args=["ACT_SILU", "Fmt_t::FP4"])
    assert (a.symbol, b.symbol) == ("_Z3actILi1ELi2EEvPf", "_Z3actILi0ELi1EEvPf")
    # an instantiation the file never launches: nvcc compiles it too (the spec's arguments instantiate it)
    assert compile_kernel(NAMED_BY_CONSTANTS, "act", cache_dir=tmp_path, template_args=["NF4", "NF4"],
                          exact=True).symbol == "_Z3actILi2ELi2EEvPf"


LAUNCHED_FROM_A_TEMPLATE = r"""
namespace lib {
template <typename T, int N>
__global__ void scale(T* x) { if (threadIdx.x < N) x[threadIdx.x] *= T(2); }
}  // namespace lib
template <typename T, int N>
void launch(T* x, cudaStream_t s) { lib::scale<T, N><<<1, 32, 0, s>>>(x); }  // nothing instantiates launch
"""


@pytest.mark.nvcc
def test_a_kernel_launched_only_from_a_template_nothing_instantiates(tmp_path):
    """AITemplate's launchers are templates the file never instantiates: nvcc would compile no kernel. The spec's
    template arguments instantiate it (its address taken in its own namespace), for nvcc and NVRTC alike; without
    them the error says how a templated kernel gets compiled."""
    c = compile_kernel(LAUNCHED_FROM_A_TEMPLATE, "scale", cache_dir=tmp_path, template_args=["float", "16"], exact=True)
    assert c.symbol == "_ZN3lib5scaleIfLi16EEEvPT_"
    with pytest.raises(CompileError, match="compiled only where host code launches it or instantiates it"):
        compile_kernel(LAUNCHED_FROM_A_TEMPLATE, "scale", cache_dir=tmp_path, exact=True)


@pytest.mark.nvcc
def test_cache_hit_skips_nvcc(tmp_path):
    src = "#include \"consts.h\"\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE * K; }\n"
    (tmp_path / "consts.h").write_text("#define K 2\n")
    cache = tmp_path / "cache"
    job = dict(text=src, kernel="k", defines={"SCALE": 3}, include_dirs=[str(tmp_path)], cache_dir=cache)
    runs = compiler.stats["nvcc_runs"]
    first = compile_kernel(**job)
    assert compiler.stats["nvcc_runs"] == runs + 1
    mtime = os.stat(first.cubin_path).st_mtime_ns
    second = compile_kernel(**job)
    assert compiler.stats["nvcc_runs"] == runs + 1  # answered from the cache
    assert second == first and os.stat(second.cubin_path).st_mtime_ns == mtime
    compile_kernel(**{**job, "defines": {"SCALE": 4}})  # other defines: another entry
    assert compiler.stats["nvcc_runs"] == runs + 2
    compile_kernel(**{**job, "arch": "sm_80"})
    assert compiler.stats["nvcc_runs"] == runs + 3
    (tmp_path / "consts.h").write_text("#define K 5\n")  # an included header changed: compile again
    compile_kernel(**job)
    assert compiler.stats["nvcc_runs"] == runs + 4
    compile_kernel(**job)
    assert compiler.stats["nvcc_runs"] == runs + 4
    assert not any((cache / "tmp").iterdir())  # scratch folders are removed


VARIANTS = r"""
#ifndef VEC
#define VEC 1
#endif
static_assert(VEC != 3, "VEC must be a power of two");
__global__ void copy(const float* x, float* y, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
  for (int v = 0; v < VEC; ++v) if (i + v < n) y[i + v] = x[i + v];
}
"""


@pytest.mark.nvcc
def test_compile_many_in_order_with_one_failure(tmp_path):
    jobs = [dict(text=VARIANTS, kernel="copy", defines={"VEC": v}, cache_dir=tmp_path, source_path="/src/copy.cu")
            for v in (1, 2, 3, 4)]
    done = []
    results = compile_many(jobs, workers=2, on_done=lambda i, r: done.append(i))
    assert sorted(done) == [0, 1, 2, 3]
    ok = [r for i, r in enumerate(results) if i != 2]
    assert all(not isinstance(r, Exception) and r.symbol == "_Z4copyPKfPfi" for r in ok)
    assert len({r.cubin_path for r in ok}) == 3
    err = results[2]
    assert isinstance(err, CompileError) and isinstance(err, KerntuneError)
    assert "VEC must be a power of two" in err.log and "VEC must be a power of two" in err.message
    assert err.path == "/src/copy.cu" and err.line == 4  # 0-based line of the static_assert
    assert str(err).startswith("/src/copy.cu:5: ")


@pytest.mark.nvcc
def test_compile_many_cancelled_launches_nothing(tmp_path):
    cancel = threading.Event()
    cancel.set()
    runs = compiler.stats["nvcc_runs"]
    jobs = [dict(text=VARIANTS, kernel="copy", defines={"VEC": v}, cache_dir=tmp_path) for v in (1, 2)]
    results = compile_many(jobs, cancel=cancel)
    assert all(isinstance(r, CompileError) and "cancelled" in r.message for r in results)
    assert compiler.stats["nvcc_runs"] == runs


@pytest.mark.nvcc
def test_compile_error_points_at_the_user_file(tmp_path, capfd):
    src = "__global__ void bad(float* x) {\n  x[0] = undefined_thing;\n}\n"
    with pytest.raises(CompileError) as e:
        compile_kernel(src, "bad", cache_dir=tmp_path, source_path="/home/u/k.cu")
    assert (e.value.path, e.value.line) == ("/home/u/k.cu", 1)
    assert '/home/u/k.cu(2): error: identifier "undefined_thing" is undefined' in e.value.message
    # ptxas errors come through too, with the kernel's readable name
    big = "__global__ void big(float* x) { __shared__ float s[20000]; s[threadIdx.x] = x[0]; __syncthreads(); x[1] = s[5]; }"
    with pytest.raises(CompileError, match=r"'big\(float\*\)' uses too much shared data"):
        compile_kernel(big, "big", cache_dir=tmp_path)
    out, _ = capfd.readouterr()
    assert out == ""  # nothing reached this process's stdout (the LSP stream in the server)


@pytest.mark.nvcc
def test_timeout_is_a_compile_error(tmp_path):
    with pytest.raises(CompileError, match="longer than"):
        compile_kernel(KERNELS, "heavy", cache_dir=tmp_path, timeout=0.05)
    assert not any((tmp_path / "tmp").iterdir())


@pytest.mark.nvcc
def test_nvcc_version():
    v = compiler.nvcc_version()
    assert v[0].isdigit() and v.count(".") >= 1
    assert compiler.nvcc_path() is not None


@pytest.mark.nvcc
def test_line_directive_maps_template_lines_to_the_user_file(tmp_path):
    # a template prepends a macro header; a `#line` after it makes nvcc report the user's own lines
    template = ("#ifndef KT_N\n#define KT_N 4\n#endif\n#line 1 \"/home/u/orig.cu\"\n"
                "__global__ void k(float* x) {\n  x[0] = KT_N + nope;\n}\n")
    with pytest.raises(CompileError) as e:
        compile_kernel(template, "k", cache_dir=tmp_path, source_path="/home/u/.kerntune/orig.k.kt.cu")
    assert (e.value.path, e.value.line) == ("/home/u/orig.cu", 1)


@pytest.mark.nvcc
def test_a_long_file_name_compiles_and_its_errors_name_the_file(tmp_path):
    """A 222-character source name (a corpus variant's) made nvcc's own temporary files (tmpxft_..._NAME.cudafe1.c)
    pass the file system's 255 ('File name too long'; batch 34's FlexGen variant on the H200): the scratch name is cut
    and hashed, and a compile error still names the user's path."""
    name = "x" * 219 + ".cu"
    assert len(compiler.scratch_name(f"/home/u/{name}")) <= compiler.SCRATCH_NAME_MAX
    assert compiler.scratch_name("/home/u/k.cu") == "k.cu"
    c = compile_kernel(KERNELS, "plain", cache_dir=tmp_path, source_path=f"/home/u/{name}")
    assert c.symbol == "plain"
    src = "__global__ void bad(float* x) {\n  x[0] = undefined_thing;\n}\n"
    with pytest.raises(CompileError) as e:
        compile_kernel(src, "bad", cache_dir=tmp_path, source_path=f"/home/u/{name}")
    assert e.value.path == f"/home/u/{name}" and f"/home/u/{name}(2): error" in e.value.message
