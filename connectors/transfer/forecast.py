"""What a run would do with the copies and deletes its diff decided: sizes by bucket, multipart uploads and their parts,
where the bytes travel, and the calls each end would be sent, as the route sends them in a run without faults.

The engine tallies every copy it decides (a dry run decides them all and copies none), so an estimate is the run's
own diff and the run's own route decisions, not a second model of them.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from connectors.base import ARCHIVE_CLASSES, REQUEST_CLASSES, Connector, ObjectInfo
from connectors.transfer.route import Route
from connectors.transfer.settings import part_size_for
from ferry.errors import PermanentError

KiB = 1 << 10
# The size buckets of the histogram: each bucket holds sizes up to its edge (the last, everything above).
SIZE_EDGES = (64 * KiB, 1 << 20, 16 << 20, 256 << 20, 4 << 30)
# Intelligent-Tiering copies whose keys a forecast keeps, in key order per shard, for an estimate to ask each where it
# sits (its archive tiers need a restore; a listing does not say which: a HEAD does).
TIERING_KEYS = 1000
# An S3 multipart ETag (the MD5 of the parts' MD5s, and their count): streamed, such an object is read in the part
# size the source wrote it in, which the route learns when the copy begins (connectors/transfer/route.py).
_MULTIPART_ETAG = re.compile(r"[0-9a-f]{32}-[0-9]+")


def bucket_of(size: int) -> int:
    """The histogram bucket a size falls in (an index into SIZE_EDGES, or its length for the largest)."""
    return bisect.bisect_left(SIZE_EDGES, size)


@dataclass
class Forecast:
    """The copies and deletes a run decided, and the calls it makes (or would make) for them, per end."""

    copies: int = 0
    bytes: int = 0
    # Of the copies: objects the target holds already, in another version (copied again).
    recopies: int = 0
    recopy_bytes: int = 0
    deletes: int = 0
    delete_bytes: int = 0
    multipart_objects: int = 0
    multipart_bytes: int = 0
    parts: int = 0
    # Copies by size bucket (bucket_of): [objects, bytes].
    sizes: dict[int, list[int]] = field(default_factory=dict)
    # Bytes by how they travel: copied by the stores ("server"), pulled by the target from a URL ("url"), or read
    # from the source and written through ferry ("stream"). Only the last two leave the source's store.
    by_route: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("server", "url", "stream"), 0))
    # Large objects whose part size the source decides when the copy begins (a multipart ETag, streamed): their
    # parts are counted at the plan's part size, and the HEADs that learn the source's as one (S3 may need three).
    source_part_sizes: int = 0
    # Objects no part size the target allows can carry: the run fails each, sending nothing for it.
    too_large: int = 0
    # Copies in an archive class (ARCHIVE_CLASSES), by class: [objects, bytes]; a run cannot read them before a
    # restore. And copies in Intelligent-Tiering, whose archive tiers a listing does not tell.
    archived: dict[str, list[int]] = field(default_factory=dict)
    tiering: int = 0
    # The first TIERING_KEYS of those Intelligent-Tiering copies: (key, size).
    tiering_keys: list[tuple[str, int]] = field(default_factory=list)
    calls: dict[str, Counter[str]] = field(default_factory=lambda: {"source": Counter(), "target": Counter()})
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def copy(self, src: ObjectInfo, dst: ObjectInfo | None, route: Route) -> None:
        """One object to copy (dst: what the target holds now, None if nothing), as route would copy it."""
        # Once per object decided: the calls as (name, count) pairs, added under the lock.
        size = src.size
        mode, learns = route.upload_mode(), False
        if route.whole(size):
            parts = 0
            if mode == "server":
                source = [("stat", 1)] if route.target.copy_checks_source(src) else []
                target = [("copy_from", 1)]
            else:
                source, target = [("get", 1)], [("put", 1)]
                mode = "stream"  # a whole object is never pulled from a URL
        else:
            try:
                parts = math.ceil(size / part_size_for(size, route.settings, route.target)) or 1
            except PermanentError:  # the run fails it (TooLarge): nothing sent for it
                with self.lock:
                    self.too_large += 1
                return
            # begin, complete, and the read-back of what was assembled; the source's stat before the copy
            source, target = [("stat", 1)], [("begin", 1), ("complete", 1), ("stat", 1)]
            if mode == "server":
                target.append(("copy_part_from", parts))
            else:
                source.append(("stat", 1))  # unchanged while it was copied?
                learns = bool(_MULTIPART_ETAG.fullmatch(src.signature))
                if learns:
                    source.append(("part_size", 1))
                if mode == "url":
                    target.append(("put_part_from_url", parts))
                else:
                    source.append(("open_range", parts))
                    target.append(("put_part", parts))
        with self.lock:
            self.copies += 1
            self.bytes += size
            if dst is not None:
                self.recopies += 1
                self.recopy_bytes += size
            _tally(self.sizes, bucket_of(size), 1, size)
            self.by_route[mode] += size
            if src.storage_class in ARCHIVE_CLASSES:
                _tally(self.archived, src.storage_class, 1, size)
            if src.storage_class == "INTELLIGENT_TIERING":
                self.tiering += 1
                if len(self.tiering_keys) < TIERING_KEYS:
                    self.tiering_keys.append((src.key, size))
            if parts:
                self.multipart_objects += 1
                self.multipart_bytes += size
                self.parts += parts
                self.source_part_sizes += int(learns)
            calls = self.calls["source"]
            for name, n in source:
                calls[name] += n
            calls = self.calls["target"]
            for name, n in target:
                calls[name] += n

    def delete(self, dst: ObjectInfo | None) -> None:
        """One object to delete from the target."""
        with self.lock:
            self.deletes += 1
            self.delete_bytes += dst.size if dst is not None else 0
            self.calls["target"]["delete"] += 1

    def add(self, other: Forecast) -> None:
        """Fold another shard's forecast into this one."""
        with self.lock:
            for name in ("copies", "bytes", "recopies", "recopy_bytes", "deletes", "delete_bytes", "multipart_objects",
                         "multipart_bytes", "parts", "source_part_sizes", "tiering", "too_large"):  # fmt: skip
                setattr(self, name, getattr(self, name) + getattr(other, name))
            for bucket, (objects, size) in other.sizes.items():
                _tally(self.sizes, bucket, objects, size)
            for kind, (objects, size) in other.archived.items():
                _tally(self.archived, kind, objects, size)
            self.tiering_keys += other.tiering_keys[: TIERING_KEYS - len(self.tiering_keys)]
            for mode, size in other.by_route.items():
                self.by_route[mode] += size
            for side, calls in other.calls.items():
                self.calls[side].update(calls)

    def requests(self, side: str, connector: Connector, listing: dict[str, int] | None) -> dict[str, int] | None:
        """The requests, by class, a run sends one end: what its diff sent (listing: a dry run's own count, the
        listing, the checks and any proofs, which the run sends again) and what its copies and deletes send. None
        where the connector does not count its requests."""
        if listing is None or not connector.call_requests:
            return None
        sent: Counter[str] = Counter(listing)
        for call, n in self.calls[side].items():
            for kind, per_call in connector.call_requests.get(call, {"OTHER": 1}).items():
                sent[kind] += per_call * n
        return {kind: sent[kind] for kind in REQUEST_CLASSES if sent[kind]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects_to_copy": self.copies,
            "bytes_to_copy": self.bytes,
            "objects_to_recopy": self.recopies,
            "bytes_to_recopy": self.recopy_bytes,
            "objects_to_delete": self.deletes,
            "bytes_to_delete": self.delete_bytes,
            "multipart_objects": self.multipart_objects,
            "multipart_bytes": self.multipart_bytes,
            "multipart_parts": self.parts,
            "bytes_by_route": dict(self.by_route),
            "source_part_sizes": self.source_part_sizes,
            "objects_too_large": self.too_large,
            "archived": {kind: {"objects": n, "bytes": size} for kind, (n, size) in sorted(self.archived.items())},
            "intelligent_tiering_objects": self.tiering,
        }


def _tally(table: dict[Any, list[int]], key: Any, objects: int, size: int) -> None:
    """Add objects and their bytes to table's [objects, bytes] under key."""
    counts = table.setdefault(key, [0, 0])
    counts[0] += objects
    counts[1] += size
