"""Network failures say their cause in words and what to change, against real sockets, TLS and tools; and one
rule for plain HTTP (preflight and the images phase alike)."""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from checks.preflight import check_registry
from connectors.base import WriteSpec
from connectors.registry import open_connector
from ferry.errors import PermanentError, TransientError
from ferry.images.oci import Registry, RegistryError
from ferry.images.tool import run_tool
from ferry.net import may_pass_again, plain_http
from ferry.profiles import Profile
from ferry.results import Status
from tests.support import Server, free_port, start_registry

PLAIN = "speaks plain HTTP, not TLS: name it in phases.images.insecure_registries"


@pytest.mark.parametrize(
    ("host", "insecure", "plain"),
    [
        ("127.0.0.1:5000", [], True),
        ("127.3.4.5", [], True),
        ("localhost:5000", [], True),
        ("[::1]:5000", [], True),
        ("registry.corp:5000", [], False),
        ("registry.corp:5000", ["registry.corp:5000"], True),
        ("registry.corp:5000", ["registry.corp"], True),  # the host for every port
        ("registry.corp:5001", ["registry.corp:5000"], False),
        ("10.0.0.7", ["10.0.0.8"], False),
        ("nvcr.io", [], False),
    ],
)
def test_which_registries_are_spoken_to_over_plain_http(host: str, insecure: list[str], plain: bool) -> None:
    assert plain_http(host, insecure) is plain


@pytest.fixture(scope="module")
def registry() -> Iterator[Server]:
    server = start_registry()
    yield server
    server.stop()


def test_tls_to_a_plain_http_registry_says_so_and_the_setting(registry: Server) -> None:
    with pytest.raises(RegistryError) as caught:
        Registry(f"127.0.0.1:{registry.port}", insecure=False).digest("ml/x", "1")
    assert f"127.0.0.1:{registry.port} {PLAIN}" in str(caught.value)
    # The tools (skopeo, buildah) say it their way; the phase says it in the same words.
    with pytest.raises(PermanentError) as caught:
        run_tool(["skopeo", "inspect", "--tls-verify=true", f"docker://127.0.0.1:{registry.port}/ml/x:1"], "copy x")
    said = str(caught.value)
    assert said.startswith(f"copy x: 127.0.0.1:{registry.port} {PLAIN}") and "; skopeo exited 1: " in said


# The fatal lines skopeo and buildah print (and Python's errors): another attempt may pass, or it will not.
FATAL_LINES = [
    ('msg="writing manifest: uploading manifest 2 to 10.0.0.7:5000/ai: received unexpected HTTP status: 503 '
     'Service Unavailable"', True),
    ('msg="writing blob: uploading layer chunked: received unexpected HTTP status: 502 Bad Gateway"', True),
    ('msg="reading manifest 1 in registry.corp/ml/x: toomanyrequests: too many requests"', True),
    ('msg="pinging container registry 10.0.0.7:5000: Get \\"http://10.0.0.7:5000/v2/\\": read tcp 10.0.0.1:1->'
     '10.0.0.7:5000: read: connection reset by peer"', True),
    ('msg="... dial tcp 10.0.0.7:5000: connect: connection refused"', True),
    ('msg="... net/http: TLS handshake timeout"', True),
    ("[Errno 104] Connection reset by peer", True),
    ('msg="reading manifest 1 in 10.0.0.7:5000/ml/x: manifest unknown"', False),
    ('msg="... http: server gave HTTP response to HTTPS client"', False),
    ('msg="... x509: certificate signed by unknown authority"', False),
    ('msg="writing manifest: uploading manifest 1 to 10.0.0.7:5000/ai: unauthorized: authentication required"', False),
    ('msg="copying config sha256:503abc0e52dfb5 to 10.0.0.7:5003/ai: denied: requested access to the resource is '
     'denied"', False),
]  # fmt: skip


@pytest.mark.parametrize(("line", "again"), FATAL_LINES)
def test_which_failures_another_attempt_may_pass(line: str, again: bool) -> None:
    assert may_pass_again(line) is again


def test_a_loopback_registry_passes_preflight_over_plain_http(registry: Server) -> None:
    result, _ = check_registry("target", f"127.0.0.1:{registry.port}/ai")
    assert result.status == Status.PASS and result.measured["url"].startswith("http://")


def test_a_refused_connection_says_nothing_listens() -> None:
    port = free_port()
    with pytest.raises(RegistryError) as caught:
        Registry(f"127.0.0.1:{port}", insecure=True).digest("ml/x", "1")
    assert f"nothing accepts connections at 127.0.0.1:{port} (connection refused)" in str(caught.value)
    (result,) = check_registry("target", f"127.0.0.1:{port}")
    assert result.status == Status.FAIL and "connection refused" in result.evidence[0]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


def test_an_untrusted_certificate_says_so_and_what_to_change(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.2:{server.server_address[1]}"
    try:
        with pytest.raises(RegistryError) as caught:
            Registry(host, insecure=False).digest("ml/x", "1")
    finally:
        server.shutdown()
    assert f"{host}'s TLS certificate is not trusted here: add its CA to the system's trust store" in str(caught.value)
    assert "or name it in phases.images.insecure_registries to skip the verification" in str(caught.value)


def test_tls_to_a_plain_http_s3_endpoint_names_the_profile_setting(moto_env) -> None:
    https = moto_env.endpoint.replace("http://", "https://")
    conn = open_connector("store://bucket/p", {"store": Profile(type="s3", endpoint_url=https)})
    try:
        with pytest.raises((PermanentError, TransientError)) as caught:
            conn.put("k", b"x", WriteSpec())
    finally:
        conn.close()
    assert "speaks plain HTTP, not TLS: write the profile's endpoint_url with http://" in str(caught.value)
    assert isinstance(caught.value, PermanentError), "a retry cannot fix it"


def test_the_tools_name_no_cause_they_did_not_give() -> None:
    with pytest.raises(PermanentError) as caught:
        run_tool(["skopeo", "inspect", "oci:/nonexistent-layout"], "inspect")
    assert "plain HTTP" not in str(caught.value) and "connection refused" not in str(caught.value)
