"""The run log: commit history and what is live."""

from __future__ import annotations

from ferry.runlog import RunLog


def test_live_commit_walks_back_one_rollback_at_a_time(tmp_path) -> None:
    runlog = RunLog(tmp_path)
    runlog.set_phase("plan", "iam", "h1", "committed", "run-1")
    runlog.set_phase("plan", "iam", "h2", "committed", "run-2")
    runlog.set_phase("plan", "iam", "h3", "rolled_back", "run-3", "gate failed")
    # A failed run leaves the last commit live.
    assert runlog.live_commit("plan", "iam") == ("run-2", "h2")
    runlog.roll_back_commit("plan", "iam", "run-2", "rolled back by hand")
    assert runlog.live_commit("plan", "iam") == ("run-1", "h1")
    assert runlog.phase("plan", "iam").status == "rolled_back"
    runlog.roll_back_commit("plan", "iam", "run-1", "rolled back by hand")
    assert runlog.live_commit("plan", "iam") is None
    assert runlog.live_commit("plan", "data_sync") is None
    runlog.close()
