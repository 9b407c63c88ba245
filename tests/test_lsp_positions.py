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


def test_edited_index_matches_a_fresh_one():
    import random
    rng = random.Random(3)
    text = TEXT * 5
    idx = LineIndex(text)
    for _ in range(300):
        data = idx.data
        start = rng.randrange(len(data) + 1)
        end = min(len(data), start + rng.choice([0, 1, 2, 5, 20]))
        while not _boundary(data, start):
            start -= 1
        while not _boundary(data, end):
            end += 1
        new = rng.choice(["", "x", "\n", "\r\n", "ü\n😀", "a\nb\nc", "\n\n"]).encode()
        idx = idx.edited(start, end, new)
        fresh = LineIndex(idx.text)
        assert idx.data == fresh.data and idx.starts == fresh.starts
        for line in range(idx.line_count):
            n = len(idx.line_bytes(line))
            for b in range(n + 1):
                if _boundary(idx.line_bytes(line), b):
                    seg = idx.line_bytes(line)[:b].decode()
                    want = {UTF8: b, UTF16: len(seg.encode("utf-16-le")) // 2, UTF32: len(seg)}
                    for enc in (UTF8, UTF16, UTF32):
                        assert idx.character(line, b, enc) == fresh.character(line, b, enc) == want[enc]
                        assert idx.byte_col(line, want[enc], enc) == b


def _boundary(data: bytes, i: int) -> bool:
    """Whether byte offset ``i`` is at a character boundary of UTF-8 ``data``."""
    return i >= len(data) or (data[i] & 0xC0) != 0x80


def test_diff_edit_turns_a_whole_text_into_the_one_edit_that_differs():
    import random

    from server.documents import diff_edit
    rnd = random.Random(3)
    alphabet = ["a", "b", "\n", "ü", "€", "😀", " "]
    for _ in range(5000):
        old = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        s = rnd.randint(0, len(old))
        e = rnd.randint(s, len(old))
        new = old[:s] + "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6))) + old[e:]
        ob, nb = old.encode(), new.encode()
        start, old_end, new_end = diff_edit(ob, nb)
        assert ob[:start] + nb[start:new_end] + ob[old_end:] == nb
        ob[start:old_end].decode()  # on character boundaries
        nb[start:new_end].decode()
    big = ("x" * 100_000 + "y" + "z" * 300_000).encode()
    assert diff_edit(big, big.replace(b"y", b"yy")) == (100_001, 100_001, 100_002)
    assert diff_edit(big, big) == (len(big), len(big), len(big))
