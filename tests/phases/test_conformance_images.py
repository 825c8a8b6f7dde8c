"""images passes the shared phase suite copying with skopeo between the registry pair of tests.support (no builds:
they are slow, and the copy is what every run of the phase does)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.phases.conformance import Observation, PhaseCase, checks
from tests.phases.test_images_phase import _plan
from tests.support import Registries
from tests.test_blast_radius import registry_listing


class ImagesCase(PhaseCase):
    name = "images"
    # A tag pushed and not yet journalled, the narrowest window: the copies in flight finish and are journalled,
    # the images not started are left for the next run, and no digest map is published.
    interrupt_at = "images:pushed"

    def __init__(self, root: Path, registries: Registries):
        self.registries = registries
        super().__init__(root)

    def write_plan(self, root: Path) -> Path:
        plan = _plan(root, self.registries, {}, ["tokenizer:1.0", "eval:*"])
        # The module's checks share the target registry: each case copies into a repository path of its own.
        ours = f"{self.registries.tgt}/c{uuid.uuid4().hex[:8]}"
        plan.write_text(plan.read_text().replace(f"{self.registries.tgt}/ai", ours))
        return plan

    def target(self) -> Observation:
        """Every tag of every repository on the target registry, with its digest (not only the case's own)."""
        return {f"registry {ref}": digest for ref, digest in registry_listing(self.registries.tgt).items()}


@pytest.fixture
def case(tmp_path: Path, registries: Registries) -> ImagesCase:
    return ImagesCase(tmp_path, registries)


@pytest.mark.parametrize("check", checks())
def test_conformance(case: ImagesCase, check) -> None:
    check(case)
