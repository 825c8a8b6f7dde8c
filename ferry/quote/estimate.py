"""The data figures of a quote: the dry runs of every shard merged, as JSON, CSV rows, and a cached copy."""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.base import REQUEST_CLASSES
from connectors.transfer import SIZE_EDGES, Forecast
from ferry.files import write_atomic

Requests = dict[str, int] | None
SIDES = ("source", "target")
# Said wherever request counts are shown: what they are exact for.
REQUESTS_NOTE = (
    "exact for a run without faults, as the engine counts them (retries excluded: each one sends its request again); "
    "the data gate's listings after the copy are the class line gate_requests, apart"
)


def gate_pages(listed: int | None, before: int, after: int, page: int | None) -> int | None:
    """The listing requests (pages) the data gate's listing of one end sends after the run: as many as the dry
    run's listing of it sent (listed; None: not counted), a page more or fewer as the run adds or removes objects
    (before, after: the objects there; page: the keys one listing request returns, None where not said)."""
    if listed is None or page is None:
        return None
    return max(1, listed + math.ceil(after / page) - math.ceil(before / page))


def plus(a: Requests, b: Requests) -> Requests:
    """Two counts by class added (None, not counted, wins)."""
    if a is None or b is None:
        return None
    return {kind: a.get(kind, 0) + b.get(kind, 0) for kind in REQUEST_CLASSES if a.get(kind, 0) + b.get(kind, 0)}


@dataclass
class DataEstimate:
    """What data_sync would copy, copy again and delete, and the requests a run would send each end, from a dry run
    of every shard (the run's own listing, diff and route decisions)."""

    forecast: Forecast = field(default_factory=Forecast)
    # The requests the run would send each end, by class; None where that end does not count them.
    requests: dict[str, Requests] = field(default_factory=lambda: dict.fromkeys(SIDES, {}))
    # What the estimate itself sent (its listings, checks and proofs).
    own_requests: dict[str, Requests] = field(default_factory=lambda: dict.fromkeys(SIDES, {}))
    # What the data gate's listing of each end after the run sends (the data_sync gate lists both again).
    gate_requests: dict[str, Requests] = field(default_factory=lambda: dict.fromkeys(SIDES, {}))
    gate_note: str = "the data gate lists both ends again after the run: once per shard, as the run listed them"
    # Where the source's listing came from: the source itself, or an inventory report (and when it was written).
    listing: dict[str, Any] = field(default_factory=lambda: {"source": "listed", "inventory": None, "age_s": None})
    objects_listed: int = 0
    bytes_listed: int = 0
    shards: int = 0
    # A bounded estimate: only the first this many keys of each shard, in key order (None: every key).
    sample: int | None = None
    # Seconds the dry runs took, one shard after another: the listing and diff a run does before it copies.
    listing_s: float = 0.0
    taken_at: float = field(default_factory=time.time)
    # Of the Intelligent-Tiering copies, how many the estimate asked where they sit (the first TIERING_KEYS), and
    # those in an archive tier by tier ("INTELLIGENT_TIERING/ARCHIVE_ACCESS"): [objects, bytes].
    tiering_asked: int = 0
    archive_tiers: dict[str, list[int]] = field(default_factory=dict)
    # Who pays for reading the source: its bucket says (None: not told), its profile's requester_pays.
    requester_pays: dict[str, bool | None] = field(default_factory=lambda: {"bucket": None, "profile": False})

    def add(self, forecast: Forecast, requests: dict[str, Requests], own: dict[str, Requests], listed: int,
            listed_bytes: int, seconds: float, gate: dict[str, Requests]) -> None:  # fmt: skip
        """Fold one shard's dry run in: its forecast, the run's requests, the dry run's own, what it listed, how
        long it took, and what the gate's listings after the run send."""
        self.listing_s += seconds
        self.forecast.add(forecast)
        for side in SIDES:
            self.requests[side] = plus(self.requests[side], requests.get(side))
            self.own_requests[side] = plus(self.own_requests[side], own.get(side))
            self.gate_requests[side] = plus(self.gate_requests[side], gate.get(side))
        self.objects_listed += listed
        self.bytes_listed += listed_bytes
        self.shards += 1

    def histogram(self) -> list[dict[str, Any]]:
        """The copies by size: one row per bucket (`up_to` its largest size in bytes, None for the last)."""
        rows = []
        for index, edge in enumerate((*SIZE_EDGES, None)):
            objects, size = self.forecast.sizes.get(index, (0, 0))
            rows.append({"up_to": edge, "objects": objects, "bytes": size})
        return rows

    def figures(self) -> dict[str, Any]:
        """The estimate as JSON values."""
        f = self.forecast
        return {
            "estimated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.taken_at)),
            "shards": self.shards,
            "sample": self.sample,
            "sample_note": None
            if self.sample is None
            else (
                f"a bounded estimate: the first {self.sample:,} keys of each shard in key order, not the whole "
                "source; its figures (the duration too) are those keys', not scaled"
            ),
            "listing_s": round(self.listing_s, 3),
            "objects_listed": self.objects_listed,
            "bytes_listed": self.bytes_listed,
            **f.to_dict(),
            "size_histogram": self.histogram(),
            "requests": dict(self.requests),
            "requests_note": REQUESTS_NOTE,
            "gate_requests": dict(self.gate_requests),
            "gate_requests_note": self.gate_note,
            "estimate_requests": dict(self.own_requests),
            "intelligent_tiering": {
                "asked": self.tiering_asked,
                "sample_note": None
                if self.tiering_asked == f.tiering
                else (
                    f"of {f.tiering:,} Intelligent-Tiering objects to copy, the first {self.tiering_asked:,} in key "
                    "order were asked (HEAD) which tier they sit in: the archive tiers' figures are theirs, at least"
                ),
                "archive_tiers": {
                    tier: {"objects": n, "bytes": size} for tier, (n, size) in sorted(self.archive_tiers.items())
                },
            },
            "source_listing": dict(self.listing),
            "source_requester_pays": dict(self.requester_pays),
        }


def csv_text(figures: dict[str, Any]) -> str:
    """The figures as CSV rows (figure, value, unit), nested ones named by their path (`requests.source.GET`); a
    figure that was not measured or priced says why in its value, never 0."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("figure", "value", "unit"))

    def rows(name: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                rows(f"{name}.{key}" if name else key, inner)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                rows(f"{name}.{index}", inner)
        else:
            writer.writerow((name, _missing(name) if value is None else value, _unit(name, figures)))

    rows("", figures)
    return out.getvalue()


def _missing(name: str) -> str:
    """What a figure without a value is, in words."""
    if "usd" in name:
        return "not priced"
    if name.endswith("up_to"):
        return "no limit"
    if name.startswith("sample"):
        return "every key"
    if name in ("kms", "source_default_encryption"):
        return "not SSE-KMS, or not told" if name == "kms" else "not told"
    if name == "intelligent_tiering.sample_note":
        return "every one asked"
    if name == "source_requester_pays.bucket":
        return "not told"
    if name in ("kms_target", "target_write_encryption"):
        return "no KMS key on the target's writes"
    if name.startswith("source_listing."):
        return "not told" if name.endswith("age_s") else "none"
    return "not counted" if name.startswith(("requests", "estimate_requests", "gate_requests")) else "not measured"


def _unit(name: str, figures: dict[str, Any]) -> str:
    leaf = name.rpartition(".")[2]
    if any(part == "usd" or "_usd" in part for part in name.split(".")):
        return figures.get("currency", "USD")
    if "bytes" in leaf or leaf == "up_to":
        return "bytes"
    if leaf.endswith("_s"):
        return "seconds"
    return ""


def age_words(seconds: float) -> str:
    """An age in words, in its largest unit: `3 hour(s)`."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}(s)"
    return f"{int(seconds)} second(s)"


def duration_words(kept: tuple[dict[str, Any], float] | None) -> str:
    """The data phase's duration as the last kept estimate measured it, with its age, or why it is not measured."""
    if kept is None:
        return "duration not measured (no estimate kept: `ferry plan estimate` probes it)"
    figures, age = kept
    if figures["duration_p50_s"] is None:
        return f"duration not measured by the estimate of {age_words(age)} ago ({figures['duration_bound']})"
    return (
        f"duration P50 {figures['duration_p50_s']:,} s, P90 {figures['duration_p90_s']:,} s (the estimate of "
        f"{age_words(age)} ago{', a SAMPLE' if figures['sample'] is not None else ''})"
    )


def save(path: Path, figures: dict[str, Any]) -> None:
    """Keep the figures where `plan show` finds them (written whole)."""
    write_atomic(path, json.dumps(figures, indent=2, sort_keys=True) + "\n")


def cached(path: Path) -> tuple[dict[str, Any], float] | None:
    """The last estimate kept at path and its age in seconds; None when there is none."""
    try:
        figures = json.loads(path.read_text(encoding="utf-8"))
        return figures, max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return None
