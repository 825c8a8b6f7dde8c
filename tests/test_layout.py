"""The state directory's layout, named once (ferry/layout.py): a plan's state_dir and `ferry sync --state-dir`
name the same level."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from ferry.layout import StateLayout
from ferry.lock import held
from ferry.runlog import RunLog


def test_every_path_is_under_the_root(tmp_path) -> None:
    layout = StateLayout(tmp_path)
    paths = [
        layout.state,
        layout.sync_reports,
        layout.run("r-1"),
        layout.bindings("plan-a"),
        layout.digest_map("plan-a"),
        layout.buildah,
        layout.rendered,
        layout.discovery_cache,
        layout.secret_snapshot("r-1"),
        layout.synthetic_checkpoint,
    ]
    assert all(p.is_relative_to(tmp_path) for p in paths)
    assert len(set(paths)) == len(paths)
    # One file per plan: plans sharing a state directory never read each other's publications.
    assert layout.bindings("plan-a") != layout.bindings("plan-b")
    assert layout.digest_map("plan-a") != layout.digest_map("plan-b")
    # A Secret snapshot is never in the audit folder, which is never secret.
    assert not layout.secret_snapshot("r-1").is_relative_to(layout.run("r-1"))


def test_a_new_sync_state_dir_is_the_level_a_plan_names(tmp_path) -> None:
    with capture_logs() as logs:
        layout = StateLayout.for_sync(tmp_path / ".ferry")
    assert layout.state == tmp_path / ".ferry" / "state" and logs == []


@pytest.mark.parametrize("held_by", ["transfers", "runlog", "lock"])
def test_a_state_folder_named_as_sync_named_it_before_is_used_as_it_is(tmp_path, held_by) -> None:
    old = tmp_path / ".ferry" / "state"
    if held_by == "transfers":
        (old / "transfers").mkdir(parents=True)
    elif held_by == "runlog":
        RunLog(old).close()
    else:
        with held(old, "ferry sync"):
            pass
    with capture_logs() as logs:
        layout = StateLayout.for_sync(old)
    assert layout.state == old, "its transfers resume and its lock keeps runs apart"
    assert [entry["log_level"] for entry in logs] == ["warning"]
    assert logs[0]["next_time"] == f"--state-dir {old.parent} (the level a plan's state_dir names)"
    # Once a state/ folder exists below it, it is a root like any other.
    (old / "state").mkdir()
    assert StateLayout.for_sync(old).state == old / "state"
