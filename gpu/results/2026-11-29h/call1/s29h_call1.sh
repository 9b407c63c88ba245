#!/bin/bash
# 2026-11-29 (eighth session) call 1: held-out batch 29 on first sight; OrinMLLM's SwiGLU with the fast-intrinsic
# SiLU binding; Kernel Tuner side by side on row_sum (worker cold and warm) with every compile tallied
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B29=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 29," in x["style"]))
PY
)
echo $B29 | wc -w
FRESH=1 WORK=/tmp/kt-b29 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 330 --budget 20 --rounds 2 --time-budget 40 $B29 bench/corpus/gated_act/swiglu_two_tensors_in1_gate_in2_up_flat_8_halves_per_thread_float4_reinterpret_half2_f32_math_expf_fdividef_scalar_tail_256_threads_fp16_orinmllm.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b29
grep -A16 "## Per kernel" $OUT/b29/bench_results.md
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels-extra/*.whl || exit 1
mkdir -p $OUT/ktc
PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache2 COLUMNS=160 timeout 150 python3 bench/kernel_tuner_compare.py --kernel examples/row_sum.cu:row_sum --kt-strategies brute_force --kerntune-strategies exhaustive --worker both --json $OUT/ktc/ktc.json > $OUT/ktc/ktc.log 2>&1
grep -B2 -A12 "^kerntune exhaustive:" $OUT/ktc/ktc.log | head -30
echo done
