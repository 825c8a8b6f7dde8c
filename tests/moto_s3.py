"""moto's server, refusing a PutObject or UploadPart whose body does not match a checksum it was sent, as S3 does.

    python tests/moto_s3.py -H 127.0.0.1 -p PORT      (moto_server's arguments)

moto 5.2.5 stores the Content-MD5 and the x-amz-checksum-* value (a header, or an aws-chunked trailer) a write
carries without checking either, so a client learns nothing from its echo. S3 computes both over the bytes it
received and answers 400 BadDigest where one differs (InvalidDigest for a Content-MD5 that is no MD5,
MalformedTrailerError for a trailer it was promised and not sent); so does this server, for every client alike.
Not checked, as S3 would: a hex x-amz-content-sha256 (botocore's over plain HTTP), which moto ignores too.

The benchmark's S3 routes run it (`start_moto(verifying=True)`): there every tool's checksums are held to what
arrived, as on S3, and ferry's `receipt: auto` learns what it learns from S3 itself (the echo alone, no
Content-MD5). Verifying costs the server each tool's own hash of its bytes (MD5 for a Content-MD5, CRC32 or CRC32C
for a checksum), as on S3.

A multipart upload's full-object checksum (FULL_OBJECT: CRC32, CRC32C, or the CRC64NVME S3 gives an upload that
names none) is computed as S3 computes it, one CRC running over the parts, not as moto 5.2.5 does: it copies every
part into one buffer and copies that again before hashing it, two copies of the whole object per
CompleteMultipartUpload under the server's GIL, a cost S3 does not have and COMPOSITE checksums do not pay. The
value is the same; the parts are hashed once either way.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import sys

ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
# What follows an aws-chunked body's last, empty, chunk (signed or not): its trailer lines, then an empty line.
_LAST_CHUNK = re.compile(rb"(?:^|\r\n)0(?:;chunk-signature=[0-9a-f]+)?\r\n((?:[^\r\n]+\r\n)*)\r\n\Z")
_TAIL = 4096  # the trailer is searched for in the body's end, not across its bytes


def install() -> None:
    """Make moto's PutObject and UploadPart check what they receive (in this process)."""
    from moto.s3.exceptions import S3ClientError
    from moto.s3.models import MultipartChecksumBuilder
    from moto.s3.responses import S3Response
    from moto.s3.utils import HAS_CRT, compute_checksum

    if not HAS_CRT:  # moto would take a CRC32 for a CRC64NVME
        raise SystemExit("tests/moto_s3.py needs awscrt (pip install awscrt) for CRC64NVME")

    def refuse(code: str, message: str) -> None:
        raise S3ClientError(code, message)

    def sent_checksums(response: S3Response) -> list[tuple[str, str]]:
        """(algorithm, base64 value) of every checksum a request carries: its headers, else its promised trailer."""
        headers = response.headers
        named = {alg: f"x-amz-checksum-{alg.lower()}" for alg in ALGORITHMS}
        sent = [(alg, headers[name]) for alg, name in named.items() if name in headers]
        promised = headers.get("x-amz-trailer", "").strip().lower()
        if sent or not promised:
            return sent
        last = _LAST_CHUNK.search(response.raw_body[-_TAIL:])
        trailers = dict(
            line.decode().split(":", 1) for line in (last.group(1).split(b"\r\n")[:-1] if last else []) if b":" in line
        )
        algorithm = next((alg for alg, name in named.items() if name == promised), None)
        if algorithm is None or promised not in trailers:
            refuse("MalformedTrailerError", "The request contained trailing data that was not well-formed or did "
                   "not conform to our published schema.")  # fmt: skip
        return [(algorithm, trailers[promised].strip())]

    def verify(response: S3Response) -> None:
        body = response.body if isinstance(response.body, bytes) else response.body.encode()
        if (md5 := response.headers.get("Content-MD5")) is not None:
            try:
                digest = base64.b64decode(md5, validate=True)
            except binascii.Error:
                digest = b""
            if len(digest) != 16:
                refuse("InvalidDigest", "The Content-MD5 you specified was invalid.")
            if hashlib.md5(body, usedforsecurity=False).digest() != digest:
                refuse("BadDigest", "The Content-MD5 you specified did not match what we received.")
        for algorithm, value in sent_checksums(response):
            if compute_checksum(body, algorithm).decode() != value:
                refuse("BadDigest", f"The {algorithm} you specified did not match the calculated checksum.")

    def verifying(write):  # moto's handler methods
        def checked(self: S3Response):
            verify(self)
            return write(self)

        return checked

    S3Response.put_object = verifying(S3Response.put_object)
    S3Response.upload_part = verifying(S3Response.upload_part)
    _full_object_checksums_run_over_parts(MultipartChecksumBuilder)


def _full_object_checksums_run_over_parts(builder: type) -> None:
    """moto's MultipartChecksumBuilder, with a FULL_OBJECT CRC kept running part by part instead of the parts
    copied into one buffer first (same value, no copies)."""
    from awscrt import checksums

    running = {"CRC32": (checksums.crc32, 4), "CRC32C": (checksums.crc32c, 4), "CRC64NVME": (checksums.crc64nvme, 8)}
    add_part, build = builder.addPart, builder.build

    def add_running(self, part: bytes) -> None:
        if self.checksum_type != "FULL_OBJECT" or self.checksum_algorithm not in running:
            return add_part(self, part)  # COMPOSITE, or an algorithm S3 has no full-object form of
        crc, _ = running[self.checksum_algorithm]
        self.running_crc = crc(part, getattr(self, "running_crc", 0))
        self.part_count += 1

    def build_running(self) -> tuple[str, str, int] | None:
        if not hasattr(self, "running_crc"):
            return build(self)
        _, width = running[self.checksum_algorithm]
        return self.checksum_type, base64.b64encode(self.running_crc.to_bytes(width, "big")).decode(), 1

    builder.addPart = add_running
    builder.build = build_running


if __name__ == "__main__":
    import moto.server

    install()
    sys.exit(moto.server.main(sys.argv[1:]))
