"""An HTTP proxy between ferry and a real local server (moto, Azurite, a registry) that injects faults.

Per request, seeded so that a failure replays:
- at `rate` (which requests: drawn), one of `kinds` in turn: `reset` (the connection is reset before the request
  reaches the store), `truncate` (the store answered; the headers promise the whole body, half of it comes, then
  the connection is reset), `stall` (the store did the work, its answer is held for `stall_s`, longer than the
  client's read timeout, then the connection is reset), `503` (S3's SlowDown body; the store never sees it);
- once, at request `outage_at`: the endpoint goes away for `outage_s` (the listener closed: connections are
  refused; connections already open are reset), then comes back on the same port;
- a store that lies, on requests whose path contains `lie_path`: `checksum` (the checksum and ETag it reports are
  rewritten), `short` (a body cut short with a Content-Length that agrees), `drop` (a write answered `drop_status` with
  the ETag the body would have, and not stored), `lost` (the store does the work, its answer is lost: a reset),
  `reserialise` (a JSON document PUT is stored re-serialised: the same document, other bytes, another digest; its
  answer is the store's own), `etag` (every ETag the store gives, in headers and listings, is not the body's MD5
  but consistently another value, as S3's are under SSE-KMS or SSE-C; the ones a client sends back are mapped
  back), `no-echo` (a write's answer carries no x-amz-checksum-crc32c), `flip` (a GET's body comes with one byte
  flipped, its headers as the store sent them: a corruption between the store and the client);
And the fixed faults the older tests use: every `every`-th request a 503, writes to `deny` a 403, deletes of
`deny_delete` a 403, writes to `unavailable` a 503 while it is set, the first `corrupt_times` writes to `corrupt`
stored with one byte flipped, and with `no_copy_source` every copy from a URL (`x-ms-copy-source`) Azure's 403
CannotVerifyCopySource; with `copy_source_if_match` S3's `x-amz-copy-source-if-match` enforced as S3 does and moto
does not (a HEAD of the copy's source to the store: another ETag is S3's 412 PreconditionFailed, counted in
`copy_preconditions_failed`). With
`verify_crc32c`, S3's check on receipt, which moto lacks: a PUT whose `x-amz-checksum-crc32c` is not the CRC32C of
its body as it arrived (after `corrupt`) is S3's 400 BadDigest, not stored, counted in `bad_digests`. With
`requester_pays` (an S3 bucket's name, path style) that bucket is Requester Pays as S3 keeps one, which moto 5.2.5
does not: GetBucketRequestPayment (`?requestPayment`) says so (other buckets: BucketOwner), and a request of its
objects or listings, or a copy from it, without `x-amz-request-payer: requester` is refused (403 AccessDenied).
With `archive_status` ({path part: ARCHIVE_ACCESS or DEEP_ARCHIVE_ACCESS}) a HEAD of an object whose path holds a
part says the object sits in that Intelligent-Tiering archive tier (`x-amz-archive-status`), as S3 does and moto
does not. With
`latency_s`, every request forwarded waits that long first, as on the way to a distant endpoint (the benchmark's).

Counters: `requests`, `faults` (by kind), `lies`, `body_bytes` (request bodies received: what was sent, re-sent
bytes included), `write_headers` (how many writes carried each header, by lower-case name), `headers` (the same
for every request, by method and name), `paths` (requests by method and path, the query left out).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import random
import re
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import crc32c

DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
# Azure's answer to a copy from a URL it could not read (a presigned URL refused to it).
PRECONDITION_FAILED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PreconditionFailed</Code>'
    b"<Message>At least one of the pre-conditions you specified did not hold</Message></Error>"
)
BAD_DIGEST = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadDigest</Code>'
    b"<Message>The CRC32C you specified did not match the calculated checksum.</Message></Error>"
)
CANNOT_VERIFY = (
    b'<?xml version="1.0" encoding="utf-8"?><Error><Code>CannotVerifyCopySource</Code><Message>Forbidden</Message>'
    b"<CopySourceStatusCode>403</CopySourceStatusCode></Error>"
)
KINDS = ("reset", "truncate", "stall", "503")
# The headers a store reports an object's checksum in: S3's, Azure's, a registry's.
CHECKSUM_HEADERS = ("etag", "x-amz-checksum-crc32c", "content-md5", "x-ms-content-crc64", "docker-content-digest")
_WRITES = ("PUT", "POST")
# The `etag` lie: each hex digit of an ETag swapped for its mirror (0<->f, 1<->e, ...), its own inverse.
_MIRROR = str.maketrans("0123456789abcdef", "fedcba9876543210")
_XML_ETAG = re.compile(rb"(<ETag>(?:&quot;|&#34;|\")?)([0-9a-f]{32})")


def _mirrored(etag: str) -> str:
    """An ETag header's value with its digest mirrored (quotes and a multipart "-N" kept)."""
    digest, dash, rest = etag.strip('"').partition("-")
    return f'"{digest.translate(_MIRROR)}{dash}{rest}"'


def _mirrored_xml(body: bytes) -> bytes:
    return _XML_ETAG.sub(lambda m: m.group(1) + m.group(2).decode().translate(_MIRROR).encode(), body)


def _altered(value: str) -> str:
    """The value with one hex or base64 character changed (quotes and the rest kept)."""
    for i in range(len(value) - 1, -1, -1):
        if value[i].isalnum():
            return value[:i] + ("0" if value[i] != "0" else "1") + value[i + 1 :]
    return value + "0"


class FaultProxy:
    """Forward to 127.0.0.1:upstream_port, injecting faults; a context manager."""

    def __init__(
        self,
        upstream_port: int,
        *,
        rate: float = 0.0,
        kinds: tuple[str, ...] = KINDS,
        seed: int = 0,
        stall_s: float = 5.0,
        outage_at: int | None = None,
        outage_s: float = 30.0,
        lie: str | None = None,
        lie_path: str = "",
        lie_times: int = 1_000_000,
        drop_status: int = 200,
        no_copy_source: bool = False,
        copy_source_if_match: bool = False,
        every: int = 0,
        retry_after: str = "0",
        deny: str | None = None,
        deny_delete: str | None = None,
        corrupt: str | None = None,
        corrupt_times: int = 1,
        unavailable: str | None = None,
        latency_s: float = 0.0,
        verify_crc32c: bool = False,
        requester_pays: str | None = None,
        archive_status: dict[str, str] | None = None,
    ):
        assert set(kinds) <= set(KINDS) and lie in (
            None,
            "checksum",
            "short",
            "drop",
            "lost",
            "reserialise",
            "etag",
            "no-echo",
            "flip",
        )
        self.upstream_port = upstream_port
        self.rate, self.kinds, self.stall_s = rate, kinds, stall_s
        self.outage_at, self.outage_s = outage_at, outage_s
        self.lie, self.lie_path, self.lies_left, self.drop_status = lie, lie_path, lie_times, drop_status
        self.every = every
        self.deny, self.deny_delete = deny, deny_delete
        self.verify_crc32c, self.bad_digests = verify_crc32c, 0
        self.corrupt = corrupt
        self.corrupt_left = corrupt_times
        self.corrupted = 0
        self.unavailable = unavailable
        self.latency_s = latency_s
        self.requester_pays = requester_pays
        self.archive_status = archive_status or {}
        self.no_copy_source, self.copy_sources_refused = no_copy_source, 0
        self.copy_source_if_match, self.copy_preconditions_failed = copy_source_if_match, 0
        self.refused = 0
        self.retry_after = retry_after
        self.requests = 0
        self.injected = 0
        self.faults: Counter[str] = Counter()
        self.lies = 0
        self.lie_path_writes = 0  # writes sent to lie_path, lied to or not
        self.body_bytes = 0
        self.write_headers: Counter[str] = Counter()
        self.headers: Counter[tuple[str, str]] = Counter()
        self.paths: Counter[tuple[str, str]] = Counter()
        self.outages = 0
        self.down = threading.Event()
        self.closed = threading.Event()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._handler = self._handler_class()
        self.server = self._listen(0)
        self.port = self.server.server_address[1]

    # -- the listener ------------------------------------------------------------------------------
    def _listen(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), self._handler)
        server.daemon_threads = True
        return server

    def _serve(self, server: ThreadingHTTPServer) -> None:
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def _outage(self) -> None:
        """The endpoint away for outage_s: the listener closed (connections refused), then opened again."""
        self.down.set()
        self.server.shutdown()
        self.server.server_close()
        if self.closed.wait(self.outage_s):
            return
        self.server = self._listen(self.port)
        self.down.clear()
        self._serve(self.server)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._serve(self.server)
        return self

    def __exit__(self, *exc) -> None:
        self.closed.set()
        if not self.down.is_set():
            self.server.shutdown()
        self.server.server_close()

    # -- one request -------------------------------------------------------------------------------
    def _draw(self, command: str, path: str) -> tuple[str | None, bool, bool]:
        """(fault kind or None, start the outage now, lie on this request), under the lock."""
        with self._lock:
            self.requests += 1
            outage = self.outage_at is not None and self.requests == self.outage_at
            fault = None
            if self.every > 0 and self.requests % self.every == 0:
                fault = "503"
                self.injected += 1
            elif self.rate and self._random.random() < self.rate:
                # Which requests fault is drawn; the kinds take turns, so that each gets its share.
                fault = self.kinds[sum(self.faults.values()) % len(self.kinds)]
            if fault:
                self.faults[fault] += 1
            if self.lie_path and self.lie_path in path and command in _WRITES:
                self.lie_path_writes += 1
            lie = bool(self.lie and self.lie_path in path and self.lies_left > 0)
            if lie and self.lie == "drop" and command not in _WRITES:
                lie = False
            if lie and self.lie in ("reserialise", "no-echo") and command not in _WRITES:
                lie = False
            if lie and self.lie == "reserialise" and command != "PUT":
                lie = False
            if lie and self.lie == "flip" and command != "GET":
                lie = False
            if lie:
                self.lies_left -= 1
                self.lies += 1
        if outage:
            self.outages += 1
            threading.Thread(target=self._outage, daemon=True).start()
        return fault, outage, lie

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _reset(self) -> None:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():  # skopeo's blob PATCHes
                    chunks = []
                    while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    return b"".join(chunks)
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    proxy.body_bytes += len(body)
                    names = {k.lower() for k in self.headers}
                    proxy.headers.update((self.command, name) for name in names)
                    proxy.paths[(self.command, self.path.partition("?")[0])] += 1
                    if self.command in _WRITES:
                        proxy.write_headers.update(names)
                if proxy.down.is_set():
                    self._reset()
                    return
                if proxy.requester_pays is not None and self._payment():
                    return
                fault, outage, lie = proxy._draw(self.command, self.path)
                if outage or fault == "reset":
                    self._reset()
                    return
                if fault == "503":
                    self._error(503, SLOWDOWN, {"Retry-After": proxy.retry_after})
                    return
                if proxy.deny and proxy.deny in self.path and self.command in _WRITES:
                    self._error(403, DENIED, {})
                    return
                if proxy.deny_delete and proxy.deny_delete in self.path and self.command == "DELETE":
                    self._error(403, DENIED, {})
                    return
                refuse = proxy.unavailable
                if refuse and refuse in self.path and self.command in _WRITES:
                    with proxy._lock:
                        proxy.refused += 1
                    self._error(503, SLOWDOWN, {"Retry-After": proxy.retry_after})
                    return
                if proxy.no_copy_source and self.headers.get("x-ms-copy-source"):
                    with proxy._lock:
                        proxy.copy_sources_refused += 1
                    self._error(403, CANNOT_VERIFY, {"x-ms-error-code": "CannotVerifyCopySource"})
                    return
                if proxy.copy_source_if_match and not self._copy_source_matches():
                    with proxy._lock:
                        proxy.copy_preconditions_failed += 1
                    self._error(412, PRECONDITION_FAILED, {})
                    return
                if lie and proxy.lie == "drop":
                    self._dropped(body)
                    return
                if lie and proxy.lie == "reserialise" and body:
                    body = json.dumps(json.loads(body), indent=1).encode()
                    del self.headers["Content-Length"]
                    self.headers["Content-Length"] = str(len(body))
                if proxy.corrupt and proxy.corrupt in self.path and self.command == "PUT" and body:
                    with proxy._lock:
                        flip = proxy.corrupt_left > 0
                        proxy.corrupt_left -= int(flip)
                        proxy.corrupted += int(flip)
                    if flip:
                        body = bytes([body[0] ^ 0xFF]) + body[1:]
                if proxy.verify_crc32c and self.command == "PUT" and not self._crc32c_matches(body):
                    with proxy._lock:
                        proxy.bad_digests += 1
                    self._error(400, BAD_DIGEST, {})
                    return
                if lie and proxy.lie == "etag" and self.command == "POST":  # the part ETags of a commit
                    body = _mirrored_xml(body)
                self._forward(body, fault, lie)

            def _crc32c_matches(self, body: bytes) -> bool:
                """Whether the request's x-amz-checksum-crc32c (if any) is the CRC32C of body."""
                sent = self.headers.get("x-amz-checksum-crc32c")
                return sent is None or sent == base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()

            def _copy_source_matches(self) -> bool:
                """Whether a copy's x-amz-copy-source-if-match (if any) is its source's ETag now, as the store's
                HEAD of the source says (signed with moto's fake credentials)."""
                import boto3

                wanted = self.headers.get("x-amz-copy-source-if-match")
                if not wanted:
                    return True
                source = urllib.parse.unquote(self.headers["x-amz-copy-source"]).lstrip("/").split("?")[0]
                bucket, _, key = source.partition("/")
                store = boto3.client(
                    "s3",
                    endpoint_url=f"http://127.0.0.1:{proxy.upstream_port}",
                    region_name="us-east-1",
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )
                try:
                    etag = store.head_object(Bucket=bucket, Key=key)["ETag"]
                except store.exceptions.ClientError:
                    return True  # the source is gone: the store answers the copy as it would (NoSuchKey)
                finally:
                    store.close()
                return etag.strip('"') == wanted.strip('"')

            def _forward(self, body: bytes, fault: str | None, lie: bool) -> None:
                if proxy.latency_s:
                    time.sleep(proxy.latency_s)  # the way to a distant endpoint and back: requests overlap it
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("connection", "transfer-encoding")
                }
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                payload = response.read()
                if lie and proxy.lie == "etag":
                    payload = _mirrored_xml(payload)
                upstream.close()
                if fault == "stall" or (lie and proxy.lie == "lost"):  # the store did the work; no answer comes
                    if fault == "stall":
                        proxy.closed.wait(proxy.stall_s)
                    self._reset()
                    return
                if lie and proxy.lie == "short" and len(payload) > 1:
                    payload = payload[: len(payload) // 2]
                if lie and proxy.lie == "flip" and payload:
                    payload = payload[:-1] + bytes([payload[-1] ^ 1])  # the last byte: one bit
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() in ("transfer-encoding", "connection", "content-length"):
                        continue
                    if lie and proxy.lie == "checksum" and key.lower() in CHECKSUM_HEADERS:
                        value = _altered(value)
                    if lie and proxy.lie == "etag" and key.lower() == "etag":
                        value = _mirrored(value)
                    if lie and proxy.lie == "no-echo" and key.lower() == "x-amz-checksum-crc32c":
                        continue
                    self.send_header(key, value)
                if self.command == "HEAD":
                    for part, status in proxy.archive_status.items():
                        if part in self.path:
                            self.send_header("x-amz-archive-status", status)
                # A HEAD answer has no body but keeps the object's Content-Length.
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(payload)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault == "truncate" and len(payload) > 1:
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self._reset()
                    return
                self.wfile.write(payload)

            def _dropped(self, body: bytes) -> None:
                """drop_status (200; Azure's and a registry's writes answer 201) to a write, with the ETag the body
                would have had, and nothing stored."""
                self.send_response(proxy.drop_status)
                self.send_header("ETag", f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _payment(self) -> bool:
                """Answer as S3 does for a Requester Pays bucket where moto does not; True when answered."""
                path, _, query = self.path.partition("?")
                bucket = path.lstrip("/").split("/", 1)[0]
                if self.command == "GET" and query == "requestPayment":
                    payer = "Requester" if bucket == proxy.requester_pays else "BucketOwner"
                    tag = 'RequestPaymentConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
                    self._error(200, f"<{tag}><Payer>{payer}</Payer></RequestPaymentConfiguration>".encode(), {})
                    return True
                copied = self.headers.get("x-amz-copy-source", "").lstrip("/").split("/", 1)[0]
                of_objects = "/" in path.lstrip("/") or (self.command == "GET" and "list-type" in query)
                reads = (bucket == proxy.requester_pays and of_objects) or copied == proxy.requester_pays
                if reads and self.headers.get("x-amz-request-payer") != "requester":
                    self._error(403, DENIED, {})
                    return True
                return False

            def _error(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle

        return Handler
