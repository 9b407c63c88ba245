"""Structural templatization (agent_core/templating/templatize.py) on real CUDA text: which constants become parameters,
with which sites, domains and constraints; ties between them; the spec's launch following the parameters;
error messages; and (with nvcc) that rendered configurations compile."""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent_core.source import spec as spec_mod
from agent_core.apply import render
from agent_core.source.cuda_parse import parse_cuda
from agent_core.model import KernelTemplate, KerntuneError, macro_name
from agent_core.templating.space import check_config, iter_configs
from agent_core.templating.templatize import (ALL_BLOCKS, GRIDS, HEADER_END, ITEMS, POW2_BLOCKS, UNROLLS, launch_exprs,
                                   templatize, tunable_sites)
from agent_core.search.tuner import _launches
from tests.nvcc_check import CHECK_FLAGS

ROOT = Path(__file__).resolve().parent.parent
CU = ROOT / "tests" / "data" / "cu"


def load(rel: str, kernel: str | None = None) -> KernelTemplate:
    path = ROOT / rel
    cf = parse_cuda(path.read_text(encoding="utf-8"), str(path))
    return templatize(cf, kernel or cf.kernels[0].name)


def inline(text: str, kernel: str, path: str = "inline.cu") -> KernelTemplate:
    return templatize(parse_cuda(text, path), kernel)


def sites_of(t: KernelTemplate, param: str) -> list[tuple[int, str, str]]:
    """(1-based line, original text, render) of each site of ``param``."""
    return [(s.span.line + 1, s.original_text, s.render) for s in t.sites if s.param == param]


def line_of(t: KernelTemplate, needle: str) -> int:
    """1-based line of the first line of the original text containing ``needle``."""
    return next(i for i, ln in enumerate(t.original_text.split("\n"), 1) if needle in ln)


def body(text: str) -> str:
    return text.split(HEADER_END, 1)[1].split("\n", 1)[1]


def check_space(t: KernelTemplate) -> None:
    """What every template must satisfy: originals in their domains, constraints true at the original, sites
    that are exactly their original text at their spans and lines, a round trip at the original."""
    orig = t.space.original_config()
    assert check_config(t.space, orig) is None
    for p in t.space.params.values():
        assert p.original in p.values and p.values == sorted(p.values) and p.why
    data = t.original_text.encode("utf-8")
    lines = t.original_text.split("\n")
    for s in t.sites:
        assert data[s.span.start:s.span.end].decode("utf-8") == s.original_text
        assert lines[s.span.line].encode("utf-8")[s.span.col:s.span.end_col].decode("utf-8") == s.original_text
        assert s.param in t.space.params
    assert render(t, orig) == t.original_text


REAL = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("examples/*.cu"), *ROOT.glob("bench/*.cu")])
FIXTURES = ["tests/data/cu/warp_reduce.cu", "tests/data/cu/grid_stride_items.cu", "tests/data/cu/template_block.cu",
            "tests/data/cu/constructs.cu"]


@pytest.mark.parametrize("rel", REAL + FIXTURES)
def test_every_template_is_consistent(rel):
    cf = parse_cuda((ROOT / rel).read_text(encoding="utf-8"), str(ROOT / rel))
    for k in cf.kernels:
        try:
            t = templatize(cf, k.name)
        except KerntuneError:
            continue
        check_space(t)
        assert [(s.span.start, s.param) for s in tunable_sites(cf, k.name)] == \
            [(s.span.start, s.param) for s in t.sites]


# --------------------------------------------------------------------------------------------- block size
ROW_SUM_LIKE = """\
#define BLOCK 128
__global__ void rsum(const float* x, float* out, int cols) {
    __shared__ float s[BLOCK];
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) acc += x[(size_t)blockIdx.x * cols + c];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
void launch(const float* x, float* out, int rows, int cols) { rsum<<<rows, BLOCK>>>(x, out, cols); }
"""


def test_a_define_used_by_the_shared_array_and_the_launch_is_one_site():
    t = inline(ROW_SUM_LIKE, "rsum")
    assert list(t.space.params) == ["BLOCK"]
    p = t.space.params["BLOCK"]
    assert p.kind == "block_size" and p.original == 128 and "#define BLOCK 128 at line 1" in p.why
    assert sites_of(t, "BLOCK") == [(1, "128", "{value}")]  # s[BLOCK], the stride and the launch follow by name
    assert "#define BLOCK KT_BLOCK" in t.text and "__shared__ float s[BLOCK];" in t.text
    # the tree reduction halves BLOCK: powers of two only
    assert p.values == POW2_BLOCKS
    assert {"BLOCK % 32 == 0", "BLOCK <= 1024", "is_pow2(BLOCK)"} <= set(t.space.constraints)
    assert "#define BLOCK 512\n" in render(t, {"BLOCK": 512})


def test_a_tree_reduction_on_blockdim_needs_a_power_of_two_block():
    src = """\
__global__ void bsum(const float* x, float* out) {
    extern __shared__ float s[];
    s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
void go(const float* x, float* out, int n) { bsum<<<n / 128, 128, 128 * sizeof(float)>>>(x, out); }
"""
    t = inline(src, "bsum")
    assert "is_pow2(BLOCK)" in t.space.constraints
    assert t.space.params["BLOCK"].values == POW2_BLOCKS
    # the grid n / 128 and the shared memory 128 * sizeof(float) follow the block
    assert [x[1] for x in sites_of(t, "BLOCK")] == ["128", "128", "128"]


def test_halving_that_is_not_a_block_reduction_leaves_all_multiples_of_32():
    # warp shuffles halve 16, and rotary_neox halves rot_dim: neither is the block size
    for rel in ("tests/data/cu/warp_reduce.cu", "bench/rotary_neox.cu", "bench/silu_and_mul.cu"):
        t = load(rel)
        block = next(p for p in t.space.params.values() if p.kind == "block_size")
        assert block.values == ALL_BLOCKS, rel
        assert not any(c.startswith("is_pow2") for c in t.space.constraints), rel
        assert f"{block.name} % 32 == 0" in t.space.constraints


def test_literal_block_ties_shared_array_strides_and_reduction_start():
    t = load("bench/softmax.cu")
    got = sites_of(t, "BLOCK")
    assert (line_of(t, "__shared__ float red[256]"), "256", "{value}") in got
    assert (line_of(t, "m = fmaxf(m, xr[i])"), "256", "{value}") in got  # i += 256
    assert (line_of(t, "for (int k = 128"), "128", "{value} / 2") in got
    assert (line_of(t, "softmax_kernel<<<"), "256", "{value}") in got
    new = render(t, {"BLOCK": 64})
    assert "__shared__ float red[64];" in new and "for (int k = 32; k > 0; k >>= 1)" in new
    assert "i += 64)" in new and "<<<rows, 64, 0, stream>>>" in new and "256" not in new.split("*/", 1)[1]


def test_padded_and_separately_named_shared_sizes_follow_the_block():
    src = """\
#define TPB 128
#define SMEM_ELEMS 128
__global__ void pad(float* y, const float* x) {
    __shared__ float a[SMEM_ELEMS];
    __shared__ float b[128 + 1];
    __shared__ float c[129];
    const int t = threadIdx.x;
    a[t] = x[blockIdx.x * 128 + t];
    b[t] = a[t];
    c[t + 1] = b[t];
    y[blockIdx.x * TPB + t] = c[t + 1];
}
void go(float* y, const float* x, int n) { pad<<<n / TPB, TPB>>>(y, x); }
"""
    t = inline(src, "pad")
    assert sites_of(t, "TPB") == [(1, "128", "{value}"), (2, "128", "{value}"), (5, "128", "{value}"),
                                  (6, "129", "{value} + 1"), (8, "128", "{value}")]
    new = render(t, {"TPB": 256})
    assert "#define SMEM_ELEMS 256" in new and "b[256 + 1]" in new and "c[257]" in new
    assert "blockIdx.x * 256 + t" in new


def test_a_warp_count_macro_follows_the_block_as_block_over_32():
    t = load("tests/data/cu/warp_reduce.cu")
    assert sites_of(t, "THREADS") == [(5, "256", "{value}"), (6, "8", "({value} / 32)"), (12, "256", "{value}")]
    assert "#define NWARPS (KT_THREADS / 32)" in t.text
    new = render(t, {"THREADS": 96})
    assert "#define THREADS 96\n#define NWARPS 3\n" in new and 'block = "96"' in new


def test_a_warp_count_product_given_to_a_dim3_block_and_a_bare_spec_block():
    """A per-head RMSNorm's `constexpr int kBlockThreads = kWarpsPerBlock * kWarpSize;` given to `const dim3
    block(kBlockThreads)` (a dim3 whose argument parses as a type): the warp count is the parameter and the spec's grid
    follows it; the spec's bare `block = 128` has no string to edit, and its `template_args = ["128"]` (the head
    dimension, equal to the block by chance) is left alone."""
    t = load("bench/corpus/rms_norm/qk_norm_per_head_warp_bf16.cu", "per_head_rms_norm_kernel")
    assert list(t.space.params) == ["K_WARPS_PER_BLOCK"]
    assert t.launch["block"] == ["K_WARPS_PER_BLOCK * 32"]
    assert t.launch["grid"] == ["cdiv(tokens * num_heads, K_WARPS_PER_BLOCK)"]
    body = t.text[t.text.index("// kerntune:params-end"):]
    assert 'template_args = ["128"]' in body and 'grid  = "cdiv(tokens * num_heads, KT_K_WARPS_PER_BLOCK)"' in body
    new = render(t, {"K_WARPS_PER_BLOCK": 8})
    assert "constexpr int kWarpsPerBlock = 8;" in new and 'template_args = ["128"]' in new


def test_a_named_32_the_kernel_splits_its_threads_by_is_the_warp_size():
    """``kThreads = kBlockSize * kBlocksPerCta`` in a namespace, kBlockSize = 32 elements of an MX block, one a lane:
    not named as a warp size, but the kernel splits threadIdx.x by it (``threadIdx.x / kBlockSize``), so the other
    factor is the warp count; the grid over it follows. A named 32 the kernel never splits its threads by is not."""
    path = ROOT / "bench" / "corpus" / "group_quant" / "mxfp8_e8m0_floor_lane_per_element_bf16.cu"
    t = load(str(path.relative_to(ROOT)), "mxfp8_quantize_kernel")
    assert t.space.params["K_BLOCKS_PER_CTA"].values == [1, 2, 4, 8, 16, 32]
    assert t.launch == {"grid": ["cdiv(tokens * hidden / 32, K_BLOCKS_PER_CTA)"], "block": ["K_BLOCKS_PER_CTA * 32"],
                        "smem": "0"}
    assert "constexpr int kBlocksPerCta = KT_K_BLOCKS_PER_CTA;" in t.text
    src = path.read_text().replace("threadIdx.x / kBlockSize", "(threadIdx.x >> 5)").replace(
        "threadIdx.x % kBlockSize", "(threadIdx.x & 31)")
    with pytest.raises(KerntuneError):
        inline(src, "mxfp8_quantize_kernel")


def test_a_hand_unrolled_reduction_fixes_the_block_and_says_why():
    path = CU / "unrolled_reduce.cu"
    cf = parse_cuda(path.read_text(), str(path))
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "sum256")
    e = ei.value
    assert e.path == str(path) and e.line == 4  # at the kernel's name
    assert "nothing to tune in kernel 'sum256'" in e.message
    assert "the literal 128 at line 11 looks like half the block size" in e.message
    assert tunable_sites(cf, "sum256") == []
    # with something else to tune, the block size is a parameter of one value, and its why says so
    t = inline(path.read_text().replace("    float v = s[tid]", "    float v = 0.f;\n    #pragma unroll 2\n"
                                        "    for (int j = 0; j < 2; ++j) v += 0.f;\n    v += s[tid]"), "sum256")
    assert t.space.params["BLOCK"].values == [256]
    assert "fixed at 256: the literal 128 at line 11" in t.space.params["BLOCK"].why
    assert t.space.params["UNROLL"].values == UNROLLS


# --------------------------------------------------------------------------------------------- grids
def test_round_up_grid_follows_a_literal_block():
    src = """\
__global__ void add1(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.f; }
void go(float* x, int n) { add1<<<(n + 255) / 256, 256>>>(x, n); }
"""
    t = inline(src, "add1")
    assert sites_of(t, "BLOCK") == [(2, "255", "{value} - 1"), (2, "256", "{value}"), (2, "256", "{value}")]
    assert "add1<<<(n + KT_BLOCK - 1) / KT_BLOCK, KT_BLOCK>>>" in t.text
    assert "add1<<<(n + 127) / 128, 128>>>" in render(t, {"BLOCK": 128})
    assert t.space.params["BLOCK"].values == ALL_BLOCKS  # no reduction: any multiple of 32
    # the launch in the expression language uses the parameter (renders carry their own parentheses)
    le = launch_exprs(parse_cuda(src, "inline.cu"), "add1", t)
    assert le["grid"] == ["(n + BLOCK - 1) / BLOCK"] and le["block"] == ["BLOCK"] and le["names"] == ["n"]


def test_a_derived_literal_outside_a_sum_is_parenthesized():
    src = """\
__global__ void k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 0.f; }
void go(float* x, int n) { k<<<(n + 2 * 255) / 256, 256>>>(x, n); }
"""
    t = inline(src, "k")
    assert (2, "255", "({value} - 1)") in sites_of(t, "BLOCK")
    assert "k<<<(n + 2 * (KT_BLOCK - 1)) / KT_BLOCK, KT_BLOCK>>>" in t.text


def test_cdiv_grid_follows_a_literal_block():
    src = """\
static inline int cdiv(int a, int b) { return (a + b - 1) / b; }
__global__ void neg(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = -x[i]; }
void go(float* x, int n) { neg<<<cdiv(n, 256), 256>>>(x, n); }
"""
    t = inline(src, "neg")
    assert sites_of(t, "BLOCK") == [(3, "256", "{value}"), (3, "256", "{value}")]
    assert "neg<<<cdiv(n, 512), 512>>>" in render(t, {"BLOCK": 512})
    assert launch_exprs(parse_cuda(src, "inline.cu"), "neg", t)["grid"] == ["cdiv(n, BLOCK)"]


def test_a_sum_without_the_block_literal_is_not_the_block():
    # `(n + 255) >> 8`: no exact 256 in the grid, so the 255 is not tied (only the block literal is a site)
    src = """\
__global__ void k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = 0.f; }
void go(float* x, int n) { k<<<(n + 255) >> 8, 256>>>(x, n); }
"""
    t = inline(src, "k")
    assert sites_of(t, "BLOCK") == [(2, "256", "{value}")]


def test_a_grid_variable_that_is_also_a_kernel_argument_is_left_alone():
    # num_groups = tokens * hidden / 128 counts groups of 128 (group_size), it is passed to the kernel: the 128
    # there is the problem's, not the block's
    t = load("bench/per_token_group_quant_int8.cu")
    lines = {ln for ln, _, _ in sites_of(t, "BLOCK")}
    assert line_of(t, "const int num_groups = tokens * hidden / 128;") not in lines
    assert line_of(t, "__shared__ float red[128]") in lines and line_of(t, "<<<num_groups, 128") in lines
    assert t.launch["grid"] == ["tokens * hidden / 128"] and t.launch["block"] == ["BLOCK"]
    new = render(t, {"BLOCK": 256})
    assert "const int num_groups = tokens * hidden / 128;" in new
    assert "<<<num_groups, 256, 0, stream>>>(x, q, scales, 128, num_groups, eps)" in new


def test_the_fixed_grid_of_a_grid_stride_loop_is_a_parameter():
    t = load("examples/silu.cu")
    assert set(t.space.params) == {"THREADS", "BLOCKS"}
    g = t.space.params["BLOCKS"]
    assert g.kind == "grid_size" and g.original == 256 and set(GRIDS) <= set(g.values)
    assert "grid-stride" in g.why and "`int blocks = 256;` at line 20" in g.why
    assert sites_of(t, "BLOCKS") == [(20, "256", "{value}")] and sites_of(t, "THREADS") == [(19, "128", "{value}")]
    assert {"BLOCKS >= 1", "THREADS % 32 == 0"} <= set(t.space.constraints)
    assert t.launch is None  # the spec already names THREADS and BLOCKS


def test_items_per_thread_of_a_grid_stride_grid_is_a_parameter():
    t = load("tests/data/cu/grid_stride_items.cu")
    it = t.space.params["ITEMS"]
    assert it.kind == "items_per_thread" and it.original == 4 and it.values == ITEMS
    assert "grid-stride loop covers the problem with any grid" in it.why
    launch_line = line_of(t, "relu<<<")
    spec_line = line_of(t, 'grid  = "cdiv(n, 256 * 4)"')
    assert sites_of(t, "ITEMS") == [(spec_line, "4", "{value}"), (launch_line, "4", "{value}")]
    assert "ITEMS >= 1" in t.space.constraints
    assert t.launch == {"grid": ["cdiv(n, BLOCK * ITEMS)"], "block": ["BLOCK"], "smem": "0"}
    new = render(t, {"BLOCK": 128, "ITEMS": 16})
    assert "relu<<<cdiv(n, 128 * 16), 128, 0, stream>>>" in new and 'grid  = "cdiv(n, 128 * 16)"' in new


def test_items_are_not_lifted_from_a_grid_that_is_not_grid_stride():
    # scale_rows covers its columns with exactly one pass: VEC is a template argument, not free items
    t = load("examples/scale_rows.cu")
    assert "ITEMS" not in t.space.params
    assert t.space.params["VEC"].kind == "template_arg"


# ----------------------------------------------------------------------------- unroll, bounds, templates
def test_pragma_unroll_is_a_parameter_and_compiles_through_a_constexpr():
    t = load("examples/row_sum.cu")
    u = t.space.params["UNROLL"]
    assert u.kind == "unroll" and u.original == 4 and u.values == UNROLLS and "loop at line 19" in u.why
    assert sites_of(t, "UNROLL") == [(18, "4", "{value}")]
    assert "#pragma unroll KT_UNROLL" in t.text
    assert "constexpr int KT_UNROLL = kerntune_UNROLL_value;" in t.text  # nvcc does not expand macros there
    src = """\
__global__ void two(float* x) {
    #pragma unroll 2
    for (int i = 0; i < 8; i++) x[i] = 0.f;
    #pragma unroll 8
    for (int j = 0; j < 8; j++) x[j] += 1.f;
    #pragma unroll
    for (int j = 0; j < 8; j++) x[j] += 1.f;
}
"""
    t = inline(src, "two")
    assert set(t.space.params) == {"UNROLL_2", "UNROLL_4"}  # by the pragma's line; a bare #pragma unroll is not
    assert t.space.params["UNROLL_4"].original == 8


def test_launch_bounds_equal_to_the_block_follow_it():
    t = load("examples/scale_rows.cu")
    assert (12, "256", "{value}") in sites_of(t, "THREADS")  # __launch_bounds__(256)
    assert "__launch_bounds__(KT_THREADS)" in t.text and "LAUNCH_BOUNDS" not in t.space.params


def test_launch_bounds_of_their_own_and_min_blocks():
    src = """\
__global__ void __launch_bounds__(512, 2) lb(float* x) { x[blockIdx.x * blockDim.x + threadIdx.x] = 0.f; }
void go(float* x, int n) { lb<<<n / 256, 256>>>(x); }
"""
    t = inline(src, "lb")
    b, m = t.space.params["LAUNCH_BOUNDS"], t.space.params["MIN_BLOCKS"]
    assert b.kind == m.kind == "launch_bounds" and b.original == 512 and m.original == 2
    assert {"LAUNCH_BOUNDS >= BLOCK", "LAUNCH_BOUNDS <= 1024", "LAUNCH_BOUNDS * MIN_BLOCKS <= 2048"} <= \
        set(t.space.constraints)
    assert check_config(t.space, {"BLOCK": 1024, "LAUNCH_BOUNDS": 512, "MIN_BLOCKS": 2}) is not None
    # without a launch in the file, launch bounds can only grow (the original launch must still fit)
    t = inline(src.split("void go")[0], "lb")
    assert min(t.space.params["LAUNCH_BOUNDS"].values) == 512


def test_integer_template_arguments_are_parameters():
    t = load("examples/scale_rows.cu")
    v = t.space.params["VEC"]
    assert v.kind == "template_arg" and v.original == 4 and v.values == [1, 2, 4, 8, 16]
    assert "template argument VEC of scale_rows" in v.why and "is_pow2(VEC)" in t.space.constraints
    assert sites_of(t, "VEC") == [(28, "4", "{value}")]  # `const int vec = 4;`, used by the grid and the call


def test_a_template_argument_that_is_the_block_size_is_the_block_parameter():
    t = load("tests/data/cu/template_block.cu")
    assert set(t.space.params) == {"THREADS", "VEC"}
    th = t.space.params["THREADS"]
    assert th.kind == "block_size" and th.original == 128 and th.values == POW2_BLOCKS
    # `s = THREADS / 2` halves the template parameter: a tree reduction on the block size
    assert {"is_pow2(THREADS)", "THREADS % 32 == 0", "is_pow2(VEC)"} <= set(t.space.constraints)
    assert sites_of(t, "THREADS") == [(24, "128", "{value}")]
    new = render(t, {"THREADS": 256, "VEC": 8})
    assert "const int threads = 256, vec = 8;" in new


def test_template_arguments_that_are_not_powers_of_two_keep_their_value():
    src = """\
template <int N> __global__ void fill(float* x) { for (int i = 0; i < N; i++) x[i] = 0.f; }
void go(float* x) { fill<3><<<1, 64>>>(x); }
"""
    t = inline(src, "fill")
    assert t.space.params["N"].values == [3] and "is_pow2(N)" not in t.space.constraints


def test_a_template_argument_a_buffer_of_the_spec_is_sized_by_is_not_tuned():
    """A head count and head size taken as template arguments size the spec's buffers (``qk[num_tokens * 32 * 128]``
    for ``<..., 32, 8, 128>``): changing them changes what the data is, not how it is processed, so they are not
    parameters (Mirage's rotary task, batch 20: 48 of 52 structural configurations failed verification while they
    were); a window of tokens a block, which sizes no buffer, and the block size still are."""
    t = load("bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_"
             "between_read_and_write_inplace_bf16_mirage_mpk.cu")
    assert set(t.space.params) == {"WINDOW_SIZE", "NUM_THREADS"}
    src = """\
/* kerntune:
args  = ["q: inout f32[tokens * 16 * 64]", "x: inout f32[n]"]
sizes = [{ tokens = 8, n = 1024 }]
grid  = "tokens"
block = 128
template_args = ["16", "64", "4"]
*/
template <int HEADS, int HEAD_DIM, int VEC>
__global__ void k(float* q, float* x) {
  for (int i = threadIdx.x; i < HEADS * HEAD_DIM; i += blockDim.x) q[blockIdx.x * HEADS * HEAD_DIM + i] *= 2.f;
  for (int i = threadIdx.x * VEC; i < 1024; i += blockDim.x * VEC) x[i] += 1.f;
}
void go(float* q, float* x, int tokens) { k<16, 64, 4><<<tokens, 128>>>(q, x); }
"""
    t = inline(src, "k")
    assert "HEADS" not in t.space.params and "HEAD_DIM" not in t.space.params
    assert t.space.params["VEC"].values == [1, 2, 4, 8, 16]  # sizes no buffer: still tuned


def test_the_spec_grid_follows_a_template_argument_the_launch_grid_is_written_from():
    """A template argument from a host constant that also sizes the launch's grid (Mirage's ``kWindowSize``:
    ``<<<(num_tokens + kWindowSize - 1) / kWindowSize, ...>>>``, the spec's grid ``cdiv(num_tokens, 8)``): the spec's
    grid names the parameter, so every window of tokens a block still covers the tokens (11 of 40 of Mirage's
    structural configurations failed verification in 2026-11-29d's call 9 while the grid stayed at 8)."""
    t = load("bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_"
             "between_read_and_write_inplace_bf16_mirage_mpk.cu")
    assert t.launch["grid"] == ["cdiv(num_tokens, WINDOW_SIZE)"]
    src = """\
/* kerntune:
args  = ["x: inout f32[n]", "n: i32 = n"]
sizes = [{ n = 1000 }]
grid  = "cdiv(n, 4 * 128)"
block = 128
template_args = ["4"]
*/
template <int ITEMS>
__global__ void k(float* x, int n) {
  for (int j = 0; j < ITEMS; ++j) {
    const int i = (blockIdx.x * ITEMS + j) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.f;
  }
}
void go(float* x, int n) {
  constexpr int kItems = 4;
  k<kItems><<<(n + kItems * 128 - 1) / (kItems * 128), 128>>>(x, n);
}
"""
    t = inline(src, "k")
    assert "ITEMS" in t.launch["grid"][0], t.launch
    # a grid written from no template argument keeps its number
    t = inline(src.replace("(n + kItems * 128 - 1) / (kItems * 128)", "(n + 511) / 512"), "k")
    assert "ITEMS" not in t.launch["grid"][0], t.launch


def test_a_template_argument_that_tiles_a_buffer_of_the_spec_is_not_tuned():
    """A tile or group size taken as a template argument that a buffer of the spec is counted in (one scale a tile:
    ``scale_inv[cdiv(M, 128) * cdiv(N, 128)]`` for ``<128, 256>``) is the data's layout, not a parameter; the
    block size is still tuned."""
    t = load("bench/corpus/group_quant/block_quant_fp8_2d_128x128_tiles_bf16.cu")
    assert set(t.space.params) == {"K_THREADS"}, t.space.params


def test_a_launch_bounds_macro_caps_the_block_and_takes_no_second_bounds():
    """A kernel bounded through a macro (`LAUNCH_BOUNDS()` for `__launch_bounds__(128, 8)`): the block parameter may
    not pass its max threads (a launch with more fails), and the launch_bounds rewrite adds no second bounds; where
    the macro names the constant the block is lifted from, the bound follows the parameter (no cap)."""
    src = """\
#define LAUNCH_BOUNDS() __launch_bounds__(128, 8)
/* kerntune:
args  = ["x: inout f32[n]", "n: i32 = n"]
sizes = [{ n = 1000 }, { n = 4099 }]
grid  = "cdiv(n, 128)"
block = 128
*/
__global__ void
LAUNCH_BOUNDS()
kScale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}
void go(float* x, int n) { kScale<<<(n + 127) / 128, 128>>>(x, n); }
"""
    t = inline(src, "kScale")
    assert "BLOCK <= 128" in t.space.constraints, t.space.constraints
    from agent_core.source.cuda_parse import parse_cuda as _parse
    from agent_core.templating.rewrites import compose
    cf = _parse(src, "lb.cu")
    report = dict(compose(cf, "kScale").report)
    assert report["launch_bounds"] == "the kernel has __launch_bounds__(128, 8) already, through a macro", report
    t = inline(src.replace("__launch_bounds__(128, 8)", "__launch_bounds__(kThreads, 8)")
               .replace("#define LAUNCH_BOUNDS()", "static const int kThreads = 128;\n#define LAUNCH_BOUNDS()")
               .replace("<<<(n + 127) / 128, 128>>>", "<<<(n + kThreads - 1) / kThreads, kThreads>>>"), "kScale")
    assert not any(c.endswith("<= 128") for c in t.space.constraints), t.space.constraints


def test_a_2d_block_gets_x_and_y_parameters():
    src = """\
__global__ void tr(float* y, const float* x, int n) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < n && c < n) y[c * n + r] = x[r * n + c];
}
void go(float* y, const float* x, int n) {
    dim3 block(32, 8);
    dim3 grid((n + 31) / 32, (n + 7) / 8);
    tr<<<grid, block>>>(y, x, n);
}
"""
    t = inline(src, "tr")
    assert t.space.params["BLOCK_X"].kind == t.space.params["BLOCK_Y"].kind == "block_size"
    assert {"(BLOCK_X * BLOCK_Y) % 32 == 0", "BLOCK_X * BLOCK_Y <= 1024"} <= set(t.space.constraints)
    assert "dim3 grid((n + 63) / 64, (n + 7) / 8);" in render(t, {"BLOCK_X": 64, "BLOCK_Y": 8})


# --------------------------------------------------------------------------------------------- the spec's launch
def _launch_blocks(t: KernelTemplate, cfg: dict) -> set[int]:
    cf = parse_cuda(t.original_text, t.path)
    spec = spec_mod.find_spec(cf, t.kernel)
    return {ln.block[0] for ln in _launches(t, spec, {**t.space.original_config(), **cfg})}


def test_rms_norm_regression_the_spec_block_follows_rms_block():
    """H100 bench: RMS_BLOCK in {32, 64, 128} crashed (illegal address) and {512, 1024} gave wrong results.
    The kernel itself follows RMS_BLOCK by name (red[RMS_BLOCK], the strides, RMS_BLOCK / 2); what did not
    was the launch: the spec says `block = "256"`, so every variant ran on 256 threads (a 32-float shared
    array indexed by 256 threads; a 512 stride walked by 256 threads). The spec's literal is now tied."""
    t = load("bench/rms_norm.cu")
    p = t.space.params["RMS_BLOCK"]
    assert list(t.space.params) == ["RMS_BLOCK"] and p.values == POW2_BLOCKS
    assert {"RMS_BLOCK % 32 == 0", "RMS_BLOCK <= 1024", "is_pow2(RMS_BLOCK)"} <= set(t.space.constraints)
    assert sites_of(t, "RMS_BLOCK") == [(5, "256", "{value}"), (line_of(t, 'block = "256"'), "256", "{value}")]
    # everything in the kernel that assumes the block size goes through the macro
    kernel = body(t.text).split("__global__", 1)[1]
    assert re.findall(r"\b(?:256|128|64|32)\b", kernel.split("void rms_norm(")[0]) == []
    assert "red[RMS_BLOCK]" in kernel and kernel.count("i += RMS_BLOCK") == 2 and "RMS_BLOCK / 2" in kernel
    assert t.launch == {"grid": ["tokens"], "block": ["RMS_BLOCK"], "smem": "0"}
    for v in p.values:
        assert _launch_blocks(t, {"RMS_BLOCK": v}) == {v}
        new = render(t, {"RMS_BLOCK": v})
        assert f"#define RMS_BLOCK {v}\n" in new and f'block = "{v}"' in new


def test_silu_and_mul_regression_block_stride_and_launch_follow_block():
    """H100 bench: BLOCK = 288, 672, 992 left outputs unwritten: the loop's stride 256 was tied, but the spec
    launched 256 threads whatever BLOCK was, so a stride of 288 skipped elements. The stride, the host launch
    and the spec's block now all follow BLOCK; the loop is stride-correct for any multiple of 32."""
    t = load("bench/silu_and_mul.cu")
    p = t.space.params["BLOCK"]
    assert p.values == ALL_BLOCKS and 288 in p.values
    assert {"BLOCK % 32 == 0", "BLOCK <= 1024"} <= set(t.space.constraints)
    assert not any("is_pow2" in c for c in t.space.constraints)
    assert sites_of(t, "BLOCK") == [(line_of(t, 'block = "256"'), "256", "{value}"),
                                    (line_of(t, "i += 256"), "256", "{value}"),
                                    (line_of(t, "silu_and_mul_kernel<<<"), "256", "{value}")]
    for v in (288, 672, 992, 1024, 32):
        assert _launch_blocks(t, {"BLOCK": v}) == {v}
        new = render(t, {"BLOCK": v})
        assert f"i += {v})" in new and f"<<<tokens, {v}, 0, stream>>>" in new and f'block = "{v}"' in new


@pytest.mark.parametrize("rel", [r for r in REAL if r.startswith("bench/")])
def test_every_bench_variant_launches_its_own_block_size(rel):
    t = load(rel)
    block = next(p for p in t.space.params.values() if p.kind == "block_size")
    for cfg in list(iter_configs(t.space))[:12]:
        if check_config(t.space, cfg) is None:
            assert _launch_blocks(t, cfg) == {cfg[block.name]}


def test_the_spec_grid_follows_the_block_where_the_launch_grid_does():
    t = load("bench/merge_attn_states.cu")
    assert t.launch == {"grid": ["cdiv(num_tokens * num_heads * head_size, BLOCK)"], "block": ["BLOCK"],
                        "smem": "0"}
    cf = parse_cuda(t.original_text, t.path)
    spec = spec_mod.find_spec(cf, t.kernel)
    ln = _launches(t, spec, {"BLOCK": 256})[0]
    sizes = spec.sizes[0]
    assert ln.block[0] == 256 and ln.grid[0] == -(-sizes["num_tokens"] * sizes["num_heads"] * sizes["head_size"]
                                                  // 256)
    new = render(t, {"BLOCK": 256})
    assert 'grid  = "cdiv(num_tokens * num_heads * head_size, 256)"' in new and 'block = "256"' in new
    assert "<<<(total + 255) / 256, 256, 0, stream>>>" in new
    # and the launch is part of the template's identity (its header)
    assert "launched on grid (cdiv(num_tokens * num_heads * head_size, BLOCK)) x block (BLOCK)" in t.text


def test_a_spec_grid_follows_a_block_the_launch_names_through_a_variable():
    src = """\
/* kerntune:
args  = ["x: inout f32[n]", "n: i32 = n"]
sizes = [{ n = 1024 }, { n = 1001 }]
grid  = "cdiv(n, 256)"
block = "256"
*/
__global__ void inc(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.f; }
void go(float* x, int n) {
    int threads = 256;
    inc<<<(n + threads - 1) / threads, threads>>>(x, n);
}
"""
    t = inline(src, "inc")
    assert t.launch == {"grid": ["cdiv(n, THREADS)"], "block": ["THREADS"], "smem": "0"}
    assert sites_of(t, "THREADS") == [(4, "256", "{value}"), (5, "256", "{value}"), (9, "256", "{value}")]
    new = render(t, {"THREADS": 64})
    assert 'grid  = "cdiv(n, 64)"' in new and 'block = "64"' in new and "int threads = 64;" in new


def test_a_spec_block_that_is_not_the_launch_block_is_not_tied():
    src = ROW_SUM_LIKE.replace("__global__", '/* kerntune:\nargs = ["x: in f32[r * c]", "out: out f32[r]", '
                               '"cols: i32 = c"]\nsizes = [{ r = 8, c = 64 }, { r = 3, c = 65 }]\ngrid = "r"\n'
                               'block = "64"\n*/\n__global__', 1)
    t = inline(src, "rsum")
    assert t.launch is None and [x[0] for x in sites_of(t, "BLOCK")] == [1]


def test_the_launch_survives_the_template_files(tmp_path):
    from agent_core.templating.workfiles import read_template_files, write_template_files
    src = tmp_path / "rms_norm.cu"
    shutil.copy(ROOT / "bench" / "rms_norm.cu", src)
    t = templatize(parse_cuda(src.read_text(), str(src)), "rms_norm_kernel")
    write_template_files(t, tmp_path / ".kerntune")
    back = read_template_files(tmp_path / ".kerntune", src, "rms_norm_kernel", src.read_text())
    assert back.launch == t.launch and back.sites == t.sites
    assert _launch_blocks(back, {"RMS_BLOCK": 64}) == {64}


def test_a_spec_that_names_the_parameter_is_left_as_it_is():
    t = load("examples/row_sum.cu")
    assert t.launch is None and not any(7 <= s.span.line + 1 <= 12 for s in t.sites)  # the spec comment


def test_a_sidecar_spec_gets_a_launch_but_no_sites(tmp_path):
    src = """\
__global__ void inc(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.f; }
void go(float* x, int n) { inc<<<(n + 127) / 128, 128>>>(x, n); }
"""
    path = tmp_path / "inc.cu"
    path.write_text(src)
    Path(str(path) + ".kerntune.toml").write_text(
        '[inc]\nargs = ["x: inout f32[n]", "n: i32 = n"]\nsizes = [{ n = 1024 }, { n = 1001 }]\n'
        'grid = "(n + 127) / 128"\nblock = "128"\n')
    t = templatize(parse_cuda(src, str(path)), "inc")
    assert t.launch == {"grid": ["(n + BLOCK - 1) / BLOCK"], "block": ["BLOCK"], "smem": "0"}
    assert all(s.span.line == 1 for s in t.sites)


def test_a_broken_spec_does_not_stop_templatizing():
    src = ROW_SUM_LIKE.replace("__global__", '/* kerntune:\nargs = [\n*/\n__global__', 1)
    t = inline(src, "rsum")
    assert t.launch is None and list(t.space.params) == ["BLOCK"]


# --------------------------------------------------------------------------------------------- errors
def test_a_kernel_that_does_not_parse_names_file_and_line():
    path = CU / "errors.cu"
    cf = parse_cuda(path.read_text(), str(path))
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "pragma_if")
    assert ei.value.path == str(path) and ei.value.line == 4
    assert "does not parse" in ei.value.message and "#pragma" in ei.value.message
    assert str(ei.value).startswith(f"{path}:5:")


def test_a_kernel_declared_through_a_macro_is_unsupported_and_says_so():
    path = CU / "errors.cu"
    cf = parse_cuda(path.read_text(), str(path))
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "via_macro")
    assert ei.value.path == str(path) and ei.value.line == 1
    assert "macro KERNEL" in ei.value.message and "write __global__" in ei.value.message


def test_an_unknown_kernel_names_the_file_the_kernels_and_the_closest_one():
    path = CU / "constructs.cu"
    cf = parse_cuda(path.read_text(), str(path))
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "scal")
    e = ei.value
    assert e.path == str(path) and e.line == 15  # at `scale`
    assert "no __global__ kernel named 'scal'" in e.message and "did you mean 'scale'" in e.message
    assert "copy_vec (line 8)" in e.message and "scale (line 16)" in e.message
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "helper")  # a __device__ function
    assert ei.value.line == 20 and "'helper' at line 21 is not a __global__ function" in ei.value.message
    with pytest.raises(KerntuneError) as ei:
        launch_exprs(cf, "nope")
    assert ei.value.path == str(path) and ei.value.line is not None
    with pytest.raises(KerntuneError) as ei:
        templatize(parse_cuda("int main() { return 0; }\n", "host.cu"), "k")
    assert str(ei.value).startswith("host.cu:1:") and "no __global__ kernels" in ei.value.message


def test_nothing_to_tune_says_why():
    path = CU / "errors.cu"
    cf = parse_cuda(path.read_text(), str(path))
    with pytest.raises(KerntuneError) as ei:
        templatize(cf, "fine")
    e = ei.value
    assert e.path == str(path) and e.line == 9
    for why in ("nothing to tune in kernel 'fine'", "no launch site of it in this file", "no #pragma unroll N",
                "no __launch_bounds__", "no template parameters"):
        assert why in e.message
    # a block size the host computes at run time is not a constant
    src = """\
__global__ void k(float* x) { x[threadIdx.x] = 0.f; }
void go(float* x, int threads) { k<<<1, threads>>>(x); }
"""
    with pytest.raises(KerntuneError, match=r"the block size `threads` is not a constant") as ei:
        inline(src, "k", "dyn.cu")
    assert str(ei.value).startswith("dyn.cu:1:")
    assert tunable_sites(parse_cuda(src, "dyn.cu"), "k") == []


# --------------------------------------------------------------------------------------------- compiling
def _nvcc() -> str:
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def _compile(text: str, name: str, tmp: Path, defines: dict[str, int] | None = None) -> str | None:
    """None when ``text`` compiles with ``nvcc -arch=sm_90 -cubin``, else the compiler's message."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    cu = d / "k.cu"
    cu.write_text(text, encoding="utf-8")
    cmd = [_nvcc(), "-arch=sm_90", *CHECK_FLAGS, "-cubin", "-o", str(d / "k.cubin"), str(cu)]
    cmd += [f"-D{macro_name(k)}={v}" for k, v in (defines or {}).items()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return None if r.returncode == 0 else f"{name}: {r.stderr or r.stdout}"


def _configs(t: KernelTemplate) -> list[dict[str, int]]:
    """The original, and configurations with each parameter at the low and high ends of its domain (other
    parameters moved as little as the constraints allow)."""
    orig = t.space.original_config()
    valid = [c for c in iter_configs(t.space) if check_config(t.space, c) is None]
    out = [orig]
    for name, p in t.space.params.items():
        for v in (p.values[0], p.values[-1], p.values[len(p.values) // 2]):
            cands = [c for c in valid if c[name] == v]
            if cands:
                best = min(cands, key=lambda c: sum(c[n] != orig[n] for n in c))
                if best not in out:
                    out.append(best)
    return out


@pytest.mark.nvcc
def test_rendered_configurations_compile(tmp_path):
    jobs = []
    for rel in REAL + FIXTURES:
        cf = parse_cuda((ROOT / rel).read_text(encoding="utf-8"), str(ROOT / rel))
        for k in cf.kernels:
            try:
                t = templatize(cf, k.name)
            except KerntuneError:
                continue
            for i, cfg in enumerate(_configs(t)):
                tag = f"{Path(rel).stem}.{k.name}.{i}"
                jobs.append((render(t, cfg), tag, None))  # what apply writes
                if i == 1:  # what the tuner compiles: the template with -D
                    jobs.append((t.text, tag + ".template", cfg))
    assert len(jobs) > 40
    with ThreadPoolExecutor(4) as ex:
        errors = [e for e in ex.map(lambda j: _compile(j[0], j[1], tmp_path, j[2]), jobs) if e]
    assert not errors, "\n".join(errors[:5])


@pytest.mark.nvcc
def test_a_rendered_warp_count_and_items_compile_at_unusual_values(tmp_path):
    t = load("tests/data/cu/warp_reduce.cu")
    for v in (32, 96, 288, 1024):
        assert _compile(render(t, {"THREADS": v}), f"warp{v}", tmp_path) is None
        assert _compile(t.text, f"warp{v}.t", tmp_path, {"THREADS": v}) is None
    t = load("tests/data/cu/grid_stride_items.cu")
    assert _compile(t.text, "items", tmp_path, {"BLOCK": 96, "ITEMS": 32}) is None


# ----------------------------------------------------------------------------- a macro standing for __global__
def _through_macro(text: str) -> str:
    """``text`` with every ``__global__ void`` written as InfiniCore writes it: ``OP_CUDA_KERNEL`` defined as
    ``__global__ void`` at the top (after the includes)."""
    lines = text.split("\n")
    at = max((i for i, line in enumerate(lines) if line.startswith("#include")), default=-1) + 1
    body = "\n".join(lines[at:]).replace("__global__ void", "OP_CUDA_KERNEL")
    return "\n".join(lines[:at] + ["#define OP_CUDA_KERNEL __global__ void"]) + "\n" + body


@pytest.mark.parametrize("rel", ["examples/row_sum.cu", "examples/scale_rows.cu", "bench/softmax.cu",
                                 "bench/rms_norm.cu"])
def test_a_kernel_declared_through_a_global_void_macro_templatizes_as_if_written_out(rel):
    from agent_core.templating.rewrites.compose import compose
    text = (ROOT / rel).read_text(encoding="utf-8")
    macro = _through_macro(text)
    assert macro != text and "OP_CUDA_KERNEL" in macro
    plain_cf, macro_cf = parse_cuda(text, rel), parse_cuda(macro, rel)
    for k in plain_cf.kernels:
        spec = spec_mod.find_spec(plain_cf, k.name)
        if spec is None:
            continue
        try:
            want = templatize(plain_cf, k.name)
        except KerntuneError:
            continue
        got = templatize(macro_cf, k.name)
        assert list(got.space.params) == list(want.space.params), (rel, k.name)
        assert got.space.constraints == want.space.constraints
        want_rw = compose(plain_cf, k.name, spec)
        got_rw = compose(macro_cf, k.name, spec_mod.find_spec(macro_cf, k.name))
        assert [n for n, _ in got_rw.report] == [n for n, _ in want_rw.report]
        if want_rw.template is not None:
            assert got_rw.template is not None
            assert list(got_rw.template.space.params) == list(want_rw.template.space.params), (rel, k.name)


@pytest.mark.nvcc
def test_a_macro_declared_kernel_s_rewrites_compile(tmp_path):
    """The composed rewrite of a macro-declared kernel, the cluster twin's ``__cluster_dims__`` and the rewrite's
    ``__launch_bounds__`` written before the kernel's name, compiles at the original and at the ends of its domains."""
    from agent_core.templating.rewrites.compose import compose
    rel = "tests/data/cu/rewrites/column_sum.cu"
    cf = parse_cuda(_through_macro((ROOT / rel).read_text(encoding="utf-8")), rel)
    name = cf.kernels[0].name
    got = compose(cf, name, spec_mod.find_spec(cf, name))
    templates = [t for t in [got.template, *got.twins] if t is not None]
    assert len(templates) == 2 and "__cluster_dims__" in templates[1].text
    errors = [e for i, t in enumerate(templates) for j, c in enumerate(_configs(t)[:3])
              if (e := _compile(render(t, c), f"m{i}_{j}", tmp_path)) is not None]
    assert not errors, errors[0]
