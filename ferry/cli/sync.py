"""`ferry sync`: one tree copied to another, verified and reported, with its progress bar and summary table."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from connectors.transfer import COPY, DELETE, Action, Stats, TransferSettings, bounds
from ferry import logs, units
from ferry.cli.console import check_log_format, err, out
from ferry.errors import Interrupted, UsageError
from ferry.layout import StateLayout
from ferry.lock import held
from ferry.results import SHOWN_ITEMS

if TYPE_CHECKING:  # a profiles file is read (pydantic, YAML) only where one is named
    from ferry.profiles import Profile


def parse_size(text: str, what: str) -> int:
    """Bytes in an option's value, or a UsageError naming the option."""
    try:
        return units.parse_size(text)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


# Every option that sets an engine knob takes its default and bounds from the engine's table (TransferSettings).
_THREADS, _RETRY_BUDGET, _RETRIES = bounds("threads"), bounds("retry_budget_s"), bounds("retries")


def _size_default(name: str) -> str | None:
    """A size knob's default as its option shows it (8 MiB: 8M), or None where the engine has none."""
    value = getattr(TransferSettings, name)
    return None if value is None else units.format_size(value)


def sync(
    source: Annotated[
        str, typer.Argument(help="s3://bucket/prefix, az://container/prefix, ./dir, PROFILE://..., any fsspec URL")
    ],
    target: Annotated[str, typer.Argument(help="Where the objects go (same forms as SOURCE)")],
    threads: Annotated[
        int, typer.Option(min=_THREADS.least, max=_THREADS.most, help="Concurrent transfers")
    ] = TransferSettings.threads,
    profiles: Annotated[Path | None, typer.Option(help="YAML file of scheme aliases (profiles:)")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change; change nothing")
    ] = TransferSettings.dry_run,
    delete: Annotated[
        bool, typer.Option("--delete", help="Remove target objects the source does not have")
    ] = TransferSettings.delete,
    checksum: Annotated[
        bool, typer.Option("--checksum", help="Re-hash both sides of equal-sized objects")
    ] = TransferSettings.checksum,
    include: Annotated[list[str] | None, typer.Option(help="Glob of keys to include (repeatable)")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Glob of keys to exclude (repeatable)")] = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Skip the data gate after the copy")] = False,
    deep_verify: Annotated[bool, typer.Option("--deep-verify", help="The gate re-reads every target object")] = False,
    bwlimit: Annotated[
        str | None, typer.Option(help="Cap on bytes per second through ferry, e.g. 50M (store-side copies: no cap)")
    ] = _size_default("bwlimit"),
    part_size: Annotated[str, typer.Option(help="Preferred multipart part size")] = _size_default("part_size"),
    multipart_threshold: Annotated[str, typer.Option(help="Objects above this go multipart")] = _size_default(
        "multipart_threshold"
    ),
    copy_threshold: Annotated[
        str, typer.Option(help="Server-side copies above this go in parallel parts")
    ] = _size_default("copy_threshold"),
    memory_budget: Annotated[str, typer.Option(help="Object bytes held in memory at once")] = _size_default(
        "memory_budget"
    ),
    retry_budget: Annotated[
        float,
        typer.Option(
            min=_RETRY_BUDGET.least, max=_RETRY_BUDGET.most, help="Seconds each request keeps retrying transient errors"
        ),
    ] = TransferSettings.retry_budget_s,
    retries: Annotated[
        int | None,
        typer.Option(
            min=_RETRIES.least,
            max=_RETRIES.most,
            help="At most this many attempts per request (default: the budget decides)",
        ),
    ] = TransferSettings.retries,
    abort_incomplete: Annotated[
        bool, typer.Option("--abort-incomplete", help="Abort unfinished multipart uploads under TARGET, then exit")
    ] = False,
    state_dir: Annotated[
        Path,
        typer.Option(envvar="FERRY_STATE_DIR", help="The state directory, as a plan's state_dir: the transfer state"),
    ] = Path(".ferry"),
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here")] = None,
    log_format: Annotated[str, typer.Option(callback=check_log_format, help="console or json")] = "console",
    progress: Annotated[
        bool | None, typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal)")
    ] = None,
) -> None:
    """Copy what is missing or different from SOURCE to TARGET, verify it, and report."""
    logs.configure(log_format)
    profile_map: dict[str, Profile] = {}
    if profiles is not None:  # pydantic and YAML are imported only where a profiles file is read
        from ferry.profiles import load_profiles

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
        table.add_row("  of which adopted", str(objects["adopted"]), f"{sizes['adopted']:,}")
        table.add_row("would delete", str(objects["deleted"]), "")
    else:
        table.add_row("copied", str(objects["copied"]), f"{sizes['copied']:,}")
        table.add_row("skipped (equal)", str(objects["skipped"]), f"{sizes['skipped']:,}")
        table.add_row("  of which adopted", str(objects["adopted"]), f"{sizes['adopted']:,}")
        table.add_row("deleted", str(objects["deleted"]), "")
        table.add_row("failed", str(objects["failed"]), "")
    out.print(table)
    if objects["adopted"]:
        proofs = ", ".join(f"{proof} {n}" for proof, n in summary["adopted_by"].items() if n)
        out.print(
            f"adopted (another tool wrote them; proven equal, not copied again), by proof: {proofs}",
            markup=False,
            highlight=False,
        )
    if held := ", ".join(f"{kind} {n}" for kind, n in summary["held_to_source"].items() if n):
        out.print(f"copies held to the source's own checksum as read, by kind: {held}", markup=False, highlight=False)
    if not_held := ", ".join(f"{why} {n}" for why, n in summary["not_held_to_source"].items() if n):
        out.print(
            f"copies not held to the checksum their source holds (the data gate compares them), by why: {not_held}",
            markup=False,
            highlight=False,
        )
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
