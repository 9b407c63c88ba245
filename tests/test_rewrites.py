"""Semantic rewrites of the user's kernel (agent_core/templating/rewrites): which apply to kernels in several
styles and why the others do not, that the composed template parses, keeps its launch consistent (template
launch, host launch and spec comment) and, with nvcc, compiles for sm_90 at sampled configurations (VEC > 1
included) without spills at the default; preconditions checked negatively on kernels they must leave alone."""

import random
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from agent_core import apply as apply_mod
from agent_core.agent.planning import Analysis, Round, RuleBasedPlanner, Step
from agent_core.model import macro_name
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import kernel_has_errors, parse_cuda
from agent_core.templating.rewrites import REWRITES, compose
from agent_core.templating.space import check_config
from agent_core.templating.templatize import templatize

DATA = Path(__file__).resolve().parent / "data" / "cu" / "rewrites"

# kernel file -> the rewrites that must apply (the others must say why not)
EXPECTED = {
    "bias_residual_act.cu": {"work_per_thread", "vectorize", "launch_bounds", "load_hint"},
    "gelu_tanh.cu": {"work_per_thread", "vectorize", "fast_math", "launch_bounds", "load_hint"},
    "l2_normalize.cu": {"warp_reduce", "fuse_passes", "vectorize", "fast_math", "launch_bounds", "load_hint"},
    "absmax_quant.cu": {"warp_reduce", "fuse_passes", "vectorize", "launch_bounds", "load_hint"},
    "column_sum.cu": {"outputs_per_thread", "split_reduction", "load_hint"},
    "column_max_bf16.cu": {"outputs_per_thread", "split_reduction", "load_hint"},
    "column_weighted_mean_fp16.cu": {"outputs_per_thread", "split_reduction", "load_hint"},
    "layer_norm_dgamma_f32.cu": {"outputs_per_thread", "launch_bounds", "load_hint"},
    "rmsnorm_cast.cu": {"warp_reduce", "fuse_passes", "vectorize", "launch_bounds", "load_hint"},
    "softmax3.cu": {"warp_reduce", "fuse_passes", "vectorize", "fast_math", "launch_bounds", "load_hint"},
    "silu_mul.cu": {"vectorize", "fast_math", "launch_bounds", "load_hint"},
    "dequant_rows_2d.cu": {"work_per_thread", "vectorize", "launch_bounds", "load_hint"},
    "scale_optional_bias.cu": {"vectorize", "launch_bounds", "load_hint"},
}


def _compose(name: str, text: str | None = None):
    path = DATA / name
    text = path.read_text() if text is None else text
    cf = parse_cuda(text, str(path))
    return cf, compose(cf, cf.kernels[0].name)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rewrites_apply_where_their_preconditions_hold(name):
    cf, got = _compose(name)
    assert set(got.applied) == EXPECTED[name]
    assert [n for n, _ in got.report] == [r.name for r in REWRITES]
    for n, why in got.report:
        assert why is None or (isinstance(why, str) and len(why) > 10), (n, why)
    t = got.template
    assert t.origin == "rewrite:" + "+".join(n for n, w in got.report if w is None)
    rcf = parse_cuda(t.text, cf.path)
    assert not kernel_has_errors(rcf, t.kernel)
    # every parameter is a macro with its original value as default, and every KT_ macro used is a parameter
    used = set(re.findall(r"\bKT_(\w+)\b", apply_mod.strip_header(t.text)))
    assert used <= set(t.space.params)
    for p in t.space.params.values():
        assert f"#define {macro_name(p.name)} {p.original}\n" in t.text
        assert p.original in p.values
    assert check_config(t.space, t.space.original_config(), None) is None
    # the rewritten kernel says what each rewrite did
    assert all(f"kerntune {n}" in t.text for n in got.applied if n in ("vectorize", "warp_reduce", "work_per_thread"))


def test_softmax_three_pass_becomes_warp_reductions_and_vectors():
    _, got = _compose("softmax3.cu")
    t = got.template
    body = apply_mod.strip_header(t.text)
    assert body.count("__shfl_xor_sync") == 4  # two reductions, each in the warps and over the warp partials
    assert "for (int s = THREADS / 2" not in body  # the trees are gone
    assert "buf[1 /* kerntune warp_reduce" in body  # the shared array no longer follows the block size
    assert body.count("kt_aligned<KT_VEC>(xr)") == 4  # the three passes read vectors when the row is aligned
    # the row is read once into registers when it fits: the first pass loads it, the other two read registers
    assert "kt_pack<float, KT_VEC> kt_row_xr[KT_CACHE_ROW > 0 ? KT_CACHE_ROW : 1];" in body
    assert body.count("kt_row_xr[kt_c] = kt_load_hint<KT_LOAD_HINT, KT_VEC>(xr, kt_kk)") == 1
    assert body.count("if (kt_cached) {") == 3
    assert "kt_expf<KT_FAST_MATH>(kt_row_xr[kt_c].v[kt_j] - mx) / total" in body
    assert t.space.params["CACHE_ROW"].original == 0 and "VEC * CACHE_ROW * 4 <= 256" in t.space.constraints
    assert "VEC * CACHE_ROW * 4 * THREADS <= 131072" in t.space.constraints
    assert "kt_expf<KT_FAST_MATH>" in body and "expf(xr" not in body.replace("kt_expf<KT_FAST_MATH>(xr", "")
    # the block size is free of powers of two now; it stays a multiple of a warp
    threads = t.space.params["THREADS"]
    assert 96 in threads.values and "is_pow2(THREADS)" not in t.space.constraints
    assert "THREADS % 32 == 0" in t.space.constraints
    assert t.space.params["VEC"].values == [1, 2, 4]  # 16 bytes of float


def test_vector_width_follows_the_widest_element():
    assert _compose("silu_mul.cu")[1].template.space.params["VEC"].values == [1, 2, 4, 8]  # half: 8 x 2 bytes
    assert _compose("rmsnorm_cast.cu")[1].template.space.params["VEC"].values == [1, 2, 4, 8]


def test_elementwise_grid_is_divided_by_the_work_per_thread_everywhere():
    cf, got = _compose("gelu_tanh.cu")
    t = got.template
    assert t.launch["grid"] == ["cdiv(n, BLOCK * VEC * ITEMS)"]
    body = apply_mod.strip_header(t.text)
    assert "gelu_tanh<<<(n + ((KT_BLOCK * KT_VEC) * KT_ITEMS) - 1) / ((KT_BLOCK * KT_VEC) * KT_ITEMS), KT_BLOCK>>>" in body
    assert 'grid  = "cdiv(n, ((KT_BLOCK * KT_VEC) * KT_ITEMS))"' in body
    assert "idx += blockDim.x * gridDim.x" in body  # a grid-stride loop: any grid still covers n


def test_gathers_from_read_only_pointers_stay_scalar():
    _, got = _compose("bias_residual_act.cu")
    body = apply_mod.strip_header(got.template.text)
    assert "bias[i % cols]" in body  # the gather is left as it is, x, res and out are vectors
    assert "kt_aligned<KT_VEC>(x) && kt_aligned<KT_VEC>(res) && kt_aligned<KT_VEC>(out)" in body


def test_two_offsets_of_one_input_are_two_vector_streams():
    _, got = _compose("silu_mul.cu")
    body = apply_mod.strip_header(got.template.text)
    assert "kt_load_hint<KT_LOAD_HINT, KT_VEC>((x + (t * 2 * d)), kt_kk)" in body
    assert "kt_load_hint<KT_LOAD_HINT, KT_VEC>((x + (t * 2 * d + d)), kt_kk)" in body


def test_a_2d_grid_strides_its_columns_and_divides_only_the_grid_x():
    """blockIdx.y the row, the x index the column, the element through an index local (`e = row * ld + col`):
    the columns become a grid-stride loop of vectors at the row's offset; the grid's y stays the rows."""
    _, got = _compose("dequant_rows_2d.cu")
    t = got.template
    assert t.launch["grid"] == ["cdiv(cols, THREADS * VEC * ITEMS)", "rows"]
    body = apply_mod.strip_header(t.text)
    assert "dim3 grid((cols + ((threads * KT_VEC) * KT_ITEMS) - 1) / ((threads * KT_VEC) * KT_ITEMS), rows);" in body
    assert 'grid  = ["cdiv(cols, ((KT_THREADS * KT_VEC) * KT_ITEMS))", "rows"]' in body
    assert "kt_aligned<KT_VEC>((out + ((long long)row * ld))) && kt_aligned<KT_VEC>((q + ((long long)row * ld)))" in body


def test_a_loop_over_locals_of_the_block_and_grid_size_and_a_null_tested_read():
    """`nthreads = blockDim.x`, `gtid`, `stride` locals read as the grid-stride loop they are; `bias != nullptr ?
    bias[i] : 0` is loaded only where bias is not null (a vector load would read through a null pointer)."""
    _, got = _compose("scale_optional_bias.cu")
    body = apply_mod.strip_header(got.template.text)
    assert "(bias == nullptr || kt_aligned<KT_VEC>(bias)) && kt_aligned<KT_VEC>(y) && kt_aligned<KT_VEC>(x)" in body
    assert "if (bias != nullptr) kt_bias[kt_u] = kt_load_hint<KT_LOAD_HINT, KT_VEC>(bias, kt_kk);" in body


def test_index_locals_with_offsets_declared_in_the_loop_are_hoisted_whole():
    """An offset built from the body's own invariant locals is written before the loop with their values; one that
    the body assigns is not."""
    src = """__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int base = blockIdx.x * n;
    const int e = base + i;
    y[e] = 2.f * x[e];
  }
}"""
    text = _HEAD + src + "\nvoid go(float* y, const float* x, const int* idx, int n) { k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }\n"
    cf = parse_cuda(text, "hoist.cu")
    got = compose(cf, "k")
    assert dict(got.report)["vectorize"] is None
    assert "kt_aligned<KT_VEC>((y + ((blockIdx.x * n)))) && kt_aligned<KT_VEC>((x + ((blockIdx.x * n))))" in got.template.text
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  int base = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    base += 1;
    const int e = base + i;
    y[e] = 2.f * x[e];
  }
}""", "vectorize")
    assert why is not None


# --------------------------------------------------------------------------------------------- negatives
_HEAD = """/* kerntune:
args  = ["y: out f32[n]", "x: in f32[n]", "idx: in i32[n]", "n: i32 = n"]
sizes = [{ n = 4096 }, { n = 1001 }]
grid  = "cdiv(n, 256)"
block = "256"
*/
"""


def _why(kernel_src: str, rewrite: str) -> str | None:
    text = _HEAD + kernel_src + "\nvoid go(float* y, const float* x, const int* idx, int n) " \
        "{ k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }\n"
    cf = parse_cuda(text, "neg.cu")
    return dict(compose(cf, "k").report)[rewrite]


def test_a_loop_with_a_data_dependent_stride_is_not_vectorized():
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += idx[0]) y[i] = 2.f * x[i];
}""", "vectorize")
    assert why is not None and "not strided by the threads" in why


def test_a_scatter_or_a_neighbour_read_of_a_written_pointer_is_not_vectorized():
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[idx[i]] = x[i];
}""", "vectorize")
    assert why is not None and "not contiguous" in why
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n - 1; i += blockDim.x) y[i] = x[i] + y[i + 1];
}""", "vectorize")
    assert why is not None


def test_a_read_only_load_of_the_element_becomes_the_register_and_a_taken_address_is_not_vectorized():
    """`__ldg(&x[i])` (vLLM's style) reads the element: in the vector loop it is the element's register, not
    `__ldg(&register)` (a global load from a register's address faults: CUDA_ERROR_INVALID_ADDRESS_SPACE on the
    H100, gpu/results/2026-11-24j/rewrite_check/templated.log; fixed: templated_ldg_fixed.log). An address taken for anything else refuses."""
    src = """__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.f * __ldg(&x[i]);
}"""
    assert _why(src, "vectorize") is None
    cf = parse_cuda(_HEAD + src + "\nvoid go(float* y, const float* x, const int* idx, int n) "
                    "{ k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }\n", "ldg.cu")
    body = apply_mod.strip_header(compose(cf, "k").template.text)
    vector_loop = body[body.index("kt_aligned<KT_VEC>"):body.index("the scalar loop")]
    assert "__ldg" not in vector_loop and "2.f * kt_x[kt_u].v[kt_j]" in vector_loop
    assert "__ldg(&x[i])" in body[body.index("the scalar loop"):]  # the tail keeps the user's load
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { const float* p = &x[i]; y[i] = p[0]; }
}""", "vectorize")
    assert why is not None and "address of `x[i]` is taken" in why


def test_passes_are_fused_only_over_a_row_they_all_read_and_none_writes():
    # two passes over the same range, but the second writes the stream the first reads: nothing to cache
    text = _HEAD + """__global__ void k(float* y, const float* x, const int* idx, int n) {
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += y[i];
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * s;
}
void go(float* y, const float* x, const int* idx, int n) { k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }
"""
    got = compose(parse_cuda(text, "neg.cu"), "k")
    assert "no two block-strided passes" in dict(got.report)["fuse_passes"]
    assert dict(got.report)["vectorize"] is None


def test_an_element_that_returns_early_is_not_turned_into_a_loop():
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    if (x[i] < 0.f) return;
    y[i] = x[i];
  }
}""", "work_per_thread")
    assert why is not None and "return" in why
    ok = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}""", "work_per_thread")
    assert ok is None


def test_a_loop_with_a_barrier_is_not_vectorized():
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) { y[i] = x[i]; __syncthreads(); }
}""", "vectorize")
    assert why is not None and "__syncthreads" in why


_TREE = """__global__ void k(float* y, const float* x, const int* idx, int n) {
  __shared__ float s[256];
  s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) STMT
    SYNC
  }
  if (threadIdx.x == 0) y[blockIdx.x] = s[0];
}"""


def test_a_reduction_that_is_not_a_sum_or_max_is_not_rewritten():
    why = _why(_TREE.replace("STMT", "s[threadIdx.x] = s[threadIdx.x] - s[threadIdx.x + k];")
               .replace("SYNC", "__syncthreads();"), "warp_reduce")
    assert why is not None and "not a sum, max or min" in why
    ok = _why(_TREE.replace("STMT", "s[threadIdx.x] += s[threadIdx.x + k];").replace("SYNC", "__syncthreads();"),
              "warp_reduce")
    assert ok is None


_COLUMN = """
__global__ void k(float* y, const float* x, const int* idx, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  ACC_DECL
  for (int r = START; r < END; ++r) BODY;
  y[c] = acc;
}
"""


def _column(acc_decl="float acc = 0.f;", start="0", end="n", body="acc += x[(long long)r * n + c]") -> str | None:
    return _why(_COLUMN.replace("ACC_DECL", acc_decl).replace("START", start).replace("END", end)
                .replace("BODY", body), "split_reduction")


def test_a_serial_reduction_loop_is_split_across_the_block_only_where_that_keeps_its_meaning():
    assert _column() is None
    assert _column(acc_decl="float acc = -INFINITY;", body="acc = fmaxf(acc, x[(long long)r * n + c])") is None
    assert "start at zero" in _column(acc_decl="float acc = 1.f;")
    assert "depend on the thread" in _column(start="c")
    assert "depend on the thread" in _column(end="n - threadIdx.x")
    assert "reads the accumulator" in _column(body="acc += acc * x[r]")
    assert "writes something" in _column(body="acc += (y[r] = x[r])")
    assert "neither" in _column(body="acc *= x[r]")
    assert "shared memory" in _why(_COLUMN.replace("ACC_DECL", "__shared__ float t[32]; float acc = 0.f;")
                                   .replace("START", "0").replace("END", "n")
                                   .replace("BODY", "acc += x[r]"), "split_reduction")
    assert "more than declarations" in _why(_COLUMN.replace("ACC_DECL", "const float b = x[c]; float acc = 0.f;")
                                            .replace("START", "0").replace("END", "n")
                                            .replace("BODY", "acc += x[r]"), "split_reduction")


def test_the_split_loop_keeps_every_thread_at_the_barrier_and_launches_a_2d_block():
    cf, got = _compose("column_sum.cu")
    t = got.template
    body = apply_mod.strip_header(t.text)
    assert "const bool kt_live = (c < cols);" in body and "if (kt_live) {" in body
    # the split loop, unswitched by outputs_per_thread after the split: vector loads only, or lane by lane
    assert "if (kt_outs_vec)\n        for (int r = (0) + (int)threadIdx.y;" in body, body
    assert "__syncthreads();" in body and "if (threadIdx.y != 0 || !kt_live) return;" in body
    assert body.index("if (threadIdx.y != 0 || !kt_live) return;") < body.index(
        "kt_scatter<KT_OUTS>(out, c, s, kt_outs_live);")
    assert 'block = ["KT_BLOCK", "KT_SPLIT"]' in body and "dim3(KT_BLOCK, KT_SPLIT)>>>" in body
    assert t.launch["block"] == ["BLOCK", "SPLIT"]
    assert "BLOCK * SPLIT <= 1024" in t.space.constraints
    sizes = {"rows": 777, "cols": 3001}
    assert spec_mod.launch(t.launch, sizes, {"BLOCK": 128, "SPLIT": 8, "OUTS": 1}).block == (128, 8, 1)
    assert spec_mod.launch(t.launch, sizes, {"BLOCK": 128, "SPLIT": 8, "OUTS": 4}).grid == (6, 1, 1)


def test_a_race_prone_tree_without_a_barrier_per_step_is_left_alone():
    why = _why(_TREE.replace("STMT", "s[threadIdx.x] += s[threadIdx.x + k];").replace("SYNC", ""), "warp_reduce")
    assert why is not None and "races" in why


def test_a_tree_whose_other_slots_are_read_afterwards_is_left_alone():
    src = _TREE.replace("STMT", "s[threadIdx.x] += s[threadIdx.x + k];").replace("SYNC", "__syncthreads();") \
        .replace("y[blockIdx.x] = s[0];", "y[blockIdx.x] = s[0] + s[1];")
    why = _why(src, "warp_reduce")
    assert why is not None and "other slots" in why


def test_no_rewrite_at_all_says_why_for_each():
    from agent_core.model import KerntuneError
    from agent_core.templating.rewrites import rewrite_template
    text = _HEAD + """__global__ void __launch_bounds__(256) k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += idx[0]) y[i] = x[i];
}
void go(float* y, const float* x, const int* idx, int n) { k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }
"""
    cf = parse_cuda(text, "none.cu")
    with pytest.raises(KerntuneError) as e:
        rewrite_template(cf, "k")
    assert "vectorize:" in str(e.value) and "warp_reduce:" in str(e.value)


# --------------------------------------------------------------------------------------------- apply
@pytest.mark.parametrize("name", ["gelu_tanh.cu", "softmax3.cu", "silu_mul.cu"])
def test_apply_writes_the_rewrite_back_whole_and_readable(name):
    cf, got = _compose(name)
    t = got.template
    cfg = {**t.space.original_config(), "VEC": max(t.space.params["VEC"].values)}
    if "ITEMS" in cfg:
        cfg["ITEMS"] = 2
    rw = apply_mod.rewrite_file(cf.text, cf.path, t.kernel, t, cfg)
    assert "KT_" not in rw.text and "kerntune:params-begin" not in rw.text
    assert not kernel_has_errors(parse_cuda(rw.text, cf.path), t.kernel)
    # the spec written back launches what the template was tuned on, on every size set
    new_cf = parse_cuda(rw.text, cf.path)
    new = spec_mod.find_spec(new_cf, t.kernel)
    names = templatize(new_cf, t.kernel).space.original_config()  # a spec may name the kernel's own parameters
    old = spec_mod.find_spec(cf, t.kernel)
    for sizes in old.sizes:
        assert spec_mod.launch(new, sizes, names) == spec_mod.launch(t.launch, sizes, cfg)


# --------------------------------------------------------------------------------------------- planner
def test_the_planner_tries_the_rewrite_after_the_structural_template():
    cf, got = _compose("softmax3.cu")
    structural = templatize(cf, "softmax3")
    rewrite = got.template
    pl = RuleBasedPlanner(20)
    first = pl.plan([], [structural, rewrite])
    assert first.template is structural
    r1 = Round(0, structural, {"best_params": structural.space.original_config(), "speedup": 1.1},
               Analysis("", {"pct_copy": 45.0}), Step("search", "", structural))
    nxt = pl.plan([r1], [rewrite])
    assert nxt.action == "switch_template" and nxt.template is rewrite and "rewrite:" in nxt.reason


def test_the_loop_proposes_the_rewrite_without_experts(tmp_path):
    from agent_core.agent.loop import rewrite_templater
    from agent_core.search.tuner import prepare
    src = tmp_path / "softmax3.cu"
    src.write_text((DATA / "softmax3.cu").read_text())
    prep = prepare(str(src), "softmax3", use_workspace_files=False)
    got = rewrite_templater(prep, [])
    assert len(got) == 1 and got[0].origin.startswith("rewrite:") and got[0].template_hash != prep.template.template_hash


# ------------------------------------------------------------------------ the loops of other groups of threads
def _group_kernel(body: str, block: str = "256", launch_block: str = "256") -> tuple[str | None, str]:
    """(why vectorize does not apply, the rewritten kernel) for a row kernel ``k`` over rows of ``n``."""
    text = f"""constexpr int kThreadsX = 64;
/* kerntune:
args  = ["y: out f32[rows * n]", "x: in f32[rows * n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{{ rows = 64, n = 4096 }}, {{ rows = 3, n = 1001 }}]
grid  = "rows"
block = {block}
*/
__global__ void k(float* y, const float* x, int rows, int n) {{
  const float* xr = x + (long long)blockIdx.x * n;
  float* yr = y + (long long)blockIdx.x * n;
{body}
}}
void go(float* y, const float* x, int rows, int n) {{ k<<<rows, {launch_block}>>>(y, x, rows, n); }}
"""
    cf = parse_cuda(text, "groups.cu")
    out = compose(cf, "k")
    return dict(out.report)["vectorize"], (out.template.text if out.template is not None else "")


def test_a_warps_lane_loop_is_vectorized_over_the_warps_lanes():
    why, text = _group_kernel("""  constexpr int kWarp = 32;
  const int lane = threadIdx.x & (kWarp - 1);
  if (threadIdx.x >= 32) return;
  float s = 0.f;
  for (int i = lane; i < n; i += kWarp) s += xr[i];
  for (int i = lane; i < n; i += kWarp) yr[i] = xr[i] / s;""")
    assert why is None
    assert text.count("for (long long kt_k = lane; kt_k < kt_nv; kt_k += (long long)(kWarp)") == 2
    why, text = _group_kernel("""  const int lane = threadIdx.x & 0x1f;
  for (int i = lane; i < n; i += warpSize) yr[i] = 2.f * xr[i];""")
    assert why is None and "for (long long kt_k = lane; kt_k < kt_nv; kt_k += (long long)(warpSize)" in text
    for step in ("16", "blockDim.x"):  # half a warp's lanes, or the lane strided by the block: not one group
        why, _ = _group_kernel(f"""  const int lane = threadIdx.x % 32;
  for (int i = lane; i < n; i += {step}) yr[i] = 2.f * xr[i];""")
        assert why is not None and "not strided by the threads" in why


def test_a_loop_that_starts_past_the_first_slice_is_vectorized_from_its_offset():
    why, text = _group_kernel("""  const int tid = threadIdx.x;
  const int nt = blockDim.x;
  float m = tid < n ? xr[tid] : -1e30f;
  for (int j = tid + nt; j < n; j += nt) m = fmaxf(m, xr[j]);
  yr[tid] = m;""")
    assert why is None
    assert "kt_span = (long long)(n) - (long long)(nt);" in text  # no vector below the offset: kt_nv >= 0
    assert "kt_aligned<KT_VEC>((xr + (nt)))" in text and "for (long long kt_k = tid;" in text
    assert "const int j = (int)((long long)(nt) + kt_k" in text.replace("kt_kk", "kt_k")
    assert "for (int j = (int)(kt_done + (tid + nt)); j < n; j += nt)" in text  # the tail from the offset on
    # an offset that differs between the block's threads, or that the loop changes, is not a slice's start
    for start, extra in (("tid + tid", ""), ("threadIdx.x + lane", "  const int lane = threadIdx.x % 32;\n"),
                         ("tid + off", "  int off = nt;\n")):
        body = "  const int tid = threadIdx.x;\n  const int nt = blockDim.x;\n" + extra + \
            f"  for (int j = {start}; j < n; j += nt) {{ yr[j] = xr[j]; {'off += 1;' if 'off' in start else ''} }}"
        why, _ = _group_kernel(body)
        assert why is not None, start


def test_a_2d_blocks_row_of_threads_is_a_group_only_with_the_launchs_block_x():
    body = """  __shared__ float part[4];
  const int r = threadIdx.y;
  for (int c = threadIdx.x; c < n; c += {step}) yr[r * 0 + c] = 2.f * xr[c];"""
    why, text = _group_kernel(body.format(step="kThreadsX"), block="[64, 4]", launch_block="dim3(kThreadsX, 4)")
    assert why is None, why
    why, _ = _group_kernel(body.format(step="32"), block="[64, 4]", launch_block="dim3(kThreadsX, 4)")
    assert why is not None and "not strided by the threads" in why  # 32 is not the block's x (64)
    # a 2-D block's flat thread index strided by its thread count
    why, text = _group_kernel("""  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int nt = blockDim.x * blockDim.y;
  for (int c = t; c < n; c += nt) yr[c] = 2.f * xr[c];""", block="[64, 4]", launch_block="dim3(kThreadsX, 4)")
    assert why is None, why


# --------------------------------------------------------------------------------------------- nvcc
def _nvcc(text: str, cfg: dict, tmp: Path) -> str:
    src = tmp / "t.cu"
    src.write_text(text)
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp / "t.cubin"), "-Xptxas", "-v",
           *[f"-D{macro_name(k)}={v}" for k, v in cfg.items()], str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rewrite_templates_compile_for_sm90(name, tmp_path):
    _, got = _compose(name)
    t = got.template
    log = _nvcc(t.text, t.space.original_config(), tmp_path)
    assert " 0 bytes spill stores" in log and " 0 bytes stack frame" in log, log
    import itertools
    names = list(t.space.params)
    allc = [dict(zip(names, c)) for c in itertools.product(*(t.space.params[n].values for n in names))]
    valid = [c for c in allc if check_config(t.space, c, None) is None]
    rng = random.Random(12)
    sample = rng.sample(valid, min(2, len(valid)))
    if "VEC" in t.space.params:  # the widest vector, with the rest at their originals
        sample.append({**t.space.original_config(), "VEC": max(t.space.params["VEC"].values)})
    if "CACHE_ROW" in t.space.params:  # the row in registers at the widest vector
        sample.append({**t.space.original_config(), "VEC": 4, "CACHE_ROW": 4})
    for cfg in sample:
        _nvcc(t.text, cfg, tmp_path)


@pytest.mark.nvcc
def test_applied_rewrite_compiles(tmp_path):
    cf, got = _compose("softmax3.cu")
    t = got.template
    cfg = {**t.space.original_config(), "VEC": 4, "FAST_MATH": 1, "THREADS": 96}
    rw = apply_mod.rewrite_file(cf.text, cf.path, t.kernel, t, cfg)
    _nvcc(rw.text, {}, tmp_path)


@pytest.mark.nvcc
def test_helpers_inside_an_extern_c_block_keep_cpp_linkage(tmp_path):
    """A kernel written inside `extern "C" { ... }` (a runner that compiles its kernels at run time and looks them up
    by name): the helper templates a rewrite places above it are given C++ linkage back (templates may not have C
    linkage: the fast-math helpers inside the block did not compile, held-out batch 26's lighttransport rope); the
    kernel keeps its C name. A kernel outside such a block gets the helpers as before."""
    src = """#include <cuda_runtime.h>
extern "C" {  // a comment with a brace { in it
/* kerntune:
args  = ["x: inout f32[n]", "n: i32 = n"]
sizes = [{ n = 100000 }, { n = 77 }]
grid  = "cdiv(n, 256)"
block = 256
*/
__global__ void gelu_c(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.5f * x[i] * (1.f + tanhf(0.7978845608f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}
}  // extern "C"
"""
    cf = parse_cuda(src, str(tmp_path / "g.cu"))
    t = compose(cf, "gelu_c").template
    assert "fast_math" in t.origin and 'extern "C++" {' in t.text
    assert t.text.index('extern "C" {') < t.text.index('extern "C++" {') < t.text.index("__global__")
    _nvcc(t.text, {**t.space.original_config(), "FAST_MATH": 1}, tmp_path)
    rw = apply_mod.rewrite_file(cf.text, cf.path, t.kernel, t, {**t.space.original_config(), "FAST_MATH": 1})
    _nvcc(rw.text, {}, tmp_path)
    _, got = _compose("softmax3.cu")
    assert 'extern "C++"' not in got.template.text


# --------------------------------------------------------------------------------------------- cli
def test_show_lists_the_rewrites_and_templatize_writes_the_rewrite(tmp_path):
    from click.testing import CliRunner

    from agent_core.cli import main
    from agent_core.templating.workfiles import read_template_files
    src = tmp_path / "softmax3.cu"
    src.write_text((DATA / "softmax3.cu").read_text())
    r = CliRunner().invoke(main, ["show", str(src)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "rewrite warp_reduce: applies" in r.output and "rewrite vectorize: applies" in r.output
    assert "rewrite work_per_thread: no: the kernel uses barriers or shared memory" in r.output
    r = CliRunner().invoke(main, ["templatize", str(src), "-k", "softmax3", "--rewrite"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "CACHE_ROW = 0" in r.output and "VEC = 1" in r.output
    back = read_template_files(tmp_path / ".kerntune", src, "softmax3", src.read_text())
    assert back.origin.startswith("rewrite:warp_reduce") and "CACHE_ROW" in back.space.params
    assert back.launch == {"grid": ["rows"], "block": ["THREADS"], "smem": "0"}


def test_a_rewrite_that_fails_is_skipped_and_the_others_still_apply(monkeypatch):
    from agent_core.templating.rewrites.vectorize import Vectorize

    def boom(self, ctx):
        ctx.params["VEC"] = None  # a half-done change that must not leak into the template
        raise ValueError("unforeseen")
    monkeypatch.setattr(Vectorize, "rewrite", boom)
    _, got = _compose("softmax3.cu")
    report = dict(got.report)
    assert report["vectorize"].startswith("internal error, skipped (ValueError: unforeseen)")
    assert report["warp_reduce"] is None and report["fast_math"] is None and report["fuse_passes"] is None
    assert got.template.space.params["VEC"].values == [1, 2, 4]  # fuse_passes' own, not the half-done one
    used = set(re.findall(r"\bKT_(\w+)\b", apply_mod.strip_header(got.template.text)))
    assert used <= set(got.template.space.params)


# --------------------------------------------------------------------------------------------- lane divisions
_FLAT = """#define BLOCK 256

/* kerntune:
args  = ["out: out f32[rows * cols]", "x: in f32[rows * cols]", "bias: in f32[cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 64, cols = 4096 }, { rows = 7, cols = 1001 }]
grid  = "cdiv(rows * cols, 256)"
block = "256"
*/
__global__ void flat_bias(float* out, const float* x, const float* bias, int rows, int cols) {
  const long long idx = (long long)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (long long)rows * cols) return;
  const long long r = idx / cols;
  const int c = (int)(idx % cols);
  out[idx] = x[idx] * (float)(r + 1) + bias[c];
}

void run(float* out, const float* x, const float* bias, int rows, int cols) {
  flat_bias<<<(int)(((long long)rows * cols + BLOCK - 1) / BLOCK), BLOCK>>>(out, x, bias, rows, cols);
}
"""


def _body_of(template_text: str) -> str:
    return apply_mod.strip_header(template_text)


def test_a_flat_index_divided_per_lane_is_divided_once_per_vector(tmp_path):
    path = tmp_path / "flat.cu"
    path.write_text(_FLAT)
    cf = parse_cuda(_FLAT, str(path))
    got = compose(cf, "flat_bias")
    assert "vectorize" in got.applied
    body = _body_of(got.template.text)
    vec = body[body.index("kt_nv"):body.index("the scalar loop")]
    # one division of the vector's first index; the lanes use the stepped quotient and remainder
    assert vec.count("kt_b / (cols)") == 1 and vec.count("kt_b % (cols)") == 1
    assert "const long long r = ((decltype(idx / (cols)))(kt_q0));" in vec
    assert "const int c = (int)(((decltype(idx % (cols)))(kt_r0)));" in vec
    assert "else if (kt_r0 >= (cols)) { kt_q0 += kt_r0 / (cols); kt_r0 %= (cols); }" in vec
    # the scalar loop (tail, misaligned) is the user's code as written
    tail = body[body.index("the scalar loop"):]
    assert "idx / cols" in tail and "idx % cols" in tail


def test_a_divisor_the_body_changes_or_redeclares_is_not_stepped(tmp_path):
    src = _FLAT.replace("const long long r = idx / cols;", "int cols2 = cols; const long long r = idx / cols2;")
    cf = parse_cuda(src, str(tmp_path / "f.cu"))
    body = _body_of(compose(cf, "flat_bias").template.text)
    assert "kt_b / (cols2)" not in body and "idx / cols2" in body  # declared in the body: divided as written
    src = _FLAT.replace("const float* bias, int rows, int cols) {", "const float* bias, int rows, int cols) {\n  int d = cols;").replace(
        "const long long r = idx / cols;", "const long long r = idx / d; d = d + 0;")
    cf = parse_cuda(src, str(tmp_path / "g.cu"))
    body = _body_of(compose(cf, "flat_bias").template.text)
    assert "kt_b / (d)" not in body


def _c_div(a: int, b: int) -> tuple[int, int]:
    """C's truncating quotient and remainder."""
    q = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
    return q, a - q * b


def test_stepping_the_remainder_gives_cs_quotient_and_remainder_for_every_sign():
    """The lane arithmetic the vector loop emits: with kt_step (first index >= 0, divisor > 0) the base quotient
    and remainder stepped by the lane, a division only on a wrap; otherwise the lane divides as written."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=2000, deadline=None)
    @given(st.integers(-10 ** 12, 10 ** 12), st.integers(0, 15),
           st.integers(-10 ** 6, 10 ** 6).filter(lambda d: d != 0))
    def check(b, j, d):
        step = b >= 0 and d > 0
        qb, rb = _c_div(b, d) if step else (0, 0)
        q, r = qb, rb + j
        if not step:
            q, r = _c_div(b + j, d)
        elif r >= d:
            dq, r = _c_div(r, d)
            q += dq
        assert (q, r) == _c_div(b + j, d)

    check()


@pytest.mark.nvcc
def test_stepped_lanes_compile_at_every_vector_width(tmp_path):
    path = tmp_path / "flat.cu"
    path.write_text(_FLAT)
    t = compose(parse_cuda(_FLAT, str(path)), "flat_bias").template
    for v in t.space.params["VEC"].values:
        log = _nvcc(t.text, {**t.space.original_config(), "VEC": v, "ITEMS": 2}, tmp_path)
        assert " 0 bytes spill stores" in log, log


def test_a_read_bounded_by_a_condition_on_its_index_is_not_vectorized():
    """`i < m ? x[i] : 0`: the condition bounds the read (x may hold only m elements); a vector load would read the
    whole vector whatever the lanes' conditions."""
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = i < idx[0] ? x[i] : 0.f;
}""", "vectorize")
    assert why is not None and "condition on the index" in why
    why = _why("""__global__ void k(float* y, const float* x, const int* idx, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] > 0.f ? x[i] : 0.f;
}""", "vectorize")
    assert why is None  # a condition on the element's value reads every element anyway


def test_loads_from_shared_memory_get_no_global_load_hint():
    """A local pointer into shared memory vectorizes, but its loads stay plain: `ld.global` on a shared address
    reads the wrong space."""
    src = """__global__ void k(float* y, const float* x, const int* idx, int n) {
  extern __shared__ float smem[];
  float* vals = smem + 32;
  for (int i = threadIdx.x; i < n; i += blockDim.x) vals[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.f * vals[i];
}"""
    text = _HEAD + src + "\nvoid go(float* y, const float* x, const int* idx, int n) { k<<<(n + 255) / 256, 256>>>(y, x, idx, n); }\n"
    cf = parse_cuda(text, "smem.cu")
    body = apply_mod.strip_header(compose(cf, "k").template.text)
    assert "kt_load<KT_VEC>(vals, kt_kk)" in body and "kt_load_hint<KT_LOAD_HINT, KT_VEC>(x, kt_kk)" in body
    assert "kt_load_hint<KT_LOAD_HINT, KT_VEC>(vals" not in body


_GROUP_LOOPS = ["other/row_argmax_warp_shuffle_fp16.cu", "other/row_logsumexp_warp_lanes_f32.cu",
                "other/row_dot_block2d_bf16.cu", "other/asym_int8_quant_minmax_bf16.cu"]


@pytest.mark.nvcc
@pytest.mark.parametrize("name", _GROUP_LOOPS)
def test_vectorized_loops_of_warps_2d_rows_and_offsets_compile_at_every_width(name, tmp_path):
    """The corpus kernels whose loops are strided by a warp's lanes, a 2-D block's row of threads, or start a
    block past the thread's first element: vectorized, and compiled at every vector width."""
    corpus = Path(__file__).resolve().parents[1] / "bench" / "corpus"
    kernel = next(v["kernel"] for v in tomllib.loads((corpus / "corpus.toml").read_text())["variant"]
                  if v["file"] == name)
    cf = parse_cuda((corpus / name).read_text(), str(corpus / name))
    out = compose(cf, kernel)
    assert dict(out.report)["vectorize"] is None
    t = out.template
    for vec in t.space.params["VEC"].values:
        _nvcc(t.text, {**t.space.original_config(), "VEC": vec}, tmp_path)
