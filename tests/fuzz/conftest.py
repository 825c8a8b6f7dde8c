"""The fuzz tests' session: phases looked up once (not once per call), and the inputs tried, printed at the end."""

from __future__ import annotations

import functools

import pytest

from tests.fuzz.common import CALLS, TRIED, examples


@pytest.fixture(autouse=True, scope="module")
def _entry_points_read_once():
    """The installed phases do not change during a session; reading the entry points on every lookup is most of
    what a plan load costs (about 20 times per load), which bounds how many inputs a fuzz test can try."""
    from ferry import phase_registry

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(phase_registry, "entry_points", functools.cache(phase_registry.entry_points))
        yield


def pytest_terminal_summary(terminalreporter) -> None:
    if TRIED:
        counts = ", ".join(f"{target} {n}" for target, n in sorted(TRIED.items()))
        terminalreporter.write_line(
            f"fuzz: {sum(TRIED.values())} inputs tried ({counts}) in {sum(CALLS.values())} ferry commands; "
            f"FERRY_FUZZ_EXAMPLES={examples(1)}"
        )
