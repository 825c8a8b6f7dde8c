"""One shard's transfer state on disk (SQLite, WAL): finished objects, multipart uploads and their parts.

One file per shard, `<state_dir>/transfers/<16 hex>.sqlite`, named by a hash of the source URL, the
target URL and the shard's prefix (and its key range, if it has one), so that shards can run on different
workers; its `shard` table says which one it holds. A killed run resumes from it: finished objects are skipped by
the diff, and a multipart upload picks up its upload id and re-sends only the parts that were not recorded (nor
listed by the store and proven: engine.py, `Route.adopt_part`). Parts
are committed one by one (they are large and few); finished objects are committed in batches, because a finished
object that was not yet committed is found equal by the next diff anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from connectors.base import Part
from ferry.errors import PermanentError
from ferry.interrupts import failpoint

FOLDER = "transfers"

_SCHEMA = """
-- The shard this file holds: written once, when the file is created.
CREATE TABLE IF NOT EXISTS shard (source TEXT NOT NULL, target TEXT NOT NULL, prefix TEXT NOT NULL);
-- proof: NULL for a copy ferry wrote and verified; for an object another tool wrote, how it was proven equal.
-- held_to: for a copy, what the source held that the bytes ferry read were held to (a source_checksum kind).
CREATE TABLE IF NOT EXISTS objects (
    key TEXT PRIMARY KEY, size INTEGER NOT NULL, src_sig TEXT NOT NULL, dst_sig TEXT NOT NULL, checksum TEXT,
    proof TEXT, held_to TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uploads (
    key TEXT PRIMARY KEY, upload_id TEXT NOT NULL, size INTEGER NOT NULL, src_sig TEXT NOT NULL,
    part_size INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS parts (
    key TEXT NOT NULL, upload_id TEXT NOT NULL, number INTEGER NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL, crc32c INTEGER,
    PRIMARY KEY (key, upload_id, number)
) WITHOUT ROWID;
"""
# An ObjectRecord's fields, in order (a file from before a column was added holds them in this order too).
_OBJECT_COLUMNS = "key, size, src_sig, dst_sig, checksum, proof, held_to"
_BATCH_ROWS = 512
_BATCH_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """A verified copy: the source and target signatures it was made between, and its checksum.

    An adopted object (another tool wrote it, ferry proved it equal) says by which proof (connectors.transfer.adopt);
    a copy, what the source held that the bytes read were held to (connectors.transfer.source_checksum)."""

    key: str
    size: int
    src_sig: str
    dst_sig: str
    checksum: str | None
    proof: str | None = None
    held_to: str | None = None


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


def state_name(source_url: str, target_url: str, prefix: str, key_range: tuple[str, str] = ("", "")) -> str:
    """The shard's file under a state directory: `transfers/<16 hex>.sqlite`."""
    # A key range of the prefix (connectors/transfer/ranges.py) is a shard of its own; a whole prefix keeps the name
    # its file always had.
    shard = [source_url, target_url, prefix, *key_range] if any(key_range) else [source_url, target_url, prefix]
    return f"{FOLDER}/{hashlib.sha256(json.dumps(shard).encode()).hexdigest()[:16]}.sqlite"


class TransferState:
    """The transfer state of one shard (source, target, key prefix); safe to share between the engine's threads."""

    def __init__(
        self, state_dir: Path, source_url: str, target_url: str, prefix: str, key_range: tuple[str, str] = ("", "")
    ):
        self.path = state_dir / state_name(source_url, target_url, prefix, key_range)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = _connect(self.path)
        self._conn.executescript(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(objects)")}
        # A state file from before adoption, or before the source's checksums were held to.
        for column in ("proof", "held_to"):
            if column not in columns:
                with contextlib.suppress(sqlite3.OperationalError):  # "duplicate column": another process added it
                    self._conn.execute(f"ALTER TABLE objects ADD COLUMN {column} TEXT")
        self._start(source_url, target_url, prefix)
        # Two locks: workers appending finished objects never wait behind a SQLite write.
        self._lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[tuple] = []
        self._flushed_at = time.monotonic()

    def _start(self, source_url: str, target_url: str, prefix: str) -> None:
        """Name the shard in a new file; once."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            if self._conn.execute("SELECT 1 FROM shard").fetchone() is None:
                self._conn.execute("INSERT INTO shard VALUES (?, ?, ?)", (source_url, target_url, prefix))

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._conn.close()

    # -- objects --------------------------------------------------------------------------------
    def objects(self) -> Iterator[ObjectRecord]:
        """Finished objects in key order (SQLite's BINARY order is code point order)."""
        self.flush()
        reader = _connect(self.path)
        try:
            for row in reader.execute(f"SELECT {_OBJECT_COLUMNS} FROM objects ORDER BY key"):
                yield ObjectRecord(*row)
        finally:
            reader.close()

    def record_object(self, record: ObjectRecord) -> None:
        """Record a verified copy; committed with the next batch."""
        with self._pending_lock:
            self._pending.append(
                (record.key, record.size, record.src_sig, record.dst_sig, record.checksum, record.proof, record.held_to)
            )
            due = len(self._pending) >= _BATCH_ROWS or time.monotonic() - self._flushed_at > _BATCH_SECONDS
        if due:
            self.flush()

    def forget_object(self, key: str) -> None:
        self.flush()
        with self._lock:
            self._conn.execute("DELETE FROM objects WHERE key = ?", (key,))

    def flush(self) -> None:
        """Commit the finished objects recorded so far."""
        # The database lock first, so batches reach SQLite in the order they were taken.
        with self._lock:
            with self._pending_lock:
                pending, self._pending = self._pending, []
                self._flushed_at = time.monotonic()
            if pending:
                with self._conn:
                    self._conn.execute("BEGIN")
                    self._conn.executemany(
                        f"INSERT OR REPLACE INTO objects ({_OBJECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", pending
                    )
                    failpoint("transfer:state-write")  # inside the transaction, before its commit

    def count(self) -> int:
        """Finished objects recorded."""
        self.flush()
        with self._lock:
            return self._conn.execute("SELECT count(*) FROM objects").fetchone()[0]

    def median_key(self) -> str | None:
        """The recorded key halfway through, in key order (None with fewer than two)."""
        self.flush()
        with self._lock:
            total = self._conn.execute("SELECT count(*) FROM objects").fetchone()[0]
            if total < 2:
                return None
            row = self._conn.execute("SELECT key FROM objects ORDER BY key LIMIT 1 OFFSET ?", ((total - 1) // 2,))
            return row.fetchone()[0]

    def take_rows(self, old: Path, start_after: str, end_at: str) -> None:
        """Take over the rows of another shard's state file whose keys lie in (start_after, end_at] ("" open): a key
        range split in two, each half taking its part of the range's objects, uploads and parts."""
        clauses = [c for c, bound in (("key > ?", start_after), ("key <= ?", end_at)) if bound]
        where = " AND ".join(clauses) or "1"
        args = [bound for bound in (start_after, end_at) if bound]
        self.flush()
        with self._lock:
            self._conn.execute("ATTACH DATABASE ? AS old", (str(old),))
            try:
                with self._conn:
                    self._conn.execute("BEGIN")
                    for table, columns in (
                        ("objects", _OBJECT_COLUMNS),
                        ("uploads", "key, upload_id, size, src_sig, part_size"),
                        ("parts", "key, upload_id, number, size, etag, crc32c"),
                    ):
                        self._conn.execute(
                            f"INSERT OR REPLACE INTO main.{table} ({columns}) "
                            f"SELECT {columns} FROM old.{table} WHERE {where}",
                            args,
                        )
            finally:
                self._conn.execute("DETACH DATABASE old")

    # -- multipart uploads ----------------------------------------------------------------------
    def upload(self, key: str) -> UploadRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT key, upload_id, size, src_sig, part_size FROM uploads WHERE key = ?", (key,)
            ).fetchone()
        return UploadRecord(*row) if row else None

    def parts(self, key: str, upload_id: str) -> list[Part]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT number, size, etag, crc32c FROM parts WHERE key = ? AND upload_id = ? ORDER BY number",
                (key, upload_id),
            ).fetchall()
        return [Part(*row) for row in rows]

    def begin_upload(self, record: UploadRecord) -> None:
        """Record a new upload of record.key, forgetting the parts of any earlier one."""
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("DELETE FROM parts WHERE key = ?", (record.key,))
            self._conn.execute(
                "INSERT OR REPLACE INTO uploads VALUES (?, ?, ?, ?, ?)",
                (record.key, record.upload_id, record.size, record.src_sig, record.part_size),
            )

    def record_part(self, key: str, upload_id: str, part: Part) -> None:
        """Record a finished part, committed at once."""
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO parts VALUES (?, ?, ?, ?, ?, ?)",
                (key, upload_id, part.number, part.size, part.etag, part.crc32c),
            )

    def end_upload(self, key: str) -> None:
        """Forget key's upload and its parts (completed or aborted)."""
        with self._lock, self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("DELETE FROM parts WHERE key = ?", (key,))
            self._conn.execute("DELETE FROM uploads WHERE key = ?", (key,))


def written_signatures(state_dir: Path, target_url: str, keys: set[str]) -> dict[str, str | None]:
    """For each of keys that a shard syncing into target_url verified, the target's signature it recorded then.

    Read from every shard's file under state_dir (a journal outlives the plan's shards). A key that shards
    recorded with different signatures (another sync wrote it into the same target: a second plan, a hand
    `ferry sync` from another source) maps to None: which write is the journal's own cannot be told.
    """
    found: dict[str, str | None] = {}
    for path in sorted((state_dir / FOLDER).glob("*.sqlite")):
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            shard = conn.execute("SELECT target FROM shard").fetchone()
            if shard is None or shard[0] != target_url:
                continue
            for key, dst_sig in conn.execute("SELECT key, dst_sig FROM objects"):
                if key in keys:
                    found[key] = dst_sig if found.get(key, dst_sig) == dst_sig else None
        except sqlite3.Error as exc:
            # Taken for "no record", it would keep every object ferry wrote: say so instead, delete nothing.
            raise PermanentError(f"transfer state {path} cannot be read ({exc}): nothing was deleted") from None
        finally:
            conn.close()
    return found
