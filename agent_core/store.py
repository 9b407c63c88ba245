"""The results store: one SQLite file per workspace (``.kerntune/results.sqlite``).

Every evaluation is committed as it happens (WAL mode), so a second process (the language server while
the CLI tunes) can read the store at any time. Rows hold JSON of the ``agent_core.model`` types.

A store may come from elsewhere (``--store``, one carried in a checkout), so nothing read from it is trusted:
a store that cannot be written is opened read-only; damaged pages and malformed rows are a KerntuneError
that names the store, the table and the row; parameter values must be integers within ``PARAM_BITS`` bits
(``check_params``), and ``apply`` checks them against the template's parameter space before writing any.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent_core.model import (DeviceInfo, Evaluation, KerntuneError, Resources, Status, Timing, params_key, template_hash_of,
                    to_plain)

SCHEMA_VERSION = 2
# 1 -> 2: template hashes leave out the file names of #line directives (model.template_hash_of); the
# templates, sessions and evaluations of a version-1 store are re-keyed, measurements unchanged.
SESSION_STATUSES = ("running", "finished", "cancelled", "failed")
FAILED_STATUSES = (Status.COMPILE_ERROR, Status.VERIFY_FAILED, Status.CRASHED, Status.TIMEOUT,
                   Status.LAUNCH_ERROR)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS devices (
    name TEXT PRIMARY KEY, info_json TEXT NOT NULL, copy_bw_gbps REAL, measured_at REAL,
    seq INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL, kernel TEXT NOT NULL,
    original_hash TEXT, template_hash TEXT, spec_hash TEXT, device TEXT, strategy TEXT,
    budget INTEGER, seed INTEGER, origin TEXT, started_at REAL NOT NULL, finished_at REAL,
    status TEXT NOT NULL, summary_json TEXT);
CREATE INDEX IF NOT EXISTS sessions_by_kernel ON sessions (path, kernel);
CREATE TABLE IF NOT EXISTS originals (
    original_hash TEXT NOT NULL, spec_hash TEXT NOT NULL, device TEXT NOT NULL,
    timings_json TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (original_hash, spec_hash, device));
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id INTEGER, template_hash TEXT NOT NULL,
    spec_hash TEXT NOT NULL, device TEXT NOT NULL, params_key TEXT NOT NULL, params_json TEXT NOT NULL,
    status TEXT NOT NULL, timings_json TEXT NOT NULL, gbps_json TEXT NOT NULL, resources_json TEXT,
    error TEXT NOT NULL DEFAULT '', objective REAL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS evaluations_by_config
    ON evaluations (template_hash, spec_hash, device, params_key);
CREATE INDEX IF NOT EXISTS evaluations_by_session ON evaluations (session_id);
CREATE TABLE IF NOT EXISTS templates (
    template_hash TEXT PRIMARY KEY, kernel TEXT NOT NULL, origin TEXT, text TEXT NOT NULL,
    space_toml TEXT, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id INTEGER, kind TEXT NOT NULL, text TEXT NOT NULL,
    data_json TEXT, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS steps_by_session ON steps (session_id);
"""


PARAM_BITS = 31  # a parameter value becomes a C integer literal in the user's code: |value| < 2**31


def check_params(params: Any, what: str) -> dict[str, int]:
    """``params`` when it is a configuration (identifier -> integer within PARAM_BITS bits), else a
    KerntuneError saying which value is wrong (``what``: where it was read, for the message)."""
    if not isinstance(params, dict):
        raise KerntuneError(f"{what}: parameters are {type(params).__name__}, not a table of name = integer")
    for k, v in params.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", k):
            raise KerntuneError(f"{what}: parameter name {str(k)[:60]!r} is not an identifier")
        if isinstance(v, bool) or not isinstance(v, int):
            raise KerntuneError(f"{what}: {k} = {str(v)[:60]!r} is not an integer")
        if v.bit_length() > PARAM_BITS:
            raise KerntuneError(f"{what}: {k} = {v} is out of range (|value| < 2**{PARAM_BITS})")
    return params


def _finite(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def _check_summary(summary: Any, what: str) -> dict:
    """A session's summary as read back: the fields the editor and ``apply`` use have their types."""
    if not isinstance(summary, dict):
        raise KerntuneError(f"{what}: the summary is not a table")
    for k in ("best_params", "original_params"):
        if summary.get(k) is not None:
            check_params(summary[k], f"{what}, {k}")
    for k in ("speedup", "copy_bw_gbps"):
        if not _finite(summary.get(k)):
            raise KerntuneError(f"{what}: {k} = {str(summary.get(k))[:40]!r} is not a number")
    for k in ("original_us", "best_us", "gbps", "pct_copy"):
        v = summary.get(k)
        if v is not None and (not isinstance(v, list) or not all(_finite(x) for x in v)):
            raise KerntuneError(f"{what}: {k} is not a list of numbers")
    for i, e in enumerate(summary.get("top") or []):
        if not isinstance(e, dict) or not _finite(e.get("objective")):
            raise KerntuneError(f"{what}: top[{i}] is malformed")
        check_params(e.get("params") or {}, f"{what}, top[{i}]")
    for k in ("template_hash", "origin", "device", "status"):
        if summary.get(k) is not None and not isinstance(summary[k], str):
            raise KerntuneError(f"{what}: {k} is not a string")
    return summary


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise KerntuneError(f"{what} is not valid JSON ({type(e).__name__}: {str(e)[:80]})") from None


def _dumps(obj: Any) -> str:
    return json.dumps(to_plain(obj), sort_keys=True, default=str)


def _timing(d: dict | None) -> Timing | None:
    return Timing(**d) if d is not None else None


def _row_to_evaluation(row: sqlite3.Row, where: str = "") -> Evaluation:
    what = f"{where}evaluation {row['id']}"
    try:
        res = _loads(row["resources_json"], f"{what}: resources") if row["resources_json"] else None
        ev = Evaluation(
            params=check_params(_loads(row["params_json"], f"{what}: params"), what),
            status=Status(row["status"]),
            timings=[_timing(t) for t in _loads(row["timings_json"], f"{what}: timings")],
            gbps=_loads(row["gbps_json"], f"{what}: gbps"),
            resources=Resources(**res) if res is not None else None,
            error=str(row["error"] or ""),
            objective=row["objective"],
            from_store=True,
        )
    except KerntuneError:
        raise
    except (TypeError, ValueError, AttributeError) as e:
        raise KerntuneError(f"{what} is malformed ({type(e).__name__}: {str(e)[:80]})") from None
    if not _finite(ev.objective) or not isinstance(ev.gbps, list):
        raise KerntuneError(f"{what} is malformed (objective {ev.objective!r})")
    return ev


class Store:
    """The SQLite results store. Usable as a context manager; safe to share between threads."""

    def __init__(self, path: str | Path, readonly: bool | None = None):
        """Open (or create) the store at ``path``; ``readonly`` None: read-only exactly when the file (or its
        folder, which SQLite's WAL files need) cannot be written."""
        self.path = Path(path)
        if readonly is None:
            readonly = self.path.exists() and not (os.access(self.path, os.W_OK)
                                                   and os.access(self.path.parent, os.W_OK))
        self.readonly = readonly
        self._lock = threading.RLock()
        try:
            if readonly:
                self._db = self._connect_readonly()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                           check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise KerntuneError(f"cannot open the results store: {e}", str(self.path)) from e
        self._db.row_factory = sqlite3.Row
        try:
            self._init_schema()
        except KerntuneError:
            self._db.close()
            raise
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise KerntuneError(self._damaged(e), str(self.path)) from None

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection: ``mode=ro``; where SQLite cannot even create the WAL index beside a
        read-only store (a read-only folder), ``immutable=1`` (nothing else may be writing it then)."""
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30.0, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30.0, isolation_level=None,
                               check_same_thread=False)

    def _damaged(self, e: sqlite3.Error) -> str:
        """What to tell the user about an SQLite error on this store."""
        msg = str(e)
        if isinstance(e, sqlite3.OperationalError) and "locked" in msg:
            return f"the results store {self.path} is locked by another process ({msg}); try again"
        if "readonly" in msg or "read-only" in msg:
            return (f"the results store {self.path} is read-only ({msg}): results can be read from it; pass "
                    "--store with a writable path to record new ones")
        if "not a database" in msg or "malformed" in msg or "corrupt" in msg or "no such" in msg:
            return (f"the results store {self.path} is damaged or not a kerntune results store ({msg}): "
                    "`sqlite3 FILE .recover` may save what is left; move it away to start a new one")
        return f"the results store {self.path} cannot be read ({msg})"

    # ------------------------------------------------------------------ plumbing
    def _init_schema(self) -> None:
        with self._lock:
            if self.readonly:
                version = self._schema_version()
                if version is None:
                    raise KerntuneError(f"{self.path} is read-only and not a kerntune results store (no schema)",
                                        str(self.path))
                if version > SCHEMA_VERSION:
                    raise KerntuneError(
                        f"this results store was written by a newer kerntune (schema version {version}; this "
                        f"kerntune reads up to {SCHEMA_VERSION}): upgrade kerntune, or pass another --store",
                        str(self.path))
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            version = self._schema_version()
            if version is not None and version > SCHEMA_VERSION:
                raise KerntuneError(
                    f"this results store was written by a newer kerntune (schema version {version}; this "
                    f"kerntune reads up to {SCHEMA_VERSION}): upgrade kerntune, or pass another --store",
                    str(self.path))
            if version == SCHEMA_VERSION:
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        self._db.execute(stmt)
                if version == 1:
                    self._rekey_templates()
                self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _rekey_templates(self) -> None:
        """Schema 1 -> 2: recompute every stored template's hash from its text and re-key what refers to it."""
        for row in self._db.execute("SELECT template_hash, text FROM templates").fetchall():
            old, new = row["template_hash"], template_hash_of(row["text"])
            if old == new:
                continue
            if self._db.execute("SELECT 1 FROM templates WHERE template_hash=?", (new,)).fetchone():
                self._db.execute("DELETE FROM templates WHERE template_hash=?", (old,))
            else:
                self._db.execute("UPDATE templates SET template_hash=? WHERE template_hash=?", (new, old))
            self._db.execute("UPDATE evaluations SET template_hash=? WHERE template_hash=?", (new, old))
            self._db.execute("UPDATE sessions SET template_hash=?, summary_json=replace(summary_json, ?, ?) "
                             "WHERE template_hash=?", (new, old, new, old))

    def _schema_version(self) -> int | None:
        has_meta = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        if not has_meta:
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row["value"]) if row else None

    def _write(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        if self.readonly:
            raise KerntuneError(f"the results store {self.path} is read-only: results can be read from it; pass "
                                "--store with a writable path to record new ones", str(self.path))
        with self._lock:
            try:
                return self._db.execute(sql, args)  # autocommit: one statement, one commit
            except sqlite3.DatabaseError as e:
                raise KerntuneError(self._damaged(e), str(self.path)) from None

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as e:
                raise KerntuneError(self._damaged(e), str(self.path)) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ devices
    def put_device(self, info: DeviceInfo) -> None:
        """Record a device; a copy bandwidth already stored is kept when ``info`` has none."""
        now = time.time()
        bw = info.copy_bandwidth_gbps
        self._write(
            "INSERT INTO devices (name, info_json, copy_bw_gbps, measured_at, seq) "
            "VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM devices)) "
            "ON CONFLICT(name) DO UPDATE SET info_json=excluded.info_json, "
            "copy_bw_gbps=COALESCE(excluded.copy_bw_gbps, devices.copy_bw_gbps), "
            "measured_at=CASE WHEN excluded.copy_bw_gbps IS NULL THEN devices.measured_at "
            "ELSE excluded.measured_at END, seq=excluded.seq",
            (info.name, info.to_json(), bw, now if bw is not None else None))

    def get_device(self, name: str | None = None) -> DeviceInfo | None:
        """The device called ``name``; with None, the most recently recorded one."""
        if name is None:
            rows = self._read("SELECT * FROM devices ORDER BY seq DESC LIMIT 1")
        else:
            rows = self._read("SELECT * FROM devices WHERE name=?", (name,))
        if not rows:
            return None
        return self._device(rows[0])

    def _device(self, row: sqlite3.Row) -> DeviceInfo:
        try:
            info = DeviceInfo(**_loads(row["info_json"], f"{self.path}: device {row['name']!r}"))
        except TypeError as e:
            raise KerntuneError(f"{self.path}: device {row['name']!r} is malformed ({e})", str(self.path)) from None
        if not _finite(row["copy_bw_gbps"]):
            raise KerntuneError(f"{self.path}: device {row['name']!r} has a malformed copy bandwidth",
                                str(self.path))
        return replace(info, copy_bandwidth_gbps=row["copy_bw_gbps"])

    def devices(self) -> list[DeviceInfo]:
        """Every recorded device, most recent first."""
        return [self._device(r) for r in self._read("SELECT * FROM devices ORDER BY seq DESC")]

    def set_copy_bandwidth(self, name: str, gbps: float) -> None:
        cur = self._write("UPDATE devices SET copy_bw_gbps=?, measured_at=? WHERE name=?",
                          (float(gbps), time.time(), name))
        if cur.rowcount == 0:
            raise KerntuneError(f"no device named '{name}' in the store; record the device first (put_device)",
                                str(self.path))

    # ------------------------------------------------------------------ sessions
    def start_session(self, path: str, kernel: str, original_hash: str, template_hash: str, spec_hash: str,
                      device: str, strategy: str, budget: int | None, seed: int, origin: str) -> int:
        cur = self._write(
            "INSERT INTO sessions (path, kernel, original_hash, template_hash, spec_hash, device, strategy, "
            "budget, seed, origin, started_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')",
            (str(path), kernel, original_hash, template_hash, spec_hash, device, strategy, budget, seed,
             origin, time.time()))
        return int(cur.lastrowid)

    def finish_session(self, session_id: int, status: str, summary: dict) -> None:
        if status not in SESSION_STATUSES:
            raise ValueError(f"session status must be one of {SESSION_STATUSES}, not {status!r}")
        cur = self._write("UPDATE sessions SET status=?, finished_at=?, summary_json=? WHERE id=?",
                          (status, time.time(), _dumps(summary), session_id))
        if cur.rowcount == 0:
            raise KerntuneError(f"no session {session_id} in the store", str(self.path))

    def _session_dict(self, row: sqlite3.Row) -> dict:
        d = dict(row)
        what = f"{self.path}: session {row['id']}"
        d["summary"] = _check_summary(_loads(d.pop("summary_json"), what), what) if row["summary_json"] else None
        return d

    def session(self, session_id: int) -> dict:
        rows = self._read("SELECT * FROM sessions WHERE id=?", (session_id,))
        if not rows:
            raise KerntuneError(f"no session {session_id} in the store", str(self.path))
        return self._session_dict(rows[0])

    def _path_match(self, path: str, kernel: str | None) -> tuple[str, list]:
        """The SQL condition (and its arguments) for the sessions of file ``path``. Sessions are recorded under
        the file's absolute path; a checkout that was moved or cloned has its workspace store with it
        (``DIR/.kerntune/results.sqlite`` beside the file) but its files elsewhere: when no session has the
        file's path and the file sits beside the store, the sessions recorded for the same file name in
        another directory are the file's (a workspace store serves the files of one directory)."""
        path = str(path)
        exact = self._read("SELECT 1 FROM sessions WHERE path=?" + (" AND kernel=?" if kernel is not None else "")
                           + " LIMIT 1", (path,) + ((kernel,) if kernel is not None else ()))
        p = Path(path)
        beside = self.path.parent.name == ".kerntune" and p.parent == self.path.resolve().parent.parent
        if exact or not beside:
            return "path=?", [path]
        name = p.name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return "(path=? OR path LIKE ? ESCAPE '\\' OR path LIKE ? ESCAPE '\\')", [path, "%/" + name, "%\\\\" + name]

    def sessions(self, path: str | None = None, kernel: str | None = None) -> list[dict]:
        """Sessions (newest first), optionally only those of one file (``_path_match``) and/or kernel."""
        where, args = [], []
        if path is not None:
            cond, cargs = self._path_match(str(path), kernel)
            where.append(cond)
            args += cargs
        if kernel is not None:
            where.append("kernel=?")
            args.append(kernel)
        sql = "SELECT * FROM sessions" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        return [self._session_dict(r) for r in self._read(sql, tuple(args))]

    def template_sessions(self, template_hash: str, spec_hash: str, device: str) -> list[dict]:
        """The sessions that searched ``template_hash`` on this spec and device, oldest first."""
        rows = self._read("SELECT * FROM sessions WHERE template_hash=? AND spec_hash=? AND device=? ORDER BY id",
                          (template_hash, spec_hash, device))
        return [self._session_dict(r) for r in rows]

    def latest_session(self, path: str, kernel: str, finished_only: bool = False) -> dict | None:
        """The newest session of ``kernel`` in ``path``; with ``finished_only``, the newest that ended
        normally ("finished" or "cancelled": both have a summary of what was measured)."""
        cond, cargs = self._path_match(str(path), kernel)
        sql = f"SELECT * FROM sessions WHERE {cond} AND kernel=?"
        if finished_only:
            sql += " AND status IN ('finished', 'cancelled')"
        rows = self._read(sql + " ORDER BY id DESC LIMIT 1", (*cargs, kernel))
        return self._session_dict(rows[0]) if rows else None

    # ------------------------------------------------------------------ original timings
    def put_original(self, original_hash: str, spec_hash: str, device: str, timings: list[Timing]) -> None:
        self._write("INSERT OR REPLACE INTO originals (original_hash, spec_hash, device, timings_json, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (original_hash, spec_hash, device, _dumps(timings), time.time()))

    def get_original(self, original_hash: str, spec_hash: str, device: str) -> list[Timing] | None:
        rows = self._read("SELECT timings_json FROM originals WHERE original_hash=? AND spec_hash=? AND device=?",
                          (original_hash, spec_hash, device))
        if not rows:
            return None
        what = f"{self.path}: the original's timings ({original_hash[:12]})"
        try:
            return [Timing(**t) for t in _loads(rows[0]["timings_json"], what)]
        except TypeError as e:
            raise KerntuneError(f"{what} are malformed ({e})", str(self.path)) from None

    # ------------------------------------------------------------------ evaluations
    def put_evaluation(self, session_id: int | None, template_hash: str, spec_hash: str, device: str,
                       ev: Evaluation) -> int:
        cur = self._write(
            "INSERT INTO evaluations (session_id, template_hash, spec_hash, device, params_key, params_json, "
            "status, timings_json, gbps_json, resources_json, error, objective, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, template_hash, spec_hash, device, params_key(ev.params), _dumps(ev.params),
             Status(ev.status).value, _dumps(ev.timings), _dumps(ev.gbps),
             _dumps(ev.resources) if ev.resources is not None else None, ev.error or "",
             float(ev.objective) if ev.objective is not None else None, time.time()))
        return int(cur.lastrowid)

    def get_evaluation(self, template_hash: str, spec_hash: str, device: str,
                       params: dict) -> Evaluation | None:
        """The most recent evaluation of ``params`` (``from_store=True``), or None."""
        rows = self._read(
            "SELECT * FROM evaluations WHERE template_hash=? AND spec_hash=? AND device=? AND params_key=? "
            "ORDER BY id DESC LIMIT 1", (template_hash, spec_hash, device, params_key(params)))
        return _row_to_evaluation(rows[0], f"{self.path}: ") if rows else None

    def evaluations(self, session_id: int | None = None, template_hash: str | None = None,
                    spec_hash: str | None = None, device: str | None = None) -> list[Evaluation]:
        """Evaluations matching every given filter, in the order they were recorded."""
        where, args = [], []
        for col, val in (("session_id", session_id), ("template_hash", template_hash),
                         ("spec_hash", spec_hash), ("device", device)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        sql = "SELECT * FROM evaluations" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [_row_to_evaluation(r, f"{self.path}: ") for r in self._read(sql, tuple(args))]

    def counts(self, session_id: int) -> dict:
        """{"ok": n, "failed": n, "pruned": n} of one session (failed: compile, verify, crash, timeout,
        launch errors)."""
        rows = self._read("SELECT status, COUNT(*) AS n FROM evaluations WHERE session_id=? GROUP BY status",
                          (session_id,))
        by = {r["status"]: r["n"] for r in rows}
        return {"ok": by.get(Status.OK.value, 0),
                "failed": sum(by.get(s.value, 0) for s in FAILED_STATUSES),
                "pruned": by.get(Status.PRUNED.value, 0)}

    # ------------------------------------------------------------------ templates
    def put_template(self, template_hash: str, kernel: str, origin: str, text: str, space_toml: str) -> None:
        """Record a template (the text is keyed by its hash; a second put of the same hash is ignored)."""
        self._write("INSERT INTO templates (template_hash, kernel, origin, text, space_toml, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(template_hash) DO NOTHING",
                    (template_hash, kernel, origin, text, space_toml, time.time()))

    def get_template(self, template_hash: str) -> dict | None:
        rows = self._read("SELECT * FROM templates WHERE template_hash=?", (template_hash,))
        if not rows:
            return None
        d = dict(rows[0])
        if not isinstance(d.get("text"), str) or not isinstance(d.get("space_toml") or "", str):
            raise KerntuneError(f"{self.path}: template {template_hash[:12]} is malformed", str(self.path))
        return d

    # ------------------------------------------------------------------ steps
    def put_step(self, session_id: int | None, kind: str, text: str, data: dict | None = None) -> int:
        cur = self._write("INSERT INTO steps (session_id, kind, text, data_json, created_at) VALUES (?, ?, ?, ?, ?)",
                          (session_id, kind, text, _dumps(data) if data is not None else None, time.time()))
        return int(cur.lastrowid)

    def steps(self, session_id: int) -> list[dict]:
        out = []
        for r in self._read("SELECT * FROM steps WHERE session_id=? ORDER BY id", (session_id,)):
            d = dict(r)
            d["data"] = _loads(d.pop("data_json"), f"{self.path}: step {r['id']}") if r["data_json"] else None
            out.append(d)
        return out

    # ------------------------------------------------------------------ one writer for many workers
    # A runner (agent_core.runners) runs tuning sessions in other processes, on other hosts: each runs against
    # a scratch copy of this store on its own disk (``snapshot``) and hands back the rows it added
    # (``rows_since``), which the one process that owns this store merges in one transaction
    # (``merge_rows``). SQLite is never written by two processes, and never over a network file system.
    _TABLES = ("devices", "sessions", "originals", "evaluations", "templates", "steps")

    def _columns(self, table: str) -> set[str]:
        if table not in self._TABLES:
            raise KerntuneError(f"no table {table!r} in a results store", str(self.path))
        return {r["name"] for r in self._read(f"PRAGMA table_info({table})")}

    def snapshot(self) -> bytes:
        """The whole store as SQLite database bytes (``sqlite3.Connection.serialize``), committed rows only."""
        with self._lock:
            return self._db.serialize()

    @classmethod
    def from_snapshot(cls, data: bytes, path: str | Path) -> "Store":
        """A store at ``path`` (which must not exist yet) holding the rows of a ``snapshot``."""
        path = Path(path)
        if path.exists():
            raise KerntuneError(f"{path} exists already: a snapshot is written to a new file", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)  # the image of a database file (its WAL content folded in): a complete store
        return cls(path)

    def high_water(self) -> dict[str, int]:
        """The largest rowid of every table: what ``rows_since`` leaves out."""
        with self._lock:
            return {t: int(self._db.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {t}").fetchone()[0])
                    for t in self._TABLES}

    def rows_since(self, marks: dict[str, int]) -> dict[str, list[dict]]:
        """The rows added (or replaced: a replaced row gets a new rowid) after ``high_water`` gave ``marks``;
        every device row (few, and updated in place)."""
        out: dict[str, list[dict]] = {}
        with self._lock:
            for t in self._TABLES:
                where, args = ("", ()) if t == "devices" else (" WHERE rowid > ?", (marks.get(t, 0),))
                out[t] = [dict(r) for r in self._db.execute(f"SELECT * FROM {t}{where} ORDER BY rowid", args)]
        return out

    def merge_rows(self, rows: dict[str, list[dict]]) -> dict[int, int]:
        """Add the rows another store's ``rows_since`` gave, in one transaction (all or nothing): sessions get
        new ids here (returned as {their id: id here}) and the evaluations, steps and summaries that name them
        follow; devices keep a copy bandwidth already known; templates already here are kept; originals are
        replaced (the newer measurement)."""
        ids: dict[int, int] = {}
        for t, rs in rows.items():
            known = self._columns(t)
            for r in rs:
                if not set(r) <= known:
                    raise KerntuneError(f"rows to merge name columns that table {t} does not have: "
                                        f"{sorted(set(r) - known)}", str(self.path))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for d in rows.get("devices", []):
                    known = self._db.execute("SELECT copy_bw_gbps FROM devices WHERE name=?",
                                             (d["name"],)).fetchone()
                    if known is None:
                        self._db.execute(
                            "INSERT INTO devices (name, info_json, copy_bw_gbps, measured_at, seq) VALUES "
                            "(?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM devices))",
                            (d["name"], d["info_json"], d["copy_bw_gbps"], d["measured_at"]))
                    elif known[0] is None and d["copy_bw_gbps"] is not None:
                        self._db.execute("UPDATE devices SET copy_bw_gbps=?, measured_at=? WHERE name=?",
                                         (d["copy_bw_gbps"], d["measured_at"], d["name"]))
                for s in rows.get("sessions", []):
                    cols = [c for c in s if c != "id"]
                    cur = self._db.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES "
                                           f"({', '.join('?' * len(cols))})", tuple(s[c] for c in cols))
                    ids[int(s["id"])] = int(cur.lastrowid)
                for s in rows.get("sessions", []):
                    if s.get("summary_json"):
                        summary = json.loads(s["summary_json"])
                        if isinstance(summary, dict) and summary.get("session_id") in ids:
                            summary["session_id"] = ids[summary["session_id"]]
                            self._db.execute("UPDATE sessions SET summary_json=? WHERE id=?",
                                             (_dumps(summary), ids[int(s["id"])]))
                for t in ("evaluations", "steps"):
                    for r in rows.get(t, []):
                        r = dict(r, session_id=ids.get(r["session_id"], r["session_id"]))
                        data = json.loads(r["data_json"]) if t == "steps" and r.get("data_json") else None
                        if isinstance(data, dict) and isinstance(data.get("sessions"), list):  # an LLM run's rounds
                            data["sessions"] = [ids.get(x, x) for x in data["sessions"]]
                            r["data_json"] = _dumps(data)
                        cols = [c for c in r if c != "id"]
                        self._db.execute(f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                         tuple(r[c] for c in cols))
                for r in rows.get("templates", []):
                    self._db.execute(f"INSERT INTO templates ({', '.join(r)}) VALUES ({', '.join('?' * len(r))}) "
                                     "ON CONFLICT(template_hash) DO NOTHING", tuple(r.values()))
                for r in rows.get("originals", []):
                    self._db.execute(f"INSERT OR REPLACE INTO originals ({', '.join(r)}) VALUES "
                                     f"({', '.join('?' * len(r))})", tuple(r.values()))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return ids
