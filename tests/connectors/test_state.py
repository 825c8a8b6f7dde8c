"""A shard's transfer state: one file per (source, target, prefix), and a ferry 0.1 ledger split by prefix on open."""

from __future__ import annotations

import re
import sqlite3

from connectors.base import Part
from connectors.transfer.state import ObjectRecord, TransferState, UploadRecord

SOURCE, TARGET = "s3://models/data", "az://store/data"
JOB = f"{SOURCE} -> {TARGET}"
OTHER_JOB = f"s3://elsewhere/data -> {TARGET}"

# A ledger as ferry 0.1 wrote it: the transfer state of every pair in one file, beside the run log.
LEGACY_SCHEMA = """
CREATE TABLE objects (
    job TEXT NOT NULL, key TEXT NOT NULL, size INTEGER NOT NULL,
    src_sig TEXT NOT NULL, dst_sig TEXT NOT NULL, checksum TEXT,
    PRIMARY KEY (job, key)
) WITHOUT ROWID;
CREATE TABLE uploads (
    job TEXT NOT NULL, key TEXT NOT NULL, upload_id TEXT NOT NULL, size INTEGER NOT NULL,
    src_sig TEXT NOT NULL, part_size INTEGER NOT NULL,
    PRIMARY KEY (job, key)
) WITHOUT ROWID;
CREATE TABLE parts (
    job TEXT NOT NULL, key TEXT NOT NULL, upload_id TEXT NOT NULL, number INTEGER NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL, crc32c INTEGER,
    PRIMARY KEY (job, key, upload_id, number)
) WITHOUT ROWID;
CREATE TABLE phases (plan TEXT, phase TEXT, input_hash TEXT, status TEXT, run_id TEXT, updated REAL, detail TEXT);
CREATE TABLE commits (plan TEXT, phase TEXT, run_id TEXT, input_hash TEXT, committed REAL, rolled_back INTEGER);
CREATE TABLE runs (run_id TEXT, plan TEXT, status TEXT, started REAL, updated REAL, audit_dir TEXT,
                   flow_run_id TEXT, detail TEXT);
"""

LEGACY_ROWS = f"""
INSERT INTO objects VALUES ('{JOB}', 'train/a.bin', 1, 's1', 't1', 'crc32c:00000001');
INSERT INTO objects VALUES ('{JOB}', 'train/b.bin', 2, 's2', 't2', NULL);
INSERT INTO objects VALUES ('{JOB}', 'training.txt', 3, 's3', 't3', NULL);
INSERT INTO objects VALUES ('{JOB}', 'eval/c.bin', 4, 's4', 't4', NULL);
INSERT INTO objects VALUES ('{OTHER_JOB}', 'train/a.bin', 9, 'x', 'y', NULL);
-- In flight when ferry 0.1 stopped: an upload with two of its parts done, under each prefix.
INSERT INTO uploads VALUES ('{JOB}', 'train/model.pt', 'up-train', 300, 'sig-m', 100);
INSERT INTO parts VALUES ('{JOB}', 'train/model.pt', 'up-train', 1, 100, 'e1', 11);
INSERT INTO parts VALUES ('{JOB}', 'train/model.pt', 'up-train', 2, 100, 'e2', 22);
INSERT INTO parts VALUES ('{JOB}', 'train/model.pt', 'up-gone', 1, 100, 'stale', 0);
INSERT INTO uploads VALUES ('{JOB}', 'eval/model.pt', 'up-eval', 300, 'sig-e', 100);
INSERT INTO parts VALUES ('{JOB}', 'eval/model.pt', 'up-eval', 1, 100, 'e3', 33);
INSERT INTO uploads VALUES ('{OTHER_JOB}', 'train/model.pt', 'up-other', 300, 'sig-o', 100);
INSERT INTO parts VALUES ('{OTHER_JOB}', 'train/model.pt', 'up-other', 1, 100, 'e4', 44);
"""


def write_legacy_ledger(state_dir) -> bytes:
    """A ferry 0.1 ledger.sqlite (WAL, as it ran) in state_dir; returns its bytes."""
    state_dir.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(state_dir / "ledger.sqlite")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(LEGACY_SCHEMA + LEGACY_ROWS)
    conn.commit()
    conn.close()
    return (state_dir / "ledger.sqlite").read_bytes()


def rows(state: TransferState, table: str) -> int:
    with sqlite3.connect(state.path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_each_shard_has_its_own_file_named_by_a_hash_of_its_urls_and_prefix(tmp_path) -> None:
    states = [TransferState(tmp_path, SOURCE, TARGET, p) for p in ("", "train/", "eval/")]
    states.append(TransferState(tmp_path, "s3://elsewhere/data", TARGET, "train/"))
    paths = {s.path for s in states}
    assert len(paths) == 4
    assert all(p.parent == tmp_path / "transfers" and re.fullmatch(r"[0-9a-f]{16}\.sqlite", p.name) for p in paths)
    states[1].record_object(ObjectRecord("train/a.bin", 1, "s", "t", None))
    states[1].close()
    again = TransferState(tmp_path, SOURCE, TARGET, "train/")
    assert again.path == states[1].path
    assert [r.key for r in again.objects()] == ["train/a.bin"]
    assert list(states[2].objects()) == []
    with sqlite3.connect(again.path) as conn:
        assert conn.execute("SELECT source, target, prefix FROM shard").fetchall() == [(SOURCE, TARGET, "train/")]
    for state in (again, states[0], states[2], states[3]):
        state.close()


def test_a_ferry_0_1_ledger_is_split_by_prefix_into_the_shard_opened(tmp_path) -> None:
    legacy = write_legacy_ledger(tmp_path)
    state = TransferState(tmp_path, SOURCE, TARGET, "train/")
    # This pair's objects under train/ only: not training.txt, not eval/, not the other pair's.
    assert list(state.objects()) == [
        ObjectRecord("train/a.bin", 1, "s1", "t1", "crc32c:00000001"),
        ObjectRecord("train/b.bin", 2, "s2", "t2", None),
    ]
    # The upload in flight, with its recorded parts: a resume continues mid-object.
    assert state.upload("train/model.pt") == UploadRecord("train/model.pt", "up-train", 300, "sig-m", 100)
    assert state.parts("train/model.pt", "up-train") == [Part(1, 100, "e1", 11), Part(2, 100, "e2", 22)]
    assert state.upload("eval/model.pt") is None
    assert (rows(state, "objects"), rows(state, "uploads"), rows(state, "parts")) == (2, 1, 2)
    state.close()
    assert (tmp_path / "ledger.sqlite").read_bytes() == legacy  # read, never written

    whole = TransferState(tmp_path, SOURCE, TARGET, "")
    assert [r.key for r in whole.objects()] == ["eval/c.bin", "train/a.bin", "train/b.bin", "training.txt"]
    assert whole.upload("eval/model.pt") == UploadRecord("eval/model.pt", "up-eval", 300, "sig-e", 100)
    assert (rows(whole, "uploads"), rows(whole, "parts")) == (2, 3)
    whole.close()


def test_the_legacy_rows_are_taken_once_when_the_shard_file_is_created(tmp_path) -> None:
    write_legacy_ledger(tmp_path)
    state = TransferState(tmp_path, SOURCE, TARGET, "train/")
    state.forget_object("train/a.bin")
    state.end_upload("train/model.pt")
    state.close()
    reopened = TransferState(tmp_path, SOURCE, TARGET, "train/")
    assert [r.key for r in reopened.objects()] == ["train/b.bin"]
    assert reopened.upload("train/model.pt") is None
    reopened.close()


def test_a_state_dir_without_a_legacy_ledger_starts_empty(tmp_path) -> None:
    state = TransferState(tmp_path / "fresh", SOURCE, TARGET, "")
    assert list(state.objects()) == [] and state.upload("k") is None
    state.begin_upload(UploadRecord("k", "u1", 300, "s", 100))
    state.record_part("k", "u1", Part(1, 100, "e", 1))
    state.begin_upload(UploadRecord("k", "u2", 300, "s", 100))  # a new upload forgets the old one's parts
    assert state.parts("k", "u1") == [] and state.upload("k").upload_id == "u2"
    state.close()
    assert state.path.exists() and not (tmp_path / "fresh" / "ledger.sqlite").exists()
