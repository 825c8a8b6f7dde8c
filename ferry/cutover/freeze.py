"""The freeze steps, applied in order and undone in reverse, through a journal that says at every instant what is
frozen: each step is journalled with what undoing it needs before it changes anything, each undo once done."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from connectors.registry import open_connector
from ferry.cutover import policy
from ferry.cutover.quiesce import Workloads
from ferry.errors import FerryError, UsageError
from ferry.files import Journal
from ferry.plan import BucketPolicyStep, LoadedPlan, QuiesceStep, RunStep

Say = Callable[[str], None]


def describe(step: RunStep | BucketPolicyStep | QuiesceStep) -> str:
    """A freeze step in a few words."""
    if isinstance(step, RunStep):
        return f"run {step.run!r}"
    if isinstance(step, QuiesceStep):
        return f"quiesce {', '.join(step.quiesce.workloads)}"
    return f"bucket_policy {step.bucket_policy}"


@dataclass
class Frozen:
    """A freeze not yet undone: the run that applied it and the steps still in force (by their number)."""

    run_id: str
    since: str
    steps: list[dict[str, Any]]


class Freeze:
    """The plan's freeze steps against its source, journalled in the state directory (`StateLayout.frozen`)."""

    def __init__(self, loaded: LoadedPlan):
        self.loaded = loaded
        self.steps = loaded.plan.cutover.freeze if loaded.plan.cutover else []
        self.journal = Journal(loaded.layout.frozen(loaded.plan.name))

    def frozen(self) -> Frozen | None:
        """The freeze in force (its last `freeze` entry has no `unfrozen` after it); None when the source is not
        frozen by ferry."""
        current: list[dict[str, Any]] = []
        for entry in self.journal.entries():
            if entry["event"] == "freeze":
                current = [entry]
            elif current:
                current.append(entry)
        # After a switch the freeze stays, on purpose: the source no longer serves.
        if not current or current[-1]["event"] in ("unfrozen", "switched"):
            return None
        undone = {e["step"] for e in current if e["event"] == "undone"}
        applying = [e for e in current if e["event"] == "applying" and e["step"] not in undone]
        return Frozen(current[0]["run_id"], current[0]["at"], applying)

    def apply(self, run_id: str, say: Say) -> dict[str, float]:
        """Apply every step in order; the seconds each took, by its description. A step that fails raises (the caller
        undoes what the journal says was applied)."""
        for step in self.steps:
            if isinstance(step, QuiesceStep):
                for said in self._scalers(step):
                    say(f"warning: {said}: it may scale a quiesced workload back up during the freeze")
        self.journal.add({"event": "freeze", "run_id": run_id, "at": datetime.now(UTC).isoformat()})
        seconds: dict[str, float] = {}
        for number, step in enumerate(self.steps):
            started = time.monotonic()
            entry: dict[str, Any] = {"event": "applying", "step": number, "what": describe(step)}
            if isinstance(step, QuiesceStep):
                self._quiesce(step, entry)
            elif isinstance(step, RunStep):
                entry["undo"] = step.undo
                self.journal.add(entry)
                self._run(step.run, f"freeze step {number + 1} ({describe(step)})")
            else:
                source = self._source()
                try:
                    entry["prior"] = source.bucket_policy()
                    exempt = policy.principal_arn(source.caller_arn())
                    deadline = datetime.now(UTC) + timedelta(seconds=self.loaded.plan.cutover.max_freeze)
                    entry.update(exempt=exempt, deadline=deadline.isoformat())
                    self.journal.add(entry)
                    source.set_bucket_policy(
                        policy.deny_writes(entry["prior"], source.bucket, source.root, exempt, deadline)
                    )
                finally:
                    source.close()
            seconds[describe(step)] = time.monotonic() - started
            self.journal.add({"event": "applied", "step": number})
            say(f"frozen: {describe(step)} ({seconds[describe(step)]:.1f} s)")
        return seconds

    def undo(self, say: Say) -> int:
        """Undo the steps in force, newest first, each journalled once undone; the count that failed (0: unfrozen).

        A step whose apply was cut short is undone too: its undo must be safe to run either way."""
        frozen = self.frozen()
        if frozen is None:
            return 0
        failed = 0
        for entry in reversed(frozen.steps):
            try:
                if "replicas" in entry:
                    workloads = Workloads(self.loaded)
                    try:
                        for workload, replicas in entry["replicas"].items():
                            workloads.scale(workload, replicas)
                    finally:
                        workloads.close()
                    said = ", ".join(f"{w} back to {n}" for w, n in entry["replicas"].items())
                elif "prior" in entry:
                    source = self._source()
                    try:
                        source.set_bucket_policy(entry["prior"])
                    finally:
                        source.close()
                    said = "the bucket policy restored" if entry["prior"] else "ferry's bucket policy deleted"
                elif entry.get("undo"):
                    self._run(entry["undo"], f"undo of freeze step {entry['step'] + 1}")
                    said = f"ran {entry['undo']!r}"
                else:
                    said = "no undo given"
            except FerryError as exc:
                failed += 1
                say(f"could not undo {entry['what']}: {exc}")
                continue
            self.journal.add({"event": "undone", "step": entry["step"]})
            say(f"unfrozen: {entry['what']}: {said}")
        if not failed:
            self.journal.add({"event": "unfrozen", "at": datetime.now(UTC).isoformat()})
        return failed

    def _scalers(self, step: QuiesceStep) -> list[str]:
        workloads = Workloads(self.loaded)
        try:
            return workloads.scalers(step.quiesce.workloads)
        finally:
            workloads.close()

    def _quiesce(self, step: QuiesceStep, entry: dict[str, Any]) -> None:
        """Scale the step's workloads to 0, their replica counts journalled first, and wait for their pods to go."""
        workloads = Workloads(self.loaded)
        try:
            entry["replicas"] = {w: workloads.replicas(w) for w in step.quiesce.workloads}
            self.journal.add(entry)
            for workload in step.quiesce.workloads:
                workloads.scale(workload, 0)
            for workload in step.quiesce.workloads:
                workloads.wait_gone(workload)
        finally:
            workloads.close()

    def uploads_in_flight(self) -> list[str]:
        """The multipart uploads unfinished on the source: under the freeze none can complete (writes are denied or
        the writers stopped), so what they would write is outside the point-in-time copy."""
        source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
        try:
            return [key for key, _ in source.list_incomplete()]
        finally:
            source.close()

    def _source(self) -> Any:
        source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
        if not hasattr(source, "set_bucket_policy"):
            source.close()
            raise UsageError(f"cutover.freeze: bucket_policy needs an S3 source; {source.url} is {source.kind}")
        return source

    def _run(self, command: str, what: str) -> None:
        # A command line as a shell runs it, in the plan's folder; its output is not logged (it may hold secrets).
        done = subprocess.run(
            ["/bin/sh", "-c", command], cwd=self.loaded.path.parent, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise FerryError(f"{what}: {shlex.quote(command)} exited {done.returncode}")
