"""Interrupts (Ctrl-C, SIGTERM) held off where stopping half-way would leave a lie, and the failpoints tests stop at.

An interrupt never undoes anything: the pipeline stops and the same command resumes. Two places
must not be cut in the middle: the run log's commit record (an instant), and a rollback, which
stops between two items with the ones it undid journalled. `deferred()` holds SIGINT and SIGTERM
there; a second signal while one is held is not held (a hung request stays interruptible).

A failpoint is a named place in the code where a test stops the process on purpose, as etcd's
gofail does: `FERRY_FAILPOINTS=gate,commit` makes `failpoint("iam:gate")` say so on stderr and wait
there until the process is interrupted or killed (at most `FERRY_FAILPOINT_WAIT_S`, 300 s). Unset,
it costs one environment lookup. The points: each phase's `step` (a step done), `gate` and `commit`;
inside steps `iam:published`, `transfer:part` (a part recorded: mid-object), `transfer:state-write`
(inside the state's transaction), `images:pushed` (pushed, not yet journalled), `manifests:mid-wave`
(one object applied), `golive:checkpoint` (written, not yet read back or cleaned up); and
`rollback-item` between two items of a rollback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from ferry.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")


class Held(threading.Event):
    """Says whether an interrupt arrived while held; `signum` is the one still to deliver (None once taken).

    The signal handler only assigns attributes: it takes no lock (Event.set() would, and the main thread
    it interrupts may hold that lock), so is_set() and wait() read the flag instead.
    """

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None
        self.arrived = False

    def hold(self, signum: int, frame: object) -> None:
        if self.arrived:
            # The second one: the operator insists, and whatever runs now may be stuck on the network.
            self.signum = None
            raise Interrupted(signum)
        self.signum, self.arrived = signum, True

    def is_set(self) -> bool:
        return self.arrived

    def set(self) -> None:
        self.arrived = True

    def clear(self) -> None:
        self.arrived = False

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.arrived and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.01 if deadline is None else max(0.0, min(0.01, deadline - time.monotonic())))
        return self.arrived


@contextlib.contextmanager
def deferred() -> Iterator[Held]:
    """Hold SIGINT and SIGTERM while inside; on leaving, one that arrived is delivered to the previous handler.

    Code inside polls the Held event (`one_by_one`) to stop early on its own terms. Outside the main
    thread signals cannot be caught here, and the event is never set.
    """
    held = Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = {}
    try:
        for sig in SIGNALS:
            # An ignored signal stays ignored (`nohup`, a background job), and one whose handler Python did not
            # install cannot be put back: neither is held.
            if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                previous[sig] = signal.signal(sig, held.hold)
        yield held
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held.signum is not None:
            # Not taken by one_by_one: what would have happened then happens now.
            signum, held.signum = held.signum, None
            signal.raise_signal(signum)


def one_by_one(items: Iterable[T], stopping: threading.Event | None) -> Iterator[T]:
    """The items of a rollback, stopping between two of them once stopping is set (raises Interrupted); with
    stopping None (a dry run) simply the items.

    The interrupt is taken there: leaving `deferred()` does not deliver it again.
    """
    for index, item in enumerate(items):
        if index and stopping is not None:
            failpoint("rollback-item", stopping)
            if stopping.is_set():
                signum = getattr(stopping, "signum", None) or signal.SIGINT
                if isinstance(stopping, Held):
                    stopping.signum = None
                raise Interrupted(signum)
        yield item


def _armed() -> set[str]:
    return {name.strip() for name in os.environ.get("FERRY_FAILPOINTS", "").split(",") if name.strip()}


def failpoint(name: str, stopping: threading.Event | None = None) -> None:
    """If FERRY_FAILPOINTS names this point: say so on stderr, then wait for an interrupt (or stopping) here.

    A point is named `phase:point` (`data_sync:gate`, `images:pushed`) or `point`; FERRY_FAILPOINTS may name it
    either way: `gate` arms the gate of every phase, `images:gate` that of images alone.
    """
    armed = _armed()
    if not armed:
        return
    hit = name if name in armed else name.partition(":")[2] if name.partition(":")[2] in armed else None
    if hit is None:
        return
    # Straight to the file descriptor: Prefect captures print() and may buffer its log handlers.
    os.write(2, f"ferry failpoint: {hit}\n".encode())
    deadline = time.monotonic() + float(os.environ.get("FERRY_FAILPOINT_WAIT_S", "300"))
    while time.monotonic() < deadline:
        # In the main thread a signal's handler raises out of this sleep; elsewhere the stop event ends it.
        if stopping is not None and stopping.wait(0.05):
            return
        if stopping is None:
            time.sleep(0.05)
