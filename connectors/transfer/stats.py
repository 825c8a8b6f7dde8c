"""What a transfer has done: counters, per-object latencies, the failures kept for the report."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from connectors.transfer.adopt import PROOFS
from connectors.transfer.source_checksum import KINDS, NOT_HELD

_FAILURES_KEPT = 100


class LatencyHistogram:
    """Per-object latencies in log-spaced buckets: flat memory whatever the object count."""

    _RATIO = 1.05
    _FLOOR = 1e-4

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0

    def add(self, seconds: float) -> None:
        index = 0 if seconds <= self._FLOOR else int(math.log(seconds / self._FLOOR, self._RATIO)) + 1
        self._buckets[index] = self._buckets.get(index, 0) + 1
        self.count += 1

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        rank = q * (self.count - 1)
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen > rank:
                return self._FLOOR * self._RATIO**index
        return None


@dataclass
class Stats:
    """What a transfer has done so far; read by the progress display while it runs."""

    objects_listed: int = 0
    bytes_listed: int = 0
    to_copy: int = 0
    bytes_to_copy: int = 0
    copied: int = 0
    bytes_copied: int = 0
    # Not copied: the target already held them (adopted ones included).
    skipped: int = 0
    bytes_skipped: int = 0
    # Of those, objects another tool wrote that this run proved equal (no record of ferry's), by proof.
    adopted: int = 0
    bytes_adopted: int = 0
    adopted_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROOFS, 0))
    # Objects copied whose bytes, as ferry read them, were held to what the source holds of them, by kind.
    held_to_source: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    # Objects copied whose source holds a checksum that the bytes ferry read could not be held to, by why not.
    not_held_to_source: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NOT_HELD, 0))
    deleted: int = 0
    failed: int = 0
    # Live source (TransferSettings.live): objects that changed while they were copied, left for the next run.
    changed_during_copy: int = 0
    rejected: int = 0
    recopied_after_mismatch: int = 0
    resumed_uploads: int = 0
    parts_resumed: int = 0
    # Of those, parts the state had not recorded that the store's list of the upload's parts proved (route.adopt_part).
    parts_reconciled: int = 0
    retries: int = 0
    # Where the bytes went: through this machine, or copied by the stores themselves.
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_server_side: int = 0
    bytes_url_pulled: int = 0
    url_copy: str = "not attempted"
    # The requests the run sent to each end ("source", "target"), by class, as the connectors counted them, retries
    # included (None for a connector that does not count them); set when the run ends.
    requests: dict[str, dict[str, int] | None] = field(default_factory=dict)
    # How the target's writes were checked on receipt, per endpoint (Connector.receipt_check); set when the run ends.
    receipt_check: dict[str, dict] = field(default_factory=dict)
    # Stopped before the end (Ctrl-C, SIGTERM, a cancelled run): what is recorded is kept for the next run.
    interrupted: bool = False
    started: float = field(default_factory=time.monotonic)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        with self.lock:
            self._bump(amounts)

    def finished(self, started: float, **amounts: int) -> None:
        """One object copied: its latency since started and its counters, under one lock."""
        with self.lock:
            self.latency.add(time.monotonic() - started)
            self._bump({"copied": 1, **amounts})

    def adopt(self, proof: str, size: int) -> None:
        """One object adopted (proven equal, not copied) by proof."""
        with self.lock:
            self._bump({"skipped": 1, "bytes_skipped": size, "adopted": 1, "bytes_adopted": size})
            self.adopted_by[proof] += 1

    def held(self, kind: str | None, why_not: str | None = None) -> None:
        """One object copied held to the source's checksum of kind (None: to none; why_not: though it holds one)."""
        if kind is not None or why_not is not None:
            with self.lock:
                if kind is not None:
                    self.held_to_source[kind] += 1
                else:
                    self.not_held_to_source[why_not] += 1

    def add_failure(self, message: str, *, rejected: bool) -> None:
        """One object failed: counted, and its message kept for the report (the first ones only)."""
        with self.lock:
            self.failed += 1
            self.rejected += int(rejected)
            if len(self.failures) < _FAILURES_KEPT:
                self.failures.append(message)

    def _bump(self, amounts: dict[str, int]) -> None:
        for name, amount in amounts.items():
            setattr(self, name, getattr(self, name) + amount)

    @property
    def bytes_moved(self) -> int:
        """Bytes landed in the target so far, parts of unfinished objects included (for progress)."""
        return self.bytes_written + self.bytes_server_side + self.bytes_url_pulled

    def summary(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        p50, p99 = self.latency.quantile(0.5), self.latency.quantile(0.99)
        return {
            "objects": {
                "listed": self.objects_listed,
                "copied": self.copied,
                "skipped": self.skipped,
                "adopted": self.adopted,
                "deleted": self.deleted,
                "failed": self.failed,
                "changed_during_copy": self.changed_during_copy,
                "rejected": self.rejected,
                "recopied_after_mismatch": self.recopied_after_mismatch,
            },
            "bytes": {
                "listed": self.bytes_listed,
                "copied": self.bytes_copied,
                "skipped": self.bytes_skipped,
                "adopted": self.bytes_adopted,
                "read_through_ferry": self.bytes_read,
                "written_through_ferry": self.bytes_written,
                "server_side": self.bytes_server_side,
                "pulled_by_target_from_url": self.bytes_url_pulled,
            },
            "adopted_by": dict(self.adopted_by),
            "held_to_source": dict(self.held_to_source),
            "not_held_to_source": dict(self.not_held_to_source),
            "multipart": {
                "resumed_uploads": self.resumed_uploads,
                "parts_resumed": self.parts_resumed,
                "parts_reconciled": self.parts_reconciled,
            },
            "retries": self.retries,
            "requests": dict(self.requests),
            "receipt_check": dict(self.receipt_check),
            "url_copy": self.url_copy,
            "interrupted": self.interrupted,
            "duration_s": round(elapsed, 3),
            "throughput_mb_s": round(self.bytes_copied / elapsed / 1e6, 2) if elapsed > 0 else None,
            "objects_per_s": round(self.copied / elapsed, 1) if elapsed > 0 else None,
            "latency_s": {"p50": None if p50 is None else round(p50, 4), "p99": None if p99 is None else round(p99, 4)},
            "failures": list(self.failures),
        }
