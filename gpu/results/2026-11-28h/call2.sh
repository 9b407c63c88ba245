#!/bin/bash
# 2026-11-28h call 2: the GPU tests (worker, dispatch, hardware, LSP on the GPU; NVRTC beside nvcc, a macro-declared
# kernel through NVRTC)
set -o pipefail
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT/gpu_tests && OUT=$OUT/gpu_tests bash gpu/run_gpu_tests.sh
echo "rc $?"
