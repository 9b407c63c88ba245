"""UTF-8 byte offsets (tree-sitter, the engine's Spans) <-> LSP positions (UTF-16 by default).

The negotiated position encoding ("utf-16", "utf-8" or "utf-32") is given to each call. Lines are split on
"\\n" (a "\\r\\n" ending leaves "\\r" at the end of the line, which no column ever points past).
"""

from __future__ import annotations

import re
from bisect import bisect_right

from lsprotocol import types as lsp

from agent_core.model import Span

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def line_starts(data: bytes) -> list[int]:
    """Byte offset of the start of every line (the first is 0)."""
    starts = [0]
    find = data.find
    i = find(b"\n")
    while i >= 0:
        starts.append(i + 1)
        i = find(b"\n", i + 1)
    return starts


def _units(s: str, encoding: str) -> int:
    if encoding == UTF16:
        return len(s.encode("utf-16-le")) // 2
    if encoding == UTF32:
        return len(s)
    return len(s.encode("utf-8"))


_NON_ASCII = re.compile(rb"[\x80-\xff]+")


class LineIndex:
    """One version of a document's text, for position conversions."""

    def __init__(self, text: str, data: bytes | None = None, starts: list[int] | None = None):
        self.text = text
        self.data = text.encode("utf-8") if data is None else data
        self.starts = line_starts(self.data) if starts is None else starts
        self._wide: set[int] | None = None  # lines with non-ASCII characters (computed when first needed)

    def edited(self, start: int, end: int, new: bytes) -> "LineIndex":
        """The index of the text with bytes [start, end) replaced by ``new`` (line starts updated, not
        recomputed: a keystroke in a 10,000-line file costs what the lines after it cost to shift)."""
        data = self.data[:start] + new + self.data[end:]
        first = bisect_right(self.starts, start)  # lines starting after ``start`` are redone
        last = bisect_right(self.starts, end)  # those starting at or before ``end`` were in the edit
        delta = len(new) - (end - start)
        starts = self.starts[:first]
        i = new.find(b"\n")
        while i >= 0:
            starts.append(start + i + 1)
            i = new.find(b"\n", i + 1)
        starts.extend(s + delta for s in self.starts[last:])
        out = LineIndex(data.decode("utf-8", "replace"), data, starts)
        if self._wide is not None:  # lines with non-ASCII: those before the edit, those after it (moved), and
            first_line = first - 1  # the edited lines looked at again
            dl = (len(starts) - len(self.starts))
            new_last = bisect_right(starts, start + len(new)) - 1
            wide = {ln for ln in self._wide if ln < first_line}
            wide.update(ln + dl for ln in self._wide if ln > last - 1)
            for ln in range(first_line, new_last + 1):
                if not out.line_bytes(ln).isascii():
                    wide.add(ln)
            out._wide = wide
        return out

    def _ascii_line(self, line: int) -> bool:
        if self._wide is None:
            starts = self.starts
            wide: set[int] = set()
            for m in _NON_ASCII.finditer(self.data):
                a, b = bisect_right(starts, m.start()) - 1, bisect_right(starts, m.end() - 1) - 1
                wide.update(range(a, b + 1))
            self._wide = wide
        return line not in self._wide

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_bytes(self, line: int) -> bytes:
        if line < 0:
            return b""
        if line >= len(self.starts):
            return b""
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.data)
        return self.data[self.starts[line]:end]

    # ---------------------------------------------------------------- bytes -> LSP
    def character(self, line: int, byte_col: int, encoding: str = UTF16) -> int:
        """The LSP character of byte column ``byte_col`` on ``line``."""
        if encoding == UTF8:
            return byte_col
        if 0 <= line < len(self.starts) and self._ascii_line(line):
            end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.data)
            return max(0, min(byte_col, end - self.starts[line]))
        seg = self.line_bytes(line)[:byte_col]
        if seg.isascii():
            return len(seg)
        return _units(seg.decode("utf-8", "replace"), encoding)

    def position(self, line: int, byte_col: int, encoding: str = UTF16) -> lsp.Position:
        return lsp.Position(line=line, character=self.character(line, byte_col, encoding))

    def offset_position(self, offset: int, encoding: str = UTF16) -> lsp.Position:
        offset = max(0, min(offset, len(self.data)))
        line = bisect_right(self.starts, offset) - 1
        return self.position(line, offset - self.starts[line], encoding)

    def range(self, span: Span, encoding: str = UTF16) -> lsp.Range:
        return lsp.Range(start=self.position(span.line, span.col, encoding),
                         end=self.position(span.end_line, span.end_col, encoding))

    def offsets_range(self, start: int, end: int, encoding: str = UTF16) -> lsp.Range:
        return lsp.Range(start=self.offset_position(start, encoding), end=self.offset_position(end, encoding))

    # ---------------------------------------------------------------- LSP -> bytes
    def byte_col(self, line: int, character: int, encoding: str = UTF16) -> int:
        """The byte column of LSP ``character`` on ``line`` (clamped to the line's end)."""
        raw = self.line_bytes(line)
        if encoding == UTF8 or raw.isascii():
            return max(0, min(character, len(raw)))
        s = raw.decode("utf-8", "replace")
        units = 0
        for i, ch in enumerate(s):
            if units >= character:
                return len(s[:i].encode("utf-8"))
            units += (2 if ord(ch) > 0xFFFF else 1) if encoding == UTF16 else 1
        return len(raw)

    def offset(self, pos: lsp.Position, encoding: str = UTF16) -> int:
        """Byte offset of an LSP position (a line past the end maps to the end of the text)."""
        if pos.line >= len(self.starts):
            return len(self.data)
        return self.starts[pos.line] + self.byte_col(pos.line, pos.character, encoding)


def span_contains(span: Span, line: int, byte_col: int) -> bool:
    """Whether (line, byte column) lies inside ``span`` (end inclusive, so a cursor just after a word counts)."""
    if line < span.line or line > span.end_line:
        return False
    if line == span.line and byte_col < span.col:
        return False
    if line == span.end_line and byte_col > span.end_col:
        return False
    return True
