"""Open `.cu`/`.cuh` documents: text, line index, and the parsed CudaFile, re-parsed incrementally on edits.

Incremental edits are applied to our own copy of the text (byte offsets from the document's line index,
then ``tree.edit``) so that tree-sitter re-parses only what changed; the engine's ``build_file`` turns the
tree into a ``CudaFile``. Per-kernel analyses (templatize, spec) are cached by the text they depend on.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lsprotocol import types as lsp

from agent_core import cuda_parse
from agent_core.model import CudaFile, Kernel
from pygls.uris import to_fs_path

from .positions import UTF16, LineIndex

log = logging.getLogger(__name__)

CUDA_SUFFIXES = (".cu", ".cuh")


def is_cuda_uri(uri: str) -> bool:
    return uri.split("?", 1)[0].lower().endswith(CUDA_SUFFIXES)


def uri_path(uri: str) -> str:
    return to_fs_path(uri) or uri


@dataclass
class Doc:
    uri: str
    path: str
    version: int
    index: LineIndex
    tree: Any = None  # tree_sitter.Tree
    cf: CudaFile | None = None
    parse_ms: float = 0.0
    cache: dict = field(default_factory=dict)  # per-version derived data (see ``memo``)

    @property
    def text(self) -> str:
        return self.index.text

    def kernel(self, name: str) -> Kernel | None:
        if self.cf is None:
            return None
        return next((k for k in self.cf.kernels if k.name == name), None)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """Compute once per document version."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


def kernel_key(doc: Doc, k: Kernel) -> str:
    """A hash of everything templatize/spec look at for kernel ``k``: the comment above it and its body,
    its launch sites, and the file's ``#define``s."""
    data = doc.index.data
    h = hashlib.blake2b(digest_size=16)
    start = max(0, k.span.start - 4096)  # the spec comment directly above the kernel
    h.update(data[start:k.span.end])
    for s in k.launch_sites:
        h.update(b"\0")
        h.update(data[s.span.start:s.span.end])
        for v in s.host_vars.values():
            h.update(data[v.span.start:v.span.end])
    if doc.cf is not None:
        for d in doc.cf.defines:
            h.update(b"\1")
            h.update(data[d.span.start:d.span.end])
    h.update(doc.path.encode())
    return h.hexdigest()


class Documents:
    """The open CUDA documents, by URI."""

    def __init__(self):
        self.docs: dict[str, Doc] = {}
        self.encoding = UTF16
        # per-kernel analyses shared across versions: kernel_key -> result (bounded)
        self.kernel_cache: dict[tuple[str, str], Any] = {}

    def get(self, uri: str) -> Doc | None:
        return self.docs.get(uri)

    def open(self, uri: str, text: str, version: int) -> Doc:
        doc = Doc(uri=uri, path=str(Path(uri_path(uri)).resolve()) if uri.startswith("file:") else uri,
                  version=version, index=LineIndex(text))
        self._parse(doc, None)
        self.docs[uri] = doc
        return doc

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)

    def change(self, uri: str, changes: list, version: int) -> Doc | None:
        doc = self.docs.get(uri)
        if doc is None:
            return None
        index, tree = doc.index, doc.tree
        for ch in changes:
            rng = getattr(ch, "range", None)
            if rng is None:  # full text
                index, tree = LineIndex(ch.text), None
                continue
            start = index.offset(rng.start, self.encoding)
            end = index.offset(rng.end, self.encoding)
            new_bytes = ch.text.encode("utf-8")
            data = index.data[:start] + new_bytes + index.data[end:]
            new_index = LineIndex(data.decode("utf-8", "replace"), data)
            if tree is not None:
                tree.edit(start_byte=start, old_end_byte=end, new_end_byte=start + len(new_bytes),
                          start_point=_point(index, start), old_end_point=_point(index, end),
                          new_end_point=_point(new_index, start + len(new_bytes)))
            index = new_index
        doc.index, doc.version, doc.cache = index, version, {}
        self._parse(doc, tree)
        return doc

    def replace(self, uri: str, text: str, version: int) -> Doc | None:
        doc = self.docs.get(uri)
        if doc is None:
            return None
        doc.index, doc.version, doc.cache = LineIndex(text), version, {}
        self._parse(doc, None)
        return doc

    def _parse(self, doc: Doc, old_tree) -> None:
        t0 = time.perf_counter()
        try:
            doc.tree = cuda_parse.parse_tree(doc.index.data, old_tree)
            doc.cf = cuda_parse.build_file(doc.tree, doc.text, doc.path)
        except Exception:
            log.exception("parsing %s failed", doc.uri)
            doc.tree, doc.cf = None, None
        doc.parse_ms = (time.perf_counter() - t0) * 1000


def _point(index: LineIndex, offset: int) -> tuple[int, int]:
    from bisect import bisect_right
    line = bisect_right(index.starts, offset) - 1
    return (line, offset - index.starts[line])
