"""`ferry cutover` refuses to start while an enabled iam or images phase is not committed at the plan's inputs."""

from __future__ import annotations

import pytest
import yaml

from ferry.cutover.run import check_ready
from ferry.errors import UsageError
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from ferry.runlog import PhaseStatus, RunLog
from tests.test_readme import demo_plan


def test_cutover_needs_iam_committed_at_the_current_inputs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FERRY_DEMO_S3_ENDPOINT", "http://127.0.0.1:9")
    plan = demo_plan(tmp_path)
    plan["cutover"] = {"freeze_budget": "5m"}
    path = tmp_path / "migration.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    loaded = load_plan(path)
    runlog = RunLog(loaded.layout.state)
    try:
        with pytest.raises(UsageError, match="the iam phase is not committed at the plan's current inputs"):
            check_ready(loaded, runlog)
        runlog.set_phase(loaded.plan.name, "iam", "an-older-hash", PhaseStatus.COMMITTED, "run-1", "PASS")
        with pytest.raises(UsageError, match="the iam phase is not committed"):
            check_ready(loaded, runlog)
        digest = open_phase(loaded, "iam").input_hash()
        runlog.set_phase(loaded.plan.name, "iam", digest, PhaseStatus.COMMITTED, "run-2", "PASS")
        check_ready(loaded, runlog)
    finally:
        runlog.close()
