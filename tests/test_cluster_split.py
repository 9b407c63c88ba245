"""The cluster twin of split_reduction (agent_core/templating/rewrites/cluster_split.py): a serial reduction loop
dealt to SPLIT threads of a block and CLUSTER blocks of a thread-block cluster, combined through distributed shared
memory. What it writes (kernel, host launches, spec comment, template launch), where it refuses, that the loop
offers it after the rewrite and not on devices older than sm_90, and with nvcc that it compiles at the corners of
its space, applied into the user's file and inside a per-shape dispatch beside the in-block rewrite."""

import itertools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agent_core import apply as apply_mod
from agent_core.model import DeviceInfo, macro_name
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.rewrites import compose
from agent_core.templating.space import check_config
from tests.parallel import each

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "cu" / "rewrites"
CORPUS_COLUMN_SUM = ROOT / "bench" / "corpus" / "other" / "column_sum_f32.cu"


def _outcome(text: str, path: str = "k.cu", kernel: str | None = None):
    cf = parse_cuda(text, path)
    return cf, compose(cf, kernel or cf.kernels[0].name)


def _twin(text: str, path: str = "k.cu"):
    _, got = _outcome(text, path)
    return got.twins[0] if got.twins else None, dict(got.twin_report)


def test_a_column_sum_gets_a_cluster_twin_after_its_in_block_split():
    cf, got = _outcome((DATA / "column_sum.cu").read_text(), str(DATA / "column_sum.cu"))
    # the first template keeps the in-block split: the twin is a second one
    assert got.applied == ["outputs_per_thread", "split_reduction", "load_hint"]
    assert "__cluster_dims__" not in got.template.text
    assert got.twin_report == [("cluster_split", None)] and len(got.twins) == 1
    t = got.twins[0]
    assert t.origin == "rewrite:outputs_per_thread+cluster_split+load_hint" and t.template_hash != got.template.template_hash
    body = apply_mod.strip_header(t.text)
    assert "__global__ __cluster_dims__(1, KT_CLUSTER, 1) void column_sum(" in body
    assert "#include <cooperative_groups.h>" in body
    # rows dealt to SPLIT x CLUSTER threads per column, in (block y, thread y) order
    assert "for (int r = (0) + (int)(blockIdx.y * KT_SPLIT + threadIdx.y); r < rows; r += KT_SPLIT * KT_CLUSTER)" in body
    # every thread of every block reaches both cluster barriers: the guarding `if` became a flag
    assert "const bool kt_live = (c < cols);" in body
    assert body.count("kt_cluster.sync();") == 2
    assert "kt_cluster.map_shared_rank(kt_part, kt_b)[threadIdx.x]" in body
    ret = "if (threadIdx.y != 0 || blockIdx.y != 0 || !kt_live) return;"
    assert body.index(ret) < body.index("kt_scatter<KT_OUTS>(out, c, s, kt_outs_live);")
    # launch: template, host and spec comment agree
    assert t.launch["grid"] == ["cdiv(cols, BLOCK * OUTS)", "CLUSTER"] and t.launch["block"] == ["BLOCK", "SPLIT"]
    assert "column_sum<<<dim3((cols + (KT_BLOCK * KT_OUTS) - 1) / (KT_BLOCK * KT_OUTS), KT_CLUSTER), " \
           "dim3(KT_BLOCK, KT_SPLIT)>>>" in body, body[body.index("void colsum"):]
    assert 'grid  = ["cdiv(cols, (KT_BLOCK * KT_OUTS))", "KT_CLUSTER"]' in body
    assert t.space.params["CLUSTER"].values == [2, 4, 8] and t.space.params["CLUSTER"].kind == "cluster_size"
    ln = spec_mod.launch(t.launch, {"rows": 777, "cols": 3001}, {"BLOCK": 128, "SPLIT": 8, "CLUSTER": 4, "OUTS": 1})
    assert ln.grid == (24, 4, 1) and ln.block == (128, 8, 1)
    ln = spec_mod.launch(t.launch, {"rows": 777, "cols": 3001}, {"BLOCK": 128, "SPLIT": 8, "CLUSTER": 4, "OUTS": 4})
    assert ln.grid == (6, 4, 1)


def test_a_max_reduction_is_combined_with_its_own_function_over_the_cluster():
    src = """
/* kerntune:
args  = ["y: out f32[n]", "x: in f32[rows * n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{ rows = 4096, n = 4096 }]
grid  = "cdiv(n, 128)"
block = "128"
*/
__global__ void colmax(float* y, const float* x, int rows, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float m = -INFINITY;
  for (int r = 0; r < rows; ++r) m = fmaxf(m, x[(long long)r * n + c]);
  y[c] = m;
}
void go(float* y, const float* x, int rows, int n) {
  dim3 grid((n + 127) / 128);
  colmax<<<grid, 128>>>(y, x, rows, n);
}
"""
    t, why = _twin(src)
    assert why == {"cluster_split": None}
    body = apply_mod.strip_header(t.text)
    assert "m = fmaxf(m, kt_cluster.map_shared_rank(kt_part, kt_b)[threadIdx.x])" in body
    assert "dim3 grid((n + (KT_BLOCK * KT_OUTS) - 1) / (KT_BLOCK * KT_OUTS), KT_CLUSTER);" in body  # the dim3 host variable's second component
    assert "bool kt_live = true;" in body and "if (c >= n) kt_live = false;" in body


_COL = """
/* kerntune:
args  = ["y: out f32[n]", "x: in f32[rows * n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{ rows = 4096, n = 4096 }]
grid  = SPEC_GRID
block = "256"
*/
__global__ void k(float* y, const float* x, int rows, int n) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float acc = 0.f;
  for (int r = 0; r < rows; ++r) acc += x[(long long)r * n + c];
  y[c] = acc;
}
void go(float* y, const float* x, int rows, int n) { k<<<GRID, 256>>>(y, x, rows, n); }
"""


def test_the_twin_refuses_kernels_that_use_a_second_grid_dimension_or_clusters():
    one = _COL.replace("SPEC_GRID", '"cdiv(n, 256)"')
    _, why = _twin(one.replace("GRID", "(n + 255) / 256"))
    assert why == {"cluster_split": None}
    _, why = _twin(one.replace("GRID", "(n + 255) / 256").replace("y[c] = acc;", "y[c + blockIdx.y] = acc;"))
    assert "second grid dimension" in why["cluster_split"]
    _, why = _twin(one.replace("GRID", "dim3((n + 255) / 256, 2)"))
    assert "one-dimensional" in why["cluster_split"]
    _, why = _twin(_COL.replace("SPEC_GRID", '["cdiv(n, 256)", "2"]').replace("GRID", "dim3((n + 255) / 256, 2)"))
    assert "one-dimensional" in why["cluster_split"]
    # where split_reduction does not apply there is no twin to speak of
    _, got = _outcome(one.replace("GRID", "(n + 255) / 256").replace("acc += x", "acc *= x"))
    assert got.twins == [] and got.twin_report == []


def test_the_loop_offers_the_twin_after_the_rewrite_and_not_before_sm90(tmp_path):
    from agent_core.agent.loop import _unsupported, rewrite_templater
    from agent_core.search.tuner import prepare
    f = tmp_path / CORPUS_COLUMN_SUM.name
    shutil.copy(CORPUS_COLUMN_SUM, f)
    prep = prepare(str(f), "column_sum_kernel", use_workspace_files=False)
    got = rewrite_templater(prep, [])
    assert [t.origin for t in got] == ["rewrite:outputs_per_thread+split_reduction+load_hint",
                                       "rewrite:outputs_per_thread+cluster_split+load_hint"]

    class _Backend:
        def __init__(self, arch):
            self.arch = arch

        def device(self):
            return DeviceInfo(name="x", arch=self.arch, sm_count=100)

    assert _unsupported(got[0], _Backend("sm_80")) is None
    assert "sm_90" in _unsupported(got[1], _Backend("sm_80"))
    assert _unsupported(got[1], _Backend("sm_90")) is None


def test_show_names_the_twin():
    from click.testing import CliRunner

    from agent_core.cli import main
    r = CliRunner().invoke(main, ["show", str(CORPUS_COLUMN_SUM)])
    assert r.exit_code == 0, r.output
    assert "rewrite cluster_split (a second template): applies" in r.output


# --------------------------------------------------------------------------------------------- nvcc
def _nvcc(text: str, cfg: dict, tmp: Path, cubin: bool = True) -> str:
    tmp = Path(tempfile.mkdtemp(dir=tmp))  # a folder of its own: compiles may run side by side
    src = tmp / "t.cu"
    src.write_text(text)
    out = ["-cubin", "-o", str(tmp / "t.cubin")] if cubin else ["-c", "-o", str(tmp / "t.o")]
    cmd = ["nvcc", "-arch=sm_90", *out, "-Xptxas", "-v", *[f"-D{macro_name(k)}={v}" for k, v in cfg.items()], str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr


@pytest.mark.nvcc
def test_the_twin_compiles_at_the_corners_of_its_space_and_applied_into_the_file(tmp_path):
    text = CORPUS_COLUMN_SUM.read_text()
    cf, got = _outcome(text, str(CORPUS_COLUMN_SUM))
    t = got.twins[0]
    p = t.space.params
    corners = [dict(zip(p, c)) for c in itertools.product(*([min(x.values), max(x.values)] for x in p.values()))]
    corners = [c for c in corners if check_config(t.space, c, None) is None]
    assert {c["CLUSTER"] for c in corners} == {2, 8}
    rw = apply_mod.rewrite_file(text, str(CORPUS_COLUMN_SUM), "column_sum_kernel", t,
                                {"BLOCK": 32, "SPLIT": 8, "CLUSTER": 8, "OUTS": 4})
    assert "KT_" not in rw.text
    assert "__global__ __cluster_dims__(1, 8, 1) void column_sum_kernel(" in rw.text
    assert "dim3 grid((cols + (32 * 4) - 1) / (32 * 4), 8);" in rw.text and "dim3 block(32, 8);" in rw.text
    assert 'grid  = ["cdiv(cols, (32 * 4))", "8"]' in rw.text
    # the corners and the applied file (host code included) compile side by side
    jobs = [(t.text, c, True) for c in corners] + [(rw.text, {}, False)]
    logs = each(lambda j: _nvcc(j[0], j[1], tmp_path, cubin=j[2]), jobs)
    for log in logs[:-1]:
        assert " 0 bytes spill stores" in log, log


@pytest.mark.nvcc
def test_a_dispatch_holds_the_twin_beside_the_in_block_rewrite(tmp_path):
    from agent_core.measure.compiler import compile_kernel
    from tests.dispatch_helpers import twin_dispatch_of
    f = tmp_path / CORPUS_COLUMN_SUM.name
    shutil.copy(CORPUS_COLUMN_SUM, f)
    rw, names, _ = twin_dispatch_of(f, "column_sum_kernel", {"BLOCK": 32, "SPLIT": 8, "CLUSTER": 8},
                                    {"BLOCK": 64, "SPLIT": 16}, ("rows", 178))
    new = rw.text
    assert len(names) == 2 and names[0] == "column_sum_kernel"
    assert "KT_" not in new and new.count("#include <cooperative_groups.h>") == 1
    assert "__cluster_dims__(1, 8, 1)" in new and new.count("__cluster_dims__") == 1
    host = new[new.index("void column_sum("):]
    assert re.search(r"column_sum_kernel<<<dim3\([^>]*, 8\)", host), host
    f.write_text(new)
    # each kernel's entry in the cubin (one nvcc run: the cache's key is the text), and the file with its host code
    each(lambda run: run(), [lambda: [compile_kernel(new, name, cache_dir=tmp_path / "cache") for name in names],
                             lambda: _nvcc(new, {}, tmp_path, cubin=False)])
