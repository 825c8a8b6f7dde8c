"""A store that lies is caught: a checksum it reports rewritten, a body cut short with a Content-Length that
agrees, a write answered 200 (Azure: 201) and dropped, an answer lost. Each is detected and copied again or failed
loudly; nothing is recorded as verified that the store does not hold. S3 (moto) and Azure Blob (Azurite)."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import boto3
import botocore.config
import pytest
from azure.storage.blob import BlobServiceClient, ContainerClient

from connectors.azure_blob import CHECKSUM_KEY
from connectors.checksum import crc32c, label
from connectors.transfer import TransferSettings
from ferry.profiles import Profile
from ferry.results import Status
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy
from tests.support import Server

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


@dataclass
class Store:
    """One real store, reached by ferry through the lying proxy and read by the test straight."""

    kind: str  # "s3" or "azure"
    server: Server

    @property
    def write_status(self) -> int:
        """What the store answers a write: S3 200; Azure's Put Blob and Put Block 201."""
        return 200 if self.kind == "s3" else 201

    def part_path(self, number: int) -> str:
        """What only the request path of part `number`'s upload holds (Azure: its block, 0 the upload's marker)."""
        if self.kind == "s3":
            return f"partNumber={number}"
        # ferry's block ids are "<16 hex token>-<6-digit number>", base64 in the query: the last 8 characters
        # encode "<number>" alone.
        block = base64.b64encode(f"{'0' * 16}-{number:06d}".encode()).decode()
        return quote(block[-8:], safe="")

    @property
    def begin_path(self) -> str:
        """What only the request that begins a multipart upload holds: S3's CreateMultipartUpload, Azure's marker."""
        return "?uploads" if self.kind == "s3" else self.part_path(0)

    def url(self, place: str) -> str:
        """The target as a truthful run names it: the store's credentials and endpoint from the environment."""
        return f"{'s3' if self.kind == 's3' else 'az'}://{place}/p"

    def through(self, proxy: FaultProxy) -> dict[str, Profile]:
        if self.kind == "s3":
            profile = Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 << 10, read_timeout_s=2)
        else:
            profile = Profile(type="azure", endpoint_url=f"{proxy.endpoint}/devstoreaccount1", read_timeout_s=2)
        return {"liar": profile}

    def new_place(self) -> str:
        name = f"lies-{uuid.uuid4().hex[:10]}"
        if self.kind == "s3":
            self._s3().create_bucket(Bucket=name)
        else:
            self._service().create_container(name)
        return name

    def put(self, place: str, key: str, data: bytes, *, checksum: bool) -> None:
        """An object written by another tool, with a checksum the store keeps (S3's CRC, ferry's metadata on
        Azure) or none."""
        if self.kind == "s3":
            config = None if checksum else botocore.config.Config(request_checksum_calculation="when_required")
            self._s3(config).put_object(Bucket=place, Key=key, Body=data)
        else:
            metadata = {CHECKSUM_KEY: label(crc32c(data))} if checksum else None
            self._container(place).upload_blob(key, data, metadata=metadata)

    def held(self, place: str, prefix: str = "p/") -> dict[str, bytes]:
        if self.kind == "s3":
            client = self._s3()
            keys = [o["Key"] for o in client.list_objects_v2(Bucket=place, Prefix=prefix).get("Contents", [])]
            return {k[len(prefix) :]: client.get_object(Bucket=place, Key=k)["Body"].read() for k in keys}
        container = self._container(place)
        return {
            b.name[len(prefix) :]: container.download_blob(b.name).readall()
            for b in container.list_blobs(name_starts_with=prefix)
        }

    def open_uploads(self, place: str) -> list[str]:
        """The keys with an upload begun and neither completed nor aborted (Azure: blocks staged, uncommitted)."""
        if self.kind == "s3":
            return [u["Key"] for u in self._s3().list_multipart_uploads(Bucket=place).get("Uploads", [])]
        container = self._container(place)
        return [
            b.name
            for b in container.list_blobs(include=["uncommittedblobs"])
            if container.get_blob_client(b.name).get_block_list("uncommitted")[1]
        ]

    def _s3(self, config: botocore.config.Config | None = None):
        return boto3.client("s3", endpoint_url=self.server.endpoint, region_name="us-east-1", config=config)

    def _service(self) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.server.env["AZURE_STORAGE_CONNECTION_STRING"])

    def _container(self, place: str) -> ContainerClient:
        return self._service().get_container_client(place)


@pytest.fixture(params=["s3", "azure"])
def store(request) -> Store:
    return Store(request.param, request.getfixturevalue("moto_env" if request.param == "s3" else "azurite_env"))


def recorded(state: Path) -> set[str]:
    """The keys the transfer state records as copied and verified."""
    keys: set[str] = set()
    for path in state.glob("transfers/*.sqlite"):
        with sqlite3.connect(path) as conn:
            keys |= {row[0] for row in conn.execute("SELECT key FROM objects")}
    return keys


# Azurite answers Put Block with no Content-MD5 or CRC64, so on Azure "multipart" rewrites the receipt of the
# commit (Put Block List: the MD5 of the block list sent) and the ETags; S3 reports each part's and the whole
# object's checksum.
@pytest.mark.parametrize("path", ["/p/small/", "/p/big/"], ids=["single-put", "multipart"])
def test_a_rewritten_checksum_fails_loudly_and_nothing_is_recorded(store: Store, tmp_path, path: str) -> None:
    files = make_source(tmp_path / "src")
    name, state = store.new_place(), tmp_path / "state"
    with FaultProxy(store.server.port, lie="checksum", lie_path=path) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=store.through(proxy),
                          state_dir=state)  # fmt: skip
    assert proxy.lies > 0
    lied = {k for k in files if f"/p/{k}".startswith(path)}
    assert not result.ok and result.stats.failed == len(lied), result.stats.failures
    assert all("mismatch" in f.lower() or "differs" in f or "holds" in f for f in result.stats.failures), result.stats
    assert result.stats.recopied_after_mismatch >= len(lied), "each mismatched write copied once more, then failed"
    assert not (recorded(state) & lied), "nothing the store lied about is recorded as verified"
    # The next run, with a store that tells the truth, copies them again and verifies them.
    again = run_sync(str(tmp_path / "src"), store.url(name), SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.gate.status == Status.PASS
    assert store.held(name) == files


@pytest.mark.parametrize("stored_checksum", [True, False], ids=["crc-stored", "no-checksum"])
def test_a_body_cut_short_with_an_agreeing_length_is_read_again(store: Store, tmp_path, stored_checksum: bool) -> None:
    files = make_source(tmp_path / "src")
    name = store.new_place()
    # Without a checksum the store keeps, only the size the listing (Azure: the Content-Range) gave can tell the
    # body was cut.
    for key, data in files.items():
        store.put(name, f"src/{key}", data, checksum=stored_checksum)
    # The first 4 reads of the source come back short, their Content-Length saying that is all there is.
    with FaultProxy(store.server.port, lie="short", lie_path="/src/", lie_times=4) as proxy:
        result = run_sync(f"liar://{name}/src", str(tmp_path / "dst"), SETTINGS, profiles=store.through(proxy),
                          state_dir=tmp_path / "state")  # fmt: skip
    assert proxy.lies == 4
    assert result.ok, result.stats.failures
    assert {k: (tmp_path / "dst" / k).read_bytes() for k in files} == files


# A stat of the large object comes first and counts as a lie (an answer with no body is not cut).
@pytest.mark.parametrize(("key", "lies"), [("small/a.bin", 2), ("big/model.pt", 3)], ids=["whole", "ranged"])
def test_a_read_cut_short_twice_in_a_row_is_read_again(store: Store, tmp_path, key: str, lies: int) -> None:
    files = make_source(tmp_path / "src")
    name = store.new_place()
    for each, data in files.items():
        store.put(name, f"src/{each}", data, checksum=False)
    # One read cut short, and the read that follows it too: Azure's SDK asks for the rest of a short body itself
    # and takes the second answer as it comes. One worker, so that the two cut reads are of the same bytes.
    with FaultProxy(store.server.port, lie="short", lie_path=f"/src/{key}", lie_times=lies) as proxy:
        result = run_sync(f"liar://{name}/src", str(tmp_path / "dst"), replace(SETTINGS, threads=1),
                          profiles=store.through(proxy), state_dir=tmp_path / "state")  # fmt: skip
    assert proxy.lies == lies
    assert result.ok and result.stats.retries >= 1, result.stats.failures
    assert {k: (tmp_path / "dst" / k).read_bytes() for k in files} == files


def test_a_dropped_write_is_caught_by_the_gate_and_copied_by_the_next_run(store: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = store.new_place(), tmp_path / "state"
    # One small write answered as a stored one is, with the ETag its body would have had, and never stored.
    with FaultProxy(store.server.port, lie="drop", lie_path="/p/small/a.bin", lie_times=1,
                    drop_status=store.write_status) as proxy:  # fmt: skip
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=store.through(proxy),
                          state_dir=state)  # fmt: skip
    assert proxy.lies == 1
    assert result.gate.status == Status.FAIL and not result.ok
    assert result.gate.measured["missing"] == 1
    assert "small/a.bin" not in store.held(name)
    again = run_sync(str(tmp_path / "src"), store.url(name), SETTINGS, profiles={}, state_dir=state)
    assert again.ok and again.stats.copied == 1
    assert store.held(name) == files


def test_a_dropped_part_is_not_resumed_forever(store: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = store.new_place(), tmp_path / "state"
    # One part of the multipart object (Azure: one staged block) answered as stored and dropped: the upload
    # cannot complete with it.
    with FaultProxy(store.server.port, lie="drop", lie_path=store.part_path(2), lie_times=1,
                    drop_status=store.write_status) as proxy:  # fmt: skip
        first = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=store.through(proxy),
                         state_dir=state)  # fmt: skip
    assert proxy.lies == 1
    results = [first]
    for _ in range(2):
        if results[-1].ok:
            break
        results.append(run_sync(str(tmp_path / "src"), store.url(name), SETTINGS, profiles={}, state_dir=state))
    assert results[-1].ok, [r.stats.failures for r in results]
    assert store.held(name) == files
    assert not store.open_uploads(name), "no upload left open"


def test_an_upload_begun_by_a_lost_answer_is_aborted(store: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    name, state = store.new_place(), tmp_path / "state"
    # The store begins the multipart upload (Azure: stages its marker block); its answer is lost, so ferry begins
    # another.
    with FaultProxy(store.server.port, lie="lost", lie_path=store.begin_path, lie_times=1) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=store.through(proxy),
                          state_dir=state)  # fmt: skip
    assert proxy.lies == 1 and result.ok, result.stats.failures
    assert not store.open_uploads(name), "the lost one was aborted"
    assert store.held(name) == files


# What only each write's request path holds; S3's CompleteMultipartUpload path is a prefix of its parts' paths.
LOST = {"single-put": lambda store: "/p/small/a.bin", "part": lambda store: store.part_path(2),
        "commit": lambda store: "comp=blocklist" if store.kind == "azure" else None}  # fmt: skip


@pytest.mark.parametrize("write", sorted(LOST))
def test_a_write_whose_answer_is_lost_is_sent_again_and_verified(store: Store, tmp_path, write: str) -> None:
    path = LOST[write](store)
    if path is None:
        pytest.skip("the proxy cannot pick S3's commit out: its path is a prefix of every part's")
    files = make_source(tmp_path / "src")
    name = store.new_place()
    # The store does the write (Azure's commit: the blocks are committed); its answer is lost (a reset), so ferry
    # cannot tell it was done, and sends it again.
    with FaultProxy(store.server.port, lie="lost", lie_path=path, lie_times=1) as proxy:
        result = run_sync(str(tmp_path / "src"), f"liar://{name}/p", SETTINGS, profiles=store.through(proxy),
                          state_dir=tmp_path / "state")  # fmt: skip
    # Sent again: by the engine's retry, or (S3 through the CRT) by the CRT's own single retry, which the stats
    # cannot see; the store saw the write twice either way.
    assert proxy.lies == 1 and proxy.lie_path_writes >= 2
    assert result.ok and result.gate.status == Status.PASS, result.stats.failures
    assert store.held(name) == files
    assert not store.open_uploads(name)
