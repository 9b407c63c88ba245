import shutil

import pytest


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
