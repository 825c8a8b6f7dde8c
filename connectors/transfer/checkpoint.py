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
        """A consistent snapshot of the SQLite file at path (written to by the engine meanwhile), made beside it and
        stored as name."""
        snapshot = path.with_name(path.name + ".snapshot")
        snapshot.unlink(missing_ok=True)
        source = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        copy = sqlite3.connect(snapshot)
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
        try:
            self._put(name, snapshot.read_bytes())
        finally:
            snapshot.unlink(missing_ok=True)

    def merge_lines(self, path: Path, name: str) -> None:
        """A journal kept here and in the store as the union of their lines: the stored lines this file lacks (an
        earlier attempt's, another worker's) appended to it, then the file stored up to its last whole line (the
        engine may be appending). Lines are only ever added: no worker's write loses another's."""
        try:
            stored = self.connector.get(name)[0].splitlines()
        except NotFoundError:
            stored = []
        held = path.read_bytes() if path.exists() else b""
        held = held[: held.rfind(b"\n") + 1]
        known = set(held.splitlines())
        missing = b"".join(line + b"\n" for line in dict.fromkeys(stored) if line and line not in known)
        if missing:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as file:
                file.write(missing)
        if not known <= set(stored):  # the store lacks a line this file holds
            self._put(name, held + missing)

    def save_file(self, path: Path, name: str) -> None:
        """A file stored whole, where it exists."""
        if path.exists():
            self._put(name, path.read_bytes())

    def _put(self, name: str, data: bytes) -> None:
        self.connector.put(name, data, WriteSpec(checksum=label(crc32c(data))))

    def close(self) -> None:
        self.connector.close()

