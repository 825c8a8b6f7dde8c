"""The fuzz tests' modules: phases looked up once, not once per call (tests/conftest.py prints the inputs tried)."""

from __future__ import annotations

import functools

import pytest


@pytest.fixture(autouse=True, scope="module")
def _entry_points_read_once():
    """The installed phases do not change during a session; reading the entry points on every lookup is most of
    what a plan load costs (about 20 times per load), which bounds how many inputs a fuzz test can try."""
    from ferry import phase_registry

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(phase_registry, "entry_points", functools.cache(phase_registry.entry_points))
        yield
