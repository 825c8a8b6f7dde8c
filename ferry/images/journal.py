"""The images journal of a run: the tags it pushed, each with the manifest it replaced, and what it recorded."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ferry.audit import AuditFolder
from ferry.images.oci import Manifest

JOURNAL = "journal.json"


class Journal:
    """The tags a run pushed (each with its digest and the manifest it replaced), its records, skips, failures
    and unmapped bases; rewritten on every change, so a crash keeps what rollback needs (thread-safe)."""

    def __init__(self, audit: AuditFolder):
        self._file = audit.path("images", JOURNAL)
        self._kept = audit.path("images", "kept")
        self._kept.mkdir(exist_ok=True)
        self._lock = threading.Lock()
        self.data: dict[str, list[dict[str, Any]]] = {
            key: [] for key in ("pushed", "records", "failed", "skipped", "unmapped")
        }
        if self._file.exists():  # the step again in the same run (a task retry): what it pushed stays undoable
            self.data["pushed"] = json.loads(self._file.read_text(encoding="utf-8"))["pushed"]

    def add(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self.data[key].append(entry)
            self._file.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

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
    """What the run journaled (empty when it pushed and recorded nothing)."""
    file = audit_root / "images" / JOURNAL
    return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
