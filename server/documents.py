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


from agent_core.source import cuda_parse
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
    out_of_sync: str = ""  # why the text may differ from the editor's (a refused change); "" when in sync

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


def _context_hash(doc: Doc) -> bytes:
    """A hash of what every kernel's analysis may look at outside the kernel: the file's ``#define``s and its
    file-scope constants (``constexpr int TILE = 32;``)."""
    def compute() -> bytes:
        data = doc.index.data
        h = hashlib.blake2b(digest_size=16)
        if doc.cf is not None:
            for d in doc.cf.defines:
                h.update(b"\1")
                h.update(data[d.span.start:d.span.end])
            for v in cuda_parse.file_scope_constants(doc.cf):
                h.update(b"\2")
                h.update(data[v.span.start:v.span.end])
        h.update(doc.path.encode())
        return h.digest()
    return doc.memo("context_hash", compute)


def _lead_starts(doc: Doc) -> dict[str, int]:
    """Per kernel, where the text its spec lookup depends on starts: the end of the kernel before it (the spec
    is the comment directly above; ``spec.find_spec`` lexes from there), or 4 KiB above the kernel when a
    syntax error comes first."""
    def compute() -> dict[str, int]:
        out: dict[str, int] = {}
        if doc.cf is None:
            return out
        first_error = min((e.span.start for e in doc.cf.errors), default=None)
        prev_end = 0
        for k in sorted(doc.cf.kernels, key=lambda k: k.span.start):
            if first_error is not None and first_error < k.span.start:
                out[k.name] = max(0, k.span.start - 4096)
            else:
                out[k.name] = min(prev_end, k.span.start)
            prev_end = max(prev_end, k.span.end)
        return out
    return doc.memo("lead_starts", compute)


def lead_start(doc: Doc, k: Kernel) -> int:
    """The byte offset where the text kernel ``k``'s spec lookup depends on starts (see ``_lead_starts``)."""
    return min(_lead_starts(doc).get(k.name, 0), k.span.start)


def kernel_key(doc: Doc, k: Kernel) -> str:
    """A hash of everything templatize/spec look at for kernel ``k``: the text from the end of the previous
    kernel (the spec comment directly above) to the end of this one, its launch sites with the host
    variables they use, and the file's ``#define``s and constants."""
    data = doc.index.data
    h = hashlib.blake2b(digest_size=16)
    h.update(data[lead_start(doc, k):k.span.end])
    for s in k.launch_sites:
        h.update(b"\0")
        h.update(data[s.span.start:s.span.end])
        for v in s.host_vars.values():
            h.update(data[v.span.start:v.span.end])
    for s in k.macro_launch_sites:  # a launch inside a macro: the use and what it expands to
        h.update(b"\1")
        h.update(data[s.span.start:s.span.end])
        h.update((s.expansion or "").encode("utf-8"))
    h.update(_context_hash(doc))
    return h.hexdigest()


class Documents:
    """The open CUDA documents, by URI."""

    def __init__(self):
        self.docs: dict[str, Doc] = {}
        self.encoding = UTF16
        # per-kernel analyses shared across versions: kernel_key -> result (bounded)
        self.kernel_cache: dict[tuple[str, str], Any] = {}
        # per document: kernel -> (facts, key, the diagnostics that depend on them only)
        self.diag_cache: dict[str, dict[str, tuple]] = {}
        self.diag_json_memo: dict[str, dict[tuple, str]] = {}  # per document: the result hints' JSON
        self.diag_templates: dict[str, dict[str, tuple]] = {}  # per document: kernel -> JSON template

    def get(self, uri: str) -> Doc | None:
        """The open document, or None (also while it is out of sync: nothing is computed on a guessed text)."""
        doc = self.docs.get(uri)
        return None if doc is None or doc.out_of_sync else doc

    def raw(self, uri: str) -> Doc | None:
        """The open document, in sync or not."""
        return self.docs.get(uri)

    def open(self, uri: str, text: str, version: int) -> Doc:
        doc = Doc(uri=uri, path=str(Path(uri_path(uri)).resolve()) if uri.startswith("file:") else uri,
                  version=version, index=LineIndex(text))
        self._parse(doc, None)
        self.docs[uri] = doc
        return doc

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)
        for key in [key for key in self.kernel_cache if key[0] == uri]:
            del self.kernel_cache[key]
        self.diag_cache.pop(uri, None)
        self.diag_json_memo.pop(uri, None)
        self.diag_templates.pop(uri, None)

    def change(self, uri: str, changes: list, version: int) -> Doc | None:
        """Apply a batch of changes, all or nothing: ValueError (the document unchanged) when one of them
        cannot be applied to the text as it is at that point of the batch (a reversed range, a line past the
        end, no text). An out-of-sync document takes only a batch with a whole text in it (from there on)."""
        doc = self.docs.get(uri)
        if doc is None:
            return None
        if doc.out_of_sync:
            full = [i for i, ch in enumerate(changes) if getattr(ch, "range", None) is None]
            if not full:
                return doc  # still out of sync: these edits are relative to a text we do not have
            changes = changes[full[-1]:]
        index = doc.index
        steps: list = []  # (index before, start, end, new bytes, index after)
        for i, ch in enumerate(changes):
            text = getattr(ch, "text", None)
            if not isinstance(text, str):
                raise ValueError(f"change {i + 1} of {len(changes)} has no text")
            rng = getattr(ch, "range", None)
            if rng is None:  # the whole text: turned into the one edit that differs, re-parsed incrementally
                data = text.encode("utf-8")
                start, end, new_end = diff_edit(index.data, data)
                new_bytes = data[start:new_end]
            else:
                s, e = rng.start, rng.end
                n = index.line_count
                for p in (s, e):
                    if p.line > n or (p.line == n and p.character > 0) or p.line < 0 or p.character < 0:
                        raise ValueError(f"change {i + 1} of {len(changes)}: position {p.line}:{p.character} is "
                                         f"past the end of the document ({n} lines)")
                if (e.line, e.character) < (s.line, s.character):
                    raise ValueError(f"change {i + 1} of {len(changes)}: its range ends ({e.line}:{e.character}) "
                                     f"before it starts ({s.line}:{s.character})")
                start = index.offset(s, self.encoding)
                end = index.offset(e, self.encoding)
                new_bytes = text.encode("utf-8")
            new_index = index.edited(start, end, new_bytes)
            steps.append((index, start, end, new_bytes, new_index))
            index = new_index
        tree = doc.tree  # every change is valid: now the tree follows them
        for before, start, end, new_bytes, after in steps:
            if tree is not None:
                tree.edit(start_byte=start, old_end_byte=end, new_end_byte=start + len(new_bytes),
                          start_point=_point(before, start), old_end_point=_point(before, end),
                          new_end_point=_point(after, start + len(new_bytes)))
        doc.index, doc.version, doc.cache, doc.out_of_sync = index, version, {}, ""
        self._parse(doc, tree, doc.cf)
        return doc

    def desync(self, uri: str, why: str) -> Doc | None:
        """Mark ``uri`` out of sync (a change was refused): its text is re-read from disk, where there is one,
        and it is served to nobody (``get``) until the client sends the whole text again."""
        doc = self.docs.get(uri)
        if doc is None:
            return None
        doc.out_of_sync = why or "a change could not be applied"
        self._load_from_disk(doc)
        return doc

    def reload(self, uri: str) -> Doc | None:
        """Re-read ``uri`` from disk (after a save, the editor's text is the file's) and mark it in sync."""
        doc = self.docs.get(uri)
        if doc is None:
            return None
        if self._load_from_disk(doc):
            doc.out_of_sync = ""
        return doc

    def _load_from_disk(self, doc: Doc) -> bool:
        try:
            text = Path(doc.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ValueError) as e:
            log.warning("cannot re-read %s from disk: %s", doc.path, e)
            return False
        doc.index, doc.cache = LineIndex(text), {}
        self._parse(doc, None, None)
        return True

    def replace(self, uri: str, text: str, version: int) -> Doc | None:
        doc = self.docs.get(uri)
        if doc is None:
            return None
        doc.index, doc.version, doc.cache, doc.out_of_sync = LineIndex(text), version, {}, ""
        self._parse(doc, None, doc.cf)
        return doc

    def _parse(self, doc: Doc, old_tree, previous: CudaFile | None = None) -> None:
        """Re-parse (incrementally from ``old_tree``, edited) and rebuild the CudaFile, reusing the facts of
        ``previous`` for the parts of the file that did not change."""
        t0 = time.perf_counter()
        try:
            doc.tree = cuda_parse.parse_tree(doc.index.data, old_tree)
            doc.cf = cuda_parse.build_file(doc.tree, doc.text, doc.path, previous)
        except Exception:
            log.exception("parsing %s failed", doc.uri)
            doc.tree, doc.cf = None, None
        doc.parse_ms = (time.perf_counter() - t0) * 1000


def diff_edit(old: bytes, new: bytes) -> tuple[int, int, int]:
    """(start, old_end, new_end): the one edit that turns ``old`` into ``new`` (bytes [start, old_end) of ``old``
    replaced by bytes [start, new_end) of ``new``), from their common prefix and suffix, on UTF-8 character
    boundaries. Clients that send the whole document on every change (the protocol allows it) then cost what an
    incremental change costs: tree-sitter re-parses the edited region, the per-kernel caches keep the rest."""
    n = min(len(old), len(new))
    pre = _common_run(old, new, n, False)
    suf = _common_run(old, new, n - pre, True)
    while pre > 0 and pre < len(old) and (old[pre] & 0xC0) == 0x80:  # not inside a multi-byte character
        pre -= 1
    while suf > 0 and (old[len(old) - suf] & 0xC0) == 0x80:
        suf -= 1
    return pre, len(old) - suf, len(new) - suf


def _common_run(a: bytes, b: bytes, limit: int, from_end: bool) -> int:
    """How many bytes ``a`` and ``b`` have in common at their start (or end), at most ``limit``: blocks compared
    with memcmp, then halved where they differ."""
    la, lb = len(a), len(b)

    def same(lo: int, hi: int) -> bool:
        if from_end:
            return a[la - hi:la - lo] == b[lb - hi:lb - lo]
        return a[lo:hi] == b[lo:hi]

    lo, step = 0, 1 << 14
    while lo < limit:
        hi = min(limit, lo + step)
        if same(lo, hi):
            lo = hi
            step = min(step * 2, 1 << 20)
            continue
        while hi - lo > 1:  # same(lo', lo) holds, same(lo, hi) does not
            mid = (lo + hi) // 2
            if same(lo, mid):
                lo = mid
            else:
                hi = mid
        return lo
    return limit


def _point(index: LineIndex, offset: int) -> tuple[int, int]:
    from bisect import bisect_right
    line = bisect_right(index.starts, offset) - 1
    return (line, offset - index.starts[line])
