"""The retry policy for transient errors, and the reads that run under it: listings and whole-object hashes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from connectors.base import Connector, ObjectInfo
from connectors.checksum import crc32c, label
from connectors.transfer.settings import TransferSettings
from ferry.errors import TransientError

log = structlog.get_logger("ferry.transfer")


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
