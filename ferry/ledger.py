"""The durable record of a sync (SQLite, WAL): finished objects and multipart uploads with their parts.

The pipeline's runs and phase commits are in the run log (ferry/runlog.py), not here.

A killed run resumes from it: finished objects are skipped by the diff, and a multipart upload
picks up its upload id and re-sends only the parts that were not recorded. Parts are committed
one by one (they are large and few); finished objects are committed in batches, because a
finished object that was not yet committed is found equal by the next diff anyway.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from connectors.base import Part

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    job TEXT NOT NULL, key TEXT NOT NULL, size INTEGER NOT NULL,
    src_sig TEXT NOT NULL, dst_sig TEXT NOT NULL, checksum TEXT,
    PRIMARY KEY (job, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uploads (
    job TEXT NOT NULL, key TEXT NOT NULL, upload_id TEXT NOT NULL, size INTEGER NOT NULL,
    src_sig TEXT NOT NULL, part_size INTEGER NOT NULL,
    PRIMARY KEY (job, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS parts (
    job TEXT NOT NULL, key TEXT NOT NULL, upload_id TEXT NOT NULL, number INTEGER NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL, crc32c INTEGER,
    PRIMARY KEY (job, key, upload_id, number)
) WITHOUT ROWID;
"""
_BATCH_ROWS = 512
_BATCH_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """A verified copy: the source and target signatures it was made between, and its checksum."""

    key: str
    size: int
    src_sig: str
    dst_sig: str
    checksum: str | None


@dataclass(frozen=True, slots=True)
class UploadRecord:
    key: str
    upload_id: str
    size: int
    src_sig: str
    part_size: int


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class Ledger:
    """One state directory's ledger; safe to share between the engine's threads."""

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "ledger.sqlite"
        self._conn = _connect(self.path)
        self._conn.executescript(_SCHEMA)
        # Two locks: workers appending finished objects never wait behind a SQLite write.
        self._lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[tuple] = []
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._conn.close()

    # -- objects --------------------------------------------------------------------------------
    def objects(self, job: str, prefix: str = "") -> Iterator[ObjectRecord]:
        """Finished objects of job in key order (SQLite's BINARY order is code point order)."""
        self.flush()
        reader = _connect(self.path)
        try:
            rows = reader.execute(
                "SELECT key, size, src_sig, dst_sig, checksum FROM objects WHERE job = ? AND key >= ? ORDER BY key",
                (job, prefix),
            )
            for row in rows:
                if not row[0].startswith(prefix):
                    break
                yield ObjectRecord(*row)
        finally:
            reader.close()

    def record_object(self, job: str, record: ObjectRecord) -> None:
        with self._pending_lock:
            self._pending.append((job, record.key, record.size, record.src_sig, record.dst_sig, record.checksum))
            due = len(self._pending) >= _BATCH_ROWS or time.monotonic() - self._flushed_at > _BATCH_SECONDS
        if due:
            self.flush()

    def forget_object(self, job: str, key: str) -> None:
        self.flush()
        with self._lock:
            self._conn.execute("DELETE FROM objects WHERE job = ? AND key = ?", (job, key))

    def flush(self) -> None:
        # The database lock first, so batches reach SQLite in the order they were taken.
        with self._lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
                self._flushed_at = time.monotonic()
            if pending:
                with self._conn:
                    self._conn.execute("BEGIN")
                    self._conn.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)", pending)

    # -- multipart uploads ----------------------------------------------------------------------
    def upload(self, job: str, key: str) -> UploadRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT key, upload_id, size, src_sig, part_size FROM uploads WHERE job = ? AND key = ?", (job, key)
            ).fetchone()
        return UploadRecord(*row) if row else None

    def parts(self, job: str, key: str, upload_id: str) -> list[Part]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT number, size, etag, crc32c FROM parts"
                " WHERE job = ? AND key = ? AND upload_id = ? ORDER BY number",
                (job, key, upload_id),
            ).fetchall()
        return [Part(*row) for row in rows]

    def begin_upload(self, job: str, record: UploadRecord) -> None:
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("DELETE FROM parts WHERE job = ? AND key = ?", (job, record.key))
            self._conn.execute(
                "INSERT OR REPLACE INTO uploads VALUES (?, ?, ?, ?, ?, ?)",
                (job, record.key, record.upload_id, record.size, record.src_sig, record.part_size),
            )

    def record_part(self, job: str, key: str, upload_id: str, part: Part) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job, key, upload_id, part.number, part.size, part.etag, part.crc32c),
            )

    def end_upload(self, job: str, key: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("DELETE FROM parts WHERE job = ? AND key = ?", (job, key))
            self._conn.execute("DELETE FROM uploads WHERE job = ? AND key = ?", (job, key))
