"""Azure Blob Storage: `az://container/prefix`, multipart uploads as staged blocks.

ferry's checksum lives in blob metadata under `ferry_crc32c` (Azure metadata names must be
C# identifiers); user metadata stays metadata and the content type is the blob's content type.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobClient, BlobProperties, BlobServiceClient, ContentSettings
from requests.adapters import HTTPAdapter

from connectors.base import (
    MD5,
    READ_TIMEOUT_S,
    Capabilities,
    Connector,
    Location,
    MiB,
    ObjectInfo,
    Part,
    WriteSpec,
    join_key,
)
from connectors.checksum import crc32c, md5_hex
from ferry.errors import (
    ChecksumMismatch,
    FerryError,
    NotFoundError,
    PermanentError,
    RejectedKey,
    TransientError,
    UsageError,
)

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Credentials, Profile

CHECKSUM_KEY = "ferry_crc32c"
EXTRA_KEY = "ferry_metadata"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_BLOCK = 4000 * MiB
MAX_SINGLE_PUT = 5000 * MiB
# Matches the engine's default of 128 worker threads with room for listings and stats.
POOL_SIZE = 256
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_DIGEST_MISMATCH = {"Md5Mismatch", "Crc64Mismatch"}
# Azure could not read the URL it was to copy from (a presigned URL it is refused, an endpoint it cannot reach).
_NO_SOURCE = "CannotVerifyCopySource"
# The one precondition ferry's reads send (If-Match on the listed ETag) not met: the blob changed since its listing
# (an answer without Azure's error code says the HTTP status's phrase).
_CHANGED = {"ConditionNotMet", "PreconditionFailed"}
# How the SDK's validate_content says an answer's Content-MD5 is not the MD5 of what was sent (a bare AzureError).
_RECEIPT_MISMATCH = "MD5 mismatch"
# Decoded block ids ferry stages: "<upload token>-<part number>"; number 0 is the upload's marker.
_BLOCK_ID = re.compile(r"([0-9a-f]{16})-[0-9]{6}")
_QUERY = re.compile(r"\?[^\s'\"]*")


def _block_id(token: str, number: int) -> str:
    # Every block id of one blob must have the same length: fixed-width token and number.
    # The SDK base64-encodes ids on the way out and decodes them in block lists.
    return f"{token}-{number:06d}"


def _first_line(text: object) -> str:
    """One line of an SDK message with any URL query string (a SAS signature) cut out."""
    lines = str(text or "").strip().splitlines()
    return _QUERY.sub("?<query>", lines[0]) if lines else ""


def _error_code(exc: HttpResponseError) -> str:
    """Azure's x-ms-error-code, else the HTTP status phrase in its style ("NotFound")."""
    if exc.status_code == 501:
        # Emulators name the missing operation differently (Azurite: APINotImplemented); the
        # engine recognises one code when it probes for Put Block From URL.
        return "NotImplemented"
    code = exc.response.headers.get("x-ms-error-code") if exc.response is not None else None
    return code or HTTPStatus(exc.status_code).phrase.replace(" ", "")


def _retry_after(exc: HttpResponseError) -> float | None:
    value = exc.response.headers.get("Retry-After") if exc.response is not None else None
    try:
        return float(value) if value else None
    except ValueError:
        return None  # an HTTP date: let the engine's backoff decide


def _translate(exc: AzureError, what: str) -> FerryError:
    """The ferry error for an SDK error; `what` names the connector and key."""
    answered = isinstance(exc, HttpResponseError) and exc.status_code is not None
    code = _error_code(exc) if answered else type(exc).__name__
    message = f"{what}: {code}: {_first_line(exc.message)}"
    if isinstance(exc, ResourceNotFoundError):
        return NotFoundError(message, code=code)
    if isinstance(exc, ClientAuthenticationError):  # refused, or no Azure identity to be had
        return PermanentError(message, code=code)
    if isinstance(exc, HttpResponseError):
        if not answered:  # the response body broke off mid-read
            return TransientError(message, code=code)
        if code in _CHANGED:
            return PermanentError(f"{what}: the source changed since it was listed", code="Changed")
        if code == _NO_SOURCE:  # whatever the status (403, 404, 409, 500): the route streams the part instead
            return PermanentError(message, code=code)
        if code in _DIGEST_MISMATCH:
            return ChecksumMismatch(message)
        if exc.status_code in _TRANSIENT_STATUS:
            return TransientError(message, code=code, retry_after=_retry_after(exc))
        return PermanentError(message, code=code)
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return TransientError(message, code=code)
    if str(exc.message).startswith(_RECEIPT_MISMATCH):
        return ChecksumMismatch(message)
    return PermanentError(message, code=code)


def _if_match(signature: str | None) -> dict[str, Any]:
    """A read's precondition: only the version with this ETag (the SDK sends If-Match; Azure answers 412
    ConditionNotMet to another, and the SDK holds a download's later chunks to the first one's ETag)."""
    return {"etag": f'"{signature}"', "match_condition": MatchConditions.IfNotModified} if signature else {}


def _resolve(creds: Credentials, name: str, url: str) -> str:
    try:
        return creds.resolve(name) or ""
    except UsageError as exc:
        raise UsageError(f"{url}: {exc}") from None


class _Session(requests.Session):
    """A requests session that reads the environment's proxy and CA settings once per endpoint.

    requests scans every environment variable for them on each request (about a tenth of the
    client's CPU per small blob); they do not change during a run.
    """

    def __init__(self) -> None:
        super().__init__()
        self._settings: dict[tuple, dict[str, Any]] = {}

    def merge_environment_settings(self, url, proxies, stream, verify, cert):  # noqa: ANN001, ANN201 - requests' signature
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc, tuple(sorted((proxies or {}).items())), stream, verify, cert)
        if key not in self._settings:
            self._settings[key] = super().merge_environment_settings(url, proxies, stream, verify, cert)
        settings = self._settings[key]
        return {**settings, "proxies": dict(settings["proxies"])}


def _client_options(profile: Profile | None) -> dict[str, Any]:
    """Constructor options every service client gets: no SDK retries, a wide pool, ferry's sizes, the profile's
    read timeout."""
    session = _Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return {
        "session": session,
        # The engine retries each part; SDK retries underneath would multiply the attempts.
        "retry_total": 0,
        "max_single_put_size": MAX_SINGLE_PUT,
        "max_block_size": MAX_BLOCK,
        # The engine sizes each read; the SDK would otherwise split it into 4 MiB sequential GETs.
        "max_single_get_size": MAX_BLOCK,
        "max_chunk_get_size": MAX_BLOCK,
        "read_timeout": profile.read_timeout_s if profile and profile.read_timeout_s else READ_TIMEOUT_S,
    }


def _from_connection_string(conn: str, profile: Profile | None, url: str, source: str) -> BlobServiceClient:
    endpoint = profile.endpoint_url if profile else None
    if endpoint:
        # A later BlobEndpoint wins when the SDK parses the string.
        conn = f"{conn.rstrip(';')};BlobEndpoint={endpoint}"
    try:
        return BlobServiceClient.from_connection_string(conn, **_client_options(profile))
    except ValueError:
        raise UsageError(f"{url}: the connection string from {source} is malformed") from None


def _open_service(url: str, profile: Profile | None) -> tuple[BlobServiceClient, Any]:
    """The service client for url and the credential object to close with it (or None)."""
    creds = profile.credentials if profile else None
    endpoint = profile.endpoint_url if profile else None
    if creds and creds.named("connection_string"):
        conn = _resolve(creds, "connection_string", url)
        return _from_connection_string(conn, profile, url, "credentials.connection_string"), None
    name = creds.account_name if creds else None
    if creds and (creds.named("account_key") or creds.named("sas_token")):
        if not name:
            raise UsageError(f"{url}: credentials.account_key and sas_token need credentials.account_name")
        account_url = endpoint or f"https://{name}.blob.core.windows.net"
        if creds.named("account_key"):
            secret = AzureNamedKeyCredential(name, _resolve(creds, "account_key", url))
        else:
            secret = AzureSasCredential(_resolve(creds, "sas_token", url).lstrip("?"))
        return BlobServiceClient(account_url, credential=secret, **_client_options(profile)), None
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if conn:
        return _from_connection_string(conn, profile, url, "$AZURE_STORAGE_CONNECTION_STRING"), None
    name = name or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not name:
        raise UsageError(
            f"{url}: no Azure credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT "
            "for an Azure identity, or name them in a profile's credentials"
        )
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise UsageError(f"{url}: an Azure identity sign-in needs azure-identity: pip install azure-identity") from None
    identity = DefaultAzureCredential()
    account_url = endpoint or f"https://{name}.blob.core.windows.net"
    return BlobServiceClient(account_url, credential=identity, **_client_options(profile)), identity


class AzureBlobConnector(Connector):
    """Block blobs in one container under a name prefix; parts are blocks committed by complete()."""

    kind = "azure"
    capabilities = Capabilities(
        stores_checksum=True,
        exact_keys=True,
        url_source=True,
        presign=False,
        server_side_copy=False,
        min_part_size=1,
        max_part_size=MAX_BLOCK,
        max_parts=50_000,
        max_single_put=MAX_SINGLE_PUT,
    )

    def __init__(self, url: str, service: BlobServiceClient, container: str, root: str, identity: Any = None):
        super().__init__(url)
        self.root = root
        self._service = service
        self._container = service.get_container_client(container)
        self._identity = identity

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> AzureBlobConnector:
        service, identity = _open_service(location.url, profile)
        return cls(location.url, service, location.bucket, location.prefix, identity)

    def check(self) -> None:
        try:
            self._container.get_container_properties()
        except AzureError as exc:
            error = _translate(exc, self.url)
            if isinstance(error, NotFoundError):
                raise UsageError(f"{self.url}: container {self._container.container_name!r} does not exist") from None
            if isinstance(exc, ClientAuthenticationError) or getattr(exc, "status_code", None) in (401, 403):
                raise UsageError(f"{self.url}: Azure refused the credentials ({error.code})") from None
            if isinstance(exc, ServiceRequestError):
                # The hostname only: a client's full URL may carry a SAS token.
                raise UsageError(f"{self.url}: cannot reach {self._service.primary_hostname}") from None
            raise UsageError(str(error)) from None

    def network_host(self) -> str | None:
        # The SDK's primary_hostname keeps the port and path of an IP-style endpoint (Azurite's 127.0.0.1:10000/acct).
        return urlsplit(self._service.url).hostname

    def close(self) -> None:
        self._service.close()
        if self._identity is not None:
            self._identity.close()

    # -- names and errors ----------------------------------------------------------------------
    def _blob(self, key: str) -> BlobClient:
        """The client for key's blob, refusing keys an HTTP client would rewrite on the way."""
        if any(segment in (".", "..") for segment in key.split("/")):
            # urllib3 collapses dot segments after the SDK signs the URL: Azure would see
            # another name, or refuse the signature.
            raise RejectedKey(
                f"key {key!r} has a '.' or '..' segment, which cannot be sent to Azure unchanged", code="UnsafeKey"
            )
        return self._container.get_blob_client(join_key(self.root, key))

    @contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        try:
            yield
        except AzureError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None

    @staticmethod
    def _info(key: str, props: BlobProperties) -> ObjectInfo:
        metadata = dict(props.metadata or {})
        checksum = metadata.pop(CHECKSUM_KEY, None)
        metadata.update(json.loads(metadata.pop(EXTRA_KEY, "{}")))
        return ObjectInfo(
            key=key,
            size=props.size,
            # Listings give the ETag bare, headers give it quoted: one form for both.
            signature=(props.etag or "").strip('"'),
            checksum=checksum,
            content_type=props.content_settings.content_type,
            metadata=metadata,
            # Azure keeps a blob's Content-MD5 where its writer gave one (or a one-request Put Blob made it).
            digests={MD5: bytes(md5).hex()} if (md5 := props.content_settings.content_md5) else {},
        )

    @staticmethod
    def _write_options(spec: WriteSpec) -> dict[str, Any]:
        # Azure takes only C# identifiers as names and ASCII values: the rest (S3's "x-team",
        # accented values) travel in one JSON entry and come back out of it on read.
        metadata = {k: v for k, v in spec.metadata.items() if _IDENTIFIER.fullmatch(k) and v.isascii()}
        extra = {k: v for k, v in spec.metadata.items() if k not in metadata}
        if extra:
            metadata[EXTRA_KEY] = json.dumps(extra, sort_keys=True)
        if spec.checksum:
            metadata[CHECKSUM_KEY] = spec.checksum
        return {"metadata": metadata, "content_settings": ContentSettings(content_type=spec.content_type)}

    # -- reading -------------------------------------------------------------------------------
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        """Blobs under prefix in the order Azure lists them; metadata comes in the same pages."""
        # Azure and Azurite order names by UTF-16 code unit. That is code point order except
        # between characters above U+FFFF and those in U+E000-U+FFFF, which no per-page sort fixes:
        # the engine refuses such a listing loudly rather than mis-pair keys.
        start = len(self.root) + 1 if self.root else 0
        with self._errors(prefix):
            for props in self._container.list_blobs(name_starts_with=join_key(self.root, prefix), include=["metadata"]):
                key = props.name[start:]
                # Azure lists from a continuation marker only: a resumed listing skips what it saw.
                if key > start_after:
                    yield self._info(key, props)

    def stat(self, key: str) -> ObjectInfo:
        blob = self._blob(key)
        with self._errors(key):
            return self._info(key, blob.get_blob_properties())

    def get(self, key: str, *, if_match: str | None = None) -> tuple[bytes, ObjectInfo]:
        """The whole blob and its properties from one GET."""
        blob = self._blob(key)
        with self._errors(key):
            download = blob.download_blob(**_if_match(if_match))
            data = download.readall()
        info = self._info(key, download.properties)
        # The SDK fetches what a short body left out, but takes that answer as it comes: still short, it is read
        # again (the route tells a blob that changed since its listing apart).
        if len(data) != info.size:
            raise TransientError(f"{self.url}: {key}: short read: {len(data)} of {info.size} bytes", code="ShortRead")
        return data, info

    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        blob = self._blob(key)
        if length == 0:
            return b""  # Azure has no empty byte range to ask for
        with self._errors(key):
            data = blob.download_blob(offset=start, length=length, **_if_match(if_match)).readall()
        if len(data) != length:
            raise TransientError(f"{self.url}: {key}: short read: {len(data)} of {length} bytes", code="ShortRead")
        return data

    # -- writing -------------------------------------------------------------------------------
    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        blob = self._blob(key)
        with self._errors(key):
            receipt = blob.upload_blob(data, overwrite=True, **self._write_options(spec))
        # Put Blob answers with the MD5 of the body the service received.
        echoed = receipt.get("content_md5")
        if echoed and bytes(echoed) != bytes.fromhex(md5_hex(data)):
            raise ChecksumMismatch(f"{self.url}: {key}: the MD5 Azure received differs from the MD5 sent")
        return ObjectInfo(key=key, size=len(data), signature=receipt["etag"].strip('"'), checksum=spec.checksum)

    def delete(self, key: str) -> None:
        blob = self._blob(key)
        try:
            blob.delete_blob()
        except ResourceNotFoundError:
            pass
        except AzureError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None

    # -- multipart: staged blocks named by the upload's token, committed in part order ---------
    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        """Stage a one-byte marker block so the upload exists (and can be found) before any part."""
        token = secrets.token_hex(8)
        blob = self._blob(key)
        # One byte: whether the service takes an empty block is undocumented. complete() leaves
        # the marker out of the block list, and Azure discards what a commit leaves out.
        with self._errors(key):
            blob.stage_block(_block_id(token, 0), b"\0", length=1)
        return token

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        blob = self._blob(key)
        block = _block_id(upload_id, number)
        # validate_content sends the body's MD5: the service refuses a block that arrives different.
        with self._errors(key):
            blob.stage_block(block, data, length=len(data), validate_content="md5")
        return Part(number=number, size=len(data), etag=block, crc32c=crc32c(data))

    def put_part_from_url(self, key: str, upload_id: str, number: int, url: str, start: int, length: int) -> Part:
        blob = self._blob(key)
        block = _block_id(upload_id, number)
        with self._errors(key):
            blob.stage_block_from_url(block, url, source_offset=start, source_length=length)
        return Part(number=number, size=length, etag=block, crc32c=None)

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        blob = self._blob(key)
        blocks = [_block_id(upload_id, p.number) for p in parts]
        # validate_content sends the block list's MD5 and checks the one Azure answers: the commit's only receipt.
        with self._errors(key):
            receipt = blob.commit_block_list(blocks, validate_content=True, **self._write_options(spec))
        size = sum(p.size for p in parts)
        return ObjectInfo(key=key, size=size, signature=receipt["etag"].strip('"'), checksum=spec.checksum)

    def abort(self, key: str, upload_id: str) -> None:
        """Drop the upload's blocks when no committed blob holds the key.

        Azure cannot drop uncommitted blocks alone. With no committed blob, an empty commit
        (only if none appeared meanwhile) discards them and the empty blob is deleted (only if
        unchanged). A committed blob is never touched: the upload's blocks then stay, and
        upload_alive stays True, until the key's next commit or Azure's 7-day expiry.
        """
        blob = self._blob(key)
        if not self.upload_alive(key, upload_id):
            return
        with self._errors(key):
            try:
                receipt = blob.commit_block_list([], match_condition=MatchConditions.IfMissing)
            except (ResourceExistsError, ResourceModifiedError):
                return
            # If someone deleted or rewrote the empty blob meanwhile, it is theirs to keep.
            with suppress(ResourceNotFoundError, ResourceModifiedError):
                blob.delete_blob(etag=receipt["etag"], match_condition=MatchConditions.IfNotModified)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        blob = self._blob(key)
        try:
            return upload_id in self._tokens(blob)
        except ResourceNotFoundError:
            return False
        except AzureError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        """Uploads with blocks still staged; costs one Get Block List per blob under the root."""
        start = len(self.root) + 1 if self.root else 0
        listing = self._container.list_blobs(name_starts_with=join_key(self.root, ""), include=["uncommittedblobs"])
        with self._errors(""):
            for props in listing:
                key = props.name[start:]
                try:
                    tokens = self._tokens(self._blob(key))
                except ResourceNotFoundError:
                    continue  # deleted since the listing
                except RejectedKey:
                    continue  # not one ferry could have written
                for token in sorted(tokens):
                    yield key, token

    @staticmethod
    def _tokens(blob: BlobClient) -> set[str]:
        _committed, uncommitted = blob.get_block_list("uncommitted")
        return {match.group(1) for b in uncommitted if (match := _BLOCK_ID.fullmatch(b.id))}
