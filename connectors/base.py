"""The connector contract: a small required interface plus declared optional features.

A connector is bound to one root (a bucket and prefix, a container and prefix, a directory);
every key it takes or yields is relative to that root and is carried exactly: no Unicode
normalisation, no URL-decoding, no collapsing of ``//``.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile


GiB = 1 << 30
MiB = 1 << 20
# The classes price lists bill a store's requests in (a HEAD is billed as a GET, a DELETE is free; multipart calls
# are those that begin, complete, abort or list an upload): what a connector that counts its requests counts them in.
REQUEST_CLASSES = ("LIST", "HEAD", "GET", "PUT", "COPY", "MULTIPART", "DELETE", "OTHER")
# Storage classes whose objects must be restored before they can be read (S3's Glacier Flexible Retrieval and Deep
# Archive); Intelligent-Tiering's archive tiers are not told by a listing (a HEAD says them).
ARCHIVE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
# Seconds a network store's request waits for the next bytes before it fails as transient (a profile's
# read_timeout_s changes it).
READ_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed storage URL: scheme, bucket (or container, or fsspec host) and key prefix."""

    url: str
    scheme: str
    bucket: str
    prefix: str


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object as a listing or a stat sees it."""

    key: str
    size: int
    # Changes whenever the object's bytes change: the ETag, or mtime_ns for files.
    signature: str = ""
    # ferry's full-object checksum ("crc32c:xxxxxxxx") where the store keeps it; None if unknown.
    checksum: str | None = None
    content_type: str | None = None
    # User metadata; None when the call that produced this did not fetch it (listings).
    metadata: Mapping[str, str] | None = None
    # What the store itself says of the bytes, by kind (below): the proofs that an object another tool wrote
    # equals the source's, so that it is adopted instead of copied again. None when the call did not fetch them.
    digests: Mapping[str, str] | None = None
    # The store's storage class as a listing says it (S3's STANDARD, GLACIER, DEEP_ARCHIVE...); None where unknown.
    storage_class: str | None = None


# The kinds of digest a store gives: full-object checksums S3 computes or keeps (its base64 form), the MD5 of the
# bytes (hex: an unencrypted S3 object's plain ETag, Azure's Content-MD5) and the MD5 of the parts' MD5s with their
# count (hex-N: an unencrypted S3 multipart ETag).
FULL_OBJECT_DIGESTS = ("crc64nvme", "crc32", "sha256", "sha1")
MD5, MD5_OF_PARTS = "md5", "md5-parts"


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """What a write carries besides the bytes."""

    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    checksum: str | None = None


@dataclass(frozen=True, slots=True)
class Part:
    """A finished part of a multipart upload."""

    number: int
    size: int
    etag: str
    # CRC32C of the part's bytes; None for a server-side copied part whose bytes we never saw.
    crc32c: int | None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Optional features a connector declares; the engine picks the cheapest path from them."""

    # Server-side copy from another connector of the same store (S3 CopyObject, a kernel file copy).
    server_side_copy: bool = False
    # ...and of byte ranges into multipart parts (S3 UploadPartCopy); without it, whole objects only.
    server_side_part_copy: bool = False
    # Can stage a part from a URL another store hands out (Azure Put Block From URL).
    url_source: bool = False
    # Can hand out a time-limited URL that another store may GET (S3 presigned URLs).
    presign: bool = False
    # Keeps ferry's checksum with the object, so a later stat() returns it.
    stores_checksum: bool = False
    # Any key is representable (object stores); False for filesystems.
    exact_keys: bool = True
    min_part_size: int = 1
    max_part_size: int = 5 * GiB
    max_parts: int = 10_000
    # Largest object written in one request.
    max_single_put: int = 5 * GiB
    # Threads beyond which this store gains nothing (a local disk); None for network stores.
    useful_threads: int | None = None
    # list(start_after=...) starts at that key in the store (S3's StartAfter): a key range, or a probe for one,
    # costs a request, not a walk of everything before it (connectors/transfer/ranges.py).
    listing_seeks: bool = False


class Connector(abc.ABC):
    """A place objects live. Required: list, stat, open_range, put, delete, multipart."""

    kind: str = ""
    capabilities: Capabilities = Capabilities()
    # The requests one call of the contract sends, by class (REQUEST_CLASSES), as a run without faults makes it;
    # empty for a connector that does not count its requests (requests_sent None).
    call_requests: Mapping[str, Mapping[str, int]] = {}
    # The most keys one listing request returns (S3's ListObjectsV2: 1,000); None where requests are not counted.
    list_page: int | None = None

    def __init__(self, url: str):
        # The name used in every message, report and state key: never with a password in it.
        self.url = redact_url(url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- required -------------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def from_location(cls, location: Location, profile: Profile | None) -> Connector:
        """Open the connector a parsed URL (and its profile, if the scheme is an alias) names."""

    @abc.abstractmethod
    def check(self) -> None:
        """Fail with one clear error if the root is unreachable (no bucket, no credentials)."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        """Yield objects under prefix with keys after start_after, in key order, page by page."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """One object with metadata and stored checksum; NotFoundError if absent."""

    @abc.abstractmethod
    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        """Read length bytes from start. if_match: only from the version with this signature (the listed one): a
        store that makes a read conditional (HTTP If-Match: S3, Azure Blob) refuses another version with
        PermanentError code "Changed"; elsewhere it is not checked here (the caller holds the read to its listing)."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        """Write a whole object in one request; the store's receipt is verified before return."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object; absent is fine."""

    @abc.abstractmethod
    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        """Start a multipart upload of part_size parts (the last may be shorter); return its id."""

    @abc.abstractmethod
    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        """Upload part `number` (1-based); the store's receipt is verified before return."""

    @abc.abstractmethod
    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        """Assemble the parts in order; spec.checksum is the full-object checksum to store."""

    @abc.abstractmethod
    def abort(self, key: str, upload_id: str) -> None:
        """Discard an unfinished upload and its parts."""

    @abc.abstractmethod
    def upload_alive(self, key: str, upload_id: str) -> bool:
        """True while the upload can still take parts (the store has not expired or aborted it)."""

    @abc.abstractmethod
    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        """Yield (key, upload_id) of multipart uploads begun under the root and never finished."""

    # -- optional, per capabilities ---------------------------------------------------------
    def requests_sent(self) -> dict[str, int] | None:
        """The requests sent so far, by class (REQUEST_CLASSES), retries included; None where they are not counted."""
        return None

    def receipt_check(self) -> dict[str, dict]:
        """How this connector's writes are checked on receipt, where it is decided (S3: by the profile, the endpoint
        or the first write's probe), per endpoint: {"check": ..., "why": ...}; empty where not."""
        return {}

    def default_encryption(self) -> str | None:
        """How the store encrypts objects by default, where the connector can tell (one request): S3's algorithm
        (`aws:kms`, `AES256`), `aws:kms bucket-key` with an S3 Bucket Key; None where it cannot tell or none is set."""
        return None

    def listing_requests(self, pages: int) -> dict[str, int] | None:
        """The requests, by class, that a listing of `pages` pages sends from a connector opened for it (the data
        gate's); None where this connector does not count its requests."""
        return None

    def request_payment(self) -> tuple[bool | None, bool]:
        """Whether the store bills reading it to the reader (S3's Requester Pays, as its bucket says: one request;
        None where it cannot tell), and whether this connector's requests say the requester pays."""
        return None, False

    def archive_status(self, key: str) -> str | None:
        """The archive tier an object sits in that a listing does not tell (S3 Intelligent-Tiering's ARCHIVE_ACCESS or
        DEEP_ARCHIVE_ACCESS: one HEAD), which a read needs a restore from first; None where it needs none, or where
        the store does not say (no request)."""
        return None

    def write_encryption(self) -> str | None:
        """How this connector asks the store to encrypt what it writes (S3: `aws:kms` where its profile names a KMS
        key); None where it asks nothing of its own (the store's default applies). No request."""
        return None

    def region(self) -> str | None:
        """The region the store's requests are signed for or sent to, where the connector knows it (no request)."""
        return None

    def copy_checks_source(self, info: ObjectInfo) -> bool:
        """Whether copy_from(source, info, ...) stats the source to check the copy (one more request there)."""
        return False

    def network_host(self) -> str | None:
        """The host name this connector's requests go to; None when it reaches no network."""
        return None

    def prepare_target(self, dry_run: bool) -> None:
        """Make the root ready to be written, or with dry_run only check it could be; by default, check()."""
        self.check()

    def get(self, key: str, *, if_match: str | None = None) -> tuple[bytes, ObjectInfo]:
        """The whole object and its metadata (if_match as open_range's); a store that answers both in one call
        overrides this."""
        info = self.stat(key)
        return self.open_range(key, 0, info.size, if_match=if_match), info

    def body_copies(self) -> int:
        """How many copies of a write's body are in memory while it is sent (ferry's bytes, and any the client keeps
        of its own): what a write costs in the memory budget, per byte."""
        return 1

    def uploaded_parts(self, key: str, upload_id: str) -> list[Part]:
        """The parts an unfinished upload holds, as the store lists them (S3's ListParts): number, size, ETag and
        the CRC32C where the store keeps one; none where the store does not list them (they are sent again)."""
        return []

    def part_size(self, key: str) -> int | None:
        """The size of the parts a multipart object was written in, where the store tells; None otherwise."""
        return None

    def can_copy_from(self, source: Connector) -> bool:
        """True when source lives in the same store, so copy_from needs no bytes through us."""
        return False

    def copy_from(self, source: Connector, info: ObjectInfo, key: str) -> ObjectInfo:
        """Server-side copy of a whole object (capabilities.server_side_copy)."""
        raise NotImplementedError(f"{self.kind} has no server-side copy")

    def copy_part_from(
        self, source: Connector, info: ObjectInfo, key: str, upload_id: str, number: int, start: int, length: int
    ) -> Part:
        """Server-side copy of one byte range into a part (capabilities.server_side_copy)."""
        raise NotImplementedError(f"{self.kind} has no server-side part copy")

    def presign(self, key: str, expires_s: int) -> str:
        """A URL anyone may GET for expires_s seconds (capabilities.presign)."""
        raise NotImplementedError(f"{self.kind} cannot presign")

    def put_part_from_url(self, key: str, upload_id: str, number: int, url: str, start: int, length: int) -> Part:
        """Stage a part the store pulls from url itself (capabilities.url_source)."""
        raise NotImplementedError(f"{self.kind} cannot stage from a URL")

    def close(self) -> None:  # noqa: B027 - optional hook: most connectors hold nothing to release
        """Release pools and sessions."""


def redact_url(url: str) -> str:
    """url with any password in its user-info replaced by '***' (sftp://user:secret@host/p)."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}{slash}{path}"


def join_key(root: str, key: str) -> str:
    """The store's full name for key under root ('' root means the bucket's top)."""
    return f"{root}/{key}" if root else key
