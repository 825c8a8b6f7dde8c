"""Adoption: a target object another tool wrote (an earlier `aws s3 sync`, rclone, DataSync) proven to hold the
source's bytes from what the stores already say, and recorded in the transfer state instead of copied again.

The proofs, in order; the first that both sides can give decides:

- `checksum`: both stores' full-object checksums of one algorithm (ferry's CRC32C, S3's CRC64NVME, CRC32, SHA-256,
  SHA-1);
- `md5_etag`: equal MD5s (unencrypted S3 objects' plain ETags, Azure's Content-MD5);
- `multipart_etag`: equal S3 multipart ETags, the MD5 of the same count of part MD5s;
- `reading`: one side read and hashed as the other keeps its digests (the MD5 of its parts at its part size, which
  S3 tells by a HEAD of part 1): the source when it is local, else the target (a cloud source is not read twice);
  only where the target holds ferry's checksum and the source gives nothing to hash against is a cloud source read.

What cannot be proven equal is copied; `--checksum` reads both sides instead (the engine's own compare).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connectors.base import FULL_OBJECT_DIGESTS, MD5, MD5_OF_PARTS, Connector, ObjectInfo

CHECKSUM, MD5_ETAG, MULTIPART_ETAG, READING = "checksum", "md5_etag", "multipart_etag", "reading"
PROOFS = (CHECKSUM, MD5_ETAG, MULTIPART_ETAG, READING)

# read(connector, info, md5, part_size): info with the checksum and digests one read of the object gives.
Reader = Callable[[Connector, ObjectInfo, bool, "int | None"], ObjectInfo]


def by_stores(a: ObjectInfo, b: ObjectInfo) -> tuple[bool | None, str]:
    """(True, proof) when what is known of a and b proves them the same bytes, (False, why) when it proves them
    different, (None, "") when it proves neither (nothing in common, or multipart ETags of other part sizes)."""
    if a.checksum and b.checksum:
        if a.checksum == b.checksum:
            return True, CHECKSUM
        return False, f"checksums differ ({a.checksum}, {b.checksum})"
    da, db = a.digests or {}, b.digests or {}
    for kind in FULL_OBJECT_DIGESTS:
        if kind in da and kind in db:
            return (True, CHECKSUM) if da[kind] == db[kind] else (False, f"{kind.upper()} checksums differ")
    if MD5 in da and MD5 in db:
        return (True, MD5_ETAG) if da[MD5] == db[MD5] else (False, f"MD5s differ ({da[MD5]}, {db[MD5]})")
    if MD5_OF_PARTS in da and da.get(MD5_OF_PARTS) == db.get(MD5_OF_PARTS):
        return True, MULTIPART_ETAG
    return None, ""


def _hashable(info: ObjectInfo) -> bool:
    """Whether info carries something a read of the other side can be hashed against."""
    return bool(info.checksum) or bool({MD5, MD5_OF_PARTS} & set(info.digests or {}))


def prove(
    source: Connector, target: Connector, src: ObjectInfo, dst: ObjectInfo, call: Callable[..., Any], read: Reader
) -> tuple[bool, str, str | None]:
    """Whether the target's object holds the source's bytes (equal sizes, no record of ferry's): (True, proof,
    ferry's checksum of the bytes where known) or (False, why not, None). call runs a request under the retry
    policy."""
    s, d = call(source.stat, src.key), call(target.stat, dst.key)
    verdict, how = by_stores(s, d)
    if verdict is not None:
        return verdict, how, (s.checksum or d.checksum) if verdict else None
    if source.network_host() is None or (_hashable(d) and not _hashable(s)):
        side, info, other, keeper = source, s, d, target
    else:
        side, info, other, keeper = target, d, s, source
    if not _hashable(other):
        return False, "nothing proves the target's object equal to the source's", None
    digests = other.digests or {}
    part_size = call(keeper.part_size, other.key) if MD5_OF_PARTS in digests else None
    got = read(side, info, MD5 in digests, part_size)
    verdict, how = by_stores(got, other)
    if verdict:
        return True, READING, got.checksum
    if how:
        return False, how, None
    if part_size is None:
        return False, "its multipart ETag's part size is not told by the store", None
    return False, f"read in {part_size}-byte parts, it does not make the multipart ETag {digests[MD5_OF_PARTS]}", None
