"""`ferry golive` (cuda-check, placement, portability) and `ferry probe` (serve, ping): the go-live checks that need
no plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.console import err, out
from ferry.errors import FerryError, UsageError
from ferry.results import Status

app = typer.Typer(
    no_args_is_help=True, help="Go-live checks that need no plan: CUDA against driver, placement, portability."
)
probe_app = typer.Typer(no_args_is_help=True, help="The interconnect probe: TCP/UDP ping-pong round trips.")


@app.command("cuda-check")
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


@app.command("placement")
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


@app.command("portability")
def golive_portability(
    paths: Annotated[
        list[Path], typer.Argument(help="Files and folders: code, notebooks, requirements, Dockerfiles, manifests")
    ],
    profile: Annotated[
        str, typer.Option(help="A built-in target profile, or the path of a YAML profile")
    ] = "meta-compute",
    accelerator: Annotated[
        str | None, typer.Option(help="Judge for this accelerator of the profile only (default: each of them)")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="text, or json (a list of findings)")] = "text",
) -> None:
    """Will it run there? CUDA-only code and packages, InfiniBand-era network settings, against the profile's
    accelerators and fabric; read-only. Exit 0: no blocker; 1: blockers; 2: bad input."""
    from ferry.golive.portability import report
    from ferry.golive.portability.audit import audit
    from ferry.plan import load_target_profile

    if output_format not in ("text", "json"):
        raise UsageError(f"--format: {output_format!r} is not text or json")
    target = load_target_profile(profile, Path.cwd())
    if accelerator is not None and accelerator not in target.accelerators:
        known = ", ".join(target.accelerators)
        raise UsageError(f"--accelerator: profile {target.name} has no accelerator {accelerator!r} ({known})")
    names = [accelerator] if accelerator else list(target.accelerators)
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or folder")
    result = audit(paths, target, names, Path.cwd().resolve())
    if output_format == "json":
        out.print(json.dumps(report.as_json(result), indent=2), markup=False, highlight=False, soft_wrap=True)
    else:
        described = {name: a.description for name, a in target.accelerators.items()}
        recorded = report.record(result, [report.Workload(name, name) for name in names])
        for line in report.text(recorded, described):
            out.print(line, markup=False, highlight=False)
    if any(f.severity == "blocker" for f in result.findings):
        raise typer.Exit(1)


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
