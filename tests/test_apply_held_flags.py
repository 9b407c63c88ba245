"""A run-time flag an expert binding holds at the spec's value (``Binding.pinned``): the rewrite launches the tuned
kernel only where the launch passes that value, and the original kernel, kept beside it, everywhere else (the tuned
kernel still traps on another value, should anything else launch it)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_core.agent.dispatch import Bound, Dispatch, Entry, Rule, select
from agent_core.apply import held_flags, rewrite_dispatch, rewrite_file
from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating import experts as X
from tests.nvcc_check import CHECK_FLAGS

ROOT = Path(__file__).resolve().parents[1]
STYLE = ROOT / "tests/data/cu/styles/rms_norm_rstd_unit_offset_flag_block_f16.cu"
KERNEL = "rms_norm_rstd_unit_offset"


def _held_binding(path: Path, kernel: str | None = None):
    text = path.read_text()
    cf = parse_cuda(text, str(path))
    k = cf.kernel(kernel) if kernel else cf.kernels[0]
    spec = spec_mod.find_spec(cf, k.name)
    b = next(b for b in X.candidates(cf, k.name, spec) if b.pinned)
    return text, cf, k.name, spec, b, X.bind(b, cf, spec)


def _kernel_text(text: str, name: str) -> str:
    k = parse_cuda(text, "x.cu").kernel(name)
    return text.encode()[k.span.start:k.span.end].decode()


def _nvcc_c(path: Path) -> None:
    r = subprocess.run([shutil.which("nvcc"), "-arch=sm_90", *CHECK_FLAGS, "-c", str(path), "-o",
                        str(path.with_suffix(".o"))], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_held_flags_are_read_back_from_the_template_text():
    _, _, _, _, b, t = _held_binding(STYLE)
    assert b.pinned == {"add_unit_offset": 1}
    assert held_flags(t) == {"add_unit_offset": 1}
    assert held_flags(None) == {}


def test_one_configuration_keeps_the_original_for_another_flag_value():
    text, _, k, _, _, t = _held_binding(STYLE)
    rw = rewrite_file(text, str(STYLE), k, t, t.space.original_config())
    new = rw.text
    assert [n for n, _ in rw.kernels] == [k, f"{k}__orig"] and rw.dispatch is None
    # the original kernel, unchanged but for its name, with its own spec
    assert _kernel_text(new, f"{k}__orig") == _kernel_text(text, k).replace(f"{k}(", f"{k}__orig(", 1)
    assert rw.kernels[1][1].block == ["256"]
    launch = re.search(r"if \(\(long long\)\(add_unit_offset\) == 1LL\) \{  // kerntune: [^\n]*\n\s*" + k
                       + r"<<<[^;]*;\n\s*\} else \{\n\s*" + k + r"__orig<<<T, 256, 0, st>>>\(x, w, out, rstd, H, eps, "
                       r"add_unit_offset\);\n\s*\}", new)
    assert launch, new[-1500:]
    assert "__orig: wherever a launch does not pass `add_unit_offset` = 1: the original kernel" in new
    assert "if ((long long)(add_unit_offset) != 1LL) __trap();" in _kernel_text(new, k)  # still, for other callers


def test_a_per_shape_dispatch_of_held_entries_falls_back_in_every_branch():
    text, _, k, spec, _, t = _held_binding(STYLE)
    cfg = t.space.original_config()
    other = dict(cfg, THREADS=128 if cfg["THREADS"] != 128 else 64)
    sizes = [dict(s) for s in spec.sizes]
    e0, e1 = Entry(t.template_hash, t.origin, cfg), Entry(t.template_hash, t.origin, other)
    n = len(sizes)
    d = Dispatch(rules=[Rule([Bound("H", None, 2048)], 1), Rule([], 0)], entries=[e0, e1], winner=e0, sizes=sizes,
                 serve=[], original_us=[1.0] * n, tuned_us=[1.0] * n, single_original_us=[1.0] * n,
                 single_us=[1.0] * n)
    d.serve = [select(d, s) for s in sizes]
    rw = rewrite_dispatch(text, str(STYLE), k, [(t, cfg), (t, other)], d)
    names = [n for n, _ in rw.kernels]
    assert names[0] == k and names[-1] == f"{k}__orig" and len(names) == 3
    body = rw.text[rw.text.index("void rms_norm_rstd_unit_offset_launch"):]
    assert "if (H <= 2048) {" in body
    assert body.count("if ((long long)(add_unit_offset) == 1LL)") == 2, body
    assert body.count(f"{k}__orig<<<") == 2
    assert len(rw.dispatch.entries) == 3 and rw.dispatch.entries[-1].is_original


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("rel, kernel", [
    ("tests/data/cu/styles/rms_norm_rstd_unit_offset_flag_block_f16.cu", None),
    # a templated kernel (the template itself stays for the other value) launched from a templated launcher
    ("bench/corpus/layer_norm/add_bias_input_layernorm_v2_ite4_half2_fp32_gamma_void_ptr_fixed_eps_fp16_"
     "bytetransformer.cu", None),
    # two flags held, passed as members of a parameter struct, the launch inside a macro written out
    ("bench/corpus/merge_attn_states/splitkv_combine_split_major_oaccum_slse_transpose_unpadded_lse_bf16_fa2.cu",
     None),
])
def test_the_rewrite_with_a_held_flag_compiles(tmp_path, rel, kernel):
    path = ROOT / rel
    text, _, k, _, b, t = _held_binding(path, kernel)
    rw = rewrite_file(text, str(path), k, t, t.space.original_config())
    for n, v in b.pinned.items():
        assert re.search(rf"\(long long\)\([\w.>-]*\b{n}\) == {v}LL", rw.text), n
    f = tmp_path / path.name
    f.write_text(rw.text)
    _nvcc_c(f)
