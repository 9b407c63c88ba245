"""Scale and recursion (issue #15): reading a file of many kernels is linear in its size, and inputs that nest or
refer to themselves end in a clean answer, never a RecursionError or MemoryError traceback."""

import time

import pytest
from click.testing import CliRunner

from agent_core.cli import main
from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.templatize import tunable_space

KERNEL = '''/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]
sizes = [{{ rows = 8192, cols = 4096 }}, {{ rows = 1000, cols = 4099 }}]
grid  = "rows"
block = "128"
*/
__global__ void row_sum_{i}(const float* x, float* out, int cols) {{  // µs: non-ASCII on purpose
    __shared__ float s[128];
    float acc = 0.f;
    #pragma unroll 4
    for (int c = threadIdx.x; c < cols; c += 128) acc += x[(size_t)blockIdx.x * cols + c];
    s[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}}
'''


def many(n: int) -> str:
    launches = "".join(f"    row_sum_{i}<<<rows, 128>>>(x, out, cols);\n" for i in range(n))
    return "#include <cuda_runtime.h>\n" + "".join(KERNEL.format(i=i) for i in range(n)) + \
        f"void run(const float* x, float* out, int rows, int cols) {{\n{launches}}}\n"


def _show_work(text: str) -> float:
    """CPU seconds for what `kerntune show` does for every kernel of ``text``."""
    t0 = time.process_time()
    cf = parse_cuda(text, "/tmp/many.cu")
    for k in cf.kernels:
        space = tunable_space(cf, k.name)
        S.validate_spec(S.find_spec(cf, k.name), k, set(space.params), space.original_config())
    return time.process_time() - t0


def test_show_is_linear_in_the_number_of_kernels():
    small, large = many(120), many(480)
    _show_work(many(10))  # warm up (imports, caches)
    t_small = min(_show_work(small) for _ in range(2))
    t_large = _show_work(large)
    # 4x the kernels: linear work takes about 4x; the per-kernel re-reading of the whole file it replaces
    # took about 16x
    assert t_large < 8 * t_small, (t_small, t_large)


@pytest.mark.parametrize("name,text", [
    ("self", "#define BLOCK BLOCK\n#define A B\n#define B A\n"),
    ("mutual", "#define BLOCK (A + 1)\n#define A (BLOCK * 2)\n"),
    ("chain", "".join(f"#define D{i} (D{i + 1} + 1)\n" for i in range(3000)) + "#define D3000 1\n#define BLOCK D0\n"),
    ("deep-expr", "#define BLOCK " + "(" * 3000 + "128" + ")" * 3000 + "\n"),
])
def test_hostile_defines_are_answered(tmp_path, monkeypatch, name, text):
    k = KERNEL.format(i=0).replace('block = "128"', 'block = "BLOCK"').replace("128", "BLOCK")
    f = tmp_path / f"{name}.cu"
    f.write_text(text + k + "void run(const float* x, float* out, int rows, int cols) "
                            "{ row_sum_0<<<rows, BLOCK>>>(x, out, cols); }\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "300")
    r = CliRunner().invoke(main, ["show", str(f)])
    assert r.exit_code in (0, 1) and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert "Traceback" not in r.output and "RecursionError" not in r.output, r.output
    assert "row_sum_0" in r.output and "spec:" in r.output


def test_deep_namespace_nesting_is_read(tmp_path):
    text = "namespace a {\n" * 3000 + KERNEL.format(i=0) + "}\n" * 3000
    cf = parse_cuda(text, str(tmp_path / "ns.cu"))
    assert [k.name for k in cf.kernels] == ["row_sum_0"]
    assert S.find_spec(cf, "row_sum_0").grid == ["rows"]
    assert "UNROLL" in tunable_space(cf, "row_sum_0").params or tunable_space(cf, "row_sum_0").params


def test_deeply_nested_sidecar_and_space_files_are_clean_errors(tmp_path):
    from agent_core.model import KerntuneError
    from agent_core.templating.space import space_from_toml
    f = tmp_path / "k.cu"
    f.write_text(KERNEL.format(i=0).split("*/\n", 1)[1])
    (tmp_path / "k.cu.kerntune.toml").write_text("[row_sum_0]\nargs = " + "[" * 20000 + "]" * 20000 + "\n")
    cf = parse_cuda(f.read_text(), str(f))
    with pytest.raises(KerntuneError, match="nested too deeply|not valid TOML"):
        S.find_spec(cf, "row_sum_0")
    with pytest.raises(KerntuneError, match="nested too deeply|not valid TOML"):
        space_from_toml('kernel = "k"\nx = ' + "[" * 20000 + "]" * 20000)
