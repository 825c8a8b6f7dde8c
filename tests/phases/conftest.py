"""Fixtures the phase tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import Registries, start_registry_pair


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registries]:
    """The registry pair of tests.support, its source seeded: one per test module."""
    regs = start_registry_pair(tmp_path_factory.mktemp("buildah"))
    yield regs
    regs.stop()
