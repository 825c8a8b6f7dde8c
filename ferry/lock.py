"""One run per state directory at a time: `ferry run` (and a scheduled run of the same plan), `ferry sync` and
`ferry rollback` hold an `fcntl.flock` on `<state>/run.lock` while they change anything.

The file holds who holds it (run id, pid, host, command, since when), so that a second run is refused with one
line naming the first. The kernel releases the lock when its process dies, however it dies (kill -9
included), so a record left in a file whose lock is free is stale: the next run takes the lock over and says
whose it was. flock is local to one host's kernel: two hosts sharing a state directory over NFS are not kept
apart (most NFS clients emulate flock with byte-range locks; some do not lock at all).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import structlog

from ferry.errors import FerryError

LOCK_FILE = "run.lock"
log = structlog.get_logger("ferry.lock")


class Busy(FerryError):
    """Another process holds the state directory's lock: this run changes nothing."""


def _describe(holder: dict) -> str:
    who = f"run {holder['run_id']}" if holder.get("run_id") else f"`{holder.get('command', 'ferry')}`"
    return f"{who} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since {holder.get('since', '?')})"


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode("utf-8", "replace").strip()
    if not text:
        return {}
    try:
        holder = json.loads(text)
    except ValueError:
        return {"command": "an unreadable lock record"}
    return holder if isinstance(holder, dict) else {}


@contextmanager
def held(state_dir: Path, command: str, run_id: str | None = None) -> Iterator[dict]:
    """Hold the lock of state_dir for the block; Busy (nothing changed) if another process holds it.

    Yields the record written (run id, pid, host, command, since). A stale record is taken over with a warning.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            raise Busy(
                f"{path.parent} is in use by {_describe(holder) if holder else 'another ferry process'}: "
                "wait for it to end (or stop it) and run the same command again; nothing was changed"
            ) from None
        stale = _read(fd)
        if stale:
            log.warning(
                f"took over the lock of {_describe(stale)}, which ended without releasing it (killed or crashed): "
                "what it left is resumed or rolled back as its phase records say"
            )
        record = {
            "run_id": run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        try:
            yield record
        finally:
            os.ftruncate(fd, 0)  # released cleanly: no record left to take over
    finally:
        os.close(fd)  # closing the descriptor releases the flock
