"""The digest map: what the images phase published, read by the manifests and go-live phases.

The images phase publishes it (`StateLayout.digest_map`) when it commits, atomically: readers see the old
map or the new one; one map per plan, so that plans sharing a state directory never pin each other's. Each
record says which reference the source's manifests use, where that image now lives on the target registry, at
which digest, and which CUDA toolkit it carries, so that the manifests phase pins images by digest and the
go-live phase checks each toolkit against the driver.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class ImageRecord:
    # The reference as the source manifests name it, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:1
    source: str
    # The image on the target registry, by tag, e.g. registry.meta.example/ai-training/trainer:2024.06
    target: str
    # The manifest (or index) digest the target registry holds, "sha256:..."
    digest: str
    # "rebuilt" from a rebased Dockerfile, or "copied" registry to registry.
    kind: Literal["rebuilt", "copied"]
    # The CUDA toolkit version in the image ("12.4.1"), None when it carries none or it is unknown.
    cuda: str | None = None

    @property
    def pinned(self) -> str:
        """The target image by digest: repository@sha256:... (the tag dropped)."""
        return f"{repository(self.target)}@{self.digest}"


def repository(reference: str) -> str:
    """reference without its tag and digest: host[:port]/path."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def read(file: Path) -> dict[str, ImageRecord]:
    """The map published at file by source reference; empty when the images phase has not committed."""
    if not file.exists():
        return {}
    records = json.loads(file.read_text(encoding="utf-8"))["images"]
    return {r["source"]: ImageRecord(**r) for r in records}


def render(records: list[ImageRecord]) -> str:
    """The map's text for records (what is published)."""
    body = {"images": [asdict(r) for r in sorted(records, key=lambda r: r.source)]}
    return json.dumps(body, indent=2) + "\n"
