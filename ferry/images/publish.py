"""Publishing a run's digest map for the phases after it, keeping the map it replaced; and putting that one back."""

from __future__ import annotations

import json
from pathlib import Path

from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.digest_map import ImageRecord


def publish(audit: AuditFolder, published: Path, records: list[ImageRecord]) -> bool:
    """Publish records at published (keeping the map it replaces for rollback); a copy goes to the audit folder.
    Whether the published map changed."""
    previous = published.read_text(encoding="utf-8") if published.exists() else None
    if previous is not None:
        audit.write_text("images", "previous-digests.json", previous)
    digest_map.publish(published, records)
    audit.write_json("images", "published.json", {"path": str(published)})
    text = published.read_text(encoding="utf-8")
    audit.write_text("images", "digests.json", text)
    return previous != text


def unpublish(folder: Path, dry_run: bool) -> list[str]:
    """Put back the map the run's publish replaced (or remove the run's), unless another run published since."""
    if not (folder / "published.json").exists():
        return []
    published = Path(json.loads((folder / "published.json").read_text(encoding="utf-8"))["path"])
    ours = folder / "digests.json"
    live = published.read_text(encoding="utf-8") if published.exists() else None
    if ours.exists() and live != ours.read_text(encoding="utf-8"):
        # Published over since (by a later run): not this run's to undo.
        return [f"leave {published}: it no longer holds the map run {folder.parent.name} published"]
    previous = folder / "previous-digests.json"
    if previous.exists():
        if not dry_run:
            records = json.loads(previous.read_text(encoding="utf-8"))["images"]
            digest_map.publish(published, [ImageRecord(**r) for r in records])
        return [f"restore {published} from {previous}"]
    if not dry_run:
        published.unlink(missing_ok=True)
    return [f"remove {published}"]
