"""Entry point of the language server: `kerntune lsp` and `python -m server` call ``run_stdio()``.

Nothing but LSP messages may reach the client's stdout: the protocol gets a private duplicate of fd 1, and
fd 1 itself (what ``print``, C libraries and child processes such as nvcc inherit) is pointed at stderr
before anything else runs.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import BinaryIO


def guard_stdout() -> BinaryIO:
    """Return a binary stream on the real stdout for the protocol; fd 1 and sys.stdout go to stderr."""
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb", buffering=0)


def setup_logging() -> None:
    level = os.environ.get("KERNTUNE_LOG_LEVEL", "info").upper()
    level = {"WARN": "WARNING"}.get(level, level)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("pygls").setLevel(logging.WARNING)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: the objects of startup are frozen out of the collector, and the
    youngest generation is collected less often (a keystroke in a large file allocates many objects; the
    default threshold collects several times per keystroke)."""
    import gc
    gc.collect()
    gc.freeze()
    t = os.environ.get("KERNTUNE_GC_THRESHOLD", "20000,20,20")
    try:
        gc.set_threshold(*(int(x) for x in t.split(",")))
    except (TypeError, ValueError):
        logging.getLogger(__name__).warning("ignoring KERNTUNE_GC_THRESHOLD=%r", t)


def run_stdio() -> None:
    proto_out = guard_stdout()
    setup_logging()
    from .app import create_server

    server = create_server()
    tune_gc()
    server.start_io(sys.stdin.buffer, proto_out)


if __name__ == "__main__":
    run_stdio()
