"""The source's own word: where the source holds a checksum of an object (S3's CRC64NVME, CRC32, CRC32C, SHA-256, a
plain or multipart MD5 ETag; Azure's Content-MD5), the bytes ferry reads are held to it, so a body damaged between
the source and ferry (the proxy flips a byte of a GET's body, the headers as the store sent them) is a mismatch:
read once more, then failed, never written as good. Real moto and Azurite servers."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import uuid
from pathlib import Path

import boto3
import pytest
from azure.storage.blob import BlobServiceClient, ContentSettings
from botocore.config import Config

from connectors.transfer import SOURCE_CHECKSUMS, TransferSettings
from ferry.profiles import Profile
from ferry.results import Status
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy

KiB = 1024
# Parts of 256 KiB above 512 KiB; the source's multipart objects are written in 320 KiB parts.
SETTINGS = TransferSettings(threads=4, part_size=256 * KiB, multipart_threshold=512 * KiB, retry_base_s=0.01,
                            retry_max_s=0.05, retry_budget_s=5)  # fmt: skip
THEIR_PART = 320 * KiB
# key -> (how it is written, its size): a full-object checksum of S3's, none (a plain MD5 ETag), or multipart.
OBJECTS = {
    "crc64nvme.bin": ("CRC64NVME", 5000),
    "crc32.bin": ("CRC32", 6000),
    "crc32c.bin": ("CRC32C", 7000),
    "sha256.bin": ("SHA256", 8000),
    "sha1.bin": ("SHA1", 9000),
    "plain.bin": (None, 10_000),
    "big/crc64nvme.bin": ("CRC64NVME", 1_100 * KiB),
    "big/crc32.bin": ("CRC32", 900 * KiB),
    "big/plain.bin": (None, 1_000 * KiB),
}
# What the copy of each is held to: the checksum the source holds, the MD5 of a plain ETag, the MD5s of a multipart
# ETag's parts (ferry takes the source's part size).
HELD = {
    "crc64nvme.bin": "crc64nvme",
    "crc32.bin": "crc32",
    "crc32c.bin": "crc32c",
    "sha256.bin": "sha256",
    "sha1.bin": "sha1",
    "plain.bin": "md5",
    "big/crc64nvme.bin": "crc64nvme",
    "big/crc32.bin": "crc32",
    "big/plain.bin": "md5-parts",
}


def _s3(endpoint: str):
    # No checksum unless asked: boto3's default would add a CRC32 to every write.
    config = Config(request_checksum_calculation="when_required", response_checksum_validation="when_required")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config)


def _put(s3, bucket: str, key: str, data: bytes, algorithm: str | None) -> None:
    """One PUT with the store's checksum of algorithm, or a multipart upload in THEIR_PART parts above 512 KiB
    (with a full-object checksum where algorithm names one)."""
    with_checksum = {"ChecksumAlgorithm": algorithm} if algorithm else {}
    if len(data) <= 512 * KiB:
        s3.put_object(Bucket=bucket, Key=key, Body=data, **with_checksum)
        return
    full = {**with_checksum, "ChecksumType": "FULL_OBJECT"} if algorithm else {}
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, **full)["UploadId"]
    parts = []
    for number, start in enumerate(range(0, len(data), THEIR_PART), 1):
        answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                Body=data[start : start + THEIR_PART], **with_checksum)  # fmt: skip
        entry = {"PartNumber": number, "ETag": answer["ETag"]}
        if algorithm:
            entry[f"Checksum{algorithm}"] = answer[f"Checksum{algorithm}"]
        parts.append(entry)
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts},
                                 **({"ChecksumType": "FULL_OBJECT"} if algorithm else {}))  # fmt: skip


def _source(moto_env) -> tuple[str, dict[str, bytes]]:
    """A bucket holding OBJECTS under src/, written as another tool would."""
    s3, bucket = _s3(moto_env.endpoint), f"held-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    files = {}
    for key, (algorithm, size) in OBJECTS.items():
        files[key] = os.urandom(size)
        _put(s3, bucket, f"src/{key}", files[key], algorithm)
    return bucket, files


def _held_recorded(state: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for path in state.glob("transfers/*.sqlite"):
        with sqlite3.connect(path) as conn:
            found.update(conn.execute("SELECT key, held_to FROM objects").fetchall())
    return found


def _read(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _through(proxy: FaultProxy) -> dict[str, Profile]:
    return {"via": Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 * KiB, read_timeout_s=5)}


def test_each_checksum_the_source_holds_is_what_its_copy_is_held_to(moto_env, tmp_path) -> None:
    bucket, files = _source(moto_env)
    state, dst = tmp_path / "state", tmp_path / "dst"
    result = run_sync(f"s3://{bucket}/src", str(dst), SETTINGS, profiles={}, state_dir=state)
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert _read(dst) == files
    expected = {kind: sum(k == kind for k in HELD.values()) for kind in SOURCE_CHECKSUMS}
    assert result.stats.held_to_source == expected
    assert _held_recorded(state) == HELD
    assert result.to_dict()["summary"]["held_to_source"] == expected
    assert {k: result.gate.measured[f"held_to_source_{k}"] for k in SOURCE_CHECKSUMS} == expected
    # Unchanged, the next run copies nothing and its gate still says what each copy was held to (the state).
    again = run_sync(f"s3://{bucket}/src", str(dst), SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.stats.copied == 0 and again.stats.skipped == len(files)
    assert {k: again.gate.measured[f"held_to_source_{k}"] for k in SOURCE_CHECKSUMS} == expected


def test_a_source_with_no_checksum_still_copies_held_to_nothing(tmp_path) -> None:
    src = tmp_path / "src"
    files = {"a.bin": os.urandom(3000), "big/b.bin": os.urandom(900 * KiB)}
    for key, data in files.items():
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(data)
    result = run_sync(str(src), str(tmp_path / "dst"), SETTINGS, profiles={}, state_dir=tmp_path / "state")
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert _read(tmp_path / "dst") == files
    assert not any(result.stats.held_to_source.values())
    assert set(_held_recorded(tmp_path / "state").values()) == {None}


def test_ferry_takes_the_source_part_size_only_where_its_multipart_etag_is_all_there_is(moto_env, tmp_path) -> None:
    bucket, files = _source(moto_env)
    # The target through a proxy that tells the truth: another endpoint, so the bytes are streamed through ferry (not
    # copied by the store); the copy of big/plain.bin goes in the source's 320 KiB parts, the others in ferry's.
    with FaultProxy(moto_env.port) as proxy:
        result = run_sync(f"s3://{bucket}/src", f"via://{bucket}/dst", SETTINGS, profiles=_through(proxy),
                          state_dir=tmp_path / "state")  # fmt: skip
    assert result.ok and result.stats.bytes_server_side == 0, result.stats.failures
    s3 = _s3(moto_env.endpoint)
    heads = {key: s3.head_object(Bucket=bucket, Key=f"dst/{key}", PartNumber=1) for key in files if "big/" in key}
    assert heads["big/plain.bin"]["ContentLength"] == THEIR_PART
    assert heads["big/crc64nvme.bin"]["ContentLength"] == heads["big/crc32.bin"]["ContentLength"] == 256 * KiB
    # The copy's multipart ETag is the source's: the same parts make the same MD5s.
    src_etag = s3.head_object(Bucket=bucket, Key="src/big/plain.bin")["ETag"]
    assert s3.head_object(Bucket=bucket, Key="dst/big/plain.bin")["ETag"] == src_etag


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_a_body_damaged_between_the_source_and_ferry_is_a_mismatch_and_never_written(
    moto_env, tmp_path, key: str
) -> None:
    bucket, files = _source(moto_env)
    state, dst = tmp_path / "state", tmp_path / "dst"
    with FaultProxy(moto_env.port, lie="flip", lie_path=f"/src/{key}") as proxy:
        result = run_sync(f"via://{bucket}/src", str(dst), SETTINGS, profiles=_through(proxy), state_dir=state)
    assert proxy.lies >= 2, "read once, and once more"
    assert not result.ok and result.stats.failed == 1, result.stats.failures
    [failure] = result.stats.failures
    assert f"{key}: the bytes read make" in failure and "the source holds" in failure, failure
    assert result.stats.recopied_after_mismatch == 1
    assert key not in _held_recorded(state), "nothing damaged is recorded as verified"
    assert _read(dst) == {k: v for k, v in files.items() if k != key}, "the damaged object is never written"
    # Read as the store sent it, it is copied and held to the source's checksum.
    again = run_sync(f"s3://{bucket}/src", str(dst), SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.stats.copied == 1 and again.stats.held_to_source[HELD[key]] == 1
    assert _read(dst) == files


def test_an_etag_under_sse_kms_is_not_taken_for_the_md5_of_the_bytes(moto_env, tmp_path) -> None:
    s3, bucket = _s3(moto_env.endpoint), f"held-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    body = os.urandom(4000)
    s3.put_object(Bucket=bucket, Key="src/kms.bin", Body=body, ServerSideEncryption="aws:kms",
                  SSEKMSKeyId="alias/ferry-test")  # fmt: skip
    s3.put_object(Bucket=bucket, Key="src/plain.bin", Body=body)
    state, dst = tmp_path / "state", tmp_path / "dst"
    # Every ETag the store gives is not the body's MD5, as S3's are under SSE-KMS.
    with FaultProxy(moto_env.port, lie="etag") as proxy:
        result = run_sync(f"via://{bucket}/src", str(dst), SETTINGS, profiles=_through(proxy), state_dir=state)
    # The encrypted object's ETag says nothing of its bytes: held to nothing, copied. The unencrypted one's says
    # they are its MD5, which they are not: a mismatch.
    assert result.stats.failed == 1 and "plain.bin: the bytes read make MD5" in result.stats.failures[0]
    assert _held_recorded(state) == {"kms.bin": None} and _read(dst) == {"kms.bin": body}


@pytest.mark.parametrize("damaged", [None, "small.bin"])
def test_an_azure_blobs_content_md5_holds_a_whole_read_not_one_in_parts(azurite_env, tmp_path, damaged) -> None:
    service = BlobServiceClient.from_connection_string(azurite_env.env["AZURE_STORAGE_CONNECTION_STRING"])
    name = f"held-{uuid.uuid4().hex[:10]}"
    container = service.create_container(name)
    files = {"small.bin": os.urandom(5000), "big.bin": os.urandom(900 * KiB)}
    for key, data in files.items():
        md5 = hashlib.md5(data, usedforsecurity=False).digest()
        container.upload_blob(f"src/{key}", data, content_settings=ContentSettings(content_md5=md5))
    state, dst = tmp_path / "state", tmp_path / "dst"
    with FaultProxy(azurite_env.port, lie="flip" if damaged else None, lie_path=f"/src/{damaged}") as proxy:
        profiles = {"via": Profile(type="azure", endpoint_url=f"{proxy.endpoint}/devstoreaccount1", read_timeout_s=5)}
        result = run_sync(f"via://{name}/src", str(dst), SETTINGS, profiles=profiles, state_dir=state)
    if damaged is None:
        assert result.ok, result.stats.failures
        # A blob read in parallel ranges gets no MD5 to hold: MD5 does not combine from parts.
        assert _held_recorded(state) == {"small.bin": "md5", "big.bin": None}
        assert _read(dst) == files
        return
    assert not result.ok and result.stats.recopied_after_mismatch == 1, result.stats.failures
    [failure] = result.stats.failures
    assert "small.bin: the bytes read make MD5" in failure, failure
    assert _held_recorded(state) == {"big.bin": None} and _read(dst) == {"big.bin": files["big.bin"]}


def test_a_checksum_the_source_holds_that_parallel_parts_cannot_make_is_counted_as_not_held(moto_env, tmp_path):
    """One PUT above ferry's multipart threshold (rclone writes up to 200 MiB so): a SHA-256 or a plain MD5 ETag
    cannot be made from parallel parts, so those copies are counted as not held; a CRC64NVME combines."""
    s3, bucket = _s3(moto_env.endpoint), f"held-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    files = {"sha256.bin": os.urandom(600 * KiB), "plain.bin": os.urandom(700 * KiB), "crc.bin": os.urandom(800 * KiB)}
    for key, algorithm in (("sha256.bin", "SHA256"), ("plain.bin", None), ("crc.bin", "CRC64NVME")):
        with_checksum = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        s3.put_object(Bucket=bucket, Key=f"src/{key}", Body=files[key], **with_checksum)
    result = run_sync(f"s3://{bucket}/src", str(tmp_path / "dst"), SETTINGS, profiles={}, state_dir=tmp_path / "st")
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert _read(tmp_path / "dst") == files
    assert {k: n for k, n in result.stats.held_to_source.items() if n} == {"crc64nvme": 1}
    assert result.stats.not_held_to_source == {"read_in_parts": 2, "resumed_parts": 0}
    assert result.to_dict()["summary"]["not_held_to_source"] == {"read_in_parts": 2, "resumed_parts": 0}
