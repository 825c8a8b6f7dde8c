"""A store that lies is caught: a checksum it reports rewritten, a body cut short with a Content-Length that
agrees, a write answered 200 and dropped. Each is detected and copied again or failed loudly; nothing is
recorded as verified that the store does not hold."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from pathlib import Path

import boto3
import botocore.config
import pytest

from connectors.transfer import TransferSettings
from ferry.profiles import Profile
from ferry.results import Status
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy

SETTINGS = TransferSettings(threads=4, part_size=256 << 10, multipart_threshold=1 << 20, retry_base_s=0.01,
                            retry_max_s=0.05, retry_budget_s=5)  # fmt: skip
SIZES = {"small/a.bin": 3000, "small/b.bin": 70_000, "big/model.pt": 1_500_000}


def make_source(root: Path) -> dict[str, bytes]:
    files = {}
    for key, size in SIZES.items():
        data = (hashlib.sha256(key.encode()).digest() * (size // 32 + 1))[:size]
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        files[key] = data
    return files


def s3(moto_env):
    return boto3.client("s3", endpoint_url=moto_env.endpoint, region_name="us-east-1")


def bucket(moto_env) -> str:
    name = f"lies-{uuid.uuid4().hex[:10]}"
    s3(moto_env).create_bucket(Bucket=name)
    return name


def held(moto_env, name: str, prefix: str = "p/") -> dict[str, bytes]:
    client = s3(moto_env)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=name, Prefix=prefix).get("Contents", [])]
    return {k[len(prefix) :]: client.get_object(Bucket=name, Key=k)["Body"].read() for k in keys}


def recorded(state: Path) -> set[str]:
    """The keys the transfer state records as copied and verified."""
    keys: set[str] = set()
    for path in state.glob("transfers/*.sqlite"):
        with sqlite3.connect(path) as conn:
            keys |= {row[0] for row in conn.execute("SELECT key FROM objects")}
    return keys


def through(proxy: FaultProxy) -> dict[str, Profile]:
    return {"liar": Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 << 10, read_timeout_s=2)}


@pytest.mark.parametrize("path", ["/p/small/", "/p/big/"], ids=["single-put", "multipart"])
def test_a_rewritten_checksum_fails_loudly_and_nothing_is_recorded(moto_env, tmp_path, path: str) -> None:
    files = make_source(tmp_path / "src")
    name, state = bucket(moto_env), tmp_path / "state"
    with FaultProxy(moto_env.port, lie="checksum", lie_path=path) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=through(proxy), state_dir=state)
    assert proxy.lies > 0
    lied = {k for k in files if f"/p/{k}".startswith(path)}
    assert not result.ok and result.stats.failed == len(lied), result.stats.failures
    assert all("mismatch" in f.lower() or "differs" in f or "holds" in f for f in result.stats.failures), result.stats
    assert result.stats.recopied_after_mismatch >= len(lied), "each mismatched write copied once more, then failed"
    assert not (recorded(state) & lied), "nothing the store lied about is recorded as verified"
    # The next run, with a store that tells the truth, copies them again and verifies them.
    again = run_sync(str(tmp_path / "src"), f"s3://{name}/p", SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.gate.status == Status.PASS
    assert held(moto_env, name) == files


@pytest.mark.parametrize("stored_checksum", [True, False], ids=["crc-stored", "no-checksum"])
def test_a_body_cut_short_with_an_agreeing_length_is_read_again(moto_env, tmp_path, stored_checksum: bool) -> None:
    files = make_source(tmp_path / "src")
    name = bucket(moto_env)
    # Without a checksum the store keeps, only the size the listing gave can tell the body was cut.
    client = s3(moto_env) if stored_checksum else boto3.client(
        "s3", endpoint_url=moto_env.endpoint, region_name="us-east-1",
        config=botocore.config.Config(request_checksum_calculation="when_required"),
    )  # fmt: skip
    for key, data in files.items():
        client.put_object(Bucket=name, Key=f"src/{key}", Body=data)
    # The first 4 reads of the source come back short, their Content-Length saying that is all there is.
    with FaultProxy(moto_env.port, lie="short", lie_path="/src/", lie_times=4) as proxy:
        profiles = through(proxy)
        result = run_sync(f"liar://{name}/src", str(tmp_path / "dst"), SETTINGS, profiles=profiles,
                          state_dir=tmp_path / "state")  # fmt: skip
    assert proxy.lies == 4
    assert result.ok, result.stats.failures
    assert {k: (tmp_path / "dst" / k).read_bytes() for k in files} == files


def test_a_dropped_write_is_caught_by_the_gate_and_copied_by_the_next_run(moto_env, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = bucket(moto_env), tmp_path / "state"
    # One small write answered 200 with the ETag its body would have had, and never stored.
    with FaultProxy(moto_env.port, lie="drop", lie_path="/p/small/a.bin", lie_times=1) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=through(proxy), state_dir=state)
    assert proxy.lies == 1
    assert result.gate.status == Status.FAIL and not result.ok
    assert result.gate.measured["missing"] == 1
    assert "small/a.bin" not in held(moto_env, name)
    again = run_sync(str(tmp_path / "src"), f"s3://{name}/p", SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.stats.copied == 1
    assert held(moto_env, name) == files


def test_a_dropped_part_is_not_resumed_forever(moto_env, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = bucket(moto_env), tmp_path / "state"
    # One part of the multipart object answered 200 and dropped: the upload cannot complete with it.
    with FaultProxy(moto_env.port, lie="drop", lie_path="partNumber=2", lie_times=1) as proxy:
        first = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=through(proxy), state_dir=state)
    assert proxy.lies == 1
    results = [first]
    for _ in range(2):
        if results[-1].ok:
            break
        results.append(run_sync(str(tmp_path / "src"), f"s3://{name}/p", SETTINGS, profiles={}, state_dir=state))
    assert results[-1].ok, [r.stats.failures for r in results]
    assert held(moto_env, name) == files


def test_an_upload_begun_by_a_lost_answer_is_aborted(moto_env, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = bucket(moto_env), tmp_path / "state"
    # The store begins the multipart upload; its answer (the upload id) is lost, so ferry begins another.
    with FaultProxy(moto_env.port, lie="lost", lie_path="?uploads", lie_times=1) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=through(proxy), state_dir=state)
    assert proxy.lies == 1 and result.ok, result.stats.failures
    assert not s3(moto_env).list_multipart_uploads(Bucket=name).get("Uploads"), "the lost one was aborted"
    assert held(moto_env, name) == files
