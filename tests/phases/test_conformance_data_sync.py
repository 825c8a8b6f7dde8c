"""data_sync passes the shared phase suite on local directories, in two shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.phases.conformance import Observation, PhaseCase, checks, listed, rollback_twice_is_a_no_op
from tests.support import write_plan

# The defect the check finds; strict: once it is fixed it passes, and the mark must go.
EMPTIED_DIRECTORY = (
    "the rollback leaves b/, the folder of the objects it deleted, on a local target: LocalConnector.delete removes "
    "no directory, and LocalConnector.list reports an empty directory as a directory-marker object the target did "
    "not hold before the run"
)


class DataSyncCase(PhaseCase):
    name = "data_sync"
    # When the first shard asks for its progress gauge: inside the step, its target recorded and its journal open,
    # just before the engine starts; the engine runs with the stop event set until its watch (every 0.2 s) aborts
    # it, keeping what it verified by then (of these few objects, maybe all the shard's), and the second shard never
    # starts. Not a part's failpoint (`transfer:part`): local to local, whole objects are copied in the kernel.
    interrupt_at = "progress"

    def write_plan(self, root: Path) -> Path:
        plan = write_plan(root, "conformance-data")
        # Before the run the target holds an object the source lacks (kept: allow_extra) and an older a/two.bin.
        for key, data in {"stray.bin": b"not in the source", "a/two.bin": b"an older two"}.items():
            (root / "dst" / key).parent.mkdir(parents=True, exist_ok=True)
            (root / "dst" / key).write_bytes(data)
        return plan

    def target(self) -> Observation:
        return listed(str(self.root / "dst"), "dst")

    def after_rollback(self, before: Observation) -> Observation:
        # The rollback deletes only what the run created: an object it overwrote keeps the source's bytes, as
        # nothing can restore it without bucket versioning (and the rollback's text says so).
        return {**before, "dst a/two.bin": (self.root / "src" / "a" / "two.bin").read_bytes()}


@pytest.fixture
def case(tmp_path: Path) -> DataSyncCase:
    return DataSyncCase(tmp_path)


@pytest.mark.parametrize("check", checks(xfail={rollback_twice_is_a_no_op: EMPTIED_DIRECTORY}))
def test_conformance(case: DataSyncCase, check) -> None:
    check(case)


class KeyRangesCase(DataSyncCase):
    """The same phase with its shards made from key ranges (`shards: auto`): a generated source whose listing starts
    at a key, probed into four or more ranges, each a step."""

    def write_plan(self, root: Path) -> Path:
        plan = root / "migration.yaml"
        plan.write_text(
            "name: conformance-ranges\nsource: {storage: 'synthetic://400x1K+3x100K'}\ntarget: {storage: ./dst}\n"
            "phases:\n  data_sync: {shards: auto, ranges: 4}\nretries: {attempts: 1, delay_s: 0}\n"
        )
        (root / "dst" / "1K").mkdir(parents=True)
        (root / "dst" / "1K" / "007").write_bytes(b"an older object")  # overwritten by the run
        (root / "dst" / "stray.bin").write_bytes(b"not in the source")
        return plan

    def after_rollback(self, before: Observation) -> Observation:
        return {**before, "dst 1K/007": listed("synthetic://400x1K+3x100K", "src")["src 1K/007"]}


@pytest.fixture
def ranges_case(tmp_path: Path) -> KeyRangesCase:
    return KeyRangesCase(tmp_path)


@pytest.mark.parametrize("check", checks(xfail={rollback_twice_is_a_no_op: EMPTIED_DIRECTORY.replace("b/", "100K/")}))
def test_conformance_in_key_ranges(ranges_case: KeyRangesCase, check) -> None:
    check(ranges_case)


def test_key_ranges_are_the_steps_and_stay_the_same_for_every_run(tmp_path: Path) -> None:
    from ferry.phases.base import open_phase
    from ferry.plan import load_plan

    plan = KeyRangesCase(tmp_path).plan
    phase = open_phase(load_plan(plan), "data_sync")
    steps = phase.steps()
    assert 4 <= len(steps) < 8 and steps[0] == "range-1", steps
    settings = [phase.transfer_settings(step) for step in steps]
    assert settings[0].start_after == "" and settings[-1].end_at == ""
    assert all(a.end_at == b.start_after for a, b in zip(settings, settings[1:], strict=False))
    # Another run (another process, another worker) reads them from beside the transfer state.
    (kept,) = (tmp_path / ".ferry" / "state" / "transfers").glob("ranges-*.json")
    again = open_phase(load_plan(plan), "data_sync")
    assert again.steps() == steps and [again.transfer_settings(s) for s in steps] == settings
    assert "key ranges probed from the source the first time" in again.summary()


@pytest.mark.parametrize("state_url", [None, "./shared"])
def test_a_range_that_outgrew_its_bound_is_split_and_its_halves_resume_from_its_state(
    tmp_path: Path, state_url: str | None
) -> None:
    kept = f", state_url: {state_url}" if state_url else ""

    class Bounded(KeyRangesCase):
        def write_plan(self, root: Path) -> Path:
            plan = root / "migration.yaml"
            plan.write_text(
                "name: bounded\nsource: {storage: 'synthetic://400x1K'}\ntarget: {storage: ./dst}\n"
                f"phases:\n  data_sync: {{shards: auto, ranges: 2, range_max_objects: 150{kept}}}\n"
            )
            return plan

    case = Bounded(tmp_path)
    first = case.run("first")
    assert sum(r.details["objects"]["copied"] for r in first) == 400
    counts = [r.details["objects"]["copied"] for r in first]
    assert max(counts) > 150, counts  # a range beyond the bound (the probe splits key space, not objects)
    transfers = tmp_path / ".ferry" / "state" / "transfers"
    states_before = {p.name for p in transfers.glob("*.sqlite")}
    # The next run splits it before its steps: its halves take over its rows, so nothing is copied again.
    second = case.run("second")
    assert len(second) > len(first)
    objects = [r.details["objects"] for r in second]
    assert sum(o["copied"] for o in objects) == 0 and sum(o["skipped"] for o in objects) == 400, objects
    assert sum(o["adopted"] for o in objects) == 0, objects  # found in the halves' states, not proven afresh
    assert {r.status.value for r in case.phase().gate(case.audit("second"))} == {"PASS"}
    states_after = {p.name for p in transfers.glob("*.sqlite")}
    assert len(states_after) == len(second) and states_after != states_before
    # Every later run (another process) keeps the split ranges; none is beyond the bound twice over.
    phase = case.phase()
    assert phase.steps() == [f"range-{i}" for i in range(1, len(second) + 1)]
    assert max(o["skipped"] for o in objects) <= max(counts) // 2 + 1
    if state_url:
        # The copies where workers find them: the halves' states and the new ranges; the split range's is gone.
        shared = {p.name for p in (tmp_path / "shared" / "transfers").iterdir()}
        assert shared == states_after | {p.name for p in transfers.glob("ranges-*.json")}, shared


@pytest.mark.parametrize("shape", ["1x1K", "2x1K"])
def test_a_source_of_one_or_two_keys_is_synced_whole_in_its_ranges(tmp_path: Path, shape: str) -> None:
    class Tiny(KeyRangesCase):
        def write_plan(self, root: Path) -> Path:
            plan = root / "migration.yaml"
            plan.write_text(
                f"name: tiny-ranges\nsource: {{storage: 'synthetic://{shape}'}}\ntarget: {{storage: ./dst}}\n"
                "phases:\n  data_sync: {shards: auto}\n"
            )
            return plan

    case = Tiny(tmp_path)
    results = case.run("first")
    assert sum(r.details["objects"]["copied"] for r in results) == int(shape.split("x")[0])
    source = listed(f"synthetic://{shape}", "src")
    assert case.target() == {f"dst {k.removeprefix('src ')}": v for k, v in source.items()}
    assert {r.status.value for r in case.phase().gate(case.audit("first"))} == {"PASS"}
    # One key: one range, the whole prefix, nothing kept (the next run probes again, as the source may have grown).
    kept = list((tmp_path / ".ferry" / "state" / "transfers").glob("ranges-*.json"))
    assert len(kept) == (0 if shape == "1x1K" else 1) and len(results) == (1 if shape == "1x1K" else 2)


def test_a_plan_without_shards_is_one_shard_of_everything(tmp_path: Path) -> None:
    from ferry.audit import AuditFolder
    from ferry.phases.base import Reporter, open_phase
    from ferry.plan import load_plan

    plan = tmp_path / "migration.yaml"
    plan.write_text("name: whole\nsource: {storage: 'synthetic://30x1K'}\ntarget: {storage: ./dst}\n"
                    "phases: {data_sync: {}}\n")
    phase, audit = open_phase(load_plan(plan), "data_sync"), AuditFolder(tmp_path / "run")
    assert phase.steps() == [""]
    (result,) = [phase.run(step, audit, Reporter()) for step in phase.steps()]
    assert result.details["objects"]["copied"] == 30
    gate = phase.gate(audit)
    assert [(r.name, r.status.value) for r in gate] == [("data.target_matches_source", "PASS")]
