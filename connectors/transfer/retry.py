"""The two retry policies: transient errors (tenacity, with the reads that run under it: listings and
whole-object hashes), and checksum mismatches (copied once more, then failed)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import structlog
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    stop_never,
    wait_random_exponential,
)

from connectors.base import MD5, MD5_OF_PARTS, Connector, ObjectInfo
from connectors.checksum import crc32c, label, md5_of_parts
from connectors.transfer.settings import TransferSettings
from ferry.errors import ChecksumMismatch, TransientError

log = structlog.get_logger("ferry.transfer")
T = TypeVar("T")


def retrying(settings: TransferSettings, on_retry: Callable[[], None] = lambda: None) -> Retrying:
    """The one retry policy: TransientError only, exponential backoff with jitter, Retry-After honoured, for
    retry_budget_s from the first attempt (no sleep that would end past it) and at most `retries` attempts."""
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
        stop=stop_before_delay(settings.retry_budget_s)
        | (stop_after_attempt(settings.retries) if settings.retries else stop_never),
        wait=wait,
        before_sleep=before_sleep,
        reraise=True,
    )


# Objects taken from a listing per call under the retry policy: a call costs tens of microseconds,
# too much per object, and this is about one page of an object store's listing.
_LIST_BATCH = 1000


class _ResumableListing:
    """connector.list() in batches from start_after; after a failure, the next batch lists again after the last key
    seen."""

    def __init__(self, connector: Connector, prefix: str, start_after: str):
        self._connector = connector
        self._prefix = prefix
        self._items: Iterator[ObjectInfo] | None = None
        self._batch: list[ObjectInfo] = []
        self._last = start_after

    def next_batch(self) -> list[ObjectInfo]:
        """Up to _LIST_BATCH more objects, [] at the end; what a failed call gathered waits for the next."""
        if self._items is None:
            self._items = iter(self._connector.list(prefix=self._prefix, start_after=self._last))
        try:
            for info in self._items:
                self._batch.append(info)
                self._last = info.key
                if len(self._batch) == _LIST_BATCH:
                    break
        except TransientError:
            self._items = None
            raise
        batch, self._batch = self._batch, []
        return batch


def listing(
    connector: Connector, settings: TransferSettings, on_retry: Callable[[], None] = lambda: None
) -> Iterator[ObjectInfo]:
    """connector.list() of the settings' prefix and key range under the retry policy, resumed after the last key
    seen; each batch has all its attempts. The next batch is listed in a thread while this one is used
    (read_ahead), so two listings joined key by key, or a listing and the work on what it lists, overlap instead
    of taking turns on the network. A sampled dry run, which stops part-way, lists in turn: a batch listed ahead
    would be a request its estimate counts and never used."""
    dropped = threading.Event()
    # Dropped, the listing waits out no backoff and sends no further attempt.
    policy = retrying(settings, on_retry).copy(sleep=dropped.wait)
    pages = _ResumableListing(connector, settings.prefix, settings.start_after)
    start, end = settings.key_range

    def attempt() -> list[ObjectInfo]:
        return [] if dropped.is_set() else pages.next_batch()

    def batches() -> Iterator[list[ObjectInfo]]:
        while batch := policy(attempt):
            if start and batch[0].key <= start:
                # A store that ignored StartAfter: two ranges would both copy these keys.
                batch = [info for info in batch if info.key > start]
            if end and batch and batch[-1].key > end:
                # The range ends in this batch: no more pages are asked for.
                yield [info for info in batch if info.key <= end]
                return
            yield batch

    with contextlib.closing(batches() if settings.sample is not None else read_ahead(batches(), dropped)) as listed:
        for batch in listed:
            yield from batch


_END = object()


def read_ahead(items: Iterator[T], dropped: threading.Event) -> Iterator[T]:
    """items as they come, the next one produced in a thread (in this context) while the caller uses this one.

    An exception comes where it happened in the sequence. Closing the generator (or dropping it) sets dropped
    and stops the thread after the item it is producing: at most two items are made that nobody takes, the one
    waiting and the one in the making.
    """
    ready: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=1)

    def produce() -> None:
        try:
            for item in items:
                ready.put((item, None))
                if dropped.is_set():
                    return
            ready.put((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            ready.put((_END, exc))

    threading.Thread(target=contextvars.copy_context().run, args=(produce,), name="read-ahead", daemon=True).start()
    try:
        while True:
            item, exc = ready.get()
            if exc is not None:
                raise exc
            if item is _END:
                return
            yield item  # type: ignore[misc]
    finally:
        dropped.set()
        # The producer is blocked on a full queue at most once, and after that put it sees dropped.
        with contextlib.suppress(queue.Empty):
            ready.get_nowait()


def hash_object(connector: Connector, info: ObjectInfo, chunk: int, policy: Retrying) -> str:
    """Read an object one chunk at a time and return its checksum label."""
    checksum = read_digests(connector, info, chunk, policy).checksum
    assert checksum is not None
    return checksum


def read_digests(
    connector: Connector, info: ObjectInfo, chunk: int, policy: Retrying, *, md5: bool = False,
    part_size: int | None = None,
) -> ObjectInfo:  # fmt: skip
    """info with what one read of the object, a chunk at a time, gives: its CRC32C as the checksum, and as digests
    its MD5 (md5) and the MD5 of its MD5s per part_size bytes (what S3 makes a multipart ETag of)."""
    value, offset = 0, 0
    whole = hashlib.md5(usedforsecurity=False) if md5 else None
    parts: list[bytes] = []
    part, left = None, 0
    while offset < info.size:
        length = min(chunk, info.size - offset)
        data = policy.copy()(connector.open_range, info.key, offset, length)
        value = crc32c(data, value)
        if whole is not None:
            whole.update(data)
        view = memoryview(data) if part_size else memoryview(b"")
        while view:  # the part boundaries, wherever they fall in the chunks
            if part is None:
                part, left = hashlib.md5(usedforsecurity=False), part_size or 0
            part.update(view[:left])
            view, left = view[left:], left - len(view[:left])
            if not left:
                parts.append(part.digest())
                part = None
        offset += length
    if part is not None:
        parts.append(part.digest())
    digests = {}
    if whole is not None:
        digests[MD5] = whole.hexdigest()
    if part_size:
        digests[MD5_OF_PARTS] = md5_of_parts(parts)
    return dataclasses.replace(info, checksum=label(value), digests=digests)


class Recopy:
    """The one answer to a checksum mismatch: copy once more (counted and logged); a second one fails the copy."""

    def __init__(self, on_recopy: Callable[[], None]):
        self._on_recopy = on_recopy

    def again(self, attempt: int, key: str, exc: ChecksumMismatch) -> bool:
        """True if a copy whose attempt-th try ended in exc gets another try; False if it fails with exc."""
        if attempt > 1:
            return False
        log.warning("checksum mismatch, copying again", key=key, error=str(exc))
        self._on_recopy()
        return True

    def run(self, key: str, copy: Callable[[], T]) -> T:
        """copy(), and once more if it ends in a checksum mismatch."""
        attempt = 1
        while True:
            try:
                return copy()
            except ChecksumMismatch as exc:
                if not self.again(attempt, key, exc):
                    raise
                attempt += 1
