"""Copying an image registry to registry with skopeo, every platform and its digests kept, again when it may pass."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from ferry.errors import TransientError
from ferry.images.oci import RETRIES
from ferry.images.reference import match_tags
from ferry.images.tool import run_tool

log = structlog.get_logger("ferry.images")


@dataclass(frozen=True)
class Copy:
    """One image to copy: its name under both registries, and its references on each."""

    name: str
    source: str
    target: str


def expand(item: str, source_tags: Callable[[str], list[str]]) -> list[str]:
    """The images a copy entry names: name:tag or name@digest (no tag: latest), or for name:pattern each of the
    source's tags of name (`source_tags(name)`) that the pattern matches, `*` spanning any characters."""
    name, at, digest = item.partition("@")
    repo, _colon, tag = name.rpartition(":") if name.rfind(":") > name.rfind("/") else (name, "", "latest")
    if at:
        return [f"{name}@{digest}"]
    if "*" in tag:
        return [f"{repo}:{t}" for t in match_tags(tag, source_tags(repo))]
    return [f"{repo}:{tag}"]


def copy_image(
    copy: Copy, *, source_tls: bool, target_tls: bool, authfile: Sequence[str], stopping: threading.Event
) -> None:
    """skopeo copy --all --preserve-digests, run again (backing off) after a failure another attempt may pass."""
    argv = ["skopeo", "copy", "--all", "--preserve-digests", "--retry-times", str(RETRIES)]
    argv += [f"--src-tls-verify={str(source_tls).lower()}", f"--dest-tls-verify={str(target_tls).lower()}"]
    argv += [*authfile, f"docker://{copy.source}", f"docker://{copy.target}"]
    # skopeo retries some requests itself, not a 5xx or reset where an upload starts or a manifest is put; a
    # copy again skips the blobs that arrived.
    for attempt in range(RETRIES + 1):
        try:
            run_tool(argv, f"copy {copy.name}")
            return
        except TransientError as exc:
            if attempt == RETRIES or stopping.is_set():
                raise
            log.warning("image copy failed, trying again", image=copy.name, attempt=attempt + 1, error=str(exc))
            stopping.wait(min(2.0 * 2**attempt, 30.0))
