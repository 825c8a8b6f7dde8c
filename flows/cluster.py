"""A phase's steps on a Dask cluster: Prefect's Dask task runner (prefect-dask, the `ferry[dask]` extra), the
number of workers that share the run's budgets, and the phase's stop reaching steps that run in other processes.

A local cluster's workers are processes of this machine; an existing scheduler is reached at its address (TLS
unless on this machine: an open scheduler runs any code it is sent, `ferry.plan`'s rule). Workers report their
task runs to the Prefect API, so they need its address: an existing scheduler's workers their own
PREFECT_API_URL; a local cluster's inherit this process's, the temporary server's included.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from prefect import get_client
from prefect.context import FlowRunContext

from ferry.errors import UsageError
from ferry.phases.base import Placement
from flows.console import one_line

EXTRA = "pip install 'ferry[dask]'"
# How ferry's Dask workers run. Dask's sampling profiler calls sys._current_frames() in every worker every 10 ms; on
# CPython 3.11 before 3.11.9 that deadlocks with the garbage collector (python/cpython#106883, dask/distributed#8616):
# measured here, a worker running the engine's 128 threads hung for good, every thread waiting for the GIL that the
# profiler's collection held. ferry's workers are not profiled. Set in this process's Dask config, which a local
# cluster's nannies hand to their workers; a remote cluster's workers need it in their environment
# (DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False: deploy/k8s sets it).
# And each worker runs this module's dask_setup() as it starts (a preload): Dask's log lines there carry an exception
# in one line, not a traceback (a worker whose heartbeat finds the scheduler gone as the cluster closes logs one).
WORKER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.worker.preload": ["flows.cluster"]}


def task_runner(placement: Placement) -> Any:
    """Prefect's Dask task runner for the placement (prefect_dask.DaskTaskRunner)."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise UsageError(f"a Dask runner needs prefect-dask and distributed: {EXTRA}") from None
    import dask

    dask.config.set(WORKER_CONFIG)
    # Dask's own INFO lines (scheduler, nannies, workers starting) are not the run's: warnings only, here and in
    # the worker processes a local cluster starts (they read it from the environment).
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    errors_in_one_line()
    if placement.dask_address:
        if not os.environ.get("PREFECT_API_URL"):
            raise UsageError(
                "phases.data_sync.runner.dask.address: the scheduler's workers report to the Prefect API: set "
                "PREFECT_API_URL (here and on every worker)"
            )
        return DaskTaskRunner(address=placement.dask_address)
    if not os.environ.get("PREFECT_API_URL"):
        # The temporary server this run started lives in this process: its workers, processes of their own,
        # would each start another and report nowhere. They inherit its address.
        with get_client(sync_client=True) as client:
            os.environ["PREFECT_API_URL"] = str(client.api_url)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        # One step at a time per worker process: the transfer engine runs its own pool of threads inside it.
        cluster_kwargs={
            "n_workers": placement.dask_workers,
            "processes": True,
            "threads_per_worker": 1,
            "dashboard_address": None,
        },
    )


class _OneLine(logging.Formatter):
    """A handler's own format, each record on one line: its exception's one line after the message, no traceback."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return one_line(record, self.inner.format)


def errors_in_one_line() -> None:
    """Give the handlers Dask's logging set up in this process (distributed's, tornado's, bokeh's) _OneLine."""
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "tornado", "bokeh"):
            for handler in logging.getLogger(name).handlers:
                if not isinstance(handler.formatter, _OneLine):
                    handler.setFormatter(_OneLine(handler.formatter or logging.Formatter()))


def dask_setup(worker: Any) -> None:
    """Run by each worker of a cluster ferry starts, as it starts (WORKER_CONFIG's preload)."""
    errors_in_one_line()


def _client() -> Any:
    """The running subflow's Dask client (its placement names a cluster)."""
    from prefect_dask import DaskTaskRunner

    runner = FlowRunContext.get().task_runner
    assert isinstance(runner, DaskTaskRunner), runner
    return runner.client


def workers() -> int:
    """How many steps the cluster runs at once: its workers' threads (one each on a local cluster)."""
    info = _client().scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(worker.get("nthreads", 1) for worker in info.values()))


# How long a stopped phase waits for its steps still running on workers (each stops at its next object or part).
DRAIN_S = 120.0


def drain(placement: Placement, futures: list[Any]) -> None:
    """After stop(): wait until the steps submitted to the cluster have ended, at most DRAIN_S in all (on threads,
    Prefect's own exit waits for them)."""
    if placement == Placement():
        return
    deadline = time.monotonic() + DRAIN_S
    for future in futures:
        with contextlib.suppress(Exception):  # a step's own failure, or the cluster gone: it has ended either way
            future.wait(timeout=max(0.0, deadline - time.monotonic()))


def stop_event(placement: Placement) -> str | None:
    """A name for the cluster-wide event that stops the phase's steps (None on threads: a threading.Event does)."""
    return None if placement == Placement() else f"ferry-stop-{uuid.uuid4().hex}"


def stop(placement: Placement, name: str | None) -> None:
    """Set the cluster-wide stop event: steps running on workers stop soon, keeping what they verified."""
    if name is None:
        return
    from distributed import Event

    with contextlib.suppress(Exception):  # the cluster may be gone already (its workers stop with it)
        Event(name, client=_client()).set()


@contextlib.contextmanager
def following(name: str | None, stopping: threading.Event) -> Iterator[None]:
    """While a step runs on a Dask worker, set stopping once the driver sets the cluster-wide event `name`."""
    if name is None:
        yield
        return
    from distributed import Event, get_client

    # The worker's client, resolved here in the step's own thread: an Event finds it lazily, by the calling thread,
    # and the watcher's thread is not one of the worker's (its every wait failed: the stop never came).
    event, done = Event(name, client=get_client()), threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(Exception):  # a timeout, or the scheduler briefly away: look again
                if event.wait(timeout=1.0):
                    stopping.set()
                    return

    watcher = threading.Thread(target=watch, daemon=True, name="ferry-stop-watch")
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(timeout=5)
