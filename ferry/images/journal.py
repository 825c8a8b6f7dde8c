"""The images journal of a run: the tags it pushed, each with the manifest it replaced, and what it recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ferry.audit import AuditFolder
from ferry.files import Journal
from ferry.images.oci import Manifest

JOURNAL = "journal.jsonl"
# What runs journaled before the one journal format: one JSON document, rewritten on every change.
EARLIER_JOURNAL = "journal.json"
KINDS = ("pushed", "records", "failed", "skipped", "unmapped")


class PushJournal:
    """The tags a run pushed (each with its digest and the manifest it replaced), its records, skips, failures
    and unmapped bases: one line per entry, on disk before the next push, so a crash keeps what rollback needs.

    Each attempt of the step (a task retry runs it again in the same run) begins with a marker: what it pushed
    stays undoable, the rest is the last attempt's.
    """

    def __init__(self, audit: AuditFolder):
        self._lines = Journal(audit.path("images", JOURNAL))
        self._kept = audit.path("images", "kept")
        self._kept.mkdir(exist_ok=True)
        self._lines.add({"kind": "attempt"})

    def add(self, kind: str, entry: dict[str, Any]) -> None:
        self._lines.add({"kind": kind, "entry": entry})

    @property
    def data(self) -> dict[str, list[dict[str, Any]]]:
        """What the run journaled, by kind."""
        return read_journal(self._lines.path.parent.parent)

    def keep(self, previous: Manifest) -> str:
        """Keep the bytes of a manifest a push replaces; the file name, in the audit folder."""
        name = f"kept/{previous.digest.removeprefix('sha256:')}"
        (self._kept.parent / name).write_bytes(previous.body)
        return name

    def add_push(self, target: str, digest: str, previous: Manifest | None) -> None:
        """Journal a pushed tag with the manifest it replaced (its bytes kept), which is all its undo needs."""
        self.add(
            "pushed",
            {
                "target": target,
                "digest": digest,
                "previous": previous.digest if previous else None,
                "previous_media_type": previous.media_type if previous else None,
                "previous_file": self.keep(previous) if previous else None,
            },
        )


def read_journal(audit_root: Path) -> dict[str, list[dict[str, Any]]]:
    """What the run journaled, by kind (empty lists when it pushed and recorded nothing): every attempt's pushes,
    the last attempt's records, skips, failures and unmapped bases. A run journaled before this format is read
    from its one JSON document."""
    folder = audit_root / "images"
    if not (folder / JOURNAL).exists() and (folder / EARLIER_JOURNAL).exists():
        earlier = json.loads((folder / EARLIER_JOURNAL).read_text(encoding="utf-8"))
        return {kind: earlier.get(kind, []) for kind in KINDS}
    data: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for line in Journal(folder / JOURNAL).entries():
        if line["kind"] == "attempt":
            data = {k: (v if k == "pushed" else []) for k, v in data.items()}
        else:
            data[line["kind"]].append(line["entry"])
    return data
