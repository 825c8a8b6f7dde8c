"""AzureBlobConnector against Azurite: the shared suite plus what is particular to Azure."""

from __future__ import annotations

import secrets
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import AccountSasPermissions, BlobServiceClient, ResourceTypes, generate_account_sas

from connectors import azure_blob
from connectors.azure_blob import AzureBlobConnector
from connectors.base import WriteSpec
from connectors.registry import open_connector
from ferry.errors import ChecksumMismatch, PermanentError, RejectedKey, TransientError, UsageError
from ferry.profiles import Credentials, Profile
from ferry.results import Status
from tests.connectors.conformance import PART, ConnectorSuite
from tests.support import AZURITE_ACCOUNT, AZURITE_KEY, Server


@pytest.fixture
def service(azurite_env: Server) -> Iterator[BlobServiceClient]:
    client = BlobServiceClient.from_connection_string(azurite_env.env["AZURE_STORAGE_CONNECTION_STRING"])
    yield client
    client.close()


@pytest.fixture
def container(service: BlobServiceClient) -> Iterator[str]:
    name = f"ferry-{secrets.token_hex(6)}"
    service.create_container(name)
    yield name
    service.delete_container(name)


@pytest.fixture
def connector(container: str) -> Iterator[AzureBlobConnector]:
    conn = open_connector(f"az://{container}/some-prefix", {})
    assert isinstance(conn, AzureBlobConnector)
    conn.prepare_target(dry_run=False)
    yield conn
    conn.close()


class TestAzureBlobConformance(ConnectorSuite):
    pass


def test_put_part_from_url_is_not_implemented_on_azurite(
    connector: AzureBlobConnector, container: str, service: BlobServiceClient
) -> None:
    connector.put("source", b"x" * 10, WriteSpec())
    upload = connector.begin("target", WriteSpec(), PART)
    source_url = service.get_blob_client(container, "some-prefix/source").url
    with pytest.raises(PermanentError) as caught:
        connector.put_part_from_url("target", upload, 1, source_url, 0, 10)
    assert caught.value.code == "NotImplemented"


def test_missing_container_fails_check(azurite_env: Server) -> None:
    conn = open_connector("az://no-such-container/x", {})
    with pytest.raises(UsageError, match="container 'no-such-container' does not exist"):
        conn.check()
    conn.close()


def test_missing_credentials_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    with pytest.raises(UsageError, match="set AZURE_STORAGE_CONNECTION_STRING"):
        open_connector("az://container/x", {})


def test_unset_credential_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FERRY_TEST_AZ_KEY", raising=False)
    profile = Profile(type="azure", credentials=Credentials(account_name="acct", account_key_env="FERRY_TEST_AZ_KEY"))
    with pytest.raises(UsageError, match=r"\$FERRY_TEST_AZ_KEY, which is not set"):
        open_connector("store://container/x", {"store": profile})


def _sas() -> str:
    return generate_account_sas(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


@pytest.mark.parametrize("style", ["connection_string_env", "account_key_env", "sas_token_env"])
def test_profile_credentials(style: str, azurite_env: Server, container: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_string = azurite_env.env["AZURE_STORAGE_CONNECTION_STRING"]
    # Only the profile may lead to the account.
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    endpoint = f"{azurite_env.endpoint}/{AZURITE_ACCOUNT}"
    if style == "connection_string_env":
        monkeypatch.setenv("FERRY_TEST_AZ", conn_string)
        profile = Profile(type="azure", credentials=Credentials(connection_string_env="FERRY_TEST_AZ"))
    elif style == "account_key_env":
        monkeypatch.setenv("FERRY_TEST_AZ", AZURITE_KEY)
        creds = Credentials(account_name=AZURITE_ACCOUNT, account_key_env="FERRY_TEST_AZ")
        profile = Profile(type="azure", endpoint_url=endpoint, credentials=creds)
    else:
        monkeypatch.setenv("FERRY_TEST_AZ", _sas())
        creds = Credentials(account_name=AZURITE_ACCOUNT, sas_token_env="FERRY_TEST_AZ")
        profile = Profile(type="azure", endpoint_url=endpoint, credentials=creds)
    conn = open_connector(f"store://{container}/p", {"store": profile})
    conn.check()
    conn.put("k", b"data", WriteSpec())
    assert conn.open_range("k", 0, 4) == b"data"
    conn.close()


def test_a_reset_endpoint_is_transient_at_once_and_keeps_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # A listener that accepts and resets every connection, counting them: one attempt means no SDK retries
    # (with their backoff) underneath the engine's own.
    listener = socket.create_server(("127.0.0.1", 0))
    attempts = []

    def reset_all() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            attempts.append(1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    threading.Thread(target=reset_all, daemon=True).start()
    conn_string = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{listener.getsockname()[1]}/{AZURITE_ACCOUNT};"
    )
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn_string)
    conn = open_connector("az://container/x", {})
    try:
        with pytest.raises(TransientError) as caught:
            conn.stat("key")
    finally:
        conn.close()
        listener.close()
    assert len(attempts) == 1
    assert AZURITE_KEY not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_list_and_stat_agree_on_signature(connector: AzureBlobConnector) -> None:
    written = connector.put("obj", b"abc", WriteSpec())
    listed = next(iter(connector.list()))
    assert written.signature == listed.signature == connector.stat("obj").signature


def test_root_prefix_hides_neighbours(
    connector: AzureBlobConnector, container: str, service: BlobServiceClient
) -> None:
    service.get_blob_client(container, "some-prefix2/other").upload_blob(b"x")
    service.get_blob_client(container, "outside").upload_blob(b"x")
    connector.put("inside", b"x", WriteSpec())
    assert [info.key for info in connector.list()] == ["inside"]


def test_abort_leaves_a_committed_blob_alone(connector: AzureBlobConnector) -> None:
    connector.put("kept", b"old bytes", WriteSpec())
    upload = connector.begin("kept", WriteSpec(), PART)
    connector.put_part("kept", upload, 1, b"new bytes")
    connector.abort("kept", upload)
    assert connector.open_range("kept", 0, 9) == b"old bytes"


def test_dot_segment_keys_are_rejected(connector: AzureBlobConnector) -> None:
    with pytest.raises(RejectedKey):
        connector.put("a/../b", b"x", WriteSpec())


def test_put_refuses_a_wrong_md5_receipt(connector: AzureBlobConnector, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(azure_blob, "md5_hex", lambda data: "00" * 16)
    with pytest.raises(ChecksumMismatch):
        connector.put("obj", b"abc", WriteSpec())


def _http_error(status: int, code: str, headers: dict[str, str] | None = None) -> HttpResponseError:
    response = SimpleNamespace(
        status_code=status, reason="reason", headers={"x-ms-error-code": code, **(headers or {})}
    )
    return HttpResponseError(message=f"{code} happened\nRequestId: 1", response=response)


def test_errors_translate_by_status() -> None:
    busy = azure_blob._translate(_http_error(503, "ServerBusy", {"Retry-After": "2"}), "az://c/p: k")
    assert isinstance(busy, TransientError)
    assert (busy.code, busy.retry_after) == ("ServerBusy", 2.0)
    assert str(busy) == "az://c/p: k: ServerBusy: ServerBusy happened"
    bad = azure_blob._translate(_http_error(400, "InvalidMetadata"), "az://c/p: k")
    assert type(bad) is PermanentError
    assert bad.code == "InvalidMetadata"
    assert isinstance(azure_blob._translate(_http_error(400, "Md5Mismatch"), "w"), ChecksumMismatch)


def test_account_name_alone_signs_in_with_an_azure_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "someaccount")
    conn = open_connector("az://container/x", {})
    assert isinstance(conn, AzureBlobConnector)
    assert type(conn._service.credential).__name__ == "DefaultAzureCredential"
    assert conn._service.primary_hostname == "someaccount.blob.core.windows.net"
    conn.close()


def test_get_returns_bytes_and_properties_in_one(connector: AzureBlobConnector) -> None:
    spec = WriteSpec(content_type="text/plain", metadata={"m": "1"}, checksum="crc32c:01020304")
    connector.put("obj", b"payload", spec)
    data, info = connector.get("obj")
    assert data == b"payload"
    assert (info.size, info.checksum, info.content_type) == (7, "crc32c:01020304", "text/plain")
    assert info.metadata == {"m": "1"}
    assert info.signature == connector.stat("obj").signature


def test_metadata_azure_cannot_name_travels_and_comes_back(connector: AzureBlobConnector) -> None:
    metadata = {"plain": "v", "x-team": "ml", "owner": "zoë", "9lives": "cat"}
    connector.put("meta.bin", b"x", WriteSpec(metadata=metadata, checksum="crc32c:00000001"))
    upload = connector.begin("parts.bin", WriteSpec(), 4)
    part = connector.put_part("parts.bin", upload, 1, b"abcd")
    connector.complete("parts.bin", upload, [part], WriteSpec(metadata=metadata))
    for key in ("meta.bin", "parts.bin"):
        assert connector.stat(key).metadata == metadata
    assert next(connector.list()).metadata == metadata


def test_an_ip_style_endpoint_is_named_by_its_host_and_passes_the_private_check(connector: AzureBlobConnector) -> None:
    from checks.preflight import check_private_endpoint

    assert connector.network_host() == "127.0.0.1"  # not "127.0.0.1:PORT/devstoreaccount1", which cannot resolve
    assert check_private_endpoint("target", connector).status == Status.PASS
