"""One sync, end to end: open both ends, run the engine, run the data gate, write the report.

`ferry sync` calls this directly (no Prefect); the data_sync flow calls it per shard.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.data import NAME, DataTally, check_data
from connectors.base import redact_url
from connectors.registry import open_connector
from connectors.transfer import Action, Stats, Transfer, TransferSettings, TransferState, abort_incomplete
from ferry.errors import FerryError
from ferry.profiles import Profile
from ferry.results import CheckResult, Status


@dataclass
class SyncResult:
    source: str
    target: str
    settings: TransferSettings
    stats: Stats
    gate: CheckResult
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
) -> SyncResult:
    """Sync source into target and verify it; the report lands in report_path (or the state dir).

    A set stop event ends the copy early (what was verified is kept); the result says it was interrupted.
    """
    source, target = open_connector(source_url, profiles), open_connector(target_url, profiles)
    state = TransferState(state_dir, source.url, target.url, settings.prefix)
    seen = DataTally()

    def observe(action: Action) -> None:
        seen.observe_unchanged(action)
        if on_action is not None:
            on_action(action)

    try:
        transfer = Transfer(source, target, state, settings, on_action=observe, stop=stop)
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
    finally:
        state.close()
        source.close()
        target.close()
    result = SyncResult(source_url, target_url, settings, stats, gate)
    result.report_path = write_report(
        result,
        report_path
        or state_dir / "reports" / f"sync-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}.json",
    )
    return result


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


def delete_created(target_url: str, profiles: Mapping[str, Profile], journal: Path) -> dict[str, Any]:
    """Undo a sync: delete the keys its journal says it created; write what was done beside the journal.

    Objects that existed before and were overwritten cannot be restored without bucket
    versioning; the report says so rather than pretending.
    """
    target = open_connector(target_url, profiles)
    deleted, errors = 0, []
    try:
        if journal.exists():
            with journal.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        target.delete(json.loads(line))
                        deleted += 1
                    except FerryError as exc:
                        errors.append(str(exc))
    finally:
        target.close()
    report = {
        "deleted_created_objects": deleted,
        "errors": len(errors),
        "first_errors": errors[:20],
        "note": "objects that existed before and were overwritten cannot be restored without bucket versioning",
    }
    journal.with_name(journal.stem + ".rollback.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
