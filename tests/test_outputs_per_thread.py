"""outputs_per_thread: a thread that walks a loop for its one output computes OUTS neighbouring outputs, its loads
vectors across them. Where it applies and where it must not, what the rewritten kernel looks like, and that it
compiles at every OUTS (with the in-block split and the cluster twin after it). Its values on the GPU:
``bench/gpu_check_rewrites.py`` (every configuration verified against the original on spec, misaligned and odd
sizes)."""

import subprocess
import tempfile
from pathlib import Path

import pytest

from agent_core import apply as apply_mod
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.rewrites import compose
from tests.parallel import each
from tests.nvcc_check import CHECK_FLAGS

DATA = Path(__file__).resolve().parent / "data" / "cu" / "rewrites"

_KERNEL = """
/* kerntune:
args  = ["y: out f32[n]", "x: in f32[rows * n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{ rows = 4096, n = 4096 }]
grid  = "cdiv(n, 256)"
block = "256"
*/
__global__ void k(float* y, const float* x, int rows, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
BODY
}
void go(float* y, const float* x, int rows, int n) { k<<<(n + 255) / 256, 256>>>(y, x, rows, n); }
"""


def _compose(body: str):
    return compose(parse_cuda(_KERNEL.replace("BODY", body), "k.cu"), "k")


def _why(body: str) -> str | None:
    return dict(_compose(body).report)["outputs_per_thread"]


def test_a_column_walk_gets_outputs_per_thread():
    assert _why("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[(long long)r * n + c];\n  y[c] = a;") is None
    # a local holding each row's value, a scale after the loop, a cast: all lane by lane
    assert _why("  double a = 0;\n  for (int r = 0; r < rows; ++r) {\n    const float v = x[r * n + c];\n"
                "    a += (double)v * v;\n  }\n  y[c] = (float)sqrt(a / rows);") is None


@pytest.mark.parametrize("body, why", [
    # elementwise: nothing walks a loop (work_per_thread and vectorize cover it)
    ("  y[c] = 2.f * x[c];", "no read of the thread's index walks a loop"),
    # a loaded value decides a branch (through a comparison, or alone): the lanes would have to agree
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) {\n    float v = x[r * n + c];\n    if (v > 0.f) a += v;\n  }\n"
     "  y[c] = a;", "operator >"),
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) {\n    float v = x[r * n + c];\n    if (v) a += v;\n  }\n"
     "  y[c] = a;", "decides a branch"),
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[r * n + c] ? 1.f : 0.f;\n  y[c] = a;",
     "decides a conditional"),
    # the thread's index scaled: neighbouring outputs are not neighbouring elements (a row per thread)
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[c * rows + r];\n  y[c] = a;", "last term"),
    # a read-modify-write of the output
    ("  for (int r = 0; r < rows; ++r) y[c] += x[r * n + c];", "read-modify-write"),
    # a loaded value stored elsewhere than at the thread's outputs
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[r * n + c];\n  y[0] = a;", "elsewhere"),
    # a loaded value used as an index
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[r * n + c];\n  y[c] = x[(int)a];", "indexes memory"),
])
def test_it_says_why_it_does_not_apply(body, why):
    got = _why(body)
    assert got is not None and why in got, got


def test_a_kernel_with_shared_memory_or_atomics_is_left_alone():
    assert "__shared__" in _why("  __shared__ float s[256];\n  s[threadIdx.x] = x[c];\n  __syncthreads();\n"
                                "  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[r * n + c];\n  y[c] = a;")
    assert "atomic" in _why("  for (int r = 0; r < rows; ++r) atomicAdd(&y[c], x[r * n + c]);")


def test_the_rewritten_kernel_reads_vectors_and_divides_the_grid():
    text = (DATA / "column_weighted_mean_fp16.cu").read_text()
    cf = parse_cuda(text, str(DATA / "column_weighted_mean_fp16.cu"))
    got = compose(cf, "weighted_mean_rows")
    assert got.applied == ["outputs_per_thread", "split_reduction", "load_hint"]
    t = got.template
    body = apply_mod.strip_header(t.text)
    assert "int c = (threadIdx.x + blockIdx.x * blockDim.x) * KT_OUTS;" in body
    assert "const long long kt_outs_live = (long long)(cols) - c;" in body
    assert "kt_lanes<float, KT_OUTS> acc = 0.0f;" in body
    # the row's weight is one value for every lane; the load one vector; the conversion lane by lane
    assert ("acc += w[r] * kt_apply([](auto kt_a0) { return __half2float(kt_a0); }, "
            "kt_gather_hint<KT_LOAD_HINT, KT_OUTS>(x, r * cols + c, kt_outs_live, true));") in body
    assert ("kt_scatter<KT_OUTS>(out, c, kt_apply([](auto kt_a0) { return __float2half(kt_a0); }, "
            "acc / (float)rows), kt_outs_live);") in body
    assert "dim3 grid((cols + (KT_BLOCK * KT_OUTS) - 1) / (KT_BLOCK * KT_OUTS));" in body
    assert 'grid  = "cdiv(cols, (KT_BLOCK * KT_OUTS))"' in body
    assert t.space.params["OUTS"].values == [1, 2, 4, 8]  # 2-byte elements: up to 16 bytes a load
    assert t.space.params["OUTS"].original == 1
    ln = spec_mod.launch(t.launch, {"rows": 1000, "cols": 3003}, {"BLOCK": 128, "SPLIT": 4, "OUTS": 8})
    assert ln.grid == (3, 1, 1) and ln.block == (128, 4, 1)


def _rewritten(body: str) -> str:
    got = _compose(body)
    assert "outputs_per_thread" in got.applied
    return apply_mod.strip_header(got.template.text)


@pytest.mark.parametrize("body, cond", [
    # a row stride that is an argument: the rows stay aligned when it is a multiple of OUTS
    ("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[(long long)r * n + c];\n  y[c] = a;",
     "(long long)(n) % KT_OUTS == 0"),
    # a product with one fixed factor (the other read from memory) and a fixed local of the top level
    ("  const long base = 7;\n  float a = x[c];\n  for (int r = 0; r < rows; ++r) a += x[base + rows * r + c] * 2.f;\n"
     "  y[c] = a;", "(long long)(base) % KT_OUTS == 0 && (long long)(rows) % KT_OUTS == 0"),
])
def test_the_thread_decides_once_and_the_walk_is_unswitched(body, cond):
    got = _rewritten(body)
    assert cond + ";" in got, got
    assert "  if (kt_outs_vec)\n" in got and "  else\n" in got
    assert got.count("kt_outs_live, true)") == 1 and got.count("kt_outs_live, false)") == 1
    # a read outside the walk decides for itself
    assert ("x[c]" not in body) or "kt_lanes<float, KT_OUTS> a = kt_gather<KT_OUTS>(x, c, kt_outs_live);" in got


def test_an_offset_that_varies_in_the_walk_leaves_each_load_to_decide():
    # x[r + c]: the offset is the loop's counter, a multiple of OUTS on some rows only
    got = _rewritten("  float a = 0.f;\n  for (int r = 0; r < rows; ++r) a += x[r + c];\n  y[c] = a;")
    assert "kt_outs_vec" not in got
    assert "kt_gather<KT_OUTS>(x, r + c, kt_outs_live)" in got


def test_a_max_keeps_its_form_so_the_split_still_combines_it():
    cf = parse_cuda((DATA / "column_max_bf16.cu").read_text(), str(DATA / "column_max_bf16.cu"))
    got = compose(cf, "column_max_bf16")
    body = apply_mod.strip_header(got.template.text)
    assert ("m = fmaxf(m, kt_apply([](auto kt_a0) { return __bfloat162float(kt_a0); }, "
            "kt_gather_hint<KT_LOAD_HINT, KT_OUTS>(x, (size_t)r * cols + col, kt_outs_live, true)));") in body
    assert "m = fmaxf(m, kt_part[kt_s * blockDim.x + threadIdx.x])" in body
    twin = apply_mod.strip_header(got.twins[0].text)
    assert "m = fmaxf(m, kt_cluster.map_shared_rank(kt_part, kt_b)[threadIdx.x])" in twin


def test_two_accumulators_get_vectors_without_the_split():
    cf = parse_cuda((DATA / "layer_norm_dgamma_f32.cu").read_text(), str(DATA / "layer_norm_dgamma_f32.cu"))
    got = compose(cf, "ln_bwd_dgamma_dbeta")
    assert got.applied == ["outputs_per_thread", "load_hint", "launch_bounds"]
    body = apply_mod.strip_header(got.template.text)
    assert "kt_lanes<float, KT_OUTS> g = 0.f, b = 0.f;" in body
    assert "const kt_lanes<float, KT_OUTS> d = kt_gather_hint<KT_LOAD_HINT, KT_OUTS>(dy, (long)t * hidden + j, kt_outs_live, true);" in body
    assert "const kt_lanes<float, KT_OUTS> d = kt_gather_hint<KT_LOAD_HINT, KT_OUTS>(dy, (long)t * hidden + j, kt_outs_live, false);" in body
    # one decision for both pointers and the common stride
    assert ("const bool kt_outs_vec = KT_OUTS > 1 && kt_outs_live >= KT_OUTS && (unsigned long long)(dy + j) % "
            "(KT_OUTS * 4) == 0 && (unsigned long long)(xhat + j) % (KT_OUTS * 4) == 0 && (long long)(hidden) % "
            "KT_OUTS == 0;") in body
    assert "kt_scatter<KT_OUTS>(dgamma, j, g, kt_outs_live);" in body
    assert "kt_scatter<KT_OUTS>(dbeta, j, b, kt_outs_live);" in body
    assert got.template.space.params["OUTS"].values == [1, 2, 4]


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["column_sum.cu", "column_max_bf16.cu", "column_weighted_mean_fp16.cu",
                                  "layer_norm_dgamma_f32.cu"])
def test_every_outputs_per_thread_compiles_and_applies(name, tmp_path):
    path = DATA / name
    text = path.read_text()
    cf = parse_cuda(text, str(path))
    got = compose(cf, cf.kernels[0].name)
    jobs = []  # (source, True: a cubin and ptxas's report / False: an object, host code included), compiled side by side
    for t in [got.template] + got.twins:
        for outs in t.space.params["OUTS"].values:
            cfg = {**t.space.original_config(), "OUTS": outs}
            jobs.append(("\n".join(f"#define KT_{k} {v}" for k, v in cfg.items()) + "\n" + t.text, True))
        rw = apply_mod.rewrite_file(text, str(path), cf.kernels[0].name, t,
                                    {**t.space.original_config(), "OUTS": max(t.space.params["OUTS"].values)})
        assert "KT_" not in rw.text and "kt_gather<" in rw.text
        jobs.append((rw.text, False))  # the applied file

    def nvcc(job):
        src, cubin = job
        d = Path(tempfile.mkdtemp(dir=tmp_path))
        f = d / ("k.cu" if cubin else "applied.cu")
        f.write_text(src)
        out = ["-cubin", "-o", str(d / "k.cubin"), str(f), "-Xptxas", "-v"] if cubin else \
            [*CHECK_FLAGS, "-c", "-o", str(d / "applied.o"), str(f)]
        r = subprocess.run(["nvcc", "-arch=sm_90", *out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        if cubin:
            assert " 0 bytes spill stores" in r.stderr, r.stderr

    each(nvcc, jobs)
