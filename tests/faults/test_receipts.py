"""How a write to S3 is checked on receipt, per store, through a proxy in front of moto that answers as other S3
stores do: an ETag that is not the body's MD5 (SSE-KMS, SSE-C) is no mismatch where the object is encrypted, and
still one where it is not; with `receipt: crc32c` the echoed CRC32C is the check (no Content-MD5 is sent) and a
wrong echo fails; a store that does not echo falls back to Content-MD5; SSE-KMS and SSE-C reach every request.

moto echoes the CRC32C it is sent without checking it (measured), so `receipt: auto` learns, by a probe at the first
write, whether an endpoint other than AWS's refuses a wrong CRC32C: moto as it is takes it (Content-MD5 and the
ETag check stay), moto behind a proxy that verifies the CRC32C as S3 does refuses it (the echo alone is the check);
a probe denied or failing proves nothing (Content-MD5); a dry run sends none."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from structlog.testing import capture_logs

from connectors import s3 as s3_connector
from connectors.base import WriteSpec
from connectors.checksum import crc32c, label
from connectors.registry import open_connector
from connectors.s3 import PROBE_KEY
from connectors.transfer import TransferSettings
from ferry.errors import ChecksumMismatch, UsageError
from ferry.profiles import Credentials, Profile
from ferry.results import Status
from ferry.sync import SyncResult, run_sync
from tests.faults.proxy import FaultProxy
from tests.faults.test_lying_store import SETTINGS, Store, make_source

KMS_KEY = "alias/ferry-test"


@pytest.fixture
def s3(moto_env) -> Store:
    return Store("s3", moto_env)


@pytest.fixture(autouse=True)
def _no_endpoint_known() -> Iterator[None]:
    """Each test starts and ends with no endpoint known not to echo or learned (a proxy's port may be another test's
    again): as a new process would."""
    s3_connector._NO_ECHO.clear()
    s3_connector._LEARNED.clear()
    yield
    s3_connector._NO_ECHO.clear()
    s3_connector._LEARNED.clear()


def _customer_key(monkeypatch) -> tuple[str, Credentials]:
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("FERRY_TEST_SSE_KEY", key)
    return key, Credentials(sse_customer_key_env="FERRY_TEST_SSE_KEY")


def _profile(proxy: FaultProxy, **settings) -> Profile:
    return Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 << 10, **settings)


def _sync(
    tmp_path: Path, bucket: str, proxy: FaultProxy, state: str, transfer: TransferSettings = SETTINGS, **settings
) -> SyncResult:
    """tmp_path/src into bucket/p through proxy, by a profile with settings."""
    profiles = {"liar": _profile(proxy, **settings)}
    source, target = str(tmp_path / "src"), f"liar://{bucket}/p"
    return run_sync(source, target, transfer, profiles=profiles, state_dir=tmp_path / state)


def _heads(s3: Store, bucket: str) -> dict[str, dict]:
    client = boto3.client("s3", endpoint_url=s3.server.endpoint, region_name="us-east-1")
    return {key: client.head_object(Bucket=bucket, Key=f"p/{key}") for key in s3.held(bucket)}


@pytest.mark.parametrize("encrypted", ["sse-kms", "sse-c", None], ids=["sse-kms", "sse-c", "unencrypted"])
def test_an_etag_that_is_not_the_md5_is_a_mismatch_only_where_the_object_is_not_encrypted(
    s3: Store, tmp_path, monkeypatch, encrypted: str | None
) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    # (An SSE-C answer does not always say so, a commit's never: the profile's key does.)
    settings = {"sse-kms": {"kms_key_id": KMS_KEY}, "sse-c": {"credentials": _customer_key(monkeypatch)[1]}}
    settings = settings.get(encrypted, {})
    with FaultProxy(s3.server.port, lie="etag") as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", **settings)
    if encrypted:
        assert result.ok and result.gate.status == Status.PASS, result.stats.failures
        assert s3.held(bucket) == files
        if encrypted == "sse-kms":
            heads = _heads(s3, bucket).values()
            assert {(h["ServerSideEncryption"], h["SSEKMSKeyId"]) for h in heads} == {("aws:kms", KMS_KEY)}
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
    # A wrong echo fails the write (after one more copy): nothing is taken for verified.
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
    s3: Store, tmp_path, monkeypatch, capfd
) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    key, credentials = _customer_key(monkeypatch)
    with FaultProxy(s3.server.port) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", credentials=credentials)
        # A resume asks whether an upload is still open: ListParts, with the key too.
        target = open_connector(f"liar://{bucket}/p", {"liar": _profile(proxy, credentials=credentials)})
        upload = target.begin("resumed.bin", WriteSpec(), 256 << 10)
        assert target.upload_alive("resumed.bin", upload)
        target.abort("resumed.bin", upload)
        assert not target.upload_alive("resumed.bin", upload)
    assert result.ok and s3.held(bucket) == files, result.stats.failures
    customer = "x-amz-server-side-encryption-customer-key"
    writes = proxy.write_headers["host"]  # every request carries it
    assert writes >= len(files) + 2  # two objects, the upload's begin, its parts and commit
    assert proxy.write_headers[customer] == writes
    assert proxy.write_headers[f"{customer[:-4]}-algorithm"] == writes
    # Reads too: each HEAD of an object (all but the bucket's own, at the start) and each ListParts.
    assert proxy.headers[("HEAD", customer)] == proxy.headers[("HEAD", "host")] - 1 >= 1
    assert proxy.headers[("GET", f"{customer}-md5")] == 2
    output = capfd.readouterr()
    shown = [output.out, output.err, repr(result)]
    shown += [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".bin"]
    assert not any(key in text for text in shown)


@pytest.mark.parametrize("value", ["c2hvcnQ=", "not base64 at all!"], ids=["16-bytes", "not-base64"])
def test_an_sse_c_key_that_is_not_32_bytes_of_base64_is_one_line_naming_the_field(monkeypatch, value: str) -> None:
    monkeypatch.setenv("FERRY_TEST_SSE_KEY", value)
    profile = Profile(type="s3", credentials=Credentials(sse_customer_key_env="FERRY_TEST_SSE_KEY"))
    with pytest.raises(UsageError, match=r"^credentials.sse_customer_key: the key must be 32 bytes") as caught:
        profile.customer_key()
    assert value not in str(caught.value)


def test_kms_and_a_customer_key_together_are_refused() -> None:
    credentials = Credentials(sse_customer_key_env="FERRY_TEST_SSE_KEY")
    with pytest.raises(ValueError, match="kms_key_id and credentials.sse_customer_key"):
        Profile(type="s3", kms_key_id=KMS_KEY, credentials=credentials)


@pytest.mark.parametrize("truthful", [True, False], ids=["source-checksum-holds", "source-checksum-differs"])
def test_a_server_side_copy_whose_etag_differs_is_proven_by_the_stores_crc32c(s3: Store, truthful: bool) -> None:
    source_bucket, target_bucket = s3.new_place(), s3.new_place()
    # The target answers as an SSE-KMS bucket would: the copy's ETag is not the source's MD5.
    with FaultProxy(s3.server.port, lie="etag", lie_path=f"/{target_bucket}/") as proxy:
        profiles = {"liar": _profile(proxy)}
        source = open_connector(f"liar://{source_bucket}/a", profiles)
        target = open_connector(f"liar://{target_bucket}/b", profiles)
        data = os.urandom(300 * 1024)
        source.put("obj", data, WriteSpec(checksum=label(crc32c(data) if truthful else crc32c(data) ^ 1)))
        info = next(source.list())
        assert info.checksum is None, "a listing gives no checksum: the source is asked by one HEAD"
        target.check()
        heads = proxy.headers[("HEAD", "host")]
        if truthful:
            assert target.copy_from(source, info, "copied").size == len(data)
        else:
            with pytest.raises(ChecksumMismatch, match="the copy holds CRC32C"):
                target.copy_from(source, info, "copied")
    assert proxy.headers[("HEAD", "host")] - heads == 1


def _probe_path(bucket: str) -> str:
    return f"/{bucket}/p/{PROBE_KEY}"


@pytest.mark.parametrize("client", ["crt", "botocore"])
def test_auto_on_a_store_that_takes_a_wrong_crc32c_keeps_content_md5_and_deletes_its_probe(
    s3: Store, tmp_path, client: str
) -> None:
    files = make_source(tmp_path / "src")
    bucket, second = s3.new_place(), s3.new_place()
    with FaultProxy(s3.server.port) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", transfer_client=client)
        # Another sync in the same process, to the same endpoint: learned already, no probe.
        again = _sync(tmp_path, second, proxy, "state2", transfer_client=client)
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert again.ok and again.gate.status == Status.PASS, again.stats.failures
    assert s3.held(bucket) == s3.held(second) == files, "the probe's object was deleted"
    # One probe, though four threads wrote at once: taken, then deleted.
    assert proxy.paths[("PUT", _probe_path(bucket))] == proxy.paths[("DELETE", _probe_path(bucket))] == 1
    assert proxy.paths[("PUT", _probe_path(second))] == 0
    # Every other PUT (objects, parts) of both syncs carried Content-MD5: the probe alone did not.
    assert proxy.headers[("PUT", "content-md5")] == proxy.headers[("PUT", "host")] - 1 >= 2 * len(files)
    took = {"check": "md5", "why": "the store took a body whose CRC32C was wrong"}
    assert result.stats.summary()["receipt_check"] == {
        proxy.endpoint: {**took, "probe_requests": {"PUT": 1, "DELETE": 1}}
    }
    assert again.stats.summary()["receipt_check"] == {proxy.endpoint: took}
    assert result.report_path is not None
    assert (
        json.loads(result.report_path.read_text())["summary"]["receipt_check"]
        == result.stats.summary()["receipt_check"]
    )


def _synced_whole(s3: Store, tmp_path: Path, faults: dict, **settings) -> tuple[SyncResult, FaultProxy, str]:
    """A source made here synced into a new bucket through a proxy with faults, by a profile with settings: the sync
    passes its gate and the bucket holds the source and nothing else (no probe's object)."""
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    with FaultProxy(s3.server.port, **faults) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", **settings)
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert s3.held(bucket) == files
    return result, proxy, bucket


@pytest.mark.parametrize("client", ["crt", "botocore"])
def test_auto_on_a_store_that_verifies_the_crc32c_sends_no_md5_and_a_body_corrupted_on_the_way_is_copied_again(
    s3: Store, tmp_path, client: str
) -> None:
    # The store refuses a body whose CRC32C is not the one sent, as S3 does; one body is damaged on the way, after
    # ferry computed its CRC32C.
    faults = {"verify_crc32c": True, "corrupt": "/p/small/b.bin"}
    result, proxy, bucket = _synced_whole(s3, tmp_path, faults, transfer_client=client)
    assert proxy.write_headers["content-md5"] == 0, "the store's own check of the CRC32C is the receipt check"
    # The probe was refused (nothing stored, nothing to delete), and so was the damaged body: copied once more.
    assert proxy.paths[("PUT", _probe_path(bucket))] == 1 and proxy.paths[("DELETE", _probe_path(bucket))] == 0
    assert proxy.corrupted == 1 and proxy.bad_digests == 2
    assert result.stats.recopied_after_mismatch == 1 and result.stats.failed == 0
    assert result.stats.summary()["receipt_check"] == {
        proxy.endpoint: {
            "check": "crc32c",
            "why": "the store refused a body whose CRC32C was wrong",
            "probe_requests": {"PUT": 1},
        }
    }


@pytest.mark.parametrize("answer", ["denied", "unavailable"])
def test_a_probe_the_store_denies_or_fails_proves_nothing_and_the_sync_goes_on_with_content_md5(
    s3: Store, tmp_path, answer: str
) -> None:
    # A store that verifies the CRC32C, but answers the probe's key alone 403 AccessDenied, or 503 every time.
    refusal = {"deny": PROBE_KEY} if answer == "denied" else {"unavailable": PROBE_KEY}
    result, proxy, bucket = _synced_whole(s3, tmp_path, {"verify_crc32c": True, **refusal}, transfer_client="botocore")
    assert (
        proxy.headers[("PUT", "content-md5")]
        == proxy.headers[("PUT", "host")] - proxy.paths[("PUT", _probe_path(bucket))]
    )
    said = result.stats.summary()["receipt_check"][proxy.endpoint]
    assert said["check"] == "md5"
    if answer == "denied":
        assert said["why"].startswith("the receipt probe was refused: ") and "AccessDenied" in said["why"]
        assert said["probe_requests"] == {"PUT": 1}
    else:
        # Tried three times; its object deleted in case a lost answer hid that the store took it.
        assert said["why"].startswith("the receipt probe failed: ") and "SlowDown" in said["why"]
        assert said["probe_requests"] == {"PUT": 3, "DELETE": 1} and proxy.refused == 3


def test_a_dry_run_sends_no_probe_and_the_run_after_it_one(s3: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    with FaultProxy(s3.server.port) as proxy:
        estimate = _sync(tmp_path, bucket, proxy, "state", replace(SETTINGS, dry_run=True))
        assert estimate.ok and estimate.forecast.copies == len(files)
        assert proxy.write_headers["host"] == proxy.headers[("DELETE", "host")] == 0, "a dry run writes nothing"
        assert estimate.stats.summary()["receipt_check"] == {}
        result = _sync(tmp_path, bucket, proxy, "state")
    assert result.ok and s3.held(bucket) == files, result.stats.failures
    assert proxy.paths[("PUT", _probe_path(bucket))] == 1


@pytest.mark.parametrize("receipt", ["md5", "crc32c"])
def test_a_receipt_the_profile_names_sends_no_probe(s3: Store, tmp_path, receipt: str) -> None:
    result, proxy, bucket = _synced_whole(s3, tmp_path, {"verify_crc32c": True}, receipt=receipt)
    assert proxy.paths[("PUT", _probe_path(bucket))] == proxy.bad_digests == 0
    assert (proxy.write_headers["content-md5"] > 0) == (receipt == "md5")
    assert result.stats.summary()["receipt_check"] == {
        proxy.endpoint: {"check": receipt, "why": f"the profile's receipt: {receipt}"}
    }


def test_a_probe_object_the_store_will_not_delete_is_one_warning_and_nothing_of_ferrys_counts_or_copies_it(
    s3: Store, tmp_path
) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    # With --delete, an object in the target that the source lacks fails the gate, and would be deleted.
    mirror = replace(SETTINGS, delete=True)
    with capture_logs() as logged, FaultProxy(s3.server.port, deny_delete=PROBE_KEY) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", mirror)
    assert result.ok and result.gate.status == Status.PASS, (result.stats.failures, result.gate.evidence)
    assert result.stats.deleted == 0 and result.gate.measured["extra_in_target"] == 0
    warnings = [event for event in logged if event["log_level"] == "warning"]
    assert [event["key"] for event in warnings] == [f"liar://{bucket}/p/{PROBE_KEY}"], logged
    # What stays was written again with its true CRC32C: other tools' reads, which check it (boto3's), succeed.
    assert s3.held(bucket) == {**files, PROBE_KEY: s3_connector._PROBE_BODY}
    assert proxy.paths[("PUT", _probe_path(bucket))] == 2
    # The bucket as a source: the probe's object is not copied.
    back = run_sync(
        f"s3://{bucket}/p", str(tmp_path / "back"), SETTINGS, profiles={}, state_dir=tmp_path / "state-back"
    )
    assert back.ok and back.stats.copied == len(files), back.stats.failures
    assert sorted(
        p.relative_to(tmp_path / "back").as_posix() for p in (tmp_path / "back").rglob("*") if p.is_file()
    ) == sorted(files)
    # The next process's probe (one more object to write) replaces it and deletes it.
    s3_connector._LEARNED.clear()
    (tmp_path / "src" / "small" / "c.bin").write_bytes(b"one more")
    with FaultProxy(s3.server.port) as proxy:
        result = _sync(tmp_path, bucket, proxy, "state", mirror)
    assert result.ok and set(s3.held(bucket)) == {*files, "small/c.bin"}, result.stats.failures


def test_an_aws_endpoint_is_known_to_verify_without_a_probe(moto_env) -> None:
    profile = Profile(type="s3", endpoint_url="https://s3.eu-west-1.amazonaws.com", region="eu-west-1")
    connector = open_connector("aws://some-bucket/p", {"aws": profile})
    # No request: nothing here reaches AWS, so a probe would fail and leave md5.
    assert not connector._md5_receipts()
    assert connector.receipt_check() == {
        "https://s3.eu-west-1.amazonaws.com": {
            "check": "crc32c",
            "why": "an AWS endpoint: S3 refuses a body whose CRC32C is wrong",
        }
    }
