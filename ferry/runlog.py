"""The run log (SQLite, WAL): runs, each phase's latest outcome, and the history of its commits.

It is the pipeline's record, apart from the transfer state (objects, multipart uploads and
parts, kept per shard beside the engine), so that shards can run on other workers while the
run log stays with the pipeline.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

FILE = "runlog.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS phases (
    plan TEXT NOT NULL, phase TEXT NOT NULL, input_hash TEXT NOT NULL, status TEXT NOT NULL,
    run_id TEXT NOT NULL, updated REAL NOT NULL, detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (plan, phase)
) WITHOUT ROWID;
-- Every commit of a phase; the newest one not rolled back is what is live on the target.
CREATE TABLE IF NOT EXISTS commits (
    plan TEXT NOT NULL, phase TEXT NOT NULL, run_id TEXT NOT NULL, input_hash TEXT NOT NULL,
    committed REAL NOT NULL, rolled_back INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (plan, phase, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, plan TEXT NOT NULL, status TEXT NOT NULL, started REAL NOT NULL,
    updated REAL NOT NULL, audit_dir TEXT NOT NULL, flow_run_id TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
"""


class PhaseStatus(StrEnum):
    """A phase's latest outcome for a plan, as the run log stores it (its value) and `ferry status` shows it."""

    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    NOT_APPROVED = "not_approved"
    COMMITTED = "committed"
    UNCHANGED = "unchanged"  # the run changed nothing: the target already held it
    INTERRUPTED = "interrupted"
    FAILED = "failed"  # nothing undone: the next run resumes it
    ROLLING_BACK = "rolling_back"
    ROLLBACK_INTERRUPTED = "rollback_interrupted"
    ROLLBACK_FAILED = "rollback_failed"
    ROLLED_BACK = "rolled_back"


class RunStatus(StrEnum):
    """A run's outcome, as the run log stores it."""

    RUNNING = "running"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PhaseRecord:
    """A phase's latest outcome for a plan."""

    plan: str
    phase: str
    input_hash: str
    status: PhaseStatus
    run_id: str
    updated: float
    detail: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: str
    plan: str
    status: RunStatus
    started: float
    updated: float
    audit_dir: str
    flow_run_id: str
    detail: str


def _phase_record(row: tuple) -> PhaseRecord:
    return PhaseRecord(*row[:3], PhaseStatus(row[3]), *row[4:])


def _run_record(row: tuple) -> RunRecord:
    return RunRecord(*row[:2], RunStatus(row[2]), *row[3:])


class RunLog:
    """One state directory's run log; safe to share between threads."""

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILE
        self._conn = sqlite3.connect(
            f"file:{self.path}", uri=True, timeout=30, check_same_thread=False, isolation_level=None
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def phase(self, plan: str, phase: str) -> PhaseRecord | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM phases WHERE plan = ? AND phase = ?", (plan, phase)).fetchone()
        return _phase_record(row) if row else None

    def phases(self, plan: str) -> list[PhaseRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM phases WHERE plan = ?", (plan,)).fetchall()
        return [_phase_record(row) for row in rows]

    def set_phase(
        self, plan: str, phase: str, input_hash: str, status: PhaseStatus, run_id: str, detail: str = ""
    ) -> None:
        """Record a phase's latest outcome; a commit also joins the phase's commit history."""
        now = time.time()
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute(
                "INSERT OR REPLACE INTO phases VALUES (?, ?, ?, ?, ?, ?, ?)",
                (plan, phase, input_hash, status, run_id, now, detail),
            )
            if status == PhaseStatus.COMMITTED:
                self._conn.execute(
                    "INSERT OR REPLACE INTO commits VALUES (?, ?, ?, ?, ?, 0)", (plan, phase, run_id, input_hash, now)
                )

    def live_commit(self, plan: str, phase: str) -> tuple[str, str] | None:
        """(run id, input hash) of the newest commit of the phase not rolled back: what the target holds."""
        with self._lock:
            row = self._conn.execute(
                "SELECT run_id, input_hash FROM commits WHERE plan = ? AND phase = ? AND rolled_back = 0 "
                "ORDER BY committed DESC LIMIT 1",
                (plan, phase),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def roll_back_commit(self, plan: str, phase: str, run_id: str, detail: str) -> None:
        """Mark one commit undone; the phase's latest outcome says so."""
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute(
                "UPDATE commits SET rolled_back = 1 WHERE plan = ? AND phase = ? AND run_id = ?", (plan, phase, run_id)
            )
            row = self._conn.execute(
                "SELECT input_hash FROM commits WHERE plan = ? AND phase = ? AND run_id = ?", (plan, phase, run_id)
            ).fetchone()
            self._conn.execute(
                "INSERT OR REPLACE INTO phases VALUES (?, ?, ?, ?, ?, ?, ?)",
                (plan, phase, row[0] if row else "", PhaseStatus.ROLLED_BACK, run_id, time.time(), detail),
            )

    def start_run(self, run_id: str, plan: str, audit_dir: str, flow_run_id: str = "") -> None:
        now = time.time()
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, plan, RunStatus.RUNNING, now, now, audit_dir, flow_run_id, ""),
            )

    def end_run(self, run_id: str, status: RunStatus, detail: str = "") -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE runs SET status = ?, updated = ?, detail = ? WHERE run_id = ?",
                (status, time.time(), detail, run_id),
            )

    def runs(self, plan: str, limit: int = 10) -> list[RunRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM runs WHERE plan = ? ORDER BY started DESC LIMIT ?", (plan, limit)
            ).fetchall()
        return [_run_record(row) for row in rows]

    def run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _run_record(row) if row else None
