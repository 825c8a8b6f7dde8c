"""Amazon S3 and every S3-compatible store, through boto3.

Without a profile the standard credential chain and configuration apply, so AWS_PROFILE and
AWS_ENDPOINT_URL_S3 work as they do for the AWS CLI. botocore's own retries are switched
off: the transfer engine retries once, in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Iterator
from urllib.parse import urlsplit

import boto3
import botocore.exceptions
from botocore.config import Config

from connectors.base import (
    READ_TIMEOUT_S,
    Capabilities,
    Connector,
    GiB,
    Location,
    MiB,
    ObjectInfo,
    Part,
    WriteSpec,
    join_key,
)
from connectors.checksum import crc32c, from_b64, hex_to_b64, label, md5_hex, parse, to_b64
from ferry.errors import ChecksumMismatch, NotFoundError, PermanentError, TransientError, UsageError
from ferry.net import in_words
from ferry.profiles import Profile

CHECKSUM_META = "ferry-checksum"
_TRANSIENT_CODES = {
    "SlowDown",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "RequestTimeTooSkewed",
    "500",
    "502",
    "503",
    "504",
}
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "NoSuchUpload", "404", "NotFound"}
_NETWORK_ERRORS = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
)


# What to change when TLS is spoken to a plain-HTTP endpoint.
_PLAIN_HTTP = ": write the profile's endpoint_url with http://"


def translate(exc: Exception, what: str) -> Exception:
    """The ferry error for a botocore exception, naming the object and the provider's code."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        message = error.get("Message") or ""
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        line = f"{what}: {code}: {message}".rstrip(": ")
        if code == "BadDigest":
            return ChecksumMismatch(line)
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
            retry_after = headers.get("retry-after")
            return TransientError(line, code=code, retry_after=float(retry_after) if retry_after else None)
        if code in _NOT_FOUND_CODES:
            return NotFoundError(line, code=code)
        return PermanentError(line, code=code)
    if isinstance(exc, botocore.exceptions.FlexibleChecksumError):
        # A body that does not match the checksum the store sent with it came damaged (or cut): read it again.
        return TransientError(f"{what}: the body read does not match its checksum ({exc})", code="ChecksumMismatch")
    # botocore names the endpoint it could not reach (or speak TLS to) in the exception's fields.
    where = getattr(exc, "kwargs", {}).get("endpoint_url") or "the endpoint"
    cause = in_words(exc, where, plain=_PLAIN_HTTP)
    if isinstance(exc, _NETWORK_ERRORS):
        said = f"{cause} ({exc})" if cause else f"{type(exc).__name__}: {exc}"
        return TransientError(f"{what}: {said}", code=type(exc).__name__)
    if isinstance(exc, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)):
        return UsageError(
            f"{what}: no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, "
            "or name them in the profile's credentials"
        )
    if isinstance(exc, botocore.exceptions.ProfileNotFound):
        return UsageError(f"{what}: {exc}")
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        # TLS that cannot work (plain HTTP spoken back, an untrusted certificate) is permanent: a retry fails alike.
        said = f"{cause} ({exc})" if cause else f"{type(exc).__name__}: {exc}"
        return PermanentError(f"{what}: {said}", code=type(exc).__name__)
    return exc


def _multipart_etag(parts: list[Part]) -> str | None:
    """What S3 answers for a completed multipart upload, if every part's ETag is a plain MD5."""
    try:
        digests = b"".join(bytes.fromhex(p.etag) for p in parts)
    except ValueError:
        return None
    if len(digests) != 16 * len(parts):
        return None
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"


def _plain_md5(etag: str) -> bool:
    return len(etag) == 32 and all(c in "0123456789abcdef" for c in etag)


class S3Connector(Connector):
    """A bucket and key prefix on S3 or any S3-compatible endpoint."""

    kind = "s3"
    capabilities = Capabilities(
        server_side_copy=True,
        server_side_part_copy=True,
        presign=True,
        stores_checksum=True,
        exact_keys=True,
        min_part_size=5 * MiB,
        max_part_size=5 * GiB,
        max_parts=10_000,
        max_single_put=5 * GiB,
    )

    def __init__(self, url: str, bucket: str, root: str, session: boto3.session.Session, client_kwargs: dict):
        super().__init__(url)
        self.bucket = bucket
        self.root = root
        config = Config(
            max_pool_connections=1024,
            retries={"total_max_attempts": 1},
            connect_timeout=10,
            read_timeout=client_kwargs.pop("read_timeout", READ_TIMEOUT_S),
            tcp_keepalive=True,
            # ferry sends and checks its own CRC32C and MD5; botocore's defaults would add a
            # second pass over every body and false alarms on copies (moto's CRC quirk).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": client_kwargs.pop("addressing_style", "auto")},
        )
        try:
            self.client = session.client("s3", config=config, **client_kwargs)
        except botocore.exceptions.BotoCoreError as exc:
            raise translate(exc, url) from None
        self.endpoint = self.client.meta.endpoint_url
        credentials = session.get_credentials()
        self._identity = (self.endpoint, credentials.access_key if credentials else None)

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> S3Connector:
        client_kwargs: dict = {}
        session_kwargs: dict = {}
        if profile is not None:
            session_kwargs = profile.credentials.boto3_session_args()
            if profile.endpoint_url:
                client_kwargs["endpoint_url"] = profile.endpoint_url
            if profile.region:
                client_kwargs["region_name"] = profile.region
            client_kwargs["addressing_style"] = profile.addressing_style
            if profile.read_timeout_s:
                client_kwargs["read_timeout"] = profile.read_timeout_s
        try:
            session = boto3.session.Session(**session_kwargs)
        except botocore.exceptions.BotoCoreError as exc:
            raise translate(exc, location.url) from None
        if session.region_name is None and "region_name" not in client_kwargs:
            client_kwargs["region_name"] = "us-east-1"
        connector = cls(location.url, location.bucket, location.prefix, session, client_kwargs)
        if profile is not None and profile.min_part_size:
            connector.capabilities = dataclasses.replace(cls.capabilities, min_part_size=profile.min_part_size)
        return connector

    def network_host(self) -> str | None:
        return urlsplit(self.endpoint).hostname

    def _call(self, what: str, method, **kwargs):
        try:
            return method(Bucket=self.bucket, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every SDK error is translated here, at the boundary
            raise translate(exc, what) from None

    def _what(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def _full(self, key: str) -> str:
        return join_key(self.root, key)

    def check(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket"):
                raise UsageError(f"{self.url}: bucket {self.bucket!r} does not exist") from None
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise UsageError(f"{self.url}: access denied to bucket {self.bucket!r} ({code})") from None
            raise translate(exc, self.url) from None
        except botocore.exceptions.EndpointConnectionError as exc:
            cause = in_words(exc, self.endpoint) or "no connection"
            raise UsageError(f"{self.url}: cannot reach the endpoint {self.endpoint}: {cause}") from None
        except Exception as exc:  # noqa: BLE001
            error = translate(exc, self.url)
            raise (error if isinstance(error, UsageError) else UsageError(str(error))) from None

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        base = f"{self.root}/" if self.root else ""
        paginator = self.client.get_paginator("list_objects_v2")
        args = {"StartAfter": base + start_after} if start_after else {}
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix, **args):
                for item in page.get("Contents", ()):
                    key = item["Key"][len(base) :]
                    if key:
                        yield ObjectInfo(key=key, size=item["Size"], signature=item["ETag"].strip('"'))
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, self._what(prefix)) from None

    def stat(self, key: str) -> ObjectInfo:
        head = self._call(self._what(key), self.client.head_object, Key=self._full(key), ChecksumMode="ENABLED")
        return self._info(key, head)

    @staticmethod
    def _info(key: str, head: dict) -> ObjectInfo:
        """ObjectInfo from a HEAD or GET response; ferry's checksum is taken out of the user metadata."""
        metadata = dict(head.get("Metadata", {}))
        checksum = metadata.pop(CHECKSUM_META, None)
        native = head.get("ChecksumCRC32C")
        if checksum is None and native and head.get("ChecksumType") == "FULL_OBJECT":
            checksum = label(from_b64(native))
        return ObjectInfo(
            key=key,
            size=head["ContentLength"],
            signature=head["ETag"].strip('"'),
            checksum=checksum,
            content_type=head.get("ContentType"),
            metadata=metadata,
        )

    def get(self, key: str) -> tuple[bytes, ObjectInfo]:
        what = self._what(key)
        response = self._call(what, self.client.get_object, Key=self._full(key), ChecksumMode="ENABLED")
        try:
            data = response["Body"].read()
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        return data, self._info(key, response)

    def open_range(self, key: str, start: int, length: int) -> bytes:
        if length == 0:
            return b""
        what = self._what(key)
        response = self._call(
            what, self.client.get_object, Key=self._full(key), Range=f"bytes={start}-{start + length - 1}"
        )
        try:
            data = response["Body"].read()
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        if len(data) != length:
            raise TransientError(f"{what}: short read: {len(data)} of {length} bytes", code="ShortRead")
        return data

    def _write_args(self, spec: WriteSpec, *, with_checksum: bool) -> dict:
        metadata = dict(spec.metadata)
        if with_checksum and spec.checksum:
            metadata[CHECKSUM_META] = spec.checksum
        args: dict = {"Metadata": metadata}
        if spec.content_type:
            args["ContentType"] = spec.content_type
        return args

    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        what = self._what(key)
        md5 = md5_hex(data)
        response = self._call(
            what,
            self.client.put_object,
            Key=self._full(key),
            Body=data,
            ContentMD5=hex_to_b64(md5),
            ChecksumCRC32C=to_b64(crc32c(data)),
            **self._write_args(spec, with_checksum=True),
        )
        etag = response["ETag"].strip('"')
        if _plain_md5(etag) and etag != md5:
            raise ChecksumMismatch(f"{what}: the store holds MD5 {etag}, ferry sent {md5}")
        return ObjectInfo(key=key, size=len(data), signature=etag, checksum=spec.checksum)

    def delete(self, key: str) -> None:
        self._call(self._what(key), self.client.delete_object, Key=self._full(key))

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        response = self._call(
            self._what(key),
            self.client.create_multipart_upload,
            Key=self._full(key),
            ChecksumAlgorithm="CRC32C",
            ChecksumType="FULL_OBJECT",
            **self._write_args(spec, with_checksum=False),
        )
        return response["UploadId"]

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = f"{self._what(key)} part {number}"
        md5, crc = md5_hex(data), crc32c(data)
        response = self._call(
            what,
            self.client.upload_part,
            Key=self._full(key),
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
            ContentMD5=hex_to_b64(md5),
            ChecksumCRC32C=to_b64(crc),
        )
        etag = response["ETag"].strip('"')
        if _plain_md5(etag) and etag != md5:
            raise ChecksumMismatch(f"{what}: the store holds MD5 {etag}, ferry sent {md5}")
        return Part(number=number, size=len(data), etag=etag, crc32c=crc)

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        what = self._what(key)
        listed = []
        for part in parts:
            entry = {"PartNumber": part.number, "ETag": f'"{part.etag}"'}
            if part.crc32c is not None:
                entry["ChecksumCRC32C"] = to_b64(part.crc32c)
            listed.append(entry)
        args: dict = {}
        full = parse(spec.checksum)
        if full is not None:
            args = {"ChecksumCRC32C": to_b64(full), "ChecksumType": "FULL_OBJECT"}
        response = self._call(
            what,
            self.client.complete_multipart_upload,
            Key=self._full(key),
            UploadId=upload_id,
            MultipartUpload={"Parts": listed},
            **args,
        )
        etag = response["ETag"].strip('"')
        expected = _multipart_etag(parts)
        if expected is not None and etag != expected:
            raise ChecksumMismatch(f"{what}: the store assembled ETag {etag}, the parts make {expected}")
        return ObjectInfo(key=key, size=sum(p.size for p in parts), signature=etag, checksum=spec.checksum)

    def abort(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._call(self._what(key), self.client.abort_multipart_upload, Key=self._full(key), UploadId=upload_id)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        try:
            self._call(self._what(key), self.client.list_parts, Key=self._full(key), UploadId=upload_id, MaxParts=1)
        except NotFoundError:
            return False
        return True

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        base = f"{self.root}/" if self.root else ""
        paginator = self.client.get_paginator("list_multipart_uploads")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for upload in page.get("Uploads", ()):
                    yield upload["Key"][len(base) :], upload["UploadId"]
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, self.url) from None

    # -- server-side copy and URLs ------------------------------------------------------------
    def can_copy_from(self, source: Connector) -> bool:
        return isinstance(source, S3Connector) and source._identity == self._identity

    def copy_from(self, source: Connector, info: ObjectInfo, key: str) -> ObjectInfo:
        assert isinstance(source, S3Connector)
        what = self._what(key)
        response = self._call(
            what,
            self.client.copy_object,
            Key=self._full(key),
            CopySource={"Bucket": source.bucket, "Key": source._full(info.key)},
            MetadataDirective="COPY",
        )
        etag = response["CopyObjectResult"]["ETag"].strip('"')
        # A plain-MD5 source keeps its ETag through a copy; anything else is checked by stat.
        if _plain_md5(info.signature) and etag != info.signature:
            raise ChecksumMismatch(f"{what}: the copy has ETag {etag}, the source {info.signature}")
        return ObjectInfo(key=key, size=info.size, signature=etag)

    def copy_part_from(
        self, source: Connector, info: ObjectInfo, key: str, upload_id: str, number: int, start: int, length: int
    ) -> Part:
        assert isinstance(source, S3Connector)
        response = self._call(
            f"{self._what(key)} part {number}",
            self.client.upload_part_copy,
            Key=self._full(key),
            UploadId=upload_id,
            PartNumber=number,
            CopySource={"Bucket": source.bucket, "Key": source._full(info.key)},
            CopySourceRange=f"bytes={start}-{start + length - 1}",
        )
        result = response["CopyPartResult"]
        native = result.get("ChecksumCRC32C")
        return Part(
            number=number, size=length, etag=result["ETag"].strip('"'), crc32c=from_b64(native) if native else None
        )

    def presign(self, key: str, expires_s: int) -> str:
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._full(key)}, ExpiresIn=expires_s
        )

    def close(self) -> None:
        self.client.close()
