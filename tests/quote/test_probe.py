"""The probe's sample and bounds, and the duration from what it measured (figures given, nothing timed here)."""

from __future__ import annotations

import pytest

from connectors.transfer import TransferSettings
from ferry.quote.probe import MAX_THREADS, Probe, Rate, durations, plan_probe, run_probe


def test_the_sample_is_bounded_capped_said_first_and_removed_after() -> None:
    source = "synthetic://20x100+4x3000"  # keys 100/00..100/19, 3000/0..3000/3
    settings = TransferSettings(
        threads=128, bwlimit=10**9, multipart_threshold=1000, part_size=1000, exclude=("100/1*",)
    )
    plan = plan_probe(source, "null://probe-test/p", {}, settings, seconds=30, max_bytes=8000)
    assert plan.settings.threads == MAX_THREADS and plan.settings.bwlimit == 10**9
    # A quarter of the bytes for objects that go whole (timed by count), the rest for those in parts; the plan's
    # excludes hold.
    assert [i.key for i in plan.whole] == [f"100/0{n}" for n in range(10)]
    assert [i.key for i in plan.in_parts] == ["3000/0", "3000/1"]
    said = plan.describe()
    assert said.startswith(f"probe: reads at most 12 object(s), 7,000 bytes, of {source} and writes them under")
    assert plan.scratch.startswith("null://probe-test/p/.ferry-probe-") and "(removed afterwards)" in said
    assert "at 32 threads, bwlimit 1,000,000,000 bytes/s" in said

    probe = run_probe(plan, {})
    assert (probe.objects, probe.problems) == (12, [])
    # (A null target keeps its objects per connector: the cleanup's own one sees none; moto's test sees them go.)
    assert probe.cleanup.endswith(f"under {plan.scratch}")
    assert probe.objects_per_s.done == 10 and probe.bytes_per_s.done == 6000


def _probe(objects: Rate, size: Rate, cpu_s: float = 1.0) -> Probe:
    return Probe(objects_per_s=objects, bytes_per_s=size, seconds=10.0, cpu_s=cpu_s)


def test_the_duration_adds_the_listing_the_whole_objects_and_the_bytes_in_parts() -> None:
    objects = Rate(done=100, seconds=10, per_second=[10.0] * 9 + [2.0])
    size = Rate(done=1e9, seconds=10, per_second=[1e8] * 10)
    timing = durations(_probe(objects, size), 1000, 30 * 10**9, 5.0, TransferSettings())
    assert timing["duration_p50_s"] == pytest.approx(5 + 1000 / 10 + 300, abs=0.1)
    assert timing["duration_p90_s"] > timing["duration_p50_s"], "the slow seconds make the P90"
    assert timing["duration_bound"] == "the measured bandwidth"
    objects_bound = durations(_probe(objects, size), 100_000, 10**9, 5.0, TransferSettings())
    assert objects_bound["duration_bound"] == "the request rate"


def test_a_duration_without_its_rate_is_not_measured_never_guessed() -> None:
    timing = durations(_probe(Rate(done=5, seconds=1), Rate()), 10, 10**9, 1.0, TransferSettings())
    assert timing["duration_p50_s"] is None and timing["duration_p90_s"] is None
    assert timing["duration_bound"].startswith("not measured: the probe copied no object that goes in parts")
    assert durations(None, 10, 10, 1.0, TransferSettings())["duration_bound"] == "not measured (--no-probe)"


def test_the_bound_names_the_bandwidth_limit_or_the_cpu() -> None:
    size = Rate(done=1e7, seconds=10, per_second=[1e6] * 10)
    limited = durations(_probe(Rate(), size), 0, 10**9, 0.0, TransferSettings(bwlimit=1_000_000))
    assert limited["duration_bound"] == "bwlimit (1,000,000 bytes/s)"
    busy = durations(_probe(Rate(), size, cpu_s=10.0 * 4096), 0, 10**9, 0.0, TransferSettings())
    assert busy["duration_bound"].startswith("the client's CPU")
