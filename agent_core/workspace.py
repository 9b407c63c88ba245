"""Where kerntune keeps its files: a `.kerntune/` folder beside the source file."""

from __future__ import annotations

import os
from pathlib import Path

WORKDIR_NAME = ".kerntune"


def workdir_for(source_path: str | Path) -> Path:
    """`<dir of source>/.kerntune` (or $KERNTUNE_WORKDIR when set)."""
    env = os.environ.get("KERNTUNE_WORKDIR")
    if env:
        return Path(env)
    return Path(source_path).resolve().parent / WORKDIR_NAME


def store_path_for(source_path: str | Path) -> Path:
    env = os.environ.get("KERNTUNE_STORE")
    if env:
        return Path(env)
    return workdir_for(source_path) / "results.sqlite"


def cache_dir() -> Path:
    """Compiled-cubin cache shared by all workspaces."""
    env = os.environ.get("KERNTUNE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kerntune" / "cubin"
