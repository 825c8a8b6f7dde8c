"""A cut-over from start to end, as plain functions: the flow (`flows/cutover.py`) gives it how to wait for an
approval and how to run a switch phase, and runs it under the plan's run lock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from ferry.cutover import history
from ferry.cutover.delta import change_log, run_delta, verify
from ferry.cutover.freeze import Freeze, Say
from ferry.cutover.inventory import Inventory, load_inventory
from ferry.cutover.predict import never_fits, predict
from ferry.cutover.report import Record
from ferry.errors import FerryError, Interrupted, UsageError
from ferry.files import write_atomic
from ferry.interrupts import failpoint
from ferry.phases.base import open_phase
from ferry.plan import LoadedPlan
from ferry.results import Status, gate_status
from ferry.runlog import PhaseStatus, RunLog

# Phases whose outcome the target needs before anything serves from it: committed at the plan's hash, or no cut-over.
_BEFORE = ("iam", "images")


class CutoverStopped(FerryError):
    """The cut-over stopped before it froze the source (the final delta would not fit, a delta failed)."""


def check_ready(loaded: LoadedPlan, runlog: RunLog) -> None:
    """UsageError unless every enabled iam or images phase is committed at the plan's current inputs."""
    plan = loaded.plan
    for name in _BEFORE:
        if name not in plan.enabled_phases():
            continue
        record = runlog.phase(plan.name, name)
        settled = record is not None and record.status in (PhaseStatus.COMMITTED, PhaseStatus.UNCHANGED)
        if not settled or record.input_hash != open_phase(loaded, name).input_hash():
            raise UsageError(
                f"cutover: the {name} phase is not committed at the plan's current inputs: `ferry run "
                f"{loaded.path} --only {name}` first"
            )


def run_cutover(
    loaded: LoadedPlan,
    run_id: str,
    *,
    rehearse: bool,
    approve: Callable[[str], float],
    switch: Callable[[str], None],
    say: Say,
) -> Record:
    """Live deltas until the final one is predicted to fit, the approval (`approve(text)`: the seconds it waited),
    the freeze, the final delta verified point in time, then the switch phases (or, rehearsing, the unfreeze).

    A failure once frozen undoes the freeze in reverse (the switch phases roll themselves back as in a run); an
    interrupt undoes nothing and leaves the freeze journalled for `--unfreeze` or the same command, which resumes.
    """
    settings = loaded.plan.cutover
    assert settings is not None
    folder = loaded.layout.run(run_id) / "cutover"
    record = Record(run_id, loaded.plan.name, settings.freeze_budget, rehearse)
    freeze = Freeze(loaded)
    try:
        frozen = freeze.frozen()
        if frozen is not None and len(frozen.steps) == len(settings.freeze) and _all_applied(freeze):
            say(f"resuming under the freeze run {frozen.run_id} applied at {frozen.since}: the final delta next")
            # The freeze window runs from when the source was frozen; this run made no prediction of its own.
            record.freeze_started = datetime.fromisoformat(frozen.since).timestamp()
        else:
            if frozen is not None:
                say(f"undoing the freeze run {frozen.run_id} left half applied, then live deltas again")
                _unfreeze(freeze, say)
            _live_deltas(loaded, record, folder, approve, say)
            record.freeze_started = time.time()
            record.freeze_steps_s = freeze.apply(run_id, say)
        failpoint("cutover:frozen")
        record.uploads_outside_copy = freeze.uploads_in_flight()
        if record.uploads_outside_copy:
            say(f"{len(record.uploads_outside_copy)} multipart upload(s) unfinished on the source: outside the copy")
        record.final = run_delta(loaded, len(record.deltas) + 1, folder, final=True)
        record.final_delta_done = time.time()
        say(f"final delta: {record.final.objects} copied, {record.final.deleted} deleted")
        started = time.monotonic()
        results = verify(loaded)
        verification_s = time.monotonic() - started
        record.verification = [r.to_dict() for r in results]
        record.verified_at = time.time()
        record.verified = gate_status(results, loaded.plan.strict) != Status.FAIL
        if not record.verified:
            failing = "; ".join(e for r in results if r.status == Status.FAIL for e in r.evidence[:3])
            raise FerryError(f"the final delta's point-in-time verification failed: {failing}")
        say("verified: every object on both sides compared")
        if rehearse:
            _unfreeze(freeze, say)
            record.ended_at, record.outcome = time.time(), "rehearsed"
        else:
            for name in settings.switch:
                began = time.monotonic()
                switch(name)
                record.switch_s[name] = time.monotonic() - began
            record.ended_at, record.switched, record.outcome = time.time(), True, "switched"
            freeze.journal.add({"event": "switched", "run_id": run_id})
        _keep_durations(loaded, record, verification_s)
    except Interrupted:
        record.outcome = "interrupted"
        raise
    except FerryError as exc:
        if freeze.frozen() is None:
            record.outcome = "stopped"
            raise CutoverStopped(str(exc)) from None
        record.outcome = "rolled back"
        say(f"{exc}: undoing the freeze, the source stays authoritative")
        _unfreeze(freeze, say)
        raise
    except BaseException:  # an interrupt as the orchestrator delivers it (KeyboardInterrupt, its signal): undo nothing
        record.outcome = "interrupted"
        raise
    finally:
        record.write(folder)
    return record


def still_frozen(loaded: LoadedPlan) -> str | None:
    """What an interrupted cut-over's last line says when it left the source frozen; None when it did not."""
    if Freeze(loaded).frozen() is None:
        return None
    return (
        f"the source is still frozen: `ferry cutover {loaded.path} --unfreeze` undoes the freeze; the same command "
        "resumes with the final delta"
    )


def unfreeze(loaded: LoadedPlan, say: Say) -> bool:
    """`ferry cutover --unfreeze`: undo the freeze in force; False when there was none."""
    freeze = Freeze(loaded)
    if freeze.frozen() is None:
        return False
    _unfreeze(freeze, say)
    return True


def _unfreeze(freeze: Freeze, say: Say) -> None:
    failed = freeze.undo(say)
    if failed:
        raise FerryError(
            f"{failed} freeze step(s) could not be undone: the source is still frozen; "
            f"`ferry cutover {freeze.loaded.path} --unfreeze` tries again"
        )


def _all_applied(freeze: Freeze) -> bool:
    """Whether the freeze in force got through every step (its last step's `applied` is journalled)."""
    entries = list(freeze.journal.entries())
    last = max((i for i, e in enumerate(entries) if e["event"] == "freeze"), default=0)
    applied = {e["step"] for e in entries[last:] if e["event"] == "applied"}
    return applied == set(range(len(freeze.steps)))


def _live_deltas(loaded: LoadedPlan, record: Record, folder: Path, approve: Callable[[str], float], say: Say) -> None:
    """Deltas from the live source until the prediction fits and is approved; CutoverStopped when it never fits."""
    settings = loaded.plan.cutover
    measured = history.measured(loaded)
    approved = False
    report: tuple[str, int] | None = None  # the inventory report the last delta by a report read: manifest, created
    for number in range(1, settings.max_deltas + 1):
        newer = None
        if settings.inventory is not None and settings.change_log is None and report is not None:
            newer = Inventory.newer(report[0], loaded.plan.profiles, report[1])
        if settings.inventory is not None and (report is None or newer is not None):
            # The first, bulk delta from the plan's report; a later one from a report that appeared since.
            manifest = newer or settings.inventory.manifest
            inventory = load_inventory(loaded, folder, manifest)
            report = (manifest, inventory.created)
            delta = run_delta(loaded, number, folder, final=False, inventory=inventory)
        elif settings.change_log is None or not record.deltas:
            delta = run_delta(loaded, number, folder, final=False)
        else:  # after a first full listing, the keys the change log named since
            with change_log(loaded) as changes:
                last = record.deltas[-1].target_objects
                delta = run_delta(loaded, number, folder, final=False, changes=changes, target_objects=last)
        record.deltas.append(delta)
        say(
            f"delta {number}: {delta.objects} copied ({delta.bytes} bytes), {delta.deleted} deleted, "
            f"{delta.changed_during_copy} changed during the copy, in {delta.seconds:.1f} s"
        )
        record.prediction = predict(record.deltas, settings.freeze_budget, measured)
        record.write(folder)
        fits = record.prediction is not None and record.prediction.fits
        if fits:
            text = record.prediction.text(settings.freeze_budget)
            say(text)
            if approved or approve(text) <= settings.delta_interval:
                return
            # The churn since the last delta is no longer what was predicted: one more delta, then freeze if it fits.
            say("the approval waited longer than delta_interval: one more live delta, then the prediction again")
            approved = True
            continue
        approved = False  # a prediction that no longer fits needs a new approval once it does
        if number < settings.max_deltas:
            time.sleep(settings.delta_interval)
    if record.prediction is None:
        raise CutoverStopped("no churn was measured (the deltas ran at the same instant)")
    raise CutoverStopped(never_fits(record.prediction, settings.freeze_budget, len(record.deltas)))


def _keep_durations(loaded: LoadedPlan, record: Record, verification_s: float) -> None:
    path = loaded.layout.cutover_durations(loaded.plan.name)
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if record.freeze_steps_s:
        kept["freeze steps"] = sum(record.freeze_steps_s.values())
    kept["verification"] = verification_s
    if record.switched:
        kept["switch phases"] = sum(record.switch_s.values())
    write_atomic(path, json.dumps(kept, indent=2) + "\n")
