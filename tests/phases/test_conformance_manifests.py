"""manifests passes the shared phase suite rolling out to the real control plane (tests/controlplane), over a
namespace that already holds some of the objects, whose controllers make every rollout ready."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.phases.conformance import Observation, PhaseCase, checks
from tests.phases.test_manifests_cluster import _previous_state, _state, _write_plan


class ManifestsCase(PhaseCase):
    name = "manifests"
    # One object applied, mid-wave: the rollout goes on (it does not stop between objects) and its wait for
    # readiness ends at once, unmeasured.
    interrupt_at = "manifests:mid-wave"

    def __init__(self, root: Path, plane: ControlPlane, namespace: str):
        self.plane, self.namespace = plane, namespace
        super().__init__(root)

    def write_plan(self, root: Path) -> Path:
        _previous_state(self.plane, self.namespace)
        return _write_plan(root, self.plane, self.namespace)

    def target(self) -> Observation:
        """What a person wrote into the namespace, as a restore writes it back."""
        return {f"cluster {name}": obj for name, obj in _state(self.plane, self.namespace).items()}


@pytest.fixture
def case(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ManifestsCase]:
    namespace = f"conf-{uuid.uuid4().hex[:8]}"
    yield ManifestsCase(tmp_path, control_plane, namespace)
    control_plane.delete_namespace(namespace)


@pytest.mark.parametrize("check", checks())
def test_conformance(case: ManifestsCase, check) -> None:
    check(case)
