"""Faults at a rate between ferry and the real local stores: connections reset, answers truncated or stalled,
503 SlowDown, at 5% and 20% of requests (seeded: a failure replays), and the endpoint taken away for 30 s once.

Each sync finishes, or fails loudly and the next run finishes it, with every object verified against the source
(read straight from the store, not through the proxy), nothing duplicated and no upload left open. The images
phase between two real registries likewise: every image arrives whole with its digest, or the phase fails loudly
(one line) and a later run finishes; and a target registry that lies is caught, not recorded. The figures
(faults, retries, bytes sent against the fault-free run, runs, time) are printed (`pytest -s`) for the note.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from azure.storage.blob import BlobServiceClient

from connectors.transfer import TransferSettings
from ferry.errors import FerryError
from ferry.images.journal import read_journal
from ferry.images.oci import Registry
from ferry.profiles import Profile
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy
from tests.support import Server

# Small objects, a few of them multipart (256 KiB parts, as the stores' tests allow).
SIZES = [0, 1, 700, 4096, 65_536, 200_000] * 25 + [1_300_000, 2_100_000, 3_000_000]
SETTINGS = TransferSettings(threads=8, part_size=256 << 10, multipart_threshold=1 << 20, retry_base_s=0.05,
                            retry_max_s=2.0)  # fmt: skip
# A stalled answer is given up on after this (the profile's read_timeout_s).
READ_TIMEOUT_S = 1.0


def make_source(root: Path) -> dict[str, str]:
    """The source tree; each key's MD5."""
    sums = {}
    for i, size in enumerate(SIZES):
        key = f"shard-{i % 3}/obj-{i:03d}.bin"
        data = hashlib.sha256(f"{i}".encode()).digest() * (size // 32 + 1)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data[:size])
        sums[key] = hashlib.md5(data[:size], usedforsecurity=False).hexdigest()
    return sums


@dataclass
class Store:
    """One store behind a proxy: its profile type, the target URL, and how to read it without the proxy."""

    kind: str
    server: Server

    def profile(self, endpoint: str) -> Profile:
        options = {"type": self.kind, "endpoint_url": endpoint, "read_timeout_s": READ_TIMEOUT_S}
        if self.kind == "s3":
            options["min_part_size"] = 256 << 10
        else:
            options["endpoint_url"] = f"{endpoint}/devstoreaccount1"
        return Profile(**options)

    def proxied_endpoint(self, proxy: FaultProxy) -> str:
        return proxy.endpoint

    def new_place(self) -> str:
        name = f"faults-{uuid.uuid4().hex[:10]}"
        if self.kind == "s3":
            boto3.client("s3", endpoint_url=self.server.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
        else:
            self._service().create_container(name)
        return name

    def _service(self) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.server.env["AZURE_STORAGE_CONNECTION_STRING"])

    def held(self, place: str) -> dict[str, str]:
        """Every object under place/p/ and its MD5, read straight from the store; fails if an upload is open."""
        if self.kind == "s3":
            client = boto3.client("s3", endpoint_url=self.server.endpoint, region_name="us-east-1")
            assert not client.list_multipart_uploads(Bucket=place).get("Uploads"), "an upload was left open"
            keys = [o["Key"] for p in client.get_paginator("list_objects_v2").paginate(Bucket=place, Prefix="p/")
                    for o in p.get("Contents", [])]  # fmt: skip
            return {
                k[2:]: hashlib.md5(
                    client.get_object(Bucket=place, Key=k)["Body"].read(), usedforsecurity=False
                ).hexdigest()
                for k in keys
            }
        container = self._service().get_container_client(place)
        return {
            b.name[2:]: hashlib.md5(container.download_blob(b.name).readall(), usedforsecurity=False).hexdigest()
            for b in container.list_blobs(name_starts_with="p/")
        }


@pytest.fixture(params=["s3", "azure"])
def store(request, moto_env, azurite_env) -> Store:
    return Store(request.param, moto_env if request.param == "s3" else azurite_env)


def synced(store: Store, source: Path, place: str, state: Path, proxy: FaultProxy, runs: int = 3):
    """run_sync through the proxy until it succeeds (at most runs times); (results, seconds)."""
    target = f"{'faulty' if store.kind == 's3' else 'faultyaz'}://{place}/p"
    profiles = {target.split(":")[0]: store.profile(store.proxied_endpoint(proxy))}
    results, started = [], time.monotonic()
    for _ in range(runs):
        results.append(run_sync(str(source), target, SETTINGS, profiles=profiles, state_dir=state))
        if results[-1].ok:
            break
    return results, time.monotonic() - started


def figures(label: str, proxy: FaultProxy, results, seconds: float, baseline: dict | None) -> dict:
    stats = results[-1].stats
    out = {
        "case": label,
        "requests": proxy.requests,
        "faults": dict(proxy.faults),
        "outages": proxy.outages,
        "runs": len(results),
        "failed_first": results[0].stats.failed,
        "retries": sum(r.stats.retries for r in results),
        "recopied": sum(r.stats.recopied_after_mismatch for r in results),
        "body_bytes": proxy.body_bytes,
        "seconds": round(seconds, 2),
        "copied_last": stats.copied,
    }
    if baseline:
        out["resent_bytes"] = proxy.body_bytes - baseline["body_bytes"]
        out["time_vs_fault_free"] = round(seconds / max(baseline["seconds"], 0.01), 2)
    return report(out)


def report(out: dict) -> dict:
    """Print a case's figures (and append them to $FERRY_FAULT_FIGURES when set)."""
    print("FAULT-FIGURES " + json.dumps(out))
    path = os.environ.get("FERRY_FAULT_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(out) + "\n")
    return out


@pytest.mark.parametrize("rate", [0.05, 0.20], ids=["5pct", "20pct"])
def test_faults_at_a_rate_every_object_verified_once(store: Store, tmp_path: Path, rate: float) -> None:
    sums = make_source(tmp_path / "src")
    # The same copy with no fault, for what the faults cost.
    clean_place = store.new_place()
    with FaultProxy(store.server.port) as clean:
        clean_results, clean_s = synced(store, tmp_path / "src", clean_place, tmp_path / "state-clean", clean, 1)
    assert clean_results[0].ok and clean.requests > 0
    baseline = {"body_bytes": clean.body_bytes, "seconds": clean_s}

    place = store.new_place()
    with FaultProxy(store.server.port, rate=rate, seed=int(rate * 100), stall_s=3 * READ_TIMEOUT_S) as proxy:
        results, seconds = synced(store, tmp_path / "src", place, tmp_path / "state", proxy)
    found = figures(f"{store.kind} {rate:.0%}", proxy, results, seconds, baseline)
    assert sum(proxy.faults.values()) > 0 and found["retries"] > 0
    assert set(proxy.faults) == {"reset", "truncate", "stall", "503"}, "every kind was injected"
    assert results[-1].ok, [r.stats.failures[:3] for r in results]
    for failed in results[:-1]:  # a run that did not finish said so, object by object
        assert failed.stats.failed == len(failed.stats.failures) > 0
    assert store.held(place) == sums, "every object there, once, with the source's bytes"
    assert results[-1].gate.status.value == "PASS"


def test_the_endpoint_away_for_30_s_is_ridden_out(store: Store, tmp_path: Path) -> None:
    sums = make_source(tmp_path / "src")
    place = store.new_place()
    # Gone at its 40th request (mid-copy), for 30 s: longer than any one backoff, inside the retry budget.
    with FaultProxy(store.server.port, outage_at=40, outage_s=30) as proxy:
        results, seconds = synced(store, tmp_path / "src", place, tmp_path / "state", proxy)
    figures(f"{store.kind} 30 s outage", proxy, results, seconds, None)
    assert proxy.outages == 1 and proxy.requests > 40, "the copy went on after the endpoint came back"
    assert len(results) == 1 and results[0].ok, results[0].stats.failures[:3]
    assert results[0].stats.retries > 0
    assert store.held(place) == sums


# The images copied registry to registry: distinct manifests and configs over one shared layer.
IMAGES = 6
TAGS = [str(i) for i in range(IMAGES)]
# skopeo sets no read timeout (measured: it waited out two 70 s stalls, 140 s) and ferry's registry client waits
# 30 s, so a stalled answer is waited on until the proxy resets it: a short stall is a late reset after the registry
# did the work. An answer held for ever would hold skopeo until the phase's tool timeout (an hour).
REGISTRY_STALL_S = 1.0
RUNS = 8


@pytest.fixture(scope="module")
def source_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A registry holding ml/tool:0..IMAGES-1, each its own image (its config differs)."""
    from tests.support import buildah, busybox_image, start_registry

    work = tmp_path_factory.mktemp("buildah")
    source = start_registry()
    try:
        for tag in TAGS:
            busybox_image(work, f"tool{tag}", "amd64", [f"VARIANT={tag}"])
            buildah(work, "push", "--tls-verify=false", f"tool{tag}", f"docker://127.0.0.1:{source.port}/ml/tool:{tag}")
        yield source
    finally:
        source.stop()


def images_plan(root: Path, source: Server, proxy: FaultProxy, parallel: int) -> Path:
    """A plan copying ml/tool:* from source to ai/ on the registry behind proxy, parallel at a time."""
    (root / "src").mkdir()
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: faulty-registry\nsource: {{storage: ./src, registry: 127.0.0.1:{source.port}/ml}}\n"
        f"target: {{storage: ./dst, registry: 127.0.0.1:{proxy.port}/ai}}\n"
        f'phases:\n  images: {{copy: ["tool:*"], parallel: {parallel}}}\n'
    )
    return plan


def copy_images(plan: Path, between: Callable[[], None]) -> tuple[list[str], int, bool, float]:
    """The images phase run until it finishes, at most RUNS times, `between` called after each failed run (a pause
    as an operator's or Prefect's retry delay, the registry mended); (each failed run's error, runs, finished,
    seconds)."""
    from ferry.audit import AuditFolder
    from ferry.phases.base import Reporter, open_phase
    from ferry.plan import load_plan

    failures: list[str] = []
    started = time.monotonic()
    for runs in range(1, RUNS + 1):
        phase = open_phase(load_plan(plan), "images")
        try:
            phase.run("run", AuditFolder(plan.parent / ".ferry" / "runs" / f"r{runs}"), Reporter())
            return failures, runs, True, time.monotonic() - started
        except FerryError as exc:  # a loud failure, resumed by the next run; anything else is a traceback
            failures.append(str(exc))
            between()
    return failures, RUNS, False, time.monotonic() - started


def held_whole(registry: Registry, tag: str) -> str | None:
    """The digest of ai/tool:tag, read straight from the target, once every blob it names is there with its bytes."""
    found = registry.manifest("ai/tool", tag)
    if found is None:
        return None
    for blob in [found.json()["config"], *found.json()["layers"]]:
        registry.blob("ai/tool", blob["digest"])  # RegistryError when missing or other bytes
    return found.digest


def assert_copied(root: Path, source: Server, target: Server, failures: list[str]) -> None:
    """Every image on the target whole at the source's digest, each failure one line, and whatever any run
    recorded (a failed one too) held at that digest; the published map names every image at its digest."""
    direct, original = (
        Registry(f"127.0.0.1:{target.port}", insecure=True),
        Registry(f"127.0.0.1:{source.port}", insecure=True),
    )
    assert all("\n" not in f for f in failures), "each failure is one line"
    for tag in TAGS:
        assert held_whole(direct, tag) == original.digest("ml/tool", tag), tag
    for run in (root / ".ferry" / "runs").glob("r*"):
        for record in read_journal(run)["records"]:
            assert held_whole(direct, record["target"].rpartition(":")[2]) == record["digest"], run
    last = max((root / ".ferry" / "runs").glob("r*"), key=lambda run: int(run.name[1:]))
    published = Path(json.loads((last / "images" / "published.json").read_text(encoding="utf-8"))["path"])
    images = json.loads(published.read_text(encoding="utf-8"))["images"]
    assert sorted(r["target"].rpartition(":")[2] for r in images) == TAGS
    assert {r["target"].rpartition(":")[2]: r["digest"] for r in images} == {
        t: original.digest("ml/tool", t) for t in TAGS
    }


@pytest.mark.parametrize(
    "case",
    [
        {"label": "5%", "rate": 0.05, "seed": 7},
        {"label": "20%", "rate": 0.20, "seed": 20},
        # Gone mid-copy, for 30 s: longer than skopeo's retries (1+2+4 s) and ferry's client's (0.5+1+2 s).
        {"label": "30 s outage", "outage_at": 30, "outage_s": 30},
    ],
    ids=["5pct", "20pct", "outage"],
)
def test_image_copies_through_a_faulty_registry_arrive_with_their_digests(
    source_registry: Server, tmp_path: Path, case: dict
) -> None:
    """skopeo (--retry-times) and ferry's registry client (its own retries) between two real registries, the
    target's requests reset, truncated, stalled or throttled at 5% and 20%, or the target away for 30 s: every
    image arrives with its digest, or the phase fails loudly (one line) and a later run finishes it; no run
    records an image the target does not hold at its digest."""
    from tests.support import start_registry

    target = start_registry()
    options = {k: v for k, v in case.items() if k != "label"}
    try:
        with FaultProxy(target.port, stall_s=REGISTRY_STALL_S, **options) as proxy:
            # One copy at a time: the seeded faults land on the same requests run after run.
            plan = images_plan(tmp_path, source_registry, proxy, 1)
            # After a failed run, wait as a retry delay would: past the outage within a few runs.
            failures, runs, done, seconds = copy_images(plan, lambda: time.sleep(10.0 if proxy.outage_at else 0.0))
        figures = {"case": f"registry {case['label']}", "requests": proxy.requests, "faults": dict(proxy.faults)}
        report({**figures, "outages": proxy.outages, "runs": runs, "failures": failures, "seconds": round(seconds, 2)})
        assert done, failures
        if proxy.outage_at:
            assert proxy.outages == 1 and failures, "the outage failed a run, loudly; a later one finished"
        else:
            assert set(proxy.faults) == {"reset", "truncate", "stall", "503"}, "every kind was injected"
        assert_copied(tmp_path, source_registry, target, failures)
    finally:
        target.stop()


# A registry that lies, and what ferry says about it (None: ferry is not misled, and the run finishes).
LIES = {
    # Every Docker-Content-Digest (and ETag) the target answers rewritten: ferry hashes the bytes it reads.
    "digest header": ({"lie": "checksum", "lie_path": "/v2/"}, None),
    # tool:0's config blob answered 201 and not kept, at every attempt: the registry refuses the manifest naming it.
    "blob dropped": ({"lie": "drop", "drop_status": 201, "lie_path": "{config}"}, "manifest blob unknown"),
    # A manifest PUT answered 201 and not kept: ferry reads the tag back.
    "manifest dropped": ({"lie": "drop", "drop_status": 201, "lie_path": "/manifests/"}, "is not on the target after"),
    # A manifest stored re-serialised (the registry answers with the new digest; skopeo does not compare it).
    "manifest rewritten": ({"lie": "reserialise", "lie_path": "/manifests/"}, "the copy's digest changed"),
    # A manifest read by digest cut short, Content-Length agreeing: its bytes are not those of the digest.
    "manifest cut short": ({"lie": "short", "lie_path": "/manifests/sha256:"}, "the registry answered other bytes"),
}


@pytest.mark.parametrize("lie", list(LIES))
def test_a_lying_registry_is_caught_and_the_next_run_copies_again(
    source_registry: Server, tmp_path: Path, lie: str
) -> None:
    """A target registry that drops, rewrites or cuts short what it is sent, or rewrites the digests it reports:
    the phase fails loudly (one line naming the lie) and records nothing it was lied about, and once the registry
    is mended the next run copies again and finishes; or the lie does not mislead it at all."""
    from tests.support import start_registry

    options, said = LIES[lie]
    config = Registry(f"127.0.0.1:{source_registry.port}", insecure=True).manifest("ml/tool", "0").json()["config"]
    target = start_registry()
    try:
        with FaultProxy(
            target.port, **{**options, "lie_path": options["lie_path"].format(config=config["digest"][7:])}
        ) as proxy:
            plan = images_plan(tmp_path, source_registry, proxy, 2)
            failures, runs, done, seconds = copy_images(plan, lambda: setattr(proxy, "lie", None))
        report({"case": f"registry lies: {lie}", "requests": proxy.requests, "lies": proxy.lies, "runs": runs,
                "failures": failures, "seconds": round(seconds, 2)})  # fmt: skip
        assert proxy.lies > 0 and done, failures
        if said is None:
            assert runs == 1
        else:
            assert runs == 2 and said in failures[0], failures
        assert_copied(tmp_path, source_registry, target, failures)
    finally:
        target.stop()
