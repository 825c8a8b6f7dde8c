"""The scheduler: two lanes of work (small objects, large parts) under one byte budget, and the rate limiter."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from connectors.base import ObjectInfo, Part
from connectors.transfer.diff import Action


class LargeJob:
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


class Scheduler:
    """Two lanes (small objects, large parts) feeding N workers under one byte budget.

    Large parts may hold at most three quarters of the budget, so small objects always have room
    to run beside them (small and large overlap instead of taking turns). Three conditions share
    one lock so a state change wakes only who it concerns: workers wait for work, the producer for
    room in the small lane, the producer for a large-object slot. A worker that takes a task wakes
    one more if work is left, rather than waking all.
    """

    def __init__(self, budget: int, max_queued: int, run_part: Callable[[LargeJob, int], None]):
        lock = threading.Lock()
        self.work = threading.Condition(lock)
        self.room = threading.Condition(lock)
        self.slots = threading.Condition(lock)
        self.run_part = run_part
        self.small: deque[tuple[int, Callable[[], None]]] = deque()
        self.large: deque[LargeJob] = deque()
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

    def add_large(self, job: LargeJob) -> None:
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

    def _run_large(self, job: LargeJob, number: int, cost: int) -> None:
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


class RateLimiter:
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
