"""A prefix's key space split into key ranges, each a shard listed and diffed on its own (in parallel, on any
worker), as aws-samples/s3-fast-list splits a bucket by StartAfter.

A range is (after, through]: the keys after its lower boundary up to and including its upper one, open at either
end. The boundaries are found by probing the source: a probe asks for the first key after a string halfway (in
code point order) between two keys known to exist, which costs one request on a store whose listing starts at a
key (S3's StartAfter; `Capabilities.listing_seeks`). Each probe that finds a key between the two splits that span
in two, breadth first, until there are as many ranges as asked for or the probes run out: the ranges are even in
key space, not in objects, so a run takes more ranges than workers (a worker that finishes one takes the next).

The boundaries are made once per source, target and prefix and kept beside the transfer state
(`ranges-<hash>.json`): every later run, and every worker, uses the same ranges, so each range's transfer state
(named by its range) is found again and resumes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from connectors.base import Connector
from connectors.transfer.state import FOLDER, TransferState
from ferry.errors import PermanentError
from ferry.files import write_atomic

# A probe's upper bound where a span has none: above printable ASCII, where object keys almost always lie (a key
# above it is still listed: it falls in the last range).
_TOP = 0x80
# Probes per range asked for, at most: a store whose keys crowd into a few places stops the halving early.
_PROBES_PER_RANGE = 8
# The greatest code point: a string made of a prefix and it is after every key that starts with that prefix.
_LAST = "\U0010ffff"


def midpoint(low: str, high: str | None) -> str | None:
    """A string after low and before high (high None: no upper bound), about halfway between them in code point
    order; None where none lies between (high is low followed by NUL)."""
    common = 0
    while high is not None and common < min(len(low), len(high)) and low[common] == high[common]:
        common += 1
    after = ord(low[common]) if common < len(low) else -1
    if high is None:
        before = min(max(_TOP, after + 2), sys.maxunicode + 1)
    elif common == len(high):
        return None  # high is a prefix of low: nothing is after low and before high (low < high never holds)
    else:
        before = ord(high[common])
    if before - after >= 2:
        middle = (after + before) // 2
        if 0xD800 <= middle <= 0xDFFF:  # a surrogate has no UTF-8 form: the nearest code point on either side
            middle = 0xD7FF if after < 0xD7FF else 0xE000
        if after < middle < before:
            return low[:common] + chr(middle)
    if after < 0:
        return None  # low ends where high has NUL: no string lies between them
    # Adjacent characters: anything after low that starts as low does up to here is before high.
    rest = midpoint(low[common + 1 :], None)
    return None if rest is None else low[: common + 1] + rest


def probe(first_after: Callable[[str], str | None], count: int) -> list[str]:
    """Boundaries that split a key space into count ranges or more (fewer where it has too few keys), each range
    holding at least one key, from first_after(s): the first key after s, or None."""
    first = first_after("")
    if first is None:
        return []
    # What every key starts with (a dataset's "train/shard-" ...): the halving starts after it.
    common = _common_prefix(first_after, first)

    def after_common(after: str) -> str | None:
        key = first_after(common + after)
        return None if key is None else key[len(common) :]

    boundaries: list[str] = []
    # Spans to halve: (a key known to exist, the upper bound of its range or None). Whole rounds, each halving every
    # span, so the ranges stay even in key space (up to twice as many as asked for).
    spans: list[tuple[str, str | None]] = [(first[len(common) :], None)]
    probes = _PROBES_PER_RANGE * count
    while spans and len(boundaries) + 1 < count and probes > 0:
        halved: list[tuple[str, str | None]] = []
        for low, high in spans:
            middle = midpoint(low, high)
            if middle is None or probes <= 0:
                continue
            probes -= 1
            key = after_common(middle)
            if key is not None and (high is None or key <= high):
                # Keys on both sides of the middle: (.., middle] holds low, (middle, ..] holds key.
                boundaries.append(middle)
                halved += [(low, middle), (key, high)]
            else:
                halved.append((low, middle))  # every key of the span is at or before the middle
        spans = halved
    return sorted(common + b for b in boundaries)


def _common_prefix(first_after: Callable[[str], str | None], first: str) -> str:
    """The longest prefix of first (the least key) that every key starts with, in a binary search of probes: none
    is after that prefix followed by the greatest code point."""
    shortest, longest = 0, len(first)
    while shortest < longest:
        length = (shortest + longest + 1) // 2
        if first_after(first[:length] + _LAST) is None:
            shortest = length
        else:
            longest = length - 1
    return first[:shortest]


def ranges(boundaries: list[str]) -> list[tuple[str, str]]:
    """The (start_after, end_at) of each range the boundaries make, in key order ("" is open)."""
    edges = ["", *boundaries, ""]
    return list(zip(edges[:-1], edges[1:], strict=True))


def boundaries_path(state_dir: Path, source_url: str, target_url: str, prefix: str) -> Path:
    """Where the boundaries of a source, target and prefix are kept: beside their transfer state."""
    identity = json.dumps([source_url, target_url, prefix])
    return state_dir / FOLDER / f"ranges-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


def key_ranges(source: Connector, target_url: str, prefix: str, count: int, state_dir: Path) -> list[tuple[str, str]]:
    """The key ranges of source's prefix (and target_url's): those kept beside the transfer state, else about count
    probed now and kept. A source whose listing cannot start at a key refuses (split it by prefix instead)."""
    path = boundaries_path(state_dir, source.url, target_url, prefix)
    if path.exists():
        return ranges(json.loads(path.read_text(encoding="utf-8"))["boundaries"])
    if not source.capabilities.listing_seeks:
        raise PermanentError(
            f"{source.url}: its listing cannot start at a key, so it is not split into key ranges: give its shards "
            "as prefixes (shards: [a/, b/])"
        )

    def first_after(after: str) -> str | None:
        return next((info.key for info in source.list(prefix, start_after=prefix + after if after else "")), None)

    found = [prefix + b for b in probe(lambda after: _relative(first_after(after), prefix), count)]
    if found:
        # Kept: every later run and worker uses these. A source with fewer than two keys has none to keep (its one
        # range is the whole prefix, whose transfer state is the unsplit one's): the next run probes again.
        record = {"source": source.url, "target": target_url, "prefix": prefix, "asked": count, "boundaries": found}
        write_atomic(path, json.dumps(record, indent=2) + "\n")
    return ranges(found)


def split_outgrown(state_dir: Path, source_url: str, target_url: str, prefix: str, most: int) -> list[tuple[str, str]]:
    """Split each kept key range whose transfer state records more than `most` objects in two at its median key,
    the halves taking over its state's rows (the range's state file is then removed), and keep the new boundaries
    for every later run. Returns the ranges split (as they were); none where no boundaries are kept."""
    path = boundaries_path(state_dir, source_url, target_url, prefix)
    if not path.exists():
        return []
    record = json.loads(path.read_text(encoding="utf-8"))
    boundaries, split = list(record["boundaries"]), []
    for start_after, end_at in ranges(record["boundaries"]):
        state = TransferState(state_dir, source_url, target_url, prefix, (start_after, end_at))
        try:
            middle = state.median_key() if state.count() > most else None
        finally:
            state.close()
        if middle is None or middle == end_at:
            continue
        for half in ((start_after, middle), (middle, end_at)):
            taker = TransferState(state_dir, source_url, target_url, prefix, half)
            try:
                taker.take_rows(state.path, *half)
            finally:
                taker.close()
        for suffix in ("", "-wal", "-shm"):
            state.path.with_name(state.path.name + suffix).unlink(missing_ok=True)
        boundaries.append(middle)
        split.append((start_after, end_at))
    if split:
        write_atomic(path, json.dumps({**record, "boundaries": sorted(boundaries)}, indent=2) + "\n")
    return split


def _relative(key: str | None, prefix: str) -> str | None:
    return None if key is None else key[len(prefix) :]
