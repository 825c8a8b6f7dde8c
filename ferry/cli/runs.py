"""`ferry run`, `status`, `approve` and `rollback`: a plan's runs, started, watched, resumed and undone."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ferry import logs
from ferry.cli.console import check_log_format, out
from ferry.cli.server import prefect_env, server_env
from ferry.errors import FerryError, Interrupted, UsageError
from ferry.lock import Busy, held
from ferry.phases.base import open_phase
from ferry.plan import load_plan


def run_plan(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    only: Annotated[list[str] | None, typer.Option(help="Run only this phase (repeatable)")] = None,
    force: Annotated[list[str] | None, typer.Option(help="Rerun this phase even if committed (repeatable)")] = None,
    approval_timeout: Annotated[int, typer.Option(min=1, help="Seconds an approval may wait")] = 3600,
    log_format: Annotated[str, typer.Option(callback=check_log_format, help="console or json")] = "console",
) -> None:
    """Run the plan's phases in order, a gate after each; resume where the last run stopped."""
    logs.configure(log_format, to_stderr=False)
    loaded = load_plan(plan)  # a bad plan stops here: one line, exit 2, nothing runs
    loaded.plan.require_phases("--only", only)
    loaded.plan.require_phases("--force", force)
    prefect_env()
    from flows.pipeline import migrate, new_run_id

    run_id = new_run_id(str(plan))
    try:
        outcome = migrate(
            plan_path=str(plan.resolve()), only=only, force=force, run_id=run_id, approval_timeout_s=approval_timeout
        )
    except Interrupted:
        if not logs.json_output():
            _print_status(loaded)
        raise
    except Busy:  # another run of this plan holds its state: this one did not start
        raise
    except FerryError as exc:
        if not logs.json_output():
            _print_gates(loaded.layout.run(run_id))
            _print_status(loaded)
        # A usage error the flow finds (e.g. an approval with no server to wait on) stays one: exit 2.
        failure = UsageError if isinstance(exc, UsageError) else FerryError
        raise failure(f"run {run_id}: {exc}") from None
    if logs.json_output():
        gates = _gate_results(Path(outcome["audit"]))
        logs.write_json(sys.stderr, {"event": "summary", "ok": True, **outcome, "gates": gates})
        return
    phases = ", ".join(f"{k} {v}" for k, v in outcome["phases"].items()) or "nothing to run"
    out.print(f"run {outcome['run_id']}: {phases}", markup=False, highlight=False)
    _print_gates(Path(outcome["audit"]))
    _print_status(loaded)


def _gate_results(audit_root: Path) -> list[dict]:
    """Every gate result of a run (with its phase), from its audit folder."""
    return [
        {"phase": path.parent.name, **result}
        for path in sorted(audit_root.glob("*/gate.json"))
        for result in json.loads(path.read_text(encoding="utf-8"))
    ]


def _print_gates(audit_root: Path) -> None:
    """Every gate result of a run, as a table."""
    table = Table(title="gates", show_header=True)
    for column in ("phase", "check", "status", "measured"):
        table.add_column(column)
    results = _gate_results(audit_root)
    for result in results:
        measured = ", ".join(f"{k}={v}" for k, v in result["measured"].items() if v)
        table.add_row(result["phase"], result["name"], result["status"], measured)
    if results:
        out.print(table)
    else:
        out.print("no gate ran in this run (no phase ran)", markup=False, highlight=False)
    out.print(f"audit folder: {audit_root}", markup=False, highlight=False)


def status(plan: Annotated[Path, typer.Argument(help="The plan file")]) -> None:
    """Phases, their gates and last runs, and where the audit folders are."""
    _print_status(load_plan(plan))


def _print_status(loaded) -> None:
    from ferry.runlog import RunLog

    runlog = RunLog(loaded.layout.state)
    try:
        recorded = {p.phase: p for p in runlog.phases(loaded.plan.name)}
        live = {phase: runlog.live_commit(loaded.plan.name, phase) for phase in recorded}
        runs = runlog.runs(loaded.plan.name, limit=5)
    finally:
        runlog.close()
    table = Table(title=f"plan {loaded.plan.name}", show_header=True)
    # Names and run ids are what an operator types back (`ferry approve RUN_ID`, `--phase P`): never cut.
    names = loaded.plan.enabled_phases()
    table.add_column("phase", no_wrap=True, min_width=max(len(name) for name in names))
    table.add_column("status", no_wrap=True)
    for column in ("gate", "inputs"):
        table.add_column(column)
    table.add_column("run", no_wrap=True, min_width=max((len(p.run_id) for p in recorded.values()), default=3))
    # Details are sentences: each on its own line below the table, where nothing folds them.
    details: list[str] = []
    for phase in names:
        rec = recorded.get(phase)
        if rec is None:
            table.add_row(phase, "not run", "", "", "")
            continue
        inputs = "unchanged" if rec.input_hash == open_phase(loaded, phase).input_hash() else "changed since"
        settled = rec.status in ("committed", "unchanged")
        table.add_row(phase, rec.status.replace("_", " "), rec.detail if settled else "", inputs, rec.run_id)
        if not settled:
            details.append(f"{phase}: {rec.detail}")
        if rec.status != "committed" and live.get(phase):
            details.append(f"{phase}: the target still holds committed run {live[phase][0]}")
    out.print(table)
    for line in details:
        out.print(line, markup=False, highlight=False)
    for run_record in runs:
        out.print(
            f"run {run_record.run_id}: {run_record.status}; audit folder {run_record.audit_dir}",
            markup=False,
            highlight=False,
        )
    if loaded.plan.cutover is not None:
        from ferry.cutover.freeze import Freeze

        if (frozen := Freeze(loaded).frozen()) is not None:
            out.print(
                f"the source is frozen by cutover run {frozen.run_id} since {frozen.since}: "
                f"`ferry cutover {loaded.path} --unfreeze` undoes it",
                markup=False,
                highlight=False,
            )
    if os.environ.get("PREFECT_API_URL"):
        out.print(f"Prefect UI: {os.environ['PREFECT_API_URL'].removesuffix('/api')}", markup=False, highlight=False)


def cutover(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    yes: Annotated[bool, typer.Option("--yes", help="Freeze without waiting for an approval")] = False,
    rehearse: Annotated[
        bool, typer.Option("--rehearse", help="Up to the verified final delta, then unfreeze without switching")
    ] = False,
    unfreeze: Annotated[bool, typer.Option("--unfreeze", help="Undo the freeze a cut-over left in force")] = False,
    approval_timeout: Annotated[int, typer.Option(min=1, help="Seconds the approval may wait")] = 3600,
) -> None:
    """Live deltas until the final one fits the plan's cutover.freeze_budget, then freeze, final delta, switch."""
    loaded = load_plan(plan)
    if loaded.plan.cutover is None:
        raise UsageError(f"{plan}: the plan has no cutover section (docs/cutover.md)")
    say = functools.partial(out.print, markup=False, highlight=False)
    if unfreeze:
        from ferry.cutover.run import unfreeze as undo_freeze

        with held(loaded.layout.state, "ferry cutover --unfreeze"):
            say("unfrozen" if undo_freeze(loaded, say) else "the source is not frozen by ferry: nothing to undo")
        return
    if not yes and not os.environ.get("PREFECT_API_URL"):
        raise UsageError("cutover waits for an approval, which needs a Prefect server: set PREFECT_API_URL or --yes")
    prefect_env()
    from flows.cutover import cutover as cutover_flow
    from flows.pipeline import new_run_id

    run_id = new_run_id(str(plan))
    try:
        report = cutover_flow(
            plan_path=str(plan.resolve()),
            run_id=run_id,
            yes=yes,
            rehearse=rehearse,
            approval_timeout_s=approval_timeout,
        )
    except Interrupted:
        if os.environ.get("PREFECT_API_URL"):  # only a server's UI cancels a run
            from flows.cutover import settle_cancel

            settle_cancel(run_id)
        _print_status(loaded)
        raise
    except FerryError as exc:
        failure = UsageError if isinstance(exc, UsageError) else FerryError
        raise failure(f"cutover {run_id}: {exc} (report: {loaded.layout.run(run_id) / 'cutover'})") from None
    predicted = (
        "not predicted: resumed under a freeze"
        if report["predicted_freeze_s"] is None
        else (f"predicted {report['predicted_freeze_s']:.1f} s")
    )
    say(
        f"cutover {run_id}: {report['outcome']}, verified; freeze window {report['freeze_window_s']:.1f} s "
        f"({predicted}); report: {loaded.layout.run(run_id) / 'cutover' / 'report.md'}"
    )


def approve(run_id: Annotated[str, typer.Argument(help="The run waiting for approval")]) -> None:
    """Resume a run paused for approval (needs PREFECT_API_URL, as the UI does)."""
    server_env("approve needs the Prefect server the run reports to")
    from flows.approvals import approve_run

    approve_run(run_id)
    out.print(f"approved: run {run_id} resumes", markup=False, highlight=False)


def rollback(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    phase: Annotated[str, typer.Option(help="The phase to undo")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what it would undo; change nothing")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Undo without asking (needed when not on a terminal)")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Undo even what someone changed since the run (a phase that checks stops)")
    ] = False,
) -> None:
    """Undo the last committed run of one phase (or finish a rollback that was stopped), after saying what it
    deletes or restores."""
    loaded = load_plan(plan)
    loaded.plan.require_phases("--phase", [phase])
    # A dry run changes nothing; a rollback holds the plan's state as a run does, from the list it shows on.
    with contextlib.nullcontext() if dry_run else held(loaded.layout.state, f"ferry rollback --phase {phase}"):
        _rollback(loaded, phase, dry_run, yes, force)


def _rollback(loaded, phase: str, dry_run: bool, yes: bool, force: bool) -> None:
    from ferry.phases.rollback import PENDING, listing, roll_back, undo_chain
    from ferry.runlog import RunLog

    runlog = RunLog(loaded.layout.state)
    try:
        record = runlog.phase(loaded.plan.name, phase)
        if record is not None and record.status in PENDING:
            # A rollback that was decided and stopped (an interrupt, a failed item, a killed process) is finished.
            run_id, input_hash = record.run_id, record.input_hash
            why = f"finishing the rollback that run {run_id} decided"
        else:
            live = runlog.live_commit(loaded.plan.name, phase)
            if live is None:
                raise UsageError(f"{phase} has no committed run to roll back")
            (run_id, input_hash), why = live, "rolled back by hand"
        run_record = runlog.run(run_id)
        if run_record is None:
            raise UsageError(f"{phase}: the run log has no record of run {run_id}, which committed it")
        undoer, audit_root = open_phase(loaded, phase), Path(run_record.audit_dir)
        preview = undo_chain(undoer, audit_root, dry_run=True)
        say = functools.partial(out.print, markup=False, highlight=False)
        say(f"rollback of {phase}, run {run_id}: {preview.text}")
        for line in listing(phase, audit_root, preview):
            say(line)
        if dry_run:
            say("dry run: nothing was changed")
            return
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError("rollback changes the target: add --yes to confirm (or --dry-run to only look)")
            if not typer.confirm(f"roll back {phase} of run {run_id}?", default=False):
                say("nothing was changed")
                raise typer.Exit(1)
        done = roll_back(undoer, runlog, run_id, audit_root, input_hash, why, say, force=force, announced=preview)
    finally:
        runlog.close()
    if done.failed:
        raise FerryError(f"{done.failed} item(s) of the rollback failed: `ferry rollback --phase {phase}` tries again")
