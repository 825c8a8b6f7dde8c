"""Shards' transfer state and journals kept where every worker reaches them (`phases.data_sync.state_url`).

A shard's transfer state stays a local SQLite file on the worker that runs it (WAL needs one machine's filesystem).
A copy of it (SQLite's online backup: a consistent snapshot while the engine writes) goes to an object-store prefix
or a shared path every few seconds and when the shard ends, with the run's journals beside it. A worker that takes
the shard over restores the copy; the engine's resume then keeps the parts the store lists beyond it
(`Route.adopt_part`), so only parts neither recorded nor held are sent again.

Names in the store mirror the local ones: `transfers/<16 hex>.sqlite` (state.py's name for the shard) and
`runs/<run>/<phase>/<file>` for a run's audit files.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from connectors.base import Connector, WriteSpec
from connectors.checksum import crc32c, label
from ferry.errors import NotFoundError
from ferry.files import write_atomic


class StateStore:
    """An object-store prefix (or a shared path) that holds shards' state between workers."""

    def __init__(self, connector: Connector):
        self.connector = connector

    def restore(self, name: str, path: Path) -> bool:
        """The stored copy of name written to path (replacing it, and an SQLite file's WAL beside it); False, and
        path untouched, when the store holds none."""
        try:
            data, _ = self.connector.get(name)
        except NotFoundError:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        write_atomic(path, data)
        return True

    def names(self, prefix: str) -> list[str]:
        """The names the store holds under prefix."""
        return [info.key for info in self.connector.list(prefix)]

    def save_state(self, path: Path, name: str) -> None:
        """A consistent snapshot of the SQLite file at path (written to by the engine meanwhile), stored as name."""
        with tempfile.TemporaryDirectory(prefix="ferry-checkpoint-") as scratch:
            snapshot = Path(scratch) / "state.sqlite"
            source = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
            copy = sqlite3.connect(snapshot)
            try:
                source.backup(copy)
            finally:
                copy.close()
                source.close()
            self._put(name, snapshot.read_bytes())

    def save_lines(self, path: Path, name: str) -> None:
        """A journal appended to meanwhile, stored up to its last whole line (a taker appends after it)."""
        if not path.exists():
            return
        data = path.read_bytes()
        self._put(name, data[: data.rfind(b"\n") + 1])

    def save_file(self, path: Path, name: str) -> None:
        if path.exists():
            self._put(name, path.read_bytes())

    def _put(self, name: str, data: bytes) -> None:
        self.connector.put(name, data, WriteSpec(checksum=label(crc32c(data))))

    def close(self) -> None:
        self.connector.close()

