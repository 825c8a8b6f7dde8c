"""Combining a reflected CRC from its parts: every CRC a store keeps (CRC32C, CRC32, CRC64NVME) combined over any
split equals the CRC of the whole as awscrt, zlib and crc32c compute it."""

from __future__ import annotations

import base64
import hashlib
import zlib

import pytest
from awscrt import checksums
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.base import MD5, MD5_OF_PARTS, Capabilities, ObjectInfo
from connectors.checksum import CRC32, CRC32C, CRC64NVME, CRCS, combine, combine_parts, to_b64
from connectors.transfer import source_checksum
from ferry.errors import ChecksumMismatch

# Each CRC as an independent library computes it.
REFERENCE = {
    "crc32c": lambda data: checksums.crc32c(data),
    "crc32": lambda data: zlib.crc32(data),
    "crc64nvme": lambda data: checksums.crc64nvme(data),
}


@pytest.mark.parametrize(
    ("crc", "data", "value"),
    [
        # The check values of the CRC catalogue ("123456789").
        (CRC32C, b"123456789", 0xE3069283),
        (CRC32, b"123456789", 0xCBF43926),
        (CRC64NVME, b"123456789", 0xAE8B14860A799888),
        (CRC64NVME, b"", 0),
    ],
    ids=["crc32c", "crc32", "crc64nvme", "crc64nvme-empty"],
)
def test_each_crc_has_its_catalogue_value(crc, data: bytes, value: int) -> None:
    assert crc.compute(data, 0) == value == REFERENCE[crc.name](data)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(CRCS)), parts=st.lists(st.binary(max_size=3000), max_size=6))
def test_combined_parts_are_the_crc_of_their_concatenation(name: str, parts: list[bytes]) -> None:
    crc = CRCS[name]
    combined = combine_parts([(crc.compute(p, 0), len(p)) for p in parts], crc)
    assert combined == REFERENCE[name](b"".join(parts))


@pytest.mark.parametrize("name", sorted(CRCS))
@pytest.mark.parametrize("lengths", [(1, 1), (0, 5), (5, 0), (8 << 20, 3), (1, 5 << 20)])
def test_combine_over_lengths_parts_are_made_of(name: str, lengths: tuple[int, int]) -> None:
    crc = CRCS[name]
    a, b = bytes(range(256)) * (lengths[0] // 256) + b"x" * (lengths[0] % 256), b"\xff" * lengths[1]
    assert combine(crc.compute(a, 0), crc.compute(b, 0), len(b), crc) == REFERENCE[name](a + b)


def test_a_wider_crc_takes_its_own_width_in_base64() -> None:
    assert len(base64.b64decode(to_b64(CRC64NVME.compute(b"x", 0), 64))) == 8
    assert len(base64.b64decode(to_b64(CRC32.compute(b"x", 0)))) == 4


def _info(size: int, **digests: str) -> ObjectInfo:
    return ObjectInfo("k", size, digests={k.replace("_", "-"): v for k, v in digests.items()})


def test_a_whole_read_is_held_to_the_first_kind_the_source_holds() -> None:
    data = b"hello"
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    both = _info(5, sha256=sha, md5=md5)
    assert source_checksum.whole("s3://b", both, data, CRC32C.compute(data, 0)) == "sha256"
    assert source_checksum.whole("s3://b", _info(5, md5=md5), data, 0) == MD5
    assert source_checksum.whole("s3://b", _info(5), data, 0) is None
    with pytest.raises(ChecksumMismatch, match=r"s3://b: k: the bytes read make SHA256 .*, the source holds "):
        source_checksum.whole("s3://b", both, b"hellp", 0)


@pytest.mark.parametrize(
    ("their", "size", "etag_parts", "caps", "takes"),
    [
        (320, 1000, 4, Capabilities(min_part_size=1), True),
        (None, 1000, 4, Capabilities(min_part_size=1), False),  # the store does not tell
        (320, 1000, 3, Capabilities(min_part_size=1), False),  # not the ETag's part count
        (320, 1000, 4, Capabilities(min_part_size=512), False),  # below the target's least part
        (320, 1000, 4, Capabilities(min_part_size=1, max_parts=3), False),  # more parts than the target takes
        (2000, 4000, 2, Capabilities(min_part_size=1), False),  # above the memory budget (1024 here)
    ],
)
def test_the_source_part_size_is_taken_only_where_target_and_budget_allow(their, size, etag_parts, caps, takes):
    info = ObjectInfo("k", size, digests={MD5_OF_PARTS: f"{'0' * 32}-{etag_parts}"})
    assert source_checksum.read_in_parts(info, their, caps, 1024) is takes
