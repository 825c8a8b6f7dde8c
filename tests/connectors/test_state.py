"""A shard's transfer state: one file per (source, target, prefix)."""

from __future__ import annotations

import re
import sqlite3

from connectors.base import Part
from connectors.transfer.state import ObjectRecord, TransferState, UploadRecord

SOURCE, TARGET = "s3://models/data", "az://store/data"


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


def test_a_new_state_dir_starts_empty(tmp_path) -> None:
    state = TransferState(tmp_path / "fresh", SOURCE, TARGET, "")
    assert list(state.objects()) == [] and state.upload("k") is None
    state.begin_upload(UploadRecord("k", "u1", 300, "s", 100))
    state.record_part("k", "u1", Part(1, 100, "e", 1))
    state.begin_upload(UploadRecord("k", "u2", 300, "s", 100))  # a new upload forgets the old one's parts
    assert state.parts("k", "u1") == [] and state.upload("k").upload_id == "u2"
    state.close()
    assert state.path.exists()


def test_a_state_file_from_before_adoption_gains_the_proof_column_and_keeps_its_records(tmp_path) -> None:
    first = TransferState(tmp_path, SOURCE, TARGET, "")
    path = first.path
    first.close()
    with sqlite3.connect(path) as conn:  # the objects table as ferry wrote it before proofs were recorded
        conn.execute("DROP TABLE objects")
        conn.execute(
            "CREATE TABLE objects (key TEXT PRIMARY KEY, size INTEGER NOT NULL, src_sig TEXT NOT NULL,"
            " dst_sig TEXT NOT NULL, checksum TEXT) WITHOUT ROWID"
        )
        conn.execute("INSERT INTO objects VALUES ('old.bin', 3, 's', 't', 'crc32c:00000001')")
    state = TransferState(tmp_path, SOURCE, TARGET, "")
    state.record_object(ObjectRecord("seeded.bin", 5, "s2", "t2", None, "md5_etag"))
    assert list(state.objects()) == [
        ObjectRecord("old.bin", 3, "s", "t", "crc32c:00000001", None),
        ObjectRecord("seeded.bin", 5, "s2", "t2", None, "md5_etag"),
    ]
    state.close()
