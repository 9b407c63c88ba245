"""The CUDA reader under mutated sources (issue #15): whatever the file holds, reading it, finding specs and
templatizing answer within a time bound, with a result or a KerntuneError, never another exception."""

import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from agent_core.model import KerntuneError
from agent_core.source import spec as S
from agent_core.source.cuda_parse import parse_cuda
from agent_core.templating.templatize import templatize

ROOT = Path(__file__).resolve().parent.parent
SEEDS = [(ROOT / p).read_text(encoding="utf-8") for p in
         ("examples/row_sum.cu", "examples/scale_rows.cu", "tests/node/fixtures/kernels.cu",
          "tests/data/cu/warp_reduce.cu")]
PIECES = ["{", "}", "(", ")", "/*", "*/", "//", '"', "'", "\\\n", "#define BLOCK BLOCK\n", "#pragma unroll 4\n",
          "__global__ ", "<<<", ">>>", "template <int N>", "kerntune:", "sizes = [", "µ😀", "\x00", "\r\n",
          "namespace a {", "__launch_bounds__(", "extern \"C\" "]


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 40)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)))
        text = text[:i] + piece + text[i:] if op == "insert" else text[:i] + text[j:] if op == "delete" \
            else text[:i] + piece + text[j:]
    return text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_sources_are_read_or_refused(text):
    t0 = time.perf_counter()
    cf = parse_cuda(text, "/tmp/fuzz/k.cu")
    for k in cf.kernels:
        try:
            spec = S.find_spec(cf, k.name)
            t = templatize(cf, k.name)
            if spec is not None:
                S.validate_spec(spec, k, set(t.space.params), t.space.original_config())
        except KerntuneError:
            pass
    assert time.perf_counter() - t0 < 5.0
