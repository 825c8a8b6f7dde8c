"""The S3 requests made once per object, sent by the AWS Common Runtime: PutObject, UploadPart, ListObjectsV2.

awscrt's S3 client builds, signs and sends HTTP in C, outside the GIL: one small PutObject costs a fraction of
the Python botocore spends on it (request set-up, event hooks, signing, parsing), which is most of what a sync
of small objects costs the client; a listing page's XML is read by ElementTree instead of botocore's parser, a
hundredth of the cost per object. ferry builds each request itself and keeps everything else: its scheduler,
part sizes, transfer state, CRC32C, receipt checks and retries. The CRT retries a failed request once by itself
(the fewest it allows); what fails again reaches the engine's retry policy, counted there as botocore's failures are.

Where the connection comes from is botocore's word, read once: the URL a presigned PutObject of this bucket gets
(endpoint, addressing style, region: the bucket's own, or the CRT is not used), the session's credentials (given
once where they are static; asked for at each signing where botocore refreshes them), and its TLS verification (the
CA bundle botocore trusts, certifi's or the configured one; or none: verify is that path, or False).
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from urllib.parse import quote, urlsplit

try:
    from awscrt import auth, http, s3
    from awscrt import io as crt_io
    from awscrt.exceptions import AwsCrtError
except ImportError:  # the botocore path stays: every request is botocore's
    s3 = None  # type: ignore[assignment]

# CRT errors that a retry cannot mend: a certificate not trusted, TLS that cannot be agreed, an address that does
# not exist (a TLS read or write cut short, a negotiation that timed out, are transient).
_PERMANENT = ("CERTIFICATE", "HOST_NAME_MISMATCH", "TRUST_STORE", "TLS_CTX_ERROR", "UNSUPPORTED", "DNS_INVALID_NAME")
# The CRT reports no progress of a request until it is done: a request fails after read_timeout_s plus its body at
# this rate, the slowest a healthy transfer is taken to be (128 requests sharing 64 Mbit/s each move this fast).
_SLOWEST = 64 * 1024


def available() -> bool:
    return s3 is not None


class Failure(Exception):
    """A request that failed: the store's answer (status, code, message, headers) or the CRT's error name."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str], network: bool = False):
        super().__init__(f"{code}: {message}".rstrip(": "))
        self.status, self.code, self.message, self.headers = status, code, message, headers
        self.network = network
        self.permanent = network and any(part in code for part in _PERMANENT)


class Sender:
    """One CRT S3 client for one endpoint and bucket: send(operation, method, key, query, headers, body) ->
    (the answer's headers, its body)."""

    _bootstrap_lock = threading.Lock()
    _bootstrap = None

    def __init__(
        self, url_of_key: str, region: str,
        credentials: tuple[str, str, str | None] | Callable[[], tuple[str, str, str | None] | None],
        verify: str | bool, connections: int, read_timeout_s: float,
    ) -> None:  # fmt: skip
        assert s3 is not None
        self.region, self.read_timeout_s = region, read_timeout_s
        parts = urlsplit(url_of_key)
        self.host = parts.netloc
        self.prefix = parts.path  # "/bucket/" (path style) or "/" (virtual host)
        tls = parts.scheme == "https"

        if isinstance(credentials, tuple):  # the same at every signing: given to the CRT once
            provider = auth.AwsCredentialsProvider.new_static(*credentials)
        else:  # asked for at each signing (a Python call from the CRT's thread per request)
            ask = credentials

            def get_credentials() -> auth.AwsCredentials:
                found = ask()
                if found is None:
                    raise RuntimeError("no AWS credentials")
                return auth.AwsCredentials(*found)

            provider = auth.AwsCredentialsProvider.new_delegate(get_credentials)

        options = None
        if tls:
            context = crt_io.TlsContextOptions()
            if verify is False:
                context.verify_peer = False
            elif os.path.isdir(verify):  # the certificates botocore trusts, not the system's
                context.override_default_trust_store_from_path(ca_dirpath=verify)
            else:
                context.override_default_trust_store_from_path(ca_filepath=verify)
            options = crt_io.ClientTlsContext(context).new_connection_options()
            options.set_server_name(parts.hostname or "")
        self.client = s3.S3Client(
            bootstrap=self._shared_bootstrap(),
            region=region,
            credential_provider=provider,
            tls_mode=s3.S3RequestTlsMode.ENABLED if tls else s3.S3RequestTlsMode.DISABLED,
            tls_connection_options=options,
            max_active_connections_override=connections,
            # The fewest the CRT allows (0 means its default, 5): a request it sends twice is one the engine sees.
            retry_config=s3.S3RetryConfig(max_retries=1),
        )

    @classmethod
    def _shared_bootstrap(cls):
        """One event loop group and resolver for the process (each S3 client would otherwise start its own)."""
        with cls._bootstrap_lock:
            if cls._bootstrap is None:
                loops = crt_io.EventLoopGroup()
                cls._bootstrap = crt_io.ClientBootstrap(loops, crt_io.DefaultHostResolver(loops))
            return cls._bootstrap

    def send(
        self, operation: str, method: str, key: str, query: str, headers: list[tuple[str, str]], body: bytes = b""
    ) -> tuple[dict[str, str], bytes]:
        """Send one request and wait for it; the answer's headers (names lowercased) and body. Failure when it
        failed. key "" is the bucket itself."""
        path = self.prefix + quote(key, safe="/~") + (f"?{query}" if query else "")
        carries = bool(body) or method == "PUT"  # a PUT of no bytes still says Content-Length: 0
        length = [("Content-Length", str(len(body)))] if carries else []
        sent = http.HttpHeaders([("Host", self.host), *length, *headers])
        request = http.HttpRequest(method, path, sent, io.BytesIO(body) if carries else None)
        answer: dict[str, str] = {}
        chunks: list[bytes] = []

        def on_headers(status_code: int, headers: list[tuple[str, str]], **_: object) -> None:
            answer.update((name.lower(), value) for name, value in headers)

        def on_body(chunk: bytes, **_: object) -> None:
            chunks.append(chunk)

        made = self.client.make_request(
            type=s3.S3RequestType.DEFAULT, operation_name=operation, request=request, on_headers=on_headers,
            on_body=on_body,
        )  # fmt: skip
        deadline = self.read_timeout_s + len(body) / _SLOWEST
        try:
            try:
                made.finished_future.result(timeout=deadline)
            except concurrent.futures.TimeoutError:
                made.cancel()
                said = f"not done in {deadline:.0f} s (read_timeout_s and {len(body)} bytes at {_SLOWEST} bytes/s)"
                raise Failure(0, "ReadTimeoutError", said, {}, network=True) from None
        except s3.S3ResponseError as exc:
            code, message = _error_of(exc.body, exc.status_code)
            raise Failure(exc.status_code, code, message, {k.lower(): v for k, v in exc.headers}) from None
        except AwsCrtError as exc:
            # A 5xx the CRT read the store's code from (AWS_ERROR_S3_SLOW_DOWN), under that code (SlowDown).
            s3_code = exc.name.removeprefix("AWS_ERROR_S3_")
            code = "".join(w.title() for w in s3_code.split("_")) if s3_code != exc.name else exc.name
            raise Failure(0, code, exc.message, {}, network=True) from None
        return answer, b"".join(chunks)


def _error_of(body: bytes | None, status: int) -> tuple[str, str]:
    """S3's error code and message from its XML answer; the status where the body says nothing."""
    try:
        root = ET.fromstring(body or b"")
    except ET.ParseError:
        return str(status), ""
    return root.findtext("Code") or str(status), root.findtext("Message") or ""
