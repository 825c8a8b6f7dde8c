"""golive passes the shared phase suite measuring a checkpoint on a local target: no GPU, no cluster, no probe
server (those checks SKIP, a WARN). It measures and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.phases.conformance import (
    Observation,
    PhaseCase,
    checks,
    interrupt_keeps_what_was_verified,
    listed,
    rerun_reports_unchanged,
    rollback_twice_is_a_no_op,
)
from tests.phases.test_golive import plan_file

# The defect these checks find; strict: once it is fixed they pass, and the marks must go.
EMPTIED_DIRECTORY = (
    "each measurement leaves its checkpoint's emptied folder, golive/ckpt/<run>-<ns>/, on a local target: the "
    "cleanup deletes every object under it, LocalConnector.delete removes no directory, and LocalConnector.list "
    "reports an empty directory as a directory-marker object (data_sync's gate, allow_extra: false, then "
    "finds it extra in the target)"
)


class GoliveCase(PhaseCase):
    name = "golive"
    changes_target = False
    # The checkpoint written, neither read back nor cleaned up: what it wrote must still go.
    interrupt_at = "golive:checkpoint"

    def write_plan(self, root: Path) -> Path:
        golive = {"checkpoint": {"size": "1M", "shards": 4, "threads": 2}, "gpu_probe": False}
        # Thresholds any copy that completes meets: the suite is about what the phase leaves, not this machine.
        return plan_file(root, golive, gates={"checkpoint_write_gb_per_s": 1e-9, "checkpoint_read_gb_per_s": 1e-9})

    def target(self) -> Observation:
        return listed(str(self.root / "dst"), "dst")


@pytest.fixture
def case(tmp_path: Path) -> GoliveCase:
    return GoliveCase(tmp_path)


@pytest.mark.parametrize(
    "check",
    checks(
        xfail={
            rerun_reports_unchanged: EMPTIED_DIRECTORY,
            rollback_twice_is_a_no_op: EMPTIED_DIRECTORY,
            interrupt_keeps_what_was_verified: EMPTIED_DIRECTORY,
        }
    ),
)
def test_conformance(case: GoliveCase, check) -> None:
    check(case)
