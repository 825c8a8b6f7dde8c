"""manifests passes the shared phase suite rolling out to the Kubernetes API emulator (target.cluster points at it),
over a cluster that already holds some of the objects, whose controllers make every rollout ready."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.manifests.apply import key_of, restorable
from tests.kube_emulator import KubeEmulator
from tests.phases.conformance import Observation, PhaseCase, checks
from tests.phases.test_manifests_phase import _previous_state, _ready, _write_plan


class ManifestsCase(PhaseCase):
    name = "manifests"
    # One object applied, mid-wave: the rollout goes on (it does not stop between objects) and its wait for
    # readiness ends at once, unmeasured.
    interrupt_at = "manifests:mid-wave"

    def __init__(self, root: Path, emulator: KubeEmulator):
        self.emulator = emulator
        super().__init__(root)

    def write_plan(self, root: Path) -> Path:
        _ready(self.emulator)
        _previous_state(self.emulator)
        return _write_plan(root, self.emulator)

    def target(self) -> Observation:
        """Every object in the cluster as a restore writes it back (no status, no server-set metadata)."""
        return {f"cluster {key_of(o)}": restorable(o) for o in self.emulator.objects()}


@pytest.fixture
def case(tmp_path: Path) -> Iterator[ManifestsCase]:
    with KubeEmulator() as emulator:
        yield ManifestsCase(tmp_path, emulator)


@pytest.mark.parametrize("check", checks())
def test_conformance(case: ManifestsCase, check) -> None:
    check(case)
