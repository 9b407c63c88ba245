import shutil
import subprocess
from pathlib import Path

import pytest

from agent_core.apply import apply_edits, apply_to_file, check_compiles, render, strip_header, text_edits
from agent_core.model import KernelTemplate, KerntuneError, Param, ParamSpace

ROW_SUM = '''#include <cuda_runtime.h>
#define BLOCK 128

__global__ void row_sum(const float* __restrict__ x, float* out, int cols) {
    __shared__ float s[BLOCK];
    float acc = 0.f;
    const float* row = x + (size_t)blockIdx.x * cols;
#pragma unroll 4
    for (int c = threadIdx.x; c < cols; c += BLOCK) acc += row[c];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

void launch(const float* x, float* out, int rows, int cols) {
    row_sum<<<rows, BLOCK>>>(x, out, cols);
}
'''

# UTF-8 in comments, a template kernel, the header placed after the includes
SCALE = '''// scale — ünïcode comment
#include <cuda_fp16.h>

template <int VEC, int THREADS>
__global__ void __launch_bounds__(256) scale(float* x, int n) {
    int i = (blockIdx.x * THREADS + threadIdx.x) * VEC;
    for (int v = 0; v < VEC; ++v) if (i + v < n) x[i + v] *= 2.f;  // KT_ not a macro: KT_VEC_X stays
}

void go(float* x, int n) { scale<2, 256><<<(n + 511) / 512, 256>>>(x, n); }
'''


def structural(original: str, sites: list[tuple[str, str, str]], params: dict[str, Param],
               header_after: str = "") -> KernelTemplate:
    """What templatize produces: in each (context, literal, param) site, the literal inside the unique
    context replaced by KT_<param>; plus the params header."""
    text = original
    for context, literal, param in sites:
        assert text.count(context) == 1, context
        pos = text.index(context)
        text = text[:pos] + context.replace(literal, f"KT_{param}", 1) + text[pos + len(context):]
    header = "// kerntune:params-begin\n" + "".join(
        f"#ifndef KT_{n}\n#define KT_{n} {p.original}\n#endif\n" for n, p in params.items()) + \
        "// kerntune:params-end\n"
    at = text.index(header_after) + len(header_after) if header_after else 0
    text = text[:at] + header + text[at:]
    return KernelTemplate("k", "k.cu", original, text, ParamSpace("k", params, []))


def row_sum_real_template():
    t = structural(ROW_SUM, [("BLOCK 128", "128", "BLOCK"), ("unroll 4", "4", "UNROLL")], {
        "BLOCK": Param("BLOCK", [64, 128, 256], 128, "block_size"),
        "UNROLL": Param("UNROLL", [1, 2, 4, 8], 4, "unroll")})
    assert "#define BLOCK KT_BLOCK" in t.text and "#pragma unroll KT_UNROLL" in t.text
    return t


def scale_template():
    return structural(SCALE, [("__launch_bounds__(256)", "256", "LB"), ("scale<2, 256>", "2", "VEC"),
                                  ("<KT_VEC, 256>", "256", "THREADS"), ("/ 512", "512", "GRID_DIV")], {
        "VEC": Param("VEC", [1, 2, 4], 2, "template_arg"),
        "THREADS": Param("THREADS", [128, 256], 256, "template_arg"),
        "LB": Param("LB", [128, 256], 256, "launch_bounds"),
        "GRID_DIV": Param("GRID_DIV", [256, 512, 1024], 512, "grid_size")}, header_after="#include <cuda_fp16.h>\n")


@pytest.mark.parametrize("make", [row_sum_real_template, scale_template])
def test_render_original_config_gives_back_the_file(make):
    t = make()
    assert "kerntune:params-begin" in t.text
    assert render(t, t.space.original_config()) == t.original_text
    assert render(t, {}) == t.original_text


def test_render_a_configuration():
    t = row_sum_real_template()
    new = render(t, {"BLOCK": 256, "UNROLL": 8})
    assert "#define BLOCK 256\n" in new and "#pragma unroll 8\n" in new and "KT_" not in new
    assert "kerntune:params" not in new
    t2 = scale_template()
    new2 = render(t2, {"VEC": 4, "THREADS": 128, "LB": 128, "GRID_DIV": 512})
    assert "scale<4, 128><<<(n + 511) / 512, 256>>>" in new2 and "__launch_bounds__(128)" in new2
    assert "KT_VEC_X stays" in new2  # whole identifiers only


def test_strip_header_only_the_block():
    text = "a\n// kerntune:params-begin\n#define KT_X 1\n// kerntune:params-end\nb\n"
    assert strip_header(text) == "a\nb\n"
    assert strip_header("no header\n") == "no header\n"


def test_text_edits_are_minimal_and_apply():
    t = row_sum_real_template()
    new = render(t, {"BLOCK": 256, "UNROLL": 8})
    edits = text_edits(ROW_SUM, new)
    assert [r for _, _, r in edits] == ["256", "8"]
    s, e, _ = edits[0]
    assert ROW_SUM[s:e] == "128"
    assert apply_edits(ROW_SUM, edits) == new
    assert text_edits(ROW_SUM, ROW_SUM) == []
    # byte offsets with multi-byte characters before the change
    t2 = scale_template()
    new2 = render(t2, {"VEC": 4, "THREADS": 256, "LB": 256, "GRID_DIV": 512})
    ed2 = text_edits(SCALE, new2)
    assert apply_edits(SCALE, ed2) == new2
    b = SCALE.encode()
    assert all(b[s:e].decode() in ("2",) for s, e, _ in ed2)
    # insertions and deletions of whole lines
    old, newer = "a\nb\nc\n", "a\nx\ny\nc\nd\n"
    assert apply_edits(old, text_edits(old, newer)) == newer
    assert apply_edits(newer, text_edits(newer, "c\n")) == "c\n"


def test_apply_refuses_a_changed_file(tmp_path):
    t = row_sum_real_template()
    f = tmp_path / "k.cu"
    f.write_text(ROW_SUM.replace("float acc", "double acc"))
    with pytest.raises(KerntuneError) as ei:
        apply_to_file(f, t, {"BLOCK": 256}, check_compile=False)
    assert "changed since" in ei.value.message
    assert "double acc" in f.read_text()


def test_apply_without_compile_check_writes(tmp_path):
    t = row_sum_real_template()
    f = tmp_path / "k.cu"
    f.write_text(ROW_SUM)
    new = apply_to_file(f, t, {"BLOCK": 64}, check_compile=False)
    assert f.read_text() == new and "#define BLOCK 64" in new
    assert [p.name for p in tmp_path.iterdir()] == ["k.cu"]


@pytest.mark.nvcc
def test_apply_compiles_before_writing(tmp_path):
    t = row_sum_real_template()
    f = tmp_path / "k.cu"
    f.write_text(ROW_SUM)
    new = apply_to_file(f, t, {"BLOCK": 256, "UNROLL": 2})
    assert f.read_text() == new and "#define BLOCK 256" in new
    # a configuration that does not compile (a zero-length shared array) leaves the file as it was
    f.write_text(ROW_SUM)
    bad = structural(ROW_SUM, [("BLOCK 128", "128", "BLOCK")], {"BLOCK": Param("BLOCK", [-1, 128], 128, "block_size")})
    with pytest.raises(KerntuneError) as ei:
        apply_to_file(f, bad, {"BLOCK": -1})
    assert "does not compile" in ei.value.message and str(f) in ei.value.message
    assert f.read_text() == ROW_SUM


@pytest.mark.nvcc
def test_check_compiles_sees_includes_beside_the_file(tmp_path):
    (tmp_path / "helper.h").write_text("#define HELPER 3\n")
    src = '#include "helper.h"\n__global__ void k(int* x) { x[0] = HELPER; }\n'
    check_compiles(src, tmp_path / "k.cu")
    with pytest.raises(KerntuneError, match="does not compile"):
        check_compiles(src.replace("HELPER;", "HELPR;"), tmp_path / "k.cu")


# --------------------------------------------------------------------------------------------- real templates
ROOT = Path(__file__).resolve().parent.parent
REAL_FILES = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("examples/*.cu"), *ROOT.glob("bench/*.cu")])


def _real_template(rel: str, kernel: str | None = None):
    from agent_core.cuda_parse import parse_cuda
    from agent_core.templatize import templatize
    path = ROOT / rel
    cf = parse_cuda(path.read_text(), str(path))
    return templatize(cf, kernel or cf.kernels[0].name)


def test_there_are_real_files():
    assert len(REAL_FILES) >= 5


@pytest.mark.parametrize("rel", REAL_FILES)
def test_render_round_trip_on_real_templates(rel):
    t = _real_template(rel)
    assert "kerntune:params-begin" in t.text and t.space.params
    assert render(t, t.space.original_config()) == t.original_text
    # another configuration changes only the sites, and the edits reproduce it
    other = {n: next((v for v in p.values if v != p.original), p.original) for n, p in t.space.params.items()}
    new = render(t, other)
    assert all(f"KT_{n}" not in new for n in t.space.params) and "kerntune:params" not in new
    assert apply_edits(t.original_text, text_edits(t.original_text, new)) == new


@pytest.mark.nvcc
def test_apply_to_file_with_a_real_template(tmp_path):
    t = _real_template("examples/row_sum.cu")
    f = tmp_path / "row_sum.cu"
    f.write_text(t.original_text)
    cfg = {n: p.values[-1] for n, p in t.space.params.items()}
    new = apply_to_file(f, t, cfg)
    assert f.read_text() == new == render(t, cfg) and new != t.original_text


def test_sites_render_derived_literals_as_numbers():
    t = _real_template("bench/merge_attn_states.cu")
    new = render(t, {"BLOCK": 256})
    assert "total + 255) / 256, 256, 0, stream>>>" in new
    t = _real_template("bench/fused_add_rms_norm.cu")
    assert "int s = 256;" in render(t, {"BLOCK": 512})
    # an edited template is rendered token by token (the edit is kept, derived expressions stay expressions)
    t.text = t.text.replace("int s = KT_BLOCK / 2;", "int s = KT_BLOCK / 2;  // edited")
    new = render(t, {"BLOCK": 512})
    assert "int s = 512 / 2;  // edited" in new and "kerntune:params" not in new
