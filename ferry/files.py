"""Files written whole or not at all: the one atomic write, and the append-only journal that undo reads.

Every file ferry writes for a reader (the audit folder, what a phase publishes, a Secret snapshot, a cache's
manifest) goes through `write_atomic`, so that a reader, or the run after a crash, sees the old file or the
new one, never half of one. What a step did, item by item, goes into a `Journal`: one JSON object per line,
flushed as each is added, so that an interrupted step's undo knows everything it had done.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: str | bytes, *, private: bool = False) -> Path:
    """Replace path with data, atomically; private: readable by the owner only (its folder too, when created)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700 if private else 0o777)
    staging = path.with_name(f".{path.name}.partial")
    body = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    with os.fdopen(fd, "wb") as file:
        file.write(body)
    os.replace(staging, path)
    return path


class Journal:
    """An append-only JSON-lines file: each entry one line, on disk (flushed) once add() returns; safe to share
    between threads (each entry is one write of one line)."""

    def __init__(self, path: Path):
        self.path = path

    def add(self, entry: Any) -> None:
        with self.appending() as add:
            add(entry)

    @contextlib.contextmanager
    def appending(self) -> Iterator[Callable[[Any], None]]:
        """add() for many entries (a sync's created keys, one per object): the file opened once; each entry is
        written and flushed as add() does it, one line at a time from any thread."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = threading.Lock()
        with self.path.open("a", encoding="utf-8") as file:

            def add(entry: Any) -> None:
                line = json.dumps(entry, sort_keys=True, default=str) + "\n"
                with lock:
                    file.write(line)
                    file.flush()

            yield add

    def entries(self) -> Iterator[Any]:
        """Every entry, oldest first; none when nothing was journalled. A last line cut short by a crash (the entry
        was never complete, so nothing it names was done after it) is left out."""
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
            except ValueError:
                if n == len(lines):
                    return
                raise
            yield entry

    def keys(self) -> set[str]:
        """The `key` of every entry: what a rollback journalled as undone. A line that is no JSON object is a key
        as rollbacks wrote them before this one journal format (one per line), and is read as such."""
        if not self.path.exists():
            return set()
        keys = set()
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("{"):
                try:
                    keys.add(json.loads(line)["key"])
                except ValueError:  # the last line of a killed rollback, cut short
                    continue
            elif line:
                keys.add(line)
        return keys
