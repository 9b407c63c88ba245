import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_core.templating import experts as X
from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda
from agent_core.model import CudaFile, Kernel, KernelParam, KerntuneError, Span, macro_name
from agent_core.templating.space import check_config
from tests.parallel import each
from tests.nvcc_check import CHECK_FLAGS

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
Z = Span(0, 0, 0, 0, 0, 0)

# bench kernel -> the expert it must match
EXPECTED = {
    "rms_norm": "rms_norm", "fused_add_rms_norm": "fused_add_rms_norm", "layer_norm": "layer_norm",
    "softmax": "softmax", "silu_and_mul": "act_and_mul", "gelu_and_mul": "act_and_mul",
    "merge_attn_states": "merge_attn_states", "rotary_neox": "rotary_neox",
    "per_token_group_quant_int8": "per_token_group_quant",
}


def _span(b: bytes, s: int, e: int) -> Span:
    return Span(s, e, b[:s].count(b"\n"), s - (b[:s].rfind(b"\n") + 1), b[:e].count(b"\n"),
                e - (b[:e].rfind(b"\n") + 1))


def _hand_parse(text: str, path: str) -> CudaFile:
    """Kernels of a plain (untemplated) file, for when agent_core.source.cuda_parse is not there."""
    b = text.encode()
    ks = []
    for mo in re.finditer(rb"__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{", b):
        bs, depth = mo.end() - 1, 0
        for i in range(bs, len(b)):
            depth += {b"{"[0]: 1, b"}"[0]: -1}.get(b[i], 0)
            if depth == 0:
                break
        params = []
        for p in mo.group(2).decode().split(","):
            p = " ".join(p.split())
            name = re.findall(r"\w+$", p)[0]
            ty = p[:-len(name)].strip()
            params.append(KernelParam(name, ty, "*" in ty, ty.startswith("const"), Z))
        ks.append(Kernel(mo.group(1).decode(), _span(b, mo.start(), i + 1), Z, _span(b, bs, i + 1), params, [], [], [],
                         [], ""))
    return CudaFile(path, text, ks, [], [])


def parse(path: Path) -> CudaFile:
    text = path.read_text()
    try:
        from agent_core.source.cuda_parse import parse_cuda
    except ImportError:
        return _hand_parse(text, str(path))
    return parse_cuda(text, str(path))


def bench_case(name: str):
    cf = parse(BENCH / f"{name}.cu")
    k = cf.kernels[0]
    spec = S.find_spec(cf, k.name)
    assert spec is not None, name
    S.validate_spec(spec, k, set())
    return cf, k, spec


@pytest.fixture(scope="module")
def lib():
    return X.load_library()


def test_library_loads_and_validates(lib):
    names = {e.name for e in lib}
    assert set(EXPECTED.values()) <= names
    fams = {e.family for e in lib}
    assert {"rms_norm", "fused_add_rms_norm", "layer_norm", "softmax", "gated_activation", "merge_attn_states",
            "rotary_embedding", "group_quant"} <= fams
    for e in lib:
        assert e.description and e.launch["grid"] and e.launch["block"]
        for p in e.params.values():
            assert p.original in p.values and p.why
            assert f"#define {macro_name(p.name)}" in e.source


def test_bad_expert_header_is_reported(tmp_path):
    src = (X.EXPERT_DIR / "softmax.cu").read_text()
    (tmp_path / "a.cu").write_text(src.replace('grid = ["cdiv(rows, ROWS)"]', 'grid = ["cdiv(rows, NOPE)"]'))
    with pytest.raises(KerntuneError) as e:
        X.load_library(tmp_path)
    assert "NOPE" in str(e.value) and e.value.field_name == "launch.grid"
    (tmp_path / "a.cu").write_text(src.replace("default = 256", "default = 7", 1))
    with pytest.raises(KerntuneError) as e:
        X.load_library(tmp_path)
    assert e.value.field_name == "params.THREADS.default"
    # __launch_bounds__ must be a constant of the configuration: a size in `bounds` is refused
    (tmp_path / "a.cu").write_text(src.replace('bounds = "THREADS * ROWS"', 'bounds = "THREADS * rows"'))
    with pytest.raises(KerntuneError) as e:
        X.load_library(tmp_path)
    assert e.value.field_name == "launch.bounds" and "['rows']" in str(e.value)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bench_kernel_matches_its_family(lib, name):
    cf, k, spec = bench_case(name)
    ms = X.match(cf, k.name, spec, lib)
    # the family's expert first; a row family's cluster twin (each row over a thread-block cluster, for few rows)
    # after it, bound the same way
    twin = [f"{EXPECTED[name]}_cluster"] if f"{EXPECTED[name]}_cluster" in {e.name for e in lib} else []
    assert [m.expert.name for m in ms] == [EXPECTED[name]] + twin, [m.reason for m in ms]
    assert "→" in ms[0].reason and 0 < ms[0].score <= 1
    if twin:
        assert ms[1].score < ms[0].score and ms[1].template_args == ms[0].template_args
        assert ms[1].expert.serves == "rows <= 256" and ms[1].expert.launch["cluster"] == "CLUSTER"


def test_activation_is_read_from_the_body(lib):
    for name, act in (("silu_and_mul", 0), ("gelu_and_mul", 2)):
        cf, k, spec = bench_case(name)
        assert X.match(cf, k.name, spec, lib)[0].defines["KT_EXPERT_ACT"] == act


UNRELATED = {
    "row_sum": ('''/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = "rows"
block = "256"
*/
__global__ void row_sum(const float* x, float* out, int cols) {
  __shared__ float s[256];
  float a = 0.f;
  for (int i = threadIdx.x; i < cols; i += 256) a += x[blockIdx.x * cols + i];
  s[threadIdx.x] = a; __syncthreads();
  for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
'''),
    "saxpy": ('''/* kerntune:
args  = ["y: inout f32[n]", "x: in f32[n]", "a: f32 = 2", "n: i32 = n"]
sizes = [{ n = 1048576 }, { n = 1000001 }]
grid  = "cdiv(n, 256)"
block = "256"
*/
__global__ void saxpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
'''),
    "scale_rows": ('''/* kerntune:
args  = ["out: out f32[rows * cols]", "x: in f32[rows * cols]", "w: in f32[cols]", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = "rows"
block = "256"
*/
__global__ void scale_rows(float* out, const float* x, const float* w, int cols) {
  for (int i = threadIdx.x; i < cols; i += 256) out[blockIdx.x * cols + i] = x[blockIdx.x * cols + i] * w[i];
}
'''),
}


@pytest.mark.parametrize("name", sorted(UNRELATED))
def test_unrelated_kernels_match_nothing(lib, tmp_path, name):
    p = tmp_path / f"{name}.cu"
    p.write_text(UNRELATED[name])
    cf = parse(p)
    spec = S.find_spec(cf, name)
    assert X.match(cf, name, spec, lib) == []


def test_examples_match_nothing_wrong(lib):
    """Example kernels are matched only to the family their name says, or not at all."""
    for p in sorted((ROOT / "examples").glob("*.cu")):
        cf = parse(p)
        for k in cf.kernels:
            spec = S.find_spec(cf, k.name)
            if spec is None:
                continue
            for m in X.match(cf, k.name, spec, lib):
                stem = m.expert.family.split("_")[0]
                assert stem in k.name or stem in p.stem, (p, k.name, m.expert.name)


def test_bind_gives_a_template_with_the_users_signature(lib):
    cf, k, spec = bench_case("fused_add_rms_norm")
    m = X.match(cf, k.name, spec, lib)[0]
    t = X.bind(m, cf, spec)
    assert t.origin == "expert:fused_add_rms_norm" and t.kernel == k.name and t.entry
    wrapper = t.text[t.text.index(f"{t.entry}("):]
    for p in k.params:
        assert f"{p.name}" in wrapper.split(")", 1)[0]
    # residual and x are both written: the call passes them as the expert's inout roles, in that order
    assert "(__nv_bfloat16*)(x), (__nv_bfloat16*)(residual)" in wrapper
    # the launch is over the spec's size names; no rows scalar exists, so one row per block
    assert t.space.params["ROWS"].values == [1]
    env = dict(spec.sizes[0], **t.space.original_config())
    launch = S.launch(t.launch, spec.sizes[0], t.space.original_config())
    # threads per row: just enough to give each thread ITEMS vectors, a whole number of warps, at most THREADS
    per_row = -(-env["hidden"] // (env["VEC"] * env["ITEMS"]))
    assert launch.grid[0] == spec.sizes[0]["tokens"]
    assert launch.block[0] == min(env["THREADS"], -(-per_row // 32) * 32) and launch.block[0] % 32 == 0
    assert f"__launch_bounds__(({'KT_THREADS * KT_ROWS'}))" in t.text
    for s in spec.sizes:
        assert check_config(t.space, t.space.original_config(), [s]) is None


def test_bind_refuses_when_no_configuration_fits(lib, tmp_path):
    src = (BENCH / "rms_norm.cu").read_text().replace("hidden = 14336", "hidden = 1000000")
    p = tmp_path / "rms_norm.cu"
    p.write_text(src)
    cf = parse(p)
    spec = S.find_spec(cf, "rms_norm_kernel")
    m = X.match(cf, "rms_norm_kernel", spec, lib)[0]
    with pytest.raises(KerntuneError, match="no configuration satisfies"):
        X.bind(m, cf, spec)


def _extremes(t):
    """The valid configurations at the corners of the space (every parameter at its min or max), plus the start."""
    names = list(t.space.params)
    out = [t.space.original_config()]
    for corner in itertools.product(*([min(p.values), max(p.values)] for p in t.space.params.values())):
        cfg = dict(zip(names, corner))
        if cfg not in out and check_config(t.space, cfg, []) is None:
            out.append(cfg)
    return out


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bound_template_compiles_at_the_extremes(lib, tmp_path, name):
    cf, k, spec = bench_case(name)
    t = X.bind(X.match(cf, k.name, spec, lib)[0], cf, spec)
    src = tmp_path / "t.cu"
    src.write_text(t.text)

    def nvcc(i_cfg):  # the configurations compile side by side, each to a cubin of its own
        i, cfg = i_cfg
        defs = [f"-D{macro_name(n)}={v}" for n, v in cfg.items()]
        cubin = tmp_path / f"t{i}.cubin"
        r = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", *CHECK_FLAGS, "-cubin", "-o", str(cubin), *defs,
                            str(src)], capture_output=True, text=True)
        assert r.returncode == 0, (cfg, r.stderr[-3000:])
        assert t.entry.encode() in cubin.read_bytes(), cfg  # extern "C": the name is the symbol

    each(nvcc, enumerate(_extremes(t)))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bench_kernel_compiles(name):
    r = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", *CHECK_FLAGS, "-cubin", "-o", "/dev/null",
                        str(BENCH / f"{name}.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------ the cluster twins (few rows)
CLUSTER_TWINS = ["fused_add_rms_norm", "layer_norm", "rms_norm", "softmax"]


@pytest.mark.nvcc
@pytest.mark.parametrize("name", CLUSTER_TWINS)
def test_cluster_twin_binds_and_compiles_for_sm90(lib, name):
    """Each row family's cluster expert, bound to the bench kernel: __cluster_dims__ on the wrapper, the rows of a
    grid-sized binding divided by the cluster, the helpers inside the expert's namespace; it compiles at its
    default and smallest and largest configurations, and ptxas reports no spills at the default."""
    from agent_core.measure.compiler import compile_kernel
    cf, k, spec = bench_case(name)
    m = X.match(cf, k.name, spec, lib)[1]
    assert m.expert.name == f"{name}_cluster"
    t = X.bind(m, cf, spec)
    assert t.origin == f"expert:{name}_cluster" and t.serves and t.launch["grid"][0].endswith("* CLUSTER")
    assert "__cluster_dims__((KT_CLUSTER), 1, 1)" in t.text and "(int)(gridDim.x / KT_CLUSTER)" in t.text
    assert t.text.index("cluster_reduce(") > t.text.index("#include <cooperative_groups.h>")
    tcf = parse_cuda(t.text, "t.cu")  # __cluster_dims__ is masked for the parser: the entry reads as a kernel
    from agent_core.source.cuda_parse import kernel_has_errors
    assert t.entry in [x.name for x in tcf.kernels] and not kernel_has_errors(tcf, t.entry)
    lo = {n: min(p.values) for n, p in t.space.params.items()}
    hi = {n: max(p.values) for n, p in t.space.params.items()}
    for cfg in [t.space.original_config(), lo, hi]:
        if check_config(t.space, cfg, spec.sizes) is not None:
            continue
        c = compile_kernel(t.text, t.entry, arch="sm_90", defines={macro_name(n): v for n, v in cfg.items()})
        if cfg == t.space.original_config():
            assert c.resources.spill_stores == 0 and c.resources.spill_loads == 0, c.resources


def test_expert_header_keys_of_the_cluster_experts_are_checked(tmp_path):
    src = (X.EXPERT_DIR / "rms_norm_cluster.cu").read_text()
    shutil.copy(X.EXPERT_DIR / "_cluster.cuh", tmp_path / "_cluster.cuh")
    cases = [(src.replace('cluster = "CLUSTER"', 'cluster = "rows"'), "launch.cluster", "['rows']"),
             (src.replace('serves = "rows <= 256"', 'serves = "tokens <= 256"'), "serves", "['tokens']"),
             (src.replace('helpers = ["_cluster.cuh"]', 'helpers = ["_nope.cuh"]'), "helpers", "_nope.cuh")]
    for text, field, words in cases:
        (tmp_path / "a.cu").write_text(text)
        with pytest.raises(KerntuneError) as e:
            X.load_library(tmp_path)
        assert e.value.field_name == field and words in str(e.value), (field, str(e.value))
