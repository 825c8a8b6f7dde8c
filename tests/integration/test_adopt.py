"""Adoption: target objects another tool wrote (rclone, the AWS CLI's s3transfer) proven equal from what the stores
already say, recorded in the transfer state, and not copied again; what cannot be proven equal is copied."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from connectors.base import MD5, MD5_OF_PARTS
from connectors.registry import open_connector
from connectors.transfer import TransferSettings
from connectors.transfer.retry import read_digests, retrying
from ferry.results import Status
from ferry.sync import run_sync
from tests.support import run_cli

KiB, MiB = 1024, 1 << 20
SETTINGS = TransferSettings(threads=8, part_size=256 * KiB, multipart_threshold=512 * KiB, memory_budget=8 * MiB)


def client(endpoint: str, *, checksums: bool):
    """An S3 client as boto3 ships (a CRC32 on every write) or as older tools wrote (none)."""
    config = Config(request_checksum_calculation="when_supported" if checksums else "when_required")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config)


def new_bucket(endpoint: str) -> str:
    name = f"adopt-{uuid.uuid4().hex[:12]}"
    client(endpoint, checksums=False).create_bucket(Bucket=name)
    return name


def upload(s3, bucket: str, key: str, data: bytes, part_size: int | None = None) -> None:
    """One PUT as the AWS CLI's s3transfer makes it, or a multipart upload in part_size parts as a tool with its own
    part size writes it (s3transfer itself takes no parts under 5 MiB; the test server takes them from 256 KiB)."""
    if part_size is None:
        s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=TransferConfig(multipart_threshold=1 << 40))
        return
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, start in enumerate(range(0, len(data), part_size), 1):
        body = data[start : start + part_size]
        etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})


def heads(endpoint: str, bucket: str, prefix: str) -> dict[str, tuple[str, object]]:
    """key -> (ETag, LastModified) under prefix: a rewrite of an object changes its LastModified."""
    s3 = client(endpoint, checksums=False)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix) :]: (o["ETag"], o["LastModified"]) for p in pages for o in p.get("Contents", ())}


def proofs_recorded(state: Path) -> dict[str, str | None]:
    found = {}
    for path in state.rglob("transfers/*.sqlite"):  # the CLI keeps it in a state/ folder under --state-dir
        with sqlite3.connect(path) as conn:
            found.update(conn.execute("SELECT key, proof FROM objects").fetchall())
    return found


def test_each_proof_in_order_and_what_none_proves_is_copied(moto_env, tmp_path) -> None:
    endpoint = moto_env.endpoint
    src, dst = new_bucket(endpoint), new_bucket(endpoint)
    with_crc, bare = client(endpoint, checksums=True), client(endpoint, checksums=False)
    data = {name: os.urandom(size) for name, size in (("crc32", 3000), ("plain", 5000), ("parts", 700 * KiB))}
    data["other-parts"] = os.urandom(900 * KiB)
    data["differs"] = os.urandom(4000)
    # How each object reached both sides: boto3's defaults on both (a CRC32 each); no checksum, one PUT each; both
    # in 300 KiB parts; the source in 300 KiB parts, the target in 400 KiB ones; the target an older version.
    for bucket in (src, dst):
        upload(with_crc, bucket, "p/crc32", data["crc32"])
        upload(bare, bucket, "p/plain", data["plain"])
        upload(bare, bucket, "p/parts", data["parts"], part_size=300 * KiB)
    upload(bare, src, "p/other-parts", data["other-parts"], part_size=300 * KiB)
    upload(bare, dst, "p/other-parts", data["other-parts"], part_size=400 * KiB)
    upload(bare, src, "p/differs", data["differs"])
    upload(bare, dst, "p/differs", os.urandom(4000))
    before = heads(endpoint, dst, "p/")
    state = tmp_path / "state"

    actions = []
    result = run_sync(
        f"s3://{src}/p", f"s3://{dst}/p", SETTINGS, profiles={}, state_dir=state, on_action=actions.append
    )

    assert result.ok and result.gate.status == Status.PASS, (result.stats.failures, result.gate.evidence)
    stats = result.stats
    assert stats.adopted_by == {"checksum": 1, "md5_etag": 1, "multipart_etag": 1, "reading": 1}
    assert (stats.adopted, stats.copied, stats.skipped) == (4, 1, 4)
    assert stats.bytes_read == 0  # the proof by reading read the target, never the source
    reasons = {a.key: (a.kind, a.reason) for a in actions if a.kind in ("equal", "copy")}
    assert reasons["differs"][0] == "copy" and reasons["differs"][1].startswith("MD5s differ")
    assert reasons["other-parts"] == ("equal", "reading")
    after = heads(endpoint, dst, "p/")
    assert {k: v for k, v in after.items() if k != "differs"} == {k: v for k, v in before.items() if k != "differs"}
    assert bare.get_object(Bucket=dst, Key="p/differs")["Body"].read() == data["differs"]
    assert proofs_recorded(state) == {
        "crc32": "checksum", "plain": "md5_etag", "parts": "multipart_etag", "other-parts": "reading", "differs": None,
    }  # fmt: skip
    assert {k: result.gate.measured[f"adopted_by_{k}"] for k in stats.adopted_by} == stats.adopted_by

    # The next run: all settled by the state; its gate counts the adopted ones by their proofs still.
    again = run_sync(f"s3://{src}/p", f"s3://{dst}/p", SETTINGS, profiles={}, state_dir=state)
    assert (again.stats.copied, again.stats.adopted, again.stats.skipped) == (0, 0, 5)
    assert again.gate.status == Status.PASS
    measured = again.gate.measured
    assert (measured["verified_by_state"], measured["adopted_by_reading"], measured["adopted_by_md5_etag"]) == (1, 1, 1)


def test_an_encrypted_objects_etag_proves_nothing(moto_env, tmp_path) -> None:
    """Under SSE-KMS an ETag is not the MD5 of the bytes: the proof is a read of the target against the source's."""
    endpoint = moto_env.endpoint
    src, dst = new_bucket(endpoint), new_bucket(endpoint)
    bare, body = client(endpoint, checksums=False), os.urandom(2000)
    bare.put_object(Bucket=src, Key="k", Body=body)
    bare.put_object(Bucket=dst, Key="k", Body=body, ServerSideEncryption="aws:kms", SSEKMSKeyId="alias/ferry-test")
    target = open_connector(f"s3://{dst}", {})
    held = target.stat("k")
    assert MD5 not in (held.digests or {}) and held.signature  # the ETag is there, and taken for no MD5
    result = run_sync(f"s3://{src}", f"s3://{dst}", SETTINGS, profiles={}, state_dir=tmp_path / "state")
    assert result.ok and result.stats.adopted_by["reading"] == 1 and result.stats.copied == 0


def test_a_read_hashes_parts_across_chunks_as_the_store_made_its_etag(moto_env, tmp_path) -> None:
    """read_digests streams in chunks of one size and hashes parts of another: the same multipart ETag as S3's."""
    bucket, bare = new_bucket(moto_env.endpoint), client(moto_env.endpoint, checksums=False)
    body = os.urandom(1000 * KiB + 123)
    upload(bare, bucket, "big", body, part_size=300 * KiB)
    target = open_connector(f"s3://{bucket}", {})
    held = target.stat("big")
    assert (held.digests or {})[MD5_OF_PARTS].endswith("-4") and target.part_size("big") == 300 * KiB
    policy = retrying(SETTINGS)
    for chunk in (64 * KiB, 300 * KiB, 700 * KiB, 2 * MiB):
        read = read_digests(target, held, chunk, policy, md5=True, part_size=300 * KiB)
        assert (read.digests or {})[MD5_OF_PARTS] == held.signature
        assert (read.digests or {})[MD5] == hashlib.md5(body).hexdigest()


def test_a_tree_rclone_copied_is_adopted_and_only_the_changed_file_copied(moto_env, tmp_path) -> None:
    """rclone wrote the target (5 MiB parts above its cut-off); a file changed since, at the same size, is all that
    ferry copies; the dry run says the same first."""
    assert shutil.which("rclone"), "rclone is not installed: apt-get install rclone (.ci/run installs it)"
    tree = tmp_path / "tree"
    files = {f"small/{i:02d}.bin": os.urandom(10 * KiB + i) for i in range(12)}
    files["big/model.pt"] = os.urandom(11 * MiB + 5)
    files["big/changed.pt"] = os.urandom(6 * MiB)
    for key, body in files.items():
        (tree / key).parent.mkdir(parents=True, exist_ok=True)
        (tree / key).write_bytes(body)
    bucket = new_bucket(moto_env.endpoint)
    rclone = [
        "rclone", "copy", str(tree), f":s3:{bucket}/data", "--s3-provider", "Other", "--s3-endpoint",
        moto_env.endpoint, "--s3-access-key-id", "testing", "--s3-secret-access-key", "testing",
        "--s3-upload-cutoff", "5Mi", "--s3-chunk-size", "5Mi", "--transfers", "4",
    ]  # fmt: skip
    env = {**os.environ, "RCLONE_CONFIG": str(tmp_path / "rclone.conf")}
    done = subprocess.run(rclone, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    before = heads(moto_env.endpoint, bucket, "data/")
    assert before["big/model.pt"][0].strip('"').endswith("-3")  # rclone's multipart ETag
    (tree / "big/changed.pt").write_bytes(os.urandom(6 * MiB))  # changed since, the same size
    state = tmp_path / "state"
    args = (str(tree), f"s3://{bucket}/data", "--state-dir", str(state), "--threads", "8", "--no-progress")

    code, out, err = run_cli("sync", *args, "--dry-run")
    assert code == 0, err
    # Read in rclone's parts (a HEAD of part 1 tells their size), the changed file does not make rclone's ETag.
    assert "would copy: big/changed.pt (6291456 bytes; read in 5242880-byte parts, it does not make" in out, out
    assert "by proof: reading 13" in out, out

    code, out, err = run_cli("sync", *args)
    assert code == 0, err
    assert "by proof: reading 13" in out and "data gate: PASS" in out, out
    after = heads(moto_env.endpoint, bucket, "data/")
    assert {k: v for k, v in after.items() if k != "big/changed.pt"} == {
        k: v for k, v in before.items() if k != "big/changed.pt"
    }
    assert after["big/changed.pt"] != before["big/changed.pt"]
    assert set(proofs_recorded(state).values()) == {"reading", None}


def test_what_the_data_sync_phase_adopted_its_rollback_leaves(moto_env, tmp_path: Path) -> None:
    from ferry.audit import AuditFolder
    from ferry.phases.base import Reporter, open_phase
    from ferry.plan import load_plan
    from tests.support import write_plan

    bucket = new_bucket(moto_env.endpoint)
    plan = write_plan(tmp_path, "adopt-undo")
    plan.write_text(plan.read_text().replace("storage: ./dst", f"storage: s3://{bucket}/dst"))
    # Another tool copied a/one.bin before ferry ran (one PUT: its ETag is its MD5); b/three.bin is there at the
    # same size with other bytes.
    s3 = client(moto_env.endpoint, checksums=False)
    upload(s3, bucket, "dst/a/one.bin", (tmp_path / "src" / "a" / "one.bin").read_bytes())
    upload(s3, bucket, "dst/b/three.bin", b"x" * 300)
    before = heads(moto_env.endpoint, bucket, "dst/")
    phase = open_phase(load_plan(plan), "data_sync")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    details = [phase.run(shard, audit, Reporter()).details for shard in phase.steps()]
    assert sum(d["objects"]["adopted"] for d in details) == 1
    assert all(gate.status == Status.PASS for gate in phase.gate(audit)), [g.evidence for g in phase.gate(audit)]
    after_run = heads(moto_env.endpoint, bucket, "dst/")
    assert after_run["a/one.bin"] == before["a/one.bin"], "adopted: not written again"
    assert after_run["b/three.bin"] != before["b/three.bin"], "other bytes: copied"
    undo = phase.rollback(audit)
    # Only what the run created goes (a/two.bin); the adopted object stays as the other tool wrote it, and so does
    # the one ferry wrote over (it cannot give its old bytes back).
    left = heads(moto_env.endpoint, bucket, "dst/")
    assert sorted(left) == ["a/one.bin", "b/three.bin"] and undo.failed == 0, undo.text
    assert left["a/one.bin"] == before["a/one.bin"]
