"""Any phase as a Prefect subflow: one task per step (with a rollback hook), then one gate task.

Flows orchestrate; the phase (ferry/phases/) computes. This module knows phases only through
the Phase contract, so a phase registered anywhere runs here without a flow of its own.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.transactions import get_transaction

from ferry.audit import AuditFolder
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


# Per running phase (by its run's audit folder): set when the run is interrupted (Ctrl-C, SIGTERM, a cancel
# from the UI), so that steps running in task threads wind down, keeping what they verified.
_stopping: dict[str, threading.Event] = {}


@task(name="phase-step", cache_policy=NO_CACHE)
def run_step(plan_path: str, audit_root: str, phase: str, step: str) -> dict[str, Any]:
    """One step of a phase; its transaction keeps what the rollback hook needs."""
    transaction = get_transaction()
    for key, value in {"plan_path": plan_path, "audit_root": audit_root, "phase": phase, "step": step}.items():
        transaction.set(key, value)
    stopping = _stopping.setdefault(f"{audit_root}:{phase}", threading.Event())
    return _load(plan_path, phase).run(step, AuditFolder(Path(audit_root)), PrefectReporter(stopping))


@run_step.on_rollback
def _undo_step(transaction) -> None:  # noqa: ANN001 - Prefect passes the task's transaction
    phase = _load(transaction.get("plan_path"), transaction.get("phase"))
    phase.rollback(Path(transaction.get("audit_root")), [transaction.get("step")])


@task(name="gate", cache_policy=NO_CACHE)
def run_gate(plan_path: str, audit_root: str, phase: str) -> list[dict]:
    """The phase's gate after every step; results as dicts (they cross a task boundary)."""
    return [r.to_dict() for r in _load(plan_path, phase).gate(AuditFolder(Path(audit_root)))]


@flow(name="phase")
def phase_flow(plan_path: str, audit_root: str, phase: str) -> dict[str, list[dict]]:
    """Run every step of the phase (one task each, retried on transient errors only), then its gate.

    Returns the steps' summaries and the gate's results.
    """
    loaded = load_plan(Path(plan_path))
    steps = open_phase(loaded, phase).steps()
    options = transient_retries(loaded)
    stopping = _stopping.setdefault(f"{audit_root}:{phase}", threading.Event())
    try:
        futures = [
            run_step.with_options(task_run_name=f"{phase} {step!r}" if step else phase, **options).submit(
                plan_path, audit_root, phase, step
            )
            for step in steps
        ]
        summaries = [future.result() for future in futures]
    except BaseException:
        # Interrupted (or failed) while steps run: they stop now, before Prefect waits for their threads.
        stopping.set()
        raise
    finally:
        _stopping.pop(f"{audit_root}:{phase}", None)
    AuditFolder(Path(audit_root)).write_json(phase, "summary.json", summaries)
    gate = run_gate.with_options(task_run_name=f"{phase} gate")(plan_path, audit_root, phase)
    return {"summaries": summaries, "gate": gate}
