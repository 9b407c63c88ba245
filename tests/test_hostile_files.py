"""apply edits the user's files where they are, as they were (issue #15): a symlink's target is edited and the
link kept, hard links stay linked, the mode is kept, CRLF stays CRLF, and a failure changes nothing."""

import os
import stat

import pytest

from agent_core.apply import apply_to_file
from agent_core.model import KerntuneError
from agent_core.source.files import line_ending, write_files

from test_apply import ROW_SUM, row_sum_real_template


def test_a_symlink_stays_a_link_and_its_target_is_tuned(tmp_path):
    real = tmp_path / "src" / "k.cu"
    real.parent.mkdir()
    real.write_text(ROW_SUM)
    link = tmp_path / "k.cu"
    link.symlink_to(real)
    new = apply_to_file(link, row_sum_real_template(), {"BLOCK": 64}, check_compile=False)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == new and "#define BLOCK 64" in new
    assert sorted(p.name for p in real.parent.iterdir()) == ["k.cu"]  # no staging file left behind


def test_hard_links_mode_and_crlf_are_kept(tmp_path):
    f = tmp_path / "k.cu"
    f.write_bytes(ROW_SUM.replace("\n", "\r\n").encode())
    other = tmp_path / "same.cu"
    os.link(f, other)
    os.chmod(f, 0o640)
    ino = f.stat().st_ino
    new = apply_to_file(f, row_sum_real_template(), {"BLOCK": 64}, check_compile=False)
    data = f.read_bytes()
    assert f.stat().st_ino == ino and other.read_bytes() == data  # the same file, both names
    assert stat.S_IMODE(f.stat().st_mode) == 0o640
    assert b"#define BLOCK 64\r\n" in data and data.count(b"\n") == data.count(b"\r\n")
    assert data.decode().replace("\r\n", "\n") == new


def test_mode_kept_on_a_single_link_and_lf_stays_lf(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text(ROW_SUM)
    os.chmod(f, 0o600)
    apply_to_file(f, row_sum_real_template(), {"BLOCK": 64}, check_compile=False)
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert b"\r\n" not in f.read_bytes()


def test_line_ending_follows_the_majority():
    assert line_ending(b"a\r\nb\r\nc\n") == "\r\n"
    assert line_ending(b"a\nb\nc\r\n") == "\n"
    assert line_ending(b"") == "\n"


def test_nothing_changes_when_one_file_cannot_be_staged(tmp_path):
    a = tmp_path / "a.cu"
    a.write_text("old a\n")
    missing_dir = tmp_path / "gone" / "b.toml"
    with pytest.raises(KerntuneError, match="no file was changed"):
        write_files([(a, "new a\n"), (missing_dir, "new b\n")])
    assert a.read_text() == "old a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.cu"]


def test_a_hostile_configuration_is_never_rendered(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text(ROW_SUM)
    with pytest.raises(KerntuneError, match="is not an integer"):
        apply_to_file(f, row_sum_real_template(), {"BLOCK": "64\nint pwned;"}, check_compile=False)
    assert f.read_text() == ROW_SUM
