"""The benchmark's moto (tests/moto_s3.py) refuses what S3 refuses: a write whose body differs from its checksums."""

from __future__ import annotations

import base64
import hashlib
import urllib.request
import zlib
from collections.abc import Iterator
from urllib.error import HTTPError

import botocore.exceptions
import pytest
from awscrt.checksums import crc64nvme

from connectors import s3 as s3_connector
from connectors.checksum import crc32c
from connectors.transfer import TransferSettings
from ferry.profiles import Profile
from ferry.sync import run_sync
from tests.support import Server, start_moto

BODY = b"a body of some bytes " * 500


@pytest.fixture(scope="module")
def verifying() -> Iterator[Server]:
    server = start_moto(verifying=True)
    try:
        server.client("s3").create_bucket(Bucket="bkt")
        yield server
    finally:
        server.stop()


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


GOOD_CRC32C = _b64(crc32c(BODY).to_bytes(4, "big"))
GOOD_MD5 = _b64(hashlib.md5(BODY).digest())


@pytest.mark.parametrize(
    ("sent", "refused"),
    [
        ({"ChecksumCRC32C": GOOD_CRC32C}, None),
        ({"ChecksumCRC32C": _b64(b"\0\0\0\0")}, "CRC32C"),
        ({"ContentMD5": GOOD_MD5}, None),
        ({"ContentMD5": _b64(b"\0" * 16)}, "Content-MD5"),
        ({"ChecksumSHA256": _b64(hashlib.sha256(b"another body").digest())}, "SHA256"),
        ({}, None),  # boto3's own CRC32 (a header, over plain HTTP): right
    ],
)
def test_a_put_is_refused_where_its_body_differs_from_a_checksum_it_carries(verifying, sent, refused) -> None:
    s3 = verifying.client("s3")
    if refused is None:
        s3.put_object(Bucket="bkt", Key="k", Body=BODY, **sent)
        assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == BODY
        return
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        s3.put_object(Bucket="bkt", Key="refused", Body=BODY, **sent)
    assert caught.value.response["Error"]["Code"] == "BadDigest"
    assert refused in caught.value.response["Error"]["Message"]
    assert "Contents" not in s3.list_objects_v2(Bucket="bkt", Prefix="refused")


def test_a_part_is_refused_where_its_body_differs_from_its_checksum(verifying) -> None:
    s3 = verifying.client("s3")
    upload = s3.create_multipart_upload(Bucket="bkt", Key="m", ChecksumAlgorithm="CRC32C")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError, match="BadDigest"):
        s3.upload_part(Bucket="bkt", Key="m", UploadId=upload, PartNumber=1, Body=BODY, ChecksumCRC32C="AAAAAA==")
    s3.upload_part(Bucket="bkt", Key="m", UploadId=upload, PartNumber=1, Body=BODY, ChecksumCRC32C=GOOD_CRC32C)
    assert [p["PartNumber"] for p in s3.list_parts(Bucket="bkt", Key="m", UploadId=upload)["Parts"]] == [1]


def _chunked(signed: bool, trailer: bytes) -> bytes:
    """BODY as an aws-chunked body in two chunks, with trailer after its last (empty) chunk."""
    sign = b";chunk-signature=" + b"0" * 64 if signed else b""
    chunks = [BODY[:4000], BODY[4000:], b""]
    return b"".join(b"%x%s\r\n%s" % (len(c), sign, c + b"\r\n" if c else b"") for c in chunks) + trailer + b"\r\n"


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize(
    ("trailer", "refused"),
    [
        (b"x-amz-checksum-crc32:%s\r\n" % _b64(zlib.crc32(BODY).to_bytes(4, "big")).encode(), None),
        (b"x-amz-checksum-crc32:%s\r\n" % _b64(b"\1\2\3\4").encode(), "BadDigest"),
        (b"", "MalformedTrailerError"),  # promised, not sent
    ],
    ids=["right", "wrong", "missing"],
)
def test_a_trailer_checksum_is_held_to_the_body_too(verifying, signed: bool, trailer: bytes, refused) -> None:
    """An aws-chunked body with its CRC32 in the trailer, as the CRT sends one (signed: SigV4 chunk signatures,
    which moto does not check)."""
    if signed:
        trailer += b"x-amz-trailer-signature:" + b"0" * 64 + b"\r\n"
    key = f"trailer-{signed}-{refused}"
    request = urllib.request.Request(
        f"{verifying.endpoint}/bkt/{key}", data=_chunked(signed, trailer), method="PUT",
        headers={
            "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" if signed
            else "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            "x-amz-trailer": "x-amz-checksum-crc32", "Content-Encoding": "aws-chunked",
            "x-amz-decoded-content-length": str(len(BODY)),
            "Content-Type": "application/octet-stream",  # not urllib's form type, which werkzeug would parse
        },
    )  # fmt: skip
    if refused is None:
        assert urllib.request.urlopen(request).status == 200
        assert verifying.client("s3").get_object(Bucket="bkt", Key=key)["Body"].read() == BODY
    else:
        with pytest.raises(HTTPError) as caught:
            urllib.request.urlopen(request)
        assert caught.value.code == 400 and refused.encode() in caught.value.read()


PART = b"p" * (5 << 20)  # moto's least part size, as S3's


@pytest.mark.parametrize(
    ("algorithm", "checksum_type", "expected"),
    [
        ("CRC32C", "FULL_OBJECT", _b64(crc32c(PART + BODY).to_bytes(4, "big"))),
        ("CRC32", "FULL_OBJECT", _b64(zlib.crc32(PART + BODY).to_bytes(4, "big"))),
        ("CRC64NVME", "FULL_OBJECT", _b64(crc64nvme(PART + BODY).to_bytes(8, "big"))),  # S3's when none is named
        ("CRC32C", None, _b64(crc32c(b"".join(crc32c(p).to_bytes(4, "big") for p in (PART, BODY))).to_bytes(4, "big"))),
    ],
    ids=["crc32c-full", "crc32-full", "crc64nvme-full", "crc32c-composite"],
)
def test_a_multipart_uploads_checksum_is_the_one_s3_gives(verifying, algorithm, checksum_type, expected) -> None:
    """The full-object CRC it computes part by part (not over a copy of the object) is the whole object's CRC."""
    s3, key = verifying.client("s3"), f"mp-{algorithm}-{checksum_type}"
    typed = {"ChecksumType": checksum_type} if checksum_type else {}
    upload = s3.create_multipart_upload(Bucket="bkt", Key=key, ChecksumAlgorithm=algorithm, **typed)["UploadId"]
    parts = [
        {"PartNumber": n, "ETag": s3.upload_part(Bucket="bkt", Key=key, UploadId=upload, PartNumber=n, Body=body,
                                                 ChecksumAlgorithm=algorithm)["ETag"]}
        for n, body in ((1, PART), (2, BODY))
    ]  # fmt: skip
    s3.complete_multipart_upload(Bucket="bkt", Key=key, UploadId=upload, MultipartUpload={"Parts": parts})
    head = s3.head_object(Bucket="bkt", Key=key, ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"].split("-")[0] == expected
    assert head.get("ChecksumType") == checksum_type  # moto names FULL_OBJECT only


def test_a_content_md5_that_is_no_md5_is_invalid(verifying) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        verifying.client("s3").put_object(Bucket="bkt", Key="bad-md5", Body=BODY, ContentMD5=_b64(b"short"))
    assert caught.value.response["Error"]["Code"] == "InvalidDigest"


def test_ferrys_receipt_auto_learns_from_it_what_it_learns_from_s3(verifying, tmp_path, monkeypatch) -> None:
    """The benchmark's ferry row takes the path it takes on S3: the probe is refused, the echo is the check."""
    monkeypatch.setattr(s3_connector, "_LEARNED", {})  # learned per endpoint and process: a port may be reused
    for name, value in verifying.env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(BODY)
    profiles = {"v": Profile(type="s3", endpoint_url=verifying.endpoint)}
    source, state = str(tmp_path / "src"), tmp_path / "state"
    result = run_sync(source, "v://bkt/ferry", TransferSettings(), profiles=profiles, state_dir=state)
    assert result.ok, result.stats.failures
    assert result.stats.summary()["receipt_check"][verifying.endpoint]["check"] == "crc32c"
