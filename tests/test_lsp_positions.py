"""UTF-8 byte <-> LSP position conversions (server/positions.py), with non-ASCII text."""

from lsprotocol import types as lsp

from agent_core.model import Span
from server.positions import UTF8, UTF16, UTF32, LineIndex, span_contains

TEXT = "int a; // µs ü\n/* 😀 */ int b = 256;\r\nlast"


def byte_of(text: str, line: int, needle: str) -> int:
    ln = text.split("\n")[line]
    return len(ln[:ln.index(needle)].encode("utf-8"))


def test_ascii_and_non_ascii_columns():
    idx = LineIndex(TEXT)
    assert idx.line_count == 3
    bcol = byte_of(TEXT, 1, "256")
    assert bcol == len("/* 😀 */ int b = ".encode())
    assert idx.character(1, bcol, UTF16) == len("/* ") + 2 + len(" */ int b = ")  # the emoji is 2 UTF-16 units
    assert idx.character(1, bcol, UTF32) == len("/* 😀 */ int b = ")
    assert idx.character(1, bcol, UTF8) == bcol
    for enc in (UTF8, UTF16, UTF32):
        ch = idx.character(1, bcol, enc)
        assert idx.byte_col(1, ch, enc) == bcol
        assert idx.offset(lsp.Position(line=1, character=ch), enc) == idx.starts[1] + bcol


def test_offsets_round_trip_every_character_boundary():
    idx = LineIndex(TEXT)
    data = TEXT.encode()
    for i in range(len(TEXT) + 1):
        off = len(TEXT[:i].encode())
        pos = idx.offset_position(off, UTF16)
        assert idx.offset(pos, UTF16) == off
    assert idx.offset_position(len(data)).line == 2


def test_clamping_and_past_the_end():
    idx = LineIndex(TEXT)
    assert idx.byte_col(0, 999, UTF16) == len("int a; // µs ü".encode())
    assert idx.offset(lsp.Position(line=50, character=0)) == len(TEXT.encode())
    assert idx.line_bytes(99) == b""
    assert LineIndex("").line_count == 1


def test_range_and_contains():
    idx = LineIndex(TEXT)
    b = byte_of(TEXT, 1, "256")
    sp = Span(idx.starts[1] + b, idx.starts[1] + b + 3, 1, b, 1, b + 3)
    r = idx.range(sp)
    assert (r.start.line, r.end.character - r.start.character) == (1, 3)
    assert span_contains(sp, 1, b) and span_contains(sp, 1, b + 3)
    assert not span_contains(sp, 1, b - 1) and not span_contains(sp, 0, b)
