"""Checkpoint write/read speed against real moto S3 and the local connector; a corrupted read-back fails; what
was written is removed even then."""

from __future__ import annotations

import boto3
import pytest

from connectors.registry import open_connector
from connectors.transfer import TransferSettings
from ferry.golive.checkpoint import measure, run_url, shard_name, synthetic

SETTINGS = TransferSettings(threads=4, part_size=1 << 20, multipart_threshold=2 << 20, memory_budget=16 << 20)


def test_the_synthetic_checkpoint_is_written_once_and_incompressible(tmp_path) -> None:
    import zlib

    first = synthetic(tmp_path, 3_000_001, 3)
    assert sorted(first.files) == [shard_name(i, 3) for i in range(3)] and first.total == 3_000_001
    assert [first.files[shard_name(i, 3)][0] for i in range(3)] == [1_000_000, 1_000_000, 1_000_001]
    data = (first.root / shard_name(0, 3)).read_bytes()
    assert len(zlib.compress(data)) > 0.99 * len(data)
    mtime = (first.root / shard_name(0, 3)).stat().st_mtime_ns
    again = synthetic(tmp_path, 3_000_001, 3)
    assert again == first and (first.root / shard_name(0, 3)).stat().st_mtime_ns == mtime
    with pytest.raises(ValueError):
        synthetic(tmp_path, 2, 3)


def test_run_url_is_always_a_child_of_the_prefix() -> None:
    assert run_url("s3://b/data/", "golive/ckpt/", "r1") == "s3://b/data/golive/ckpt/r1/"
    assert run_url("/srv/x", "golive/ckpt", "r1") == "/srv/x/golive/ckpt/r1/"
    with pytest.raises(ValueError):
        run_url("s3://b", "golive", "/")


def test_local_write_read_and_cleanup(tmp_path) -> None:
    source = synthetic(tmp_path / "cache", 4 << 20, 4)
    url = run_url(str(tmp_path / "target"), "golive/ckpt", "run-1")
    result = measure(source, url, profiles={}, settings=SETTINGS)
    assert result.verified, result.problems
    assert result.write_gb_per_s > 0 and result.read_gb_per_s > 0
    assert sorted(result.read_shard_gb_per_s) == sorted(source.files)
    assert "min/median/max of 4" in result.spread(result.read_shard_gb_per_s)
    assert "deleted 4 object(s)" in result.cleanup
    assert not [p for p in (tmp_path / "target").rglob("*") if p.is_file()]


def test_moto_write_read_and_cleanup(moto_env, tmp_path) -> None:
    s3 = boto3.client("s3", endpoint_url=moto_env.endpoint)
    bucket = f"ckpt-{tmp_path.name.lower().replace('_', '-')[-40:]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="golive/ckpt/keep-me", Body=b"not ours")
    source = synthetic(tmp_path / "cache", 6 << 20, 3)  # 2 MiB shards: multipart at 1 MiB parts
    result = measure(source, run_url(f"s3://{bucket}", "golive/ckpt/", "run-1"), profiles={}, settings=SETTINGS)
    assert result.verified, result.problems
    assert result.write_gb_per_s > 0 and result.read_gb_per_s > 0 and len(result.read_shard_gb_per_s) == 3
    assert set(result.write_shard_gb_per_s) <= {"fastest", "median", "slowest"} and result.write_shard_gb_per_s
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["golive/ckpt/keep-me"], "only what the measurement wrote is removed"
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


@pytest.mark.parametrize("where", ["local", "moto"])
def test_a_corrupted_read_back_fails_and_is_still_cleaned_up(where, request, tmp_path) -> None:
    source = synthetic(tmp_path / "cache", 3 << 20, 3)
    # The bytes that land differ from the ones the manifest recorded (as a store returning damaged bytes would).
    damaged = source.root / shard_name(1, 3)
    data = bytearray(damaged.read_bytes())
    data[12345] ^= 0xFF
    damaged.write_bytes(bytes(data))
    if where == "moto":
        moto = request.getfixturevalue("moto_env")
        bucket = f"bad-{tmp_path.name.lower().replace('_', '-')[-40:]}"
        boto3.client("s3", endpoint_url=moto.endpoint).create_bucket(Bucket=bucket)
        storage = f"s3://{bucket}"
    else:
        storage = str(tmp_path / "target")
    url = run_url(storage, "golive/ckpt", "run-bad")
    result = measure(source, url, profiles={}, settings=SETTINGS)
    assert not result.verified and result.read_gb_per_s is None
    assert len(result.problems) == 1 and shard_name(1, 3) in result.problems[0] and "SHA-256" in result.problems[0]
    assert "deleted 3 object(s)" in result.cleanup
    target = open_connector(url, {})
    try:
        assert list(target.list()) == []
    finally:
        target.close()


def test_an_unreachable_target_reports_the_problem_without_figures(tmp_path, moto_env) -> None:
    source = synthetic(tmp_path / "cache", 1 << 20, 2)
    result = measure(source, run_url("s3://no-such-bucket-here", "ckpt", "r"), profiles={}, settings=SETTINGS)
    assert result.write_gb_per_s is None and result.read_gb_per_s is None and result.problems


def test_an_interrupt_stops_the_write_and_still_cleans_up(tmp_path) -> None:
    import threading

    source = synthetic(tmp_path / "cache", 2 << 20, 2)
    stop = threading.Event()
    stop.set()
    url = run_url(str(tmp_path / "target"), "golive/ckpt", "run-stopped")
    result = measure(source, url, profiles={}, settings=SETTINGS, stop=stop)
    assert result.problems == ["interrupted: the run was stopped during the write"]
    assert result.write_gb_per_s is None and "aborted" in result.cleanup
    assert not [p for p in (tmp_path / "target").rglob("*") if p.is_file()]
