"""`ferry`: the command line. Every error is one line on stderr; bad input exits 2."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from connectors.transfer import COPY, DELETE, Action, Stats, TransferSettings
from ferry import __version__, logs, units
from ferry.errors import FerryError, Interrupted, UsageError
from ferry.images.rebase import read_dockerfile, rebase
from ferry.layout import StateLayout
from ferry.lock import Busy, held
from ferry.phases.base import open_phase
from ferry.phases.base import preflight as preflight_checks
from ferry.phases.rollback import SHOWN_ITEMS
from ferry.plan import load_plan, load_target_profile
from ferry.profiles import load_profiles
from ferry.results import Status

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Move GPU/ML workloads between clouds.",
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def parse_size(text: str, what: str) -> int:
    """Bytes in an option's value, or a UsageError naming the option."""
    try:
        return units.parse_size(text)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def _log_format(value: str) -> str:
    """--log-format's value, or typer's usage error (exit 2) naming the option."""
    if value not in ("console", "json"):
        raise typer.BadParameter(f"{value!r} is not one of console, json")
    return value


plan_app = typer.Typer(no_args_is_help=True, help="Check and explain a migration plan.")
app.add_typer(plan_app, name="plan")
iam_app = typer.Typer(no_args_is_help=True, help="Explain the iam phase's mapping.")
app.add_typer(iam_app, name="iam")
golive_app = typer.Typer(no_args_is_help=True, help="Go-live checks that need no plan: CUDA against driver, placement.")
app.add_typer(golive_app, name="golive")
probe_app = typer.Typer(no_args_is_help=True, help="The interconnect probe: TCP/UDP ping-pong round trips.")
app.add_typer(probe_app, name="probe")
images_app = typer.Typer(no_args_is_help=True, help="Container images: rebase Dockerfiles onto a target's bases.")
app.add_typer(images_app, name="images")


def _print_version(wanted: bool) -> None:
    """--version: print the version as `ferry version` does, then stop before any command runs."""
    if wanted:
        version()
        raise typer.Exit()


@app.callback()
def main(
    _version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print ferry's version and exit")
    ] = False,
) -> None:
    """ferry: move GPU/ML workloads from one cloud to another, verified at every step."""


def _credential_vars(loaded, phases: list) -> dict[tuple, str]:
    """The environment variables every credential the plan names takes secrets from, by the field naming each:
    the plan's own (profiles, live IAM) and its phases'."""
    from ferry.plan import credential_vars

    return credential_vars(
        loaded.credentials() | {loc: c for phase in phases for loc, c in phase.credentials().items()}
    )


@plan_app.command("validate")
def plan_validate(
    path: Annotated[Path, typer.Argument(help="The plan file")],
    offline: Annotated[
        bool, typer.Option("--offline", help="Structure only: skip the files and credential variables it needs")
    ] = False,
) -> None:
    """Check a plan file and that it can run here: one line per problem, exit 2 if there is one."""
    from checks.plan_inputs import plan_problems

    loaded = load_plan(path)
    plan = loaded.plan
    phases = [open_phase(loaded, name) for name in plan.enabled_phases()]
    files = {loc: file for phase in phases for loc, file in phase.files().items()}
    problems = plan_problems(loaded, files, _credential_vars(loaded, phases), offline)
    if problems:
        raise UsageError("\n".join(problems))
    out.print(
        f"{path}: valid plan {plan.name!r}: phases {', '.join(plan.enabled_phases())}; "
        f"target profile {loaded.target.name}",
        markup=False,
        highlight=False,
    )


@golive_app.command("cuda-check")
def golive_cuda_check(
    cuda: Annotated[str, typer.Option(help="The image's CUDA toolkit version, e.g. 12.4.1")],
    driver: Annotated[str, typer.Option(help="The nodes' NVIDIA driver version, e.g. 550.54.15")],
) -> None:
    """One toolkit against one driver by NVIDIA's table: PASS, WARN (minor-version compatibility only) or FAIL."""
    from ferry.golive.cuda import check

    try:
        verdict = check(cuda, driver)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out.print(verdict.line(), markup=False, highlight=False, soft_wrap=True)
    if verdict.status == Status.FAIL:
        raise typer.Exit(1)


@golive_app.command("placement")
def golive_placement(
    params: Annotated[str, typer.Option(help="Parameter count: 405e9, 405B or 4.05e+11")],
    nodes: Annotated[int, typer.Option(min=1, help="Nodes the job runs on")],
    virt_overhead: Annotated[
        str, typer.Option(help="Iteration slowdown under virtualisation: a fraction (0.14) or a percentage (14%)")
    ],
    hourly_cost_delta: Annotated[float, typer.Option(help="What that overhead costs, $ per hour")],
    job_hours: Annotated[float | None, typer.Option(min=0.0, help="The job's length in hours")] = None,
    long_job_hours: Annotated[float, typer.Option(min=0.0, help="Rule 3 applies to jobs longer than this")] = 72.0,
) -> None:
    """Bare metal or managed Kubernetes for one workload: the advice first, then which rule decided and why."""
    import math

    from ferry.golive.placement import Workload, advise, parse_overhead, parse_params

    for option, value in (
        ("--hourly-cost-delta", hourly_cost_delta), ("--job-hours", job_hours), ("--long-job-hours", long_job_hours),
    ):  # fmt: skip
        if value is not None and not math.isfinite(value):
            raise UsageError(f"{option}: {value} is not a finite number")
    try:
        count = parse_params(params)
    except ValueError as exc:
        raise UsageError(f"--params: {exc}") from None
    try:
        overhead = parse_overhead(virt_overhead)
    except ValueError as exc:
        raise UsageError(f"--virt-overhead: {exc}") from None
    workload = Workload("workload", count, nodes, overhead, hourly_cost_delta, job_hours, long_job_hours)
    for line in advise(workload).lines():
        out.print(line, markup=False, highlight=False)


@probe_app.command("serve")
def probe_serve(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on")] = 7447,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "0.0.0.0",
    protocol: Annotated[str, typer.Option(help="tcp or udp")] = "tcp",
    size: Annotated[int, typer.Option(min=8, help="Message size in bytes (as the client sends)")] = 64,
    sessions: Annotated[int, typer.Option(min=0, help="Clients to serve, then exit (0: until interrupted)")] = 0,
) -> None:
    """Echo the probe's round trips (the server end of `ferry probe ping`)."""
    from ferry.golive import probe

    if protocol not in ("tcp", "udp"):
        raise UsageError(f"--protocol: {protocol!r} is not tcp or udp")
    try:
        probe.serve(
            host, port, protocol, size=size, sessions=sessions,
            ready=lambda bound: err.print(f"probe: serving {protocol} on {host}:{bound}", markup=False),
        )  # fmt: skip
    except OSError as exc:
        raise UsageError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@probe_app.command("ping")
def probe_ping(
    server: Annotated[str, typer.Option(help="The serving end, host:port")],
    protocol: Annotated[str, typer.Option(help="tcp or udp")] = "tcp",
    samples: Annotated[int, typer.Option(min=1, help="Round trips timed")] = 20000,
    warmup: Annotated[int, typer.Option(min=0, help="Round trips before them, not timed")] = 100,
    size: Annotated[int, typer.Option(min=8, help="Message size in bytes")] = 64,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object (every sample included)")] = False,
) -> None:
    """Time round trips to a `ferry probe serve`: p50, p99, p99.9, max (nearest-rank) with counts and a histogram."""
    from ferry.golive import probe

    if protocol not in ("tcp", "udp"):
        raise UsageError(f"--protocol: {protocol!r} is not tcp or udp")
    import socket

    try:
        result = probe.ping(server, protocol, samples, warmup=warmup, size=size)
    except ValueError as exc:
        raise UsageError(f"--server: {exc}") from None
    except socket.gaierror as exc:
        # A name that does not resolve is a bad address, as a malformed one is; a server that is not there (refused,
        # no reply) is a failed measurement: exit 1.
        raise UsageError(f"--server: cannot resolve {server}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise FerryError(f"probe to {server} failed: {exc.strerror or exc}") from None
    if as_json:
        out.print(json.dumps(result), markup=False, highlight=False, soft_wrap=True)
        return
    for line in probe.text(result):
        out.print(line, markup=False, highlight=False)


@plan_app.command("show")
def plan_show(
    path: Annotated[Path, typer.Argument(help="The plan file")],
    preflight: Annotated[bool, typer.Option("--preflight/--no-preflight", help="Run the preflight checks")] = True,
) -> None:
    """The resolved plan (secrets masked), what each phase will do, and the preflight checks."""
    loaded = load_plan(path)
    plan = loaded.plan
    out.rule(f"plan {plan.name} ({path})")
    out.print(loaded.masked().rstrip(), markup=False, highlight=False)
    out.rule("what each phase will do")
    phases = [open_phase(loaded, name) for name in plan.enabled_phases()]
    for phase in phases:
        pause = " (pauses for approval first)" if phase.name in plan.approve_before else ""
        out.print(f"{phase.name}{pause}: {phase.summary()}", markup=False, highlight=False)
    t = loaded.target
    out.print(
        f"target profile {t.name}: {len(t.base_images)} base image rule(s); GPU resource {t.gpu_resource}; "
        f"annotations {', '.join(f'{k}: {v}' for k, v in t.pod_annotations.items()) or 'none'}",
        markup=False,
        highlight=False,
    )
    refs = sorted(loaded.env_refs | set(_credential_vars(loaded, phases).values()))
    if refs:
        out.rule("environment it reads (values never shown)")
        for name in refs:
            out.print(f"{name}: {'set' if name in os.environ else 'NOT SET'}", markup=False, highlight=False)
    if preflight:
        out.rule("preflight")
        results = preflight_checks(loaded)
        table = Table(show_header=True)
        for column in ("check", "status", "evidence"):
            table.add_column(column)
        for result in results:
            table.add_row(result.name, result.status.value, "; ".join(result.evidence))
        out.print(table)
        if any(result.status == Status.FAIL for result in results):
            raise typer.Exit(1)


@iam_app.command("explain")
def iam_explain(
    path: Annotated[Path, typer.Argument(help="The plan file")],
    principal: Annotated[str, typer.Argument(help="A principal id, e.g. aws:user/alice or ldap:group/ml-admins")],
) -> None:
    """One principal's outcome: its level and the grants behind it, or why it has none, and every category."""
    loaded = load_plan(path)
    loaded.plan.require_phases("explain", ["iam"])
    out.print(open_phase(loaded, "iam").mapping().explain(principal).rstrip(), markup=False, highlight=False)


def _prefect_env() -> None:
    """Settings Prefect reads at import: ferry's lines in the run logs, no analytics, no tracebacks on the console.

    Analytics would need the network. The run's logs in the Prefect API keep every traceback; FERRY_DEBUG
    leaves Prefect's console handler printing them too. With --log-format json, every console line is JSON.
    """
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "ferry")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if logs.json_output():
        os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS"] = "flows.console.JsonConsoleHandler"
    elif not _debugging():
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS", "flows.console.OneLineConsoleHandler")


def _server_env(needs: str) -> None:
    """Stop with one line unless PREFECT_API_URL names a server; then set Prefect's settings for this process."""
    if not os.environ.get("PREFECT_API_URL"):
        raise UsageError(f"{needs}: run `ferry ui` and set PREFECT_API_URL")
    _prefect_env()


@app.command("run")
def run_plan(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    only: Annotated[list[str] | None, typer.Option(help="Run only this phase (repeatable)")] = None,
    force: Annotated[list[str] | None, typer.Option(help="Rerun this phase even if committed (repeatable)")] = None,
    approval_timeout: Annotated[int, typer.Option(min=1, help="Seconds an approval may wait")] = 3600,
    log_format: Annotated[str, typer.Option(callback=_log_format, help="console or json")] = "console",
) -> None:
    """Run the plan's phases in order, a gate after each; resume where the last run stopped."""
    logs.configure(log_format, to_stderr=False)
    loaded = load_plan(plan)  # a bad plan stops here: one line, exit 2, nothing runs
    loaded.plan.require_phases("--only", only)
    loaded.plan.require_phases("--force", force)
    _prefect_env()
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


@app.command()
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
    if os.environ.get("PREFECT_API_URL"):
        out.print(f"Prefect UI: {os.environ['PREFECT_API_URL'].removesuffix('/api')}", markup=False, highlight=False)


@images_app.command("rebase")
def images_rebase(
    files: Annotated[list[Path], typer.Argument(help="The Dockerfiles")],
    out_dir: Annotated[Path, typer.Option("--out", help="Where the rebased files and their diffs go")],
    profile: Annotated[
        str, typer.Option(help="A built-in target profile, or the path of a YAML profile")
    ] = "meta-compute",
    build_arg: Annotated[
        list[str] | None,
        typer.Option("--build-arg", help="NAME=VALUE, as the build will pass it (for an ARG without a default)"),
    ] = None,
    stage: Annotated[
        str | None, typer.Option("--target", help="The stage the build stops at: it gets the SDK steps")
    ] = None,
    platform: Annotated[
        str | None, typer.Option(help="The platform built for (linux/amd64): its TARGETARCH... in FROM lines")
    ] = None,
) -> None:
    """Rebase Dockerfiles onto the profile's base images (no plan needed); say what changed and what is unmapped."""
    target = load_target_profile(profile, Path.cwd())
    build_args = {}
    for item in build_arg or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--build-arg {item}: write NAME=VALUE")
        build_args[key] = value
    texts = {path: read_dockerfile(path) for path in files}
    # Every file is rebased before any is written: a bad one leaves --out as it was.
    results = {
        path: rebase(
            text,
            target.base_images,
            target.sdk_steps,
            name=str(path),
            build_args=build_args,
            target=stage,
            platform=platform,
        )
        for path, text in texts.items()
    }
    # Keep the files' relative layout under --out, so two files named Dockerfile do not collide.
    common = Path(os.path.commonpath([p.resolve().parent for p in files]))
    names = {path: str(path.resolve().relative_to(common)) for path in files}
    inputs = {path.resolve() for path in files}
    for path, result in results.items():
        overwritten = [f for f in (out_dir / names[path], out_dir / f"{names[path]}.diff") if f.resolve() in inputs]
        if result.rebased and overwritten:
            raise UsageError(f"--out {out_dir}: would write over {overwritten[0]}, an input: choose another folder")
    for path, result in results.items():
        if not result.rebased:
            verdict = "not rebased: no FROM matches a rule of " + target.name
        else:
            written, diff = result.write(out_dir, names[path])
            verdict = f"rebased -> {written} (diff {diff})"
        out.print(f"{path}: {verdict}", markup=False, highlight=False)
        for line in result.report():
            out.print(f"  {line}", markup=False, highlight=False)


@app.command()
def approve(run_id: Annotated[str, typer.Argument(help="The run waiting for approval")]) -> None:
    """Resume a run paused for approval (needs PREFECT_API_URL, as the UI does)."""
    _server_env("approve needs the Prefect server the run reports to")
    from flows.approvals import approve_run

    approve_run(run_id)
    out.print(f"approved: run {run_id} resumes", markup=False, highlight=False)


@app.command()
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


manifests_app = typer.Typer(no_args_is_help=True, help="Kubernetes manifests rewritten for the target.")
app.add_typer(manifests_app, name="manifests")


@manifests_app.command("render")
def manifests_render(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Where rendered files go (default: <state>/manifests/rendered)")
    ] = None,
) -> None:
    """Render and validate the plan's manifests without a cluster; print what could not be carried over."""
    import datetime

    from ferry.audit import AuditFolder

    loaded = load_plan(plan)
    if "manifests" not in loaded.plan.enabled_phases():
        raise UsageError(f"{plan}: phases.manifests: the plan has no manifests phase to render")
    phase = open_phase(loaded, "manifests")
    rendering = phase.render()
    target = out_dir or loaded.layout.rendered
    written = rendering.write(target)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    audit = AuditFolder(loaded.layout.run(f"render-{stamp}"))
    phase.write_render(rendering, audit)
    results = phase.validate(rendering)
    audit.write_gate(phase.name, results)
    for finding in rendering.findings:
        out.print(f"WARN {finding}", markup=False, highlight=False)
    for result in results:
        out.print(f"{result.name}: {result.status.value}", markup=False, highlight=False)
        if result.name != "manifests.warnings":
            for line in result.evidence:
                out.print(f"  {line}", markup=False, highlight=False)
    out.print(
        f"rendered {len(rendering.documents)} object(s) into {len(written)} file(s) under {target}; "
        f"bundle and diff in {audit.root / phase.name}",
        markup=False,
        highlight=False,
    )
    if any(result.status == Status.FAIL for result in results):
        raise typer.Exit(1)


@app.command()
def serve(plan: Annotated[Path, typer.Argument(help="The plan file")]) -> None:
    """Serve the plan as a Prefect deployment on its cron schedule (needs PREFECT_API_URL); Ctrl-C stops."""
    loaded = load_plan(plan)
    if not loaded.plan.schedule:
        raise UsageError(f"{plan}: schedule: the plan has no cron schedule to serve")
    _server_env("serve needs a Prefect server to schedule runs on")
    from flows.pipeline import migrate

    out.print(f"serving deployment migrate/{loaded.plan.name} on '{loaded.plan.schedule}'", markup=False)
    migrate.serve(name=loaded.plan.name, cron=loaded.plan.schedule, parameters={"plan_path": str(plan.resolve())})


@app.command()
def deploy(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    pool: Annotated[str, typer.Option(help="Work pool whose workers run it (created as a process pool if missing)")],
) -> None:
    """Register the plan as a Prefect deployment for a work pool, on its cron schedule (needs PREFECT_API_URL)."""
    loaded = load_plan(plan)
    _server_env("deploy needs the Prefect server the workers poll")
    from flows.deploy import deploy_plan, ensure_pool

    kind = ensure_pool(pool)
    if kind != "process":
        raise UsageError(
            f"--pool: {pool!r} is a {kind} pool; ferry deploys to process pools (workers that run this checkout)"
        )
    deployment_id = deploy_plan(loaded, pool)
    when = f"on '{loaded.plan.schedule}'" if loaded.plan.schedule else "on demand (the plan has no schedule)"
    out.print(
        f"deployment migrate/{loaded.plan.name} ({deployment_id}) in work pool {pool}, {when}\n"
        f"start a worker: prefect worker start --pool {pool}\n"
        f"run it now: prefect deployment run migrate/{loaded.plan.name}",
        markup=False,
        highlight=False,
    )


@app.command()
def ui(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: a free one)")] = 4200,
) -> None:
    """Start a local Prefect server on 127.0.0.1 and print its URL; Ctrl-C stops it."""
    _prefect_env()
    from flows.server import serve_ui

    serve_ui(port, out)


@app.command()
def version() -> None:
    """Print ferry's version."""
    out.print(__version__)


@app.command()
def sync(
    source: Annotated[
        str, typer.Argument(help="s3://bucket/prefix, az://container/prefix, ./dir, PROFILE://..., any fsspec URL")
    ],
    target: Annotated[str, typer.Argument(help="Where the objects go (same forms as SOURCE)")],
    threads: Annotated[int, typer.Option(min=1, max=4096, help="Concurrent transfers")] = 128,
    profiles: Annotated[Path | None, typer.Option(help="YAML file of scheme aliases (profiles:)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change; change nothing")] = False,
    delete: Annotated[bool, typer.Option("--delete", help="Remove target objects the source does not have")] = False,
    checksum: Annotated[bool, typer.Option("--checksum", help="Re-hash both sides of equal-sized objects")] = False,
    include: Annotated[list[str] | None, typer.Option(help="Glob of keys to include (repeatable)")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Glob of keys to exclude (repeatable)")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Skip the data gate after the copy")] = False,
    deep_verify: Annotated[bool, typer.Option("--deep-verify", help="The gate re-reads every target object")] = False,
    bwlimit: Annotated[
        str | None, typer.Option(help="Cap on bytes per second through ferry, e.g. 50M (store-side copies: no cap)")
    ] = None,
    part_size: Annotated[str, typer.Option(help="Preferred multipart part size")] = "8M",
    multipart_threshold: Annotated[str, typer.Option(help="Objects above this go multipart")] = "16M",
    copy_threshold: Annotated[str, typer.Option(help="Server-side copies above this go in parallel parts")] = "1G",
    memory_budget: Annotated[str, typer.Option(help="Object bytes held in memory at once")] = "96M",
    retry_budget: Annotated[
        float, typer.Option(min=0, help="Seconds each request keeps retrying transient errors")
    ] = TransferSettings.retry_budget_s,
    retries: Annotated[
        int | None, typer.Option(min=1, help="At most this many attempts per request (default: the budget decides)")
    ] = None,
    abort_incomplete: Annotated[
        bool, typer.Option("--abort-incomplete", help="Abort unfinished multipart uploads under TARGET, then exit")
    ] = False,
    state_dir: Annotated[
        Path,
        typer.Option(envvar="FERRY_STATE_DIR", help="The state directory, as a plan's state_dir: the transfer state"),
    ] = Path(".ferry"),
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here")] = None,
    log_format: Annotated[str, typer.Option(callback=_log_format, help="console or json")] = "console",
    progress: Annotated[
        bool | None, typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal)")
    ] = None,
) -> None:
    """Copy what is missing or different from SOURCE to TARGET, verify it, and report."""
    logs.configure(log_format)
    profile_map = load_profiles(profiles)
    if abort_incomplete:
        from ferry.sync import abort_uploads

        aborted = abort_uploads(target, profile_map)
        out.print(f"aborted {len(aborted)} unfinished multipart upload(s) under {target}")
        for key, upload_id in aborted[:SHOWN_ITEMS]:
            out.print(f"  {key} ({upload_id[:16]})")
        return
    try:
        settings = TransferSettings(
            threads=threads,
            part_size=parse_size(part_size, "--part-size"),
            multipart_threshold=parse_size(multipart_threshold, "--multipart-threshold"),
            copy_threshold=parse_size(copy_threshold, "--copy-threshold"),
            memory_budget=parse_size(memory_budget, "--memory-budget"),
            retry_budget_s=retry_budget,
            retries=retries,
            checksum=checksum,
            delete=delete,
            dry_run=dry_run,
            include=tuple(include or ()),
            exclude=tuple(exclude or ()),
            bwlimit=parse_size(bwlimit, "--bwlimit") if bwlimit else None,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    show_progress = progress if progress is not None else (err.is_terminal and log_format == "console")
    state = StateLayout.for_sync(state_dir).state
    _run_sync(source, target, settings, profile_map, state, not no_verify, deep_verify, report, show_progress)


def _run_sync(source, target, settings, profile_map, state, verify, deep_verify, report, show_progress) -> None:
    from ferry.sync import run_sync

    shown: dict[str, list[Action]] = {COPY: [], DELETE: []}

    def on_action(action: Action) -> None:
        if settings.dry_run and action.kind in shown and len(shown[action.kind]) < SHOWN_ITEMS:
            shown[action.kind].append(action)

    bar = _ProgressBar() if show_progress else None
    # One sync (or run) per state directory at a time; a dry run changes nothing. The URLs are not recorded: a
    # SAS URL carries its signature.
    lock = contextlib.nullcontext() if settings.dry_run else held(state, "ferry sync")
    # Ctrl-C and SIGTERM stop the copy the same way: in-flight requests finish, the state keeps what was verified.
    with lock:
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            result = run_sync(
                source,
                target,
                settings,
                profiles=profile_map,
                state_dir=state,
                verify=verify,
                deep_verify=deep_verify,
                report_path=report,
                on_action=on_action,
                on_start=bar.start if bar else None,
            )
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if bar:
                bar.stop()
    summary = result.stats.summary()
    planned = [
        {"action": label, "key": action.key, "bytes": _size_of(action), "reason": action.reason}
        for kind, label in ((COPY, "would copy"), (DELETE, "would delete"))
        for action in shown[kind]
    ]
    if logs.json_output():
        closing = {"event": "summary", "ok": result.ok, **result.to_dict(), "report": str(result.report_path)}
        logs.write_json(sys.stderr, {**closing, "would_change": planned} if settings.dry_run else closing)
    else:
        for item in planned:
            line = f"{item['action']}: {item['key']} ({item['bytes']} bytes; {item['reason']})"
            out.print(line, markup=False, highlight=False)
        _print_summary(result.stats, summary, settings, result.gate)
        out.print(f"report: {result.report_path}", markup=False, highlight=False)
    if result.stats.rejected:
        raise typer.Exit(2)
    if not result.ok:
        raise typer.Exit(1)


def _size_of(action: Action) -> int:
    return action.src.size if action.src else (action.dst.size if action.dst else 0)


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _print_summary(stats: Stats, summary: dict, settings: TransferSettings, gate) -> None:
    objects, sizes = summary["objects"], summary["bytes"]
    table = Table(title="ferry sync" + (" (dry run: nothing changed)" if settings.dry_run else ""), show_header=True)
    table.add_column("what")
    table.add_column("objects", justify="right")
    table.add_column("bytes", justify="right")
    if settings.dry_run:
        table.add_row("would copy", str(stats.to_copy), f"{stats.bytes_to_copy:,}")
        table.add_row("would skip", str(objects["skipped"]), f"{sizes['skipped']:,}")
        table.add_row("would delete", str(objects["deleted"]), "")
    else:
        table.add_row("copied", str(objects["copied"]), f"{sizes['copied']:,}")
        table.add_row("skipped (equal)", str(objects["skipped"]), f"{sizes['skipped']:,}")
        table.add_row("deleted", str(objects["deleted"]), "")
        table.add_row("failed", str(objects["failed"]), "")
    out.print(table)
    latency = summary["latency_s"]
    figures = [f"duration {summary['duration_s']} s"]
    if stats.copied:  # rates and latencies of nothing copied (a dry run, an unchanged tree) are no figures
        figures += [
            f"throughput {summary['throughput_mb_s']} MB/s",
            f"{summary['objects_per_s']} objects/s",
            f"latency p50 {latency['p50']} s p99 {latency['p99']} s",
        ]
    figures.append(f"retries {summary['retries']}")
    out.print(", ".join(figures), markup=False, highlight=False)
    out.print(
        f"bytes through ferry: read {sizes['read_through_ferry']:,}, written {sizes['written_through_ferry']:,}; "
        f"copied by the store itself (server-side or kernel copy) {sizes['server_side']:,}; "
        f"pulled by the target from URLs {sizes['pulled_by_target_from_url']:,} "
        f"(url copy: {summary['url_copy']})",
        markup=False,
        highlight=False,
    )
    if summary["multipart"]["resumed_uploads"]:
        multipart = summary["multipart"]
        out.print(f"resumed {multipart['resumed_uploads']} upload(s), {multipart['parts_resumed']} part(s) not re-sent")
    for line in summary["failures"][:SHOWN_ITEMS]:
        out.print(f"failed: {line}", markup=False, highlight=False)
    measured = ", ".join(f"{k}={v}" for k, v in gate.measured.items() if v)
    out.print(f"data gate: {gate.status.value} {measured}".rstrip(), markup=False, highlight=False)
    for line in gate.evidence[:SHOWN_ITEMS]:
        out.print(f"  {line}", markup=False, highlight=False)


class _ProgressBar:
    """A rich progress bar on stderr that polls the engine's counters."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]sync"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[objects]}"),
            console=err,
            transient=False,
        )
        self.task = self.progress.add_task("sync", total=None, objects="")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stats: Stats) -> None:
        self.progress.start()
        self._thread = threading.Thread(target=self._poll, args=(stats,), daemon=True)
        self._thread.start()

    def _poll(self, stats: Stats) -> None:
        while not self._stop.wait(0.25):
            self._update(stats)
        self._update(stats)

    def _update(self, stats: Stats) -> None:
        self.progress.update(
            self.task,
            completed=stats.bytes_moved,
            total=stats.bytes_to_copy or None,
            objects=f"{stats.copied}/{stats.to_copy} copied, {stats.skipped} equal, {stats.failed} failed",
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.progress.stop()


def _debugging() -> bool:
    """FERRY_DEBUG=1: show Python and Prefect tracebacks, for a bug report."""
    return bool(os.environ.get("FERRY_DEBUG"))


def _single_line(text: object) -> str:
    """text with its line breaks and runs of spaces as single spaces."""
    return " ".join(str(text).split())


def _last_line(outcome: str, message: str, code: int) -> None:
    """Say why ferry stops (`ferry: OUTCOME: MESSAGE`, or the closing JSON event), then exit with code."""
    if logs.json_output():
        logs.write_json(sys.stderr, {"event": "summary", "ok": False, "outcome": outcome, "error": message})
    elif outcome == "interrupted":
        err.print(f"ferry: {message}", markup=False, highlight=False)
    else:
        err.print(f"ferry: {outcome}: {message}", markup=False, highlight=False)
    sys.exit(code)


def run() -> None:
    """Console-script entry point: one line on stderr, never a traceback; exit 2 for bad input, 1 for failures."""
    try:
        code = app(standalone_mode=False)
    except UsageError as exc:
        _last_line("error", str(exc), 2)
    except Interrupted as exc:
        _last_line("interrupted", f"{exc}; {exc.then}", exc.exit_code)
    except FerryError as exc:
        _last_line("failed", str(exc), 1)
    except typer.Abort:  # Ctrl-C at a prompt (`ferry rollback`'s question): nothing was changed
        _last_line("interrupted", "interrupted at the prompt; nothing was changed", 130)
    except KeyboardInterrupt:  # outside anything that turns it into Interrupted
        _last_line("interrupted", "interrupted by SIGINT; run the same command again to resume", 130)
    except typer.TyperException as exc:  # typer's parse errors; it vendors click, so they are not click's classes
        # Its no-args-is-help error has printed the help already and carries no message.
        if message := _single_line(exc.format_message()):
            command = getattr(exc, "ctx", None)
            hint = f"; see '{command.command_path} --help'" if command is not None else ""
            err.print(f"ferry: error: {message.rstrip('.')}{hint}", markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if _debugging():
            raise
        err.print(
            f"ferry: internal error: {type(exc).__name__}: {_single_line(exc)} (a bug: please report it with "
            "the output of the same command run with FERRY_DEBUG=1)",
            markup=False,
            highlight=False,
        )
        sys.exit(1)
    if code == 130:  # typer turns Ctrl-C into exit code 130
        err.print("ferry: interrupted; run the same command again to resume", markup=False)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
