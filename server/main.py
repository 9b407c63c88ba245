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


TRANSPORT_HELP = """usage: kerntune lsp [--stdio] [--clientProcessId=PID]

Runs the kerntune language server over stdin/stdout (the default; --stdio says so explicitly, as
vscode-languageclient and other clients do). --socket=PORT, --pipe=NAME and --node-ipc are the other transports
LSP clients ask for: kerntune speaks LSP over stdio only, so configure the client for stdio."""


def parse_transport(argv: list[str]) -> tuple[str | None, int | None]:
    """(error, client process id) from the transport flags LSP clients append to the server's command line:
    ``--stdio`` (accepted), ``--clientProcessId=N`` / ``--clientProcessId N`` (accepted; the client's pid),
    ``--socket=PORT``, ``--port=PORT``, ``--pipe=NAME``, ``--node-ipc`` (refused: stdio only). ``error`` is the
    message to print on stderr (exit status 2), or "" for --help; None when the server can start."""
    pid = None
    it = iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if a == "--stdio":
            continue
        if name in ("--clientProcessId", "--client-process-id"):
            if not eq:
                value = next(it, "")
            try:
                pid = int(value)
            except ValueError:
                return f"kerntune lsp: {name} needs a process id, not {value!r}", None
            continue
        if name in ("--socket", "--port", "--pipe", "--node-ipc"):
            return (f"kerntune lsp: {a} asks for the {name[2:]} transport, but kerntune speaks LSP over stdio only: "
                    "configure the client to start the server with stdio (vscode-languageclient: "
                    "TransportKind.stdio, which passes --stdio)"), None
        if a in ("-h", "--help"):
            return "", None
        return f"kerntune lsp: unknown argument {a!r}\n\n{TRANSPORT_HELP}", None
    return None, pid


def run_stdio(argv: list[str] | None = None) -> None:
    """Start the server on stdio. ``argv``: the command-line arguments after the command (default
    ``sys.argv[1:]``), checked by ``parse_transport``."""
    error, _ = parse_transport(sys.argv[1:] if argv is None else list(argv))
    if error is not None:
        sys.stderr.write((error or TRANSPORT_HELP) + "\n")
        raise SystemExit(2 if error else 0)
    proto_out = guard_stdout()
    setup_logging()
    from .app import create_server

    server = create_server()
    tune_gc()
    start_io(server, sys.stdin.buffer, proto_out)


class _PipeReader:
    """stdin read by the event loop itself (asyncio's pipe transport), with the interface pygls's message loop
    reads through. pygls reads stdin in a thread, one executor round trip per header line and per body: a
    request that arrived while the loop was busy then waits for three turns of the loop, each behind the work
    scheduled meanwhile (the analysis after a change). Here a message already received is handled at once."""

    def __init__(self, reader):
        self._reader = reader

    async def readline(self) -> bytes:
        return await self._reader.readline()

    async def readexactly(self, n: int) -> bytes:
        import asyncio
        try:
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError as e:  # EOF: what pygls's reader returns then
            return e.partial


def start_io(server, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """``server.start_io(stdin, stdout)`` with stdin read by the event loop when it is a pipe or a socket (what
    editors give a server they start); pygls's threaded reader otherwise (a file, a terminal)."""
    import asyncio
    import threading

    from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async

    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdin)
            source = _PipeReader(reader)
        except (ValueError, OSError):
            source = StdinAsyncReader(stdin, server.thread_pool)
        await run_async(stop_event=server._stop_event, reader=source, protocol=server.protocol,
                        logger=logging.getLogger("pygls.server"), error_handler=server.report_server_error)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        logging.getLogger(__name__).error("the connection to the client is lost; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


if __name__ == "__main__":
    run_stdio()
