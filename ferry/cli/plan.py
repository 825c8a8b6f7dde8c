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

from ferry import logs
from ferry.cli.console import err, out
from ferry.errors import FerryError, UsageError
from ferry.phases.base import open_phase
from ferry.phases.base import preflight as preflight_checks
from ferry.plan import load_plan, secret_refs
from ferry.profiles import SecretRef
from ferry.quote.cost import SIDES, in_words
from ferry.quote.estimate import REQUESTS_NOTE, age_words, cached, csv_text, duration_words, save
from ferry.quote.probe import run_probe
from ferry.quote.report import write_html
from ferry.results import Status
from ferry.units import format_size, parse_size

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
    offline: Annotated[
        bool, typer.Option("--offline", help="From the plan alone: no change set read from storage or APIs")
    ] = False,
) -> None:
    """The resolved plan (secrets masked), what each phase will do and would change now, and the preflight checks."""
    loaded = load_plan(path)
    plan = loaded.plan
    out.rule(f"plan {plan.name} ({path})")
    out.print(loaded.masked().rstrip(), markup=False, highlight=False)
    out.rule("what each phase will do")
    phases = [open_phase(loaded, name) for name in plan.enabled_phases()]
    for phase in phases:
        pause = " (pauses for approval first)" if phase.name in plan.approve_before else ""
        out.print(f"{phase.name}{pause}: {phase.summary()}", markup=False, highlight=False)
    # Without preflight too, plan show reads the plan alone (and writes nothing, not even the transfer state).
    _print_changes(loaded, phases, offline or not preflight)
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


def _print_changes(loaded, phases: list, offline: bool) -> None:
    """What each phase would change now: data_sync's last estimate with its age where there is one, else each
    phase's change set (a dry run), unless offline."""
    out.rule("what would change now")
    kept = cached(loaded.layout.estimate(loaded.plan.name))
    for phase in phases:
        if phase.name == "data_sync" and kept is not None:
            figures, age = kept
            said = (
                f"data_sync (the estimate of {age_words(age)} ago{'' if figures['sample'] is None else ', a SAMPLE'}; "
                "`ferry plan estimate` makes a new one): copy "
                f"{figures['objects_to_copy']:,} object(s), {figures['bytes_to_copy']:,} bytes ("
                f"{figures['objects_to_recopy']:,} again), delete {figures['objects_to_delete']:,}; "
                f"{in_words(figures)}; {duration_words(kept)}"
            )
        elif offline:
            said = f"{phase.name}: not read (--offline or --no-preflight)"
        else:
            try:
                said = phase.changes().text
            except FerryError as exc:
                said = f"{phase.name}: its change set could not be read: {exc}"
        out.print(said, markup=False, highlight=False)


def _check_size(value: str) -> str:
    """A size option's value, or typer's usage error (exit 2) naming the option."""
    try:
        parse_size(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


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
    probe_seconds: Annotated[
        float, typer.Option("--probe-seconds", min=1, max=3600, help="How long the throughput probe copies at most")
    ] = 60,
    probe_bytes: Annotated[
        str, typer.Option("--probe-bytes", callback=_check_size, help="How many bytes the probe copies at most")
    ] = "2G",
    no_probe: Annotated[
        bool, typer.Option("--no-probe", help="No probe: nothing written to the target; the duration not measured")
    ] = False,
    sample: Annotated[
        int | None,
        typer.Option("--sample", min=1, help="Only the first N keys of each shard: a bounded estimate, said so"),
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write the quote as one HTML page (with the sizes chart)")
    ] = None,
) -> None:
    """What data_sync would copy, copy again and delete, the requests it would send and their price, from the run's
    own listing and diff (a dry run), and how long it would take, from a bounded probe into a scratch prefix of the
    target that it removes (--no-probe: nothing written anywhere); kept for `ferry plan show`."""
    logs.configure()  # the engine's log lines on stderr: stdout is the estimate alone (JSON, CSV)
    loaded = load_plan(path)
    plan = loaded.plan
    if "data_sync" not in plan.enabled_phases():
        raise UsageError(f"{path}: phases.data_sync: the plan moves no data, so there is nothing to estimate")
    phase = open_phase(loaded, "data_sync")
    table = phase.price_table(prices)  # a bad prices file stops here, before anything is listed
    estimate, _ = phase.estimate(sample)
    probe = None
    if not no_probe:
        sample = phase.probe_plan(probe_seconds, parse_size(probe_bytes))
        err.print(sample.describe(), markup=False, highlight=False)
        probe = run_probe(sample, plan.profiles)
    figures = phase.quote(estimate, probe, table)
    save(loaded.layout.estimate(plan.name), figures)
    if html is not None:
        write_html(html, figures)
    if output_format == "json":
        out.print_json(json.dumps(figures))
    elif output_format == "csv":
        out.print(csv_text(figures), end="", markup=False, highlight=False, soft_wrap=True)
    else:
        _print_estimate(figures)


def _print_estimate(figures: dict[str, Any]) -> None:
    """The estimate as the terminal shows it: the data, its sizes, the requests by class."""
    out.rule(f"estimate of {figures['plan']} ({figures['estimated_at']}, {figures['shards']} shard(s))")
    if figures["sample"] is not None:
        out.print(f"SAMPLE: {figures['sample_note']}", markup=False, highlight=False)
    data = Table("", "objects", "bytes", title="data")
    for what, objects, size in (
        ("listed in the source", "objects_listed", "bytes_listed"),
        ("to copy", "objects_to_copy", "bytes_to_copy"),
        ("of which copied again (changed)", "objects_to_recopy", "bytes_to_recopy"),
        ("to delete from the target", "objects_to_delete", "bytes_to_delete"),
    ):
        data.add_row(what, f"{figures[objects]:,}", _bytes(figures[size]))
    data.add_row("in parts (multipart)", f"{figures['multipart_objects']:,}", f"{figures['multipart_parts']:,} parts")
    if figures["objects_too_large"]:
        data.add_row("too large for the target's parts (the run fails them)", f"{figures['objects_too_large']:,}", "")
    out.print(data)
    sizes = Table("size", "objects", "bytes", title="copies by size")
    low = "0"
    for row in figures["size_histogram"]:
        span = f"over {low}" if row["up_to"] is None else f"{low} to {format_size(row['up_to'])}"
        sizes.add_row(span, f"{row['objects']:,}", _bytes(row["bytes"]))
        low = format_size(row["up_to"]) if row["up_to"] else low
    out.print(sizes)
    if figures["source_listing"]["inventory"]:
        listing = figures["source_listing"]
        age = "its age not told" if listing["age_s"] is None else f"written {age_words(listing['age_s'])} ago"
        said = f"the source listed by the inventory report {listing['inventory']} ({age}), as a cut-over's first delta"
        out.print(said, markup=False, highlight=False)
    requests = Table("requests", "source", "target", title="requests by class")
    ends = [figures["requests"][side] for side in SIDES]
    kinds = sorted({kind for end in ends if end for kind in end})
    for kind in kinds:
        requests.add_row(kind, *("not counted" if end is None else f"{end.get(kind, 0):,}" for end in ends))
    if not kinds:
        requests.add_row("(none)", *("not counted" if end is None else "0" for end in ends))
    gate = [figures["gate_requests"][side] for side in SIDES]
    lists = ("not counted" if end is None else f"{end.get('LIST', 0):,}" for end in gate)
    requests.add_row("the data gate's LIST", *lists)
    out.print(requests)
    out.print(f"Requests: {REQUESTS_NOTE}; the gate: {figures['gate_requests_note']}.", markup=False, highlight=False)
    money = Table("", figures["currency"], title="cost (list prices unless overridden)")
    egress = f"egress ({_bytes(figures['egress_bytes'])} leave the source)"
    money.add_row(egress, _usd(figures["egress_usd"]))
    waiver = figures["egress_usd_with_exit_waiver"]
    money.add_row("egress with the provider's exit waiver, if granted", _usd(waiver, "no exit waiver known"))
    for side in SIDES:
        money.add_row(f"requests to the {side}", _usd(figures["requests_usd"][side]))
    for side in SIDES:
        money.add_row(f"the data gate's listing of the {side}", _usd(figures["gate_requests_usd"][side]))
    for kind, held in figures["restore"].items():
        hours = f", up to {held['hours']} h" if held["hours"] is not None else ""
        money.add_row(f"restore {held['objects']:,} {kind} object(s) first{hours}", _usd(held["usd"]))
    if figures["kms"] is not None:
        reads = figures["kms"]["decrypt_requests"]
        said = "not counted" if reads is None else f"{reads:,}"
        money.add_row(f"KMS Decrypt requests reading the SSE-KMS source ({said})", _usd(figures["kms"]["usd"]))
    if figures["kms_target"] is not None:
        sent = figures["kms_target"]["requests"]
        said = "not counted" if sent is None else f"{sent:,}"
        money.add_row(f"KMS requests of the target's SSE-KMS writes ({said})", _usd(figures["kms_target"]["usd"]))
    money.add_row("total (egress, requests, the gate, restores, KMS)", _usd(figures["total_usd"]))
    money.add_row("target storage per month", _usd(figures["storage_usd_per_month"]))
    money.add_row("this estimate's own listing", _usd(figures["estimate_usd"]))
    if figures["probe_requests_usd"] is not None:
        for side in SIDES:
            money.add_row(f"the probe's requests to the {side}", _usd(figures["probe_requests_usd"][side]))
        money.add_row("the probe's egress", _usd(figures["probe_egress_usd"]))
    out.print(money)
    said = f"the source's requests and egress are billed to {figures['source_billed_to']}"
    out.print(said, markup=False, highlight=False, soft_wrap=True)
    probe = figures["probe"]
    if probe is None:
        out.print("duration: not measured (--no-probe)", markup=False, highlight=False)
    else:
        rates = (
            f"probe: {probe['objects']:,} object(s), {_bytes(probe['bytes'])} in {probe['seconds']:.1f} s "
            f"({_rate(probe['objects_per_s'], 'objects/s')} whole, {_rate(probe['bytes_per_s'], 'bytes/s')} in "
            f"parts); {probe['cleanup']}"
        )
        out.print(rates, markup=False, highlight=False)
        for problem in probe["problems"]:
            out.print(f"probe problem: {problem}", markup=False, highlight=False)
        if figures["duration_p50_s"] is None:
            out.print(f"duration: {figures['duration_bound']}", markup=False, highlight=False)
        else:
            said = (
                f"duration of the data phase: P50 {figures['duration_p50_s']:,} s, P90 {figures['duration_p90_s']:,} s"
                f" (bound by {figures['duration_bound']}; listing {figures['listing_s']:,} s of it)"
            )
            out.print(said, markup=False, highlight=False)
    out.print(f"cut-over deltas: {figures['churn']['text']}", markup=False, highlight=False)
    pricing = figures["pricing"]
    for side in SIDES:
        end = pricing[side]
        if end["prices_from"]:
            said = f"{end['provider']} {end['region'] or ''}: {end['prices_from']}, taken {end['taken']}"
            out.print(f"{side} prices: {said}", markup=False, highlight=False)
    for note in figures["notes"]:
        out.print(f"note: {note}", markup=False, highlight=False)


def _rate(value: float | None, unit: str) -> str:
    return "not measured" if value is None else f"{value:,.1f} {unit}"


def _usd(value: float | None, missing: str = "not priced") -> str:
    if value is None:
        return missing
    return "under 0.01" if 0 < value < 0.005 else f"{value:,.2f}"


def _bytes(size: int) -> str:
    return f"{size:,} ({decimal(size)})"
