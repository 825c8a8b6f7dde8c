"""The data_sync phase: one Prefect task per shard (a key prefix); the engine runs its own pool inside.

Each shard task journals the keys it created in the target, so rolling the phase back deletes
exactly those (objects it overwrote cannot be restored without versioning, and the rollback
report says so). Prefect retries a shard only for transient errors.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import threading
from pathlib import Path

import structlog
from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.transactions import get_transaction

from checks.data import check_data
from connectors.registry import open_connector
from connectors.transfer import COPY, Action, Stats, TransferSettings, TransferState
from ferry.audit import AuditFolder
from ferry.errors import PermanentError, TransientError
from ferry.plan import LoadedPlan, load_plan
from ferry.results import CheckResult
from ferry.sync import delete_created, run_sync
from flows.retry import transient_retries

log = structlog.get_logger("ferry.flows.data_sync")
PHASE = "data_sync"


def shard_settings(loaded: LoadedPlan, shard: str, *, dry_run: bool = False) -> TransferSettings:
    """The engine's settings for one shard of the plan's data_sync phase."""
    sync = loaded.plan.phases.data_sync
    assert sync is not None
    return TransferSettings(
        threads=sync.threads,
        part_size=sync.part_size,
        multipart_threshold=sync.multipart_threshold,
        memory_budget=sync.memory_budget,
        bwlimit=sync.bwlimit,
        include=tuple(sync.include),
        exclude=tuple(sync.exclude),
        delete=sync.delete,
        checksum=sync.checksum,
        prefix=shard,
        dry_run=dry_run,
    )


def shards(loaded: LoadedPlan) -> list[str]:
    sync = loaded.plan.phases.data_sync
    assert sync is not None
    return list(sync.shards) or [""]


def label(shard: str) -> str:
    return shard.rstrip("/").replace("/", "_") or "all"


class _Progress:
    """A Prefect progress artifact that follows the engine's byte counters while a shard runs."""

    def __init__(self, shard: str):
        self.shard = shard
        self.artifact = create_progress_artifact(0.0, key=f"data-sync-{label(shard).lower().replace('_', '-')}",
                                                 description=f"data_sync progress, shard {shard or '(all)'}")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stats: Stats) -> None:
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._poll, stats), daemon=True)
        self._thread.start()

    def _poll(self, stats: Stats) -> None:
        while not self._stop.wait(2.0):
            self._update(stats)

    def _update(self, stats: Stats) -> None:
        done = 100.0 * stats.bytes_moved / stats.bytes_to_copy if stats.bytes_to_copy else 0.0
        update_progress_artifact(self.artifact, min(done, 100.0))

    def stop(self, stats: Stats | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if stats is not None:
            update_progress_artifact(self.artifact, 100.0)


@task(name="sync-shard", task_run_name="sync shard {shard!r}", cache_policy=NO_CACHE)
def sync_shard(plan_path: str, audit_root: str, shard: str) -> dict:
    """Copy one shard; journal the keys it created for rollback. Raises if any object failed."""
    loaded = load_plan(Path(plan_path))
    audit = AuditFolder(Path(audit_root))
    journal = audit.path(PHASE, f"created-{label(shard)}.jsonl")
    get_transaction().set("journal", str(journal))
    get_transaction().set("plan_path", plan_path)
    lock = threading.Lock()
    with journal.open("a", encoding="utf-8") as created:

        def on_action(action: Action) -> None:
            # Only keys the target did not hold: deleting them is a faithful undo.
            if action.kind == COPY and action.dst is None:
                with lock:
                    created.write(json.dumps(action.key) + "\n")
                    created.flush()

        progress = _Progress(shard)
        result = None
        try:
            result = run_sync(
                loaded.storage("source"),
                loaded.storage("target"),
                shard_settings(loaded, shard),
                profiles=loaded.plan.profiles,
                state_dir=loaded.state_dir / "state",
                verify=False,  # the phase's gate verifies, after every shard is done
                report_path=audit.path(PHASE, f"sync-{label(shard)}.json"),
                on_action=on_action,
                on_start=progress.start,
            )
        finally:
            progress.stop(result.stats if result else None)
    summary = result.stats.summary()
    if result.stats.failed:
        first = summary["failures"][0] if summary["failures"] else "see the report"
        error = PermanentError if result.stats.rejected else TransientError
        raise error(f"shard {shard or '(all)'}: {result.stats.failed} object(s) failed; first: {first}")
    return summary


@sync_shard.on_rollback
def _undo_shard(transaction) -> None:  # noqa: ANN001 - Prefect passes the task's transaction
    journal = transaction.get("journal")
    plan_path = transaction.get("plan_path")
    loaded = load_plan(Path(plan_path))
    report = delete_created(loaded.storage("target"), loaded.plan.profiles, Path(journal))
    log.warning("rolled back a data_sync shard", journal=journal, **report)


def undo_unfinished(loaded: LoadedPlan, audit_root: Path) -> int:
    """Roll back shards whose task never completed (Prefect rolls back completed tasks only)."""
    undone = 0
    for journal in sorted((audit_root / PHASE).glob("created-*.jsonl")):
        if not journal.with_name(journal.stem + ".rollback.json").exists():
            report = delete_created(loaded.storage("target"), loaded.plan.profiles, journal)
            log.warning("rolled back an unfinished data_sync shard", journal=str(journal), **report)
            undone += 1
    return undone


def rollback_committed(loaded: LoadedPlan, audit_root: Path) -> str:
    """Undo a committed run of the phase: delete every object its shards created."""
    journals = sorted((audit_root / PHASE).glob("created-*.jsonl"))
    reports = [delete_created(loaded.storage("target"), loaded.plan.profiles, journal) for journal in journals]
    deleted = sum(report["deleted_created_objects"] for report in reports)
    return (f"deleted {deleted} object(s) it had created "
            "(objects it overwrote cannot be restored without bucket versioning)")


@task(name="data-gate", cache_policy=NO_CACHE)
def data_gate(plan_path: str) -> list[dict]:
    """The data gate for every shard: target against source, objects, bytes, size and checksum."""
    loaded = load_plan(Path(plan_path))
    gate_settings = loaded.plan.gates.data_sync
    results = []
    for shard in shards(loaded):
        settings = shard_settings(loaded, shard)
        if not gate_settings.allow_extra:
            settings = dataclasses.replace(settings, delete=True)
        source = open_connector(loaded.storage("source"), loaded.plan.profiles)
        target = open_connector(loaded.storage("target"), loaded.plan.profiles)
        state = TransferState(loaded.state_dir / "state", source.url, target.url, settings.prefix)
        try:
            result = check_data(source, target, state, settings, deep=gate_settings.deep_verify)
        finally:
            state.close()
            source.close()
            target.close()
        name = f"{result.name}[{shard}]" if shard else result.name
        results.append(CheckResult(name, result.status, result.measured, result.threshold, result.evidence))
    return [r.to_dict() for r in results]


def describe(loaded: LoadedPlan) -> tuple[str, dict]:
    """What the phase would change (a dry run of every shard), for an approval request."""
    totals = {"objects_to_copy": 0, "bytes_to_copy": 0, "objects_to_delete": 0}
    for shard in shards(loaded):
        result = run_sync(
            loaded.storage("source"),
            loaded.storage("target"),
            shard_settings(loaded, shard, dry_run=True),
            profiles=loaded.plan.profiles,
            state_dir=loaded.state_dir / "state",
        )
        totals["objects_to_copy"] += result.stats.to_copy
        totals["bytes_to_copy"] += result.stats.bytes_to_copy
        totals["objects_to_delete"] += result.stats.deleted
    text = (
        f"data_sync will copy {totals['objects_to_copy']} object(s), {totals['bytes_to_copy']:,} bytes, "
        f"from {loaded.storage('source')} to {loaded.storage('target')}"
        f" and delete {totals['objects_to_delete']} object(s) there."
    )
    return text, totals


@flow(name="data_sync", flow_run_name="data_sync")
def data_sync_flow(plan_path: str, audit_root: str) -> list[dict]:
    """Sync every shard (one task each), then run the data gate; returns the gate results."""
    loaded = load_plan(Path(plan_path))
    shard_task = sync_shard.with_options(**transient_retries(loaded))
    futures = [shard_task.submit(plan_path, audit_root, shard) for shard in shards(loaded)]
    summaries = [future.result() for future in futures]
    AuditFolder(Path(audit_root)).write_json(PHASE, "summary.json", summaries)
    return data_gate(plan_path)

