"""ferry tunes glibc's malloc where the environment does not, from its entry point and as a transfer starts."""

from __future__ import annotations

import os

import pytest

from ferry import malloc


@pytest.fixture
def mallopt(monkeypatch) -> list[tuple[int, int]]:
    """The mallopt calls made, on a Linux with glibc, whatever this machine is; no choice in the environment."""
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: Libc())
    monkeypatch.setattr(malloc.sys, "platform", "linux")
    for name in [name for name in os.environ if name.startswith("MALLOC_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    return calls


TUNED = [(-8, 2), (-3, 32 << 20), (-1, 256 << 20)]  # M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def test_two_arenas_and_parts_kept_on_the_heap_where_the_environment_does_not_tune(mallopt) -> None:
    malloc.tune()
    assert mallopt == TUNED


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MALLOC_ARENA_MAX", "8"),
        ("MALLOC_TRIM_THRESHOLD_", "0"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0:glibc.malloc.arena_max=4"),
    ],
)
def test_the_environments_choice_is_left_as_it_is(mallopt, monkeypatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    malloc.tune()
    assert mallopt == []


def test_not_linux_is_left_as_it_is(mallopt, monkeypatch) -> None:
    monkeypatch.setattr(malloc.sys, "platform", "darwin")
    malloc.tune()
    assert mallopt == []


def test_a_transfer_tunes_it_as_it_starts_its_workers(mallopt, tmp_path) -> None:
    from connectors.transfer import TransferSettings
    from ferry.sync import run_sync

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_bytes(b"a")
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    result = run_sync(source, target, TransferSettings(threads=2), profiles={}, state_dir=tmp_path / "state")
    assert result.ok and (tmp_path / "dst" / "a").read_bytes() == b"a"
    assert mallopt == TUNED
