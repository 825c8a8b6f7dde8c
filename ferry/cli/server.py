"""`ferry ui`, `serve` and `deploy` (a Prefect server, a plan scheduled on one), and the settings Prefect reads.

Every command that starts a flow or reaches a server sets those settings first (`ferry run` and `approve` too).
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Annotated

import typer

from connectors.base import redact_url
from ferry import logs
from ferry.cli.console import debugging, out
from ferry.errors import UsageError
from ferry.files import write_atomic
from ferry.plan import load_plan


def prefect_env() -> None:
    """Settings Prefect reads at import: ferry's lines in the run logs, no analytics, no tracebacks on the console.

    Analytics would need the network. The run's logs in the Prefect API keep every traceback; FERRY_DEBUG
    leaves Prefect's console handler printing them too. With --log-format json, every console line is JSON.
    """
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "ferry")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if logs.json_output():
        os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS"] = "flows.console.JsonConsoleHandler"
    elif not debugging():
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS", "flows.console.OneLineConsoleHandler")


def server_env(needs: str) -> None:
    """Stop with one line unless PREFECT_API_URL names a server that answers; then set Prefect's settings for this
    process."""
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        raise UsageError(f"{needs}: run `ferry ui` and set PREFECT_API_URL")
    try:
        with urllib.request.urlopen(f"{api.rstrip('/')}/health", timeout=10):
            pass
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, an HTTP error, not a URL
        why = getattr(exc, "reason", None) or exc
        raise UsageError(f"{needs}: PREFECT_API_URL {redact_url(api)} does not answer ({why})") from None
    prefect_env()


def serve(plan: Annotated[Path, typer.Argument(help="The plan file")]) -> None:
    """Serve the plan as a Prefect deployment on its cron schedule (needs PREFECT_API_URL); Ctrl-C stops."""
    loaded = load_plan(plan)
    if not loaded.plan.schedule:
        raise UsageError(f"{plan}: schedule: the plan has no cron schedule to serve")
    server_env("serve needs a Prefect server to schedule runs on")
    from flows.deploy import serve_plan

    out.print(f"serving deployment migrate/{loaded.plan.name} on '{loaded.plan.schedule}'", markup=False)
    serve_plan(loaded)


def deploy(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    pool: Annotated[str, typer.Option(help="Work pool whose workers run it (created as a process pool if missing)")],
    emit: Annotated[
        Path | None,
        typer.Option(help="Write the deployment to this prefect.yaml (to keep in git) instead of registering it"),
    ] = None,
    notify: Annotated[
        str | None,
        typer.Option(help="A notification block TYPE/NAME told when a run fails (an automation; needs the server)"),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(help="The worker image a kubernetes pool's flow-run pods run (deploy/worker.Dockerfile)"),
    ] = None,
) -> None:
    """Register the plan as a Prefect deployment for a work pool, on its cron schedule, one run at a time (needs
    PREFECT_API_URL), or write it as a prefect.yaml with --emit."""
    loaded = load_plan(plan)
    if emit is None or notify is not None:
        server_env("deploy needs the Prefect server the workers poll" if emit is None else "--notify needs the server")
    else:
        prefect_env()
    from flows.deploy import (
        automations_yaml,
        create_automation,
        deploy_plan,
        ensure_pool,
        failure_automation,
        notification_block,
        prefect_yaml,
    )

    automation = failure_automation(loaded, notification_block(notify)) if notify else None
    name = f"migrate/{loaded.plan.name}"
    when = f"on '{loaded.plan.schedule}'" if loaded.plan.schedule else "on demand (the plan has no schedule)"
    if emit is not None:
        written = {emit: prefect_yaml(loaded, pool, image)}
        if automation is not None:
            written[emit.with_name("automations.yaml")] = automations_yaml(automation)
        for path, text in written.items():
            try:
                write_atomic(path, text)
            except OSError as exc:
                raise UsageError(f"--emit {emit}: cannot write {path.name} there: {exc.strerror}") from None
        lines = [f"wrote {emit}: deployment {name} for work pool {pool}, {when}, one run at a time"]
        if automation is not None:
            lines.append(f"wrote {emit.with_name('automations.yaml')}: {notify} is told when a run fails")
        # prefect deploy reads prefect.yaml unless told another file.
        named = "" if emit.name == "prefect.yaml" else f" --prefect-file {emit.name}"
        lines.append(f"register it: cd {emit.parent} && prefect --no-prompt deploy --all{named}")
        if automation is not None:
            lines.append("and: prefect automation create --from-file automations.yaml")
        out.print("\n".join(lines), markup=False, highlight=False)
        return
    # A process pool's workers run the ferry installed where they are; a kubernetes pool's run each flow in a pod of
    # the image the deployment names, so it must name one. A missing pool is made a process pool, unless the image
    # says it was meant to be a kubernetes one (made with its Job template, deploy/work-pool.json).
    kind = ensure_pool(pool, create=image is None)
    if kind is None:
        raise UsageError(
            f"--pool: no work pool {pool!r} for --image: prefect work-pool create {pool} --type kubernetes "
            "--base-job-template deploy/work-pool.json"
        )
    if kind == "kubernetes" and image is None:
        raise UsageError(f"--pool: {pool!r} is a kubernetes pool: give --image, the worker image its flow runs run in")
    if kind == "process" and image is not None:
        raise UsageError(f"--image: {pool!r} is a process pool, whose workers run the ferry installed where they are")
    if kind not in ("process", "kubernetes"):
        raise UsageError(
            f"--pool: {pool!r} is a {kind} pool; ferry deploys to process pools (workers that have ferry installed) "
            "and to kubernetes pools (with --image)"
        )
    deployment_id = deploy_plan(loaded, pool, image)
    told = ""
    if automation is not None:
        create_automation(automation)
        told = f"\n{notify} is told when a run fails (automation {automation['name']!r})"
    worker = f"prefect worker start --pool {pool}" if image is None else "deploy/k8s's worker (kubectl apply -k)"
    out.print(
        f"deployment {name} ({deployment_id}) in work pool {pool}, {when}, one run at a time{told}\n"
        f"start a worker: {worker}\n"
        f"run it now: prefect deployment run {name}",
        markup=False,
        highlight=False,
    )


def ui(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: a free one)")] = 4200,
) -> None:
    """Start a local Prefect server on 127.0.0.1 and print its URL; Ctrl-C stops it."""
    prefect_env()
    from flows.server import serve_ui

    serve_ui(port, out)
