"""A block capped by a constant (``const dim3 block(std::min(tile_size, ns::kMaxThreads));``, ``d < 512 ? d : 512``,
``MIN(n, MAX_THREADS)`` with a #define): the cap becomes the block parameter, the launch and the spec's block become
``min(X, BLOCK)``, what assumes the cap follows it; where kerntune cannot be sure every value is right it refuses
the cap and says why; the rewrites take the cap only where none applies to the kernel as written. With nvcc: the
templates compile at the corners of their domains."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent_core.apply import render
from agent_core.model import KerntuneError, macro_name
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.rewrites.base import capped_block
from agent_core.templating.structural.analysis import analyze
from agent_core.templating.rewrites.compose import compose
from agent_core.templating.templatize import ALL_BLOCKS, HEADER_END, launch_exprs, templatize

from test_templatize import check_space
from tests.nvcc_check import CHECK_FLAGS

ROOT = Path(__file__).resolve().parent.parent

# vLLM's style: a host variable of the capped block, the cap a constexpr in a namespace, one row per block
NAMESPACED = """\
#include <cuda_runtime.h>
#include <algorithm>

namespace ops {
constexpr int kMaxThreads = 1024;
}  // namespace ops

/* kerntune:
args  = ["out: out f32[rows * d]", "x: in f32[rows * d]", "s: f32 = 0.5", "d: i32 = d"]
sizes = [{ rows = 512, d = 4096 }, { rows = 33, d = 100 }]
grid  = "rows"
block = "min(d, 1024)"
*/
__global__ void scale_rows(float* __restrict__ out, const float* __restrict__ x, const float s, const int d) {
  const long long row = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += blockDim.x) out[row * d + i] = x[row * d + i] * s;
}

void scale(float* out, const float* x, float s, int rows, int d, cudaStream_t stream) {
  const dim3 block(std::min(d, ops::kMaxThreads));
  scale_rows<<<rows, block, 0, stream>>>(out, x, s, d);
}
"""

# the conditional spelling through a host variable, a __shared__ array and __launch_bounds__ sized by the cap
CONDITIONAL = """\
#include <cuda_runtime.h>

/* kerntune:
args  = ["out: out f32[rows]", "x: in f32[rows * d]", "d: i32 = d"]
sizes = [{ rows = 256, d = 3000 }, { rows = 7, d = 200 }]
grid  = "rows"
block = "d if d < 512 else 512"
*/
__global__ void __launch_bounds__(512) row_sum(float* __restrict__ out, const float* __restrict__ x, const int d) {
  __shared__ float part[512];
  const long long row = blockIdx.x;
  float acc = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) acc += x[row * d + i];
  part[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int t = 0; t < blockDim.x; ++t) total += part[t];
    out[row] = total;
  }
}

void launch_row_sum(float* out, const float* x, int rows, int d, cudaStream_t stream) {
  const int threads = d < 512 ? d : 512;
  row_sum<<<rows, threads, 0, stream>>>(out, x, d);
}
"""

# a #define cap, the smaller taken by a function-like macro, the grid computed from the cap
DEFINE = """\
#include <cuda_runtime.h>

#define MAX_THREADS 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* kerntune:
args  = ["y: out f32[n]", "x: in f32[n]", "n: i32 = n"]
sizes = [{ n = 1000000 }, { n = 77 }]
grid  = "cdiv(n, 256)"
block = "min(n, 256)"
*/
__global__ void relu(float* __restrict__ y, const float* __restrict__ x, const int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void launch_relu(float* y, const float* x, int n, cudaStream_t stream) {
  relu<<<(n + MAX_THREADS - 1) / MAX_THREADS, MIN(n, MAX_THREADS), 0, stream>>>(y, x, n);
}
"""


def _t(text: str, kernel: str, name: str = "cap.cu"):
    return templatize(parse_cuda(text, name), kernel)


def _body(text: str) -> str:
    return text.split(HEADER_END, 1)[1].split("\n", 1)[1]


def _spec_block(text: str, kernel: str) -> list[str]:
    return spec_mod.find_spec(parse_cuda(text, "r.cu"), kernel).block


# ------------------------------------------------------------------------------------------- the cap lifted
def test_a_host_variable_capped_by_a_namespaced_constexpr_makes_the_cap_the_block():
    t = _t(NAMESPACED, "scale_rows")
    check_space(t)
    assert list(t.space.params) == ["K_MAX_THREADS"]
    p = t.space.params["K_MAX_THREADS"]
    assert (p.kind, p.original, p.values) == ("block_size", 1024, ALL_BLOCKS)
    assert "std::min(d, ops::kMaxThreads)" in p.why and "constexpr int kMaxThreads = 1024;" in p.why
    assert t.space.constraints == ["K_MAX_THREADS % 32 == 0", "K_MAX_THREADS <= 1024"]
    assert t.launch == {"grid": ["rows"], "block": ["min(d, K_MAX_THREADS)"], "smem": "0"}
    body = _body(t.text)
    assert "constexpr int kMaxThreads = KT_K_MAX_THREADS;" in body
    assert 'block = "min(d, KT_K_MAX_THREADS)"' in body  # the spec comment follows, as a site
    assert "const dim3 block(std::min(d, ops::kMaxThreads));" in body  # the launch follows by the name
    out = render(t, {"K_MAX_THREADS": 256})
    assert "constexpr int kMaxThreads = 256;" in out and _spec_block(out, "scale_rows") == ["min(d, 256)"]
    assert launch_exprs(parse_cuda(NAMESPACED, "cap.cu"), "scale_rows", t)["block"] == ["min(d, K_MAX_THREADS)"]


def test_a_conditional_cap_follows_into_shared_memory_launch_bounds_and_the_spec():
    t = _t(CONDITIONAL, "row_sum")
    check_space(t)
    p = t.space.params["BLOCK"]
    assert (p.kind, p.original) == ("block_size", 512) and p.values == ALL_BLOCKS  # the array follows: up to 1024
    assert t.space.constraints == ["BLOCK % 32 == 0", "BLOCK <= 1024"]
    assert t.launch["block"] == ["d if d < BLOCK else BLOCK"]
    body = _body(t.text)
    assert "__shared__ float part[KT_BLOCK];" in body and "__launch_bounds__(KT_BLOCK)" in body
    assert "const int threads = d < KT_BLOCK ? d : KT_BLOCK;" in body
    assert 'block = "d if d < KT_BLOCK else KT_BLOCK"' in body
    out = render(t, {"BLOCK": 1024})
    assert "__shared__ float part[1024];" in out and "d < 1024 ? d : 1024" in out
    assert _spec_block(out, "row_sum") == ["d if d < 1024 else 1024"]


def test_a_define_cap_with_a_min_macro_and_a_grid_computed_from_it():
    t = _t(DEFINE, "relu")
    check_space(t)
    p = t.space.params["MAX_THREADS"]
    assert (p.kind, p.original, p.values) == ("block_size", 256, ALL_BLOCKS)
    assert t.space.constraints == ["MAX_THREADS % 32 == 0", "MAX_THREADS <= 1024"]
    # the grid the launch computes from the cap: the spec's grid follows it too
    assert t.launch == {"grid": ["cdiv(n, MAX_THREADS)"], "block": ["min(n, MAX_THREADS)"], "smem": "0"}
    body = _body(t.text)
    assert "#define MAX_THREADS KT_MAX_THREADS" in body
    assert 'grid  = "cdiv(n, KT_MAX_THREADS)"' in body and 'block = "min(n, KT_MAX_THREADS)"' in body
    out = render(t, {"MAX_THREADS": 96})
    sp = spec_mod.find_spec(parse_cuda(out, "r.cu"), "relu")
    assert (sp.grid, sp.block) == (["cdiv(n, 96)"], ["min(n, 96)"])


def test_a_suffixed_cap_keeps_its_type():
    # FlashInfer's act_and_mul launch: std::min(static_cast<uint32_t>(d) / vec_size, 1024U) needs an unsigned cap
    path = ROOT / "bench/corpus/gated_act/gelu_tanh_and_mul_vec16.cu"
    t = templatize(parse_cuda(path.read_text(encoding="utf-8"), str(path)), "act_and_mul_kernel")
    assert "std::min(static_cast<uint32_t>(d) / vec_size, ((unsigned)KT_BLOCK));" in t.text
    assert t.launch["block"] == ["min(d / 8, BLOCK)"]
    out = render(t, {"BLOCK": 256})
    assert "std::min(static_cast<uint32_t>(d) / vec_size, 256U);" in out and 'block = "min(d / 8, 256)"' in out


def test_the_spelling_does_not_matter():
    """std::min, ::min, min, std::min<int>, the cap first or second, > with the operands swapped: the same cap."""
    for launch in ("std::min(d, ops::kMaxThreads)", "::min(d, ops::kMaxThreads)", "min(ops::kMaxThreads, d)",
                   "std::min<int>(d, ops::kMaxThreads)", "(d > ops::kMaxThreads ? ops::kMaxThreads : d)",
                   "(d <= ops::kMaxThreads) ? d : ops::kMaxThreads"):
        t = _t(NAMESPACED.replace("std::min(d, ops::kMaxThreads)", launch), "scale_rows")
        assert t.launch["block"] == ["min(d, K_MAX_THREADS)"], launch


def test_a_capped_int_variable_given_to_a_dim3_block_is_the_same_cap():
    """TurboTransformers' launcher: `int block_size = std::min(1024, ...); dim3 block(block_size);` (a `dim3` whose one
    argument the parser reads as a parameter's type) caps the block as the `min` written in the `dim3` does."""
    src = NAMESPACED.replace("  const dim3 block(std::min(d, ops::kMaxThreads));",
                             "  int block_size = std::min(ops::kMaxThreads, (int)((d + 31) / 32 * 32));\n"
                             "  dim3 block(block_size);").replace('block = "min(d, 1024)"',
                                                                   'block = "min(1024, round_up(d, 32))"')
    t = _t(src, "scale_rows")
    check_space(t)
    assert list(t.space.params) == ["K_MAX_THREADS"] and t.space.params["K_MAX_THREADS"].kind == "block_size"
    assert t.launch["block"] == ["min(K_MAX_THREADS, round_up(d, 32))"]
    body = _body(t.text)
    assert "constexpr int kMaxThreads = KT_K_MAX_THREADS;" in body and "dim3 block(block_size);" in body


def test_another_launch_capped_by_the_same_literal_follows():
    second = ("\n\nvoid launch_row_sum_async(float* out, const float* x, int rows, int d, cudaStream_t stream) {\n"
              "  row_sum<<<rows, d < 512 ? d : 512, 0, stream>>>(out, x, d);\n}\n")
    t = _t(CONDITIONAL + second, "row_sum")
    assert "row_sum<<<rows, d < KT_BLOCK ? d : KT_BLOCK, 0, stream>>>" in t.text
    assert len([s for s in t.sites if s.param == "BLOCK"]) == 8  # 2 + 2 launches, the array, the bounds, the spec's 2


# ------------------------------------------------------------------------------------------- refused
def _refused(text: str, kernel: str, why: str) -> None:
    with pytest.raises(KerntuneError) as e:
        _t(text, kernel)
    assert "the block size" in e.value.message and "is not a constant" in e.value.message
    assert why in e.value.message, e.value.message


def test_not_a_min_is_not_a_cap():
    for launch in ("std::max(d, ops::kMaxThreads)", "(d < ops::kMaxThreads ? ops::kMaxThreads : d)",
                   "std::min(d, rows)"):
        with pytest.raises(KerntuneError, match="is not a constant"):
            _t(NAMESPACED.replace("std::min(d, ops::kMaxThreads)", launch), "scale_rows")


def test_a_kernel_that_never_reads_its_block_is_refused():
    # one element per thread: a cap below the row would leave the rest of it undone
    loop = "for (int i = threadIdx.x; i < d; i += blockDim.x) out[row * d + i] = x[row * d + i] * s;"
    text = NAMESPACED.replace(loop, "const int i = threadIdx.x;\n  if (i < d) out[row * d + i] = x[row * d + i] * s;")
    _refused(text, "scale_rows", "the kernel never reads its block size")


def test_a_spec_block_that_is_not_the_same_min_is_refused():
    _refused(NAMESPACED.replace('block = "min(d, 1024)"', 'block = "round_up(min(d, 1024), 32)"'), "scale_rows",
             "the spec's block `round_up(min(d, 1024), 32)` is not the same min with 1024")


def test_a_spec_block_at_the_cap_is_kept_at_most_the_cap():
    # the spec says the row is at least the cap at every size: the block is the parameter, no more than the cap
    t = _t(CONDITIONAL.replace('block = "d if d < 512 else 512"', 'block = "512"')
           .replace("{ rows = 7, d = 200 }", "{ rows = 7, d = 600 }"), "row_sum")
    assert t.launch["block"] == ["BLOCK"] and "BLOCK <= 512" in t.space.constraints


def test_an_argument_computed_from_the_cap_is_refused():
    text = CONDITIONAL.replace("const int d) {", "const int d, const int per_thread) {") \
        .replace("row_sum<<<rows, threads, 0, stream>>>(out, x, d);",
                 "row_sum<<<rows, threads, 0, stream>>>(out, x, d, (d + threads - 1) / threads);") \
        .replace('"d: i32 = d"]', '"d: i32 = d", "per_thread: i32 = 1"]')
    # the template is what it is without caps: __launch_bounds__(512) alone, the block as written
    t = _t(text, "row_sum")
    assert list(t.space.params) == ["LAUNCH_BOUNDS"] and t.launch is None and "KT_BLOCK" not in t.text
    a = analyze(parse_cuda(text, "cap.cu"), "row_sum")
    assert any("passes `(d + threads - 1) / threads`, computed from it, to the kernel" in n for n in a.notes)
    _refused(text.replace("__launch_bounds__(512) ", ""), "row_sum", "computed from it, to the kernel")


def test_another_launch_that_does_not_follow_the_cap_is_refused():
    second = ("\n\nvoid launch_row_sum_64(float* out, const float* x, int rows, int d, cudaStream_t stream) {\n"
              "  row_sum<<<rows, 64, 0, stream>>>(out, x, d);\n}\n")
    a = analyze(parse_cuda(CONDITIONAL + second, "cap.cu"), "row_sum")
    assert a.block_cap is None and list(a.params) == ["LAUNCH_BOUNDS"]
    assert any("the launch at line 30 has a block `64` that does not follow it" in n for n in a.notes), a.notes


def test_a_block_changed_after_its_declaration_is_refused():
    text = NAMESPACED.replace("const dim3 block(std::min(d, ops::kMaxThreads));",
                              "dim3 block(std::min(d, ops::kMaxThreads));\n  block.x = 32 * ((block.x + 31) / 32);")
    _refused(text, "scale_rows", "the block `block.x = 32 * ((block.x + 31) / 32);` is changed")


def test_a_grid_y_from_the_cap_is_refused():
    text = DEFINE.replace("relu<<<(n + MAX_THREADS - 1) / MAX_THREADS, MIN(n, MAX_THREADS), 0, stream>>>(y, x, n);",
                          "relu<<<dim3(1, (n + MAX_THREADS - 1) / MAX_THREADS), MIN(n, MAX_THREADS), 0, stream>>>"
                          "(y, x, n);").replace('grid  = "cdiv(n, 256)"', 'grid  = ["1", "cdiv(n, 256)"]')
    _refused(text, "relu", "the grid's y `(n + MAX_THREADS - 1) / MAX_THREADS` is computed from it")


# ------------------------------------------------------------------------------------------- the rewrites
def test_the_rewrites_take_the_cap_only_where_none_applies_as_written():
    # a strided row loop the vectorize rewrite reads on the file as written: its composition stays that one
    got = compose(parse_cuda(NAMESPACED, "cap.cu"), "scale_rows")
    assert got.template is not None and "vectorize" in got.applied
    assert "K_MAX_THREADS" not in got.template.space.params and "KT_K_MAX_THREADS" not in got.template.text
    # the sampler's penalties kernel: nothing applies as written; on the cap, __launch_bounds__ does
    path = ROOT / "bench/corpus/other/logits_penalties_vocab_tiles_f32.cu"
    got = compose(parse_cuda(path.read_text(encoding="utf-8"), str(path)), "apply_penalties_kernel")
    assert got.applied == ["launch_bounds"]
    assert "__launch_bounds__(KT_K_MAX_THREADS, KT_MIN_BLOCKS)" in got.template.text
    assert "K_MAX_THREADS * MIN_BLOCKS <= 2048" in got.template.space.constraints
    assert dict(got.report)["warp_reduce"].endswith("it may end in a partial warp (warps must be whole)")


def test_capped_block_reads_the_launch():
    assert capped_block({"block": ["min(d, BLOCK)"]}, "BLOCK")
    assert capped_block({"block": "d if d < BLOCK else BLOCK"}, "BLOCK")
    assert not capped_block({"block": ["BLOCK"]}, "BLOCK")
    assert not capped_block({"block": ["min(d, 256)"]}, "BLOCK")
    assert not capped_block(None, "BLOCK")


# ------------------------------------------------------------------------------------------- compiling
def _compile(text: str, tag: str, tmp: Path, defines: dict[str, int]) -> str | None:
    cu = tmp / f"{tag}.cu"
    cu.write_text(text, encoding="utf-8")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-arch=sm_90", *CHECK_FLAGS, "-cubin", "-o", str(tmp / f"{tag}.cubin"), str(cu)]
    cmd += [f"-D{macro_name(k)}={v}" for k, v in defines.items()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return None if r.returncode == 0 else f"{tag}: {r.stderr or r.stdout}"


@pytest.mark.nvcc
def test_the_corner_configurations_compile(tmp_path):
    jobs = []
    path = ROOT / "bench/corpus/gated_act/gelu_tanh_and_mul_vec16.cu"
    for i, (text, kernel) in enumerate([(NAMESPACED, "scale_rows"), (CONDITIONAL, "row_sum"), (DEFINE, "relu"),
                                        (path.read_text(encoding="utf-8"), "act_and_mul_kernel")]):
        t = _t(text, kernel, f"cap{i}.cu")
        (name, p), = t.space.params.items()
        for v in (p.values[0], 96, p.values[-1]):
            jobs.append((t.text, f"{kernel}.t{v}", {name: v}))  # what the tuner compiles
            jobs.append((render(t, {name: v}), f"{kernel}.r{v}", {}))  # what apply writes
    with ThreadPoolExecutor(2) as ex:
        errors = [e for e in ex.map(lambda j: _compile(j[0], j[1], tmp_path, j[2]), jobs) if e]
    assert not errors, "\n".join(errors[:3])
