"""A small HTTP proxy in front of a real server that answers some requests with S3's 503 SlowDown."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FaultProxy:
    """Forward to upstream_port; every `every`-th request gets a 503 SlowDown instead (0: never),
    writes to paths containing `deny` get 403 AccessDenied, writes to paths containing `unavailable`
    get 503 SlowDown while it is set (a test clears it), and the first `corrupt_times` writes to paths
    containing `corrupt` reach the server with one byte flipped."""

    def __init__(
        self,
        upstream_port: int,
        every: int = 0,
        retry_after: str = "0",
        deny: str | None = None,
        corrupt: str | None = None,
        corrupt_times: int = 1,
        unavailable: str | None = None,
    ):
        self.upstream_port = upstream_port
        self.every = every
        self.deny = deny
        self.corrupt = corrupt
        self.corrupt_left = corrupt_times
        self.corrupted = 0
        self.unavailable = unavailable
        self.refused = 0
        self.retry_after = retry_after
        self.requests = 0
        self.injected = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.requests += 1
                    inject = proxy.every > 0 and proxy.requests % proxy.every == 0
                    proxy.injected += int(inject)
                if proxy.deny and proxy.deny in self.path and self.command in ("PUT", "POST"):
                    self._error(403, DENIED, {})
                    return
                refuse = proxy.unavailable
                if refuse and refuse in self.path and self.command in ("PUT", "POST"):
                    with proxy._lock:
                        proxy.refused += 1
                    self._error(503, SLOWDOWN, {"Retry-After": proxy.retry_after})
                    return
                if inject:
                    self._error(503, SLOWDOWN, {"Retry-After": proxy.retry_after})
                    return
                if proxy.corrupt and proxy.corrupt in self.path and self.command == "PUT" and body:
                    with proxy._lock:
                        flip = proxy.corrupt_left > 0
                        proxy.corrupt_left -= int(flip)
                        proxy.corrupted += int(flip)
                    if flip:
                        body = bytes([body[0] ^ 0xFF]) + body[1:]
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                response = upstream.getresponse()
                payload = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # A HEAD answer has no body but keeps the object's Content-Length.
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                upstream.close()

            def _error(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
