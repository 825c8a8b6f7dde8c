"""Prefect task retries happen for transient errors only (flows/retry.py), through the real pipeline on the real
Prefect server: a step raising TransientError runs `retries.attempts` more times, one raising PermanentError runs
once. Counted twice: by the phase (a test-only one, registered here) and by Prefect's own task runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

from ferry.audit import AuditFolder
from ferry.config import Settings
from ferry.errors import PermanentError, TransientError
from ferry.phase_registry import register, unregister
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.results import CheckResult, Status

ATTEMPTS = 2  # retries.attempts: retries after the first attempt


class FlakySettings(Settings):
    # Each step fails as its name says: `flaky-...` transiently twice then passes, `transient-...` transiently
    # every time, `permanent-...` permanently.
    steps: list[str] = Field(min_length=1)


class FlakyGate(Settings):
    pass


class FlakyPhase(Phase):
    """Counts every attempt of every step in <state>/attempts/<step>, then fails as the step's name says."""

    name = "flaky"
    settings_model = FlakySettings
    gate_model = FlakyGate

    def steps(self) -> list[str]:
        return list(self.settings.steps)

    def summary(self) -> str:
        return f"{len(self.settings.steps)} step(s) that fail as they are named"

    def changes(self) -> Changes:
        return Changes("flaky changes nothing", {})

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        counter = self.loaded.layout.root / "attempts" / step
        counter.parent.mkdir(parents=True, exist_ok=True)
        with counter.open("a") as out:
            out.write("attempt\n")
        attempt = len(counter.read_text().splitlines())
        if step.startswith("permanent-"):
            raise PermanentError(f"{step}: refused (attempt {attempt})")
        if step.startswith("transient-") or (step.startswith("flaky-") and attempt <= 2):
            raise TransientError(f"{step}: did not answer (attempt {attempt})")
        return StepResult(changed=False, details={"step": step, "attempts": attempt})

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        return [CheckResult("flaky.ran", Status.PASS)]

    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping) -> Undo:
        return Undo("nothing to undo: flaky changes nothing")


@pytest.fixture
def flaky_phase() -> Iterator[None]:
    register("flaky", f"{__name__}:FlakyPhase", after="iam")
    yield
    unregister("flaky")


def _plan(root: Path, name: str, steps: list[str]) -> Path:
    (root / "src").mkdir(exist_ok=True)
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: {name}\nsource: {{storage: ./src}}\ntarget: {{storage: ./dst}}\n"
        f"phases:\n  flaky: {{steps: [{', '.join(steps)}]}}\n"
        f"retries: {{attempts: {ATTEMPTS}, delay_s: 0}}\n"
    )
    return plan


def _attempts(root: Path, step: str) -> int:
    counter = root / ".ferry" / "attempts" / step
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def _prefect_run_count(step: str) -> int:
    """How many times Prefect ran the task of that step (its task run's run_count; the step names are unique)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    with get_client(sync_client=True) as client:
        (task_run,) = client.read_task_runs(
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=[f"flaky {step!r}"]))
        )
    return task_run.run_count


def test_transient_errors_are_retried_and_permanent_ones_are_not(flaky_phase, prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate

    token = uuid.uuid4().hex[:8]
    flaky, permanent = f"flaky-{token}", f"permanent-{token}"
    # The flow waits for the steps in order: flaky's retries end before permanent's failure is taken.
    with pytest.raises(PermanentError, match=f"{permanent}: refused \\(attempt 1\\)"):
        migrate(plan_path=str(_plan(tmp_path, "retries-mixed", [flaky, permanent])))
    assert _attempts(tmp_path, flaky) == 3 and _prefect_run_count(flaky) == 3
    assert _attempts(tmp_path, permanent) == 1 and _prefect_run_count(permanent) == 1


def test_a_transient_error_after_the_last_retry_fails_the_step(flaky_phase, prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate

    transient = f"transient-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TransientError, match=f"{transient}: did not answer \\(attempt {ATTEMPTS + 1}\\)"):
        migrate(plan_path=str(_plan(tmp_path, "retries-transient", [transient])))
    assert _attempts(tmp_path, transient) == ATTEMPTS + 1 and _prefect_run_count(transient) == ATTEMPTS + 1
