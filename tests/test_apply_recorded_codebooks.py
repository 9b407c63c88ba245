"""The NF4 / FP4 codebook bindings as the H200 ran them (2026-11-28h call 1, `gpu/results/2026-11-28h/call1`): each
recorded winner (a per-shape dispatch of the `per_token_group_quant` expert with `KT_EXPERT_CODEBOOK`, the original
kept on the shapes it wins) is written back into its file from the recording and compiles; MXNet's softmax, whose
structural configurations were no faster anywhere, writes nothing (it stopped optimize with an error before)."""

import shutil
from pathlib import Path

import pytest

from agent_core.apply import check_compiles
from tests.dispatch_helpers import applied_from_recording

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "gpu" / "results" / "2026-11-28h" / "call1" / "results.sqlite"

CODEBOOKS = [("bench/corpus/group_quant/quantize_blockwise_nf4_cub_load_store_fp16.cu", "kQuantizeBlockwise"),
             ("tests/data/cu/styles/quant_nf4_warp_blocks_constant_table_low_nibble_bf16.cu", "nf4_quantize_warp_blocks"),
             ("tests/data/cu/styles/quant_fp4_block_smem_tree_divide_f32.cu", "fp4_quantize_blocks")]


def _applied(tmp_path, rel, kernel):
    return applied_from_recording(tmp_path, ROOT / rel, RECORDING, kernel)


@pytest.mark.skipif(not RECORDING.is_file(), reason="the 2026-11-28h recording is not in this checkout")
@pytest.mark.parametrize("rel,kernel", CODEBOOKS, ids=[k for _, k in CODEBOOKS])
def test_a_recorded_codebook_winner_is_applied_and_compiles(tmp_path, rel, kernel):
    f, text, rw = _applied(tmp_path, rel, kernel)
    assert rw.text != text
    assert f"{kernel}__" in rw.text  # the dispatch's tuned kernels launched beside the original
    assert "expert:per_token_group_quant" in rw.text or "per_token_group_quant" in rw.text
    if shutil.which("nvcc"):
        check_compiles(rw.text, f, host=True)


@pytest.mark.skipif(not RECORDING.is_file(), reason="the 2026-11-28h recording is not in this checkout")
def test_the_recorded_mxnet_softmax_keeps_its_original_everywhere(tmp_path):
    f, text, rw = _applied(tmp_path, "bench/corpus/softmax/softmax_stride1_smem_rows_per_block_length_mask_fp16_mxnet.cu",
                           "softmax_stride1_compute_kernel")
    assert rw.text == text
