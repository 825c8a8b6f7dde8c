"""Combining a reflected CRC from its parts: every CRC a store keeps (CRC32C, CRC32, CRC64NVME) combined over any
split equals the CRC of the whole as awscrt, zlib and crc32c compute it."""

from __future__ import annotations

import base64
import zlib

import pytest
from awscrt import checksums
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.checksum import CRC32, CRC32C, CRC64NVME, CRCS, combine, combine_parts, to_b64

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
