"""Rolling a phase back: decided by ferry alone, announced first, resumable, recorded in the run log.

The pipeline rolls a phase back once its steps and gate have ended and the gate failed (or a step
failed after its last retry); `ferry rollback` does it by hand. Both come here. An interrupt never
starts a rollback; during one it is held and taken between two items (`ferry.interrupts`), so the
phase's record says `rollback_interrupted` and the next `ferry rollback --phase P`, or the same run
again, finishes it. A run that resumed interrupted runs records them (`resumed.json`), so that its
rollback undoes what they changed too.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from ferry.audit import AuditFolder
from ferry.errors import FerryError, Interrupted, RollbackInterrupted, UsageError
from ferry.interrupts import deferred, one_by_one
from ferry.phases.base import Phase, Undo
from ferry.results import SHOWN_ITEMS
from ferry.runlog import PhaseStatus, RunLog

# A phase record in one of these is a rollback ferry decided and has not finished: it is finished first.
PENDING = (PhaseStatus.ROLLING_BACK, PhaseStatus.ROLLBACK_INTERRUPTED, PhaseStatus.ROLLBACK_FAILED)
# A phase record in one of these is a run that may have changed the target (or resumed runs that did) and
# stopped before its end: the next run takes it over (`resumed.json`).
UNFINISHED = (
    PhaseStatus.RUNNING,
    PhaseStatus.INTERRUPTED,
    PhaseStatus.FAILED,
    PhaseStatus.WAITING_FOR_APPROVAL,
    PhaseStatus.NOT_APPROVED,
)
# In a run's audit folder of a phase: the earlier runs whose unfinished work this run took over.
RESUMED = "resumed.json"


def resumed_runs(audit_root: Path, phase: str) -> list[Path]:
    """The audit folders of the earlier runs of phase that the run at audit_root resumed, newest first."""
    path = audit_root / phase / RESUMED
    return [Path(p) for p in json.loads(path.read_text(encoding="utf-8"))] if path.exists() else []


def resume(audit: AuditFolder, phase: str, previous: Path) -> None:
    """Record that this run of phase takes over what the run at previous left unfinished (and what that one took)."""
    chain = [previous, *resumed_runs(previous, phase)]
    audit.write_json(phase, RESUMED, [str(p) for p in chain])


def undo_chain(
    phase: Phase,
    audit_root: Path,
    *,
    dry_run: bool = False,
    force: bool = False,
    stopping: threading.Event | None = None,
) -> Undo:
    """Roll back the run at audit_root and every run it resumed, newest first."""
    roots = [audit_root, *resumed_runs(audit_root, phase.name)]
    undos = [
        phase.rollback(AuditFolder(root), dry_run=dry_run, force=force, stopping=stopping)
        for root in one_by_one(roots, None if dry_run else stopping)
    ]
    if len(undos) == 1:
        return undos[0]
    text = "; ".join(f"run {root.name}: {u.text}" for root, u in zip(roots, undos, strict=True))
    return Undo(text, [item for u in undos for item in u.items], sum(u.failed for u in undos))


def listing(phase: str, audit_root: Path, preview: Undo) -> list[str]:
    """The lines that announce a rollback: the first items, and where the full list is written."""
    lines = [f"  {item}" for item in preview.items[:SHOWN_ITEMS]]
    if len(preview.items) > SHOWN_ITEMS:
        path = audit_root / phase / "rollback-items.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(preview.items) + "\n", encoding="utf-8")
        lines.append(f"  ... and {len(preview.items) - SHOWN_ITEMS} more ({len(preview.items)} in all: {path})")
    return lines


def roll_back(
    phase: Phase,
    runlog: RunLog,
    run_id: str,
    audit_root: Path,
    input_hash: str,
    why: str,
    say: Callable[[str], None],
    *,
    force: bool = False,
    announced: Undo | None = None,
) -> Undo:
    """Undo run_id's changes to phase (and the runs it resumed), saying first what that deletes or restores
    (unless the caller announced it already: `announced`, its dry run), then what was done.

    The phase's record says `rolling_back` before anything changes (a killed process, or an error that is
    not ferry's, leaves it so: still pending), `rollback_interrupted` when an interrupt stopped it between
    two items (RollbackInterrupted is raised), `rollback_failed` when items failed or it raised a FerryError,
    and `rolled_back` once done; a commit it undid is marked rolled back. An interrupt that arrived during
    its last item is raised once the record says so, as RollbackInterrupted naming the rollback as finished.
    """
    plan, name = phase.loaded.plan.name, phase.name
    finish = f"`ferry rollback --phase {name}` (or the same run again) finishes it"
    before = runlog.phase(plan, name)
    with deferred() as held:
        runlog.set_phase(plan, name, input_hash, PhaseStatus.ROLLING_BACK, run_id, why)
        try:
            if announced is None:
                preview = undo_chain(phase, audit_root, dry_run=True)
                say(f"rolling back {name} of run {run_id} ({why}): {preview.text}")
                for line in listing(name, audit_root, preview):
                    say(line)
            if held.is_set():
                raise Interrupted(held.signum or signal.SIGINT)
            done = undo_chain(phase, audit_root, force=force, stopping=held)
        except Interrupted as exc:
            held.signum = None
            runlog.set_phase(plan, name, input_hash, PhaseStatus.ROLLBACK_INTERRUPTED, run_id, f"{why}; {finish}")
            raise RollbackInterrupted(
                exc.signum, f"the rollback of {name} stopped between two items; {finish}"
            ) from None
        except UsageError:
            # Refused before it changed anything (objects changed since the rollout, without --force).
            if before is not None:
                runlog.set_phase(plan, name, before.input_hash, before.status, before.run_id, before.detail)
            raise
        except FerryError as exc:
            runlog.set_phase(
                plan, name, input_hash, PhaseStatus.ROLLBACK_FAILED, run_id, f"{why}; rollback: {exc}; {finish}"
            )
            raise
        say(f"rolled back {name} of run {run_id}: {done.text}")
        if done.failed:
            runlog.set_phase(
                plan,
                name,
                input_hash,
                PhaseStatus.ROLLBACK_FAILED,
                run_id,
                f"{why}; {done.failed} item(s) failed; {finish}",
            )
        elif (runlog.live_commit(plan, name) or ("",))[0] == run_id:
            runlog.roll_back_commit(plan, name, run_id, why)
        else:
            runlog.set_phase(plan, name, input_hash, PhaseStatus.ROLLED_BACK, run_id, why)
        if held.signum is not None:
            signum, held.signum = held.signum, None
            raise RollbackInterrupted(signum, f"the rollback of {name} had finished: {done.text}")
    return done
