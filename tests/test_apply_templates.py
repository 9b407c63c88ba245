"""Applying an expert's kernel to a templated user kernel: an explicit specialization of the instantiation the
spec tunes (agent_core.source.instantiation, apply._rewrite_specialization).

The corpus winners come from the H100 recording of the corpus families (tests/data/stores/
corpus_families_2026-11-23e.sqlite, gpu/results/2026-11-23e/corpus_families_780fb98); nvcc checks that each
applied file compiles, host code included (skipped without nvcc).
"""

import shutil
import subprocess
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_core.cli import main
from agent_core.model import KerntuneError
from agent_core.source import instantiation as inst
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.search.tuner import prepare
from tests.dispatch_helpers import copy_with_recording
from tests.nvcc_check import CHECK_FLAGS

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "corpus"
STORE = ROOT / "tests" / "data" / "stores" / "corpus_families_2026-11-23e.sqlite"

# (file under bench/corpus, kernel, the specialization apply writes, how its launches change)
TEMPLATED = [
    ("rms_norm/rms_norm_block_reduce_bf16.cu", "rms_norm_kernel", "rms_norm_kernel<__nv_bfloat16>", "same"),
    ("rms_norm/rms_norm_ggml_f32.cu", "rms_norm_f32", "rms_norm_f32<1024>", "same"),  # <WARP_SIZE> is another
    ("rms_norm/rms_norm_warps2d_fp16.cu", "RMSNormKernel", "RMSNormKernel<__half>", "depends"),
    ("rotary/rotary_embedding_template_bf16.cu", "rotary_embedding_kernel",
     "rotary_embedding_kernel<__nv_bfloat16, true>", "same"),
    ("softmax/softmax_pow2_block_fp16.cu", "cunn_SoftMaxForward", "cunn_SoftMaxForward<__half, float, __half>",
     "same"),
    ("group_quant/per_token_group_quant_fp8_16lanes.cu", "per_token_group_quant_8bit_kernel",
     "per_token_group_quant_8bit_kernel<__nv_bfloat16, __nv_fp8_e4m3>", "same"),
    ("merge_attn_states/merge_attn_states_pack128_fp16.cu", "merge_attn_states_kernel",
     "merge_attn_states_kernel<__half, 128>", "same"),  # a constexpr local of the launcher, written as its value
    ("fused_add_rms_norm/fused_add_rms_norm_smem_bf16.cu", "FusedAddRMSNormKernel",
     "FusedAddRMSNormKernel<__nv_bfloat16>", "depends"),
    ("layer_norm/layer_norm_sum_sq_bf16.cu", "generalLayerNorm", "generalLayerNorm<__nv_bfloat16>", "same"),
    ("layer_norm/layer_norm_welford_apex.cu", "cuApplyLayerNorm", "cuApplyLayerNorm<__half, float, __half>",
     "depends"),  # deduced from the arguments, inside a templated launcher
    ("gated_act/silu_and_mul_act_template.cu", "act_and_mul_kernel", None, None),
]


def _copy(tmp_path, rel):
    """The corpus file and the recorded store, the store's paths pointed at the copy."""
    src = CORPUS / rel
    f = tmp_path / src.name
    shutil.copy(src, f)
    store = tmp_path / "results.sqlite"
    if not store.exists():
        shutil.copy(STORE, store)
    with sqlite3.connect(store) as c:
        for table in ("sessions",):
            c.execute(f"UPDATE {table} SET path = ? WHERE path LIKE ?", (str(f.resolve()), f"%/bench/corpus/{rel}"))
    return f, store


@pytest.mark.parametrize("rel,kernel,name,kind", TEMPLATED, ids=[t[1] for t in TEMPLATED])
def test_the_instantiation_each_corpus_template_is_tuned_for(rel, kernel, name, kind):
    cf = parse_cuda((CORPUS / rel).read_text(), str(CORPUS / rel))
    k = cf.kernel(kernel)
    spec = spec_mod.find_spec(cf, kernel)
    args = inst.spec_instantiation(cf, k, spec)
    if name is not None:
        assert inst.specialization_name(k, args) == name
        kinds = {inst.site_instance(cf, k, s, args).kind for s in k.launch_sites}
        assert kind in kinds, kinds


@pytest.mark.parametrize("rel,kernel,name,kind", [t for t in TEMPLATED if t[2]], ids=[t[1] for t in TEMPLATED if t[2]])
def test_apply_writes_the_recorded_expert_winner_as_an_explicit_specialization(tmp_path, rel, kernel, name, kind):
    f, store = _copy(tmp_path, rel)
    before = f.read_text()
    r = CliRunner().invoke(main, ["apply", str(f), "-k", kernel, "--store", str(store), "--backend", "none",
                                  "--dry-run" if not shutil.which("nvcc") else "--single"])
    assert r.exit_code == 0, r.output
    new = f.read_text() if shutil.which("nvcc") else before
    if not shutil.which("nvcc"):
        return  # the dry run printed the diff; the file is written only once nvcc has compiled it
    cf = parse_cuda(new, str(f))
    k = cf.kernel(kernel)  # the template is still the one kernel of that name
    assert [x.name for x in cf.kernels] == [x.name for x in parse_cuda(before, str(f)).kernels]
    assert k.template_params and k.body_span.end - k.body_span.start > 10
    assert f"template <>\n__global__ void __launch_bounds__(" in new and f"{name.split('<')[0]}<" in new
    specs = inst.explicit_specializations(cf, kernel)
    assert [inst.specialization_name(k, a) for a, _ in specs] == [name]
    assert f"// kerntune: {name} from the expert:" in new
    if kind == "depends":
        assert "std::is_same<" in new and "#include <type_traits>" in new
        assert new.count("} else {") >= 1
    # tuning the template again would measure the specialization under every configuration: refused
    with pytest.raises(KerntuneError, match="explicit specialization"):
        prepare(str(f), kernel, new)


SOURCE = '''#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[rows * d]", "x: in f16[rows * 2 * d]", "d: i32 = d"]
sizes = [{ rows = 64, d = 4096 }, { rows = 77, d = 4099 }]
grid  = "rows"
block = "min(d, 1024)"
*/
template <typename T>
__global__ void silu_and_mul(T* __restrict__ out, const T* __restrict__ x, const int d) {
  const long long r = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float a = (float)x[r * 2 * d + i];
    out[r * d + i] = (T)(a / (1.0f + expf(-a)) * (float)x[r * 2 * d + d + i]);
  }
}
'''


def test_launches_of_the_instantiation_another_one_and_a_templated_launcher():
    host = SOURCE + '''
template <typename scalar_t>
void launch(scalar_t* out, const scalar_t* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<scalar_t><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
}
void launch_half(half* out, const half* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<half><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
}
void launch_float(float* out, const float* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<float><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
}
'''
    cf = parse_cuda(host, "k.cu")
    k = cf.kernel("silu_and_mul")
    spec = spec_mod.find_spec(cf, "silu_and_mul")
    with pytest.raises(KerntuneError, match="several instantiations"):
        inst.spec_instantiation(cf, k, spec)
    spec.template_args = ["half"]
    args = inst.spec_instantiation(cf, k, spec)
    got = [inst.site_instance(cf, k, s, args) for s in k.launch_sites]
    assert [g.kind for g in got] == ["depends", "same", "other"]
    assert got[0].condition == "std::is_same<scalar_t, half>::value" and got[0].needs_type_traits


def test_the_buffer_types_give_the_instantiation_when_no_launch_names_it():
    cf = parse_cuda(SOURCE, "k.cu")
    k = cf.kernel("silu_and_mul")
    assert inst.spec_instantiation(cf, k, spec_mod.find_spec(cf, "silu_and_mul")) == ["__half"]
    f32 = SOURCE.replace("f16[", "f32[")
    cf = parse_cuda(f32, "k.cu")
    assert inst.spec_instantiation(cf, cf.kernel("silu_and_mul"), spec_mod.find_spec(cf, "silu_and_mul")) == ["float"]


def test_two_named_instantiations_and_no_template_args_is_an_error():
    host = SOURCE + '''
void a(half* o, const half* x, int rows, int d) { silu_and_mul<half><<<rows, 256>>>(o, x, d); }
void b(float* o, const float* x, int rows, int d) { silu_and_mul<float><<<rows, 256>>>(o, x, d); }
'''
    cf = parse_cuda(host, "k.cu")
    with pytest.raises(KerntuneError, match=r"several instantiations .*template_args"):
        inst.spec_instantiation(cf, cf.kernel("silu_and_mul"), spec_mod.find_spec(cf, "silu_and_mul"))
    spec = spec_mod.find_spec(cf, "silu_and_mul")
    spec.template_args = ["float"]
    assert inst.spec_instantiation(cf, cf.kernel("silu_and_mul"), spec) == ["float"]


def test_an_explicit_specialization_is_not_a_kernel_of_its_own():
    text = SOURCE + '''
template <>
__global__ void __launch_bounds__(256) silu_and_mul<__half>(__half* __restrict__ out, const __half* __restrict__ x,
                                                            const int d) { }
void a(half* o, const half* x, int rows, int d) { silu_and_mul<half><<<rows, 256>>>(o, x, d); }
'''
    cf = parse_cuda(text, "k.cu")
    assert [k.name for k in cf.kernels] == ["silu_and_mul"]
    k = cf.kernel("silu_and_mul")
    assert k.template_params and len(k.launch_sites) == 1
    assert [a for a, _ in inst.explicit_specializations(cf, "silu_and_mul")] == [["__half"]]


def test_apply_writes_a_specialization_that_compiles_and_refuses_a_second_one(tmp_path):
    """Bound and rewritten here (the gated-activation expert): the launches of half get the tuned launch, the
    templated launcher an if/else on std::is_same, float keeps its own; applying again is refused."""
    import test_apply as ta
    from agent_core.apply import rewrite_file
    f = tmp_path / "silu.cu"
    host = SOURCE.replace("*/\ntemplate", 'template_args = ["__half"]\n*/\ntemplate') + '''
#include <algorithm>
template <typename scalar_t>
void launch(scalar_t* out, const scalar_t* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<scalar_t><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
}
void launch_half(__half* out, const __half* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<__half><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
  launch<__half>(out, x, rows, d, s);
}
void launch_float(float* out, const float* x, int rows, int d, cudaStream_t s) {
  silu_and_mul<float><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);
  launch<float>(out, x, rows, d, s);
}
'''
    f.write_text(host)
    text, cf, k, spec, t = ta._bind(f, "silu_and_mul")
    cfg = t.space.original_config()
    rw = rewrite_file(text, f, k, t, cfg)
    new = rw.text
    assert "template <>\n__global__ void __launch_bounds__(" in new and "silu_and_mul<__half>(__half* __restrict__ out" in new
    assert "if (std::is_same<scalar_t, __half>::value) {  // kerntune: the tuned silu_and_mul<__half>" in new
    assert "  silu_and_mul<float><<<rows, std::min(d, 1024), 0, s>>>(out, x, d);" in new  # another instantiation
    assert "  silu_and_mul<__half><<<rows, std::min(d, 1024), 0, s>>>" not in new
    assert "#include <type_traits>" in new and rw.spec.grid != spec.grid or rw.spec.block != spec.block
    ncf = parse_cuda(new, str(f))
    assert [x.name for x in ncf.kernels] == ["silu_and_mul"]
    if shutil.which("nvcc"):
        f.write_text(new)
        ta._nvcc_c(f)
    with pytest.raises(KerntuneError, match="already specialized"):
        rewrite_file(new, f, "silu_and_mul", t, cfg)


# ------------------------------------------------------------------------------------------ templated dispatch
DISPATCH_STORE = ROOT / "tests" / "data" / "stores" / "templated_dispatch_3_2026-11-24c.sqlite"  # H100, 2026-11-24c


def test_a_templated_kernel_gets_a_per_shape_dispatch_that_keeps_the_original_where_it_wins(tmp_path):
    """FlashInfer-style `act_and_mul_kernel<T, Activation>` (GELU-tanh, 16-byte vectors), replayed from its H100
    recording (gpu/results/2026-11-24c/templated_dispatch_3): the act-and-mul expert is 1.10x and 1.07x on two
    size sets and 0.99x on 4096x14336, where the original already runs at the copy bandwidth. One configuration
    would be 1.00x; the dispatch launches two expert configurations (plain kernels of their own for the
    instantiation <__half, gelu_tanh>) and the template itself on 4096x14336. Apply writes it with the template
    untouched; nvcc compiles the file, host code included.
    (The earlier subject, vLLM-style fused_add_rms_norm_kernel<scalar_t>, no longer keeps the original anywhere:
    since the expert's peeled rows it wins on 777x4099 too, 1.61x with one configuration on the H100,
    gpu/results/2026-11-24f/templated_fused_add.)"""
    f, store = copy_with_recording(tmp_path, CORPUS / "gated_act/gelu_tanh_and_mul_vec16.cu", DISPATCH_STORE)
    before = f.read_text()
    out_store = tmp_path / "out.sqlite"
    r = CliRunner().invoke(main, ["optimize", str(f), "-k", "act_and_mul_kernel", "--backend",
                                  f"replay:{store}", "--store", str(out_store), "--budget", "20", "--rounds", "2"])
    assert r.exit_code == 0, r.output
    assert "per-shape dispatch: 1.05x against 1.00x" in r.output, r.output
    assert "the original kernel kept on 1 size set" in r.output, r.output
    assert "original kept: 4096×14336" in r.output, r.output
    if not shutil.which("nvcc"):
        return
    r = CliRunner().invoke(main, ["apply", str(f), "-k", "act_and_mul_kernel", "--store", str(out_store),
                                  "--backend", "none"])
    assert r.exit_code == 0, r.output
    new = f.read_text()
    cf = parse_cuda(new, str(f))
    k = cf.kernel("act_and_mul_kernel")
    old_k = parse_cuda(before, str(f)).kernel("act_and_mul_kernel")
    assert k.template_params and new[k.span.start:k.span.end] == before[old_k.span.start:old_k.span.end]
    assert not inst.explicit_specializations(cf, "act_and_mul_kernel")  # the template serves the original
    assert ("__global__ void __launch_bounds__(128) act_and_mul_kernel__act_and_mul_items1_threads128_vec4(__half*"
            in new)
    assert ("if (num_tokens <= 252 && d > 8316 && d <= 14077) {\n"
            "    activation::act_and_mul_kernel__act_and_mul_items1_threads128_vec4<<<" in new)
    assert ("} else if (num_tokens > 252 && num_tokens <= 2022 && d <= 8316) {\n"
            "    activation::act_and_mul_kernel__act_and_mul_items4_threads512_vec1<<<" in new)
    assert "} else {\n    activation::act_and_mul_kernel<__half, activation::gelu_tanh><<<" in new
    res = subprocess.run(["nvcc", "-arch=sm_90", *CHECK_FLAGS, "-c", "-o", str(tmp_path / "a.o"), str(f)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def test_a_launch_that_depends_on_its_launcher_gets_its_dispatch_under_if_constexpr(tmp_path):
    """Apex-style `cuApplyLayerNorm<T, U, V>` launched inside `template <typename T, ...> void HostApplyLayerNorm`
    (the instantiation deduced from the launcher's own template arguments): the per-shape dispatch is written there
    under `if constexpr (<the launcher's arguments are the spec's>)`, the launch as it was in the else branch (other
    instantiations); two expert configurations as plain kernels of the spec's instantiation and the template itself
    for the few-row size set. nvcc compiles the file, host code included."""
    from agent_core.agent import dispatch as dsp
    from agent_core.apply import rewrite_dispatch, templated_dispatch_refusal
    from agent_core.templating import experts as X
    from agent_core.templating.space import valid_configs
    rel = CORPUS / "layer_norm/layer_norm_welford_apex.cu"
    text = rel.read_text()
    cf = parse_cuda(text, str(rel))
    k = cf.kernel("cuApplyLayerNorm")
    spec = spec_mod.find_spec(cf, k.name)
    t = X.bind(X.candidates(cf, k.name, spec)[0], cf, spec)
    assert templated_dispatch_refusal(cf, k, spec, [t]) is None
    ok = valid_configs(t.space, spec.sizes)
    a, b = ok[0], ok[-1]
    assert a != b
    entries = [dsp.Entry(t.template_hash, t.origin, a), dsp.Entry(t.template_hash, t.origin, b), dsp.original_entry()]
    n = len(spec.sizes)
    d = dsp.Dispatch(rules=[dsp.Rule([dsp.Bound("n1", upto=64)], 2), dsp.Rule([dsp.Bound("n2", upto=2048)], 1),
                            dsp.Rule([], 0)], entries=entries, winner=entries[0], sizes=spec.sizes,
                     serve=[0] * n, original_us=[1.0] * n, tuned_us=[1.0] * n, single_original_us=[1.0] * n,
                     single_us=[1.0] * n)
    new = rewrite_dispatch(text, str(rel), k.name, [(t, a), (t, b), (None, {})], d, spec, cf).text
    assert "if constexpr (std::is_same<T, __half>::value" in new and "#include <type_traits>" in new
    host = new[new.index("void HostApplyLayerNorm("):]
    assert host.count("cuApplyLayerNorm<<<") == 2  # the dispatch's original entry, and the else (other instantiations)
    assert "  } else {\n    cuApplyLayerNorm<<<blocks, threads, nshared, stream>>>" in host
    assert "    if (n1 <= 64) {\n      cuApplyLayerNorm<<<" in host and host.count("cuApplyLayerNorm__") == 2
    f = tmp_path / "layer_norm_welford_apex.cu"
    f.write_text(new)
    if shutil.which("nvcc"):
        res = subprocess.run(["nvcc", "-arch=sm_90", *CHECK_FLAGS, "-c", "-o", str(tmp_path / "a.o"), str(f)], capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]


def test_a_dispatch_inside_a_templated_launcher_chooses_by_what_that_launch_passes():
    """PyTorch-style `binary_elementwise_kernel<scalar_t, func_t>` launched in `launch_binary_elementwise<scalar_t,
    func_t>(..., int64_t n, ...)` with n = tokens * d: a per-shape dispatch there may test only `tokens * d` (an
    H200 apply of a dispatch on `tokens` and `d` failed: the launch has neither)."""
    from agent_core.apply import dispatch_inputs
    rel = CORPUS / "other/binary_functor_mul_fp16.cu"
    cf = parse_cuda(rel.read_text(), str(rel))
    assert dispatch_inputs(cf, "binary_elementwise_kernel", spec_mod.find_spec(cf, "binary_elementwise_kernel")) \
        == ["tokens * d"]


@pytest.mark.nvcc
def test_an_expert_specializing_a_shared_helper_is_written_into_the_file_and_compiles(tmp_path):
    """An expert whose device code specializes a template of the shared helpers (the RMSNorm expert's fp8 output:
    ``template <> __nv_fp8_e4m3 from_f<__nv_fp8_e4m3>(float)``) is written inside a namespace of its own in ``kt``,
    where C++ allows no such specialization: the held-out vLLM dynamic per-token fp8 RMSNorm's apply failed to
    compile on the GPU (2026-11-28c, apply_a/). The specializations move to ``kt`` itself, each once however many
    configurations of the expert the dispatch holds: one configuration and a two-configuration dispatch compile."""
    from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, select
    from agent_core.apply import check_compiles, rewrite_dispatch, rewrite_file
    from agent_core.templating import experts as X
    rel = "rms_norm/rms_norm_dynamic_per_token_fp8_quant_bf16.cu"
    f = tmp_path / "dyn.cu"
    shutil.copy(CORPUS / rel, f)
    text = f.read_text()
    cf = parse_cuda(text, str(f))
    k = "rms_norm_dynamic_per_token_quant_kernel"
    spec = spec_mod.find_spec(cf, k)
    t = X.bind(X.candidates(cf, k, spec)[0], cf, spec)
    a = t.space.original_config()  # the expert's defaults
    b = {**a, "THREADS": 256 if a["THREADS"] != 256 else 512}
    one = rewrite_file(text, f, k, t, a)
    assert one.text.count("from_f<__nv_fp8_e4m3>(float v)") == 1
    check_compiles(one.text, f, host=True)
    sizes = [dict(s) for s in spec.sizes]
    n = len(sizes)
    entries = [Entry(t.template_hash, t.origin, a), Entry(t.template_hash, t.origin, b)]
    d = Dispatch(rules=[Rule([Bound("num_tokens", None, 64)], 1), Rule([], 0)], entries=entries, winner=entries[0],
                 sizes=sizes, serve=[], original_us=[1.0] * n, tuned_us=[1.0] * n, single_original_us=[1.0] * n,
                 single_us=[1.0] * n)
    d.serve = [select(d, s) for s in sizes]
    two = rewrite_dispatch(text, f, k, [(t, a), (t, b)], d)
    assert two.text.count("from_f<__nv_fp8_e4m3>(float v)") == 1 and len(two.kernels) == 2
    check_compiles(two.text, f, host=True)


@pytest.mark.nvcc
def test_a_packed_size_launch_is_written_in_the_hosts_terms(tmp_path):
    """FasterTransformer's GeGLU (held-out batch 6) passes `n / packed_elems` (half2 pairs) and `m`: the gated expert's
    rows are the argument `m`, so its tuned launch is written over what the launch passes; on the H200 (2026-11-28c,
    apply_b/) the rows were the output's length over d and apply refused for want of `inter`. nvcc compiles it."""
    from agent_core.apply import check_compiles, rewrite_file
    from agent_core.templating import experts as X
    rel = "gated_act/geglu_generic_activation_inplace_half2_bias.cu"
    f = tmp_path / "geglu.cu"
    shutil.copy(CORPUS / rel, f)
    text = f.read_text()
    cf = parse_cuda(text, str(f))
    k = "generic_activation"
    spec = spec_mod.find_spec(cf, k)
    t = X.bind(X.candidates(cf, k, spec)[0], cf, spec)
    rw = rewrite_file(text, f, k, t, t.space.original_config())
    assert "<<<m * ((2 * (n / packed_elems) + 2047) / 2048), 256, 0, stream>>>" in rw.text
    check_compiles(rw.text, f, host=True)


def test_a_launch_that_writes_its_leading_template_arguments_deduces_the_rest(tmp_path):
    """MXNet's `softmax_stride1_compute_kernel<OP, negate, AType, LType><<<...>>>(in, out, length, ...)` inside a
    load-type switch macro of a templated launcher: the kernel's other three type parameters (DType, OType, IType)
    are deduced from the arguments, so the per-shape dispatch is written under `if constexpr` there (it stopped
    optimize with "cannot tell which instantiation" before); nvcc compiles the file, host code included."""
    from tests.dispatch_helpers import rewrite_dispatch_of
    rel = CORPUS / "softmax/softmax_stride1_smem_rows_per_block_length_mask_fp16_mxnet.cu"
    name = "softmax_stride1_compute_kernel"
    cf = parse_cuda(rel.read_text(), str(rel))
    k = cf.kernel(name)
    site = next(s for s in k.launch_sites)
    got = inst.site_template_args(cf, k, site)
    assert got == ["OP", "negate", "AType", "LType", "DType", "OType", "IType"]
    args = inst.spec_instantiation(cf, k, spec_mod.find_spec(cf, name))
    assert inst.site_instance(cf, k, site, args).kind == "depends"
    prep = prepare(str(rel), name, rel.read_text(), use_workspace_files=False)
    from agent_core.templating.rewrites import compose
    t = compose(prep.cf, name, prep.spec, prep.structural).template
    rw, names, _ = rewrite_dispatch_of(rel, name, [None, dict(t.space.original_config())])
    assert len(names) == 2 and "if constexpr (std::is_same<OP, " in rw.text
    f = tmp_path / rel.name
    f.write_text(rw.text)
    if shutil.which("nvcc"):
        res = subprocess.run(["nvcc", "-arch=sm_90", *CHECK_FLAGS, "-c", "-o", str(tmp_path / "a.o"), str(f)], capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
