"""Independent nvcc runs of one test, side by side: each compile is its own process, so a thread per compile keeps
every core busy (CI has two). Results come back in the order given and the first exception (a failed assertion
inside ``fn``) is raised as it would have been in a loop, after the others have finished."""

import os
from concurrent.futures import ThreadPoolExecutor


def each(fn, items) -> list:
    """``[fn(x) for x in items]``, run on a thread per CPU."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(len(items), os.cpu_count() or 1))) as ex:
        futures = [ex.submit(fn, x) for x in items]
    return [f.result() for f in futures]
