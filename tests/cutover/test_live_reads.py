"""A live delta's reads and copies ask the store for the version the listing saw (S3's If-Match and
CopySourceIfMatch, Azure's If-Match), against moto and Azurite over HTTP: an object changed since its listing is
refused by the store (412), counted `changed_during_copy`, and copied by the next delta, never an error. moto ignores
CopySourceIfMatch, so that 412 comes from a proxy that enforces it as S3 does."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from connectors.base import ObjectInfo, WriteSpec
from connectors.registry import open_connector
from connectors.transfer import TransferSettings
from connectors.transfer.retry import Recopy
from connectors.transfer.route import Route, Upload
from connectors.transfer.stats import Stats
from ferry.errors import PermanentError
from ferry.profiles import Profile
from ferry.sync import SyncResult, run_sync
from tests.faults.proxy import FaultProxy
from tests.support import run_ferry

LIVE = TransferSettings(threads=2, live=True)


def changed_since_listed(put, stat, key: str) -> ObjectInfo:
    """Write key twice with bodies of one size; what a listing between the two writes said of it."""
    put(key, b"first version")
    listed = stat(key)
    put(key, b"later version")
    return listed


def live_delta(source: str, target: str, profiles: dict, state: Path, listing: list[ObjectInfo] | None) -> SyncResult:
    """One live delta of source into target; listing: the source's listing as it was (None: listed now)."""
    return run_sync(source, target, LIVE, profiles=profiles, state_dir=state, verify=False, source_listing=listing)


@pytest.fixture
def blobs(azurite_env):
    from azure.storage.blob import BlobServiceClient

    container = f"c{uuid.uuid4().hex[:12]}"
    client = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    client.create_container(container)
    return client.get_container_client(container)


def s3_writer(s3, bucket: str):
    """put(key, body) into bucket under p/."""
    return lambda key, body: s3.put_object(Bucket=bucket, Key=f"p/{key}", Body=body)


@pytest.mark.parametrize("store", ["s3", "azure"])
def test_reads_of_another_version_than_the_listed_one_are_refused_by_the_store(request, store: str) -> None:
    if store == "s3":
        moto = request.getfixturevalue("moto_env")
        moto.client("s3").create_bucket(Bucket="lr-s3")
        put = s3_writer(moto.client("s3"), "lr-s3")
        source = open_connector("moto://lr-s3/p", {"moto": Profile(type="s3", endpoint_url=moto.endpoint)})
    else:
        container = request.getfixturevalue("blobs")
        put = lambda k, b: container.upload_blob(f"p/{k}", b, overwrite=True)  # noqa: E731
        source = open_connector(f"az://{container.container_name}/p", {})
    try:
        listed = changed_since_listed(put, source.stat, "k")
        for read in (lambda m: source.get("k", if_match=m), lambda m: source.open_range("k", 2, 5, if_match=m)):
            with pytest.raises(PermanentError, match="changed since it was listed") as raised:
                read(listed.signature)
            assert raised.value.code == "Changed"
        now = source.stat("k").signature
        assert source.get("k", if_match=now)[0] == b"later version"
        assert source.open_range("k", 2, 5, if_match=now) == b"ter v"
    finally:
        source.close()


def test_each_part_of_a_live_copy_in_parts_is_read_with_if_match(moto_env, tmp_path) -> None:
    """A streamed part's ranged GET asks for the version the upload began from: read from another, it is refused by
    the store (a change between two parts never mixes two versions in one object)."""
    s3 = moto_env.client("s3")
    s3.create_bucket(Bucket="lr-parts")
    with FaultProxy(moto_env.port) as proxy:
        profiles = {"proxied": Profile(type="s3", endpoint_url=proxy.endpoint)}
        began_from = changed_under(profiles, s3, "lr-parts")
        source, target = open_connector("proxied://lr-parts/p", profiles), open_connector(str(tmp_path / "dst"), {})
        try:
            route = Route(source, target, LIVE, Stats(), lambda fn, *a, **k: fn(*a, **k), Recopy(lambda: None))
            upload = Upload("k", began_from, 5, "stream", upload_id=target.begin("k", WriteSpec(), 5))
            with pytest.raises(PermanentError, match="changed since it was listed") as raised:
                route.copy_part(upload, 2)
            assert raised.value.code == "Changed" and proxy.headers[("GET", "if-match")] == 1
            now = Upload("k", source.stat("k"), 5, "stream", upload_id=upload.upload_id)
            assert route.copy_part(now, 2).size == 5
        finally:
            source.close()
            target.close()


def changed_under(profiles: dict, s3, bucket: str) -> ObjectInfo:
    """p/k in bucket written twice; what a listing through the `proxied` profile said of it between the writes."""
    source = open_connector(f"proxied://{bucket}/p", profiles)
    try:
        return changed_since_listed(s3_writer(s3, bucket), source.stat, "k")
    finally:
        source.close()


def test_a_live_s3_read_sends_if_match_and_the_next_delta_copies_the_change(moto_env, tmp_path) -> None:
    s3 = moto_env.client("s3")
    s3.create_bucket(Bucket="lr-stream")
    with FaultProxy(moto_env.port) as proxy:
        profiles = {"proxied": Profile(type="s3", endpoint_url=proxy.endpoint)}
        listed = changed_under(profiles, s3, "lr-stream")
        first = live_delta("proxied://lr-stream/p", str(tmp_path / "dst"), profiles, tmp_path / "state", [listed])
        assert proxy.headers[("GET", "if-match")] == 1
        assert (first.stats.changed_during_copy, first.stats.failed, first.stats.copied) == (1, 0, 0)
        assert not (tmp_path / "dst" / "k").exists()
        second = live_delta("proxied://lr-stream/p", str(tmp_path / "dst"), profiles, tmp_path / "state", None)
    assert (second.stats.copied, second.stats.failed) == (1, 0)
    assert (tmp_path / "dst" / "k").read_bytes() == b"later version"


def test_a_copy_source_if_match_412_is_copied_by_the_next_delta_not_an_error(moto_env, tmp_path) -> None:
    s3 = moto_env.client("s3")
    for bucket in ("lr-copy-src", "lr-copy-dst"):
        s3.create_bucket(Bucket=bucket)
    with FaultProxy(moto_env.port, copy_source_if_match=True) as proxy:
        profiles = {"proxied": Profile(type="s3", endpoint_url=proxy.endpoint)}
        listed = changed_under(profiles, s3, "lr-copy-src")
        ends, state = ("proxied://lr-copy-src/p", "proxied://lr-copy-dst/q"), tmp_path / "state"
        first = live_delta(*ends, profiles, state, [listed])
        assert first.stats.bytes_server_side == 0 and proxy.copy_preconditions_failed == 1
        assert (first.stats.changed_during_copy, first.stats.failed, first.stats.copied) == (1, 0, 0)
        assert "Contents" not in s3.list_objects_v2(Bucket="lr-copy-dst")
        second = live_delta(*ends, profiles, state, None)
        assert proxy.copy_preconditions_failed == 1  # the next delta's copy named the version there now
    assert (second.stats.copied, second.stats.failed) == (1, 0) and second.stats.bytes_server_side > 0
    assert s3.get_object(Bucket="lr-copy-dst", Key="q/k")["Body"].read() == b"later version"


def test_a_live_azure_delta_leaves_a_changed_blob_to_the_next_delta(blobs, tmp_path) -> None:
    source_url, target, state = f"az://{blobs.container_name}/p", str(tmp_path / "dst"), tmp_path / "state"
    blobs.upload_blob("p/same", b"unchanged")
    source = open_connector(source_url, {})
    try:
        put = lambda k, b: blobs.upload_blob(f"p/{k}", b, overwrite=True)  # noqa: E731
        listing = [changed_since_listed(put, source.stat, "k"), source.stat("same")]
    finally:
        source.close()
    first = live_delta(source_url, target, {}, state, listing)
    assert (first.stats.changed_during_copy, first.stats.failed, first.stats.copied) == (1, 0, 1)
    second = live_delta(source_url, target, {}, state, None)
    assert (second.stats.copied, second.stats.failed, second.stats.skipped) == (1, 0, 1)
    assert (tmp_path / "dst" / "k").read_bytes() == b"later version"


def test_a_cutover_from_an_azure_source_ends_with_the_target_equal_to_it(prefect_api, blobs, tmp_path) -> None:
    for n in range(8):
        blobs.upload_blob(f"live/seed-{n}", os.urandom(50 + n))
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        f"name: co-azure\nsource: {{storage: 'az://{blobs.container_name}/live'}}\ntarget: {{storage: ./dst}}\n"
        "phases:\n  data_sync: {threads: 2}\nretries: {attempts: 0, delay_s: 0}\n"
        "cutover:\n  freeze_budget: 10m\n  delta_interval: 0.1s\n  max_delete: {percent: 100}\n"
        "  freeze:\n    - {run: 'touch froze', undo: 'touch unfroze'}\n"
    )
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 0, err
    held = {p.name: p.read_bytes() for p in (tmp_path / "dst").iterdir()}
    assert held == {b.name[len("live/") :]: blobs.download_blob(b.name).readall() for b in blobs.list_blobs()}
    assert (tmp_path / "froze").exists()
