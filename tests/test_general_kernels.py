"""Kernels in the styles people write (bench/corpus, issue #11): what `prepare` (the entry of `tune` and `optimize`)
accepts, and what the optimize loop does with a kernel that has no structurally tunable site. No GPU: the loop
runs against a replay of the H100 recording, far enough to show which template it searches."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_core.agent.loop import AgentOptions, optimize
from agent_core.cli import main
from agent_core.model import KerntuneError
from agent_core.search.tuner import TuneOptions, open_backend, prepare, require_template, tune
from agent_core.store import Store

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "bench" / "corpus"
RECORDING = REPO / "tests" / "data" / "stores" / "bench.sqlite"
# vLLM style: block = min(hidden, 1024), computed from a runtime size, so not a tunable constant
# a block of one thread per element of a head (`dim3 block(head_dim)`): nothing for the structural templater
NOT_STRUCTURAL = ("rotary/rope_rotate_half_f32.cu", "apply_rotary_pos_emb_kernel")

# the bench's SiLU-and-mul with the block sized to the row at run time (a quarter of it, no cap): an expert matches
# it, the structural templater finds nothing to lift
SILU_MIN = """#include <cuda_fp16.h>
#include <algorithm>

/* kerntune:
args  = ["out: out f16[tokens * d]", "x: in f16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 64, d = 4096 }, { tokens = 7, d = 4099 }]
grid  = "tokens"
block = "d / 4"
*/
__global__ void silu_and_mul_kernel(__half* out, const __half* x, int d) {
  const long long t = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float a = __half2float(x[t * 2 * d + i]);
    out[t * d + i] = __float2half(a / (1.0f + expf(-a)) * __half2float(x[t * 2 * d + d + i]));
  }
}

void silu_and_mul(__half* out, const __half* x, int tokens, int d, cudaStream_t stream) {
  dim3 block(d / 4);
  silu_and_mul_kernel<<<tokens, block, 0, stream>>>(out, x, d);
}
"""


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNTUNE_STORE", raising=False)
    monkeypatch.delenv("KERNTUNE_BACKEND", raising=False)
    return tmp_path


def _corpus_copy(tmp_path: Path, rel: str) -> Path:
    dst = tmp_path / Path(rel).name
    shutil.copy(CORPUS / rel, dst)
    return dst


# ------------------------------------------------------------------------------- no structural template
def test_prepare_keeps_a_kernel_without_structural_template_and_says_why(scratch):
    rel, kernel = NOT_STRUCTURAL
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    assert prep.structural is None and prep.template is None
    assert "the block size `block` is not a constant" in prep.structural_why.message
    assert prep.spec is not None and len(prep.spec.sizes) == 3  # found and validated (against no parameters)


def test_tune_refuses_a_kernel_without_structural_template_and_points_to_optimize(scratch):
    rel, kernel = NOT_STRUCTURAL
    path = _corpus_copy(scratch, rel)
    prep = prepare(str(path), kernel)
    with pytest.raises(KerntuneError) as e:
        require_template(prep)
    assert "nothing structurally tunable in kernel 'apply_rotary_pos_emb_kernel'" in e.value.message
    assert "the block size `block` is not a constant" in e.value.message and "kerntune optimize" in e.value.message
    assert e.value.line == prep.kernel.name_span.line
    be = open_backend(f"replay:{RECORDING}")
    store = Store(scratch / "s.sqlite")
    try:
        with pytest.raises(KerntuneError, match="nothing structurally tunable"):
            tune(str(path), kernel, be, store, TuneOptions(budget=2), prepared=prep)
        assert not store.sessions(prep.path, kernel)  # refused before a session starts
    finally:
        store.close()
        be.close()


def test_cli_tune_names_the_reason_before_any_device_work(scratch, monkeypatch):
    rel, kernel = NOT_STRUCTURAL
    path = _corpus_copy(scratch, rel)
    monkeypatch.chdir(scratch)
    r = CliRunner().invoke(main, ["tune", str(path), "-k", kernel, "--backend", "gpu"], catch_exceptions=False)
    assert r.exit_code == 2, r.output  # bad input (2), not "no CUDA device" (3): refused before the backend
    out = " ".join(r.output.split())
    assert "nothing structurally tunable in kernel 'apply_rotary_pos_emb_kernel'" in out and "kerntune optimize" in out


def test_optimize_without_structural_template_goes_on_with_the_expert(scratch):
    src = scratch / "silu_min.cu"
    src.write_text(SILU_MIN)
    events = []
    be = open_backend(f"replay:{RECORDING}")
    store = Store(scratch / "s.sqlite")
    try:
        # the recording has no original of this file: the loop gets as far as timing it for the expert's round
        with pytest.raises(KerntuneError, match="no recorded measurement of the original kernel"):
            optimize(str(src), "silu_and_mul_kernel", be, store, AgentOptions(max_rounds=1),
                     on_event=events.append)
    finally:
        store.close()
        be.close()
    said = [e.message for e in events if e.kind == "status"]
    assert said[0].startswith("structural template: none (the block size `block` is not a constant")
    assert any(m.startswith("plan: search: search the expert:act_and_mul template first") for m in said), said
    assert any(m.startswith("timing the original silu_and_mul_kernel") for m in said), said


def test_optimize_with_no_template_at_all_stops_and_says_so(scratch):
    rel, kernel = "rotary/rope_rotate_half_f32.cu", "apply_rotary_pos_emb_kernel"  # no expert binds it today
    path = _corpus_copy(scratch, rel)
    events = []
    be = open_backend(f"replay:{RECORDING}")
    store = Store(scratch / "s.sqlite")
    try:
        res = optimize(str(path), kernel, be, store, AgentOptions(max_rounds=1), templaters=[],
                       on_event=events.append)
    finally:
        store.close()
        be.close()
    assert not res.rounds and res.final_step.action == "stop"
    said = [e.message for e in events if e.kind == "status"]
    assert said[0].startswith("structural template: none (")
    assert "nothing to tune" in said[-1]


# ------------------------------------------------------------------------------- the corpus count
def test_corpus_check_prepares_every_variant():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "corpus_check.py")], capture_output=True, text=True,
                       cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    import tomllib
    n = len(tomllib.loads((REPO / "bench" / "corpus" / "corpus.toml").read_text())["variant"])
    assert n >= 50
    assert lines[-1] == f"total: {n} of {n} prepared, 0 refused", "\n".join(l for l in lines if "refused" in l)


# ------------------------------------------------------------------------------- template_args
from agent_core.source import spec as spec_mod  # noqa: E402
from agent_core.source.cuda_parse import parse_cuda  # noqa: E402
from agent_core.templating.draft_spec import draft_spec  # noqa: E402
from agent_core.templating.templatize import templatize  # noqa: E402

SCALE_T = """/* kerntune:
args  = ["out: out f32[n]", "x: in f32[n]", "n: i32 = n"]
sizes = [{ n = 1048576 }, { n = 4099 }]
grid  = "cdiv(n, 256)"
block = "256"
template_args = ["float", "256"]
*/
template <typename T, int THREADS>
__global__ void scale(T* out, const T* x, int n) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  if (i < n) out[i] = x[i] * 2;
}

void launch(float* out, const float* x, int n, cudaStream_t s) {
  scale<float, 256><<<(n + 255) / 256, 256, 0, s>>>(out, x, n);
  scale<double, 128><<<(n + 127) / 128, 128, 0, s>>>((double*)out, (const double*)x, n);
}
"""


def _spec_error(text: str, kernel: str) -> KerntuneError:
    cf = parse_cuda(text, "t.cu")
    with pytest.raises(KerntuneError) as e:
        spec_mod.validate_spec(spec_mod.find_spec(cf, kernel), cf.kernel(kernel), {"THREADS"})
    return e.value


def test_template_args_are_parsed_and_follow_the_tuned_parameter():
    cf = parse_cuda(SCALE_T, "t.cu")
    spec = spec_mod.find_spec(cf, "scale")
    assert spec.template_args == ["float", "256"]
    t = templatize(cf, "scale")
    p = next(p for p in t.space.params.values() if p.template_param == "THREADS")
    k = cf.kernel("scale")
    assert spec_mod.instantiation(spec, k) == ["float", "256"]  # the original
    assert spec_mod.instantiation(spec, k, t, {**t.space.original_config(), p.name: 512}) == ["float", "512"]
    # the spec's literal is a site of the parameter: a rewritten file's spec names the instantiation it launches
    assert any(s.param == p.name and s.span.line == 5 for s in t.sites)  # template_args = ["float", "256"]
    assert f'template_args = ["float", "KT_{p.name}"]' in t.text


def test_a_spec_without_template_args_keeps_its_hash():
    cf = parse_cuda(SCALE_T.replace('template_args = ["float", "256"]\n', ""), "t.cu")
    spec = spec_mod.find_spec(cf, "scale")
    import json
    from agent_core.model import sha256_text
    d = {k: v for k, v in spec.__dict__.items()
         if k not in ("origin", "span", "path", "lines", "template_args", "inferred_template_args")}
    d["args"] = [a.__dict__ for a in spec.args]
    assert spec.spec_hash == sha256_text(json.dumps(d, sort_keys=True))  # recordings made before the field


@pytest.mark.parametrize("line, message", [
    ('template_args = "float"', "must be a list of the kernel's template arguments"),
    ('template_args = ["float, 256"]', "holds a comma outside"),
    ('template_args = ["float", "256>"]', "unbalanced"),
    ('template_args = ["float", ""]', "empty"),
    ('template_args = ["float"]', "has 1 entries but 'scale' has 2 template parameters (T, THREADS)"),
])
def test_bad_template_args_are_named_with_their_line(line, message):
    e = _spec_error(SCALE_T.replace('template_args = ["float", "256"]', line), "scale")
    assert message in e.message
    assert e.line == 5 and e.field_name == "template_args"


def test_template_args_on_a_kernel_that_is_no_template():
    text = SCALE_T.replace("template <typename T, int THREADS>\n", "").replace("T*", "float*").replace("THREADS", "256")
    e = _spec_error(text, "scale")
    assert "'scale' is not a template; remove the field" in e.message


def test_spec_drafts_name_the_explicit_instantiation():
    cf = parse_cuda(SCALE_T, "t.cu")
    draft = draft_spec(cf, "scale")
    line = next(ln for ln in draft.splitlines() if ln.startswith("template_args"))
    assert line.startswith('template_args = ["float", "256"]')
    assert "other launches instantiate <double, 128>" in line
    ggml = (CORPUS / "rms_norm" / "rms_norm_ggml_f32.cu").read_text()
    cf = parse_cuda(ggml, "g.cu")
    assert 'template_args = ["32"]' in draft_spec(cf, "rms_norm_f32")  # WARP_SIZE, as the instantiation is named


@pytest.mark.nvcc
def test_the_spec_chooses_among_compiled_instantiations(scratch):
    from agent_core.measure.compiler import compile_kernel
    rel, kernel = "rms_norm/rms_norm_ggml_f32.cu", "rms_norm_f32"
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    job = dict(arch="sm_90", include_dirs=[str(CORPUS / "rms_norm")], cache_dir=scratch / "cubin")
    with pytest.raises(KerntuneError, match="2 compiled instantiations and none was chosen"):
        compile_kernel(prep.text, kernel, **job)
    c = compile_kernel(prep.text, kernel, template_args=spec_mod.instantiation(prep.spec, prep.kernel), **job)
    assert c.symbol == "_Z12rms_norm_f32ILi1024EEvPKfPfilllf"  # rms_norm_f32<1024>, as the spec launches


@pytest.mark.nvcc
def test_the_instantiation_the_file_shows_a_type_alias_and_a_namespaced_enumerator_choose_among_compiled_ones(
        scratch):
    """A spec with no template_args over a kernel its file instantiates twice (Koifish's rope, <float> and
    <__nv_bfloat16> through a templated launcher's explicit instantiations) compiles the one the buffers' types give
    (as apply's spec_instantiation reads it; the spec's hash unchanged); a template argument written as the file's
    type alias (cute-kernels' `fp32_4`, `using fp32_4 = float4;`) matches the symbol the demangler spells with the
    aliased type."""
    from agent_core.measure.compiler import compile_kernel
    rel, kernel = "rotary/rope_neox_grid_b_t_heads_half_head_threads_position_is_t_powf_fast_sincos_bf16_koifish.cu", \
        "CU_rope_v0_"
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    job = dict(arch="sm_90", cache_dir=scratch / "cubin")
    assert prep.spec.template_args is None and prep.spec.inferred_template_args == ["__nv_bfloat16"]
    assert spec_mod.instantiation(prep.spec, prep.kernel) == ["__nv_bfloat16"]
    c = compile_kernel(prep.text, kernel, template_args=spec_mod.instantiation(prep.spec, prep.kernel), **job)
    assert c.symbol.startswith("_Z11CU_rope_v0_I13__nv_bfloat16E")
    assert prep.spec.spec_hash == spec_mod.find_spec(prep.cf, kernel).spec_hash
    rel, kernel = "gated_act/swiglu_gate_up_tensors_fp32x4_reinterpret_first_warp_tail_flat_bf16_cute_kernels.cu", \
        "_swiglu_forward_cuda_kernel"
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    assert prep.spec.template_args == ["__nv_bfloat16", "fp32_4"]
    c = compile_kernel(prep.text, kernel, template_args=spec_mod.instantiation(prep.spec, prep.kernel), **job)
    assert c.symbol.startswith("_Z27_swiglu_forward_cuda_kernelI13__nv_bfloat166float4E")
    # an enumerator of an enum inside a nested namespace (`namespace st::kernel { enum class ActivationType ...`),
    # named fully qualified, matches the demangler's `(st::kernel::ActivationType)1` (batch 17's SwiftTransformer)
    rel, kernel = "gated_act/fused_activation_multiply_silu_two_inputs_half2_pairs_gridstride_half_math_fp16_" \
        "swifttransformer.cu", "fusedActivationMultiplyKernel"
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    assert prep.spec.template_args == ["half", "st::kernel::ActivationType::SILU"]
    c = compile_kernel(prep.text, kernel, template_args=spec_mod.instantiation(prep.spec, prep.kernel), **job)
    assert c.symbol == "_ZN2st6kernel29fusedActivationMultiplyKernelI6__halfLNS0_14ActivationTypeE1EEEvPT_PKS4_S7_l"
    # a type alias named with its namespace (`ck_tile::half_t`, `using half_t = __half;` inside namespace ck_tile)
    # among five compiled instantiations (batch 29's Composable Kernel combine: the run ended in an error before)
    rel, kernel = "merge_attn_states/fmha_fwd_splitkv_combine_tile_m16_n128_lse_acc_lds_max_splits_16_split_major_" \
        "o_acc_f32_lse_out_natural_log_grid_tiles_nhead_batch_bshd_out_fp16_composable_kernel.cu", \
        "fmha_fwd_splitkv_combine_kernel"
    prep = prepare(str(CORPUS / rel), kernel, use_workspace_files=False)
    assert prep.spec.template_args == ["ck_tile::half_t", "16", "128", "16"]
    c = compile_kernel(prep.text, kernel, template_args=spec_mod.instantiation(prep.spec, prep.kernel), **job)
    assert c.symbol.startswith("_Z31fmha_fwd_splitkv_combine_kernelI6__halfLi16ELi128ELi16EE")


# ------------------------------------------------------------------------------- structural generality
def _structural(rel: str, kernel: str):
    cf = parse_cuda((CORPUS / rel).read_text(), str(CORPUS / rel))
    return templatize(cf, kernel)


def test_constexpr_tile_constants_in_a_dim3_are_block_sizes_and_the_grid_follows_the_rows():
    t = _structural("gated_act/mul_and_silu_rows2d.cu", "mul_and_silu_kernel")  # dim3 block(kThreadsX, kRows)
    assert {n: p.original for n, p in t.space.params.items()} == {"K_THREADS_X": 128, "K_ROWS_PER_BLOCK": 4}
    # the launch divides by kRowsPerBlock, so the spec's cdiv(num_tokens, 4) must follow it
    assert t.launch["grid"] == ["cdiv(num_tokens, K_ROWS_PER_BLOCK)"]
    assert t.launch["block"] == ["K_THREADS_X", "K_ROWS_PER_BLOCK"]


def test_namespace_qualified_constants_in_a_dim3_variable_are_block_sizes():
    # `const dim3 block(rowdot::kThreadsX, rowdot::kRows);` parses as a function declaration whose parameters are
    # qualified type names; the grid `(rows + rowdot::kRows - 1) / rowdot::kRows` follows the rows per block
    t = _structural("other/row_dot_block2d_bf16.cu", "row_dot_kernel")
    assert {n: p.original for n, p in t.space.params.items()} == {"K_THREADS_X": 64, "K_ROWS": 4}
    assert t.launch == {"grid": ["cdiv(rows, K_ROWS)"], "block": ["K_THREADS_X", "K_ROWS"], "smem": "0"}


def test_a_block_of_one_column_offers_its_y_as_a_1d_block():
    # ggml's rope: block (1, CUDA_ROPE_BLOCK_SIZE, 1), a thread per pair of the row's columns: the threads are in
    # y, so y gets a 1-D block's values (64 threads cover a head of 128, where 256 left three quarters idle)
    t = _structural("rotary/rope_neox_theta_on_the_fly_ggml_fp16.cu", "rope_neox_f16")
    y = t.space.params["CUDA_ROPE_BLOCK_SIZE"]
    assert y.original == 256 and {32, 64, 96, 128, 512, 1024} <= set(y.values)
    assert t.space.params["BLOCK_X"].values == [1]
    # rows stacked in y keep the small domain
    rows = _structural("other/row_dot_block2d_bf16.cu", "row_dot_kernel").space.params["K_ROWS"]
    assert rows.values == [1, 2, 4, 8, 16, 32]


_WARP_ROWS = """#include <cuda_runtime.h>
{decls}
/* kerntune:
args  = ["y: out f32[rows]", "x: in f32[rows * n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{{ rows = 64, n = 4096 }}]
grid  = "cdiv(rows, 8)"
block = "256"
*/
__global__ void warp_rows(float* y, const float* x, int rows, int n) {{
  {shared}const int lane = threadIdx.x % 32, row = blockIdx.x * NUM_WARPS + threadIdx.x / 32;
  if (row >= rows) return;
  float a = 0.f;
  for (int i = lane; i < n; i += 32) a += x[(long long)row * n + i];
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if (lane == 0) y[row] = a;
}}
void go(float* y, const float* x, int rows, int n) {{
  {host}
}}
"""


@pytest.mark.parametrize("decls, host", [
    ("constexpr int NUM_WARPS = 8;\nconstexpr int kWarpSize = 32;",
     "warp_rows<<<(rows + NUM_WARPS - 1) / NUM_WARPS, NUM_WARPS * kWarpSize>>>(y, x, rows, n);"),
    ("#define NUM_WARPS 8\n#define WARP_SIZE 32\n#define THREADS (NUM_WARPS * WARP_SIZE)",
     "warp_rows<<<(rows + NUM_WARPS - 1) / NUM_WARPS, THREADS>>>(y, x, rows, n);"),
    ("constexpr int NUM_WARPS = 8;",
     "const int threads = 32 * NUM_WARPS;\n  warp_rows<<<(rows + NUM_WARPS - 1) / NUM_WARPS, threads>>>(y, x, rows, n);"),
])
def test_a_block_of_warps_times_the_warp_size_tunes_the_warp_count(decls, host):
    t = templatize(parse_cuda(_WARP_ROWS.format(decls=decls, host=host, shared=""), "w.cu"), "warp_rows")
    p = t.space.params["NUM_WARPS"]
    assert (p.kind, p.original, p.values) == ("warps_per_block", 8, [1, 2, 4, 8, 16, 32])
    assert t.launch == {"grid": ["cdiv(rows, NUM_WARPS)"], "block": ["NUM_WARPS * 32"], "smem": "0"}
    assert "NUM_WARPS * 32 <= 1024" in t.space.constraints


def test_a_warp_count_that_sizes_the_dynamic_shared_memory_follows_or_stays():
    launch = "warp_rows<<<(rows + NUM_WARPS - 1) / NUM_WARPS, NUM_WARPS * 32, NUM_WARPS * sizeof(float)>>>(y, x, rows, n);"
    src = _WARP_ROWS.format(decls="constexpr int NUM_WARPS = 8;", shared="", host=launch)
    # the spec's 32 bytes are the launch's 8 * sizeof(float): they follow the count
    t = templatize(parse_cuda(src.replace('block = "256"', 'block = "256"\nsmem  = "32"'), "w.cu"), "warp_rows")
    assert t.launch["smem"] == "NUM_WARPS * 4" and len(t.space.params["NUM_WARPS"].values) > 1
    # 64 bytes are not what the launch computes: a larger count would index past them
    with pytest.raises(KerntuneError, match=r"the warp count `NUM_WARPS` stays: the launch's dynamic shared memory"):
        templatize(parse_cuda(src.replace('block = "256"', 'block = "256"\nsmem  = "64"'), "w.cu"), "warp_rows")


def test_a_warp_count_the_kernel_repeats_as_a_literal_stays():
    src = _WARP_ROWS.format(decls="constexpr int NUM_WARPS = 8;", shared="__shared__ float part[8];\n  ",
                            host="warp_rows<<<(rows + NUM_WARPS - 1) / NUM_WARPS, NUM_WARPS * 32>>>(y, x, rows, n);")
    with pytest.raises(KerntuneError, match=r"the warp count 8 stays fixed: the literal 8 at line 10 looks like the "
                       r"warp count of the block"):
        templatize(parse_cuda(src, "w.cu"), "warp_rows")
    # a literal warp count has no name for the kernel and the grid to follow: not lifted
    lit = _WARP_ROWS.format(decls="constexpr int NUM_WARPS = 8;", shared="",
                            host="warp_rows<<<(rows + 7) / 8, 8 * 32>>>(y, x, rows, n);")
    with pytest.raises(KerntuneError, match=r"the block size `8 \* 32` is not a constant"):
        templatize(parse_cuda(lit, "w.cu"), "warp_rows")


@pytest.mark.parametrize("rel, kernel", [
    ("rms_norm/rms_norm_warp_per_row_fp16.cu", "rmsnorm_warp_kernel"),
    ("fused_add_rms_norm/fused_add_rms_norm_warp_rows_bf16.cu", "fused_add_rmsnorm_warp_bf16"),
    ("softmax/softmax_warp_rows_bf16.cu", "softmax_warp_bf16"),
    ("merge_attn_states/merge_state_inplace_mask_bf16.cu", "MergeStateInPlaceKernel"),
    ("merge_attn_states/merge_partial_warp_f32.cu", "merge_partial_attn_f32"),  # `d += 32` from threadIdx.x
])
def test_a_kernel_written_for_32_lanes_keeps_block_x_at_32(rel, kernel):
    t = _structural(rel, kernel)
    x = next(p for p in t.space.params.values() if p.kind == "block_size")
    assert x.original == 32 and x.values == [32]
    assert any(len(p.values) > 1 for p in t.space.params.values())  # the rows / warps per block stay tunable


def test_a_block_dimension_the_dynamic_shared_memory_is_computed_from_stays():
    # `nshared = threads.y * 3 * sizeof(U)` at the launch (U a template type), `smem = "48"` in the spec: a
    # template that tuned the y block would launch 48 bytes for 32 warps' statistics (the Apex kernel's
    # BLOCK_Y = 32 faulted on the H100, 2026-11-25n); and the fixed grid x of a loop over gridDim.y is not a
    # grid-stride parameter
    rel = "layer_norm/layer_norm_welford_apex.cu"
    cf = parse_cuda((CORPUS / rel).read_text(), rel)
    with pytest.raises(KerntuneError, match=r"the block's y `4` stays: the launch's dynamic shared memory"):
        templatize(cf, "cuApplyLayerNorm")


def test_a_spec_shared_memory_that_is_the_launch_s_number_follows_the_block():
    # `nshared = threads.y * 3 * sizeof(float)`, `smem = "48"`: 48 is what the launch computes with 4 warps in y,
    # so the spec's number becomes the launch's expression, and the spec comment's 48 a site of BLOCK_Y
    t = _structural("layer_norm/layer_norm_rowwise_moments_bf16.cu", "layer_norm_rowwise_kernel")
    assert t.space.params["BLOCK_Y"].values == [1, 2, 4, 8, 16, 32]
    assert t.launch["smem"] == "BLOCK_Y * 3 * 4"
    site = next(s for s in t.sites if s.original_text == "48")
    assert (site.param, site.render) == ("BLOCK_Y", "{value} * 3 * 4")


def test_a_1d_block_that_sizes_the_dynamic_shared_memory_stays():
    src = """/* kerntune:
args  = ["y: out f32[rows]", "x: in f32[rows * n]", "n: i32 = n"]
sizes = [{ rows = 64, n = 4096 }]
grid  = "rows"
block = "256"
smem  = "1024"
*/
__global__ void k(float* y, const float* x, int n) {
  extern __shared__ float s[];
  float a = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) a += x[(long long)blockIdx.x * n + i];
  s[threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.x == 0) { float t = 0.f; for (int i = 0; i < blockDim.x; ++i) t += s[i]; y[blockIdx.x] = t; }
}
void go(float* y, const float* x, int rows, int n) {
  const int threads = 256;
  const size_t bytes = threads * sizeof(float);
  k<<<rows, threads, bytes>>>(y, x, n);
}
"""
    with pytest.raises(KerntuneError, match=r"the block size `threads` stays: the launch's dynamic shared memory"):
        templatize(parse_cuda(src.replace('smem  = "1024"', 'smem  = "4096"'), "smem_block.cu"), "k")
    # 1024 is the launch's own threads * sizeof(float): the spec's shared memory follows the block
    t = templatize(parse_cuda(src, "smem_block.cu"), "k")
    assert t.launch["smem"] == "THREADS * 4" and len(t.space.params["THREADS"].values) > 1
    # without a spec the launch is the template's: its literal block in the shared memory follows too
    lit = src.split("*/\n", 1)[1].replace("const int threads = 256;", "").replace(
        "const size_t bytes = threads * sizeof(float);", "").replace("<<<rows, threads, bytes>>>",
                                                                     "<<<rows, 256, 256 * sizeof(float)>>>")
    t = templatize(parse_cuda(lit, "smem_literal.cu"), "k")
    assert [x.original_text for x in t.sites if x.param == "BLOCK"] == ["256", "256"]
    # the same kernel with a fixed shared array: the block is tunable
    fixed = src.replace("extern __shared__ float s[];", "__shared__ float s[1024];").replace(
        "k<<<rows, threads, bytes>>>", "k<<<rows, threads>>>").replace('smem  = "1024"\n', "")
    assert "THREADS" in templatize(parse_cuda(fixed, "smem_fixed.cu"), "k").space.params


@pytest.mark.parametrize("rel, kernel", [
    ("rms_norm/rms_norm_warps2d_fp16.cu", "RMSNormKernel"),  # dim3 nthrs(32, num_warps)
    ("fused_add_rms_norm/fused_add_rms_norm_smem_bf16.cu", "FusedAddRMSNormKernel"),
])
def test_a_warp_block_with_a_runtime_warp_count_has_nothing_structural(rel, kernel):
    cf = parse_cuda((CORPUS / rel).read_text(), rel)
    with pytest.raises(KerntuneError, match="x size BLOCK_X = 32 stays fixed: the kernel works in warps of 32"):
        templatize(cf, kernel)


def test_a_host_variable_doubled_in_a_loop_is_not_a_constant():
    cf = parse_cuda((CORPUS / "softmax/soft_max_mask_scale_ggml.cu").read_text(), "s.cu")
    with pytest.raises(KerntuneError, match="the block size `block_dims` is not a constant"):
        templatize(cf, "soft_max_f32")  # int nth = WARP_SIZE; while (...) nth *= 2;


def test_the_warp_size_dividing_the_block_is_written_from_it():
    t = _structural("softmax/online_softmax_temperature_f32.cu", "temperature_softmax_kernel")
    p = t.space.params["K_THREADS"]  # warp_md[kThreads / 32], threadIdx.x % 32
    assert p.original == 1024 and 32 in p.values and "K_THREADS % 32 == 0" in t.space.constraints


TWO_BRANCHES = """/* kerntune:
args  = ["out: out f32[n]", "x: in f32[n]", "n: i32 = n"]
sizes = [{ n = 1048576 }, { n = 4099 }]
grid  = "cdiv(n, 512)"
block = "512"
*/
__global__ void copy(float* out, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i];
}

void launch(float* out, const float* x, int n, cudaStream_t s) {
  if (n < 1024) {
    copy<<<(n + 127) / 128, 128, 0, s>>>(out, x, n);
  } else {
    copy<<<(n + 511) / 512, 512, 0, s>>>(out, x, n);
  }
}
"""


def test_tunable_values_come_from_the_launch_branch_the_spec_describes():
    t = templatize(parse_cuda(TWO_BRANCHES, "b.cu"), "copy")
    block = next(p for p in t.space.params.values() if p.kind == "block_size")
    assert block.original == 512  # the spec's launch, not the first branch's 128
    cf = parse_cuda((CORPUS / "rms_norm/rms_norm_ggml_f32.cu").read_text(), "g.cu")
    with pytest.raises(KerntuneError, match="the block size 1024 stays fixed"):  # template_args = ["1024"]
        templatize(cf, "rms_norm_f32")  # its 32-float s_sum assumes 32 warps: legitimately fixed


# ------------------------------------------------------------------------------- ~ INIT bounds of size names
ROPE_POS = """/* kerntune:
args  = ["pos: in i32[tokens] ~ randint(0, max_pos)", "cache: in f32[max_pos * 64] ~ uniform(-1, 1)",
         "out: out f32[tokens * 64]"]
sizes = [{ tokens = 4096, max_pos = 8192 }, { tokens = 77, max_pos = 333 }]
grid  = "tokens"
block = "64"
*/
__global__ void gather(const int* pos, const float* cache, float* out) {
  out[blockIdx.x * 64 + threadIdx.x] = cache[pos[blockIdx.x] * 64 + threadIdx.x];
}
"""


def _gather_spec(text: str):
    cf = parse_cuda(text, "g.cu")
    spec = spec_mod.find_spec(cf, "gather")
    spec_mod.validate_spec(spec, cf.kernel("gather"))
    return spec


def test_init_bounds_may_be_expressions_of_size_names_evaluated_per_size_set():
    spec = _gather_spec(ROPE_POS)
    pos = spec.args[0]
    assert [spec_mod.init_params(pos.init, s) for s in spec.sizes] == [("randint", 0, 8192), ("randint", 0, 333)]
    assert spec_mod.init_params(spec.args[1].init) == ("uniform", -1, 1)  # numbers need no sizes


@pytest.mark.parametrize("init, message", [
    ("randint(0, max_p)", "'max_p' is not a size name (the bounds are numbers or expressions of the size names: "
                          "tokens, max_pos)"),
    ("randint(0, max_pos - 333)", "lo must be below hi (at tokens=77, max_pos=333)"),
    ("randint(0, max_pos / 2.0)", "randint needs whole numbers"),
])
def test_bad_init_bounds_name_the_size_set(init, message):
    with pytest.raises(KerntuneError) as e:
        _gather_spec(ROPE_POS.replace("randint(0, max_pos)", init))
    assert message in e.value.message and e.value.field_name == "args[0]"
