"""Where a GPU worker's start goes (issue #13: kerntune's per-run fixed cost beside Kernel Tuner's in-process NVRTC).

On the GPU machine, from the repository root (wheels installed, PYTHONPATH set), after one worker has compiled the
helper kernels into the compile cache:

    python gpu/experiments/worker_start.py > $OUT/worker_start.txt

Prints, each three times: a bare `python -c pass`; `python -c "import agent_core.measure.gpu_worker"` (the worker's
imports); pycuda's cuInit + context creation + the helper module load in a fresh process; and the whole
`WorkerProcess(GpuWorker)` start as `tune` pays it (spawn, imports, CUDA context, helpers, the flush buffer), from a
`-c` main module (nothing for the child to import again) and from a script file whose top level imports the CLI
(the child imports it again, as with `python -m agent_core.cli`).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time

CUDA_PART = r"""
import time
t0 = time.perf_counter()
import pycuda.driver as cuda
t1 = time.perf_counter()
cuda.init(); dev = cuda.Device(0); ctx = dev.make_context()
t2 = time.perf_counter()
from agent_core.measure.gpu_worker import helper_cubin
from agent_core.measure.hardware import device_info_from_pycuda
m = cuda.module_from_file(str(helper_cubin(device_info_from_pycuda(dev).arch)))
buf = cuda.mem_alloc(256 << 20)
t3 = time.perf_counter()
print(f"import pycuda {t1 - t0:.3f} s, cuInit + context {t2 - t1:.3f} s, helpers + flush buffer {t3 - t2:.3f} s")
ctx.pop()
"""

WORKER = r"""
import time, sys
from agent_core.measure.gpu_backend import WorkerProcess
from agent_core.measure.gpu_worker import GpuWorker
t0 = time.perf_counter()
w = WorkerProcess(GpuWorker, (0,))
t1 = time.perf_counter()
w.stop()
print(f"WorkerProcess(GpuWorker) ready in {t1 - t0:.3f} s")
"""


def timed(label: str, code: str, main_imports: str = "") -> None:
    """``code`` run three times in a fresh interpreter: by ``-c``, or (``main_imports``) as the ``__main__`` guarded
    body of a script file whose top level is ``main_imports``, which a spawned child imports again (its
    ``__mp_main__`` module), as it does for ``python -m agent_core.cli``."""
    path = None
    if main_imports:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(main_imports + "\nif __name__ == '__main__':\n"
                    + "".join("    " + line + "\n" for line in code.splitlines()))
            path = f.name
    for _ in range(3):
        t0 = time.perf_counter()
        cmd = [sys.executable, path] if path else [sys.executable, "-c", code]
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        out = (r.stdout.strip() or r.stderr.strip()[-300:]).replace("\n", " | ")
        print(f"{label:<42} {wall:6.3f} s wall  {out}", flush=True)


if __name__ == "__main__":
    timed("python -c pass", "pass")
    timed("import agent_core.measure.gpu_worker", "import agent_core.measure.gpu_worker")
    timed("pycuda: import, cuInit + context, helpers", CUDA_PART)
    timed("WorkerProcess start (-c main module)", WORKER)
    timed("WorkerProcess start (main imports the CLI)", WORKER, main_imports="import agent_core.cli")
