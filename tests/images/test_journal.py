"""The images journal: one line per entry, every attempt's pushes kept, and runs journaled before it still read."""

from __future__ import annotations

import json

from ferry.audit import AuditFolder
from ferry.images.journal import EARLIER_JOURNAL, PushJournal, read_journal
from ferry.images.oci import Manifest

PUSH = {"target": "reg.example/ai/a:1", "digest": "sha256:" + "a" * 64}


def test_a_retried_step_keeps_every_attempts_pushes_and_only_the_last_attempts_records(tmp_path) -> None:
    audit = AuditFolder(tmp_path / "r1")
    first = PushJournal(audit)
    first.add_push(PUSH["target"], PUSH["digest"], None)
    first.add("records", {"source": "src/a:1", "target": PUSH["target"], "kind": "copied"})
    first.add("failed", {"image": "b", "error": "503"})
    previous = Manifest("sha256:" + "b" * 64, "application/vnd.oci.image.manifest.v1+json", b"{}")
    again = PushJournal(audit)  # the task retried: the same step in the same run
    again.add_push("reg.example/ai/b:1", "sha256:" + "c" * 64, previous)
    data = read_journal(audit.root)
    assert [p["target"] for p in data["pushed"]] == [PUSH["target"], "reg.example/ai/b:1"]
    assert data["pushed"][1]["previous_file"] == f"kept/{'b' * 64}"
    assert (audit.root / "images" / data["pushed"][1]["previous_file"]).read_bytes() == b"{}"
    assert (data["records"], data["failed"], data["skipped"], data["unmapped"]) == ([], [], [], [])
    # A record's own "kind" (copied or rebuilt) is its own: the journal's kinds do not collide with it.
    again.add("records", {"source": "src/b:1", "target": "reg.example/ai/b:1", "kind": "rebuilt"})
    assert read_journal(audit.root)["records"][0]["kind"] == "rebuilt"


def test_a_run_journaled_before_the_one_format_is_read_from_its_document(tmp_path) -> None:
    folder = tmp_path / "r0" / "images"
    folder.mkdir(parents=True)
    earlier = {"pushed": [{**PUSH, "previous": None}], "records": [], "failed": [], "skipped": [], "unmapped": []}
    (folder / EARLIER_JOURNAL).write_text(json.dumps(earlier, indent=2, sort_keys=True) + "\n")
    assert read_journal(tmp_path / "r0")["pushed"] == earlier["pushed"]
    assert read_journal(tmp_path / "nothing") == {k: [] for k in earlier}
