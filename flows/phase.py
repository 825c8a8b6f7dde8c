"""Any phase as a Prefect subflow: one task per step, then one gate task.

Flows orchestrate; the phase (ferry/phases/) computes. This module knows phases only through
the Phase contract, so a phase registered anywhere runs here without a flow of its own. No task
has a rollback hook: undoing is ferry's decision, taken by the pipeline after the gate.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from ferry.audit import AuditFolder
from ferry.errors import FerryError, PermanentError, StepFailed, TransientError
from ferry.interrupts import failpoint
from ferry.phases.base import Phase, Progress, Reporter, open_phase
from ferry.plan import load_plan
from flows.retry import transient_retries


def _load(plan_path: str, name: str) -> Phase:
    """The named phase of the plan at plan_path (each task loads the plan itself: tasks may run elsewhere)."""
    return open_phase(load_plan(Path(plan_path)), name)


class _ArtifactProgress(Progress):
    def __init__(self, key: str, description: str):
        self.artifact = create_progress_artifact(0.0, key=key, description=description)

    def update(self, percent: float) -> None:
        update_progress_artifact(self.artifact, percent)


class PrefectReporter(Reporter):
    """A phase's reports and progress as Prefect artifacts of the running flow."""

    def markdown(self, key: str, text: str, description: str) -> None:
        create_markdown_artifact(text, key=key, description=description)

    def progress(self, key: str, description: str) -> Progress:
        return _ArtifactProgress(key, description)


# Per running phase (by its run's audit folder): set when the phase ends early (Ctrl-C, SIGTERM, a cancel from
# the UI, or a step that failed), so that steps running in task threads wind down, keeping what they verified.
_stopping: dict[str, threading.Event] = {}


@task(name="phase-step", cache_policy=NO_CACHE)
def run_step(plan_path: str, audit_root: str, phase: str, step: str) -> dict[str, Any]:
    """One step of a phase; it journals in the audit folder what undoing it needs. Its StepResult as JSON (it
    crosses a task boundary)."""
    stopping = _stopping.setdefault(f"{audit_root}:{phase}", threading.Event())
    ending = "the phase is ending (an interrupt, or another step failed)"
    if stopping.is_set():  # a retry or a queued step after that: it does not start
        raise PermanentError(f"not started: {ending}")
    try:
        result = _load(plan_path, phase).run(step, AuditFolder(Path(audit_root)), PrefectReporter(stopping))
    except TransientError as exc:
        if stopping.is_set():
            # No retry of this step starts now: the next run resumes it.
            raise PermanentError(f"stopped: {ending}: {exc}") from exc
        raise
    failpoint(f"{phase}:step", stopping)
    return result.model_dump(mode="json")


@task(name="gate", cache_policy=NO_CACHE)
def run_gate(plan_path: str, audit_root: str, phase: str) -> list[dict]:
    """The phase's gate after every step; results as dicts (they cross a task boundary)."""
    failpoint(f"{phase}:gate", _stopping.get(f"{audit_root}:{phase}"))
    return [r.to_dict() for r in _load(plan_path, phase).gate(AuditFolder(Path(audit_root)))]


@flow(name="phase")
def phase_flow(plan_path: str, audit_root: str, phase: str) -> dict[str, list[dict]]:
    """Run every step of the phase (one task each, retried on transient errors only), then its gate.

    Returns the steps' summaries and the gate's results.
    """
    loaded = load_plan(Path(plan_path))
    runner = open_phase(loaded, phase)
    options = transient_retries(loaded)
    stopping = _stopping.setdefault(f"{audit_root}:{phase}", threading.Event())

    def submit(step: str):
        name = f"{phase} {step!r}" if step else phase
        return run_step.with_options(task_run_name=name, **options).submit(plan_path, audit_root, phase, step)

    try:
        try:
            if runner.concurrent_steps:
                summaries = [future.result() for future in [submit(step) for step in runner.steps()]]
            else:
                summaries = [submit(step).result() for step in runner.steps()]
        except FerryError as exc:
            # A step's own failure after its last retry: ferry's pipeline rolls the phase back for this (and for a
            # gate's FAIL) only. Anything else (a bug, an orchestration error) undoes nothing.
            raise StepFailed(exc) from exc
        AuditFolder(Path(audit_root)).write_json(phase, "summary.json", summaries)
        gate = run_gate.with_options(task_run_name=f"{phase} gate")(plan_path, audit_root, phase)
    except BaseException:
        # Interrupted (or failed) while steps or the gate run: they stop now, before Prefect waits for their
        # threads. The event stays set (and registered), so that no retry or queued step starts after this.
        stopping.set()
        raise
    _stopping.pop(f"{audit_root}:{phase}", None)
    return {"summaries": summaries, "gate": gate}
