"""`ferry plan validate`, `ferry plan show` and `ferry plan estimate`: a plan checked, explained and quoted before it
runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.filesize import decimal
from rich.table import Table

from ferry.cli.console import out
from ferry.errors import UsageError
from ferry.phases.base import open_phase
from ferry.phases.base import preflight as preflight_checks
from ferry.plan import load_plan, secret_refs
from ferry.profiles import SecretRef
from ferry.quote.cost import SIDES, ends, priced
from ferry.quote.estimate import REQUESTS_NOTE, csv_text, save
from ferry.quote.pricing import price_table
from ferry.results import Status
from ferry.units import format_size

app = typer.Typer(no_args_is_help=True, help="Check and explain a migration plan.")


def _secret_refs(loaded, phases: list) -> dict[tuple, SecretRef]:
    """Every secret the plan names, by the field naming it: its own credentials' (profiles, live IAM) and its
    phases' (registry logins)."""
    return secret_refs(loaded.credentials() | {loc: c for phase in phases for loc, c in phase.credentials().items()})


@app.command("validate")
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
    variables = {loc: ref.env for loc, ref in _secret_refs(loaded, phases).items() if ref.env}
    for phase in phases:
        if phase.placement().dask_address:
            # An existing scheduler's workers report their task runs to the Prefect API: a server, not a temporary
            # one this process would start.
            variables[("phases", phase.name, "runner", "dask", "address")] = "PREFECT_API_URL"
    problems = plan_problems(loaded, files, variables, offline)
    if problems:
        raise UsageError("\n".join(problems))
    out.print(
        f"{path}: valid plan {plan.name!r}: phases {', '.join(plan.enabled_phases())}; "
        f"target profile {loaded.target.name}",
        markup=False,
        highlight=False,
    )


@app.command("show")
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
    secrets = _secret_refs(loaded, phases).values()
    refs = sorted(loaded.env_refs | {ref.env for ref in secrets if ref.env})
    if refs:
        out.rule("environment it reads (values never shown)")
        for name in refs:
            out.print(f"{name}: {'set' if name in os.environ else 'NOT SET'}", markup=False, highlight=False)
    blocks = sorted({ref.block for ref in secrets if ref.block})
    if blocks:
        out.rule("Prefect Secret blocks it reads (values never shown)")
        for block in blocks:
            out.print(f"{block}: read by the run that needs it", markup=False, highlight=False)
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


def _check_format(value: str) -> str:
    """--format's value, or typer's usage error (exit 2) naming the option."""
    if value not in ("table", "json", "csv"):
        raise typer.BadParameter(f"{value!r} is not one of table, json, csv")
    return value


@app.command("estimate")
def plan_estimate(
    path: Annotated[Path, typer.Argument(help="The plan file")],
    output_format: Annotated[
        str, typer.Option("--format", callback=_check_format, help="table (the terminal), json or csv")
    ] = "table",
    prices: Annotated[
        Path | None, typer.Option("--prices", help="Negotiated prices over the list prices (and the plan's file)")
    ] = None,
) -> None:
    """What data_sync would copy, copy again and delete, the requests it would send, and their price: from the run's
    own listing and diff (a dry run, nothing written to either end); kept for `ferry plan show`."""
    loaded = load_plan(path)
    plan = loaded.plan
    if "data_sync" not in plan.enabled_phases():
        raise UsageError(f"{path}: phases.data_sync: the plan moves no data, so there is nothing to estimate")
    named = [loaded.resolve(plan.pricing.prices)] if plan.pricing.prices else []
    table = price_table(*named, *([prices] if prices else []))
    phase = open_phase(loaded, "data_sync")
    by_plan = {side: (getattr(plan.pricing, side).provider, getattr(plan.pricing, side).region) for side in SIDES}
    source, target = ends(table, phase.endpoints(), by_plan).values()
    estimate, _ = phase.estimate()
    data = estimate.figures()
    figures = {"plan": plan.name, **data, **priced(data, source, target)}
    save(loaded.layout.estimate(plan.name), figures)
    if output_format == "json":
        out.print_json(json.dumps(figures))
    elif output_format == "csv":
        out.print(csv_text(figures), end="", markup=False, highlight=False, soft_wrap=True)
    else:
        _print_estimate(figures)


def _print_estimate(figures: dict[str, Any]) -> None:
    """The estimate as the terminal shows it: the data, its sizes, the requests by class."""
    out.rule(f"estimate of {figures['plan']} ({figures['estimated_at']}, {figures['shards']} shard(s))")
    data = Table("", "objects", "bytes", title="data")
    for what, objects, size in (
        ("listed in the source", "objects_listed", "bytes_listed"),
        ("to copy", "objects_to_copy", "bytes_to_copy"),
        ("of which copied again (changed)", "objects_to_recopy", "bytes_to_recopy"),
        ("to delete from the target", "objects_to_delete", "bytes_to_delete"),
    ):
        data.add_row(what, f"{figures[objects]:,}", _bytes(figures[size]))
    data.add_row("in parts (multipart)", f"{figures['multipart_objects']:,}", f"{figures['multipart_parts']:,} parts")
    out.print(data)
    sizes = Table("size", "objects", "bytes", title="copies by size")
    low = "0"
    for row in figures["size_histogram"]:
        span = f"over {low}" if row["up_to"] is None else f"{low} to {format_size(row['up_to'])}"
        sizes.add_row(span, f"{row['objects']:,}", _bytes(row["bytes"]))
        low = format_size(row["up_to"]) if row["up_to"] else low
    out.print(sizes)
    requests = Table("requests", "source", "target", title="requests by class")
    ends = [figures["requests"][side] for side in ("source", "target")]
    kinds = sorted({kind for end in ends if end for kind in end})
    for kind in kinds:
        requests.add_row(kind, *("not counted" if end is None else f"{end.get(kind, 0):,}" for end in ends))
    if not kinds:
        requests.add_row("(none)", *("not counted" if end is None else "0" for end in ends))
    out.print(requests)
    out.print(f"Requests: {REQUESTS_NOTE}.", markup=False, highlight=False)
    money = Table("", figures["currency"], title="cost (list prices unless overridden)")
    egress = f"egress ({_bytes(figures['egress_bytes'])} leave the source)"
    money.add_row(egress, _usd(figures["egress_usd"]))
    waiver = figures["egress_usd_with_exit_waiver"]
    money.add_row("egress with the provider's exit waiver, if granted", _usd(waiver, "no exit waiver known"))
    for side in SIDES:
        money.add_row(f"requests to the {side}", _usd(figures["requests_usd"][side]))
    for kind, held in figures["restore"].items():
        hours = f", up to {held['hours']} h" if held["hours"] is not None else ""
        money.add_row(f"restore {held['objects']:,} {kind} object(s) first{hours}", _usd(held["usd"]))
    money.add_row("total (egress, requests, restores)", _usd(figures["total_usd"]))
    money.add_row("target storage per month", _usd(figures["storage_usd_per_month"]))
    money.add_row("this estimate's own requests", _usd(figures["estimate_usd"]))
    out.print(money)
    pricing = figures["pricing"]
    for side in SIDES:
        end = pricing[side]
        if end["prices_from"]:
            said = f"{end['provider']} {end['region'] or ''}: {end['prices_from']}, taken {end['taken']}"
            out.print(f"{side} prices: {said}", markup=False, highlight=False)
    for note in figures["notes"]:
        out.print(f"note: {note}", markup=False, highlight=False)


def _usd(value: float | None, missing: str = "not priced") -> str:
    if value is None:
        return missing
    return "under 0.01" if 0 < value < 0.005 else f"{value:,.2f}"


def _bytes(size: int) -> str:
    return f"{size:,} ({decimal(size)})"
