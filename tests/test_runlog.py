"""The run log: commit history, what is live, and the run log of a ferry 0.1 ledger migrated on open."""

from __future__ import annotations

import sqlite3

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


# The run log's part of a ledger as ferry 0.1 wrote it (one file for the run log and the transfer state).
LEGACY_SCHEMA = """
CREATE TABLE phases (
    plan TEXT NOT NULL, phase TEXT NOT NULL, input_hash TEXT NOT NULL, status TEXT NOT NULL,
    run_id TEXT NOT NULL, updated REAL NOT NULL, detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (plan, phase)
) WITHOUT ROWID;
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, plan TEXT NOT NULL, status TEXT NOT NULL, started REAL NOT NULL,
    updated REAL NOT NULL, audit_dir TEXT NOT NULL, flow_run_id TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
INSERT INTO phases VALUES ('plan', 'data_sync', 'h1', 'committed', 'run-1', 1.0, 'PASS');
INSERT INTO phases VALUES ('plan', 'iam', 'h2', 'rolled_back', 'run-2', 2.0, 'gate failed');
INSERT INTO runs VALUES ('run-1', 'plan', 'completed', 1.0, 1.5, '/audit/run-1', '', '');
"""


def test_a_ferry_0_1_ledger_is_migrated_on_open(tmp_path) -> None:
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        conn.executescript(LEGACY_SCHEMA)
    conn.close()
    runlog = RunLog(tmp_path)
    # Its committed phases start the commit history; failed ones are only the latest outcome.
    assert runlog.live_commit("plan", "data_sync") == ("run-1", "h1")
    assert runlog.live_commit("plan", "iam") is None
    assert runlog.phase("plan", "iam").detail == "gate failed"
    assert runlog.run("run-1").audit_dir == "/audit/run-1"
    runlog.set_phase("plan", "data_sync", "h3", "committed", "run-3")
    runlog.close()
    # Migrated once: reopening does not copy the old rows over newer ones.
    reopened = RunLog(tmp_path)
    assert reopened.live_commit("plan", "data_sync") == ("run-3", "h3")
    reopened.close()
