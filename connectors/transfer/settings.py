"""Every knob of a transfer in one settings object, and the part size it gives an object."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from connectors.base import Connector, MiB
from ferry.errors import PermanentError


@dataclass(frozen=True)
class TransferSettings:
    """Every knob of a transfer, in one place."""

    threads: int = 128
    # Preferred part size; raised when an object would need more parts than the target allows.
    part_size: int = 8 * MiB
    # Objects above this go multipart.
    multipart_threshold: int = 16 * MiB
    # Server-side copies above this go in parallel part copies; below, one whole-object copy
    # (one request to the store instead of a begin, N part copies and a complete).
    copy_threshold: int = 1024 * MiB
    # Object bytes held in memory at once, across all workers.
    memory_budget: int = 96 * MiB
    # How long one request keeps retrying transient errors (throttling, 5xx, resets, timeouts) from its first
    # attempt: long enough to ride out an endpoint that is away for half a minute.
    retry_budget_s: float = 120.0
    # At most this many attempts per request as well (1 = no retry); None: the budget alone decides.
    retries: int | None = None
    retry_base_s: float = 0.25
    retry_max_s: float = 20.0
    checksum: bool = False
    delete: bool = False
    dry_run: bool = False
    # Only keys under this prefix (a shard of the key space); "" is everything.
    prefix: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # Bytes per second through this machine; None is unlimited.
    bwlimit: int | None = None
    url_expiry_s: int = 6 * 3600

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError("threads must be at least 1")
        if self.part_size < 1 or self.memory_budget < 1:
            raise ValueError("part size and memory budget must be positive")
        if self.retry_budget_s < 0 or (self.retries is not None and self.retries < 1):
            raise ValueError("the retry budget must be >= 0 s and retries at least 1")

    def selects(self, key: str) -> bool:
        """True if include/exclude globs let key through."""
        if self.include and not any(fnmatch.fnmatchcase(key, g) for g in self.include):
            return False
        return not any(fnmatch.fnmatchcase(key, g) for g in self.exclude)


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
