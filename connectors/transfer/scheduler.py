"""The scheduler: two lanes of work (small objects, large parts) under one byte budget, and the rate limiter."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Task = tuple[int, Callable[[], None]]


@dataclass(eq=False)
class Parts:
    """The parts of one large object waiting for workers: their numbers, the budget one holds, what runs one."""

    numbers: deque[int]
    cost: int
    run: Callable[[int], None]


class Slot:
    """One large object's place among those in flight; release() gives it back once, later calls do nothing."""

    def __init__(self, scheduler: Scheduler):
        self._scheduler = scheduler
        self.held = True

    def release(self) -> bool:
        """Give the slot back; True the first time, False after."""
        sched = self._scheduler
        with sched.slots:
            if not self.held:
                return False
            self.held = False
            sched.open_large -= 1
            sched.slots.notify()
            if sched.closed and sched.open_large == 0:
                sched.work.notify_all()
        return True


class Scheduler:
    """Two lanes (small objects, large parts) feeding N workers under one byte budget.

    Large parts may hold at most three quarters of the budget, so small objects always have room
    to run beside them (small and large overlap instead of taking turns). Three conditions share
    one lock so a state change wakes only who it concerns: workers wait for work, the producer for
    room in the small lane, the producer for a large-object slot. A worker that takes a task wakes
    one more if work is left, rather than waking all.
    """

    def __init__(self, budget: int, max_queued: int):
        lock = threading.Lock()
        self.work = threading.Condition(lock)
        self.room = threading.Condition(lock)
        self.slots = threading.Condition(lock)
        self.small: deque[Task] = deque()
        self.large: deque[Parts] = deque()
        self.budget = budget
        self.available = budget
        self.large_share = budget * 3 // 4
        self.large_held = 0
        self.max_queued = max_queued
        self.open_large = 0
        self.closed = False
        self.aborted = False

    def submit(self, cost: int, fn: Callable[[], None]) -> None:
        """Queue fn, which holds cost bytes of the budget while it runs; wait while the small lane is full.

        After abort() nothing is queued any more.
        """
        with self.room:
            while len(self.small) >= self.max_queued and not self.aborted:
                self.room.wait()
            if self.aborted:
                return
            self.small.append((cost, fn))
            self.work.notify()

    def add_large(self, parts: Parts) -> None:
        """Queue a large object's parts; they go before small work whenever the budget allows."""
        with self.work:
            self.large.append(parts)
            self.work.notify()

    def drop(self, parts: Parts) -> None:
        """Forget the parts of a large object that no worker has taken yet (the object failed)."""
        with self.work:
            parts.numbers.clear()

    def open_large_slot(self, limit: int | None) -> Slot:
        """Count one more large object in flight; with a limit, wait until one is free."""
        with self.slots:
            while limit is not None and self.open_large >= limit and not self.aborted:
                self.slots.wait()
            self.open_large += 1
        return Slot(self)

    def close(self) -> None:
        """No more submissions: take() returns None once all work is done and no large object is open."""
        with self.work:
            self.closed = True
            self.work.notify_all()

    def abort(self) -> None:
        """Stop: queued work is dropped, tasks running finish, take() returns None, nobody waits any more."""
        with self.work:
            self.aborted = True
            self.small.clear()
            self.large.clear()
            self.work.notify_all()
            self.room.notify_all()
            self.slots.notify_all()

    def _fits(self, cost: int) -> bool:
        # A task larger than the whole budget still runs, alone.
        return cost <= self.available or self.available == self.budget

    def _pop(self) -> Task | None:
        for parts in self.large:
            cost = parts.cost
            in_share = self.large_held + cost <= self.large_share or not self.large_held
            if parts.numbers and self._fits(cost) and in_share:
                number = parts.numbers.popleft()
                self.available -= cost
                self.large_held += cost
                return cost, lambda parts=parts, number=number: self._run_large(parts, number)
        if self.small and self._fits(self.small[0][0]):
            cost, fn = self.small.popleft()
            self.available -= cost
            self.room.notify()
            return cost, fn
        return None

    def take(self) -> Task | None:
        """The next task (its cost and function) for a worker, waiting for one; None when all is done."""
        with self.work:
            while True:
                if self.aborted:
                    return None
                task = self._pop()
                if self.large and not self.large[0].numbers:
                    self.large = deque(p for p in self.large if p.numbers)
                if task is not None:
                    if self.small or self.large:
                        self.work.notify()
                    return task
                if self.closed and not self.small and not self.large and self.open_large == 0:
                    return None
                self.work.wait()

    def _run_large(self, parts: Parts, number: int) -> None:
        try:
            parts.run(number)
        finally:
            with self.work:
                self.large_held -= parts.cost

    def release(self, cost: int) -> None:
        """Give back the budget a finished task held."""
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
        """Wait until amount bytes may pass."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= amount
            debt = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if debt > 0:
            time.sleep(debt)
