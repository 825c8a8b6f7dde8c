"""Session-wide real servers: one moto S3 server and one Azurite, started once, stopped by PID."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers import Server, start_azurite, start_moto, start_registry


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Server]:
    # 256 KiB minimum parts keep multipart tests small and fast.
    server = start_moto(min_part_size=256 * 1024)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[Server]:
    server = start_azurite()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def registry_server() -> Iterator[Server]:
    server = start_registry()
    yield server
    server.stop()


@pytest.fixture
def moto_env(moto_server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The moto server's credentials and endpoint in this test's environment, as the AWS CLI reads them."""
    for key in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    return moto_server


@pytest.fixture
def azurite_env(azurite_server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    for key, value in azurite_server.env.items():
        monkeypatch.setenv(key, value)
    return azurite_server


@pytest.fixture(autouse=True)
def _no_real_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach a real cloud from a test, whatever the developer's shell holds.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
