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


def run_stdio() -> None:
    proto_out = guard_stdout()
    setup_logging()
    from .app import create_server

    create_server().start_io(sys.stdin.buffer, proto_out)


if __name__ == "__main__":
    run_stdio()
