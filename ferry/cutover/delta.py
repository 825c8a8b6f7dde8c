"""One delta: every data_sync shard synced from the source (live: an object changing under its copy is left for
the next delta), then the keys the source no longer holds deleted from the target, only after a delta without
errors and within max_delete; the final delta is verified point in time, every object on both sides compared."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.registry import open_connector
from connectors.transfer import SKIP, Action
from ferry.cutover.inventory import Inventory
from ferry.cutover.predict import Delta
from ferry.errors import FerryError
from ferry.phases.base import open_phase
from ferry.phases.data_sync import ShardSpec
from ferry.plan import LoadedPlan
from ferry.results import CheckResult
from ferry.sync import run_sync, verify_sync

if TYPE_CHECKING:
    from connectors.s3 import Changes

_KEYS_NAMED = 20


class DeltaFailed(FerryError):
    """A delta had errors or would delete more than max_delete: nothing was deleted."""


def shards(loaded: LoadedPlan) -> list[ShardSpec]:
    """The data_sync phase's shards, as its steps run them."""
    phase = open_phase(loaded, "data_sync")
    return [phase.step_spec(step) for step in phase.steps()]


def run_delta(
    loaded: LoadedPlan,
    number: int,
    folder: Path,
    *,
    final: bool,
    changes: Changes | None = None,
    target_objects: int = 0,
    inventory: Inventory | None = None,
) -> Delta:
    """Sync every shard once, then delete what only the target holds; the delta's figures.

    changes: only the keys the change log named since the last delta, asked of each side instead of listing them
    (the source's state known from the events' sequencers taken as it is); the share of the target a delete takes is
    then of target_objects, the target's count at the last listing. inventory: the
    source's listing (an S3 Inventory report); it may be older than the target's, so that delta deletes nothing.
    Raises DeltaFailed when an object failed (nothing deleted) or the deletes exceed max_delete (naming the keys)."""
    started, clock = time.time(), time.monotonic()
    copied = size = changed = failed = listed = target_count = 0
    gone: list[tuple[ShardSpec, str]] = []
    first_failure = ""
    for spec in shards(loaded):
        only_in_target: list[str] = []
        seen = [0]

        def observe(action: Action, keys: list[str] = only_in_target, counted: list[int] = seen) -> None:
            if action.dst is not None:
                counted[0] += 1
            if action.kind == SKIP and action.src is None:
                keys.append(action.key)

        settings = dataclasses.replace(spec.settings, live=not final, delete=False)
        result = run_sync(
            spec.source,
            spec.target,
            settings,
            profiles=spec.profiles,
            state_dir=Path(spec.state_dir),
            verify=False,
            report_path=folder / f"delta-{number:03d}-{spec.step or 'all'}.json".replace("/", "_"),
            on_action=observe,
            keys=None if changes is None else changes.keys,
            source_listing=None if inventory is None else inventory.objects(),
            source_known=None if changes is None else changes.latest,
        )
        stats = result.stats
        copied, size, changed = copied + stats.copied, size + stats.bytes_copied, changed + stats.changed_during_copy
        failed, listed, target_count = failed + stats.failed, listed + stats.objects_listed, target_count + seen[0]
        first_failure = first_failure or next(iter(stats.failures), "")
        if inventory is None:
            gone += [(spec, key) for key in only_in_target]
    if failed:
        raise DeltaFailed(f"delta {number}: {failed} object(s) failed, nothing was deleted; first: {first_failure}")
    if changes is not None:
        target_count = target_objects
    _check_deletes(loaded, number, [key for _, key in gone], target_count)
    for spec, key in gone:
        target = open_connector(spec.target, spec.profiles)
        try:
            target.delete(key)
        finally:
            target.close()
    return Delta(
        number=number,
        started=started,
        seconds=time.monotonic() - clock,
        objects=copied,
        bytes=size,
        deleted=len(gone),
        changed_during_copy=changed,
        listed=listed,
        target_objects=target_count,
        by_change_log=changes is not None,
        by_inventory=inventory is not None,
        final=final,
    )


@contextlib.contextmanager
def change_log(loaded: LoadedPlan) -> Iterator[Changes]:
    """What the source's event notifications said since they were last read (`cutover.change_log`); the events are
    deleted from the queue only once the block ends without an error, so a failed delta sees them again."""
    queue = loaded.plan.cutover.change_log.sqs_queue_url
    source = open_connector(loaded.storage("source"), loaded.plan.profiles)
    try:
        changes = source.changed_keys(queue)
        yield changes
        source.forget_events(queue, changes.handles)
    finally:
        source.close()


def _check_deletes(loaded: LoadedPlan, number: int, keys: list[str], target_count: int) -> None:
    bound = loaded.plan.cutover.max_delete
    share = 100 * len(keys) / target_count if target_count else 0.0
    if len(keys) <= bound.count and share <= bound.percent:
        return
    named = ", ".join(sorted(keys)[:_KEYS_NAMED]) + (
        f" and {len(keys) - _KEYS_NAMED} more" if len(keys) > _KEYS_NAMED else ""
    )
    raise DeltaFailed(
        f"delta {number} would delete {len(keys)} object(s), {share:.1f}% of the target's {target_count}, over "
        f"cutover.max_delete ({bound.count} objects, {bound.percent:g}%): nothing was deleted: {named}"
    )


def verify(loaded: LoadedPlan) -> list[CheckResult]:
    """The point-in-time verification: every shard's objects on both sides listed and compared."""
    return [
        verify_sync(spec.source, spec.target, spec.settings, profiles=spec.profiles, state_dir=Path(spec.state_dir))
        for spec in shards(loaded)
    ]
