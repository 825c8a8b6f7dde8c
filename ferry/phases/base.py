"""The Phase contract: what every phase of a migration provides, free of Prefect.

A phase reads the plan, does its work idempotently in steps (one Prefect task each, so a
shard or a step is retried and rolled back on its own), writes what it did into the run's
audit folder, and measures with its gate whether the result holds. The pipeline (flows/)
drives every phase through this contract alone: a new phase is its module, one line in
ferry/phase_registry.py, its checks and its tests.
"""

from __future__ import annotations

import abc
import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import structlog
from pydantic import BaseModel, ConfigDict, Field

from checks.preflight import preflight as plan_preflight
from ferry import __version__
from ferry.audit import AuditFolder
from ferry.config import Settings
from ferry.errors import PermanentError
from ferry.phase_registry import load_phase
from ferry.plan import LoadedPlan, Plan, load_plan
from ferry.profiles import Credentials
from ferry.results import CheckResult

# In a phase's folder of a run: its rollback finished (what it did, in words).
ROLLED_BACK = "rollback.json"
log = structlog.get_logger("ferry.phases")


class StepResult(BaseModel):
    """What one step did: whether it changed the target, and the phase's own figures (JSON values).

    Frozen and JSON-serialisable: it crosses process boundaries (a Prefect task's result, a worker's), and the
    pipeline writes a phase's results to its audit folder (`summary.json`). A run whose steps changed nothing
    commits nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    changed: bool
    details: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Changes:
    """What a phase would change (a dry run), for approvals: one paragraph and the totals behind it."""

    text: str
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(self.totals.values())


@dataclass(frozen=True)
class Undo:
    """What a rollback did or would do: one line, each thing it deletes or restores (one line each), and how many
    of them failed (a rollback with failures is not done: the next one tries them again)."""

    text: str
    items: list[str] = field(default_factory=list)
    failed: int = 0


class Reporter:
    """Where a running phase shows progress and reports, and learns that it should stop.

    The pipeline gives Prefect's; tests and direct calls this silent one, which is never asked to stop.
    """

    def __init__(self, stopping: threading.Event | None = None):
        # Set when the run is interrupted: a step stops soon, keeping what it has verified.
        self.stopping = stopping or threading.Event()

    def markdown(self, key: str, text: str, description: str) -> None:
        """Publish a Markdown report under key."""

    def progress(self, key: str, description: str) -> Progress:
        """A progress gauge under key, from 0 to 100 percent."""
        return Progress()


class Progress:
    """A progress gauge; update() takes a percentage."""

    def update(self, percent: float) -> None:
        """Show percent done."""


@dataclass(frozen=True)
class Placement:
    """Where a phase's steps run: threads of this process (neither set), a local Dask cluster of `dask_workers`
    worker processes, or the existing Dask scheduler at `dask_address`."""

    dask_address: str | None = None
    dask_workers: int | None = None


@dataclass(frozen=True)
class StepSpec(abc.ABC):
    """One step as it travels to where it runs (a thread here, a Dask worker elsewhere): picklable, and everything
    the step needs without secret values (credentials travel as references, resolved where the step runs)."""

    phase: str
    step: str
    # The ferry that made the spec: a worker running another refuses it (`checked`).
    version: str = field(default=__version__, kw_only=True)

    @abc.abstractmethod
    def run(self, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Do the step, where it runs (what Phase.run does)."""

    @property
    def needs_audit_folder(self) -> bool:
        """Whether the step must run where the run's audit folder is (its journals are written there)."""
        return True

    def divided(self, peers: int, *, in_process: bool) -> StepSpec:
        """The spec for one of `peers` steps running at once: what the plan sets for the whole run (a bandwidth limit,
        a memory budget; in_process, when they share this process, its threads too) divided among them. Unchanged by
        default."""
        return self

    def checked(self) -> StepSpec:
        """The spec, or PermanentError if the ferry running it is not the one that made it."""
        if self.version != __version__:
            raise PermanentError(
                f"step {self.step or self.phase!r} was made by ferry {self.version}; this worker runs ferry "
                f"{__version__}: run one version on the driver and every worker"
            )
        return self


@dataclass(frozen=True)
class PlanStep(StepSpec):
    """A step that loads the plan where it runs (the default): it runs only where the plan's path, and the files
    and variables the plan names, exist."""

    plan_path: str = field(kw_only=True)

    def run(self, audit: AuditFolder, reporter: Reporter) -> StepResult:
        return open_phase(load_plan(Path(self.plan_path)), self.phase).run(self.step, audit, reporter)


class Phase(abc.ABC):
    """One phase of a migration for one loaded plan."""

    # The name in the plan (`phases.<name>`, `gates.<name>`), the registry and the run log.
    name: ClassVar[str]
    settings_model: ClassVar[type[Settings]]
    gate_model: ClassVar[type[Settings]]
    # Whether the steps run at once (one task each). A phase whose steps would disturb each other's measurements, or
    # read what an earlier one wrote, runs them one after another, in the order steps() gives.
    concurrent_steps: ClassVar[bool] = True

    def __init__(self, loaded: LoadedPlan):
        self.loaded = loaded

    @property
    def live_inputs(self) -> bool:
        """True when what the phase reads lives outside the plan (storage, a live API, a registry, a cluster).

        The plan's hash cannot tell that nothing changed there, so such a phase is never skipped on it.
        """
        return False

    @property
    def settings(self) -> Any:
        """This plan's `phases.<name>` section, validated by settings_model."""
        return getattr(self.loaded.plan.phases, self.name)

    @property
    def gate_settings(self) -> Any:
        """This plan's `gates.<name>` section (defaults when absent), validated by gate_model."""
        return getattr(self.loaded.plan.gates, self.name)

    # -- the plan ---------------------------------------------------------------------------------
    @classmethod
    def check_plan(cls, plan: Plan) -> None:
        """Rules across sections that the phase needs (raise ValueError with the fix); called at load time."""
        return None

    def files(self) -> dict[tuple, Path]:
        """The files and folders the phase reads, by the plan field naming each (`plan validate` checks they exist)."""
        return {}

    def credentials(self) -> dict[tuple, Credentials]:
        """The credentials the phase's settings name, by the plan field naming each (`plan validate` checks their
        variables are set, `plan show` lists them)."""
        return {}

    def inputs(self) -> dict[str, Any]:
        """What the phase's outcome depends on besides its settings and gate: files, URLs, roles (for the hash)."""
        return {}

    def input_hash(self) -> str:
        """A digest of everything the phase's outcome depends on; a committed phase with the same one is done."""
        inputs: dict[str, Any] = {
            "phase": self.name,
            "settings": self.settings.model_dump(mode="json"),
            "gate": self.gate_settings.model_dump(mode="json"),
            "strict": self.loaded.plan.strict,
            **self.inputs(),
        }
        return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]

    @abc.abstractmethod
    def summary(self) -> str:
        """What the phase will do, in one paragraph, from the plan alone (no I/O): for `plan show`."""

    @abc.abstractmethod
    def changes(self) -> Changes:
        """What running the phase now would change (a dry run, reading the live state): for approvals."""

    def preflight(self) -> list[CheckResult]:
        """Checks that must pass before any phase changes anything (sources readable, APIs answering)."""
        return []

    # -- a run ------------------------------------------------------------------------------------
    def prepare(self) -> None:  # noqa: B027 - optional hook: most phases plan nothing before their steps
        """Once per run, before its steps are listed, under the plan's run lock (data_sync splits key ranges that
        outgrew their bound here); never in a preview."""

    def steps(self) -> list[str]:
        """The phase's steps, each one Prefect task (retried on its own, on transient errors)."""
        return ["run"]

    @abc.abstractmethod
    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Do one step, idempotently; record in the audit folder what rollback needs. Says what it changed."""

    def placement(self) -> Placement:
        """Where the steps run: threads of this process unless the phase's settings name a cluster."""
        return Placement()

    def step_spec(self, step: str) -> StepSpec:
        """The step as it travels to where it runs (by default the plan's path: `PlanStep`)."""
        return PlanStep(self.name, step, plan_path=str(self.loaded.path))

    @abc.abstractmethod
    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """Measure whether what the run did holds (after every step)."""

    def rollback(
        self, audit: AuditFolder, *, dry_run: bool = False, force: bool = False, stopping: threading.Event | None = None
    ) -> Undo:
        """Undo what the run whose audit folder this is did, once; say what was done, item by item.

        Called by ferry alone, never by an orchestrator's hook: by the pipeline once a phase's steps and
        gate have ended and the gate failed (or a step did after its last retry), and by `ferry rollback`.
        A rollback that finished (something undone, nothing failed) is marked done in the phase's folder,
        and a second call says so and does nothing; otherwise the phase's undo() runs.
        """
        done = audit.root / self.name / ROLLED_BACK
        if done.exists():
            return Undo(f"nothing to undo: {json.loads(done.read_text(encoding='utf-8'))['done']} already")
        undo = self.undo(audit, dry_run=dry_run, force=force, stopping=stopping)
        if not dry_run and undo.items and not undo.failed:
            audit.write_json(self.name, ROLLED_BACK, {"done": undo.text})
            log.warning(f"rolled back the {self.name} phase", done=undo.text)
        return undo

    @abc.abstractmethod
    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """The phase's own undo of the run whose audit folder this is, for rollback().

        With dry_run, change nothing and say what it would do. A phase that finds what the run left changed
        since (by someone else) stops and says so, unless force (`ferry rollback --force`). When stopping is
        set (an interrupt, held by `ferry.interrupts.deferred`) it stops between two items with the ones it
        undid journalled (`ferry.interrupts.one_by_one` raises Interrupted), so that the next call finishes
        it (an undo of one or two items that each mark themselves done, as iam's and golive's, needs no
        stop). Undo.failed counts the items that could not be undone: the next rollback tries them again.
        """


def open_phase(loaded: LoadedPlan, name: str) -> Phase:
    """The phase registered under name, for the loaded plan."""
    return load_phase(name)(loaded)


def preflight(loaded: LoadedPlan) -> list[CheckResult]:
    """Every preflight check of the plan: the plan-wide ones, then each enabled phase's own."""
    results = plan_preflight(loaded)
    for name in loaded.plan.enabled_phases():
        results += open_phase(loaded, name).preflight()
    return results
