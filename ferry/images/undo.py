"""Undoing one tag a run pushed: its previous manifest put back, or its digest deleted when no other tag holds it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferry.images.oci import Manifest, Registry
from ferry.images.reference import Reference


def undo_push(
    registry_of: Callable[[str], Registry], folder: Path, entry: dict[str, Any], ours: set[str], dry_run: bool
) -> str:
    """Undo one journaled push (its previous manifest's bytes are in folder); ours: the tags the run created."""
    target, digest = entry["target"], entry["digest"]
    ref = Reference.parse(target)
    registry = registry_of(ref.host)
    now = registry.digest(ref.repository, ref.ref)
    if now is None:
        return f"{target} is gone already (deleted with its digest)"
    if now != digest:
        return f"leave {target}: it moved since the run (now {now})"
    if entry["previous"]:
        if not dry_run:
            body = (folder / entry["previous_file"]).read_bytes()
            registry.put_manifest(
                ref.repository, ref.ref, Manifest(entry["previous"], entry["previous_media_type"], body)
            )
        return f"restore {target} to its previous digest {entry['previous']}"
    others = [
        t
        for t in registry.tags(ref.repository)
        if t != ref.ref
        and f"{ref.host}/{ref.repository}:{t}" not in ours
        and registry.digest(ref.repository, t) == digest
    ]
    if others:
        return f"keep {target}: the registry deletes by digest and {digest} is also tagged {', '.join(others)}"
    if dry_run:
        return f"delete {target} ({digest})"
    if not registry.delete(ref.repository, digest):
        return f"{target} remains: the registry does not allow deletes (storage.delete.enabled)"
    return f"deleted {target} ({digest})"
