
import re
from pathlib import Path

import pytest

from agent_core.source import spec as S
from agent_core.templating import draft_spec as D
from agent_core.measure.backend import Launch
from agent_core.model import CudaFile, Kernel, KernelParam, KerntuneError, Param, ParamSpace, Span

Z = Span(0, 0, 0, 0, 0, 0)


def byte_span(text: str, start: int, end: int) -> Span:
    b = text.encode()
    return Span(start, end, b[:start].count(b"\n"), start - (b[:start].rfind(b"\n") + 1),
                b[:end].count(b"\n"), end - (b[:end].rfind(b"\n") + 1))


def hand_file(text: str, name: str, params: list[tuple[str, str, bool, bool]], path="/tmp/none/k.cu") -> CudaFile:
    """A CudaFile with one kernel, built by hand (for the parts that do not need the real parser)."""
    b = text.encode()
    start = b.index(b"__global__")
    t = b.rfind(b"template", 0, start)
    if t >= 0 and b"{" not in b[t:start] and b";" not in b[t:start]:
        start = t
    end = b.index(b"}", start) + 1
    kps = [KernelParam(n, ty, ptr, const, Z) for n, ty, ptr, const in params]
    k = Kernel(name, byte_span(text, start, end), Z, Z, kps, [], [], [], [], "")
    return CudaFile(path, text, [k], [], [])


ROW_PARAMS = [("x", "const float*", True, True), ("out", "float*", True, False), ("cols", "int", False, False)]

ROW_SUM = '''#include <cuda_runtime.h>
#define BLOCK 128

// a row sum
/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = "rows"
block = "BLOCK"
*/
// one block per row

__global__ void row_sum(const float* x, float* out, int cols) { }
'''


def row_sum_spec(**over):
    data = {"args": ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"],
            "sizes": [{"rows": 8192, "cols": 4096}, {"rows": 1000, "cols": 4099}],
            "grid": "rows", "block": "BLOCK"}
    data.update(over)
    return S.parse_spec(data, "row_sum", "test", "f.cu", 7)


def row_kernel():
    return hand_file(ROW_SUM, "row_sum", ROW_PARAMS).kernels[0]


# --------------------------------------------------------------------------------------------- parsing
def test_parse_every_arg_form():
    a = S.parse_arg("x: in f32[rows * cols]")
    assert (a.name, a.role, a.dtype, a.size, a.init) == ("x", "in", "f32", "rows * cols", "normal")
    a = S.parse_arg("x: inout bf16[n] ~ uniform(-2, 2)")
    assert (a.role, a.dtype, a.size, a.init) == ("inout", "bf16", "n", "uniform(-2, 2)")
    a = S.parse_arg("y : out  f16[ cdiv(n, 2) ]")
    assert (a.name, a.role, a.size) == ("y", "out", "cdiv(n, 2)")
    a = S.parse_arg("n: i32 = n")
    assert (a.name, a.role, a.dtype, a.value) == ("n", "scalar", "i32", "n")
    a = S.parse_arg("eps: f32 = 1e-6")
    assert (a.role, a.dtype, a.value) == ("scalar", "f32", "1e-6")
    a = S.parse_arg("idx: in i64[n] ~ randint(0, n)")
    assert a.init == "randint(0, n)"
    assert S.parse_arg("x f32[n]") is None and S.parse_arg("x: in f32") is None


def test_parse_spec_fields():
    s = row_sum_spec(smem="BLOCK * 4", bytes="rows * cols * 4", rtol=1e-3, block=["BLOCK", 1])
    assert s.grid == ["rows"] and s.block == ["BLOCK", "1"] and s.smem == "BLOCK * 4"
    assert s.bytes_moved == "rows * cols * 4" and s.rtol == 1e-3 and s.atol is None
    assert [a.name for a in s.args] == ["x", "out", "cols"]


@pytest.mark.parametrize("over, field, text", [
    ({"grd": "rows"}, "grd", "did you mean 'grid'"),
    ({"args": ["x: in f32[n]", "oops"]}, "args[1]", "forms are"),
    ({"args": "x"}, "args", "list of strings"),
    ({"sizes": [{"rows": 1.5}]}, "sizes[0].rows", "whole numbers"),
    ({"grid": ["a", "b", "c", "d"]}, "grid", "1 to 3"),
    ({"rtol": -1}, "rtol", "non-negative"),
])
def test_parse_spec_errors(over, field, text):
    with pytest.raises(KerntuneError) as ei:
        row_sum_spec(**over)
    assert ei.value.field_name == field and text in ei.value.message and ei.value.path == "f.cu"
    assert ei.value.line == 7


# --------------------------------------------------------------------------------------------- validation
def test_valid_spec_passes():
    S.validate_spec(row_sum_spec(), row_kernel(), {"BLOCK"})


@pytest.mark.parametrize("over, params, field, text", [
    ({"args": ["x: in f32[rows * cols]", "out: out f32[rows]"]}, {"BLOCK"}, "args", "has 3 parameters"),
    ({"args": ["x: in f32[rows * cols]", "y: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"}, "args[1]", "is 'out'"),
    ({"args": ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: in i32[rows]"]}, {"BLOCK"}, "args[2]",
     "not a pointer"),
    ({"args": ["x: in f32[rows * cols]", "out: f32 = 1", "cols: i32 = cols"]}, {"BLOCK"}, "args[1]", "is a pointer"),
    ({"args": ["x: inout f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"}, "args[0]",
     "points to const"),
    ({"args": ["x: in f31[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"}, "args[0]",
     "unknown dtype 'f31'"),
    ({"args": ["x: in f32[rows * colz]", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"}, "args[0]",
     "did you mean cols"),
    ({"args": ["x: in f32[rows * BLOCK]", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"}, "args[0]",
     "size names only"),
    ({"args": ["x: in f32[rows * cols] ~ uniform(2, 1)", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"},
     "args[0]", "lo must be below hi"),
    ({"args": ["x: in f32[rows * cols] ~ gauss", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"},
     "args[0]", "unknown init"),
    ({"args": ["x: in f32[rows * cols] ~ randint(0.5, 2)", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"},
     "args[0]", "whole numbers"),
    ({"args": ["x: in f32[rows - 8192]", "out: out f32[rows]", "cols: i32 = cols"]}, {"BLOCK"},
     "args[0]", "positive whole number"),
    ({"sizes": [{"rows": 8, "cols": 4}]}, {"BLOCK"}, "sizes", "at least two"),
    ({"sizes": [{"rows": 8, "cols": 4}, {"rows": 8}]}, {"BLOCK"}, "sizes[1]", "lacks cols"),
    ({"sizes": [{"rows": 8, "cols": 4}, {"rows": 8, "cols": 0}]}, {"BLOCK"}, "sizes[1].cols", "positive"),
    ({}, set(), "block", "unknown name 'BLOCK'"),
    ({"grid": "cdiv(rows, BLOCK"}, {"BLOCK"}, "grid", "cannot parse"),
    ({"smem": "open(1)"}, {"BLOCK"}, "smem", "unknown function"),
])
def test_validation_errors(over, params, field, text):
    s = row_sum_spec(**over)
    with pytest.raises(KerntuneError) as ei:
        S.validate_spec(s, row_kernel(), params)
    assert ei.value.field_name == field, ei.value.message
    assert text in ei.value.message
    assert ei.value.path == "f.cu" and ei.value.line is not None


def test_in_buffer_for_non_const_pointer_is_allowed():
    s = row_sum_spec(args=["x: in f32[rows * cols]", "out: in f32[rows]", "cols: i32 = cols"])
    S.validate_spec(s, row_kernel(), {"BLOCK"})


# --------------------------------------------------------------------------------------------- finding
def test_find_spec_in_comment_with_lines():
    cf = hand_file(ROW_SUM, "row_sum", ROW_PARAMS)
    s = S.find_spec(cf, "row_sum")
    assert s is not None and s.origin == "comment:5" and s.path == cf.path
    assert s.span.line == 4 and s.span.end_line == 9
    assert ROW_SUM.encode()[s.span.start:s.span.end].decode().startswith("/* kerntune:")
    assert s.sizes[1] == {"rows": 1000, "cols": 4099} and s.grid == ["rows"] and s.block == ["BLOCK"]
    assert s.lines["args[2]"] == 5 and s.lines["sizes[1]"] == 6 and s.lines["block"] == 8
    # validation errors point at the field's line in the file
    bad = ROW_SUM.replace('"cols: i32 = cols"', '"cols: i32 = colz"')
    with pytest.raises(KerntuneError) as ei:
        S.validate_spec(S.find_spec(hand_file(bad, "row_sum", ROW_PARAMS), "row_sum"), row_kernel(), {"BLOCK"})
    assert ei.value.line == 5 and ei.value.field_name == "args[2]"


def test_find_spec_star_margin_and_template_prefix():
    text = '''/* kerntune:
 * args = ["x: inout f32[n]", "n: i32 = n"]
 * sizes = [{ n = 1024 }, { n = 1001 }]
 * grid = "cdiv(n, B)"
 * block = "B"
 */
template <int B>
__global__ void scale(float* x, int n) { }
'''
    cf = hand_file(text, "scale", [("x", "float*", True, False), ("n", "int", False, False)])
    s = S.find_spec(cf, "scale")
    assert s.args[0].role == "inout" and s.grid == ["cdiv(n, B)"]


def test_find_spec_not_separated_by_code():
    text = ROW_SUM.replace("// one block per row", "static int z = 1;")
    assert S.find_spec(hand_file(text, "row_sum", ROW_PARAMS), "row_sum") is None
    text = ROW_SUM.replace("// one block per row", "#define Q 3")
    assert S.find_spec(hand_file(text, "row_sum", ROW_PARAMS), "row_sum") is None


def test_find_spec_toml_error_reports_file_line():
    text = ROW_SUM.replace('grid  = "rows"', 'grid  = rows')
    with pytest.raises(KerntuneError) as ei:
        S.find_spec(hand_file(text, "row_sum", ROW_PARAMS), "row_sum")
    assert ei.value.line == 7 and "not valid TOML" in ei.value.message


def test_find_spec_in_sidecar(tmp_path):
    src = tmp_path / "k.cu"
    text = "__global__ void row_sum(const float* x, float* out, int cols) { }\n"
    src.write_text(text)
    (tmp_path / "k.cu.kerntune.toml").write_text('''# specs for k.cu
[other]
args = []

[row_sum]
args = [
  "x: in f32[rows * cols]",
  "out: out f32[rows]",
  "cols: i32 = colz",
]
sizes = [{ rows = 64, cols = 100 }, { rows = 3, cols = 7 }]
grid = "rows"
block = 128
''')
    cf = hand_file(text, "row_sum", ROW_PARAMS, path=str(src))
    s = S.find_spec(cf, "row_sum")
    assert s.origin == str(tmp_path / "k.cu.kerntune.toml") and s.span is None and s.block == ["128"]
    with pytest.raises(KerntuneError) as ei:
        S.validate_spec(s, cf.kernels[0])
    assert ei.value.path == s.origin and ei.value.line == 8 and ei.value.field_name == "args[2]"
    # a spec in both places is ambiguous
    cf2 = hand_file(ROW_SUM, "row_sum", ROW_PARAMS, path=str(src))
    with pytest.raises(KerntuneError, match="both"):
        S.find_spec(cf2, "row_sum")


def test_no_spec():
    text = "__global__ void row_sum(const float* x, float* out, int cols) { }\n"
    assert S.find_spec(hand_file(text, "row_sum", ROW_PARAMS), "row_sum") is None


# --------------------------------------------------------------------------------------------- evaluation
def test_evaluation_helpers():
    s = row_sum_spec(args=["x: inout f16[rows * cols]", "out: out f32[cdiv(rows, 3)]", "cols: i32 = cols / 2"])
    sz = S.size_env(s, 1)
    assert sz == {"rows": 1000, "cols": 4099}
    assert S.buffer_elems(s, sz) == {"x": 4099000, "out": 334}
    assert S.scalar_values(s, sz) == {"cols": 2049}
    assert isinstance(S.scalar_values(row_sum_spec(args=["eps: f32 = 1"]), {})["eps"], float)
    assert S.bytes_moved(s, sz) == 4099000 * 2 * 2 + 334 * 4
    assert S.bytes_moved(row_sum_spec(bytes="rows * 8"), sz) == 8000
    assert S.dtype_info("bf16") == ("uint16", 2) and S.dtype_info("f64") == ("float64", 8)
    assert S.dtype_info("i8") == ("int8", 1)
    with pytest.raises(KerntuneError):
        S.dtype_info("f8")


def test_launch_from_spec_and_template_dict():
    s = row_sum_spec(grid=["cdiv(cols, BLOCK)", "rows"], smem="BLOCK * 4")
    ln = S.launch(s, {"rows": 1000, "cols": 4099}, {"BLOCK": 256})
    assert ln == Launch((17, 1000, 1), (256, 1, 1), 1024) and ln.threads == 256
    ln = S.launch({"grid": "rows", "block": ["BLOCK", 2]}, {"rows": 5}, {"BLOCK": 64})
    assert ln == Launch((5, 1, 1), (64, 2, 1), 0)
    with pytest.raises(KerntuneError):
        S.launch({"grid": "rows"}, {"rows": 5}, {})
    with pytest.raises(KerntuneError, match="unknown name"):
        S.launch(s, {"rows": 5, "cols": 3}, {})


def test_tolerance_defaults_and_overrides():
    s = row_sum_spec()
    assert S.tolerances(s, "f32") == (1e-5, 1e-5) and S.tolerances(s, "f64") == (1e-5, 1e-5)
    assert S.tolerances(s, "f16") == (1e-2, 1e-2) and S.tolerances(s, "bf16") == (1e-2, 1e-2)
    assert S.tolerances(s, "i32") == (0, 0) and S.tolerances(s, "u8") == (0, 0)
    assert S.tolerances(row_sum_spec(rtol=1e-3), "f32") == (1e-3, 1e-5)


def test_check_tail_sizes():
    space = ParamSpace("row_sum", {"BLOCK": Param("BLOCK", [32, 64, 128], 128, "block_size"),
                                   "U": Param("U", [1, 2], 1, "unroll")}, [])
    assert S.check_tail_sizes(row_sum_spec(), space) is None
    w = S.check_tail_sizes(row_sum_spec(sizes=[{"rows": 64, "cols": 4096}, {"rows": 128, "cols": 256}]), space)
    assert w and "BLOCK" in w and "4099" in w
    none = ParamSpace("row_sum", {"U": Param("U", [1, 2], 1, "unroll")}, [])
    assert S.check_tail_sizes(row_sum_spec(sizes=[{"rows": 64, "cols": 64}, {"rows": 64, "cols": 64}]), none) is None
    vec = ParamSpace("k", {"VEC": Param("VEC", [1, 2, 4], 1, "vector_width")}, [])
    assert S.check_tail_sizes(row_sum_spec(sizes=[{"rows": 64, "cols": 6}, {"rows": 8, "cols": 12}]), vec)
    assert S.check_tail_sizes(row_sum_spec(sizes=[{"rows": 64, "cols": 6}, {"rows": 8, "cols": 7}]), vec) is None


def test_spec_hash_ignores_location():
    a, b = row_sum_spec(), row_sum_spec()
    b.path, b.lines, b.origin = "elsewhere.cu", {"grid": 99}, "comment:3"
    assert a.spec_hash == b.spec_hash
    assert row_sum_spec(grid="rows * 2").spec_hash != a.spec_hash


# --------------------------------------------------------------------------------------------- drafting
def test_c_dtypes():
    assert S.c_dtype("const float* __restrict__") == "f32" and S.c_dtype("__half *") == "f16"
    assert S.c_dtype("const __nv_bfloat16*") == "bf16" and S.c_dtype("double") == "f64"
    assert S.c_dtype("int") == "i32" and S.c_dtype("const int64_t") == "i64" and S.c_dtype("long long") == "i64"
    assert S.c_dtype("unsigned") == "u32" and S.c_dtype("uint8_t*") == "u8" and S.c_dtype("T*") is None


def _fill(draft: str, sizes: str, counts: dict[str, str]) -> str:
    """Fill a draft's placeholders the way a user would."""
    lines = draft.split("\n")
    out = []
    for ln in lines:
        if ln.lstrip().startswith("{") and "= 0" in ln:
            continue
        if ln.lstrip().startswith("sizes = ["):
            out.append(f"sizes = [{sizes},")
            continue
        for name, c in counts.items():
            if ln.lstrip().startswith(f'"{name}:'):
                ln = re.sub(r"\[[^\]]*\]", f"[{c}]", ln)
        out.append(ln)
    return "\n".join(out)


NO_LAUNCH = '''#include <cuda_fp16.h>
namespace k {
    template <typename T, int N>
    __global__ void axpy(const __half* __restrict__ x, float* y, float a, int n) { }
}
'''


def test_draft_without_launch_site_and_insert():
    params = [("x", "const __half* __restrict__", True, True), ("y", "float*", True, False),
              ("a", "float", False, False), ("n", "int", False, False)]
    cf = hand_file(NO_LAUNCH, "axpy", params)
    d = D.draft_spec(cf, "axpy")
    assert d.startswith("/* kerntune:\n") and d.endswith("\n*/")
    assert '"x: in f16[n]"' in d and '"y: out f32[n]"' in d and "or inout if it is read" in d
    assert '"a: f32 = 1.0"' in d and '"n: i32 = n"' in d and "{ n = 0 }" in d
    assert 'grid = "TODO"' in d and "no launch of this kernel" in d
    new = D.insert_spec(NO_LAUNCH, cf, "axpy")
    assert D.insert_spec(NO_LAUNCH, cf, "axpy") == new  # deterministic
    lines = new.split("\n")
    i = lines.index("    /* kerntune:")
    assert lines[i - 1] == "namespace k {" and lines[i + 1].startswith("    # drafted")
    assert "template <typename T, int N>" in lines[lines.index("    */") + 1]
    # the inserted block is found, and after filling it in, it validates
    kernel_params = params
    s = S.find_spec(hand_file(new, "axpy", kernel_params), "axpy")
    assert s is not None and s.grid == ["TODO"]
    with pytest.raises(KerntuneError) as ei:
        S.validate_spec(s, cf.kernels[0])
    assert ei.value.field_name == "sizes[0].n"  # the placeholder sizes are not accepted as they are
    filled = _fill(new, "{ n = 4096 }, { n = 4099 }", {}).replace('grid = "TODO"', 'grid = "cdiv(n, 256)"') \
        .replace('block = "TODO"', 'block = "256"')
    cf2 = hand_file(filled, "axpy", kernel_params)
    S.validate_spec(S.find_spec(cf2, "axpy"), cf2.kernels[0])


# --------------------------------------------------------------------------------------------- with the real parser
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# file, kernel, sizes to fill in, element counts to fill in, expected grid / block of the draft
DRAFT_CASES = [
    ("row_sum.cu", "row_sum", "{ cols = 4096, rows = 64 }, { cols = 4099, rows = 10 }",
     {"out": "rows"}, ["rows"], ["BLOCK"]),
    ("scale_rows.cu", "scale_rows", "{ rows = 64, cols = 4096 }, { rows = 10, cols = 4099 }",
     {"scale": "rows"}, ["(cols + THREADS * VEC - 1) / (THREADS * VEC)", "rows"], ["THREADS"]),
    ("silu.cu", "silu", "{ n = 4096 }, { n = 4099 }", {}, ["BLOCKS"], ["THREADS"]),
]


def _without_spec(path: Path, kernel: str) -> str:
    from agent_core.source.cuda_parse import parse_cuda
    text = path.read_text()
    s = S.find_spec(parse_cuda(text, str(path)), kernel)
    if s is None:
        return text
    b = text.encode()
    end = s.span.end + (1 if b[s.span.end:s.span.end + 1] == b"\n" else 0)
    return (b[:s.span.start] + b[end:]).decode()


@pytest.mark.parametrize("name, kernel, sizes, counts, grid, block", DRAFT_CASES)
def test_draft_for_the_examples_parses_and_validates_once_filled(name, kernel, sizes, counts, grid, block):
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.templating.templatize import templatize
    path = EXAMPLES / name
    text = _without_spec(path, kernel)
    cf = parse_cuda(text, str(path))
    assert S.find_spec(cf, kernel) is None
    t = templatize(cf, kernel)
    new = D.insert_spec(text, cf, kernel)
    cf2 = parse_cuda(new, str(path))
    assert not cf2.errors and [k.name for k in cf2.kernels] == [k.name for k in cf.kernels]
    s = S.find_spec(cf2, kernel)
    assert s is not None and s.grid == grid and s.block == block
    k2 = cf2.kernel(kernel)
    for a, p in zip(s.args, k2.params):
        assert a.name == p.name and (a.role == "scalar") != p.is_pointer
        assert a.role != "out" or not p.is_const
    # as drafted it is refused (placeholder sizes); filled in, it validates
    with pytest.raises(KerntuneError):
        S.validate_spec(s, k2, set(t.space.params))
    filled = _fill(new, sizes, counts)
    cf3 = parse_cuda(filled, str(path))
    s3 = S.find_spec(cf3, kernel)
    S.validate_spec(s3, cf3.kernel(kernel), set(t.space.params))
    assert S.launch(s3, s3.sizes[1], t.space.original_config()).threads == \
        S.launch(S.find_spec(parse_cuda(path.read_text(), str(path)), kernel), s3.sizes[1],
                 t.space.original_config()).threads
