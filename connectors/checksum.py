"""Full-object checksums: CRC32C computed per part while streaming, and any reflected CRC combined without
re-reading.

Parts finish in any order, so an object's CRC is combined from the parts' CRCs and lengths (the GF(2) method of
zlib's crc32_combine, for any reflected CRC whose initial value and final xor are all ones: CRC32C, CRC32 and
S3's CRC64NVME).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from awscrt import checksums as _crt

PREFIX = "crc32c:"


@dataclass(frozen=True)
class Crc:
    """A reflected CRC: its name (as S3 spells it, lower case), reflected polynomial, width in bits, and compute
    (data, the value to continue from)."""

    name: str
    poly: int
    width: int
    compute: Callable[[bytes, int], int]


CRC32C = Crc("crc32c", 0x82F63B78, 32, _crt.crc32c)  # hardware CRC32C, the GIL released
CRC32 = Crc("crc32", 0xEDB88320, 32, zlib.crc32)  # zlib's: faster here than awscrt's
CRC64NVME = Crc("crc64nvme", 0x9A6C9329AC4BC9B5, 64, _crt.crc64nvme)
CRCS = {crc.name: crc for crc in (CRC32C, CRC32, CRC64NVME)}


def crc32c(data: bytes, value: int = 0) -> int:
    """CRC32C of data, continuing from value."""
    return _crt.crc32c(data, value)


def _gf2_times(mat: tuple[int, ...], vec: int) -> int:
    total = 0
    i = 0
    while vec:
        if vec & 1:
            total ^= mat[i]
        vec >>= 1
        i += 1
    return total


def _gf2_product(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The operator applying b, then a."""
    return tuple(_gf2_times(a, column) for column in b)


@functools.lru_cache(maxsize=128)
def _shift_operator(poly: int, width: int, len2: int) -> tuple[int, ...]:
    """The GF(2) matrix that appends len2 zero bytes to a CRC (parts mostly share one length): the one-zero-bit
    operator raised to 8 * len2 by squaring."""
    bit = (poly, *(1 << n for n in range(width - 1)))
    power = bit
    for _ in range(3):  # 2, 4, 8 bits: one zero byte
        power = _gf2_product(power, power)
    result = None
    while len2:
        if len2 & 1:
            result = power if result is None else _gf2_product(power, result)
        len2 >>= 1
        if len2:
            power = _gf2_product(power, power)
    assert result is not None
    return result


def combine(crc1: int, crc2: int, len2: int, crc: Crc = CRC32C) -> int:
    """The CRC of A+B from crc(A), crc(B) and len(B)."""
    if len2 <= 0:
        return crc1
    return _gf2_times(_shift_operator(crc.poly, crc.width, len2), crc1) ^ crc2


def combine_parts(parts: list[tuple[int, int]], crc: Crc = CRC32C) -> int:
    """The CRC of the concatenation of parts given as (crc, length) in order."""
    value = 0
    for part, length in parts:
        value = combine(value, part, length, crc)
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


def to_b64(value: int, width: int = 32) -> str:
    """The base64 big-endian form S3's x-amz-checksum-* headers use (x-amz-checksum-crc32c: 32 bits)."""
    return base64.b64encode(value.to_bytes(width // 8, "big")).decode()


def from_b64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")


def md5_hex(data: bytes) -> str:
    """MD5 hex digest: what S3 returns as a part's or plain object's ETag."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_parts(digests: list[bytes]) -> str:
    """S3's multipart ETag of parts with these MD5s: the MD5 of their concatenation, and their count."""
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


def hex_to_b64(hex_digest: str) -> str:
    """The base64 form HTTP digest headers (Content-MD5) take of a hex digest."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()
