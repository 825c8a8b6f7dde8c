"""Checkpoint write and read speed on the target storage, with a synthetic sharded checkpoint.

The checkpoint is shaped like a sharded model state dict (equal shards `model-00001-of-00064.bin`...; the
remainder in the last), of incompressible bytes, written once under a cache folder and reused by later
runs (and by a benchmark's synthetic source). A measurement copies it to a fresh prefix of the target through the
transfer engine, reads every shard back through the target's connector and checks its SHA-256, and deletes what
it wrote (and any unfinished multipart upload) in a `finally`, whatever failed. A run journals the place it writes
to (JOURNAL) before it writes and marks it cleaned (CLEANED) after: what a killed run left is found from that.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from connectors.registry import open_connector
from connectors.transfer import Stats, Transfer, TransferSettings, TransferState, remove_all
from ferry.errors import FerryError
from ferry.files import write_atomic
from ferry.interrupts import failpoint
from ferry.profiles import Profile

_CHUNK = 8 << 20
# In a run's golive audit folder: where its checkpoint writes (journalled first), and that it was cleaned up.
JOURNAL, CLEANED = "checkpoint-target.json", "checkpoint-cleaned.json"


@dataclass(frozen=True)
class Synthetic:
    """A synthetic checkpoint on local disk: its folder and the SHA-256 and size of every file in it."""

    root: Path
    files: dict[str, tuple[int, str]]

    @property
    def total(self) -> int:
        return sum(size for size, _ in self.files.values())


def significant(gb_per_s: float, digits: int = 4) -> float:
    """A figure to `digits` significant digits: a slow store's 0.0000021 GB/s must not read as 0.0."""
    return float(f"{gb_per_s:.{digits}g}")


def shard_name(index: int, shards: int) -> str:
    return f"model-{index + 1:05d}-of-{shards:05d}.bin"


def synthetic(cache: Path, total: int, shards: int) -> Synthetic:
    """The checkpoint of total bytes in shards files under cache, written once (reused when complete)."""
    if shards < 1 or total < shards:
        raise ValueError(f"a checkpoint of {total} bytes cannot have {shards} shards")
    root = cache / f"{total}x{shards}"
    manifest = cache / f"{total}x{shards}.json"
    if manifest.exists():
        files = {k: tuple(v) for k, v in json.loads(manifest.read_text(encoding="utf-8")).items()}
        if all((root / k).is_file() and (root / k).stat().st_size == size for k, (size, _) in files.items()):
            return Synthetic(root, files)  # type: ignore[arg-type]
    root.mkdir(parents=True, exist_ok=True)
    base, extra = divmod(total, shards)
    files: dict[str, tuple[int, str]] = {}
    for i in range(shards):
        name, size = shard_name(i, shards), base + (extra if i == shards - 1 else 0)
        # A seeded generator: incompressible (no store or link can shrink it), and the same bytes every time.
        rng, digest, left = random.Random(i), hashlib.sha256(), size
        with (root / name).open("wb") as out:
            while left:
                chunk = rng.randbytes(min(_CHUNK, left))
                out.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        files[name] = (size, digest.hexdigest())
    # The manifest last: a half-written cache is rewritten, never trusted.
    write_atomic(manifest, json.dumps(files, indent=1))
    return Synthetic(root, files)


@dataclass
class Measurement:
    """What one write-and-read-back measured; the GB/s are None when that part did not complete."""

    target: str
    bytes: int
    shards: int
    write_gb_per_s: float | None = None
    read_gb_per_s: float | None = None
    write_s: float | None = None
    read_s: float | None = None
    # Per shard: GB/s of each shard's read (exact), and of its write from the engine's per-object latencies.
    read_shard_gb_per_s: dict[str, float] = field(default_factory=dict)
    write_shard_gb_per_s: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    cleanup: str = ""

    @property
    def verified(self) -> bool:
        return self.read_gb_per_s is not None and not self.problems

    def spread(self, per_shard: dict[str, float]) -> str:
        """'min/median/max GB/s over n shards' of a per-shard figure."""
        values = sorted(per_shard.values())
        if not values:
            return "no per-shard figures"
        low, mid, high = values[0], values[len(values) // 2], values[-1]
        return f"{low:.4g} / {mid:.4g} / {high:.4g} GB/s (min/median/max of {len(values)})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_back(target, key: str, size: int, expected: str) -> tuple[float, str | None]:
    """Seconds to read key in chunks through the connector, and a problem if its bytes are not the expected ones."""
    digest, start, read = hashlib.sha256(), time.perf_counter(), 0
    while read < size:
        chunk = target.open_range(key, read, min(_CHUNK, size - read))
        if not chunk:
            break
        digest.update(chunk)
        read += len(chunk)
    seconds = time.perf_counter() - start
    if read != size:
        return seconds, f"{key}: read {read} of {size} bytes"
    if digest.hexdigest() != expected:
        return seconds, f"{key}: SHA-256 {digest.hexdigest()[:16]}... differs from the written {expected[:16]}..."
    return seconds, None


def cleanup(target_url: str, profiles: Mapping[str, Profile]) -> str:
    """Delete every object under target_url and abort its unfinished uploads; say what was done."""
    target = open_connector(target_url, profiles)
    try:
        return remove_all(target)
    finally:
        target.close()


def journalled(folder: Path) -> str | None:
    """The checkpoint place a run (folder: its golive audit folder) journalled and did not clean up, else None."""
    journal = folder / JOURNAL
    if not journal.exists() or (folder / CLEANED).exists():
        return None
    return json.loads(journal.read_text(encoding="utf-8"))["url"]


def crashed(folder: Path) -> list[tuple[Path, str]]:
    """What the checkpoints of earlier runs left (folder: this run's golive audit folder; theirs are its siblings'):
    a run killed mid-write (kill -9, a lost machine) never reached its own clean-up. (folder, place) of each."""
    found = []
    for journal in sorted(folder.parent.parent.glob(f"*/{folder.name}/{JOURNAL}")):
        url = None if journal.parent == folder else journalled(journal.parent)
        if url is not None:
            found.append((journal.parent, url))
    return found


def clean_journalled(folder: Path, url: str, profiles: Mapping[str, Profile]) -> str:
    """Delete everything under a run's journalled checkpoint place and mark that run's folder cleaned."""
    done = cleanup(url, profiles)
    (folder / CLEANED).write_text(json.dumps({"cleanup": done}) + "\n", encoding="utf-8")
    return done


def run_url(storage: str, prefix: str, run: str) -> str:
    """The fresh place one measurement writes to: storage/prefix/run (only ever that is cleaned up)."""
    if not run.strip("/"):
        raise ValueError("a measurement needs its own run name under the prefix")
    tail = "/".join(part.strip("/") for part in (prefix, run) if part.strip("/"))
    return f"{storage.rstrip('/')}/{tail}/"


def measure(
    source: Synthetic,
    target_url: str,
    *,
    profiles: Mapping[str, Profile],
    settings: TransferSettings,
    stop: threading.Event | None = None,
) -> Measurement:
    """Write source to target_url (run_url(): fresh, its own) through the transfer engine, read it back and
    verify every shard's SHA-256, then delete everything under target_url, whatever failed.

    A set stop event (an interrupted run) ends the write early: no figures, and the cleanup still runs.
    """
    result = Measurement(target_url, source.total, len(source.files))
    try:
        with tempfile.TemporaryDirectory(prefix="ferry-ckpt-state-") as state_dir:
            src = open_connector(str(source.root), profiles)
            target = open_connector(target_url, profiles)
            state = TransferState(Path(state_dir), src.url, target.url, "")
            try:
                started = time.perf_counter()
                stats: Stats = Transfer(src, target, state, settings, stop=stop).run()
                result.write_s = time.perf_counter() - started
            finally:
                state.close()
                src.close()
            if stats.interrupted or (stop is not None and stop.is_set()):
                result.problems.append("interrupted: the run was stopped during the write")
                target.close()
                return result
            if stats.failed or stats.copied != len(source.files):
                result.problems += [f"write: {line}" for line in stats.failures[:10]] or [
                    f"write: {stats.copied} of {len(source.files)} shards copied ({stats.skipped} already there)"
                ]
                target.close()
                return result
            failpoint("golive:checkpoint", stop)  # written, neither read back nor cleaned up
            result.write_gb_per_s = source.total / result.write_s / 1e9
            result.write_shard_gb_per_s = _write_spread(stats, source)
            try:
                _read_all(target, source, settings.threads, result)
            finally:
                target.close()
    except FerryError as exc:
        result.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        try:
            result.cleanup = cleanup(target_url, profiles)
        except FerryError as exc:
            result.problems.append(f"cleanup of {target_url} failed: {exc}")
    return result


def _write_spread(stats: Stats, source: Synthetic) -> dict[str, float]:
    """Per-shard write GB/s at the engine's latency quantiles (fastest, median, slowest; 5% buckets)."""
    shard = max(size for size, _ in source.files.values())
    figures = {}
    for label, q in (("fastest", 0.0), ("median", 0.5), ("slowest", 1.0)):
        seconds = stats.latency.quantile(q)
        if seconds:
            figures[label] = significant(shard / seconds / 1e9)
    return figures


def _read_all(target, source: Synthetic, threads: int, result: Measurement) -> None:
    """Read every file back in parallel, timing each; the problems of any that differ go into result."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(source.files)))) as pool:
        done = {key: pool.submit(_read_back, target, key, size, digest) for key, (size, digest) in source.files.items()}
        outcomes = {key: future.result() for key, future in done.items()}
    result.read_s = time.perf_counter() - started
    for key, (seconds, problem) in sorted(outcomes.items()):
        if problem:
            result.problems.append(f"read-back: {problem}")
        elif seconds > 0:
            result.read_shard_gb_per_s[key] = significant(source.files[key][0] / seconds / 1e9)
    if not result.problems:
        result.read_gb_per_s = source.total / result.read_s / 1e9
