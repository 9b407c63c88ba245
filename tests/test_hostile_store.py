"""Stores from elsewhere (issue #15): a results store is read, never trusted. A hostile value in a stored result
is reported plainly and never written into the user's file; a read-only store is read; a damaged store or a
malformed row is a plain error, not a traceback."""

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_core.cli import main
from agent_core.model import KerntuneError, sha256_text
from agent_core.search.tuner import prepare, result_summary
from agent_core.store import Store

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def work(tmp_path, monkeypatch):
    shutil.copy(ROOT / "examples" / "row_sum.cu", tmp_path / "row_sum.cu")
    monkeypatch.chdir(tmp_path)
    for v in ("KERNTUNE_STORE", "KERNTUNE_BACKEND", "KERNTUNE_WORKDIR"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("KERNTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _record(work: Path, best_params, **summary) -> Path:
    """A store beside row_sum.cu whose one finished session claims ``best_params`` won."""
    f = work / "row_sum.cu"
    text = f.read_text()
    prep = prepare(str(f), "row_sum", text)
    sp = work / ".kerntune" / "results.sqlite"
    with Store(sp) as st:
        sid = st.start_session(str(f.resolve()), "row_sum", sha256_text(text), prep.template.template_hash,
                               prep.spec.spec_hash, "H100", "tpe", 10, 1, "structural")
        st.finish_session(sid, "finished", {"best_params": best_params, "speedup": 1.5, "origin": "structural",
                                            "template_hash": prep.template.template_hash,
                                            "original_hash": sha256_text(text), "device": "H100",
                                            "original_params": prep.template.space.original_config(), **summary})
    return sp


def _apply(*extra):
    return CliRunner().invoke(main, ["apply", "row_sum.cu", "-k", "row_sum", "--backend", "none", *extra])


@pytest.mark.parametrize("bad,fragment", [
    ({"BLOCK": "256\n#include </etc/passwd>\nint pwned;"}, "is not an integer"),
    ({"BLOCK": -256}, "not in the parameter's domain"),
    ({"BLOCK": 10 ** 20}, "out of range"),
    ({"BLOCK": True}, "is not an integer"),
    ({"BLOCK); system(\"x\"); //": 256}, "not an identifier"),
    ({"BLOCK": 96, "EXTRA": 1}, "are not the template's"),
    ("BLOCK=256", "not a table"),
])
def test_a_hostile_stored_value_is_reported_and_never_written(work, bad, fragment):
    before = (work / "row_sum.cu").read_bytes()
    _record(work, {"UNROLL": 4, **bad} if isinstance(bad, dict) else bad)
    r = _apply()
    assert r.exit_code == 2, r.output
    assert fragment in r.output and "Traceback" not in r.output
    assert (work / "row_sum.cu").read_bytes() == before


def test_a_stored_value_in_the_domain_is_applied(work):
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    p = prep.template.space.params["BLOCK"]
    other = next(v for v in p.values if v != p.original)
    _record(work, {**prep.template.space.original_config(), "BLOCK": other})
    r = _apply("--dry-run")
    assert r.exit_code == 0, r.output
    assert str(other) in r.output


def test_results_read_a_read_only_store(work):
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    sp = _record(work, prep.template.space.original_config())
    with Store(sp, readonly=True) as st:
        assert st.readonly and st.latest_session(str((work / "row_sum.cu").resolve()), "row_sum")
        with pytest.raises(KerntuneError, match="read-only"):
            st.put_step(None, "note", "x")
    os.chmod(sp, 0o444)
    os.chmod(sp.parent, 0o555)
    try:
        r = CliRunner().invoke(main, ["results", "row_sum.cu", "-k", "row_sum"])
        # the store was read (the summary written above is not a whole one, and is said to be malformed)
        assert r.exit_code == 2 and "summary of session 1 is malformed" in r.output, r.output
        if os.geteuid() != 0:  # root writes anyway: the detection only matters for others
            assert Store(sp).readonly
    finally:
        os.chmod(sp.parent, 0o755)
        os.chmod(sp, 0o644)


def test_a_malformed_row_is_a_plain_error(work):
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    sp = _record(work, prep.template.space.original_config())
    db = sqlite3.connect(sp)
    db.execute("UPDATE sessions SET summary_json = '{\"best_params\": {\"BLOCK\": 1e400'")
    db.commit()
    db.close()
    r = CliRunner().invoke(main, ["results", "row_sum.cu", "-k", "row_sum"])
    assert r.exit_code == 2 and "session 1" in r.output and "not valid JSON" in r.output, r.output
    assert "Traceback" not in r.output


def test_malformed_evaluation_rows_name_the_row(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        from agent_core.model import Evaluation, Status
        st.put_evaluation(None, "th", "sh", "H100", Evaluation(params={"BLOCK": 64}, status=Status.OK))
        st._db.execute("UPDATE evaluations SET status = 'exploded'")
        with pytest.raises(KerntuneError, match="evaluation 1 is malformed"):
            st.evaluations()
        st._db.execute("UPDATE evaluations SET status = 'ok', params_json = '{\"BLOCK\": \"64; evil()\"}'")
        with pytest.raises(KerntuneError, match="BLOCK = '64; evil\\(\\)' is not an integer"):
            st.get_evaluation("th", "sh", "H100", {"BLOCK": 64}) or st.evaluations()


def test_a_damaged_store_is_a_plain_error(work):
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    sp = _record(work, prep.template.space.original_config())
    with Store(sp) as st:  # checkpoint the WAL into the file, so that damaging the file damages the data
        st._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(sp.read_bytes())
    for off in range(4096, len(data), 97):  # every page after the first: garbage
        data[off:off + 40] = b"\xde\xad\xbe\xef" * 10
    sp.write_bytes(bytes(data))
    r = CliRunner().invoke(main, ["results", "row_sum.cu", "-k", "row_sum"])
    assert r.exit_code == 2, r.output
    assert "damaged" in r.output and "Traceback" not in r.output
    sp.write_bytes(b"this is not a database at all" * 100)
    r = CliRunner().invoke(main, ["results", "row_sum.cu", "-k", "row_sum"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output


def test_an_unusable_cache_directory_is_a_clean_error(work, tmp_path):
    from agent_core.measure.compiler import compile_kernel
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    with pytest.raises(KerntuneError, match="compile cache .* cannot be used.*KERNTUNE_CACHE"):
        compile_kernel((work / "row_sum.cu").read_text(), "row_sum", arch="sm_90", cache_dir=blocker / "cubin")


def test_summaries_with_hostile_numbers_are_refused(work):
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    sp = _record(work, prep.template.space.original_config(), best_us=["1e9; rm -rf /"])
    with Store(sp, readonly=True) as st:
        with pytest.raises(KerntuneError, match="best_us is not a list of numbers"):
            result_summary(st, str(work / "row_sum.cu"), "row_sum")


def test_a_moved_checkout_finds_its_results(work, tmp_path):
    """The workspace (file + .kerntune/) moved elsewhere: the results recorded under the old absolute path
    are found; a store passed from elsewhere (not the file's workspace) matches exact paths only."""
    prep = prepare(str(work / "row_sum.cu"), "row_sum", (work / "row_sum.cu").read_text())
    _record(work, prep.template.space.original_config())
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    shutil.copytree(work, moved)
    try:
        f = moved / "row_sum.cu"
        with Store(moved / ".kerntune" / "results.sqlite", readonly=True) as st:
            s = result_summary(st, str(f), "row_sum", f.read_text())
            assert s is not None and not s["stale"] and s["best_params"] == prep.template.space.original_config()
            # a different file name in the same directory does not pick them up
            assert result_summary(st, str(moved / "other.cu"), "row_sum") is None
        shutil.copy(moved / ".kerntune" / "results.sqlite", tmp_path / "elsewhere.sqlite")
        with Store(tmp_path / "elsewhere.sqlite", readonly=True) as st:
            assert result_summary(st, str(f), "row_sum") is None
    finally:
        shutil.rmtree(moved)


def test_store_strings_in_a_hover_are_plain_text():
    """A device name or template origin from a store made elsewhere cannot add links, images or HTML to the
    hover the editor renders."""
    from server.hover import md_text
    evil = "H100](command:workbench.action.terminal.new) ![x](http://e/x.png)\n# <img src=x onerror=1> | a |"
    out = md_text(evil)
    assert "\n" not in out
    for c in "[]()<>!#|":
        assert all(out[i - 1] == "\\" for i, ch in enumerate(out) if ch == c), (c, out)
    assert md_text("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert len(md_text("x" * 10_000)) == 200
