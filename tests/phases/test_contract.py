"""The Phase contract is complete: a phase defined only in this file runs end to end through the real
pipeline (a real Prefect server): its input hash skips a rerun, a failed gate rolls it back, `ferry
rollback` undoes a committed run, `plan show` and `ferry status` describe it. Nothing outside this
file knows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

from ferry.audit import AuditFolder
from ferry.config import Settings
from ferry.errors import TransientError
from ferry.phase_registry import phase_names, register, unregister
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.results import CheckResult, Status
from tests.support import run_cli


class StampSettings(Settings):
    # One file per word, each its own step.
    words: list[str] = Field(min_length=1)


class StampGate(Settings):
    max_files: int = Field(default=10, ge=0)
    # Test switches: the gate cannot measure (it raises), and the rollback cannot remove its files.
    crash: bool = False
    undo_fails: bool = False


class StampPhase(Phase):
    """Writes one file per word under <state>/stamps; the gate counts them."""

    name = "stamp"
    settings_model = StampSettings
    gate_model = StampGate

    @property
    def folder(self) -> Path:
        return self.loaded.layout.root / "stamps"

    def steps(self) -> list[str]:
        return list(self.settings.words)

    def summary(self) -> str:
        return (
            f"stamp {len(self.settings.words)} word(s) into {self.folder}; gate: at most {self.gate_settings.max_files}"
        )

    def changes(self) -> Changes:
        new = [w for w in self.settings.words if not (self.folder / w).exists()]
        return Changes(f"stamp would write {len(new)} file(s)", {"files": len(new)})

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        if step == "bug":  # a defect of the phase itself, not one of ferry's errors
            raise KeyError("bug")
        self.folder.mkdir(parents=True, exist_ok=True)
        created = not (self.folder / step).exists()
        (self.folder / step).write_text(step)
        if created:  # what rollback needs: only the files this run created
            audit.write_json(self.name, f"created-{step}.json", {"file": str(self.folder / step)})
        return StepResult(changed=True, details={"word": step, "created": created})

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        if self.gate_settings.crash:
            raise TransientError("the stamp store did not answer")
        found = len(list(self.folder.iterdir()))
        status = Status.PASS if found <= self.gate_settings.max_files else Status.FAIL
        return [CheckResult("stamp.files", status, {"files": found}, {"max_files": self.gate_settings.max_files})]

    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping) -> Undo:
        records = sorted((audit.root / self.name).glob("created-*.json"))
        files = [Path(json.loads(record.read_text())["file"]) for record in records]
        if self.gate_settings.undo_fails and not dry_run:
            return Undo(f"could not remove {len(files)} stamp file(s)", [f"remove {f}" for f in files], len(files))
        if not dry_run:
            for path, record in zip(files, records, strict=True):
                path.unlink(missing_ok=True)
                record.unlink()
        return Undo(f"{'remove' if dry_run else 'removed'} {len(files)} stamp file(s)", [f"remove {f}" for f in files])


PLAN = """\
name: {name}
source: {{storage: ./src}}
target: {{storage: ./dst}}
phases:
  data_sync: {{threads: 2}}
  stamp: {{words: [{words}]}}
gates:
  stamp: {{max_files: {max_files}}}
retries: {{attempts: 0, delay_s: 0}}
"""


@pytest.fixture
def stamp_phase() -> Iterator[None]:
    register("stamp", f"{__name__}:StampPhase", after="iam")
    yield
    unregister("stamp")


def write(root: Path, name: str, words: str, max_files: int = 10) -> Path:
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "one.txt").write_text("1")
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(name=name, words=words, max_files=max_files))
    return plan


def test_registered_phase_takes_its_place_and_its_sections_are_validated(stamp_phase, tmp_path) -> None:
    assert phase_names()[:3] == ["iam", "stamp", "data_sync"]
    plan = write(tmp_path, "stamp-plan", "a, b")
    code, out, err = run_cli("plan", "show", str(plan), "--no-preflight")
    assert code == 0, err
    assert f"stamp: stamp 2 word(s) into {tmp_path / '.ferry' / 'stamps'}; gate: at most 10" in out
    assert out.index("stamp: stamp") < out.index("data_sync: copy")  # pipeline order
    plan.write_text(plan.read_text().replace("words: [a, b]", "words: []"))
    code, _, err = run_cli("plan", "validate", str(plan))
    assert code == 2 and f"{plan}:6: phases.stamp.words: List should have at least 1 item" in err
    plan.write_text(plan.read_text().replace("words: []", "words: [a]").replace("max_files: 10", "max_files: -1"))
    code, _, err = run_cli("plan", "validate", str(plan))
    assert code == 2 and f"{plan}:8: gates.stamp.max_files: Input should be greater than or equal to 0" in err


def test_phase_runs_skips_rolls_back_on_a_failed_gate_and_by_hand(stamp_phase, prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    stamps = tmp_path / ".ferry" / "stamps"
    plan = write(tmp_path, "stamp-run", "a, b")
    first = migrate(plan_path=str(plan))
    assert first["phases"] == {"preflight": "PASS", "stamp": "PASS", "data_sync": "PASS"}
    assert sorted(p.name for p in stamps.iterdir()) == ["a", "b"]

    # Same inputs: the committed phase is skipped (data_sync reads storage, so it runs again).
    again = migrate(plan_path=str(plan))
    assert again["phases"]["stamp"] == "skipped"

    # A third word with a gate that allows two files: the run's own file is rolled back, a and b stay.
    plan.write_text(
        plan.read_text().replace("words: [a, b]", "words: [a, b, c]").replace("max_files: 10", "max_files: 2")
    )
    with pytest.raises(GateFailed, match="stamp: gate failed: stamp.files"):
        migrate(plan_path=str(plan))
    assert sorted(p.name for p in stamps.iterdir()) == ["a", "b"]
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("stamp-run", "stamp").status == "rolled_back"
    assert runlog.live_commit("stamp-run", "stamp")[0] == first["run_id"]
    runlog.close()

    code, out, _ = run_cli("status", str(plan))
    assert code == 0 and "rolled back" in next(line for line in out.splitlines() if "stamp " in line)
    code, out, err = run_cli("rollback", str(plan), "--phase", "stamp", "--dry-run")
    assert code == 0 and f"rollback of stamp, run {first['run_id']}: remove 2 stamp file(s)" in out, err
    assert f"remove {stamps / 'a'}" in out and sorted(p.name for p in stamps.iterdir()) == ["a", "b"]
    code, out, err = run_cli("rollback", str(plan), "--phase", "stamp", "--yes")
    assert code == 0, err
    assert f"rolled back stamp of run {first['run_id']}: removed 2 stamp file(s)" in out
    assert list(stamps.iterdir()) == []


def test_a_gate_that_cannot_measure_undoes_nothing_and_the_next_commit_covers_that_run(
    stamp_phase, prefect_api, tmp_path
) -> None:
    """Only a gate's FAIL or a failed step rolls back: a gate that raises leaves the phase `failed` with what it
    did in place; the next run resumes it, so that a rollback of its commit removes the first run's files too."""
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    stamps = tmp_path / ".ferry" / "stamps"
    plan = write(tmp_path, "stamp-crash", "a, b")
    plan.write_text(plan.read_text().replace("max_files: 10", "max_files: 10, crash: true"))
    with pytest.raises(TransientError, match="the stamp store did not answer"):
        migrate(plan_path=str(plan))
    assert sorted(p.name for p in stamps.iterdir()) == ["a", "b"]  # nothing rolled back
    runlog = RunLog(tmp_path / ".ferry" / "state")
    record = runlog.phase("stamp-crash", "stamp")
    assert record.status == "failed" and "nothing was rolled back" in record.detail
    runlog.close()

    plan.write_text(plan.read_text().replace(", crash: true", ""))
    assert migrate(plan_path=str(plan))["phases"]["stamp"] == "PASS"
    code, out, err = run_cli("rollback", str(plan), "--phase", "stamp", "--yes")
    assert code == 0 and "removed 2 stamp file(s)" in out, err  # the first run's, through the second's commit
    assert list(stamps.iterdir()) == []


def test_a_rollback_that_fails_is_finished_before_the_phase_runs_again(stamp_phase, prefect_api, tmp_path) -> None:
    from ferry.errors import FerryError, GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    stamps = tmp_path / ".ferry" / "stamps"
    plan = write(tmp_path, "stamp-undo-fails", "a, b", max_files=0)
    plan.write_text(plan.read_text().replace("max_files: 0", "max_files: 0, undo_fails: true"))
    with pytest.raises(GateFailed):
        migrate(plan_path=str(plan))
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("stamp-undo-fails", "stamp").status == "rollback_failed"
    # Still failing: the run stops there, nothing else runs over a rollback that is not finished.
    with pytest.raises(FerryError, match="the rollback run .* decided is still not finished"):
        migrate(plan_path=str(plan))
    assert sorted(p.name for p in stamps.iterdir()) == ["a", "b"]
    assert not (tmp_path / "dst").exists()  # data_sync, after stamp, never ran

    plan.write_text(plan.read_text().replace("max_files: 0, undo_fails: true", "max_files: 10"))
    outcome = migrate(plan_path=str(plan))
    assert outcome["phases"]["stamp"] == "PASS"
    assert runlog.phase("stamp-undo-fails", "stamp").status == "committed"
    runlog.close()


def test_a_step_that_breaks_with_a_bug_undoes_nothing(stamp_phase, prefect_api, tmp_path) -> None:
    """Only ferry's own errors of a step roll the phase back; a bug (or an orchestration error) leaves it failed."""
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    stamps = tmp_path / ".ferry" / "stamps"
    plan = write(tmp_path, "stamp-bug", "a, bug")
    with pytest.raises(KeyError):
        migrate(plan_path=str(plan))
    assert [p.name for p in stamps.iterdir()] == ["a"]
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("stamp-bug", "stamp").status == "failed"
    runlog.close()


class InOrderPhase(StampPhase):
    """Stamp, its steps one after another: each step looks, for a second, for a step after it that has started."""

    concurrent_steps = False

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        words = self.settings.words
        (self.folder / "started").mkdir(parents=True, exist_ok=True)
        (self.folder / "started" / step).touch()
        later = set(words[words.index(step) + 1 :])
        for _ in range(20):
            if later & {p.name for p in (self.folder / "started").iterdir()}:
                raise KeyError(f"a step after {step} started before it ended")
            reporter.stopping.wait(0.05)
        earlier = words[: words.index(step)]
        assert all((self.folder / w).exists() for w in earlier), f"{step} started before {earlier} ended"
        return super().run(step, audit, reporter)


def test_a_phase_that_says_so_runs_its_steps_in_order(prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate

    register("stamp", f"{__name__}:InOrderPhase", after="iam")
    try:
        outcome = migrate(plan_path=str(write(tmp_path, "stamp-in-order", "a, b, c, d")))
    finally:
        unregister("stamp")
    assert outcome["phases"]["stamp"] == "PASS"
    assert sorted(p.name for p in (tmp_path / ".ferry" / "stamps").iterdir()) == ["a", "b", "c", "d", "started"]
