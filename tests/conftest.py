import os
import shutil

import pytest


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which a plain run does not
        # have: rich fixes a console's width when COLUMNS is set as it is made (agent_core.cli's, made at import),
        # so the tests that set COLUMNS for the CLI's tables would get 80 columns in a worker and theirs elsewhere
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


def pytest_collection_modifyitems(config, items):
    have_nvcc = shutil.which("nvcc") is not None
    try:
        from agent_core.measure.gpu_backend import gpu_available
        have_gpu, why = gpu_available()
    except Exception as e:  # module not importable: no GPU path at all
        have_gpu, why = False, f"gpu backend unavailable: {e}"
    for item in items:
        if "nvcc" in item.keywords and not have_nvcc:
            item.add_marker(pytest.mark.skip(reason="nvcc not on PATH"))
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(pytest.mark.skip(reason=f"no GPU: {why}"))
