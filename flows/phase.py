"""Any phase as a Prefect subflow: one task per step, then one gate task.

Flows orchestrate; the phase (ferry/phases/) computes. This module knows phases only through
the Phase contract, so a phase registered anywhere runs here without a flow of its own. No task
has a rollback hook: undoing is ferry's decision, taken by the pipeline after the gate.
"""

from __future__ import annotations

import contextlib
import contextvars
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import Flow, flow, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from ferry.audit import AuditFolder
from ferry.errors import FerryError, PermanentError, StepFailed, TransientError
from ferry.interrupts import failpoint
from ferry.phases.base import Phase, Placement, Progress, Reporter, StepSpec, open_phase
from ferry.plan import load_plan
from flows import cluster
from flows.retry import transient_retries


def _load(plan_path: str, name: str) -> Phase:
    """The named phase of the plan at plan_path (on the driver: the steps travel as StepSpecs)."""
    return open_phase(load_plan(Path(plan_path)), name)


class _ArtifactProgress(Progress):
    def __init__(self, key: str, description: str, record: Callable[[float], object]):
        self.artifact = create_progress_artifact(0.0, key=key, description=description)
        self.record = record

    def update(self, percent: float) -> None:
        update_progress_artifact(self.artifact, percent)
        self.record(percent)


class PrefectReporter(Reporter):
    """A step's reports and progress as Prefect artifacts of its task run.

    Each gauge also writes its percentage into the phase's audit folder (`progress-KEY`), where the phase's merged
    gauge on the driver reads it (`_MergedProgress`): the steps may run in other processes.
    """

    def __init__(self, stopping: threading.Event, audit: AuditFolder, phase: str):
        super().__init__(stopping)
        self.audit, self.phase = audit, phase

    def markdown(self, key: str, text: str, description: str) -> None:
        create_markdown_artifact(text, key=key, description=description)

    def progress(self, key: str, description: str) -> Progress:
        return _ArtifactProgress(
            key, description, lambda percent: self.audit.write_text(self.phase, f"progress-{key}", f"{percent}\n")
        )


class _MergedProgress:
    """One gauge for a phase whose steps run at once: the mean of the steps' own gauges (a step whose gauge has
    not shown yet counts 0), read every two seconds from what they write in the phase's audit folder. None of it
    when the steps show no gauge."""

    def __init__(self, folder: Path, phase: str, steps: int):
        self.folder, self.phase, self.steps = folder, phase, steps
        self.artifact: Any = None
        self._stop = threading.Event()
        # In a copy of this context: the subflow's run context (the API it reports to) reaches the gauge.
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._poll,), daemon=True)

    def __enter__(self) -> _MergedProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._show()  # the steps' last word (100 each when they all finished)

    def _poll(self) -> None:
        while not self._stop.wait(2.0):
            self._show()

    def _show(self) -> None:
        shown = []
        for record in self.folder.glob("progress-*"):
            try:
                shown.append(float(record.read_text()))
            except (OSError, ValueError):  # written whole (an atomic rename), but a step may rewrite it now
                continue
        if not shown:
            return
        if self.artifact is None:
            self.artifact = create_progress_artifact(
                0.0, key=self.phase.replace("_", "-"), description=f"{self.phase} progress, all {self.steps} steps"
            )
        update_progress_artifact(self.artifact, min(100.0, sum(shown) / self.steps))


# Per running phase (by its run's audit folder): set when the phase ends early (Ctrl-C, SIGTERM, a cancel from
# the UI, or a step that failed), so that steps running in task threads wind down, keeping what they verified.
_stopping: dict[str, threading.Event] = {}


def _run_step(spec: StepSpec, audit_root: str, stop_event: str | None) -> dict[str, Any]:
    """One step of a phase, wherever the task runner puts it; it journals in the audit folder what undoing it
    needs. Its StepResult as JSON (it crosses a task boundary). On a Dask worker, the phase's stop reaches it
    through the cluster (stop_event)."""
    stopping = _stopping.setdefault(f"{audit_root}:{spec.phase}", threading.Event())
    ending = "the phase is ending (an interrupt, or another step failed)"
    if stopping.is_set():  # a retry or a queued step after that: it does not start
        raise PermanentError(f"not started: {ending}")
    spec = spec.checked()
    visible = Path(audit_root).is_dir()
    if not visible and spec.needs_audit_folder:
        # A worker on another machine: the journals a rollback reads and the shards' transfer state would be left
        # on its disk.
        raise PermanentError(
            f"this worker does not see the run's audit folder {audit_root}: give every worker the plan's state "
            "directory at the same path (a shared filesystem), or name phases.data_sync.state_url"
        )
    with contextlib.ExitStack() as scratch, cluster.following(stop_event, stopping):
        # A step that keeps its files elsewhere (data_sync's state_url) writes them in a folder of the run's name
        # on this worker's disk while it runs.
        root = Path(audit_root)
        if not visible:
            root = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="ferry-run-"))) / root.name
        try:
            audit = AuditFolder(root)
            result = spec.run(audit, PrefectReporter(stopping, audit, spec.phase))
        except TransientError as exc:
            if stopping.is_set():
                # No retry of this step starts now: the next run resumes it.
                raise PermanentError(f"stopped: {ending}: {exc}") from exc
            raise
    failpoint(f"{spec.phase}:step", stopping)
    return result.model_dump(mode="json")


@task(name="gate", cache_policy=NO_CACHE)
def run_gate(plan_path: str, audit_root: str, phase: str) -> list[dict]:
    """The phase's gate after every step; results as dicts (they cross a task boundary)."""
    failpoint(f"{phase}:gate", _stopping.get(f"{audit_root}:{phase}"))
    return [r.to_dict() for r in _load(plan_path, phase).gate(AuditFolder(Path(audit_root)))]


def _phase_flow(plan_path: str, audit_root: str, phase: str) -> dict[str, list[dict]]:
    """Run every step of the phase (one task each, retried on transient errors only), then its gate.

    Returns the steps' summaries and the gate's results.
    """
    loaded = load_plan(Path(plan_path))
    runner = open_phase(loaded, phase)
    options = transient_retries(loaded)
    stopping = _stopping.setdefault(f"{audit_root}:{phase}", threading.Event())
    runner.prepare()
    steps, placement = runner.steps(), runner.placement()
    stop_event = cluster.stop_event(placement)
    # The run's budgets (bandwidth, memory; on threads the engine's threads too) divided among the steps that run at
    # once: all of them in this process's threads, as many as the cluster's workers run at once on Dask.
    in_process = placement == Placement()
    at_once = len(steps) if in_process else cluster.workers()
    peers = min(len(steps), at_once) if runner.concurrent_steps else 1
    submitted = []

    def submit(step: str):
        name = f"{phase} {step!r}" if step else phase
        spec = runner.step_spec(step)
        future = run_step.with_options(task_run_name=name, **options).submit(
            spec.divided(peers, in_process=in_process) if peers > 1 else spec, audit_root, stop_event
        )
        submitted.append(future)
        return future

    try:
        try:
            if runner.concurrent_steps:
                # The steps' gauges merged into one, where several run at once (data_sync's shards).
                merged = _MergedProgress(Path(audit_root) / phase, phase, len(steps))
                with merged if len(steps) > 1 else contextlib.nullcontext():
                    summaries = [future.result() for future in [submit(step) for step in steps]]
            else:
                summaries = [submit(step).result() for step in steps]
        except FerryError as exc:
            # A step's own failure after its last retry: ferry's pipeline rolls the phase back for this (and for a
            # gate's FAIL) only. Anything else (a bug, an orchestration error) undoes nothing.
            raise StepFailed(exc) from exc
        AuditFolder(Path(audit_root)).write_json(phase, "summary.json", summaries)
        gate = run_gate.with_options(task_run_name=f"{phase} gate")(plan_path, audit_root, phase)
    except BaseException:
        # Interrupted (or failed) while steps or the gate run: they stop now, before Prefect waits for their
        # threads (or workers). The event stays set (and registered), so that no retry or queued step starts after.
        stopping.set()
        cluster.stop(placement, stop_event)
        # Workers do not stop with this process as its threads do: the steps still running there end (keeping what
        # they verified, journalled) before anything decides to undo what they journal.
        cluster.drain(placement, submitted)
        raise
    _stopping.pop(f"{audit_root}:{phase}", None)
    return {"summaries": summaries, "gate": gate}


# Flow and task under names of their own: a Dask worker, given a step (with the flow in its context), finds both
# functions by module and name (by value they would carry this module's globals, the stop events' locks among them).
phase_flow = flow(name="phase")(_phase_flow)
run_step = task(name="phase-step", cache_policy=NO_CACHE)(_run_step)


def phase_subflow(phase: Phase) -> Flow:
    """The phase's subflow, named for it, on the task runner its placement names (threads unless a Dask cluster)."""
    subflow = phase_flow.with_options(name=phase.name, flow_run_name=phase.name)
    placement = phase.placement()
    if placement == Placement():
        return subflow
    return subflow.with_options(task_runner=cluster.task_runner(placement))
