"""moto's server, refusing a PutObject or UploadPart whose body does not match a checksum it was sent, as S3 does.

    python tests/moto_s3.py -H 127.0.0.1 -p PORT      (moto_server's arguments)

moto 5.2.5 stores the Content-MD5 and the x-amz-checksum-* value (a header, or an aws-chunked trailer) a write
carries without checking either, so a client learns nothing from its echo. S3 computes both over the bytes it
received and answers 400 BadDigest where one differs; so does this server, for every client alike. The benchmark's
S3 routes run it (`start_moto(verifying=True)`): there, every tool's checksums are held to what arrived, as on S3,
and ferry's `receipt: auto` learns what it learns from S3 itself (the echo alone, no Content-MD5).
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys

import moto.server
from moto.s3.exceptions import S3ClientError
from moto.s3.responses import S3Response
from moto.s3.utils import compute_checksum

ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
_TRAILER = re.compile(rb"x-amz-checksum-(\w+):\s*([A-Za-z0-9+/=]+)")
_TRAILER_TAIL = 1024


class BadDigest(S3ClientError):
    def __init__(self, what: str):
        super().__init__("BadDigest", f"The {what} you specified did not match the calculated checksum.")


def sent_checksums(response: S3Response) -> list[tuple[str, str]]:
    """(algorithm, base64 value) of every checksum a request carries: its headers, else its aws-chunked trailer."""
    headers = response.headers
    named = {alg: f"x-amz-checksum-{alg.lower()}" for alg in ALGORITHMS}
    sent = [(alg, headers[name]) for alg, name in named.items() if name in headers]
    if not sent and "x-amz-trailer" in headers:
        # The trailer follows the last (empty) chunk: searched for in the body's end, not across its bytes.
        found = _TRAILER.search(response.raw_body[-_TRAILER_TAIL:])
        if found and found.group(1).decode().upper() in ALGORITHMS:
            sent.append((found.group(1).decode().upper(), found.group(2).decode()))
    return sent


def verify(response: S3Response) -> None:
    """BadDigest where the body differs from the Content-MD5 or a checksum the request carries."""
    body = response.body if isinstance(response.body, bytes) else response.body.encode()
    md5 = response.headers.get("Content-MD5")
    if md5 and base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode() != md5:
        raise BadDigest("Content-MD5")
    for algorithm, value in sent_checksums(response):
        if compute_checksum(body, algorithm).decode() != value:
            raise BadDigest(algorithm)


def _verifying(write):  # moto's handler methods
    def checked(self: S3Response):
        verify(self)
        return write(self)

    return checked


S3Response.put_object = _verifying(S3Response.put_object)
S3Response.upload_part = _verifying(S3Response.upload_part)

if __name__ == "__main__":
    sys.exit(moto.server.main(sys.argv[1:]))
