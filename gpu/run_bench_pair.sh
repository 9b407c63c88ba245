#!/bin/bash
# On a two-GPU machine (nvidia-h200-x2), from the repository root: two single-GPU `kerntune bench` runs side by side,
# one a GPU, each over the kernel files listed in its own list file (one path a line), each from scratch with its own
# scratch folder, wheels folder and compile cache (gpu/run_bench.sh), logs and results back under $OUT/g0 and $OUT/g1.
# Simpler than the Dask runner (no cluster, nothing shared) where the kernels can be split by hand.
#   usage: bash gpu/run_bench_pair.sh SECONDS LIST0 LIST1 [kerntune bench options...]
#   carry .gpu/benchw (GPU_SETUP: default .gpu/benchw/gpu-setup.sh) and the folder of the two lists
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; lim=$1; lists=("$2" "$3"); shift 3
for g in 0 1; do
  (CUDA_VISIBLE_DEVICES=$g OUT=$OUT/g$g WORK=/tmp/kt-bench-$g SITE=/tmp/site-$g KERNTUNE_CACHE=/tmp/ktcache-$g \
     GPU_SETUP=${GPU_SETUP:-.gpu/benchw/gpu-setup.sh} FRESH=1 \
     bash gpu/run_bench.sh "$lim" $(cat "${lists[$g]}") "$@" > "$OUT/g$g.log" 2>&1; echo "rc $?" >> "$OUT/g$g.log") &
done
wait
# bench.log repeats g*.log; the plot is not needed (the device call brings back a few files only)
rm -f "$OUT"/g*/bench/bench_plot.png "$OUT"/g*/bench/bench.log
for g in 0 1; do grep -E "geomean speedup|^rc " "$OUT/g$g.log"; done
