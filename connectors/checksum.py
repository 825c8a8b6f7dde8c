"""Full-object CRC32C: computed per part while streaming, combined without re-reading.

Parts finish in any order, so the object's CRC is combined from the parts' CRCs and lengths
(the GF(2) method of zlib's crc32_combine, for the Castagnoli polynomial).
"""

from __future__ import annotations

import base64
import functools
import hashlib

import crc32c as _crc32c

_POLY = 0x82F63B78  # reflected Castagnoli
PREFIX = "crc32c:"


def crc32c(data: bytes, value: int = 0) -> int:
    """CRC32C of data, continuing from value."""
    return _crc32c.crc32c(data, value)


def _gf2_times(mat: list[int], vec: int) -> int:
    total = 0
    i = 0
    while vec:
        if vec & 1:
            total ^= mat[i]
        vec >>= 1
        i += 1
    return total


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of A+B from crc(A), crc(B) and len(B)."""
    if len2 <= 0:
        return crc1
    return _gf2_times(_shift_operator(len2), crc1) ^ crc2


@functools.lru_cache(maxsize=64)
def _shift_operator(len2: int) -> list[int]:
    """The GF(2) matrix that appends len2 zero bytes to a CRC; parts mostly share one length."""
    return [_shift(1 << n, len2) for n in range(32)]


def _shift(crc1: int, len2: int) -> int:
    odd = [_POLY] + [1 << n for n in range(31)]
    even = _gf2_square(odd)  # 2 zero bits
    odd = _gf2_square(even)  # 4 zero bits
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1


def combine_parts(parts: list[tuple[int, int]]) -> int:
    """CRC32C of the concatenation of parts given as (crc, length) in order."""
    value = 0
    for crc, length in parts:
        value = combine(value, crc, length)
    return value


def label(value: int) -> str:
    """The stored form: 'crc32c:' and eight hex digits."""
    return f"{PREFIX}{value:08x}"


def parse(text: str | None) -> int | None:
    """The integer of a stored checksum label, or None if text is not one."""
    if not text or not text.startswith(PREFIX):
        return None
    try:
        return int(text[len(PREFIX) :], 16)
    except ValueError:
        return None


def to_b64(value: int) -> str:
    """The base64 big-endian form S3's x-amz-checksum-crc32c header uses."""
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def from_b64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")


def md5_hex(data: bytes) -> str:
    """MD5 hex digest: what S3 returns as a part's or plain object's ETag."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def hex_to_b64(hex_digest: str) -> str:
    """The base64 form HTTP digest headers (Content-MD5) take of a hex digest."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()
