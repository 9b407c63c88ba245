"""load_hint: the vector loads the rewrites wrote take LOAD_HINT (1: ld.global.L1::no_allocate.L2::256B, not kept
in L1). Which loads it touches and which it leaves, the text, and (nvcc) that both values compile with the hint in
the PTX only at 1. On the GPU: gpu/results/2026-11-24i (column_sum_same_harness, rewrite_check)."""

import re
import subprocess
from pathlib import Path

import pytest

from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.rewrites import compose

DATA = Path(__file__).resolve().parent / "data" / "cu" / "rewrites"
CORPUS = Path(__file__).resolve().parent.parent / "bench" / "corpus" / "other"


def _got(path: Path):
    cf = parse_cuda(path.read_text(), str(path))
    return compose(cf, cf.kernels[0].name)


def _body(text: str) -> str:
    return text[text.index("__global__"):]


def test_the_vectorized_loads_take_the_hint_and_the_users_own_loads_do_not():
    got = _got(DATA / "softmax3.cu")
    assert "load_hint" in got.applied
    t = got.template
    assert t.space.params["LOAD_HINT"].values == [0, 1] and t.space.params["LOAD_HINT"].original == 0
    body = _body(t.text)
    assert "kt_load_hint<KT_LOAD_HINT, KT_VEC>(" in body
    assert not re.search(r"\bkt_load<", body)  # every rewrite-made vector load is hinted
    assert "KERNTUNE_REWRITE_PACK_HINT" in t.text and "KERNTUNE_REWRITE_PACK_LANES_HINT" not in t.text
    assert any(n.startswith("load_hint:") for n in got.notes)


def test_a_walk_decided_once_gathers_with_the_hint_and_the_per_load_gather_is_left():
    got = _got(CORPUS / "column_sum_f32.cu")
    for t in [got.template] + got.twins:
        body = _body(t.text)
        # the unswitched walk: both copies hinted (the lane-by-lane copy ignores it), nothing else
        assert body.count("kt_gather_hint<KT_LOAD_HINT, KT_OUTS>(") == 2, t.origin
        assert ", true);" in body and ", false);" in body
        assert "KERNTUNE_REWRITE_PACK_LANES_HINT" in t.text


def test_a_kernel_whose_rewrites_wrote_no_vector_load_says_why():
    got = _got(CORPUS / "silu_and_mul_scalar_fp16.cu")
    assert dict(got.report)["load_hint"] == "no vector load written by a rewrite (kt_load, or kt_gather decided once)"
    assert "LOAD_HINT" not in got.template.space.params


@pytest.mark.nvcc
@pytest.mark.parametrize("path", [DATA / "softmax3.cu", CORPUS / "column_sum_f32.cu",
                                  DATA / "column_weighted_mean_fp16.cu", DATA / "bias_residual_act.cu"],
                         ids=lambda p: p.name)
def test_both_values_compile_and_the_hint_is_in_the_ptx_only_at_1(path, tmp_path):
    got = _got(path)
    for t in [got.template] + got.twins:
        cfg = {**t.space.original_config(), **{n: max(p.values) for n, p in t.space.params.items()
                                                if n in ("VEC", "OUTS")}}
        for hint in (0, 1):
            src = tmp_path / "k.cu"
            src.write_text("\n".join(f"#define KT_{k} {v}" for k, v in {**cfg, "LOAD_HINT": hint}.items())
                           + "\n" + t.text)
            r = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", str(tmp_path / "k.ptx"), str(src)],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-2000:]
            ptx = (tmp_path / "k.ptx").read_text()
            assert ("L1::no_allocate.L2::256B" in ptx) == bool(hint), (t.origin, hint)
