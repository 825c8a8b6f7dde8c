"""Faults at a rate between ferry and the real local stores: connections reset, answers truncated or stalled,
503 SlowDown, at 5% and 20% of requests (seeded: a failure replays), and the endpoint taken away for 30 s once.

Each sync finishes, or fails loudly and the next run finishes it, with every object verified against the source
(read straight from the store, not through the proxy), nothing duplicated and no upload left open. The figures
(faults, retries, bytes sent against the fault-free run, time) are printed (`pytest -s`) for the note.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from azure.storage.blob import BlobServiceClient

from connectors.transfer import TransferSettings
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
                k[2:]: hashlib.md5(client.get_object(Bucket=place, Key=k)["Body"].read(), usedforsecurity=False)
                .hexdigest()
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


def test_image_copies_through_a_faulty_registry_arrive_with_their_digests(tmp_path: Path) -> None:
    """skopeo (--retry-times) and ferry's registry client (its own retries) between two real registries, the
    target's requests reset, truncated or throttled at 5%: every image arrives with its digest, or the
    phase fails loudly and the next run finishes it."""
    from ferry.audit import AuditFolder
    from ferry.errors import FerryError
    from ferry.oci import Registry
    from ferry.phases.base import Reporter, open_phase
    from ferry.plan import load_plan
    from tests.support import buildah, busybox_image, start_registry

    source, target = start_registry(), start_registry()
    try:
        busybox_image(tmp_path / "buildah", "tool", "amd64", [])
        src = f"127.0.0.1:{source.port}"
        tags = [f"ml/tool:{i}" for i in range(4)]
        for tag in tags:
            buildah(tmp_path / "buildah", "push", "--tls-verify=false", "tool", f"docker://{src}/{tag}")
        with FaultProxy(target.port, rate=0.05, seed=7, kinds=("reset", "truncate", "503")) as proxy:
            (tmp_path / "src").mkdir()
            plan = tmp_path / "migration.yaml"
            plan.write_text(
                f"name: faulty-registry\nsource: {{storage: ./src, registry: {src}/ml}}\n"
                f"target: {{storage: ./dst, registry: 127.0.0.1:{proxy.port}/ai}}\n"
                'phases:\n  images: {copy: ["tool:*"], parallel: 2}\n'
            )
            failures, runs, done = [], 0, False
            for runs in range(1, 4):
                phase = open_phase(load_plan(plan), "images")
                try:
                    phase.run("run", AuditFolder(tmp_path / ".ferry" / "runs" / f"r{runs}"), Reporter())
                    done = True
                    break
                except FerryError as exc:  # a loud failure, resumed by the next run
                    failures.append(str(exc))
            print("FAULT-FIGURES " + json.dumps({"case": "registry 5%", "requests": proxy.requests,
                                                 "faults": dict(proxy.faults), "runs": runs, "failed": failures}))
        assert sum(proxy.faults.values()) > 0 and done, failures
        for i in range(4):
            assert Registry(f"127.0.0.1:{target.port}", insecure=True).digest("ai/tool", str(i)) == Registry(
                src, insecure=True
            ).digest("ml/tool", str(i))
    finally:
        source.stop()
        target.stop()
