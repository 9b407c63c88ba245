#!/bin/bash
# On the GPU machine, from the repository root: kerntune and Kernel Tuner side by side on one or more kernels
# (bench/kernel_tuner_compare.py): a table per kernel (with one line per kerntune run saying where its time went),
# then kerntune's exhaustive rate over Kernel Tuner's brute force per kernel and over all of them; the log and the
# JSON (every run, kerntune's timelines included) under $OUT/kt_compare.
# Kernel Tuner and the dependencies the GPU machine lacks come as wheels in .gpu/wheels-extra, the rest in
# .gpu/wheels (carry .gpu/wheels, .gpu/wheels-extra and .gpu/gpu-setup.sh).
#   usage: [SITE=DIR] bash gpu/run_kernel_tuner_compare.sh [bench/kernel_tuner_compare.py options...]   (SITE: the
#   wheels' folder, default /tmp/site)
#   e.g.   bash gpu/run_kernel_tuner_compare.sh                      (row_sum, budget 20, KT brute force + 3 strategies)
#          bash gpu/run_kernel_tuner_compare.sh --kernel examples/row_sum.cu:row_sum \
#               --kernel examples/scale_rows.cu:scale_rows         (both kernels, 30 and 160 configurations, in one
#                                                                   call: --kernel repeats; about 2-5 min on an H100)
#          bash gpu/run_kernel_tuner_compare.sh --kernel examples/silu.cu:silu --budget 50 \
#               --kt-strategies random_sample genetic_algorithm bayes_opt --kerntune-strategies auto random
set -o pipefail
source .gpu/gpu-setup.sh ${SITE:-/tmp/site} >/dev/null || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target ${SITE:-/tmp/site} \
    .gpu/wheels-extra/*.whl || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/kt_compare"
# the files' name: the options, "--kernel DIR/FILE.cu:KERNEL" shortened to KERNEL
name=$(echo "${*:-row_sum}" | sed -e 's/--kernel //g' -e 's#[^ ]*/##g' -e 's/[^ ]*\.cu[^ ]*:\([A-Za-z0-9_]*\)/\1/g' \
    | tr -c 'A-Za-z0-9_.-' '_' | sed 's/^[-_]*//' | cut -c1-60)
python3 bench/kernel_tuner_compare.py "$@" --json "$OUT/kt_compare/$name.json" 2>&1 | tee "$OUT/kt_compare/$name.log"
