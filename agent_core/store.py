"""The results store: one SQLite file per workspace (``.kerntune/results.sqlite``).

Every evaluation is committed as it happens (WAL mode), so a second process (the language server while
the CLI tunes) can read the store at any time. Rows hold JSON of the ``agent_core.model`` types.
"""

from __future__ import annotations

import json
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


def _dumps(obj: Any) -> str:
    return json.dumps(to_plain(obj), sort_keys=True, default=str)


def _timing(d: dict | None) -> Timing | None:
    return Timing(**d) if d is not None else None


def _row_to_evaluation(row: sqlite3.Row) -> Evaluation:
    res = json.loads(row["resources_json"]) if row["resources_json"] else None
    return Evaluation(
        params=json.loads(row["params_json"]),
        status=Status(row["status"]),
        timings=[_timing(t) for t in json.loads(row["timings_json"])],
        gbps=json.loads(row["gbps_json"]),
        resources=Resources(**res) if res is not None else None,
        error=row["error"] or "",
        objective=row["objective"],
        from_store=True,
    )


class Store:
    """The SQLite results store. Usable as a context manager; safe to share between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise KerntuneError(f"cannot open the results store: {e}", str(self.path)) from e
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        try:
            self._init_schema()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise KerntuneError(f"{self.path} is not a kerntune results store ({e}); move it away and "
                                "run again to start a new one", str(self.path)) from e

    # ------------------------------------------------------------------ plumbing
    def _init_schema(self) -> None:
        with self._lock:
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
        with self._lock:
            return self._db.execute(sql, args)  # autocommit: one statement, one commit

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

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
        info = DeviceInfo.from_json(rows[0]["info_json"])
        return replace(info, copy_bandwidth_gbps=rows[0]["copy_bw_gbps"])

    def devices(self) -> list[DeviceInfo]:
        """Every recorded device, most recent first."""
        return [replace(DeviceInfo.from_json(r["info_json"]), copy_bandwidth_gbps=r["copy_bw_gbps"])
                for r in self._read("SELECT * FROM devices ORDER BY seq DESC")]

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

    @staticmethod
    def _session_dict(row: sqlite3.Row) -> dict:
        d = dict(row)
        d["summary"] = json.loads(d.pop("summary_json")) if row["summary_json"] else None
        return d

    def session(self, session_id: int) -> dict:
        rows = self._read("SELECT * FROM sessions WHERE id=?", (session_id,))
        if not rows:
            raise KerntuneError(f"no session {session_id} in the store", str(self.path))
        return self._session_dict(rows[0])

    def sessions(self, path: str | None = None, kernel: str | None = None) -> list[dict]:
        """Sessions (newest first), optionally only those of one file and/or kernel."""
        where, args = [], []
        if path is not None:
            where.append("path=?")
            args.append(str(path))
        if kernel is not None:
            where.append("kernel=?")
            args.append(kernel)
        sql = "SELECT * FROM sessions" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        return [self._session_dict(r) for r in self._read(sql, tuple(args))]

    def latest_session(self, path: str, kernel: str, finished_only: bool = False) -> dict | None:
        """The newest session of ``kernel`` in ``path``; with ``finished_only``, the newest that ended
        normally ("finished" or "cancelled": both have a summary of what was measured)."""
        sql = "SELECT * FROM sessions WHERE path=? AND kernel=?"
        if finished_only:
            sql += " AND status IN ('finished', 'cancelled')"
        rows = self._read(sql + " ORDER BY id DESC LIMIT 1", (str(path), kernel))
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
        return [Timing(**t) for t in json.loads(rows[0]["timings_json"])]

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
        return _row_to_evaluation(rows[0]) if rows else None

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
        return [_row_to_evaluation(r) for r in self._read(sql, tuple(args))]

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
        return dict(rows[0]) if rows else None

    # ------------------------------------------------------------------ steps
    def put_step(self, session_id: int | None, kind: str, text: str, data: dict | None = None) -> int:
        cur = self._write("INSERT INTO steps (session_id, kind, text, data_json, created_at) VALUES (?, ?, ?, ?, ?)",
                          (session_id, kind, text, _dumps(data) if data is not None else None, time.time()))
        return int(cur.lastrowid)

    def steps(self, session_id: int) -> list[dict]:
        out = []
        for r in self._read("SELECT * FROM steps WHERE session_id=? ORDER BY id", (session_id,)):
            d = dict(r)
            d["data"] = json.loads(d.pop("data_json")) if r["data_json"] else None
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
