"""The go-live phase in the pipeline on the real Prefect server: after data_sync, it measures, publishes its
report as an artifact and WARNs for what it could not measure; under strict that stops the run."""

from __future__ import annotations

import pytest

from tests.flows.test_pipeline import artifacts
from tests.support import write_plan

GOLIVE = """\
  golive:
    checkpoint: {size: 1M, shards: 2, threads: 2}
    gpu_probe: false
"""
# Speeds no copy that completes can miss: these tests are about the pipeline, not this machine's disk.
GATE = "  golive: {checkpoint_write_gb_per_s: 1e-9, checkpoint_read_gb_per_s: 1e-9}\n"


def golive_plan(tmp_path, name: str, strict: bool):
    plan = write_plan(tmp_path, name, extra=f"strict: {'true' if strict else 'false'}")
    text = plan.read_text().replace("gates:\n", GOLIVE + "gates:\n" + GATE)
    plan.write_text(text)
    return plan


def test_golive_after_data_sync_reports_and_warns(prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate, new_run_id

    plan = golive_plan(tmp_path, "golive-warns", strict=False)
    run_id = new_run_id(str(plan))
    outcome = migrate(plan_path=str(plan), run_id=run_id)
    assert outcome["phases"] == {"preflight": "PASS", "data_sync": "PASS", "golive": "WARN"}
    folder = tmp_path / ".ferry" / "runs" / run_id / "golive"
    assert "| golive.checkpoint_read | **PASS** |" in (folder / "gate.md").read_text()
    assert "| golive.everything_measured | **WARN** |" in (folder / "gate.md").read_text()
    assert (folder / "report.html").exists()
    assert artifacts(run_id).get("golive-report") == "markdown"


def test_under_strict_a_skip_fails_the_go_live(prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from flows.pipeline import migrate

    plan = golive_plan(tmp_path, "golive-strict", strict=True)
    with pytest.raises(GateFailed, match="golive"):
        migrate(plan_path=str(plan))
    # Its rollback (the cleanup) left nothing of the checkpoint on the target.
    assert not [p for p in (tmp_path / "dst" / "golive").rglob("*") if p.is_file()]
