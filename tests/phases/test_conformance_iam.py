"""iam passes the shared phase suite, mapping the example exports (examples/iam) to RoleBindings it publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.layout import StateLayout
from tests.flows.test_iam_phase import write_two_phase_plan
from tests.phases.conformance import Observation, PhaseCase, checks


class IamCase(PhaseCase):
    name = "iam"
    # Its one step publishes the bindings whole, then waits here: the window between publishing and returning.
    interrupt_at = "iam:published"

    def write_plan(self, root: Path) -> Path:
        plan = write_two_phase_plan(root, "conformance-iam")
        # Bindings an earlier run published: the run replaces them, its rollback puts them back.
        earlier = StateLayout(root / ".ferry").bindings("conformance-iam")
        earlier.parent.mkdir(parents=True)
        earlier.write_text("# the bindings an earlier run published\n")
        return plan

    def target(self) -> Observation:
        return {}  # what iam changes is the bindings it publishes, which observe() holds


@pytest.fixture
def case(tmp_path: Path) -> IamCase:
    return IamCase(tmp_path)


@pytest.mark.parametrize("check", checks())
def test_conformance(case: IamCase, check) -> None:
    check(case)
