"""Every knob of a transfer in one settings object (each default and bound), and the part size it gives an object."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, fields
from typing import Any

from connectors.base import Connector, MiB
from ferry.errors import PermanentError


@dataclass(frozen=True)
class Bounds:
    """The least and the greatest value a knob takes; None: no bound on that side."""

    least: float | None = None
    most: float | None = None


def _knob(default: Any, least: float | None = None, most: float | None = None) -> Any:
    """A knob's default and bounds: `ferry sync`'s options and the data_sync phase's settings take both from here."""
    return field(default=default, metadata={"bounds": Bounds(least, most)})


@dataclass(frozen=True)
class TransferSettings:
    """Every knob of a transfer, in one place: the one table of defaults and bounds (`bounds`), as rclone makes its
    flags from its option table."""

    threads: int = _knob(128, 1, 4096)
    # Preferred part size; raised when an object would need more parts than the target allows.
    part_size: int = _knob(8 * MiB, 1)
    # Objects above this go multipart.
    multipart_threshold: int = _knob(16 * MiB, 1)
    # Server-side copies above this go in parallel part copies; below, one whole-object copy
    # (one request to the store instead of a begin, N part copies and a complete).
    copy_threshold: int = _knob(1024 * MiB, 1)
    # Object bytes held in memory at once, across all workers.
    memory_budget: int = _knob(96 * MiB, 1)
    # How long one request keeps retrying transient errors (throttling, 5xx, resets, timeouts) from its first
    # attempt: long enough to ride out an endpoint that is away for half a minute; at most a day.
    retry_budget_s: float = _knob(120.0, 0, 86400)
    # At most this many attempts per request as well (1 = no retry); None: the budget alone decides.
    retries: int | None = _knob(None, 1, 10_000)
    retry_base_s: float = 0.25
    retry_max_s: float = 20.0
    checksum: bool = False
    delete: bool = False
    dry_run: bool = False
    # A dry run's bound: only the first this many keys of the diff, in key order (a sampled estimate); None: all.
    sample: int | None = None
    # The source is live (a cut-over's delta): an object that changes while it is copied is left for the next run
    # (counted `changed_during_copy`), not a failure; every read of its bytes asks for the listed version (If-Match,
    # where the store takes it), and a read of another version (a 412, or another ETag answered) is such a change.
    live: bool = False
    # Only keys under this prefix (a shard of the key space); "" is everything.
    prefix: str = ""
    # ...and, for a key range of it (connectors/transfer/ranges.py), only keys after start_after and up to end_at
    # (both relative to the root, as keys are; "" leaves that side open).
    start_after: str = ""
    end_at: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # Bytes per second through this machine; None is unlimited.
    bwlimit: int | None = _knob(None, 1)
    url_expiry_s: int = 6 * 3600

    def __post_init__(self) -> None:
        if self.sample is not None and (not self.dry_run or self.sample < 1):
            raise ValueError("sample bounds a dry run: at least 1 key, and dry_run set")
        for knob in fields(self):
            value, limits = getattr(self, knob.name), bounds(knob.name)
            if value is None:
                continue
            if limits.least is not None and value < limits.least:
                raise ValueError(f"{knob.name} must be at least {limits.least}")
            if limits.most is not None and value > limits.most:
                raise ValueError(f"{knob.name} must be at most {limits.most}")

    @property
    def key_range(self) -> tuple[str, str]:
        """(start_after, end_at): the shard's key range of its prefix, ("", "") for the whole prefix."""
        return self.start_after, self.end_at

    def selects(self, key: str) -> bool:
        """True if include/exclude globs let key through."""
        if self.include and not any(fnmatch.fnmatchcase(key, g) for g in self.include):
            return False
        return not any(fnmatch.fnmatchcase(key, g) for g in self.exclude)


def bounds(name: str) -> Bounds:
    """The bounds of the knob `name` (none for a setting that has no knob's bounds)."""
    return TransferSettings.__dataclass_fields__[name].metadata.get("bounds", Bounds())


def part_size_for(size: int, settings: TransferSettings, target: Connector) -> int:
    """The part size for an object: the preferred one, raised to fit the target's part count."""
    caps = target.capabilities
    chosen = max(settings.part_size, caps.min_part_size)
    if chosen * caps.max_parts < size:
        chosen = math.ceil(size / caps.max_parts / MiB) * MiB
    if chosen > caps.max_part_size:
        raise PermanentError(f"object of {size} bytes needs parts above {caps.max_part_size} bytes", code="TooLarge")
    return chosen


def effective_threads(threads: int, source: Connector, target: Connector) -> int:
    """The pool size: as asked, unless neither end is a network store that could use that many."""
    limits = [limit for c in (source, target) if (limit := c.capabilities.useful_threads) is not None]
    return min(threads, max(limits)) if len(limits) == 2 else threads
