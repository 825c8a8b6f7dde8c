"""The engine's scheduler on its own: the byte budget, the large lane's share, the end of work, large slots."""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable

from connectors.transfer.scheduler import Parts, Scheduler


class Waiter:
    """Calls fn on a thread: says whether it is still waiting, and what it returned once it did."""

    def __init__(self, fn: Callable[[], object]):
        self._box: list[object] = []
        self._thread = threading.Thread(target=lambda: self._box.append(fn()), daemon=True)
        self._thread.start()

    def waiting(self, seconds: float = 0.1) -> bool:
        self._thread.join(seconds)
        return self._thread.is_alive()

    def result(self) -> object:
        self._thread.join(5)
        assert not self._thread.is_alive(), "still waiting"
        return self._box[0]


def noop() -> None:
    pass


def test_a_task_bigger_than_the_budget_waits_for_the_whole_budget_and_runs_alone() -> None:
    sched = Scheduler(budget=100, max_queued=10)
    sched.submit(60, noop)
    sched.submit(150, noop)
    sched.submit(10, noop)
    assert sched.take()[0] == 60
    big = Waiter(sched.take)
    assert big.waiting()  # 150 does not fit beside the 60 held, and the 10 queues behind it
    sched.release(60)
    assert big.result()[0] == 150
    small = Waiter(sched.take)
    assert small.waiting()  # nothing runs beside it
    sched.release(150)
    assert small.result()[0] == 10


def test_large_parts_leave_a_quarter_of_the_budget_to_queued_small_work() -> None:
    sched = Scheduler(budget=100, max_queued=10)
    ran = []
    parts = Parts(deque(range(1, 11)), cost=20, run=ran.append)
    sched.add_large(parts)
    small = [lambda: None for _ in range(5)]
    for fn in small:
        sched.submit(20, fn)
    taken = [sched.take() for _ in range(5)]
    # Large parts go first, up to three quarters (60 of 75); the small objects fill the rest.
    assert [fn in small for _, fn in taken] == [False, False, False, True, True]
    for cost, fn in taken:
        fn()
        sched.release(cost)
    assert ran == [1, 2, 3]
    assert sched.large_held == 0 and sched.available == 100


def test_one_large_part_above_the_share_still_runs_when_no_other_is_held() -> None:
    sched = Scheduler(budget=100, max_queued=10)
    sched.add_large(Parts(deque([1, 2]), cost=90, run=lambda number: None))
    cost, fn = sched.take()
    assert cost == 90
    second = Waiter(sched.take)
    assert second.waiting()
    fn()
    sched.release(cost)
    assert second.result()[0] == 90


def test_take_returns_none_only_after_close_and_drain_with_no_large_object_open() -> None:
    idle = Scheduler(budget=100, max_queued=10)
    waiter = Waiter(idle.take)
    assert waiter.waiting()  # not closed: more work may come
    idle.close()
    assert waiter.result() is None

    sched = Scheduler(budget=100, max_queued=10)
    slot = sched.open_large_slot(None)
    sched.submit(0, noop)
    sched.close()
    assert sched.take() == (0, noop)  # closed, but not drained
    waiter = Waiter(sched.take)
    assert waiter.waiting()  # drained, but a large object is open: its parts may still come
    ran = []
    sched.add_large(Parts(deque([1]), cost=0, run=ran.append))
    cost, fn = waiter.result()
    fn()
    sched.release(cost)
    assert ran == [1]
    last = Waiter(sched.take)
    assert last.waiting()
    slot.release()
    assert last.result() is None


def test_dropped_parts_are_never_handed_out() -> None:
    sched = Scheduler(budget=100, max_queued=10)
    parts = Parts(deque([1, 2, 3]), cost=10, run=lambda number: None)
    sched.add_large(parts)
    sched.drop(parts)
    sched.submit(5, noop)
    assert sched.take() == (5, noop)


def test_a_large_slot_with_a_limit_waits_for_a_release_and_is_released_once() -> None:
    sched = Scheduler(budget=100, max_queued=10)
    first = sched.open_large_slot(1)
    second = Waiter(lambda: sched.open_large_slot(1))
    assert second.waiting()
    assert first.release() is True
    held = second.result()
    assert first.release() is False  # a second release gives nothing back...
    third = Waiter(lambda: sched.open_large_slot(1))
    assert third.waiting()  # ...so the slot the second holds stays taken
    assert held.release() is True
    assert third.result().held
    assert sched.open_large == 1


def test_workers_never_hold_more_than_the_budget_unless_a_task_runs_alone() -> None:
    budget, rng = 100, random.Random(7)
    sched = Scheduler(budget=budget, max_queued=8)
    lock = threading.Lock()
    running: list[int] = []
    seen: list[tuple[int, int]] = []  # (bytes held while a task ran, tasks running)

    def task(cost: int) -> Callable[[], None]:
        def run() -> None:
            with lock:
                running.append(cost)
                seen.append((sum(running), len(running)))
            with lock:
                running.remove(cost)

        return run

    def worker() -> None:
        while (item := sched.take()) is not None:
            cost, fn = item
            try:
                fn()
            finally:
                sched.release(cost)

    workers = [threading.Thread(target=worker) for _ in range(6)]
    for w in workers:
        w.start()
    slot = sched.open_large_slot(None)
    sched.add_large(Parts(deque(range(1, 41)), cost=30, run=lambda number: task(30)()))
    for _ in range(200):
        cost = 150 if rng.random() < 0.02 else rng.randint(0, 40)
        sched.submit(cost, task(cost))
    slot.release()
    sched.close()
    for w in workers:
        w.join(10)
    assert not any(w.is_alive() for w in workers)
    assert len(seen) == 240
    assert all(held <= budget or count == 1 for held, count in seen)
    assert sched.available == budget and sched.large_held == 0


def test_abort_drops_queued_work_frees_every_waiter_and_ends_the_workers() -> None:
    sched = Scheduler(budget=100, max_queued=1)
    sched.submit(10, noop)
    producer = Waiter(lambda: sched.submit(10, noop))  # the small lane is full: it waits
    sched.add_large(Parts(deque([1, 2, 3]), 10, lambda number: None))
    slot = sched.open_large_slot(None)
    blocked = Waiter(lambda: sched.open_large_slot(1))  # one large object open, limit 1: it waits
    running = sched.take()  # a task a worker is running when the interrupt comes
    assert running is not None and producer.waiting() and blocked.waiting()
    sched.abort()
    producer.result()
    blocked.result()
    # Queued work is gone; the workers' next take() ends them, although a large slot is still held.
    assert sched.take() is None and not sched.small and not sched.large
    sched.submit(10, noop)  # a late submission is dropped, it does not wait
    assert sched.take() is None
    sched.release(running[0])
    assert slot.release()
