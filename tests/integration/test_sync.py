"""ferry sync end to end against real servers: moto's S3 server, Azurite, local directories."""

from __future__ import annotations

import os
import signal
import unicodedata
import uuid
from pathlib import Path

import boto3
import pytest

from checks.data import check_data
from connectors.base import WriteSpec
from connectors.checksum import crc32c
from connectors.registry import open_connector
from connectors.transfer import TransferSettings, TransferState
from ferry.profiles import Profile
from ferry.results import Status
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy
from tests.support import parts_recorded, signal_mid_copy

KiB = 1024
PART = 256 * KiB
# Small parts so multipart paths run on small test data (moto's minimum is lowered to 256 KiB).
SETTINGS = TransferSettings(threads=16, part_size=PART, multipart_threshold=512 * KiB, memory_budget=8 * 1024 * KiB)


def s3(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def new_bucket(endpoint: str) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3(endpoint).create_bucket(Bucket=name)
    return name


def make_tree(root: Path) -> dict[str, bytes]:
    """Small, empty, multipart-sized and awkwardly named files; returns key -> bytes."""
    files = {
        "a/one.bin": os.urandom(10 * KiB),
        "a/two.bin": os.urandom(1),
        "empty": b"",
        "big/model.pt": os.urandom(3 * PART + 17),
        unicodedata.normalize("NFD", "café/é.txt"): b"nfd",
        "percent%20name": b"pct",
        "with space.txt": b"space",
    }
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "empty-dir").mkdir()
    return files


def bucket_objects(endpoint: str, bucket: str, prefix: str) -> dict[str, bytes]:
    client = s3(endpoint)
    keys = [
        o["Key"]
        for p in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in p.get("Contents", ())
    ]
    return {k[len(prefix) :]: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def sync(src: str, dst: str, state: Path, settings: TransferSettings = SETTINGS, **kwargs):
    return run_sync(src, dst, settings, profiles={}, state_dir=state, **kwargs)


def test_local_to_s3_copies_verifies_and_resyncs_nothing(moto_env, tmp_path) -> None:
    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    result = sync(str(tmp_path / "src"), f"s3://{bucket}/data", tmp_path / "state")
    assert result.ok, result.stats.failures
    assert result.gate.status == Status.PASS
    held = bucket_objects(moto_env.endpoint, bucket, "data/")
    assert held == {**files, "empty-dir/": b""}
    # The stored checksum is readable back for single-put and multipart objects alike.
    target = open_connector(f"s3://{bucket}/data", {})
    assert target.stat("big/model.pt").checksum.startswith("crc32c:")
    assert target.stat("a/one.bin").checksum.startswith("crc32c:")

    again = sync(str(tmp_path / "src"), f"s3://{bucket}/data", tmp_path / "state")
    assert (again.stats.copied, again.stats.skipped, again.stats.bytes_read) == (0, len(held), 0)
    assert again.gate.status == Status.PASS
    assert again.gate.measured["verified_by_state"] == len(held)
    assert again.gate.evidence[0].startswith("judged from this run's listing")


def test_content_type_and_metadata_travel(moto_env, tmp_path) -> None:
    src_bucket, dst = new_bucket(moto_env.endpoint), tmp_path / "dst"
    source = open_connector(f"s3://{src_bucket}", {})
    source.put("doc.json", b"{}", WriteSpec(content_type="application/json", metadata={"team": "ml"}))
    result = sync(
        f"s3://{src_bucket}", f"s3://{new_bucket(moto_env.endpoint)}", tmp_path / "s1", TransferSettings(threads=4)
    )
    result_local = sync(f"s3://{src_bucket}", str(dst), tmp_path / "s2", TransferSettings(threads=4))
    assert result.ok and result_local.ok
    back = open_connector(str(dst), {}).stat("doc.json")
    assert (back.content_type, back.metadata) == ("application/json", {"team": "ml"})


def test_s3_to_s3_same_endpoint_is_server_side(moto_env, tmp_path) -> None:
    make_tree(tmp_path / "src")
    a, b = new_bucket(moto_env.endpoint), new_bucket(moto_env.endpoint)
    assert sync(str(tmp_path / "src"), f"s3://{a}/p", tmp_path / "s1").ok
    result = sync(f"s3://{a}/p", f"s3://{b}/q", tmp_path / "s2")
    assert result.ok, result.stats.failures
    assert result.gate.status == Status.PASS
    assert result.stats.bytes_read == 0 and result.stats.bytes_written == 0
    assert result.stats.bytes_server_side == result.stats.bytes_copied > 0
    assert bucket_objects(moto_env.endpoint, a, "p/") == bucket_objects(moto_env.endpoint, b, "q/")


@pytest.mark.parametrize("answer", ["NotImplemented", "CannotVerifyCopySource"])
def test_s3_to_azure_falls_back_from_put_block_from_url(moto_env, azurite_env, tmp_path, answer: str) -> None:
    """Azurite answers Put Block From URL with a 501; Azure refused by the source's presigned URLs (or not reaching
    them) answers CannotVerifyCopySource, as a 403, 404, 409 or 500 (here from a proxy that answers as Azure does).
    Either way the parts are streamed through ferry, not retried for the whole budget or failed."""
    import contextlib

    from azure.storage.blob import BlobServiceClient

    from ferry.profiles import Profile

    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    container = f"c{uuid.uuid4().hex[:12]}"
    service = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    service.create_container(container)
    assert sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "s1").ok
    refusing = answer == "CannotVerifyCopySource"
    with FaultProxy(azurite_env.port, no_copy_source=True) if refusing else contextlib.nullcontext() as proxy:
        if proxy is None:
            result = sync(f"s3://{bucket}/p", f"az://{container}/ckpt", tmp_path / "s2")
        else:
            profile = Profile(type="azure", endpoint_url=f"{proxy.endpoint}/devstoreaccount1")
            result = run_sync(f"s3://{bucket}/p", f"refusing://{container}/ckpt", SETTINGS,
                              profiles={"refusing": profile}, state_dir=tmp_path / "s2")  # fmt: skip
            assert proxy.copy_sources_refused >= 1
    assert result.ok, result.stats.failures
    assert result.stats.url_copy.startswith(f"unsupported by the target ({answer})"), result.stats
    assert result.gate.status == Status.PASS
    blobs = service.get_container_client(container)
    held = {b.name[len("ckpt/") :]: blobs.download_blob(b.name).readall() for b in blobs.list_blobs()}
    assert held == {**files, "empty-dir/": b""}


def test_dry_run_changes_nothing(moto_env, tmp_path) -> None:
    make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    client = s3(moto_env.endpoint)
    client.put_object(Bucket=bucket, Key="p/extra", Body=b"keep me")
    client.put_object(Bucket=bucket, Key="p/a/one.bin", Body=b"different")
    before = bucket_objects(moto_env.endpoint, bucket, "p/")
    settings = TransferSettings(threads=8, dry_run=True, delete=True, part_size=PART, multipart_threshold=512 * KiB)
    result = sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state", settings)
    assert bucket_objects(moto_env.endpoint, bucket, "p/") == before
    assert list(client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])) == []
    assert (result.stats.to_copy, result.stats.deleted, result.stats.copied) == (8, 1, 0)
    assert result.gate.status == Status.SKIP


def test_delete_include_exclude(moto_env, tmp_path) -> None:
    make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    s3(moto_env.endpoint).put_object(Bucket=bucket, Key="p/a/stale.bin", Body=b"old")
    s3(moto_env.endpoint).put_object(Bucket=bucket, Key="p/keep-excluded", Body=b"x")
    settings = TransferSettings(threads=4, delete=True, include=("a/*", "keep-*"), exclude=("a/two.bin",))
    result = sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state", settings)
    assert result.ok
    assert sorted(bucket_objects(moto_env.endpoint, bucket, "p/")) == ["a/one.bin"]


def test_corrupted_target_object_is_found_and_mended(moto_env, tmp_path) -> None:
    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    assert sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state").ok
    client = s3(moto_env.endpoint)
    head = client.head_object(Bucket=bucket, Key="p/a/one.bin")
    bad = bytearray(files["a/one.bin"])
    bad[100] ^= 0xFF
    # Same size, same metadata (stored checksum included): only the bytes differ.
    client.put_object(Bucket=bucket, Key="p/a/one.bin", Body=bytes(bad), Metadata=head["Metadata"])

    source, target = open_connector(str(tmp_path / "src"), {}), open_connector(f"s3://{bucket}/p", {})
    state = TransferState(tmp_path / "state", source.url, target.url, SETTINGS.prefix)
    gate = check_data(source, target, state, SETTINGS)
    state.close()
    assert gate.status == Status.FAIL
    assert gate.measured["changed_after_copy"] == 1
    assert any("a/one.bin" in line for line in gate.evidence)

    mended = sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state")
    assert mended.stats.copied == 1 and mended.gate.status == Status.PASS
    assert client.get_object(Bucket=bucket, Key="p/a/one.bin")["Body"].read() == files["a/one.bin"]


def test_deep_verify_finds_a_silently_corrupted_local_file(tmp_path) -> None:
    make_tree(tmp_path / "src")
    result = sync(str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "state")
    assert result.ok
    target = tmp_path / "dst" / "a" / "one.bin"
    stamp = os.stat(target)
    data = bytearray(target.read_bytes())
    data[5] ^= 1
    target.write_bytes(bytes(data))
    os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # bit rot keeps the mtime
    deep = sync(
        str(tmp_path / "src"),
        str(tmp_path / "dst"),
        tmp_path / "state",
        deep_verify=True,
        settings=TransferSettings(threads=4, dry_run=False),
    )
    assert deep.gate.status == Status.FAIL
    assert deep.gate.measured["checksum_mismatch"] == 1
    mended = sync(
        str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "state2", TransferSettings(threads=4, checksum=True)
    )
    assert mended.stats.copied == 1 and mended.gate.status == Status.PASS


@pytest.mark.parametrize("client", ["botocore", "crt"])
def test_throttling_is_retried_until_done(moto_env, tmp_path, client: str) -> None:
    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    with FaultProxy(moto_env.port, every=3) as proxy:
        profile = Profile(type="s3", endpoint_url=proxy.endpoint, transfer_client=client)
        result = run_sync(str(tmp_path / "src"), f"moto://{bucket}/p", SETTINGS, profiles={"moto": profile},
                          state_dir=tmp_path / "state")  # fmt: skip
    assert proxy.injected > 0
    assert result.ok, result.stats.failures
    if client == "botocore":  # every throttled request is one the engine retried and counted
        assert result.stats.retries >= proxy.injected - 2  # the gate's own requests may be throttled too
    else:  # the CRT retries a request once by itself, unseen: the engine counts only what failed again
        assert result.stats.retries > 0
    assert bucket_objects(moto_env.endpoint, bucket, "p/") == {**files, "empty-dir/": b""}


def test_permanent_error_fails_fast_with_the_provider_code(moto_env, tmp_path) -> None:
    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    with FaultProxy(moto_env.port, deny="a/one.bin") as proxy:
        os.environ["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{proxy.port}"
        try:
            result = sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state")
        finally:
            os.environ["AWS_ENDPOINT_URL_S3"] = moto_env.endpoint
    assert not result.ok
    assert result.stats.failed == 1 and result.stats.retries == 0
    assert "a/one.bin" in result.stats.failures[0] and "AccessDenied" in result.stats.failures[0]
    assert len(bucket_objects(moto_env.endpoint, bucket, "p/")) == len(files)  # everything else landed
    assert result.gate.status == Status.FAIL and result.gate.measured["missing"] == 1


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=["kill-9", "ctrl-c", "sigterm"])
def test_stopped_mid_object_resumes_and_resends_only_in_flight_parts(moto_env, tmp_path, sig) -> None:
    """kill -9 loses only the parts in flight; Ctrl-C and SIGTERM let them finish and record them, then exit."""
    import json
    import sqlite3
    import subprocess
    import sys

    data = os.urandom(24 * 1024 * KiB)  # 96 parts of 256 KiB
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ckpt.bin").write_bytes(data)
    bucket, state_dir, threads = new_bucket(moto_env.endpoint), tmp_path / ".ferry", 4
    state = state_dir / "state"
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        f"profiles:\n  test:\n    type: s3\n    endpoint_url: {moto_env.endpoint}\n    min_part_size: {PART}\n"
    )
    command = [
        str(Path(sys.executable).with_name("ferry")),
        "sync",
        str(tmp_path / "src"),
        f"test://{bucket}/p",
        "--profiles",
        str(profiles),
        "--threads",
        str(threads),
        "--part-size",
        "256K",
        "--multipart-threshold",
        "1M",
        "--state-dir",
        str(state_dir),
        "--no-progress",
        "--report",
        str(tmp_path / "report.json"),
    ]
    proc = subprocess.Popen(
        [*command, "--bwlimit", "4M"],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    err = signal_mid_copy(proc, state, 20, sig)
    done_before = parts_recorded(state)
    assert 20 <= done_before < 96, "it stops mid-object, without copying the rest first"
    (state_file,) = state.glob("transfers/*.sqlite")
    with sqlite3.connect(state_file) as conn:
        (upload_id,) = conn.execute("SELECT upload_id FROM uploads").fetchone()
    client = s3(moto_env.endpoint)
    on_server = sum(
        len(page.get("Parts", []))
        for page in client.get_paginator("list_parts").paginate(Bucket=bucket, Key="p/ckpt.bin", UploadId=upload_id)
    )
    if sig == signal.SIGKILL:
        # Parts the server holds but the state never recorded were in flight when the process died.
        assert proc.returncode == -signal.SIGKILL and 0 <= on_server - done_before <= threads
        # A state that lags further behind the store, as one restored from a checkpoint on another worker does.
        with sqlite3.connect(state_file) as conn:
            conn.execute("DELETE FROM parts WHERE number IN (SELECT number FROM parts ORDER BY number DESC LIMIT 3)")
        done_before -= 3
    else:
        # Stopped, not killed: the parts in flight finished and were recorded; nothing was rolled back.
        assert proc.returncode == 128 + sig and on_server == done_before, err
        name = signal.Signals(sig).name
        assert f"ferry: interrupted by {name}; what was verified is kept: run the same command again" in err, err
        assert "Traceback" not in err

    rerun = subprocess.run(command, env=os.environ.copy(), capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    # The parts the server holds beyond the state's record are not sent again: their ETags, the MD5s of the source's
    # bytes at their spans (read again to prove it), keep them.
    assert report["summary"]["multipart"] == {
        "resumed_uploads": 1,
        "parts_resumed": on_server,
        "parts_reconciled": on_server - done_before,
    }
    assert report["summary"]["bytes"]["read_through_ferry"] == len(data) - done_before * 256 * KiB
    assert report["summary"]["bytes"]["written_through_ferry"] == len(data) - on_server * 256 * KiB
    assert report["gate"]["status"] == "PASS"
    assert client.get_object(Bucket=bucket, Key="p/ckpt.bin")["Body"].read() == data


def test_abort_incomplete_removes_orphaned_uploads(moto_env, tmp_path) -> None:
    import subprocess
    import sys

    bucket = new_bucket(moto_env.endpoint)
    client = s3(moto_env.endpoint)
    for key in ("p/one", "p/two", "other/three"):
        client.create_multipart_upload(Bucket=bucket, Key=key)
    ferry = str(Path(sys.executable).with_name("ferry"))
    done = subprocess.run(
        [ferry, "sync", str(tmp_path), f"s3://{bucket}/p", "--abort-incomplete"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "aborted 2" in done.stdout
    left = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    assert left == ["other/three"]


def test_local_to_local_copies_in_the_kernel_and_keeps_checksums(tmp_path) -> None:
    files = make_tree(tmp_path / "src")
    result = sync(str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "state")
    assert result.ok and result.gate.status == Status.PASS
    assert result.stats.bytes_read == 0 and result.stats.bytes_server_side == sum(map(len, files.values()))
    target = open_connector(str(tmp_path / "dst"), {})
    for key, data in files.items():
        assert (tmp_path / "dst" / key).read_bytes() == data
        assert target.stat(key).checksum == f"crc32c:{crc32c(data):08x}"


@pytest.mark.parametrize(
    ("key", "times", "ok"), [("a/one.bin", 1, True), ("big/model.pt", 1, True), ("a/one.bin", 9, False)]
)
def test_bytes_corrupted_in_transit_are_copied_again_once(moto_env, tmp_path, key, times, ok) -> None:
    files = make_tree(tmp_path / "src")
    bucket = new_bucket(moto_env.endpoint)
    with FaultProxy(moto_env.port, corrupt=key, corrupt_times=times) as proxy:
        os.environ["AWS_ENDPOINT_URL_S3"] = f"http://127.0.0.1:{proxy.port}"
        try:
            result = sync(str(tmp_path / "src"), f"s3://{bucket}/p", tmp_path / "state")
        finally:
            os.environ["AWS_ENDPOINT_URL_S3"] = moto_env.endpoint
    assert result.stats.recopied_after_mismatch >= 1
    if ok:
        assert result.ok, result.stats.failures
        assert bucket_objects(moto_env.endpoint, bucket, "p/")[key] == files[key]
    else:
        assert not result.ok and proxy.corrupted == 2
        assert "MD5" in result.stats.failures[0] and key in result.stats.failures[0]
