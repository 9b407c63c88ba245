"""Writing the user's files back: where they are, as they were.

kerntune reads a source file as text with ``\\n`` line ends (``read_source``) and writes it back with
``write_files``, which keeps what the file is on disk: a symlink's target is edited (the link stays a
link), hard links stay linked, the mode stays, and a file whose lines end in CRLF keeps CRLF. Several files
are written together: every new content is staged beside its target first (so a full disk or a missing
permission fails before any file changes), then each target is replaced.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from agent_core.model import KerntuneError


def line_ending(data: bytes) -> str:
    """``"\\r\\n"`` when most of the file's lines end in CRLF, else ``"\\n"``."""
    crlf = data.count(b"\r\n")
    return "\r\n" if crlf and crlf * 2 > data.count(b"\n") else "\n"


def _encode(text: str, target: Path) -> bytes:
    """``text`` (``\\n`` line ends) in the line ends of the file now at ``target``."""
    try:
        old = target.read_bytes()
    except OSError:
        old = b""
    if line_ending(old) == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return text.encode("utf-8")


def write_files(writes: list[tuple[str | Path, str]]) -> None:
    """Write each (path, text): all staged first, then each put in place (see the module docstring).
    KerntuneError, with no file changed, when a file cannot be staged."""
    staged: list[tuple[Path, bytes, str, os.stat_result | None]] = []
    try:
        for path, text in writes:
            target = Path(os.path.realpath(path))  # a symlink: edit the file it points to
            st = target.stat() if target.exists() else None
            data = _encode(text, target)
            # (the name cut: a long file name plus the prefix, random part and suffix must stay within NAME_MAX)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".kerntune-tmp", dir=target.parent)
            staged.append((target, data, tmp, st))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if st is not None:
                os.chmod(tmp, stat.S_IMODE(st.st_mode))
    except OSError as e:
        for _, _, tmp, _ in staged:
            _unlink(tmp)
        raise KerntuneError(f"cannot write {e.filename or path}: {e.strerror or e}; no file was changed",
                            str(path)) from None
    for target, data, tmp, st in staged:
        try:
            if st is not None and st.st_nlink > 1:
                _overwrite(target, data)  # renaming over it would cut the other links
                _unlink(tmp)
            else:
                if st is not None and hasattr(os, "chown"):
                    try:
                        os.chown(tmp, st.st_uid, st.st_gid)
                    except OSError:
                        pass
                os.replace(tmp, target)
        except OSError as e:
            for _, _, t, _ in staged:
                _unlink(t)
            raise KerntuneError(f"cannot write {target}: {e.strerror or e}", str(target)) from None


def _overwrite(target: Path, data: bytes) -> None:
    """Rewrite ``target``'s content through its own inode; its old content comes back if the write fails."""
    old = target.read_bytes()
    with open(target, "r+b") as f:
        try:
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        except OSError:
            f.seek(0)
            f.write(old)
            f.truncate()
            raise


def _unlink(p: str) -> None:
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass
