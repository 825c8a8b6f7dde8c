"""The migration pipeline: the plan's phases in order, each a subflow in its own transaction, a gate after each.

A failed gate or an error rolls back that phase only (its tasks' on_rollback hooks run);
earlier committed phases stay as they are. The runlog records each phase's input hash and
outcome, so running the plan again skips phases committed with the same inputs and resumes
the first one that did not commit.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path

import structlog
from prefect import flow, pause_flow_run, runtime, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import FlowPauseTimeout, TerminationSignal
from prefect.transactions import transaction

from ferry.audit import AuditFolder
from ferry.errors import FerryError, GateFailed, Interrupted, UsageError
from ferry.phases.base import Phase, open_phase, preflight
from ferry.plan import LoadedPlan, load_plan
from ferry.results import CheckResult, Status, blocking, gate_status
from ferry.runlog import RunLog
from flows.phase import phase_flow

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
    runlog.set_phase(plan, name, digest, "waiting_for_approval", run_id, changes.text)
    log.warning(f"{name} waits for approval: {changes.text} To approve: ferry approve {run_id}", timeout_s=timeout_s)
    try:
        pause_flow_run(timeout=timeout_s, poll_interval=2)
    except FlowPauseTimeout:
        message = f"approval for {name} timed out after {timeout_s} s; nothing was changed"
        runlog.set_phase(plan, name, digest, "not_approved", run_id, message)
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
    """Run the plan's phases in order with a gate after each; return each phase's outcome."""
    loaded = load_plan(Path(plan_path))
    plan = loaded.plan
    run_id = runtime.flow_run.name or run_id or new_run_id(plan_path)
    plan.require_phases("only", only)
    plan.require_phases("force", force)
    runlog = RunLog(loaded.state_dir / "state")
    audit = AuditFolder(loaded.state_dir / "runs" / run_id)
    audit.write_text("plan", "plan.yaml", loaded.masked())
    runlog.start_run(run_id, plan.name, str(audit.root), str(runtime.flow_run.id or ""))
    structlog.contextvars.bind_contextvars(run_id=run_id)
    outcomes: dict[str, str] = {}
    try:
        outcomes["preflight"] = _preflight(loaded, audit)
        for phase in plan.enabled_phases():
            if only and phase not in only:
                continue
            structlog.contextvars.bind_contextvars(phase=phase)
            runner = open_phase(loaded, phase)
            digest = runner.input_hash()
            last = runlog.phase(plan.name, phase)
            unchanged = last and last.status in ("committed", "unchanged") and last.input_hash == digest
            if unchanged and not runner.live_inputs and phase not in (force or []):
                log.info("phase already committed with the same inputs: skipped", committed_by=last.run_id)
                outcomes[phase] = "skipped"
                continue
            if phase in plan.approve_before:
                _approve(runner, run_id, approval_timeout_s, runlog, digest)
            runlog.set_phase(plan.name, phase, digest, "running", run_id)
            try:
                outcomes[phase], changed = _run_phase(runner, audit)
            except Interrupted as exc:
                runlog.set_phase(plan.name, phase, digest, "interrupted", run_id, f"{exc}; run again to resume")
                raise
            except Exception as exc:
                runlog.set_phase(plan.name, phase, digest, "rolled_back", run_id, str(exc))
                raise
            if changed:
                runlog.set_phase(plan.name, phase, digest, "committed", run_id, outcomes[phase])
            else:
                # No commit: `ferry rollback` never undoes a run that changed nothing.
                log.info("nothing changed: no commit recorded")
                runlog.set_phase(plan.name, phase, digest, "unchanged", run_id, outcomes[phase])
        runlog.end_run(run_id, "completed")
    except (Interrupted, KeyboardInterrupt, TerminationSignal) as exc:
        # Also between phases (preflight, an approval wait): nothing is rolled back, the same command resumes.
        runlog.end_run(run_id, "interrupted", str(exc) or type(exc).__name__)
        raise
    except BaseException as exc:
        runlog.end_run(run_id, "failed", str(exc))
        raise
    finally:
        structlog.contextvars.unbind_contextvars("run_id", "phase")
        runlog.close()
    return {"run_id": run_id, "audit": str(audit.root), "phases": outcomes}


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


def _run_phase(phase: Phase, audit: AuditFolder) -> tuple[str, bool]:
    """One phase in its transaction: its gate's status and whether it changed the target.

    A FAIL gate raises inside the transaction, so the phase's steps roll back.

    Prefect rolls back the steps that completed; the phase's own rollback then undoes what steps
    that never completed left behind (it does nothing twice). An interrupt is not a failure: nothing
    is rolled back, and the next run resumes.
    """
    try:
        return _transaction(phase, audit)
    except Interrupted:
        raise
    except Exception:
        phase.rollback(audit.root)
        raise


def _transaction(phase: Phase, audit: AuditFolder) -> tuple[str, bool]:
    name, strict = phase.name, phase.loaded.plan.strict
    interrupted: int | None = None
    with transaction(key=f"{audit.root.name}-{name}"):
        subflow = phase_flow.with_options(name=name, flow_run_name=name)
        # Prefect's transaction rolls back on any exception, an interrupt's too: caught inside it, an
        # interrupt leaves what the phase did in place for the next run to resume.
        try:
            outcome = subflow(str(phase.loaded.path), str(audit.root), name)
        except KeyboardInterrupt:
            interrupted = signal.SIGINT
        except TerminationSignal as exc:  # SIGTERM, or a cancel from the Prefect UI
            interrupted = exc.signal
        if interrupted is None:
            results = [CheckResult.from_dict(r) for r in outcome["gate"]]
            _report(audit, name, results)
            status = gate_status(results, strict)
            log.info("gate", status=status.value, checks=len(results))
            if status == Status.FAIL:
                failing = [r.name for r in blocking(results, strict)]
                raise GateFailed(f"{name}: gate failed: {', '.join(failing)} (report: {audit.path(name, 'gate.md')})")
    if interrupted is not None:
        log.warning("interrupted: nothing is rolled back; run the same command again to resume")
        raise Interrupted(interrupted)
    return status.value, phase.changed(outcome["summaries"])
