"""How a write to S3 is checked on receipt, per store, through a proxy in front of moto that answers as other S3
stores do: an ETag that is not the body's MD5 (SSE-KMS, SSE-C) is no mismatch where the object is encrypted, and
still one where it is not; with `receipt: crc32c` the echoed CRC32C is the check (no Content-MD5 is sent) and a
wrong echo fails; a store that does not echo falls back to Content-MD5; SSE-KMS and SSE-C reach every request.

moto echoes the CRC32C it is sent without checking it (measured), which is why `receipt: auto` keeps Content-MD5
and the ETag check on any endpoint but AWS's own."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import boto3
import pytest

from ferry.errors import UsageError
from ferry.profiles import Credentials, Profile
from ferry.results import Status
from ferry.sync import SyncResult, run_sync
from tests.faults.proxy import FaultProxy
from tests.faults.test_lying_store import SETTINGS, Store, make_source

KMS_KEY = "alias/ferry-test"


@pytest.fixture
def s3(moto_env) -> Store:
    return Store("s3", moto_env)


def _sync(tmp_path: Path, bucket: str, proxy: FaultProxy, state: str, **settings) -> SyncResult:
    """tmp_path/src into bucket/p through proxy, by a profile with settings."""
    profile = Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 << 10, **settings)
    return run_sync(str(tmp_path / "src"), f"liar://{bucket}/p", SETTINGS, profiles={"liar": profile},
                    state_dir=tmp_path / state)  # fmt: skip


def _heads(s3: Store, bucket: str) -> dict[str, dict]:
    client = boto3.client("s3", endpoint_url=s3.server.endpoint, region_name="us-east-1")
    return {key: client.head_object(Bucket=bucket, Key=f"p/{key}") for key in s3.held(bucket)}


@pytest.mark.parametrize("encrypted", [True, False], ids=["sse-kms", "unencrypted"])
def test_an_etag_that_is_not_the_md5_is_a_mismatch_only_where_the_object_is_not_encrypted(
    s3: Store, tmp_path, encrypted: bool
) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    settings = {"kms_key_id": KMS_KEY} if encrypted else {}
    with FaultProxy(s3.server.port, lie="etag") as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", **settings)
    if encrypted:
        assert result.ok and result.gate.status == Status.PASS, result.stats.failures
        assert s3.held(bucket) == files
        heads = _heads(s3, bucket)
        assert {(h["ServerSideEncryption"], h["SSEKMSKeyId"]) for h in heads.values()} == {("aws:kms", KMS_KEY)}
    else:
        assert not result.ok and result.stats.failed == len(files), result.stats.failures
        assert all("holds MD5" in failure for failure in result.stats.failures), result.stats.failures


def test_with_receipt_crc32c_the_echo_is_the_check_and_no_md5_is_sent(s3: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    # ETags that are not MD5s, on unencrypted objects: not checked at all, the echo is.
    with FaultProxy(s3.server.port, lie="etag") as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", receipt="crc32c")
    assert result.ok and s3.held(bucket) == files, result.stats.failures
    assert proxy.write_headers["content-md5"] == 0
    # Every write but the upload's begin carried a CRC32C: each object, each part, the commit (the whole object's).
    assert proxy.write_headers["x-amz-checksum-crc32c"] == proxy.write_headers["host"] - 1
    # A wrong echo fails the write, and the next run with a truthful store mends it.
    bucket = s3.new_place()
    with FaultProxy(s3.server.port, lie="checksum", lie_path="/p/small/") as proxy:
        result = _sync(tmp_path, bucket, proxy, "state2", receipt="crc32c")
    assert not result.ok and result.stats.failed == 2, result.stats.failures
    assert all("holds CRC32C" in failure for failure in result.stats.failures), result.stats.failures


def test_a_store_that_does_not_echo_the_crc32c_is_checked_by_content_md5(s3: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    with FaultProxy(s3.server.port, lie="no-echo") as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", receipt="crc32c")
    assert result.ok and s3.held(bucket) == files, result.stats.failures
    # The first write found no echo: it and every later write went with Content-MD5.
    assert proxy.write_headers["content-md5"] >= len(files)


def test_sse_c_sends_the_customer_key_with_every_object_request_and_never_shows_it(
    s3: Store, tmp_path, monkeypatch
) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("FERRY_TEST_SSE_KEY", key)
    credentials = Credentials(sse_customer_key_env="FERRY_TEST_SSE_KEY")
    with FaultProxy(s3.server.port) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", credentials=credentials)
    assert result.ok and s3.held(bucket) == files, result.stats.failures
    writes = proxy.write_headers["host"]  # every request carries it
    assert writes >= len(files) + 2  # two objects, the upload's begin, its parts and commit
    assert proxy.write_headers["x-amz-server-side-encryption-customer-key"] == writes
    assert proxy.write_headers["x-amz-server-side-encryption-customer-algorithm"] == writes
    assert key not in repr(result) and not any(key in p.read_text(errors="replace") for p in tmp_path.rglob("*.json"))


@pytest.mark.parametrize("value", ["c2hvcnQ=", "not base64 at all!"], ids=["16-bytes", "not-base64"])
def test_an_sse_c_key_that_is_not_32_bytes_of_base64_is_one_line_naming_the_field(monkeypatch, value: str) -> None:
    monkeypatch.setenv("FERRY_TEST_SSE_KEY", value)
    profile = Profile(type="s3", credentials=Credentials(sse_customer_key_env="FERRY_TEST_SSE_KEY"))
    with pytest.raises(UsageError, match=r"^credentials.sse_customer_key: the key must be 32 bytes") as caught:
        profile.customer_key()
    assert value not in str(caught.value)
