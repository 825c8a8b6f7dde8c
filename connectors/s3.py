"""Amazon S3 and every S3-compatible store, through botocore (and awscrt, connectors/s3_crt.py, for the requests
that carry object bytes).

Without a profile the standard credential chain and configuration apply, so AWS_PROFILE and
AWS_ENDPOINT_URL_S3 work as they do for the AWS CLI. botocore's own retries are switched
off: the transfer engine retries once, in one place.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from email.header import Header, decode_header, make_header
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote_plus, urlencode, urlsplit
from xml.etree import ElementTree as ET

import botocore.credentials
import botocore.exceptions
import botocore.httpsession
import botocore.session
import structlog
from botocore.config import Config
from botocore.response import StreamingBody

from connectors import s3_crt
from connectors.base import (
    FULL_OBJECT_DIGESTS,
    MD5,
    MD5_OF_PARTS,
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
from ferry.errors import ChecksumMismatch, FerryError, NotFoundError, PermanentError, TransientError, UsageError
from ferry.net import in_words

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile

log = structlog.get_logger("ferry.s3")
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
# A store's refusal of a body that does not match the checksum header sent with it: S3's (Content-MD5 or
# x-amz-checksum-*, Ceph RGW's too), MinIO's (x-amz-checksum-*).
_CHECKSUM_REFUSED = {"BadDigest", "XAmzContentChecksumMismatch"}
_NETWORK_ERRORS = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
)


# What to change when TLS is spoken to a plain-HTTP endpoint.
_PLAIN_HTTP = ": write the profile's endpoint_url with http://"


def _answered(what: str, code: str, message: str, status: int, headers: Mapping[str, str]) -> Exception:
    """The ferry error for an error the store answered: its code, message, HTTP status and headers."""
    line = f"{what}: {code}: {message}".rstrip(": ")
    if code in _CHECKSUM_REFUSED:
        return ChecksumMismatch(line)
    if code in _TRANSIENT_CODES or status >= 500 or status == 429:
        retry_after = headers.get("retry-after")
        return TransientError(line, code=code, retry_after=float(retry_after) if retry_after else None)
    if code in _NOT_FOUND_CODES:
        return NotFoundError(line, code=code)
    if code == "PreconditionFailed":  # the only precondition ferry sends: a copy's or read's source is the listed one
        return PermanentError(f"{what}: the source changed since it was listed", code="Changed")
    return PermanentError(line, code=code)


def translate(exc: Exception, what: str) -> Exception:
    """The ferry error for a botocore (or CRT) exception, naming the object and the provider's code."""
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return _answered(what, code, error.get("Message") or "", status, headers)
    if isinstance(exc, s3_crt.Failure):
        if not exc.network:
            return _answered(what, exc.code, exc.message, exc.status, exc.headers)
        said = f"{what}: {exc.code}: {exc.message}"
        return PermanentError(said, code=exc.code) if exc.permanent else TransientError(said, code=exc.code)
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


def _if_match(signature: str | None) -> dict[str, str]:
    """A read's precondition: only the version with this ETag (S3 answers 412 PreconditionFailed to another)."""
    return {"IfMatch": f'"{signature}"'} if signature else {}


@dataclasses.dataclass(frozen=True)
class Changes:
    """One drain of a change log: the keys its events named; for those whose every record carries a sequencer, the
    state the latest one left (the object it wrote, None: removed), known without asking the store; the messages'
    receipt handles."""

    keys: set[str]
    latest: dict[str, ObjectInfo | None]
    handles: list[str]


def _latest(records: dict[str, list[dict]]) -> dict[str, ObjectInfo | None]:
    """Per key whose every record carries a sequencer, what the one with the highest says (S3 orders a key's events
    by it: hexadecimal strings of any length, compared as numbers); a key with a record without one (moto sends
    none), or whose latest is not a creation with its size and ETag or a removal, is left out: its state is asked of
    the store."""
    latest: dict[str, ObjectInfo | None] = {}
    for key, events in records.items():
        objects = [event["s3"]["object"] for event in events]
        if not all(_hex(o.get("sequencer")) is not None for o in objects):
            continue
        last = max(range(len(events)), key=lambda n: _hex(objects[n]["sequencer"]))
        state, name = objects[last], str(events[last].get("eventName", ""))
        if name.startswith("ObjectRemoved:"):
            latest[key] = None
        elif name.startswith("ObjectCreated:") and isinstance(state.get("size"), int) and state.get("eTag"):
            latest[key] = ObjectInfo(key=key, size=state["size"], signature=str(state["eTag"]).strip('"'))
    return latest


def _hex(value: object) -> int | None:
    try:
        return int(str(value), 16) if value else None
    except ValueError:
        return None


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


def _multipart_md5(etag: str) -> bool:
    """Whether etag has the form of S3's multipart ETag, the MD5 of the parts' MD5s and their count."""
    digest, dash, count = etag.partition("-")
    return bool(dash) and _plain_md5(digest) and count.isdigit()


def _etag_is_md5(response: dict) -> bool:
    """Whether S3 made this answer's ETag from the MD5 of the body: only for an object stored unencrypted or with
    SSE-S3; SSE-KMS, DSSE-KMS and SSE-C (the bucket's default or the request's) make it something else."""
    return not str(response.get("ServerSideEncryption", "")).startswith("aws:kms") and not response.get(
        "SSECustomerAlgorithm"
    )


# The headers of the write arguments a CRT request carries (SSE-C's key in its encoded form), and the answer's
# fields _write reads: botocore's names for both, so that one write path serves either client.
_HEADER_OF = {
    "ContentType": "Content-Type",
    "ContentMD5": "Content-MD5",
    "ChecksumAlgorithm": "x-amz-sdk-checksum-algorithm",
    "ChecksumCRC32C": "x-amz-checksum-crc32c",
    "ServerSideEncryption": "x-amz-server-side-encryption",
    "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
    "SSECustomerAlgorithm": "x-amz-server-side-encryption-customer-algorithm",
    "SSECustomerKey": "x-amz-server-side-encryption-customer-key",
    "SSECustomerKeyMD5": "x-amz-server-side-encryption-customer-key-MD5",
    "RequestPayer": "x-amz-request-payer",
}
_FIELD_OF = {
    "etag": "ETag",
    "x-amz-checksum-crc32c": "ChecksumCRC32C",
    "x-amz-server-side-encryption": "ServerSideEncryption",
    "x-amz-server-side-encryption-customer-algorithm": "SSECustomerAlgorithm",
}

# Endpoints that wrote without echoing the CRC32C ferry sent, once trusted to: each falls back to Content-MD5 for
# the rest of the process (never a write checked by neither).
_NO_ECHO: set[str] = set()


@dataclasses.dataclass(frozen=True)
class _Receipt:
    """How a connector's writes are checked on receipt: "crc32c" (the echo of the CRC32C the store verified) or
    "md5" (Content-MD5 too, and an unencrypted object's ETag held to it), and why."""

    check: str
    why: str


# receipt auto: what each endpoint other than AWS's was found to do with a body whose CRC32C is wrong, learned once
# per process by the first write's probe (S3Connector._receipt), one probe at a time per endpoint.
_LEARNED: dict[str, _Receipt] = {}
_LEARNING: dict[str, threading.Lock] = {}
# The probe's object: at the connector's root, a name ferry keeps for itself (no listing of ferry's shows it, so no
# diff, delete or gate counts it, nor copies it where the bucket is later a source), always the same, so that one
# left behind (its delete refused) is replaced and removed by the next probe.
PROBE_KEY = ".ferry-receipt-probe"
_PROBE_BODY = b"ferry's receipt probe: this body's CRC32C header is wrong on purpose\n"
# Attempts at each of the probe's requests, while the store answers a transient error.
_PROBE_ATTEMPTS = 3
# S3's operations by the class its price list bills them in (connectors/base.py's REQUEST_CLASSES); others: OTHER.
_REQUEST_CLASS = {
    "ListObjectsV2": "LIST",
    "ListParts": "LIST",
    "ListMultipartUploads": "LIST",
    "HeadObject": "HEAD",
    "HeadBucket": "HEAD",
    "GetObject": "GET",
    "PutObject": "PUT",
    "UploadPart": "PUT",
    "CopyObject": "COPY",
    "UploadPartCopy": "COPY",
    "CreateMultipartUpload": "MULTIPART",
    "CompleteMultipartUpload": "MULTIPART",
    "AbortMultipartUpload": "MULTIPART",
    "DeleteObject": "DELETE",
}


def _ascii_metadata(metadata: Mapping[str, str], what: str) -> dict[str, str]:
    """User metadata as S3 takes it in headers, the same by either client: a value with other than US-ASCII in it as
    RFC 2047 encoded words (S3 stores such a value decoded, and gives it back encoded); a name must be ASCII."""
    sent = {}
    for name, value in metadata.items():
        if not name.isascii():
            raise PermanentError(f"{what}: user metadata name {name!r} is not US-ASCII, which S3 cannot store")
        sent[name] = value if value.isascii() else Header(value, "utf-8").encode(linesep="")
    return sent


def _unfolded(value: str) -> str:
    """A metadata value as it was written: RFC 2047 encoded words (S3's answer for one not in US-ASCII) decoded."""
    if not (value.startswith("=?") and value.endswith("?=")):
        return value
    try:
        return str(make_header(decode_header(value)))
    except (ValueError, LookupError):  # a value that only looks encoded
        return value


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
        listing_seeks=True,
    )
    call_requests = {
        "stat": {"HEAD": 1},
        "part_size": {"HEAD": 1},
        "get": {"GET": 1},
        "open_range": {"GET": 1},
        "put": {"PUT": 1},
        "put_part": {"PUT": 1},
        "copy_from": {"COPY": 1},
        "copy_part_from": {"COPY": 1},
        "begin": {"MULTIPART": 1},
        "complete": {"MULTIPART": 1},
        "delete": {"DELETE": 1},
    }
    list_page = 1000

    def __init__(
        self, url: str, bucket: str, root: str, session: botocore.session.Session, client_kwargs: dict,
        *, receipt: str = "auto", encryption: dict | None = None, customer_key: bytes | None = None,
        transfer_client: str = "auto", requester_pays: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(url)
        self.bucket = bucket
        self.root = root
        self._read_timeout_s = client_kwargs.pop("read_timeout", READ_TIMEOUT_S)
        config = Config(
            max_pool_connections=1024,
            retries={"total_max_attempts": 1},
            connect_timeout=10,
            read_timeout=self._read_timeout_s,
            tcp_keepalive=True,
            # ferry sends and checks its own CRC32C and MD5; botocore's defaults would add a
            # second pass over every body and false alarms on copies (moto's CRC quirk).
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": client_kwargs.pop("addressing_style", "auto")},
        )
        try:
            self.client = session.create_client("s3", config=config, **client_kwargs)
        except botocore.exceptions.BotoCoreError as exc:
            raise translate(exc, url) from None
        self.endpoint = self.client.meta.endpoint_url
        # Other services (STS: who ferry runs as; SQS: the bucket's event notifications) at the profile's endpoint
        # where it names one, as the S3 client is.
        self._service = functools.partial(
            session.create_client,
            endpoint_url=client_kwargs.get("endpoint_url"),
            region_name=client_kwargs.get("region_name"),
        )
        credentials = session.get_credentials()
        self._identity = (self.endpoint, credentials.access_key if credentials else None)
        # The receipt check of a write: "crc32c" trusts the store to verify the CRC32C sent and checks its echo;
        # "md5" also sends Content-MD5 and holds an unencrypted object's ETag to the body's MD5. "auto": crc32c on
        # AWS's own endpoints (S3 refuses a body that does not match it, BadDigest); elsewhere learned at the first
        # write (None until then), as the store answers a probe (_probe_receipt): moto, for one, echoes the CRC32C
        # it is sent without checking it.
        host = urlsplit(self.endpoint).hostname or ""
        self._receipt_known: _Receipt | None = None
        if receipt != "auto":
            self._receipt_known = _Receipt(receipt, f"the profile's receipt: {receipt}")
        elif host.endswith(".amazonaws.com"):
            self._receipt_known = _Receipt("crc32c", "an AWS endpoint: S3 refuses a body whose CRC32C is wrong")
        # The requests this connector's probe sent, by class (counted in requests_sent too).
        self._probe_sent: Counter[str] = Counter()
        # SSE-KMS on every write (the encryption a profile names), SSE-C on every request of an object.
        self._encryption = dict(encryption or {})
        self._customer: dict = {}
        self._customer_encoded: dict = {}
        if customer_key is not None:
            self._customer = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": customer_key}
            # ListParts (a resume's "is the upload open?") needs the key too, and botocore does not encode it for
            # that call (given raw, its validation error would quote it).
            self._customer_encoded = {
                "SSECustomerAlgorithm": "AES256",
                "SSECustomerKey": base64.b64encode(customer_key).decode(),
                "SSECustomerKeyMD5": hex_to_b64(md5_hex(customer_key)),
            }
        self._crt_choice = transfer_client
        self._crt = self._crt_sender(transfer_client, session)
        # Whether the CRT may send (None: not known yet). Decided once, by botocore's HEAD of the bucket (check(), or
        # before the first request the CRT would send): it proves the endpoint and its TLS with botocore's
        # diagnostics (the CRT says only "socket closed" to TLS spoken to plain HTTP), and it says the bucket's
        # region, which the CRT must sign for (botocore follows a bucket to its region by itself; the CRT does not).
        self._crt_ready: bool | None = None
        self._crt_lock = threading.Lock()
        # Every request sent, by class: botocore's calls (each page of a listing one) and the CRT's.
        self._sent: Counter[str] = Counter()
        self._sent_lock = threading.Lock()
        self.client.meta.events.register("before-call.s3", self._count_call)
        # A Requester Pays bucket: every operation that can say so says the requester pays (RequestPayer).
        self._requester_pays = requester_pays
        if requester_pays:
            self.client.meta.events.register("before-parameter-build.s3", self._pay_as_requester)

    def _crt_sender(self, choice: str, session: botocore.session.Session) -> s3_crt.Sender | None:
        """What sends the requests that carry object bytes: the CRT (connectors/s3_crt.py) where it can, by the
        profile's transfer_client ("auto": where awscrt is installed and nothing below stands in the way); None
        for botocore. Endpoint, addressing style, region, credentials and TLS verification are botocore's."""
        if choice == "botocore":
            return None
        credentials = session.get_credentials()
        host = urlsplit(self.endpoint).hostname or ""
        proxy = urllib.request.getproxies().get(urlsplit(self.endpoint).scheme)
        why_not = (
            "awscrt is not installed (pip install awscrt)" if not s3_crt.available()
            else "no AWS credentials" if credentials is None
            else f"a proxy ({proxy}) is set for {host}, which ferry's CRT client does not use"
            if proxy and not urllib.request.proxy_bypass(host) else None
        )  # fmt: skip
        if why_not is not None:
            if choice == "crt":
                raise UsageError(f"{self.url}: transfer_client crt: {why_not}")
            return None
        assert credentials is not None

        def current() -> tuple[str, str, str | None]:
            frozen = credentials.get_frozen_credentials()
            return frozen.access_key, frozen.secret_key, frozen.token

        # Credentials that never change (keys, a static profile) are handed to the CRT once; refreshable ones (a
        # role, SSO, instance metadata) are asked for at each signing, as botocore refreshes them.
        refreshable = isinstance(credentials, botocore.credentials.RefreshableCredentials)

        url = self.client.generate_presigned_url("put_object", Params={"Bucket": self.bucket, "Key": "_"})
        session_http = getattr(getattr(self.client, "_endpoint", None), "http_session", None)
        verify = botocore.httpsession.get_cert_path(getattr(session_http, "_verify", True))
        try:
            return s3_crt.Sender(
                url.partition("?")[0][:-1], self.client.meta.region_name, current if refreshable else current(), verify,
                connections=1024,
                read_timeout_s=self._read_timeout_s,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the CRT's TLS set-up (a CA bundle it cannot read): botocore's path
            if choice == "crt":
                raise UsageError(f"{self.url}: transfer_client crt: {exc}") from None
            return None

    def _prove_crt(self, head: dict | None = None) -> None:
        """Decide once whether the CRT sends (see _crt_ready), from botocore's answer to a HEAD of the bucket (head,
        or one made here). With transfer_client auto, a bucket in another region than the client's, or a HEAD that
        fails, leaves every request to botocore; with crt, the region must be the profile's."""
        with self._crt_lock:
            if self._crt is None or self._crt_ready is not None:
                return
            if head is None:
                try:
                    head = self.client.head_bucket(Bucket=self.bucket)
                except Exception:  # noqa: BLE001 - not allowed, or not reachable: botocore's requests will say
                    self._crt_ready = self._crt_choice == "crt"
                    return
            region = head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
            if region and region != self._crt.region:
                if self._crt_choice == "crt":
                    raise UsageError(
                        f"{self.url}: transfer_client crt: the bucket is in {region}, the client signs for "
                        f"{self._crt.region}: set the profile's region: {region}"
                    )
                self._crt_ready = False
                return
            self._crt_ready = True

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
        # botocore's own session, not boto3's: boto3 adds nothing a client of ferry's uses, and importing it (and
        # s3transfer with it) is a tenth of a small sync's start-up.
        session = botocore.session.Session()
        # Timestamps (a listing's LastModified, a HEAD's) kept as the store wrote them: ferry reads none, and
        # botocore's dateutil parse of each is a tenth of a small-object sync's client CPU.
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        try:
            if "profile_name" in session_kwargs:
                session.set_config_variable("profile", session_kwargs["profile_name"])
            if session_kwargs.keys() & {"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}:
                session.set_credentials(
                    session_kwargs.get("aws_access_key_id"), session_kwargs.get("aws_secret_access_key"),
                    session_kwargs.get("aws_session_token"),
                )  # fmt: skip
            region = session.get_config_variable("region")
        except botocore.exceptions.BotoCoreError as exc:
            raise translate(exc, location.url) from None
        if region is None and "region_name" not in client_kwargs:
            client_kwargs["region_name"] = "us-east-1"
        extra: dict = {}
        if profile is not None:
            extra = {
                "receipt": profile.receipt,
                "encryption": profile.encryption_args(),
                "customer_key": profile.customer_key(),
                "transfer_client": profile.transfer_client,
                "requester_pays": profile.requester_pays,
            }
        connector = cls(location.url, location.bucket, location.prefix, session, client_kwargs, **extra)
        if profile is not None and profile.min_part_size:
            connector.capabilities = dataclasses.replace(cls.capabilities, min_part_size=profile.min_part_size)
        if connector._customer or connector._requester_pays:
            # A presigned URL cannot carry the SSE-C key, nor the requester's consent to pay: no copy from a URL.
            connector.capabilities = dataclasses.replace(connector.capabilities, presign=False)
        return connector

    def network_host(self) -> str | None:
        return urlsplit(self.endpoint).hostname

    @staticmethod
    def _pay_as_requester(params: dict, model, **_event) -> None:
        # botocore's before-parameter-build event, before each call's parameters are serialised.
        if model.input_shape is not None and "RequestPayer" in model.input_shape.members:
            params.setdefault("RequestPayer", "requester")

    def _payer(self) -> dict[str, str]:
        """The argument a copy from this bucket takes when it is Requester Pays (the copy reads it)."""
        return {"RequestPayer": "requester"} if self._requester_pays else {}

    def _count_call(self, model, **_event) -> None:
        # botocore's before-call event: one per call of the client (ferry's retries call it again).
        self._count(model.name)

    def _count(self, operation: str) -> None:
        with self._sent_lock:
            self._sent[_REQUEST_CLASS.get(operation, "OTHER")] += 1

    def requests_sent(self) -> dict[str, int] | None:
        with self._sent_lock:
            return dict(self._sent)

    def region(self) -> str | None:
        return self.client.meta.region_name

    def default_encryption(self) -> str | None:
        try:
            answer = self._call(self.url, self.client.get_bucket_encryption)
        except FerryError:  # none set, or not ours to read: not told
            return None
        rules = answer["ServerSideEncryptionConfiguration"]["Rules"]
        algorithm = rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"]
        return f"{algorithm} bucket-key" if rules[0].get("BucketKeyEnabled") else algorithm

    def listing_requests(self, pages: int) -> dict[str, int] | None:
        # Where the CRT may send, the first request is botocore's HEAD of the bucket that decides it (_prove_crt).
        return {"LIST": pages, **({"HEAD": 1} if self._crt is not None else {})}

    def write_encryption(self) -> str | None:
        return self._encryption.get("ServerSideEncryption")

    def archive_status(self, key: str) -> str | None:
        head = self._call(self._what(key), self.client.head_object, Key=self._full(key), **self._customer)
        return head.get("ArchiveStatus")

    def request_payment(self) -> tuple[bool | None, bool]:
        try:
            payer = self._call(self.url, self.client.get_bucket_request_payment).get("Payer")
        except FerryError:  # not ours to read (the bucket owner's permission): not told
            return None, self._requester_pays
        return None if payer is None else payer == "Requester", self._requester_pays

    def copy_checks_source(self, info: ObjectInfo) -> bool:
        # copy_from's check: a copy's ETag equals a plain-MD5 source's unless this side encrypts with KMS; otherwise
        # the source's checksum, from one HEAD when the listing did not give it.
        return info.checksum is None and (bool(self._encryption) or not _plain_md5(info.signature))

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
            head = self.client.head_bucket(Bucket=self.bucket)
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
        self._prove_crt(head)

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        if self._by_crt():
            yield from self._crt_list(prefix, start_after)
            return
        base = f"{self.root}/" if self.root else ""
        paginator = self.client.get_paginator("list_objects_v2")
        args = {"StartAfter": base + start_after} if start_after else {}
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix, **args):
                for item in page.get("Contents", ()):
                    key = item["Key"][len(base) :]
                    if key and key != PROBE_KEY:
                        etag, storage_class = item["ETag"].strip('"'), item.get("StorageClass")
                        yield ObjectInfo(key=key, size=item["Size"], signature=etag, storage_class=storage_class)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, self._what(prefix)) from None

    def _crt_list(self, prefix: str, start_after: str) -> Iterator[ObjectInfo]:
        """list() by the CRT: ListObjectsV2 pages (keys URL-encoded by the store, as botocore asks for them too, so
        that any key survives XML) read by ElementTree."""
        assert self._crt is not None
        base = f"{self.root}/" if self.root else ""
        query = {"list-type": "2", "encoding-type": "url", "prefix": base + prefix}
        paying = [(_HEADER_OF[name], value) for name, value in self._payer().items()]
        if start_after:
            query["start-after"] = base + start_after
        while True:
            what, args = self._what(prefix), urlencode(sorted(query.items()), quote_via=quote)
            self._count("ListObjectsV2")
            try:
                page = ET.fromstring(self._crt.send("ListObjectsV2", "GET", "", args, paying)[1])
            except s3_crt.Failure as exc:
                raise translate(exc, what) from None
            except ET.ParseError as exc:  # a page cut short: listed again from where it stopped
                raise TransientError(f"{what}: the listing's answer is not whole XML ({exc})", code="BadXML") from None
            ns = page.tag[: page.tag.find("}") + 1]  # S3's namespace, or none (some S3-compatible stores)
            # Keys decoded only where the store says it encoded them (as botocore does): one that ignores
            # encoding-type sends a+b as a+b.
            decode = unquote_plus if page.findtext(f"{ns}EncodingType") == "url" else str
            for item in page.iterfind(f"{ns}Contents"):
                key = decode(item.findtext(f"{ns}Key") or "")[len(base) :]
                if key and key != PROBE_KEY:
                    size, etag = int(item.findtext(f"{ns}Size") or 0), item.findtext(f"{ns}ETag") or ""
                    storage_class = item.findtext(f"{ns}StorageClass")
                    yield ObjectInfo(key=key, size=size, signature=etag.strip('"'), storage_class=storage_class)
            token = page.findtext(f"{ns}NextContinuationToken")
            if page.findtext(f"{ns}IsTruncated") != "true" or not token:
                return
            query = {**query, "continuation-token": token}
            query.pop("start-after", None)

    def stat(self, key: str) -> ObjectInfo:
        head = self._call(
            self._what(key), self.client.head_object, Key=self._full(key), ChecksumMode="ENABLED", **self._customer
        )
        return self._info(key, head)

    def _info(self, key: str, head: dict) -> ObjectInfo:
        """ObjectInfo from a HEAD or GET response; ferry's checksum is taken out of the user metadata."""
        metadata = {name: _unfolded(value) for name, value in head.get("Metadata", {}).items()}
        checksum = metadata.pop(CHECKSUM_META, None)
        etag = head["ETag"].strip('"')
        # A checksum of the whole object: S3 says FULL_OBJECT; a single-part object's is one whatever it says (moto
        # gives no type); a multipart one of another type is a checksum of checksums ("...-N").
        whole = head.get("ChecksumType") == "FULL_OBJECT" or ("ChecksumType" not in head and "-" not in etag)
        native = head.get("ChecksumCRC32C")
        if checksum is None and native and whole:
            checksum = label(from_b64(native))
        digests = {}
        if whole:
            digests = {kind: value for kind in FULL_OBJECT_DIGESTS if (value := head.get(f"Checksum{kind.upper()}"))}
        if self._md5_etag(head):
            if _plain_md5(etag):
                digests[MD5] = etag
            elif _multipart_md5(etag):
                digests[MD5_OF_PARTS] = etag
        return ObjectInfo(
            key=key,
            size=head["ContentLength"],
            signature=etag,
            checksum=checksum,
            content_type=head.get("ContentType"),
            metadata=metadata,
            digests=digests,
        )

    def part_size(self, key: str) -> int | None:
        """The size every part but the last has, as tools write them: the first part's, from a HEAD of part 1,
        where a HEAD of the last part agrees (None where it does not: the parts are of other sizes)."""
        what, full = self._what(key), self._full(key)
        head = self._call(what, self.client.head_object, Key=full, PartNumber=1, **self._customer)
        count, size = head.get("PartsCount"), head["ContentLength"]
        if not count:
            return None
        if count > 1:
            total = str(head.get("ContentRange", "")).rpartition("/")[2]  # S3 says it; moto does not
            if not total.isdigit():
                total = str(self._call(what, self.client.head_object, Key=full, **self._customer)["ContentLength"])
            last = self._call(what, self.client.head_object, Key=full, PartNumber=count, **self._customer)
            if last["ContentLength"] != int(total) - (count - 1) * size:
                return None
        return size

    def get(self, key: str, *, if_match: str | None = None) -> tuple[bytes, ObjectInfo]:
        what = self._what(key)
        response = self._call(
            what,
            self.client.get_object,
            Key=self._full(key),
            ChecksumMode="ENABLED",
            **_if_match(if_match),
            **self._customer,
        )
        try:
            # ChecksumMode brings the store's full-object checksum, which botocore would hash the body for once more:
            # the transfer engine holds the body to it itself (connectors/transfer/source_checksum.py), in one pass.
            data = StreamingBody.read(response["Body"])
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        return data, self._info(key, response)

    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        if length == 0:
            return b""
        what = self._what(key)
        response = self._call(
            what,
            self.client.get_object,
            Key=self._full(key),
            Range=f"bytes={start}-{start + length - 1}",
            **_if_match(if_match),
            **self._customer,
        )
        try:
            data = response["Body"].read()
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        if len(data) != length:
            raise TransientError(f"{what}: short read: {len(data)} of {length} bytes", code="ShortRead")
        return data

    def _write_args(self, spec: WriteSpec, *, with_checksum: bool, what: str) -> dict:
        metadata = _ascii_metadata(spec.metadata, what)
        if with_checksum and spec.checksum:
            metadata[CHECKSUM_META] = spec.checksum
        args: dict = {"Metadata": metadata, **self._encryption, **self._customer}
        if spec.content_type:
            args["ContentType"] = spec.content_type
        return args

    def _md5_receipts(self) -> bool:
        """Whether writes carry Content-MD5 and have their ETags held to MD5s (receipt "md5")."""
        return self._receipt().check == "md5" or self.endpoint in _NO_ECHO

    def _receipt(self) -> _Receipt:
        """The receipt check of this connector's writes: the profile's or AWS's, else what the endpoint was found to
        do, by the probe of the first write in this process that asked (the others wait for it)."""
        if self._receipt_known is None:
            with _LEARNING.setdefault(self.endpoint, threading.Lock()):
                learned = _LEARNED.get(self.endpoint)
                if learned is None:
                    learned = _LEARNED[self.endpoint] = self._probe_receipt()
                    log.info("receipt check learned", endpoint=self.endpoint, check=learned.check, why=learned.why)
                self._receipt_known = learned
        return self._receipt_known

    def _probe_receipt(self) -> _Receipt:
        """Whether the store refuses a body whose x-amz-checksum-crc32c is wrong: a PutObject of a few bytes at
        PROBE_KEY, by the client and with the encryption later writes use, carrying a CRC32C that is not the body's.
        Refused as a checksum mismatch: the store verifies, crc32c. Taken: md5, and the object deleted at once. Any
        other answer (denied, a transient error on every attempt) proves nothing: md5."""
        what = self._what(PROBE_KEY)
        args = {**self._write_args(WriteSpec(), with_checksum=False, what=what), "ChecksumAlgorithm": "CRC32C"}
        wrong = {**args, "ChecksumCRC32C": to_b64(crc32c(_PROBE_BODY) ^ 0xFFFFFFFF)}
        try:
            self._probing("PUT", lambda: self._put_object(what, PROBE_KEY, _PROBE_BODY, wrong))
        except ChecksumMismatch:
            return _Receipt("crc32c", "the store refused a body whose CRC32C was wrong")
        except TransientError as exc:
            self._remove_probe(args)  # the store may have taken it, its answer lost
            return _Receipt("md5", f"the receipt probe failed: {exc}")
        except FerryError as exc:
            return _Receipt("md5", f"the receipt probe was refused: {exc}")
        self._remove_probe(args)
        return _Receipt("md5", "the store took a body whose CRC32C was wrong")

    def _remove_probe(self, args: dict) -> None:
        """Delete the probe's object. One the store will not delete is written again with its true CRC32C (a store
        that took the wrong one may keep it, and other tools' reads check it), and said once."""
        what = self._what(PROBE_KEY)
        try:
            self._probing("DELETE", lambda: self.delete(PROBE_KEY))
        except FerryError as exc:
            with contextlib.suppress(FerryError):
                true = {**args, "ChecksumCRC32C": to_b64(crc32c(_PROBE_BODY))}
                self._probing("PUT", lambda: self._put_object(what, PROBE_KEY, _PROBE_BODY, true))
            log.warning("the receipt probe's object stays: delete it", key=what, error=str(exc))

    def _probing(self, kind: str, send: Callable[[], object]) -> None:
        """send() once, and again while it fails as transient, up to _PROBE_ATTEMPTS times; each counted."""
        for attempt in range(1, _PROBE_ATTEMPTS + 1):
            self._probe_sent[kind] += 1
            try:
                send()
                return
            except TransientError as exc:
                if attempt == _PROBE_ATTEMPTS:
                    raise
                time.sleep(min(exc.retry_after or 0.2 * attempt, 5.0))

    def receipt_check(self) -> dict[str, dict]:
        known = self._receipt_known
        if known is None:  # nothing written yet (a dry run, a source): not learned
            return {}
        if known.check == "crc32c" and self.endpoint in _NO_ECHO:
            known = _Receipt("md5", "the store did not echo the CRC32C sent")
        said: dict = {"check": known.check, "why": known.why}
        if self._probe_sent:
            said["probe_requests"] = dict(self._probe_sent)
        return {self.endpoint: said}

    def _body_checks(self, data: bytes, known: int | None = None) -> tuple[dict, str | None, int]:
        """The checksum headers a write of data carries, the MD5 sent (None: the echo alone is checked) and the
        CRC32C (known: the caller's, computed over these bytes already)."""
        crc = crc32c(data) if known is None else known
        args = {"ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": to_b64(crc)}
        if not self._md5_receipts():
            return args, None, crc
        md5 = md5_hex(data)
        return {**args, "ContentMD5": hex_to_b64(md5)}, md5, crc

    def _md5_etag(self, response: dict) -> bool:
        """Whether this answer's ETag is the MD5 of the bytes (a commit's answer never says SSE-C: the profile does)."""
        return _etag_is_md5(response) and not self._customer

    def _write(self, what: str, data: bytes, send: Callable[[dict], dict], known: int | None = None) -> tuple[str, int]:
        """Send data by send(checksum headers) and check the answer against what was sent (see _body_checks): its
        ETag and CRC32C. A store trusted to echo the CRC32C that does not is written once more, with Content-MD5."""
        while True:
            checks, md5, crc = self._body_checks(data, known)
            response = send(checks)
            etag = response["ETag"].strip('"')
            echoed = response.get("ChecksumCRC32C")
            if echoed is not None and echoed != to_b64(crc):
                raise ChecksumMismatch(f"{what}: the store holds CRC32C {echoed}, ferry sent {to_b64(crc)}")
            if md5 is None and echoed is None:
                _NO_ECHO.add(self.endpoint)  # never a write checked by neither: the next pass sends Content-MD5
                continue
            if md5 is not None and self._md5_etag(response) and _plain_md5(etag) and etag != md5:
                raise ChecksumMismatch(f"{what}: the store holds MD5 {etag}, ferry sent {md5}")
            return etag, crc

    def _by_crt(self) -> bool:
        if self._crt is not None and self._crt_ready is None:
            self._prove_crt()
        return bool(self._crt_ready)

    def _crt_write(self, what: str, operation: str, key: str, query: str, args: dict, data: bytes) -> dict:
        """Write data by the CRT with botocore's arguments (args); the answer's fields _write reads, named as
        botocore names them."""
        assert self._crt is not None
        headers = []
        for name, value in {**args, **self._customer_encoded, **self._payer()}.items():
            if name == "Metadata":
                headers += [(f"x-amz-meta-{k}", v) for k, v in value.items()]
            else:
                headers.append((_HEADER_OF[name], value))
        self._count(operation)
        try:
            answer, _ = self._crt.send(operation, "PUT", self._full(key), query, headers, data)
        except s3_crt.Failure as exc:
            raise translate(exc, what) from None
        return {field: answer[header] for header, field in _FIELD_OF.items() if header in answer}

    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        what = self._what(key)
        args = self._write_args(spec, with_checksum=True, what=what)

        def send(checks: dict) -> dict:
            return self._put_object(what, key, data, {**args, **checks})

        # The stored checksum is the CRC32C of data (the engine computed it while reading): not hashed again.
        etag, _ = self._write(what, data, send, parse(spec.checksum))
        return ObjectInfo(key=key, size=len(data), signature=etag, checksum=spec.checksum)

    def _put_object(self, what: str, key: str, data: bytes, args: dict) -> dict:
        """One PutObject of data at key with botocore's arguments, by the client that sends object bytes."""
        if self._by_crt():
            return self._crt_write(what, "PutObject", key, "", args, data)
        return self._call(what, self.client.put_object, Key=self._full(key), Body=data, **args)

    def delete(self, key: str) -> None:
        self._call(self._what(key), self.client.delete_object, Key=self._full(key))

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        response = self._call(
            self._what(key),
            self.client.create_multipart_upload,
            Key=self._full(key),
            ChecksumAlgorithm="CRC32C",
            ChecksumType="FULL_OBJECT",
            **self._write_args(spec, with_checksum=False, what=self._what(key)),
        )
        return response["UploadId"]

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = f"{self._what(key)} part {number}"

        def send(checks: dict) -> dict:
            if self._by_crt():
                query = f"partNumber={number}&uploadId={quote(upload_id, safe='')}"
                return self._crt_write(what, "UploadPart", key, query, checks, data)
            return self._call(
                what, self.client.upload_part, Key=self._full(key), UploadId=upload_id, PartNumber=number, Body=data,
                **self._customer, **checks,
            )  # fmt: skip

        etag, crc = self._write(what, data, send)
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
            **self._customer,
        )
        etag = response["ETag"].strip('"')
        echoed = response.get("ChecksumCRC32C")
        if full is not None and echoed is not None and echoed != to_b64(full):
            raise ChecksumMismatch(f"{what}: the store assembled CRC32C {echoed}, the parts make {to_b64(full)}")
        # The store was given the whole object's CRC32C to verify; its ETag is an MD5 of MD5s only on receipt md5.
        expected = _multipart_etag(parts) if self._md5_receipts() and self._md5_etag(response) else None
        if expected is not None and etag != expected:
            raise ChecksumMismatch(f"{what}: the store assembled ETag {etag}, the parts make {expected}")
        return ObjectInfo(key=key, size=sum(p.size for p in parts), signature=etag, checksum=spec.checksum)

    def abort(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._call(self._what(key), self.client.abort_multipart_upload, Key=self._full(key), UploadId=upload_id)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        try:
            self._call(
                self._what(key), self.client.list_parts, Key=self._full(key), UploadId=upload_id, MaxParts=1,
                **self._customer_encoded,
            )  # fmt: skip
        except NotFoundError:
            return False
        return True

    def body_copies(self) -> int:
        # The CRT buffers a DEFAULT request's whole body before it sends it (for its own retry), beside ferry's.
        return 2 if self._by_crt() else 1

    def uploaded_parts(self, key: str, upload_id: str) -> list[Part]:
        parts = []
        paginator = self.client.get_paginator("list_parts")
        try:
            pages = paginator.paginate(
                Bucket=self.bucket, Key=self._full(key), UploadId=upload_id, **self._customer_encoded
            )
            for page in pages:
                for listed in page.get("Parts", ()):
                    crc = listed.get("ChecksumCRC32C")
                    parts.append(
                        Part(
                            number=listed["PartNumber"],
                            size=listed["Size"],
                            etag=listed["ETag"].strip('"'),
                            crc32c=from_b64(crc) if crc else None,
                        )
                    )
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, self._what(key)) from None
        return parts

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
        # A copy of an SSE-C object would need the source's key in this request too: such objects travel by bytes.
        return (
            isinstance(source, S3Connector)
            and source._identity == self._identity
            and not (self._customer or source._customer)
        )

    def copy_from(self, source: Connector, info: ObjectInfo, key: str) -> ObjectInfo:
        assert isinstance(source, S3Connector)
        what = self._what(key)
        response = self._call(
            what,
            self.client.copy_object,
            Key=self._full(key),
            CopySource={"Bucket": source.bucket, "Key": source._full(info.key)},
            # Only the version the listing saw: another one is a change (PreconditionFailed), copied by the next run.
            CopySourceIfMatch=info.signature,
            MetadataDirective="COPY",
            ChecksumAlgorithm="CRC32C",
            **self._encryption,
            **source._payer(),
        )
        result = response["CopyObjectResult"]
        etag = result["ETag"].strip('"')
        # Proof that the copy holds the source's bytes: the same plain ETag (an MD5 on both sides), else the copy's
        # CRC32C, the store's own, held to the source's checksum (from the listing, or one HEAD of the source). Under
        # SSE-KMS on either side the ETags differ by nature: the CRC32C decides.
        if etag != info.signature or not _plain_md5(etag):
            copied = result.get("ChecksumCRC32C")
            source_sum = info.checksum or source.stat(info.key).checksum
            expected = parse(source_sum)
            if copied is not None and expected is not None and from_b64(copied) != expected:
                raise ChecksumMismatch(f"{what}: the copy holds CRC32C {copied}, the source {source_sum}")
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
            CopySourceIfMatch=info.signature,
            CopySourceRange=f"bytes={start}-{start + length - 1}",
            **source._payer(),
        )
        result = response["CopyPartResult"]
        native = result.get("ChecksumCRC32C")
        return Part(
            number=number, size=length, etag=result["ETag"].strip('"'), crc32c=from_b64(native) if native else None
        )

    # -- the bucket's policy (a cut-over's freeze) ------------------------------------------------
    def bucket_policy(self) -> str | None:
        """The bucket's policy document as the store holds it; None when it has none."""
        try:
            return self._call(f"{self.url}: bucket policy", self.client.get_bucket_policy)["Policy"]
        except PermanentError as exc:
            if exc.code == "NoSuchBucketPolicy":
                return None
            raise

    def set_bucket_policy(self, policy: str | None) -> None:
        """Put policy on the bucket, or delete the bucket's policy when policy is None."""
        what = f"{self.url}: bucket policy"
        if policy is None:
            self._call(what, self.client.delete_bucket_policy)
        else:
            self._call(what, self.client.put_bucket_policy, Policy=policy)

    def caller_arn(self) -> str:
        """The ARN of the identity this connector's requests are signed as (STS GetCallerIdentity)."""
        try:
            return self._service("sts").get_caller_identity()["Arn"]
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"{self.url}: who ferry runs as (sts:GetCallerIdentity)") from None

    # -- S3 event notifications through SQS (a cut-over's change log) ----------------------------------------------
    def changed_keys(self, queue_url: str) -> Changes:
        """What the bucket's event notifications waiting in queue_url say of the keys under the root: every key
        they name, each key's state by its latest event where every record of it carries a sequencer, and the
        messages' receipt handles, to delete once acted on (`forget_events`). Test events, other buckets' events
        and keys outside the root are left out; a key named twice is one key."""
        sqs, what = self._service("sqs"), f"{self.url}: events in {queue_url}"
        records: dict[str, list[dict]] = {}
        handles: list[str] = []
        while True:
            try:
                answer = sqs.receive_message(
                    QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=600
                )
            except Exception as exc:  # noqa: BLE001
                raise translate(exc, what) from None
            messages = answer.get("Messages", [])
            if not messages:
                return Changes(set(records), _latest(records), handles)
            for message in messages:
                handles.append(message["ReceiptHandle"])
                for key, record in self._events(message["Body"]):
                    records.setdefault(key, []).append(record)

    def _events(self, body: str) -> list[tuple[str, dict]]:
        """(key under the root, record) of each of this bucket's S3 event records a message's body holds; none for a
        test event, another bucket's, a key outside the root or the receipt probe's, a body that is no event."""
        try:
            message = json.loads(body)
        except ValueError:
            return []
        base, events = f"{self.root}/" if self.root else "", []
        for record in message.get("Records", []) if isinstance(message, dict) else []:
            entry = record.get("s3", {})
            if entry.get("bucket", {}).get("name") != self.bucket:
                continue
            key = unquote_plus(entry.get("object", {}).get("key", ""))
            if key.startswith(base) and key not in (base, base + PROBE_KEY):
                events.append((key[len(base) :], record))
        return events

    def sample_events(self, queue_url: str, most: int) -> tuple[int, int, list[float]]:
        """Of the first `most` messages waiting in queue_url, read and handed back (visible again once read): the S3
        events under the root they hold, their bytes (a removal's none), and when SQS received each message holding
        one (epoch seconds)."""
        sqs, what = self._service("sqs"), f"{self.url}: events in {queue_url}"
        events = size = read = 0
        received: list[float] = []
        handles: list[str] = []
        try:
            while read < most:
                answer = sqs.receive_message(
                    QueueUrl=queue_url, MaxNumberOfMessages=min(10, most - read), WaitTimeSeconds=0,
                    VisibilityTimeout=60, MessageSystemAttributeNames=["SentTimestamp"],
                )  # fmt: skip
                messages = answer.get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    read += 1
                    handles.append(message["ReceiptHandle"])
                    held = self._events(message["Body"])
                    if held:
                        events += len(held)
                        size += sum(int(record["s3"]["object"].get("size") or 0) for _, record in held)
                        received.append(int(message["Attributes"]["SentTimestamp"]) / 1000)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        finally:
            # Visible again at once: the cut-over's deltas read them.
            for start in range(0, len(handles), 10):
                batch = [
                    {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 0}
                    for n, h in enumerate(handles[start : start + 10])
                ]
                with contextlib.suppress(Exception):  # at worst they come back after 60 s
                    sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=batch)
        return events, size, received

    def forget_events(self, queue_url: str, handles: list[str]) -> None:
        """Delete the event messages that were acted on."""
        sqs = self._service("sqs")
        for start in range(0, len(handles), 10):
            batch = [{"Id": str(n), "ReceiptHandle": h} for n, h in enumerate(handles[start : start + 10])]
            try:
                sqs.delete_message_batch(QueueUrl=queue_url, Entries=batch)
            except Exception as exc:  # noqa: BLE001
                raise translate(exc, f"{self.url}: events in {queue_url}") from None

    def presign(self, key: str, expires_s: int) -> str:
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._full(key)}, ExpiresIn=expires_s
        )

    def close(self) -> None:
        self.client.close()
