"""The transfer engine: list -> diff -> schedule parts -> N workers -> verify.

Both listings are streamed and merge-joined in key order with the ledger, so memory stays flat
whatever the object count. One pool of worker threads takes work from two lanes: whole small
objects, and the parts of the large objects in flight. A byte budget caps what is held in
memory; large parts go first when the budget allows, small objects fill the rest, so the two
overlap. Every object is verified before the ledger records it.
"""

from __future__ import annotations

import contextvars
import fnmatch
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from connectors.base import Connector, MiB, ObjectInfo, Part, WriteSpec
from connectors.checksum import combine_parts, crc32c, label, parse
from ferry.errors import ChecksumMismatch, FerryError, NotFoundError, PermanentError, RejectedKey, TransientError
from ferry.ledger import Ledger, ObjectRecord, UploadRecord

log = structlog.get_logger("ferry.transfer")


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
    # Attempts per request for transient errors (1 = no retry).
    retries: int = 6
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


# -- the diff ------------------------------------------------------------------------------------

COPY, SKIP, DELETE, COMPARE = "copy", "skip", "delete", "compare"


@dataclass(frozen=True, slots=True)
class Action:
    kind: str
    key: str
    src: ObjectInfo | None
    dst: ObjectInfo | None
    record: ObjectRecord | None
    reason: str


def _ordered(items: Iterator, what: str) -> Iterator:
    """Pass items through, failing loudly if a listing is not in key order (the merge needs it)."""
    last = None
    for item in items:
        if last is not None and item.key <= last:
            raise PermanentError(f"{what} listing is out of key order at {item.key!r} after {last!r}", code="Order")
        last = item.key
        yield item


Joined = tuple[str, ObjectInfo | None, ObjectInfo | None, ObjectRecord | None]


def merge_join(
    source: Iterator[ObjectInfo],
    target: Iterator[ObjectInfo],
    records: Iterator[ObjectRecord],
    settings: TransferSettings,
) -> Iterator[Joined]:
    """(key, source, target, ledger record) for every selected key either side holds, in key order.

    All three inputs are streams in key order; nothing is held but the current item of each.
    """
    src_it = (i for i in _ordered(source, "source") if settings.selects(i.key))
    dst_it = (i for i in _ordered(target, "target") if settings.selects(i.key))
    rec_it = iter(records)
    s, d, r = next(src_it, None), next(dst_it, None), next(rec_it, None)
    while s is not None or d is not None:
        key = min(x.key for x in (s, d) if x is not None)
        while r is not None and r.key < key:
            r = next(rec_it, None)
        cur_s = s if s is not None and s.key == key else None
        cur_d = d if d is not None and d.key == key else None
        yield key, cur_s, cur_d, (r if r is not None and r.key == key else None)
        if cur_s is not None:
            s = next(src_it, None)
        if cur_d is not None:
            d = next(dst_it, None)


def diff(
    source: Iterator[ObjectInfo],
    target: Iterator[ObjectInfo],
    records: Iterator[ObjectRecord],
    settings: TransferSettings,
) -> Iterator[Action]:
    """Merge-join the two listings and the ledger into actions."""
    for key, s, d, r in merge_join(source, target, records, settings):
        yield decide(key, s, d, r, settings)


def decide(
    key: str, s: ObjectInfo | None, d: ObjectInfo | None, r: ObjectRecord | None, settings: TransferSettings
) -> Action:
    """What to do with one key, from what each side and the ledger know of it."""
    if s is None:
        return Action(DELETE if settings.delete else SKIP, key, None, d, r, "only in target")
    if d is None:
        return Action(COPY, key, s, None, r, "missing in target")
    if s.size != d.size:
        return Action(COPY, key, s, d, r, "size differs")
    if settings.checksum:
        return Action(COMPARE, key, s, d, r, "--checksum")
    if r is not None:
        if (r.size, r.src_sig, r.dst_sig) == (s.size, s.signature, d.signature):
            return Action(SKIP, key, s, d, r, "unchanged since last sync")
        if r.dst_sig != d.signature:
            return Action(COPY, key, s, d, r, "target changed since last sync")
        return Action(COPY, key, s, d, r, "source changed since last sync")
    return Action(COMPARE, key, s, d, r, "no record: compare stored checksums")


# -- counters and report ---------------------------------------------------------------------------


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
    skipped: int = 0
    bytes_skipped: int = 0
    deleted: int = 0
    failed: int = 0
    rejected: int = 0
    recopied_after_mismatch: int = 0
    resumed_uploads: int = 0
    parts_resumed: int = 0
    retries: int = 0
    # Where the bytes went: through this machine, or copied by the stores themselves.
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_server_side: int = 0
    bytes_url_pulled: int = 0
    url_copy: str = "not attempted"
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
                "deleted": self.deleted,
                "failed": self.failed,
                "rejected": self.rejected,
                "recopied_after_mismatch": self.recopied_after_mismatch,
            },
            "bytes": {
                "listed": self.bytes_listed,
                "copied": self.bytes_copied,
                "skipped": self.bytes_skipped,
                "read_through_ferry": self.bytes_read,
                "written_through_ferry": self.bytes_written,
                "server_side": self.bytes_server_side,
                "pulled_by_target_from_url": self.bytes_url_pulled,
            },
            "multipart": {"resumed_uploads": self.resumed_uploads, "parts_resumed": self.parts_resumed},
            "retries": self.retries,
            "url_copy": self.url_copy,
            "duration_s": round(elapsed, 3),
            "throughput_mb_s": round(self.bytes_copied / elapsed / 1e6, 2) if elapsed > 0 else None,
            "objects_per_s": round(self.copied / elapsed, 1) if elapsed > 0 else None,
            "latency_s": {"p50": None if p50 is None else round(p50, 4), "p99": None if p99 is None else round(p99, 4)},
            "failures": list(self.failures),
        }


_FAILURES_KEPT = 100


# -- the scheduler ---------------------------------------------------------------------------------


class _LargeJob:
    """A multipart object in flight: which parts are left, which are done."""

    def __init__(self, action: Action, info: ObjectInfo, part_size: int, mode: str):
        self.action = action
        self.key = action.key
        self.info = info
        self.size = info.size
        self.part_size = part_size
        self.mode = mode  # "stream", "server" or "url"
        self.total = max(1, math.ceil(self.size / part_size))
        self.upload_id = ""
        self.pending: deque[int] = deque()
        self.done: dict[int, Part] = {}
        self.failed = False
        self.lock = threading.Lock()
        self.url: str | None = None
        self.started = time.monotonic()
        self.attempt = 1

    def span(self, number: int) -> tuple[int, int]:
        start = (number - 1) * self.part_size
        return start, min(self.part_size, self.size - start)

    def part_cost(self) -> int:
        return self.part_size if self.mode == "stream" else 0


class _Scheduler:
    """Two lanes (small objects, large parts) feeding N workers under one byte budget.

    Large parts may hold at most three quarters of the budget, so small objects always have room
    to run beside them (small and large overlap instead of taking turns). Three conditions share
    one lock so a state change wakes only who it concerns: workers wait for work, the producer for
    room in the small lane, the producer for a large-object slot. A worker that takes a task wakes
    one more if work is left, rather than waking all.
    """

    def __init__(self, budget: int, max_queued: int, run_part: Callable[[_LargeJob, int], None]):
        lock = threading.Lock()
        self.work = threading.Condition(lock)
        self.room = threading.Condition(lock)
        self.slots = threading.Condition(lock)
        self.run_part = run_part
        self.small: deque[tuple[int, Callable[[], None]]] = deque()
        self.large: deque[_LargeJob] = deque()
        self.budget = budget
        self.available = budget
        self.large_share = budget * 3 // 4
        self.large_held = 0
        self.max_queued = max_queued
        self.open_large = 0
        self.closed = False

    def submit(self, cost: int, fn: Callable[[], None]) -> None:
        with self.room:
            while len(self.small) >= self.max_queued:
                self.room.wait()
            self.small.append((cost, fn))
            self.work.notify()

    def add_large(self, job: _LargeJob) -> None:
        with self.work:
            self.large.append(job)
            self.work.notify()

    def open_large_slot(self, limit: int | None) -> None:
        """Count one more large object in flight; with a limit, wait until one is free."""
        with self.slots:
            while limit is not None and self.open_large >= limit:
                self.slots.wait()
            self.open_large += 1

    def release_large_slot(self) -> None:
        with self.slots:
            self.open_large -= 1
            self.slots.notify()
            if self.closed and self.open_large == 0:
                self.work.notify_all()

    def close(self) -> None:
        with self.work:
            self.closed = True
            self.work.notify_all()

    def _fits(self, cost: int) -> bool:
        # A task larger than the whole budget still runs, alone.
        return cost <= self.available or self.available == self.budget

    def _pop(self) -> tuple[int, Callable[[], None]] | None:
        for job in self.large:
            if job.failed:
                job.pending.clear()
            cost = job.part_cost()
            if job.pending and self._fits(cost) and (self.large_held + cost <= self.large_share or not self.large_held):
                number = job.pending.popleft()
                self.available -= cost
                self.large_held += cost
                return cost, lambda job=job, number=number, cost=cost: self._run_large(job, number, cost)
        if self.small and self._fits(self.small[0][0]):
            cost, fn = self.small.popleft()
            self.available -= cost
            self.room.notify()
            return cost, fn
        return None

    def take(self) -> tuple[int, Callable[[], None]] | None:
        with self.work:
            while True:
                task = self._pop()
                if self.large and not self.large[0].pending:
                    self.large = deque(j for j in self.large if j.pending)
                if task is not None:
                    if self.small or self.large:
                        self.work.notify()
                    return task
                if self.closed and not self.small and not self.large and self.open_large == 0:
                    return None
                self.work.wait()

    def _run_large(self, job: _LargeJob, number: int, cost: int) -> None:
        try:
            self.run_part(job, number)
        finally:
            with self.work:
                self.large_held -= cost

    def release(self, cost: int) -> None:
        with self.work:
            self.available += cost
            if cost:
                self.work.notify()


class _RateLimiter:
    """A token bucket shared by all workers, for --bwlimit."""

    def __init__(self, rate: int):
        self.rate = rate
        self.tokens = float(rate)
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self, amount: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= amount
            debt = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if debt > 0:
            time.sleep(debt)


# -- the engine ------------------------------------------------------------------------------------


def retrying(settings: TransferSettings, on_retry: Callable[[], None] = lambda: None) -> Retrying:
    """The one retry policy: TransientError only, exponential backoff with jitter, Retry-After honoured."""
    backoff = wait_random_exponential(multiplier=settings.retry_base_s, max=settings.retry_max_s)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        return max(backoff(state), retry_after) if retry_after else backoff(state)

    def before_sleep(state: RetryCallState) -> None:
        on_retry()
        exc = state.outcome.exception() if state.outcome else None
        log.info("retrying", error=str(exc), code=getattr(exc, "code", ""), attempt=state.attempt_number)

    return Retrying(
        retry=retry_if_exception_type(TransientError),
        stop=stop_after_attempt(settings.retries),
        wait=wait,
        before_sleep=before_sleep,
        reraise=True,
    )


def listing(
    connector: Connector, settings: TransferSettings, on_retry: Callable[[], None] = lambda: None
) -> Iterator[ObjectInfo]:
    """connector.list(), resumed after the last key seen when a page fails transiently."""
    last, failures = "", 0
    while True:
        try:
            for info in connector.list(prefix=settings.prefix, start_after=last):
                yield info
                last, failures = info.key, 0
            return
        except TransientError as exc:
            failures += 1
            if failures >= settings.retries:
                raise
            on_retry()
            log.info("retrying listing", error=str(exc), code=exc.code, after=last)
            backoff = random.uniform(0, min(settings.retry_max_s, settings.retry_base_s * 2**failures))
            time.sleep(max(backoff, exc.retry_after or 0))


def hash_object(connector: Connector, info: ObjectInfo, chunk: int, policy: Retrying) -> str:
    """Read an object one chunk at a time and return its checksum label."""
    value, offset = 0, 0
    while offset < info.size:
        length = min(chunk, info.size - offset)
        value = crc32c(policy.copy()(connector.open_range, info.key, offset, length), value)
        offset += length
    return label(value)


def effective_threads(threads: int, source: Connector, target: Connector) -> int:
    """The pool size: as asked, unless neither end is a network store that could use that many."""
    limits = [limit for c in (source, target) if (limit := c.capabilities.useful_threads) is not None]
    return min(threads, max(limits)) if len(limits) == 2 else threads


def job_name(source: Connector, target: Connector) -> str:
    """The ledger's name for a source/target pair."""
    return f"{source.url} -> {target.url}"


class Transfer:
    """One sync of source into target. `run()` returns the stats; failures are in them, not raised."""

    def __init__(
        self,
        source: Connector,
        target: Connector,
        ledger: Ledger,
        settings: TransferSettings,
        on_action: Callable[[Action], None] | None = None,
    ):
        self.source = source
        self.target = target
        self.ledger = ledger
        self.settings = settings
        self.job = job_name(source, target)
        self.stats = Stats()
        self.on_action = on_action
        self._server_side = target.capabilities.server_side_copy and target.can_copy_from(source)
        self._url_ok = target.capabilities.url_source and source.capabilities.presign
        self._limiter = _RateLimiter(settings.bwlimit) if settings.bwlimit else None
        self.threads = effective_threads(settings.threads, source, target)
        self._sched = _Scheduler(settings.memory_budget, 2 * self.threads, self._run_part)
        self._max_open_large = max(4, 2 * settings.memory_budget // settings.part_size)
        self._retrying = retrying(settings, on_retry=self._note_retry)

    def _note_retry(self) -> None:
        self.stats.add(retries=1)

    def _call(self, fn: Callable, *args: Any) -> Any:
        # A copy per call: retry state must not be shared between worker threads.
        return self._retrying.copy()(fn, *args)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Stats:
        self.source.check()
        self.target.prepare_target(self.settings.dry_run)
        # Each worker runs in a copy of this context: bound log fields (run, phase) and an
        # orchestrator's run context reach the workers' log lines.
        workers = [
            threading.Thread(target=contextvars.copy_context().run, args=(self._worker,), daemon=True)
            for _ in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        try:
            self._produce()
        finally:
            self._sched.close()
            for worker in workers:
                worker.join()
            self.ledger.flush()
        return self.stats

    def _produce(self) -> None:
        counted = self._count_listed(listing(self.source, self.settings, self._note_retry))
        target = listing(self.target, self.settings, self._note_retry)
        records = self.ledger.objects(self.job, self.settings.prefix)
        for action in diff(counted, target, records, self.settings):
            if self.on_action is not None:
                self.on_action(action)
            if action.kind == SKIP:
                if action.src is not None:
                    self.stats.add(skipped=1, bytes_skipped=action.src.size)
            elif action.kind == DELETE:
                self._submit_delete(action)
            elif action.kind == COMPARE:
                assert action.src is not None
                self._sched.submit(min(action.src.size, self.settings.part_size), lambda a=action: self._compare(a))
            else:
                self._submit_copy(action)

    def _count_listed(self, items: Iterator[ObjectInfo]) -> Iterator[ObjectInfo]:
        for info in items:
            if self.settings.selects(info.key):
                self.stats.add(objects_listed=1, bytes_listed=info.size)
            yield info

    def _worker(self) -> None:
        while (task := self._sched.take()) is not None:
            cost, fn = task
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a worker must never die; tasks record their own failures
                log.error("internal error in a worker", error=repr(exc))
                self.stats.add(failed=1)
            finally:
                self._sched.release(cost)

    def _fail(self, key: str, exc: BaseException) -> None:
        rejected = isinstance(exc, RejectedKey)
        message = str(exc) if isinstance(exc, FerryError) else f"{key}: {type(exc).__name__}: {exc}"
        with self.stats.lock:
            self.stats.failed += 1
            self.stats.rejected += int(rejected)
            if len(self.stats.failures) < _FAILURES_KEPT:
                self.stats.failures.append(message)
        log.error("object failed", key=key, error=message, code=getattr(exc, "code", ""))

    # -- copy ------------------------------------------------------------------------------------
    def _submit_copy(self, action: Action) -> None:
        assert action.src is not None
        size = action.src.size
        self.stats.add(to_copy=1, bytes_to_copy=size)
        if self.settings.dry_run:
            return
        if self._whole(size):
            cost = 0 if self._server_side else size
            self._sched.submit(cost, lambda: self._copy_small(action))
        else:
            self._sched.open_large_slot(self._max_open_large)
            self._sched.submit(0, lambda: self._start_large(action))

    def _whole(self, size: int) -> bool:
        """True if an object of size goes in one request (or one server-side copy), not in parts."""
        if self._server_side:
            if not self.target.capabilities.server_side_part_copy:
                return True
            return size <= self.settings.copy_threshold and size <= self.target.capabilities.max_single_put
        return size <= self.settings.multipart_threshold and size <= self.target.capabilities.max_single_put

    def _copy_small(self, action: Action, *, second_try: bool = False) -> None:
        key, src = action.key, action.src
        assert src is not None
        started = time.monotonic()
        try:
            if self._server_side:
                written = self._call(self.target.copy_from, self.source, src, key)
                checksum = written.checksum
                moved = {"bytes_server_side": src.size}
            else:
                data, info = self._call(self.source.get, key)
                value = crc32c(data)
                stored = parse(info.checksum)
                if stored is not None and stored != value:
                    raise ChecksumMismatch(
                        f"{self.source.url}: {key}: bytes read do not match the stored {info.checksum}"
                    )
                checksum = label(value)
                spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {}, checksum=checksum)
                if self._limiter:
                    self._limiter.take(len(data))
                written = self._call(self.target.put, key, data, spec)
                moved = {"bytes_read": len(data), "bytes_written": len(data)}
                del data
            self._done(action, src, written.signature, checksum, started, moved)
        except ChecksumMismatch as exc:
            if second_try:
                self._fail(key, exc)
            else:
                log.warning("checksum mismatch, copying again", key=key, error=str(exc))
                self.stats.add(recopied_after_mismatch=1)
                self._copy_small(action, second_try=True)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)

    def _done(
        self, action: Action, src: ObjectInfo, dst_sig: str, checksum: str | None, started: float, moved: dict[str, int]
    ) -> None:
        self.ledger.record_object(self.job, ObjectRecord(action.key, src.size, src.signature, dst_sig, checksum))
        self.stats.finished(started, bytes_copied=src.size, **moved)

    # -- large objects -----------------------------------------------------------------------------
    def _start_large(self, action: Action) -> None:
        try:
            self._begin_large(action)
        except Exception as exc:  # noqa: BLE001
            self._fail(action.key, exc)
            self._sched.release_large_slot()

    def _begin_large(self, action: Action, attempt: int = 1) -> None:
        key = action.key
        info = self._call(self.source.stat, key)
        part_size = part_size_for(info.size, self.settings, self.target)
        mode = "server" if self._server_side else ("url" if self._url_ok else "stream")
        job = _LargeJob(action, info, part_size, mode)
        job.attempt = attempt
        spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {})
        previous = self.ledger.upload(self.job, key)
        if (
            previous is not None
            and (previous.size, previous.src_sig, previous.part_size) == (info.size, info.signature, part_size)
            and self._call(self.target.upload_alive, key, previous.upload_id)
        ):
            job.upload_id = previous.upload_id
            job.done = {p.number: p for p in self.ledger.parts(self.job, key, previous.upload_id)}
            self.stats.add(resumed_uploads=1, parts_resumed=len(job.done))
            log.info("resuming upload", key=key, parts_done=len(job.done), parts=job.total)
        else:
            if previous is not None:
                self._call(self.target.abort, key, previous.upload_id)
            job.upload_id = self._call(self.target.begin, key, spec, part_size)
            self.ledger.begin_upload(self.job, UploadRecord(key, job.upload_id, info.size, info.signature, part_size))
        job.pending = deque(n for n in range(1, job.total + 1) if n not in job.done)
        if not job.pending:
            self._finish_large(job)
        else:
            self._sched.add_large(job)

    def _run_part(self, job: _LargeJob, number: int) -> None:
        if job.failed:
            return
        try:
            part = self._copy_part(job, number)
            self.ledger.record_part(self.job, job.key, job.upload_id, part)
        except Exception as exc:  # noqa: BLE001
            self._fail_large(job, exc)
            return
        with job.lock:
            job.done[number] = part
            last = len(job.done) == job.total and not job.failed
        if last:
            try:
                self._finish_large(job)
            except Exception as exc:  # noqa: BLE001
                self._fail_large(job, exc)

    def _copy_part(self, job: _LargeJob, number: int) -> Part:
        start, length = job.span(number)
        if job.mode == "server":
            part = self._call(
                self.target.copy_part_from, self.source, job.info, job.key, job.upload_id, number, start, length
            )
            self.stats.add(bytes_server_side=length)
            return part
        if job.mode == "url" and self._url_ok:
            if job.url is None:
                job.url = self.source.presign(job.key, self.settings.url_expiry_s)
            try:
                part = self._call(self.target.put_part_from_url, job.key, job.upload_id, number, job.url, start, length)
                self.stats.url_copy = "used"
                self.stats.add(bytes_url_pulled=length)
                return part
            except PermanentError as exc:
                if exc.code != "NotImplemented":
                    raise
                # Azurite (and some gateways) answer 501 to Put Block From URL: stream instead.
                if self._url_ok:
                    self._url_ok = False
                    self.stats.url_copy = f"unsupported by the target ({exc.code}): streamed instead"
                    log.warning("target cannot pull from a URL; streaming through ferry instead", code=exc.code)
        data = self._call(self.source.open_range, job.key, start, length)
        self.stats.add(bytes_read=len(data))
        if self._limiter:
            self._limiter.take(len(data))
        try:
            part = self._call(self.target.put_part, job.key, job.upload_id, number, data)
        except ChecksumMismatch:
            self.stats.add(recopied_after_mismatch=1)
            part = self._call(self.target.put_part, job.key, job.upload_id, number, data)
        self.stats.add(bytes_written=len(data))
        return part

    def _finish_large(self, job: _LargeJob) -> None:
        parts = [job.done[n] for n in range(1, job.total + 1)]
        stored = parse(job.info.checksum)
        if all(p.crc32c is not None for p in parts):
            value = combine_parts([(p.crc32c, p.size) for p in parts])  # type: ignore[misc]
            if stored is not None and stored != value:
                raise ChecksumMismatch(
                    f"{self.source.url}: {job.key}: bytes read do not match the stored {job.info.checksum}"
                )
        else:
            value = stored  # bytes never passed through ferry: carry the source's own checksum
        checksum = label(value) if value is not None else None
        spec = WriteSpec(content_type=job.info.content_type, metadata=job.info.metadata or {}, checksum=checksum)
        try:
            written = self._call(self.target.complete, job.key, job.upload_id, parts, spec)
            self._verify(job, checksum)
            if job.mode != "server":
                now = self._call(self.source.stat, job.key)
                if (now.size, now.signature) != (job.info.size, job.info.signature):
                    raise PermanentError(
                        f"{self.source.url}: {job.key}: changed while it was being copied", code="Changed"
                    )
        except ChecksumMismatch as exc:
            self.ledger.end_upload(self.job, job.key)
            if job.attempt > 1:
                raise
            log.warning("checksum mismatch, copying again", key=job.key, error=str(exc))
            self.stats.add(recopied_after_mismatch=1)
            self._begin_large(job.action, attempt=2)
            return
        self.ledger.end_upload(self.job, job.key)
        record_sig = job.action.src.signature if job.action.src else job.info.signature
        self.ledger.record_object(self.job, ObjectRecord(job.key, job.size, record_sig, written.signature, checksum))
        self.stats.finished(job.started, bytes_copied=job.size)
        self._sched.release_large_slot()

    def _verify(self, job: _LargeJob, checksum: str | None) -> None:
        """Read back what the target holds: its size, and its stored checksum where it keeps one."""
        held = self._call(self.target.stat, job.key)
        if held.size != job.size:
            raise ChecksumMismatch(f"{self.target.url}: {job.key}: holds {held.size} bytes, expected {job.size}")
        if self.target.capabilities.stores_checksum and checksum and held.checksum != checksum:
            raise ChecksumMismatch(f"{self.target.url}: {job.key}: stores {held.checksum}, expected {checksum}")

    def _fail_large(self, job: _LargeJob, exc: BaseException) -> None:
        with job.lock:
            if job.failed:
                return
            job.failed = True
        self._fail(job.key, exc)
        if isinstance(exc, PermanentError) and not isinstance(exc, TransientError):
            # Nothing to resume: drop the parts. A transient failure keeps them for the next run.
            try:
                self.target.abort(job.key, job.upload_id)
                self.ledger.end_upload(self.job, job.key)
            except FerryError as abort_exc:
                log.warning("could not abort upload", key=job.key, error=str(abort_exc))
        self._sched.release_large_slot()

    # -- compare and delete ------------------------------------------------------------------------
    def _compare(self, action: Action) -> None:
        """Equal sizes and no ledger record (or --checksum): compare checksums, copy if they differ."""
        key, src, dst = action.key, action.src, action.dst
        assert src is not None and dst is not None
        try:
            src_sum, dst_sum = self._checksums(src, dst)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)
            return
        if src_sum is not None and src_sum == dst_sum:
            self.stats.add(skipped=1, bytes_skipped=src.size)
            if not self.settings.dry_run:
                self.ledger.record_object(self.job, ObjectRecord(key, src.size, src.signature, dst.signature, src_sum))
            return
        reason = "checksums differ" if dst_sum is not None else "target has no stored checksum"
        copy = Action(COPY, key, src, dst, action.record, reason)
        if self.on_action is not None:
            self.on_action(copy)
        self.stats.add(to_copy=1, bytes_to_copy=src.size)
        if self.settings.dry_run:
            return
        if self._whole(src.size):
            self._copy_small(copy)
        else:
            # A worker never waits for a slot (that could starve the parts that free one).
            self._sched.open_large_slot(None)
            self._start_large(copy)

    def _checksums(self, src: ObjectInfo, dst: ObjectInfo) -> tuple[str | None, str | None]:
        if self.settings.checksum:
            return self._hash(self.source, src), self._hash(self.target, dst)
        held = self._call(self.target.stat, dst.key).checksum
        if held is None:
            return None, None
        source_sum = self._call(self.source.stat, src.key).checksum or self._hash(self.source, src)
        return source_sum, held

    def _hash(self, connector: Connector, info: ObjectInfo) -> str:
        checksum = hash_object(connector, info, self.settings.part_size, self._retrying)
        if connector is self.source:
            self.stats.add(bytes_read=info.size)
        return checksum

    def _submit_delete(self, action: Action) -> None:
        self.stats.add(deleted=1)
        if self.settings.dry_run:
            return

        def delete() -> None:
            try:
                self._call(self.target.delete, action.key)
                self.ledger.forget_object(self.job, action.key)
            except Exception as exc:  # noqa: BLE001
                self.stats.add(deleted=-1)
                self._fail(action.key, exc)

        self._sched.submit(0, delete)


def abort_incomplete(target: Connector) -> list[tuple[str, str]]:
    """Abort every unfinished multipart upload under the target's root; return what was aborted."""
    aborted = []
    for key, upload_id in target.list_incomplete():
        try:
            target.abort(key, upload_id)
        except NotFoundError:
            continue
        aborted.append((key, upload_id))
    return aborted
