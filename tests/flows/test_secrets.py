"""Credentials named as Prefect Secret blocks, resolved from the real Prefect server."""

from __future__ import annotations

import uuid

import boto3
import pytest

from connectors.base import WriteSpec
from connectors.registry import open_connector
from ferry.errors import UsageError
from ferry.profiles import Credentials, Profile


def test_s3_credentials_from_prefect_secret_blocks(prefect_api, moto_env) -> None:
    from prefect.blocks.system import Secret

    Secret(value="testing").save("ferry-test-key-id", overwrite=True)
    Secret(value="testing").save("ferry-test-secret-key", overwrite=True)
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_env.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    profile = Profile(
        type="s3",
        endpoint_url=moto_env.endpoint,
        credentials=Credentials(
            access_key_id_secret="ferry-test-key-id", secret_access_key_secret="ferry-test-secret-key"
        ),
    )
    connector = open_connector(f"vault://{bucket}/p", {"vault": profile})
    assert connector.client._request_signer._credentials.access_key == "testing"
    connector.put("x", b"abc", WriteSpec())
    assert [i.key for i in connector.list()] == ["x"]


def test_missing_secret_block_is_one_clear_line(prefect_api) -> None:
    profile = Profile(type="s3", credentials=Credentials(access_key_id_secret="no-such-block-anywhere"))
    with pytest.raises(UsageError, match="no Prefect Secret block named 'no-such-block-anywhere'"):
        open_connector("vault://bucket", {"vault": profile})


def test_a_secret_has_one_source() -> None:
    with pytest.raises(ValueError, match="not both"):
        Credentials(account_key_env="X", account_key_secret="y")
