"""The migration pipeline: the plan's phases in order, each a subflow in its own transaction, a gate after each.

A failed gate or an error rolls back that phase only (its tasks' on_rollback hooks run);
earlier committed phases stay as they are. The runlog records each phase's input hash and
outcome, so running the plan again skips phases committed with the same inputs and resumes
the first one that did not commit.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import structlog
from prefect import flow, pause_flow_run, runtime, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.transactions import transaction

from ferry.audit import AuditFolder
from ferry.errors import GateFailed, UsageError
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


def _approve(loaded: LoadedPlan, phase: str, run_id: str, timeout_s: int) -> None:
    """Pause the run until someone approves the phase (Prefect UI or `ferry approve`), or fail on timeout."""
    if not os.environ.get("PREFECT_API_URL"):
        raise UsageError(
            f"{phase} needs an approval, which needs a Prefect server: run `ferry ui` and set PREFECT_API_URL"
        )
    changes = open_phase(loaded, phase).changes()
    create_markdown_artifact(
        f"# Approval needed: {phase}\n\n{changes.text}\n\n"
        f"Resume this run in the Prefect UI or run `ferry approve {run_id}`.",
        key=f"approval-{phase.replace('_', '-')}",
        description=f"what {phase} will change",
    )
    log.warning("waiting for approval", phase=phase, changes=changes.totals, timeout_s=timeout_s)
    pause_flow_run(timeout=timeout_s, poll_interval=2)
    log.info("approved", phase=phase)


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
            unchanged = last and last.status == "committed" and last.input_hash == digest
            if unchanged and not runner.live_inputs and phase not in (force or []):
                log.info("phase already committed with the same inputs: skipped", committed_by=last.run_id)
                outcomes[phase] = "skipped"
                continue
            if phase in plan.approve_before:
                _approve(loaded, phase, run_id, approval_timeout_s)
            runlog.set_phase(plan.name, phase, digest, "running", run_id)
            try:
                outcomes[phase] = _run_phase(runner, audit)
            except Exception as exc:
                runlog.set_phase(plan.name, phase, digest, "rolled_back", run_id, str(exc))
                raise
            runlog.set_phase(plan.name, phase, digest, "committed", run_id, outcomes[phase])
        runlog.end_run(run_id, "completed")
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


def _run_phase(phase: Phase, audit: AuditFolder) -> str:
    """One phase in its transaction: a FAIL gate raises inside it, so the phase's steps roll back.

    Prefect rolls back the steps that completed; the phase's own rollback then undoes what steps
    that never completed left behind (it does nothing twice).
    """
    try:
        return _transaction(phase, audit)
    except BaseException:
        phase.rollback(audit.root)
        raise


def _transaction(phase: Phase, audit: AuditFolder) -> str:
    name, strict = phase.name, phase.loaded.plan.strict
    with transaction(key=f"{audit.root.name}-{name}"):
        subflow = phase_flow.with_options(name=name, flow_run_name=name)
        results = [CheckResult.from_dict(r) for r in subflow(str(phase.loaded.path), str(audit.root), name)]
        _report(audit, name, results)
        status = gate_status(results, strict)
        log.info("gate", status=status.value, checks=len(results))
        if status == Status.FAIL:
            failing = [r.name for r in blocking(results, strict)]
            raise GateFailed(f"{name}: gate failed: {', '.join(failing)} (report: {audit.path(name, 'gate.md')})")
    return status.value
