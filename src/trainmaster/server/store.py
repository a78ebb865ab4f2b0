"""The daemon's durable state: one SQLite file holding jobs, tasks, events, reports and decisions.

A job is committed here before the API answers, so a daemon killed with
SIGKILL loses nothing it accepted. WAL mode with `synchronous=NORMAL`: a
commit survives the death of the process (the OS holds the written pages);
only a power loss could take the last commits back.

One connection, shared by the API threads and the controller thread behind a
lock: SQLite serializes writers anyway, and the writes are small.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmaster.core.errors import TrainmasterError
from trainmaster.core.states import JobState

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    doc TEXT NOT NULL,
    state TEXT NOT NULL,
    submit_time REAL NOT NULL,
    first_start REAL,
    finish_time REAL,
    restarts INTEGER NOT NULL DEFAULT 0,
    step INTEGER NOT NULL DEFAULT 0,
    loss REAL,
    steps_per_s REAL,
    allocation TEXT NOT NULL DEFAULT '',
    gpus INTEGER NOT NULL DEFAULT 0,
    tasks INTEGER NOT NULL DEFAULT 0,
    why TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL,
    role TEXT NOT NULL,
    idx INTEGER NOT NULL,
    node TEXT NOT NULL,
    PRIMARY KEY (job_id, role, idx)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    job_id TEXT NOT NULL,
    what TEXT NOT NULL,
    state TEXT NOT NULL,
    allocation TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    tasks INTEGER NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id, id);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    time REAL NOT NULL,
    step INTEGER NOT NULL,
    loss REAL,
    steps_per_s REAL,
    samples_per_s REAL,
    tasks INTEGER
);
CREATE INDEX IF NOT EXISTS reports_job ON reports(job_id, id);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    time REAL NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_job ON decisions(job_id, id);
"""

# Schema changes after the first release, in order: entry i takes a store from `user_version` i to i + 1.
# A fresh store runs SCHEMA and then every entry; never edit an entry that shipped, append a new one.
MIGRATIONS: tuple[str, ...] = (
    # 1: restarts after failures, resizes and preemptions are counted apart (they were all `restarts`).
    "ALTER TABLE jobs ADD COLUMN resizes INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;",
    # 2: `trainmaster hold` (dependencies live in the document's `spec.after`).
    "ALTER TABLE jobs ADD COLUMN held INTEGER NOT NULL DEFAULT 0;",
    # 3: what a job's resources cost (USD), when the nodes have prices.
    "ALTER TABLE jobs ADD COLUMN cost REAL;",
)

# Columns of `jobs` the controller thread keeps up to date.
LIVE_COLUMNS = ("state", "first_start", "finish_time", "restarts", "resizes", "preemptions", "step", "loss",
                "steps_per_s", "allocation", "gpus", "tasks", "why", "message", "cost")
UNFINISHED = tuple(s.value for s in JobState if not s.terminal)


@dataclass
class Batch:
    """Everything one controller step changed, written in one transaction."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> LIVE_COLUMNS values
    tasks: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)  # id -> (role, index, node)
    events: list[tuple[float, str, str, str, str, int, int, str]] = field(default_factory=list)
    reports: list[tuple[str, float, int, float | None, float | None, float | None, int | None]] = field(
        default_factory=list)
    decisions: list[tuple[str, float, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.tasks or self.events or self.reports or self.decisions)


class Store:
    """Jobs and their history in one SQLite file (`:memory:` works for tests)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring an older store up to this build's schema (`PRAGMA user_version` counts applied migrations)."""
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > len(MIGRATIONS):
            raise TrainmasterError(f"{self.path} was written by a newer trainmaster (schema {version}, this build "
                                   f"knows {len(MIGRATIONS)}); upgrade trainmaster or use another --data-dir")
        for number in range(version, len(MIGRATIONS)):
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number + 1}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes -------------------------------------------------------------
    def add_job(self, doc: dict[str, Any], name: str, queue: str, priority: int, now: float) -> dict[str, Any]:
        """Give the job a unique id (its name, suffixed `-N` when taken) and commit it."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            taken = self._db.execute("SELECT COUNT(*) FROM jobs WHERE name = ?", (name,)).fetchone()[0]
            job_id = name
            n = taken
            while self._db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone():
                job_id = f"{name}-{n}"
                n += 1
            self._db.execute(
                "INSERT INTO jobs (id, name, queue, priority, doc, state, submit_time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, name, queue, priority, json.dumps(doc), JobState.PENDING.value, now))
            self._db.execute(
                "INSERT INTO events (time, job_id, what, state, allocation, gpus, tasks, detail)"
                " VALUES (?, ?, 'accepted', ?, '', 0, 0, 'accepted by the API')",
                (now, job_id, JobState.PENDING.value))
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row)

    def request_cancel(self, job_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))

    def write(self, batch: Batch) -> None:
        """Apply one controller step's changes atomically."""
        if not batch:
            return
        with self._lock, self._db:
            self._db.execute("BEGIN")
            for job_id, values in batch.jobs.items():
                cols = [c for c in LIVE_COLUMNS if c in values]
                self._db.execute(f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                                 [*(values[c] for c in cols), job_id])
            for job_id, tasks in batch.tasks.items():
                self._db.execute("DELETE FROM tasks WHERE job_id = ?", (job_id,))
                self._db.executemany("INSERT INTO tasks (job_id, role, idx, node) VALUES (?, ?, ?, ?)",
                                     [(job_id, *t) for t in tasks])
            self._db.executemany(
                "INSERT INTO events (time, job_id, what, state, allocation, gpus, tasks, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch.events)
            self._db.executemany(
                "INSERT INTO reports (job_id, time, step, loss, steps_per_s, samples_per_s, tasks)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", batch.reports)
            self._db.executemany("INSERT INTO decisions (job_id, time, text) VALUES (?, ?, ?)", batch.decisions)

    # -- reads --------------------------------------------------------------
    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._all("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def jobs(self, states: Iterable[str] = (), queue: str | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[dict[str, Any]]:
        where, args = [], []
        states = list(states)
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args.extend(states)
        if queue:
            where.append("queue = ?")
            args.append(queue)
        sql = "SELECT * FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_job(r) for r in self._all(sql, args)]

    def unfinished(self) -> list[dict[str, Any]]:
        """Jobs to hand back to the controller after a restart, in submit order, with their document."""
        rows = self._all(f"SELECT * FROM jobs WHERE state IN ({', '.join('?' * len(UNFINISHED))}) ORDER BY seq",
                         UNFINISHED)
        return [{**_job(r), "doc": json.loads(r["doc"])} for r in rows]

    def count(self) -> int:
        return int(self._all("SELECT COUNT(*) FROM jobs")[0][0])

    def state_counts(self) -> dict[str, int]:
        """Jobs per state, counted by SQLite (the dashboard's tiles; no rows are read)."""
        return {r[0]: int(r[1]) for r in self._all("SELECT state, COUNT(*) FROM jobs GROUP BY state")}

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("SELECT time, what, state, allocation, gpus, tasks, detail FROM events"
                                           " WHERE job_id = ? ORDER BY id", (job_id,))]

    def reports(self, job_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("SELECT time, step, loss, steps_per_s, samples_per_s, tasks FROM reports"
                                           " WHERE job_id = ? ORDER BY id", (job_id,))]

    def decisions(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        rows = self._all("SELECT time, text FROM decisions WHERE job_id = ? ORDER BY id DESC LIMIT ?",
                         (job_id, limit))
        return [dict(r) for r in reversed(rows)]

    def tasks(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._all("SELECT job_id, role, idx, node FROM tasks ORDER BY node, job_id")]

    # -- hold, update, history (the Slurm-shaped CLI) ---------------------------------------
    def set_held(self, job_id: str, held: bool) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE jobs SET held = ? WHERE id = ?", (int(held), job_id))

    def held_ids(self) -> list[str]:
        return [r[0] for r in self._all(f"SELECT id FROM jobs WHERE held = 1 AND state IN "
                                        f"({', '.join('?' * len(UNFINISHED))}) ORDER BY seq", UNFINISHED)]

    def doc(self, job_id: str) -> dict[str, Any] | None:
        rows = self._all("SELECT doc FROM jobs WHERE id = ?", (job_id,))
        return json.loads(rows[0][0]) if rows else None

    def update_doc(self, job_id: str, doc: dict[str, Any], priority: int) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE jobs SET doc = ?, priority = ? WHERE id = ?", (json.dumps(doc), priority, job_id))

    def allocation_changes(self, job_ids: Sequence[str]) -> dict[str, list[tuple[float, str, int]]]:
        """(time, what, gpus) of every event of these jobs, in order: GPU-hours and counts for `history`."""
        out: dict[str, list[tuple[float, str, int]]] = {jid: [] for jid in job_ids}
        ids = list(job_ids)
        for i in range(0, len(ids), 500):  # SQLite caps the parameters of one statement
            chunk = ids[i:i + 500]
            for r in self._all(f"SELECT job_id, time, what, gpus FROM events WHERE job_id IN "
                               f"({', '.join('?' * len(chunk))}) ORDER BY id", chunk):
                out[r[0]].append((r[1], r[2], r[3]))
        return out


def _job(row: sqlite3.Row) -> dict[str, Any]:
    hidden = ("doc", "seq", "cancel_requested", "held")
    out = {k: row[k] for k in row.keys() if k not in hidden}  # noqa: SIM118 (a Row iterates its values)
    out["cancel_requested"] = bool(row["cancel_requested"])
    out["held"] = bool(row["held"])
    end = out["finish_time"]
    out["jct"] = None if end is None else end - out["submit_time"]
    return out
