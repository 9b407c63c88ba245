#!/bin/bash
# On the GPU machine, from the repository root: install the carried wheels, run every GPU test (and the
# CPU ones of the GPU backend), keep the log under $OUT.
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -m pytest -q -s -rA -m gpu tests/test_gpu_backend.py tests/test_dispatch_gpu.py tests/test_hardware.py tests/test_lsp_gpu.py 2>&1 | tee ${OUT:-/tmp}/log
rc=$?
python3 -m pytest -q tests/test_gpu_worker_protocol.py 2>&1 | tail -3 | tee -a ${OUT:-/tmp}/log
# the compile paths on this machine's toolkit (NVRTC beside nvcc)
python3 -m pytest -q tests/test_nvrtc.py tests/test_compiler.py 2>&1 | tail -3 | tee -a ${OUT:-/tmp}/log
exit $rc
