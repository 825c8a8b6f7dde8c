"""The throughput probe: a bounded copy of real source objects into a scratch prefix of the target, through the
transfer engine at the plan's settings (its concurrency capped, its bandwidth limit kept), removed afterwards
whatever happened; and the data phase's duration, P50 and P90, from what it measured.

Objects that go whole are timed apart from those that go in parts: the first give the request rate (objects/s),
the second the bandwidth (bytes/s). Each rate is read every second of its copy, so the spread of those seconds
gives the P90 (the tenth-percentile second's rate) beside the P50 (the copy's own rate).
"""

from __future__ import annotations

import glob
import os
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from connectors.base import ARCHIVE_CLASSES, ObjectInfo
from connectors.registry import open_connector
from connectors.transfer import Stats, Transfer, TransferSettings, TransferState, remove_all
from ferry.errors import FerryError
from ferry.profiles import Profile
from ferry.quote.estimate import SIDES, Requests, plus

# The probe's concurrency at most, whatever the plan's (the bound: a probe is not the run).
MAX_THREADS = 32
# Keys the probe reads of the source's listing at most to pick its sample.
SCAN = 10_000
# Of the probe's byte budget, what the objects that go whole may take (they are timed by count, not bytes).
_WHOLE_SHARE = 0.25


@dataclass(frozen=True)
class ProbePlan:
    """What the probe will read and where it will write, said before it starts."""

    source: str
    scratch: str
    whole: tuple[ObjectInfo, ...]
    in_parts: tuple[ObjectInfo, ...]
    seconds: float
    settings: TransferSettings
    # What choosing the sample sent each end (its listing of the source's first keys).
    requests: dict[str, Requests] = field(default_factory=lambda: dict.fromkeys(SIDES, {}))

    @property
    def bytes(self) -> int:
        return sum(info.size for info in (*self.whole, *self.in_parts))

    def describe(self) -> str:
        limit = f", bwlimit {self.settings.bwlimit:,} bytes/s" if self.settings.bwlimit else ""
        return (
            f"probe: reads at most {len(self.whole) + len(self.in_parts)} object(s), {self.bytes:,} bytes, of "
            f"{self.source} and writes them under {self.scratch} (removed afterwards), for at most "
            f"{self.seconds:g} s at {self.settings.threads} threads{limit}"
        )


@dataclass
class Rate:
    """One copy's rate: what it did over the time it took, and in each whole second of it (None: nothing timed)."""

    done: float = 0.0
    seconds: float = 0.0
    per_second: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float | None:
        return self.done / self.seconds if self.seconds > 0 and self.done > 0 else None

    @property
    def p10(self) -> float | None:
        """The rate of the slow seconds: the tenth percentile of the seconds' rates, or the mean one."""
        if self.p50 is None:
            return None
        if len(self.per_second) < 2:
            return self.p50
        slow = statistics.quantiles(self.per_second, n=10)[0]
        return slow if slow > 0 else min(r for r in self.per_second if r > 0)


@dataclass
class Probe:
    """What the probe measured: objects/s of whole copies, bytes/s of copies in parts, the client's CPU."""

    objects_per_s: Rate = field(default_factory=Rate)
    bytes_per_s: Rate = field(default_factory=Rate)
    objects: int = 0
    bytes: int = 0
    bytes_leaving: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    cleanup: str = ""
    problems: list[str] = field(default_factory=list)
    # The probe's own requests to each end, by class (its sample's listing, its copies, its cleanup), counted apart
    # from the run's; None where an end does not count them.
    requests: dict[str, Requests] = field(default_factory=lambda: dict.fromkeys(SIDES, {}))

    def sent(self, requests: dict[str, Requests]) -> None:
        """Add requests sent to the ends requests names to the probe's own."""
        for side, sent in requests.items():
            self.requests[side] = plus(self.requests[side], sent)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "bytes": self.bytes,
            "bytes_leaving_source": self.bytes_leaving,
            "seconds": round(self.seconds, 3),
            "cpu_s": round(self.cpu_s, 3),
            "objects_per_s": _rounded(self.objects_per_s.p50),
            "objects_per_s_p10": _rounded(self.objects_per_s.p10),
            "bytes_per_s": _rounded(self.bytes_per_s.p50),
            "bytes_per_s_p10": _rounded(self.bytes_per_s.p10),
            "cleanup": self.cleanup,
            "problems": list(self.problems),
            "requests": dict(self.requests),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def plan_probe(
    source_url: str,
    target_url: str,
    profiles: Mapping[str, Profile],
    settings: TransferSettings,
    *,
    seconds: float,
    max_bytes: int,
) -> ProbePlan:
    """The sample the probe copies: of the first SCAN keys the plan selects, whole objects up to a quarter of
    max_bytes and objects in parts up to the rest, each as the route would copy it."""
    probe_settings = replace(settings, threads=min(settings.threads, MAX_THREADS), delete=False, dry_run=False)
    scratch = f"{target_url.rstrip('/')}/.ferry-probe-{secrets.token_hex(4)}"
    source, target = open_connector(source_url, profiles), open_connector(scratch, profiles)
    whole: list[ObjectInfo] = []
    in_parts: list[ObjectInfo] = []
    try:
        with tempfile.TemporaryDirectory(prefix="ferry-probe-") as state_dir:
            state = TransferState(Path(state_dir), source.url, target.url, "")
            try:
                route = Transfer(source, target, state, probe_settings)
            finally:
                state.close()
        budget = {"whole": max_bytes * _WHOLE_SHARE, "parts": max_bytes * (1 - _WHOLE_SHARE)}
        for scanned, info in enumerate(source.list()):
            if scanned >= SCAN or min(budget.values()) <= 0:
                break
            if not settings.selects(info.key) or info.size == 0 or info.storage_class in ARCHIVE_CLASSES:
                continue  # an archived object cannot be read before a restore
            kind, chosen = ("parts", in_parts) if route.in_parts(info.size) else ("whole", whole)
            if info.size <= budget[kind]:
                chosen.append(info)
                budget[kind] -= info.size
        sent = {"source": source.requests_sent(), "target": target.requests_sent()}
    finally:
        source.close()
        target.close()
    return ProbePlan(source_url, scratch, tuple(whole), tuple(in_parts), seconds, probe_settings, sent)


def run_probe(plan: ProbePlan, profiles: Mapping[str, Profile]) -> Probe:
    """Copy the plan's sample into its scratch prefix (whole objects, then those in parts, each for at most half
    the time), then delete everything under the scratch prefix, whatever failed."""
    probe = Probe()
    probe.sent(plan.requests)
    started, cpu = time.perf_counter(), time.process_time()
    halves = [(plan.whole, probe.objects_per_s, "copied"), (plan.in_parts, probe.bytes_per_s, "bytes_moved")]
    try:
        for sample, rate, counter in halves:
            if sample:
                stats = _copy(plan, profiles, sample, plan.seconds / 2, rate, counter)
                probe.objects += stats.copied
                probe.bytes += stats.bytes_moved
                probe.bytes_leaving += stats.bytes_read + stats.bytes_url_pulled
                probe.problems += stats.failures[:5]
                probe.sent(stats.requests)
    except FerryError as exc:
        probe.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        probe.seconds = time.perf_counter() - started
        probe.cpu_s = time.process_time() - cpu
        target = open_connector(plan.scratch, profiles)
        try:
            probe.cleanup = remove_all(target)
        except FerryError as exc:
            probe.problems.append(f"cleanup of {plan.scratch} failed: {exc}")
        finally:
            probe.sent({"target": target.requests_sent()})
            target.close()
    return probe


def _copy(
    plan: ProbePlan,
    profiles: Mapping[str, Profile],
    sample: tuple[ObjectInfo, ...],
    seconds: float,
    rate: Rate,
    counter: str,
) -> Stats:
    """Copy sample (exactly those keys) for at most seconds: rate gets stats' counter at the end over the copy's
    time (from the first copy the diff decided: the listing and the ends' checks are the estimate's listing_s), and
    what it gained in each whole second of it."""
    settings = replace(plan.settings, include=tuple(glob.escape(info.key) for info in sample), end_at=sample[-1].key)
    stop, finished = threading.Event(), threading.Event()
    source, target = open_connector(plan.source, profiles), open_connector(plan.scratch, profiles)
    with tempfile.TemporaryDirectory(prefix="ferry-probe-") as state_dir:
        state = TransferState(Path(state_dir), source.url, target.url, "")
        first: list[float] = []
        transfer = Transfer(
            source, target, state, settings, stop=stop, on_action=lambda _: first or first.append(time.perf_counter())
        )
        watch = threading.Thread(target=_follow, args=(transfer.stats, counter, rate, seconds, stop, finished))
        started = time.perf_counter()
        watch.start()
        try:
            stats = transfer.run()
        finally:
            rate.seconds = time.perf_counter() - (first[0] if first else started)
            finished.set()
            watch.join()
            state.close()
            source.close()
            target.close()
    rate.done = float(getattr(stats, counter))
    return stats


def _follow(stats: Stats, counter: str, rate: Rate, seconds: float, stop: threading.Event, finished: threading.Event):
    """What stats' counter gains in each whole second until the copy finishes; stop it after seconds."""
    deadline, last = time.monotonic() + seconds, 0.0
    while not finished.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            stop.set()
            return
        value = float(getattr(stats, counter))
        rate.per_second.append(value - last)
        last = value


def durations(
    probe: Probe | None, whole_objects: int, part_bytes: int, listing_s: float, settings: TransferSettings
) -> dict[str, Any]:
    """The data phase's duration, P50 and P90, with what bounds it: the listing's own time (as the estimate's dry
    run took it), the objects that go whole at the measured request rate, the bytes in parts at the measured
    bandwidth. A term with work and no measured rate makes the duration not measured (None, and why)."""
    if probe is None:
        return {"duration_p50_s": None, "duration_p90_s": None, "duration_bound": "not measured (--no-probe)"}
    terms: dict[str, tuple[float, float]] = {}
    for what, work, rate in (
        ("the request rate", whole_objects, probe.objects_per_s),
        ("the measured bandwidth", part_bytes, probe.bytes_per_s),
    ):
        if work == 0:
            continue
        if rate.p50 is None or rate.p10 is None:
            kind = "object that goes whole" if what == "the request rate" else "object that goes in parts"
            why = f"not measured: the probe copied no {kind} (none in the first {SCAN} keys, or the time ran out)"
            return {"duration_p50_s": None, "duration_p90_s": None, "duration_bound": why}
        terms[what] = (work / rate.p50, work / rate.p10)
    p50 = listing_s + sum(t[0] for t in terms.values())
    p90 = listing_s + sum(t[1] for t in terms.values())
    bound = max(terms, key=lambda what: terms[what][0]) if terms else "the listing"
    cores = os.cpu_count() or 1
    if probe.seconds > 0 and probe.cpu_s / probe.seconds >= 0.85 * cores:
        bound = f"the client's CPU (the probe used {probe.cpu_s / probe.seconds:.1f} of {cores} cores)"
    elif (
        bound == "the measured bandwidth"
        and settings.bwlimit
        and (probe.bytes_per_s.p50 or 0) >= 0.9 * settings.bwlimit
    ):
        bound = f"bwlimit ({settings.bwlimit:,} bytes/s)"
    return {"duration_p50_s": round(p50, 2), "duration_p90_s": round(p90, 2), "duration_bound": bound}
