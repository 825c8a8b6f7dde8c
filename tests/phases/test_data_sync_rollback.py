"""data_sync's rollback on a local target, without Prefect: it deletes what the run created and is still what
ferry wrote, keeps what someone changed since, stops between two objects when asked and finishes on the next call."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ferry.audit import AuditFolder
from ferry.errors import Interrupted
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from tests.support import write_plan


def _ran(tmp_path: Path):
    phase = open_phase(load_plan(write_plan(tmp_path, "undo-local")), "data_sync")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    for shard in phase.steps():
        phase.run(shard, audit, Reporter())
    return phase, audit


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_rollback_keeps_an_object_changed_since_ferry_wrote_it(tmp_path: Path) -> None:
    phase, audit = _ran(tmp_path)
    dst = tmp_path / "dst"
    assert _files(dst) == ["a/one.bin", "a/two.bin", "b/three.bin"]
    changed = dst / "a" / "two.bin"
    changed.write_bytes(b"edited by a person")
    os.utime(changed, ns=(1, 1))  # a different mtime, whatever the clock's resolution
    preview = phase.rollback(audit, dry_run=True)
    assert "delete 2 object(s)" in preview.text
    assert preview.items == ["delete a/one.bin", "keep a/two.bin: changed since ferry wrote it", "delete b/three.bin"]
    assert _files(dst) == ["a/one.bin", "a/two.bin", "b/three.bin"]  # a dry run changes nothing
    undo = phase.rollback(audit)
    assert _files(dst) == ["a/two.bin"] and undo.failed == 0
    assert "deleted 2 object(s)" in undo.text and "kept 1" in undo.text
    assert phase.rollback(audit).items == []  # done: nothing the second time


def test_a_stopped_rollback_journals_what_it_undid_and_the_next_call_finishes_it(tmp_path: Path) -> None:
    phase, audit = _ran(tmp_path)
    stop = threading.Event()
    stop.set()  # as if an interrupt were held before the rollback began: it stops after one object
    with pytest.raises(Interrupted):
        phase.rollback(audit, stopping=stop)
    assert len(_files(tmp_path / "dst")) == 2
    # The announcement of the rest lists only what is left.
    assert phase.rollback(audit, dry_run=True).items == ["delete a/two.bin", "delete b/three.bin"]
    undo = phase.rollback(audit)
    assert _files(tmp_path / "dst") == [] and "deleted 3 object(s)" in undo.text
