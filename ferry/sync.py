"""One sync, end to end: open both ends, run the engine, run the data gate, write the report.

`ferry sync` calls this directly (no Prefect); the data_sync flow calls it per shard.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checks.data import NAME, DataTally, check_data
from connectors.base import Connector, ObjectInfo, redact_url
from connectors.registry import open_connector
from connectors.transfer import (
    Action,
    Forecast,
    Stats,
    Transfer,
    TransferSettings,
    TransferState,
    abort_incomplete,
    written_signatures,
)
from ferry.errors import FerryError, NotFoundError
from ferry.files import Journal, write_atomic
from ferry.interrupts import one_by_one
from ferry.results import CheckResult, Status

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile


@dataclass
class SyncResult:
    source: str
    target: str
    settings: TransferSettings
    stats: Stats
    gate: CheckResult
    # The copies and deletes the diff decided, and the requests a run sends each end for them (a dry run's figures
    # are the estimate of the run after it; for a run, of itself).
    forecast: Forecast
    requests: dict[str, dict[str, int] | None]
    report_path: Path | None = None

    @property
    def ok(self) -> bool:
        return self.stats.failed == 0 and self.gate.status != Status.FAIL

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": redact_url(self.source),
            "target": redact_url(self.target),
            "dry_run": self.settings.dry_run,
            "threads": self.settings.threads,
            "summary": self.stats.summary(),
            "gate": self.gate.to_dict(),
        }


def run_sync(
    source_url: str,
    target_url: str,
    settings: TransferSettings,
    *,
    profiles: Mapping[str, Profile],
    state_dir: Path,
    verify: bool = True,
    deep_verify: bool = False,
    report_path: Path | None = None,
    on_action: Callable[[Action], None] | None = None,
    on_start: Callable[[Stats], None] | None = None,
    stop: threading.Event | None = None,
    keys: Collection[str] | None = None,
    source_listing: Iterable[ObjectInfo] | None = None,
    source_known: Mapping[str, ObjectInfo | None] | None = None,
) -> SyncResult:
    """Sync source into target and verify it; the report lands in report_path (or the state dir).

    A set stop event ends the copy early (what was verified is kept); the result says it was interrupted. keys:
    only these (a change log's), asked of each side instead of listing them, except the source's known to hold
    (source_known: the object, or None for none); source_listing: the source's objects as another listing gives them
    (an inventory report), in key order, instead of its own.
    """
    seen = DataTally()

    def observe(action: Action) -> None:
        seen.observe_unchanged(action)
        if on_action is not None:
            on_action(action)

    with _opened(source_url, target_url, settings, profiles, state_dir) as (source, target, state):
        transfer = Transfer(
            source,
            target,
            state,
            settings,
            on_action=observe,
            stop=stop,
            keys=keys,
            source_listing=source_listing,
            source_known=source_known,
        )
        if on_start is not None:
            on_start(transfer.stats)
        stats = transfer.run()
        if stats.interrupted:
            gate = CheckResult(NAME, Status.SKIP, evidence=["interrupted: the next run resumes, then verifies"])
        elif settings.dry_run:
            gate = CheckResult(NAME, Status.SKIP, evidence=["dry run: nothing was copied"])
        elif not verify:
            gate = CheckResult(NAME, Status.SKIP, evidence=["--no-verify"])
        elif stats.to_copy == stats.deleted == stats.failed == 0 and not deep_verify:
            # Nothing changed: this run's own listing is the target's state; no second listing.
            gate = seen.result(settings, note="judged from this run's listing: nothing was copied, deleted or failed")
        else:
            gate = check_data(source, target, state, settings, deep=deep_verify)
    ends = {"source": source, "target": target}
    requests = {side: transfer.forecast.requests(side, end, stats.requests.get(side)) for side, end in ends.items()}
    result = SyncResult(source_url, target_url, settings, stats, gate, transfer.forecast, requests)
    result.report_path = write_report(
        result,
        report_path
        or state_dir / "reports" / f"sync-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}.json",
    )
    return result


def verify_sync(
    source_url: str,
    target_url: str,
    settings: TransferSettings,
    *,
    profiles: Mapping[str, Profile],
    state_dir: Path,
    deep: bool = False,
) -> CheckResult:
    """The data gate alone: every selected object on both sides listed and compared, whatever a sync copied."""
    with _opened(source_url, target_url, settings, profiles, state_dir) as (source, target, state):
        return check_data(source, target, state, settings, deep=deep)


@contextlib.contextmanager
def _opened(
    source_url: str, target_url: str, settings: TransferSettings, profiles: Mapping[str, Profile], state_dir: Path
) -> Iterator[tuple[Connector, Connector, TransferState]]:
    """Both ends and the shard's transfer state, closed after."""
    source, target = open_connector(source_url, profiles), open_connector(target_url, profiles)
    state = TransferState(state_dir, source.url, target.url, settings.prefix, settings.key_range)
    try:
        yield source, target, state
    finally:
        state.close()
        source.close()
        target.close()


def write_report(result: SyncResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def abort_uploads(target_url: str, profiles: Mapping[str, Profile]) -> list[tuple[str, str]]:
    """Abort every unfinished multipart upload under target_url."""
    target = open_connector(target_url, profiles)
    try:
        target.check()
        return abort_incomplete(target)
    finally:
        target.close()


def delete_created(
    target_url: str,
    profiles: Mapping[str, Profile],
    journal: Path,
    state_dir: Path,
    *,
    dry_run: bool = False,
    stopping: threading.Event | None = None,
) -> dict[str, Any]:
    """Undo a sync: delete the keys its journal says it created, each only while it is still what ferry wrote.

    An object whose signature (ETag, or mtime for files) is not the one the transfer state recorded
    when ferry verified it was written by someone else since, or never verified: it is kept and
    listed. Each key's outcome is appended to `<journal>.undone.jsonl` as it happens, so a rollback
    stopped between two keys (stopping set, Interrupted raised) resumes where it stopped; the
    report beside the journal (`.rollback.json`) marks it done. With dry_run it decides the same
    way and changes nothing. Objects that existed before and were overwritten cannot be restored
    without bucket versioning; the report says so.
    """
    undone_journal = Journal(journal.with_name(journal.stem + ".undone.jsonl"))
    undone = {outcome["key"]: outcome for outcome in undone_journal.entries()}
    keys = list(dict.fromkeys(Journal(journal).entries()))
    pending = [key for key in keys if key not in undone]
    decided: dict[str, dict[str, str]] = {}
    target = open_connector(target_url, profiles)
    try:
        recorded = written_signatures(state_dir, target.url, set(pending))
        live = _signatures(target, os.path.commonprefix(pending), set(pending)) if pending else {}
        for key in one_by_one(pending, None if dry_run else stopping):
            if key not in live:
                outcome = {"key": key, "done": "gone", "why": "not in the target (deleted already)"}
            elif key not in recorded:
                outcome = {"key": key, "done": "kept", "why": "no record that ferry verified what is there"}
            elif recorded[key] is None:
                outcome = {"key": key, "done": "kept", "why": "another sync into this target wrote it too"}
            elif live[key] != recorded[key]:
                outcome = {"key": key, "done": "kept", "why": "changed since ferry wrote it"}
            elif dry_run:
                outcome = {"key": key, "done": "deleted"}
            else:
                try:
                    target.delete(key)
                    outcome = {"key": key, "done": "deleted"}
                except FerryError as exc:
                    outcome = {"key": key, "done": "failed", "why": str(exc)}
            if not dry_run and outcome["done"] != "failed":
                undone_journal.add(outcome)
            decided[key] = outcome
    finally:
        target.close()
    if dry_run:
        words = {"deleted": "delete {key}", "gone": "{key} is gone already", "kept": "keep {key}: {why}"}
        items = [words[o["done"]].format(**{"why": "", **o}) for o in decided.values()]
        return {"to_delete": sum(o["done"] == "deleted" for o in decided.values()), "items": items}
    outcomes = [undone.get(key) or decided[key] for key in keys if key in undone or key in decided]
    kept = [f"kept {o['key']}: {o['why']}" for o in outcomes if o["done"] == "kept"]
    errors = [f"{o['key']}: {o['why']}" for o in outcomes if o["done"] == "failed"]
    report = {
        "deleted_created_objects": sum(o["done"] == "deleted" for o in outcomes),
        "gone_already": sum(o["done"] == "gone" for o in outcomes),
        "kept": len(kept),
        "first_kept": kept[:20],
        "errors": len(errors),
        "first_errors": errors[:20],
        "note": "objects that existed before and were overwritten cannot be restored without bucket versioning",
    }
    if not errors:
        # Done: a failed deletion leaves the journal pending, so the next rollback tries it again.
        write_atomic(journal.with_name(journal.stem + ".rollback.json"), json.dumps(report, indent=2) + "\n")
    words = {"deleted": "deleted {key}", "gone": "{key} is gone already", "kept": "kept {key}: {why}"}
    items = [words.get(o["done"], "could not delete {key}: {why}").format(**{"why": "", **o}) for o in outcomes]
    return {**report, "items": items}


def _signatures(target: Connector, prefix: str, keys: set[str]) -> dict[str, str]:
    """The live signature of each of keys the target holds (one listing of their common prefix)."""
    try:
        return {info.key: info.signature for info in target.list(prefix) if info.key in keys}
    except NotFoundError:  # the bucket or folder itself is gone
        return {}
