"""The one atomic write and the one journal format (ferry/files.py)."""

from __future__ import annotations

import json
import stat

import pytest

from ferry.files import Journal, write_atomic


def test_a_write_replaces_the_file_whole_and_leaves_no_staging(tmp_path) -> None:
    path = tmp_path / "sub" / "map.json"
    write_atomic(path, "old\n")
    write_atomic(path, b"new\n")
    assert path.read_bytes() == b"new\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["map.json"]


def test_a_private_write_is_the_owners_alone(tmp_path) -> None:
    path = write_atomic(tmp_path / "secrets" / "run-1.json", "{}", private=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_journal_is_one_json_line_per_entry_in_order(tmp_path) -> None:
    journal = Journal(tmp_path / "run" / "created.jsonl")
    assert list(journal.entries()) == [] and journal.keys() == set()
    for entry in ("a/1.bin", {"key": "k", "action": "created"}, 7):
        journal.add(entry)
    assert journal.path.read_text().splitlines() == ['"a/1.bin"', '{"action": "created", "key": "k"}', "7"]
    assert list(journal.entries()) == ["a/1.bin", {"key": "k", "action": "created"}, 7]


def test_a_last_line_cut_short_by_a_crash_is_left_out_and_a_broken_one_before_it_is_an_error(tmp_path) -> None:
    journal = Journal(tmp_path / "applied.jsonl")
    journal.add({"key": "a"})
    with journal.path.open("a") as file:
        file.write('{"key": "b", "act')  # killed mid-write: that object was never changed
    assert list(journal.entries()) == [{"key": "a"}]
    journal.path.write_text('{"key": "a"}\n{"ke\n{"key": "c"}\n')
    with pytest.raises(json.JSONDecodeError):
        list(journal.entries())


def test_the_keys_a_rollback_undid_in_either_format(tmp_path) -> None:
    journal = Journal(tmp_path / "rollback-undone.jsonl")
    # As rollbacks wrote them before the one journal format: one key per line.
    journal.path.write_text("apps/v1|Deployment|ml|trainer\nreg.example/ai/eval:1\n")
    journal.add({"key": "v1|ConfigMap|ml|settings"})
    assert journal.keys() == {"apps/v1|Deployment|ml|trainer", "reg.example/ai/eval:1", "v1|ConfigMap|ml|settings"}


def test_appending_from_many_threads_keeps_whole_lines_each_on_disk_when_added(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    journal = Journal(tmp_path / "deep" / "created.jsonl")
    journal.add("first")
    with journal.appending() as add:
        add({"key": "k" * 5000})  # longer than a write buffer's worth of short lines
        assert list(journal.entries()) == ["first", {"key": "k" * 5000}], "flushed as it is added, not at the end"
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(add, (f"key-{n}" for n in range(2000))))
    lines = (tmp_path / "deep" / "created.jsonl").read_text().splitlines()
    assert len(lines) == 2002 and all(json.loads(line) for line in lines)
    assert sorted(list(journal.entries())[2:]) == sorted(f"key-{n}" for n in range(2000))
