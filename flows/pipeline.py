"""The migration pipeline: the plan's phases in order, each a subflow, a gate after each.

ferry alone decides to undo, once a phase's steps and gate have ended: a failed gate or a step
that failed after its last retry rolls back that phase only (`ferry.phases.rollback`); earlier
committed phases stay as they are. No Prefect transaction or rollback hook runs: Prefect rolls a
transaction back on any exception, an interrupt's or a retried task's included, which deleted
what had been verified. An interrupt anywhere stops the run and undoes nothing. The run log
records each phase's input hash and outcome, so running the plan again skips phases committed
with the same inputs, finishes a rollback that was stopped, and resumes the first phase that did
not commit.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import structlog
from prefect import flow, pause_flow_run, runtime, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import Abort, FlowPauseTimeout, TerminationSignal

from ferry.audit import AuditFolder
from ferry.errors import FerryError, GateFailed, Interrupted, StepFailed, UsageError
from ferry.interrupts import deferred, failpoint
from ferry.lock import held
from ferry.phases.base import Phase, StepResult, open_phase, preflight
from ferry.phases.rollback import PENDING, UNFINISHED, resume, resumed_runs, roll_back
from ferry.plan import LoadedPlan, load_plan
from ferry.results import CheckResult, Status, blocking, gate_status
from ferry.runlog import PhaseStatus, RunLog, RunStatus
from flows.phase import phase_subflow

log = structlog.get_logger("ferry.flows.pipeline")


def new_run_id(plan_path: str) -> str:
    return f"{Path(plan_path).stem}-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}"[:-3]


def _run_name() -> str:
    return runtime.flow_run.parameters.get("run_id") or new_run_id(runtime.flow_run.parameters["plan_path"])


def _approve(phase: Phase, run_id: str, timeout_s: int, runlog: RunLog, digest: str) -> None:
    """Pause the run until someone approves the phase's changes (Prefect UI or `ferry approve`).

    Nothing to change needs no approval. A timeout fails the run before the phase changed anything.
    """
    name, plan = phase.name, phase.loaded.plan.name
    changes = phase.changes()
    if changes.empty:
        log.info("nothing to change: no approval needed", changes=changes.totals)
        return
    if not os.environ.get("PREFECT_API_URL"):
        raise UsageError(
            f"{name} needs an approval, which needs a Prefect server: run `ferry ui` and set PREFECT_API_URL"
        )
    create_markdown_artifact(
        f"# Approval needed: {name}\n\n{changes.text}\n\n"
        f"Resume this run in the Prefect UI or run `ferry approve {run_id}`.",
        key=f"approval-{name.replace('_', '-')}",
        description=f"what {name} will change",
    )
    runlog.set_phase(plan, name, digest, PhaseStatus.WAITING_FOR_APPROVAL, run_id, changes.text)
    log.warning(f"{name} waits for approval: {changes.text} To approve: ferry approve {run_id}", timeout_s=timeout_s)
    try:
        pause_flow_run(timeout=timeout_s, poll_interval=2)
    except FlowPauseTimeout:
        message = f"approval for {name} timed out after {timeout_s} s; nothing was changed"
        runlog.set_phase(plan, name, digest, PhaseStatus.NOT_APPROVED, run_id, message)
        raise FerryError(message) from None
    log.info("approved", phase=name)


@flow(name="migrate", flow_run_name=_run_name, log_prints=True)
def migrate(
    plan_path: str,
    only: list[str] | None = None,
    force: list[str] | None = None,
    run_id: str | None = None,
    approval_timeout_s: int = 3600,
) -> dict:
    """Run the plan's phases in order with a gate after each; return each phase's outcome.

    One run per plan at a time: a second (a scheduled run while the last one still runs, one started by hand) is
    refused with `Busy` before it changes anything.
    """
    loaded = load_plan(Path(plan_path))
    run_id = runtime.flow_run.name or run_id or new_run_id(plan_path)
    loaded.plan.require_phases("only", only)
    loaded.plan.require_phases("force", force)
    with held(loaded.layout.state, "ferry run", run_id):
        return _migrate(loaded, run_id, only, force, approval_timeout_s)


def _migrate(
    loaded: LoadedPlan, run_id: str, only: list[str] | None, force: list[str] | None, approval_timeout_s: int
) -> dict:
    plan = loaded.plan
    runlog = RunLog(loaded.layout.state)
    audit = AuditFolder(loaded.layout.run(run_id))
    audit.write_text("plan", "plan.yaml", loaded.masked())
    runlog.start_run(run_id, plan.name, str(audit.root), str(runtime.flow_run.id or ""))
    structlog.contextvars.bind_contextvars(run_id=run_id)
    outcomes: dict[str, str] = {}
    try:
        with interrupts_as_one():
            outcomes["preflight"] = _preflight(loaded, audit)
            for phase in plan.enabled_phases():
                if only and phase not in only:
                    continue
                structlog.contextvars.bind_contextvars(phase=phase)
                outcomes[phase] = run_one_phase(
                    open_phase(loaded, phase), audit, runlog, run_id, force, approval_timeout_s
                )
        runlog.end_run(run_id, RunStatus.COMPLETED)
    except Interrupted as exc:
        # Also between phases (preflight, an approval wait): nothing is rolled back, the same command resumes.
        runlog.end_run(run_id, RunStatus.INTERRUPTED, str(exc))
        raise
    except BaseException as exc:
        runlog.end_run(run_id, RunStatus.FAILED, str(exc))
        raise
    finally:
        structlog.contextvars.unbind_contextvars("run_id", "phase")
        runlog.close()
    return {"run_id": run_id, "audit": str(audit.root), "phases": outcomes}


@contextmanager
def interrupts_as_one() -> Iterator[None]:
    """Ctrl-C (KeyboardInterrupt), SIGTERM or a cancel from the UI (Prefect's TerminationSignal, or its Abort when
    the run is in this process) as Interrupted."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT) from None
    except TerminationSignal as exc:
        raise Interrupted(exc.signal) from None
    except Abort:  # the server refused a state: the run was cancelled from the UI while in this process
        raise Interrupted(signal.SIGTERM) from None


def run_one_phase(
    runner: Phase,
    audit: AuditFolder,
    runlog: RunLog,
    run_id: str,
    force: list[str] | None,
    approval_timeout_s: int,
    *,
    approved: bool = False,
) -> str:
    """One phase of the run, from the run log's record of it to its commit; its outcome. approved: its approval was
    given already (a cut-over's switch phase, approved with the freeze)."""
    plan, phase = runner.loaded.plan.name, runner.name
    digest = runner.input_hash()
    last = runlog.phase(plan, phase)
    if last is not None and last.status in PENDING:
        # A rollback ferry decided and an interrupt (or a crash) stopped: it is finished before anything else.
        previous = runlog.run(last.run_id)
        if previous is None:
            raise FerryError(
                f"{phase}: the rollback run {last.run_id} decided is not finished and the run log has "
                "no record of that run's audit folder: nothing else ran"
            )
        why = f"finishing the rollback that run {last.run_id} decided"
        roll_back(runner, runlog, last.run_id, Path(previous.audit_dir), last.input_hash, why, log.warning)
        last = runlog.phase(plan, phase)
        if last is not None and last.status in PENDING:
            raise FerryError(f"{phase}: the rollback run {last.run_id} decided is still not finished ({last.detail})")
    unchanged = last and last.status in (PhaseStatus.COMMITTED, PhaseStatus.UNCHANGED) and last.input_hash == digest
    if unchanged and not runner.live_inputs and phase not in (force or []):
        log.info("phase already committed with the same inputs: skipped", committed_by=last.run_id)
        return "skipped"
    if last is not None and last.status in UNFINISHED and last.run_id != run_id:
        # What that run (or the runs it resumed) changed is on the target and in no commit: this run's
        # rollback must cover it too.
        previous = runlog.run(last.run_id)
        if previous is not None:
            resume(audit, phase, Path(previous.audit_dir))
    if phase in runner.loaded.plan.approve_before and not approved:
        try:
            with interrupts_as_one():
                _approve(runner, run_id, approval_timeout_s, runlog, digest)
        except Interrupted as exc:
            runlog.set_phase(
                plan, phase, digest, PhaseStatus.INTERRUPTED, run_id, f"{exc} waiting for approval: nothing changed"
            )
            raise
    runlog.set_phase(plan, phase, digest, PhaseStatus.RUNNING, run_id)
    try:
        with interrupts_as_one():
            outcome, changed = _run_phase(runner, audit, runlog, run_id, digest)
    except Interrupted as exc:
        record = runlog.phase(plan, phase)
        if record is not None and (record.status, record.run_id) == (PhaseStatus.RUNNING, run_id):
            # Not after a rollback began: that one recorded where it stands itself.
            log.warning("interrupted: nothing is rolled back; run the same command again to resume")
            runlog.set_phase(plan, phase, digest, PhaseStatus.INTERRUPTED, run_id, f"{exc}; run again to resume")
        raise
    except Exception as exc:
        record = runlog.phase(plan, phase)
        if record is not None and (record.status, record.run_id) == (PhaseStatus.RUNNING, run_id):
            # Neither a gate's FAIL nor a failed step (those rolled back and say so): nothing is undone.
            runlog.set_phase(
                plan, phase, digest, PhaseStatus.FAILED, run_id, f"{exc}; nothing was rolled back: run again"
            )
        raise
    try:
        with deferred() as held:
            # The commit record is written whole: an interrupt now is delivered once it is.
            failpoint(f"{runner.name}:commit", held)
            if changed:
                runlog.set_phase(plan, phase, digest, PhaseStatus.COMMITTED, run_id, outcome)
            else:
                # No commit: `ferry rollback` never undoes a run that changed nothing.
                log.info("nothing changed: no commit recorded")
                runlog.set_phase(plan, phase, digest, PhaseStatus.UNCHANGED, run_id, outcome)
    except Interrupted as exc:  # a second signal, before the record was written
        record = runlog.phase(plan, phase)
        if record is not None and (record.status, record.run_id) == (PhaseStatus.RUNNING, run_id):
            runlog.set_phase(plan, phase, digest, PhaseStatus.INTERRUPTED, run_id, f"{exc}; run again to resume")
        raise
    return outcome


@task(name="preflight", cache_policy=NO_CACHE)
def preflight_checks(plan_path: str) -> list[dict]:
    """Credentials, buckets, private endpoints, a writable state dir and each phase's own, before anything changes."""
    return [r.to_dict() for r in preflight(load_plan(Path(plan_path)))]


def _preflight(loaded: LoadedPlan, audit: AuditFolder) -> str:
    """Run the preflight checks; a FAIL (or, strict, a WARN) stops the run before any phase."""
    results = [CheckResult.from_dict(r) for r in preflight_checks(str(loaded.path))]
    _report(audit, "preflight", results)
    status = gate_status(results, loaded.plan.strict)
    if status == Status.FAIL:
        failing = [f"{r.name}: {'; '.join(r.evidence)}" for r in blocking(results, loaded.plan.strict)]
        raise GateFailed(f"preflight failed, nothing was changed: {' | '.join(failing)}")
    return status.value


def _report(audit: AuditFolder, phase: str, results: list[CheckResult]) -> None:
    """Gate results into the audit folder and into Prefect as a Markdown report and a table."""
    markdown = audit.write_gate(phase, results)
    slug = phase.replace("_", "-")
    create_markdown_artifact(markdown, key=f"gate-{slug}", description=f"{phase} gate report")
    create_table_artifact(
        [{"check": r.name, "status": r.status.value, "evidence": "; ".join(r.evidence[:3])} for r in results],
        key=f"gate-table-{slug}",
        description=f"{phase} gate results",
    )


def _run_phase(phase: Phase, audit: AuditFolder, runlog: RunLog, run_id: str, digest: str) -> tuple[str, bool]:
    """Run the phase's subflow, then decide: its gate's status and whether it changed the target.

    A gate that FAILs (or WARNs under strict) or a step that failed after its last retry with one of
    ferry's own errors rolls the phase back, here, once, after everything it ran has ended. Anything else
    (an interrupt, a gate that could not measure, a bug, an orchestration error) propagates and undoes nothing.
    """
    name, strict = phase.name, phase.loaded.plan.strict
    try:
        outcome = phase_subflow(phase)(str(phase.loaded.path), str(audit.root), name)
    except StepFailed as exc:
        _roll_back(phase, runlog, run_id, audit.root, digest, str(exc))
        # The step's own error (its type decides the exit code), saying which phase it ended.
        error = exc.error
        if not str(error).startswith(f"{name}: "):
            error.args = (f"{name}: {error}", *error.args[1:])
        raise error from error.__cause__
    results = [CheckResult.from_dict(r) for r in outcome["gate"]]
    _report(audit, name, results)
    status = gate_status(results, strict)
    log.info("gate", status=status.value, checks=len(results))
    if status == Status.FAIL:
        failed = f"{name}: gate failed: {', '.join(r.name for r in blocking(results, strict))}"
        _roll_back(phase, runlog, run_id, audit.root, digest, failed)
        raise GateFailed(f"{failed} (report: {audit.path(name, 'gate.md')})")
    # A run that took over interrupted runs commits even if it changed nothing itself: what they changed is
    # on the target, and its rollback (through resumed.json) is the one that undoes it.
    changed = any(StepResult.model_validate(s).changed for s in outcome["summaries"])
    return status.value, changed or bool(resumed_runs(audit.root, name))


def _roll_back(phase: Phase, runlog: RunLog, run_id: str, audit: Path, digest: str, why: str) -> None:
    """The rollback ferry decided; if it fails itself, the error says why it was decided as well."""
    try:
        roll_back(phase, runlog, run_id, audit, digest, why, log.warning)
    except Interrupted:
        raise
    except FerryError as exc:
        raise FerryError(f"{why}; and its rollback stopped: {exc}") from exc
