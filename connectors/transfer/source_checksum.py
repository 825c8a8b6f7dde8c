"""The source's own word: the bytes ferry reads held to the checksum the source keeps of them, so that a corruption
between the source and ferry is caught, not only one between ferry and the target.

Only what the source holds is computed, one kind per object, the first it holds of:

- a whole object (one read): ferry's CRC32C or S3's native one (computed anyway), CRC64NVME, CRC32, SHA-1, SHA-256,
  then a plain MD5 (an unencrypted S3 object's single-part ETag, Azure's Content-MD5);
- a multipart copy (parallel ranged reads): what combines from its parts, CRC32C, CRC64NVME, CRC32
  (`connectors.checksum.combine_parts`), or an S3 multipart ETag where ferry's parts are the source's
  (`read_in_parts`: the upload then takes the source's part size). A SHA or a plain MD5 of an object read in parts
  is not held: it cannot be made from parallel parts.
"""

from __future__ import annotations

import base64
import hashlib
import math

from connectors.base import MD5, MD5_OF_PARTS, Capabilities, ObjectInfo
from connectors.checksum import CRC32C, CRCS, combine_parts, label, md5_hex, md5_of_parts, parse, to_b64
from ferry.errors import ChecksumMismatch

# What a whole object's read is held to, in order of preference: CRC32C first (ferry computes it anyway), then by
# cost (measured here per GiB: CRC64NVME 0.05 s, CRC32 0.5 s, SHA-1 and SHA-256 0.9 s, MD5 1.6 s).
WHOLE = (CRC32C.name, "crc64nvme", "crc32", "sha1", "sha256", MD5)
# What parallel parts' reads are held to: what combines.
PARTS = (CRC32C.name, "crc64nvme", "crc32", MD5_OF_PARTS)
# Every kind, as the summary, the report and the gate count them.
KINDS = (CRC32C.name, "crc64nvme", "crc32", "sha256", "sha1", MD5, MD5_OF_PARTS)
# Why the bytes ferry read of a copy were not held to a checksum the source does hold: a SHA or a plain MD5 of an
# object read in parallel parts (it cannot be made from them), or parts an earlier run sent of a resumed upload
# (their sums are not in the transfer state). Counted apart (`not_held_to_source`); the data gate still compares.
READ_IN_PARTS = "read_in_parts"
RESUMED_PARTS = "resumed_parts"
NOT_HELD = (READ_IN_PARTS, RESUMED_PARTS)
_HASHES = {"sha1": hashlib.sha1, "sha256": hashlib.sha256}


def held(info: ObjectInfo, kinds: tuple[str, ...]) -> str | None:
    """The first of kinds the source holds of info's bytes; None when it holds none of them."""
    digests = info.digests or {}
    for kind in kinds:
        if (parse(info.checksum) is not None) if kind == CRC32C.name else kind in digests:
            return kind
    return None


def whole(source: str, info: ObjectInfo, data: bytes, crc: int) -> str | None:
    """Hold data, the whole object read, to what the source holds of it (crc: its CRC32C, computed already): the
    kind it was held to, None when the source holds nothing to hold it to; ChecksumMismatch when they differ."""
    kind = held(info, WHOLE)
    if kind is None:
        return None
    if kind == CRC32C.name:
        read = label(crc)
    elif kind in CRCS:
        read = to_b64(CRCS[kind].compute(data, 0), CRCS[kind].width)
    elif kind in _HASHES:
        read = base64.b64encode(_HASHES[kind](data).digest()).decode()
    else:
        read = md5_hex(data)
    _compare(source, info, kind, read)
    return kind


def part(kind: str | None, data: bytes) -> int | bytes | None:
    """What a part's bytes give towards the whole object's kind: its CRC or MD5; None for CRC32C (every part's
    receipt carries it) or no kind."""
    if kind in CRCS and kind != CRC32C.name:
        return CRCS[kind].compute(data, 0)
    if kind == MD5_OF_PARTS:
        return hashlib.md5(data, usedforsecurity=False).digest()
    return None


def parts(source: str, info: ObjectInfo, kind: str, values: list[tuple[int | bytes, int]]) -> None:
    """Hold the parts' values (from part(), with their lengths, in order) to what the source holds of the whole
    object; ChecksumMismatch when they differ."""
    if kind == MD5_OF_PARTS:
        read = md5_of_parts([value for value, _ in values])  # type: ignore[misc]
    elif kind == CRC32C.name:
        read = label(combine_parts(values))  # type: ignore[arg-type]
    else:
        crc = CRCS[kind]
        read = to_b64(combine_parts(values, crc), crc.width)  # type: ignore[arg-type]
    _compare(source, info, kind, read)


def read_in_parts(info: ObjectInfo, their_part_size: int | None, target: Capabilities, budget: int) -> bool:
    """Whether an upload can take the source's part size, so that its parts' MD5s make the source's multipart ETag:
    the store tells it, it makes the ETag's part count, and the target and the memory budget allow it."""
    if not their_part_size:
        return False
    count = int((info.digests or {})[MD5_OF_PARTS].rpartition("-")[2])
    fits = target.min_part_size <= their_part_size <= min(target.max_part_size, budget)
    return fits and math.ceil(info.size / their_part_size) == count <= target.max_parts


def _compare(source: str, info: ObjectInfo, kind: str, read: str) -> None:
    holds = label(parse(info.checksum) or 0) if kind == CRC32C.name else (info.digests or {})[kind]
    if read != holds:
        name = "multipart ETag" if kind == MD5_OF_PARTS else kind.upper()
        raise ChecksumMismatch(f"{source}: {info.key}: the bytes read make {name} {read}, the source holds {holds}")
