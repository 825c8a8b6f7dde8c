"""The ledger's phase records: commit history, what is live, and ledgers written before the history existed."""

from __future__ import annotations

from ferry.ledger import Ledger


def test_live_commit_walks_back_one_rollback_at_a_time(tmp_path) -> None:
    ledger = Ledger(tmp_path)
    ledger.set_phase("plan", "iam", "h1", "committed", "run-1")
    ledger.set_phase("plan", "iam", "h2", "committed", "run-2")
    ledger.set_phase("plan", "iam", "h3", "rolled_back", "run-3", "gate failed")
    # A failed run leaves the last commit live.
    assert ledger.live_commit("plan", "iam") == ("run-2", "h2")
    ledger.roll_back_commit("plan", "iam", "run-2", "rolled back by hand")
    assert ledger.live_commit("plan", "iam") == ("run-1", "h1")
    assert ledger.phase("plan", "iam").status == "rolled_back"
    ledger.roll_back_commit("plan", "iam", "run-1", "rolled back by hand")
    assert ledger.live_commit("plan", "iam") is None
    assert ledger.live_commit("plan", "data_sync") is None
    ledger.close()


def test_commits_of_an_older_ledger_are_carried_into_the_history(tmp_path) -> None:
    ledger = Ledger(tmp_path)
    ledger.set_phase("plan", "data_sync", "h1", "committed", "run-1")
    with ledger._conn:
        ledger._conn.execute("DELETE FROM commits")  # as a ledger written before the history was
    ledger.close()
    reopened = Ledger(tmp_path)
    assert reopened.live_commit("plan", "data_sync") == ("run-1", "h1")
    reopened.close()
