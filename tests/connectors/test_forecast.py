"""A dry run's forecast against the run after it, on moto: the same objects and bytes, and the same requests by class
as the engine's own counters count them (less the receipt probe's, which no estimate counts), for copies the stores
make and copies streamed through ferry."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from connectors.transfer import TransferSettings
from ferry.profiles import Profile
from ferry.sync import run_sync
from tests.connectors.test_s3 import new_bucket

SETTINGS = TransferSettings(
    threads=4, part_size=256 * 1024, multipart_threshold=512 * 1024, copy_threshold=512 * 1024, delete=True
)


def without_receipt_probe(summary: dict) -> dict[str, dict[str, int] | None]:
    """A run's requests (its summary's) less those its target's receipt probe sent (summary.receipt_check): once per
    endpoint and process, at the first write through ferry, and in no estimate."""
    sent = {side: dict(requests) if requests is not None else None for side, requests in summary["requests"].items()}
    for check in summary["receipt_check"].values():
        for kind, n in check.get("probe_requests", {}).items():
            sent["target"][kind] -= n
    return {side: {k: n for k, n in requests.items() if n} if requests else requests for side, requests in sent.items()}


def _fill(moto_env, source: str, target: str) -> None:
    s3 = moto_env.client("s3")
    for n in range(7):
        s3.put_object(Bucket=source, Key=f"p/small-{n}", Body=os.urandom(100 + n))
    s3.put_object(Bucket=source, Key="p/large", Body=os.urandom(1300 * 1024))  # 6 parts of 256 KiB
    s3.put_object(Bucket=source, Key="p/changed", Body=b"new bytes")
    s3.put_object(Bucket=target, Key="p/changed", Body=b"old")  # a size that differs: copied again
    s3.put_object(Bucket=target, Key="p/stray", Body=b"not in the source")  # deleted (delete=True)


@pytest.mark.parametrize("route", ["server", "stream"])
def test_a_dry_runs_forecast_is_what_the_run_then_does(moto_env, tmp_path, route) -> None:
    source, target = new_bucket(moto_env.endpoint), new_bucket(moto_env.endpoint)
    _fill(moto_env, source, target)
    # Another name for the same server: another store to the engine, so that bytes travel through ferry.
    other = moto_env.endpoint.replace("127.0.0.1", "localhost")
    profiles = {"other": Profile(type="s3", endpoint_url=other, min_part_size=256 * 1024)}
    src_url = f"s3://{source}/p"
    dst_url = f"s3://{target}/p" if route == "server" else f"other://{target}/p"
    if route == "server":  # moto's 256 KiB parts, for the server-side part copies too
        profiles = {"s3": Profile(type="s3", endpoint_url=moto_env.endpoint, min_part_size=256 * 1024)}

    estimate = run_sync(
        src_url, dst_url, replace(SETTINGS, dry_run=True), profiles=profiles, state_dir=tmp_path / "state"
    )
    run = run_sync(src_url, dst_url, SETTINGS, profiles=profiles, state_dir=tmp_path / "state")

    assert run.stats.failed == 0 and run.stats.retries == 0
    forecast = estimate.forecast
    assert (
        (forecast.copies, forecast.bytes)
        == (run.stats.copied, run.stats.bytes_copied)
        == (9, 7 * 100 + 21 + 9 + 1300 * 1024)
    )
    assert (forecast.recopies, forecast.deletes) == (1, run.stats.deleted) == (1, 1)
    assert (forecast.multipart_objects, forecast.parts) == (1, 6)
    assert forecast.by_route[route] == forecast.bytes
    # Up to 64 KiB, and 1 to 16 MiB.
    assert forecast.sizes == {0: [8, 7 * 100 + 21 + 9], 2: [1, 1300 * 1024]}
    # The engine's own counters of the run, and the estimate of them: equal, class by class, on both ends.
    sent = without_receipt_probe(run.stats.summary())
    assert estimate.requests == sent
    assert sent["target"]["MULTIPART"] == 2
    copies = "COPY" if route == "server" else "PUT"
    assert sent["target"][copies] == 8 + 6


def test_a_store_that_does_not_count_its_requests_says_so(moto_env, tmp_path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_bytes(b"a")
    target = new_bucket(moto_env.endpoint)
    estimate = run_sync(
        str(tmp_path / "src"), f"s3://{target}/p", replace(SETTINGS, dry_run=True), profiles={}, state_dir=tmp_path
    )
    assert estimate.requests["source"] is None  # a local folder: no requests, none counted
    assert estimate.requests["target"]["PUT"] == 1


def test_a_sample_bounds_only_a_dry_run() -> None:
    with pytest.raises(ValueError, match="sample bounds a dry run"):
        TransferSettings(sample=3)
    assert TransferSettings(sample=3, dry_run=True).sample == 3


def test_the_engines_counters_are_every_request_on_the_wire(moto_env, tmp_path) -> None:
    """A pass-through proxy in front of the target counts the HTTP requests the run sent it: the engine's counters
    (and the estimate before them) miss none."""
    from tests.faults.proxy import FaultProxy

    source, target = new_bucket(moto_env.endpoint), new_bucket(moto_env.endpoint)
    _fill(moto_env, source, target)
    with FaultProxy(moto_env.port) as proxy:
        profiles = {"via": Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 * 1024)}
        src_url, dst_url = f"s3://{source}/p", f"via://{target}/p"
        estimate = run_sync(
            src_url, dst_url, replace(SETTINGS, dry_run=True), profiles=profiles, state_dir=tmp_path / "state"
        )
        seen = proxy.requests
        run = run_sync(src_url, dst_url, SETTINGS, profiles=profiles, state_dir=tmp_path / "state", verify=False)
        on_the_wire = proxy.requests - seen
    assert proxy.injected == 0 and run.stats.retries == 0
    assert sum(run.stats.requests["target"].values()) == on_the_wire
    assert without_receipt_probe(run.stats.summary())["target"] == estimate.requests["target"]


def test_an_object_no_part_size_can_carry_is_said_not_counted(tmp_path) -> None:
    # 60 TiB: over what 10,000 parts of at most 5 GiB hold; the run would fail it, sending nothing for it.
    estimate = run_sync(
        "synthetic://1x60T+2x1K", "null://too-large", TransferSettings(dry_run=True), profiles={}, state_dir=tmp_path
    )
    assert (estimate.forecast.too_large, estimate.forecast.copies, estimate.forecast.parts) == (1, 2, 0)
