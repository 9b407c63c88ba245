"""Applying a tuned kernel whose launch is written inside one of the file's own macros
(apply.expand_macro_launches): at each use of the macro that may launch the tuned instantiation, the use is replaced
by its expansion (what the preprocessor makes of it there) under a ``// kerntune: ... expanded`` line, and that
launch is rewritten like any written-out launch; the other uses and the ``#define`` stay. Refused, with why, where
the written-out expansion would not be the preprocessor's.

The corpus winners come from the H200 recordings of 2026-11-28d (tests/data/stores/macro_*.sqlite, each holding only
the kernel's sessions) and 2026-11-28c (gpu/results/2026-11-28c/corpus_b, corpus_c); nvcc checks that each applied
file compiles, host code included (skipped without nvcc).
"""

import shutil
from pathlib import Path

import pytest

from agent_core.apply import check_compiles, expand_macro_launches
from agent_core.model import KerntuneError
from agent_core.source.cuda_parse import parse_cuda
from tests.dispatch_helpers import applied_from_recording

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "corpus"
STORES = ROOT / "tests" / "data" / "stores"
RESULTS = ROOT / "gpu" / "results" / "2026-11-28c"

# (file under bench/corpus, kernel, store, the uses expanded, the uses left as written)
CORPUS_MACROS = [
    ("fused_add_rms_norm/pre_rms_norm_res_out_rounded_rsqrt_bf16.cu", "pre_rms_norm",
     "macro_pre_rms_norm_2026-11-28d.sqlite", ["LAUNCH_PRE_RMS_NORM(1, max_threads)"],
     ["LAUNCH_PRE_RMS_NORM(2, max_threads);", "LAUNCH_PRE_RMS_NORM(3, max_threads);",
      "LAUNCH_PRE_RMS_NORM(4, max_threads);"]),
    ("group_quant/cached_quantization_sym_int8_q_range_subblock_fp16.cu", "cached_quantization",
     "macro_cached_quantization_2026-11-28d.sqlite", ["LAUNCH_CACHED_QUANT(8, 1, 1, 16)"],
     ["LAUNCH_CACHED_QUANT(8, 1, 1, 1);", "LAUNCH_CACHED_QUANT(8, 1, 1, 2);", "LAUNCH_CACHED_QUANT(8, 1, 1, 4);",
      "LAUNCH_CACHED_QUANT(8, 1, 1, 8);"]),
    ("rotary/rotary_pos_half_tile_shfl_partner_kv_cache_bf16.cu", "apply_rotary_pos_half",
     "macro_apply_rotary_pos_half_2026-11-28d.sqlite", ["LAUNCH_ROT_POS_EMB_HALF(16, alignment)"],
     ["LAUNCH_ROT_POS_EMB_HALF(4, alignment);", "LAUNCH_ROT_POS_EMB_HALF(8, alignment);",
      "LAUNCH_ROT_POS_EMB_HALF(32, alignment);"]),
    ("softmax/masked_softmax_alibi_fp32_in_fp16_out.cu", "softmax_kernel",
     RESULTS / "corpus_b" / "results.sqlite", ["LAUNCH_MASKED_SOFTMAX(4)"],
     ["LAUNCH_MASKED_SOFTMAX(2);", "LAUNCH_MASKED_SOFTMAX(1);"]),
]


def _applied(tmp_path, rel, kernel, store):
    return applied_from_recording(tmp_path, CORPUS / rel, STORES / store, kernel)  # (an absolute store stays as it is)


@pytest.mark.parametrize("rel,kernel,store,expanded,kept", CORPUS_MACROS, ids=[c[1] for c in CORPUS_MACROS])
def test_corpus_macro_launch_applied(tmp_path, rel, kernel, store, expanded, kept):
    f, text, rw = _applied(tmp_path, rel, kernel, store)
    new = rw.text
    assert new != text
    macro = expanded[0].split("(")[0]
    assert f"#define {macro}" in new  # the definition stays
    for use in expanded:
        assert f"// kerntune: {use} expanded to tune this launch" in new
        assert f"{use};" not in new.replace(f"// kerntune: {use}", "")
    for use in kept:
        assert new.count(use) == text.count(use) == 1
    # the expanded launch is rewritten: the tuned kernel is launched where the use was
    cf = parse_cuda(new, str(f))
    launched = {s.kernel for k in cf.kernels for s in k.launch_sites}
    assert any(n.startswith(kernel + "__") for n in launched), launched
    if shutil.which("nvcc"):
        check_compiles(new, f, host=True)


def test_paddle_layer_norm_launch_in_a_macro_argument(tmp_path):
    """PaddlePaddle's FIXED_BLOCK_DIM_CASE(k<__half, float, kBlockDim><<<...>>>(...)): the launch is written in the
    macro's argument, and which instantiation it makes is decided by the expansion (each case declares its own
    constexpr kBlockDim). The use is written out (GNU's `, ##__VA_ARGS__` with arguments given: `, <them>`): the
    case whose kBlockDim is the spec's 512 gets the dispatch, the eight others keep their launch."""
    f, text, rw = _applied(tmp_path, "layer_norm/layer_norm_fixed_block_dim_mean_var_fp16.cu", "LayerNormForward",
                           RESULTS / "corpus_c" / "results.sqlite")
    new = rw.text
    assert "// kerntune: FIXED_BLOCK_DIM_CASE(LayerNormForward<__half, float, kBlockDim> <<<batch_size" in new
    assert "#define FIXED_BLOCK_DIM_CASE(...)" in new and "#define FIXED_BLOCK_DIM_CASE_BASE(" in new
    assert "    FIXED_BLOCK_DIM_CASE(LayerNormForward" not in new
    for b in range(1, 10):
        assert f"    case (1 << ({b})): {{\n      constexpr auto kBlockDim = (1 << ({b}));\n" in new
    case9 = new.split("case (1 << (9)): {")[1].split("} break;")[0]
    assert "LayerNormForward__" in case9  # the dispatch's kernels launched in the 512 case
    for b in range(1, 9):
        case = new.split(f"case (1 << ({b})): {{")[1].split("} break")[0]
        assert "LayerNormForward__" not in case and "LayerNormForward<__half, float, kBlockDim>" in case
    if shutil.which("nvcc"):
        check_compiles(new, f, host=True)


# ------------------------------------------------------------------ the expansion itself
SRC = r"""#include <cuda_runtime.h>
template <typename A, typename B> struct Pair { A a; B b; };

#define LAUNCH_ROWS(KERNEL, GRID, ...)                 \
  KERNEL<<<GRID, 256, 0, stream>>>(                   \
      __VA_ARGS__)

#define LAUNCH_TWO(N)  \
  {                    \
    int blocks = (N);  \
    scale<<<blocks, 128, 0, stream>>>(y, x, 2.f, n); \
  }

__global__ void scale(float* y, const float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * x[i];
}

__global__ void fill(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.f;
}

void host(float* y, const float* x, int n, cudaStream_t stream) {
  LAUNCH_ROWS(fill, dim3((n + 255) / 256, 1), y, n);
  LAUNCH_ROWS(scale, (n + 255) / 256, y, x, Pair<int, float>{1, 2.f}.b, n);
  if (n > 4) { LAUNCH_TWO((n + 127) / 128) }
}
"""


def test_expansion_variadic_template_commas_and_line_breaks():
    new, cf = expand_macro_launches(SRC, "t.cu", "scale")
    # the use launching `scale` is written out; the one launching `fill` stays
    assert "  LAUNCH_ROWS(fill, dim3((n + 255) / 256, 1), y, n);\n" in new
    assert ("  // kerntune: LAUNCH_ROWS(scale, (n + 255) / 256, y, x, Pair<int, float>{1, 2.f}.b, n) expanded to "
            "tune this launch\n  scale<<<(n + 255) / 256, 256, 0, stream>>>(\n"
            "      y, x, Pair<int, float>{1, 2.f}.b, n);\n") in new
    # a use inside a line: the expansion starts a line of its own, its body's lines kept
    assert ("  if (n > 4) { \n    // kerntune: LAUNCH_TWO((n + 127) / 128) expanded to tune this launch\n"
            "    {\n      int blocks = ((n + 127) / 128);\n      scale<<<blocks, 128, 0, stream>>>(y, x, 2.f, n);\n"
            "    } }\n") in new
    assert "#define LAUNCH_ROWS(KERNEL, GRID, ...)" in new and "#define LAUNCH_TWO(N)" in new
    k = cf.kernel("scale")
    assert not k.macro_launch_sites and len(k.launch_sites) == 2
    assert len(cf.kernel("fill").macro_launch_sites) == 1  # not expanded
    # nothing to expand for `fill`'s launch unless it is the one applied
    same, _ = expand_macro_launches(SRC, "t.cu", "fill")
    assert "// kerntune: LAUNCH_ROWS(fill, dim3((n + 255) / 256, 1), y, n) expanded" in same
    assert "LAUNCH_ROWS(scale," in same


def test_expansion_macro_used_twice_only_the_tuned_instantiation():
    src = r"""#include <cuda_runtime.h>
#define LAUNCH_K(ITEMS) \
  k<ITEMS><<<grid, 256, 0, stream>>>(y, n)

/* kerntune:
args  = ["y: out f32[n]", "n: i32 = n"]
sizes = [{ n = 4096 }]
grid  = "cdiv(n, 1024)"
block = 256
template_args = ["4"]
*/
template <int ITEMS>
__global__ void k(float* y, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
  for (int j = 0; j < ITEMS; ++j) if (i + j < n) y[i + j] = 1.f;
}

void host(float* y, int n, cudaStream_t stream) {
  int grid = (n + 1023) / 1024;
  if (n > 1024) {
    LAUNCH_K(4);
  } else {
    LAUNCH_K(1);
  }
}
"""
    new, cf = expand_macro_launches(src, "t.cu", "k")
    assert ("    // kerntune: LAUNCH_K(4) expanded to tune this launch\n"
            "    k<4><<<grid, 256, 0, stream>>>(y, n);\n") in new
    assert "    LAUNCH_K(1);\n" in new
    assert len(cf.kernel("k").macro_launch_sites) == 1 and len(cf.kernel("k").launch_sites) == 1


@pytest.mark.parametrize("define,use,why", [
    ("#define L(N) k_##N<<<1, 32, 0, stream>>>(y)", "L(a);", "uses `##`"),
    ("#define L(N) k_a<<<N, 32, 0, stream>>>(y, #N)", "L(4);", "uses `#`"),
    ("#define L(N) k_a<<<N, 32, 0, stream>>>(y, __LINE__)", "L(4);", "uses `__LINE__`"),
    ("#define L(N, ...) k_a<<<N, 32, 0, stream>>>(y __VA_OPT__(,) __VA_ARGS__)", "L(4, 1);", "uses `__VA_OPT__`"),
    ("#define INNER(N) k_a<<<N, 32, 0, stream>>>(y, #N)\n#define L(N) INNER(N)", "L(4);", "uses `#`"),
    ("#define L(N) k_a<<<N, 32, 0, stream>>>(y, N)", "L(__LINE__);", "arguments hold `__LINE__`"),
    ("#define L(N, ...) k_a<<<N, 32, 0, stream>>>(y, ##__VA_ARGS__)", "L(4);", "uses `##`"),  # no variadic args
])
def test_expansion_refusals(define, use, why):
    src = ("#include <cuda_runtime.h>\n" + define + "\n__global__ void k_a(int* y, ...) { y[0] = 1; }\n"
           "void host(int* y, cudaStream_t stream) {\n  " + use + "\n}\n")
    cf = parse_cuda(src, "t.cu")
    assert cf.kernel("k_a").macro_launch_sites, "the parser reads the launch at the use"
    with pytest.raises(KerntuneError) as e:
        expand_macro_launches(src, "t.cu", "k_a")
    msg = str(e.value)
    assert "is written inside the macro 'L'" in msg and why in msg and "Nothing was changed" in msg, msg


def test_expansion_not_a_complete_statement_refused():
    # the body opens the argument list, the use's line closes it: written out at the use it is not a statement
    src = ("#include <cuda_runtime.h>\n#define L(N) {k_a<<<N, 32, 0, stream>>>(y);\n"
           "__global__ void k_a(int* y) { y[0] = 1; }\n"
           "void host(int* y, cudaStream_t stream) {\n  L(4) }\n}\n")
    cf = parse_cuda(src, "t.cu")
    if not cf.kernel("k_a").macro_launch_sites:
        pytest.skip("the parser does not read this launch")
    with pytest.raises(KerntuneError) as e:
        expand_macro_launches(src, "t.cu", "k_a")
    assert "not a complete statement" in str(e.value)


def test_expansion_through_a_launching_macro_used_in_another_macros_body():
    """A use inside another macro's body is not in the code: the outer macro's use is written out, both
    expanded (the launch read at that use)."""
    src = ("#include <cuda_runtime.h>\n#define INNER(N) k_a<<<N, 32, 0, stream>>>(y)\n#define OUTER(N) INNER(2 * N)\n"
           "__global__ void k_a(int* y) { y[0] = 1; }\n"
           "void host(int* y, cudaStream_t stream) {\n  OUTER(4);\n}\n")
    new, cf = expand_macro_launches(src, "t.cu", "k_a")
    assert ("  // kerntune: OUTER(4) expanded to tune this launch\n  k_a<<<2 * 4, 32, 0, stream>>>(y);\n}\n") in new
    assert [s.config[0].text for s in cf.kernel("k_a").launch_sites] == ["2 * 4"]
