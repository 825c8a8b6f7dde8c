"""StateStore: shards' state and journals between workers (data_sync's state_url), on a shared path."""

from __future__ import annotations

import json
from pathlib import Path

from connectors.registry import open_connector
from connectors.transfer import ObjectRecord, TransferState
from connectors.transfer.checkpoint import StateStore
from ferry.files import Journal


def store(root: Path) -> StateStore:
    return StateStore(open_connector(str(root / "shared"), {}))


def keys(path: Path) -> list[str]:
    return [entry["key"] for entry in Journal(path).entries()]


def test_journals_are_merged_line_by_line_so_no_worker_loses_another_s_keys(tmp_path: Path) -> None:
    """Worker A journals k1 k2 (copied) and k3 (not yet copied: it died); worker B, restoring A's copy, appends k4;
    A's own file (a folder the driver sees) still holds k3: the driver's merge holds all four, and so does the
    store."""
    shared = store(tmp_path)
    a = Journal(tmp_path / "a" / "created-x.jsonl")
    for key in ("k1", "k2"):
        a.add({"key": key})
    shared.merge_lines(a.path, "runs/r/data_sync/created-x.jsonl")
    a.add({"key": "k3"})  # after A's last copy
    b = Journal(tmp_path / "b" / "created-x.jsonl")
    shared.merge_lines(b.path, "runs/r/data_sync/created-x.jsonl")  # B starts: A's copy
    assert keys(b.path) == ["k1", "k2"]
    b.add({"key": "k4"})
    shared.merge_lines(b.path, "runs/r/data_sync/created-x.jsonl")
    shared.merge_lines(a.path, "runs/r/data_sync/created-x.jsonl")  # the driver, where A's file is
    assert sorted(keys(a.path)) == ["k1", "k2", "k3", "k4"]
    stored = tmp_path / "shared" / "runs" / "r" / "data_sync" / "created-x.jsonl"
    assert sorted(keys(stored)) == ["k1", "k2", "k3", "k4"]
    # Merging again adds nothing (no line twice).
    shared.merge_lines(b.path, "runs/r/data_sync/created-x.jsonl")
    assert sorted(keys(b.path)) == ["k1", "k2", "k3", "k4"]


def test_a_journal_cut_mid_line_is_stored_to_its_last_whole_line(tmp_path: Path) -> None:
    journal = tmp_path / "created-x.jsonl"
    journal.write_text(json.dumps({"key": "k1"}) + "\n" + '{"key": "k')
    shared = store(tmp_path)
    shared.merge_lines(journal, "j.jsonl")
    assert (tmp_path / "shared" / "j.jsonl").read_text() == json.dumps({"key": "k1"}) + "\n"


def test_a_state_is_copied_as_a_snapshot_while_it_is_written_and_restored_whole(tmp_path: Path) -> None:
    state = TransferState(tmp_path / "worker", "s3://src", "s3://dst", "p/")
    for n in range(1000):
        state.record_object(ObjectRecord(f"k{n:04d}", n, "s", "d", None))
    state.flush()
    shared = store(tmp_path)
    name = state.path.relative_to(tmp_path / "worker").as_posix()
    shared.save_state(state.path, name)  # the engine's connection still open, its WAL not checkpointed
    state.record_object(ObjectRecord("later", 1, "s", "d", None))
    state.close()
    assert not list((tmp_path / "worker" / "transfers").glob("*.snapshot"))
    taker = tmp_path / "taker"
    (taker / "transfers").mkdir(parents=True)
    (taker / f"{name}-wal").write_bytes(b"a stale WAL of another database")
    assert shared.restore(name, taker / name)
    restored = TransferState(taker, "s3://src", "s3://dst", "p/")
    try:
        assert [r.key for r in restored.objects()] == [f"k{n:04d}" for n in range(1000)]
    finally:
        restored.close()
    assert not shared.restore("transfers/none.sqlite", taker / "none.sqlite")
