"""The migration pipeline against a real Prefect server: gates, rollback, resume, approvals, artifacts."""

from __future__ import annotations

import contextvars
import json
import threading
import time
from pathlib import Path

import pytest

from tests.support import write_plan


def artifacts(flow_run_name: str) -> dict[str, str]:
    """key -> type of the artifacts of the run named flow_run_name and of its subflow runs."""
    return {a.key or a.type: a.type for a in run_artifacts(flow_run_name)}


def run_and_subflows(flow_run_name: str) -> tuple:
    """The flow run named flow_run_name and its subflow runs (one per phase that ran), as the API gives them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        (parent,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name])))
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent.id]))
        )
    return parent, children


def run_artifacts(flow_run_name: str) -> list:
    """The artifacts of the run named flow_run_name and of its subflow runs, as the API gives them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    parent, children = run_and_subflows(flow_run_name)
    ids = [parent.id, *(child.id for child in children)]
    with get_client(sync_client=True) as client:
        return client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)))


def test_run_commits_writes_audit_and_artifacts_then_a_rerun_diffs_and_copies_nothing(prefect_api, tmp_path) -> None:
    from ferry.runlog import RunLog
    from flows.pipeline import migrate, new_run_id

    plan = write_plan(tmp_path, "commit-then-skip")
    run_id = new_run_id(str(plan))
    outcome = migrate(plan_path=str(plan), run_id=run_id)
    assert outcome["phases"] == {"preflight": "PASS", "data_sync": "PASS"}
    assert (tmp_path / "dst" / "b" / "three.bin").read_bytes() == b"333" * 100
    audit = Path(outcome["audit"])
    assert audit == tmp_path / ".ferry" / "runs" / run_id
    assert "name: commit-then-skip" in (audit / "plan" / "plan.yaml").read_text()
    assert "| data.target_matches_source[a/] | **PASS** |" in (audit / "data_sync" / "gate.md").read_text()
    found = artifacts(run_id)
    assert found.get("gate-data-sync") == "markdown" and found.get("gate-table-data-sync") == "table"
    assert found.get("data-sync-a") == "progress"
    # The shards' gauges merged into one for the phase, at 100 once both finished.
    (merged,) = [a for a in run_artifacts(run_id) if a.key == "data-sync"]
    assert merged.type == "progress" and merged.data == 100.0

    # Storage is not in the plan: data_sync is never skipped on the plan's hash, it diffs again.
    again = migrate(plan_path=str(plan))
    assert again["phases"] == {"preflight": "PASS", "data_sync": "PASS"}
    summaries = json.loads((Path(again["audit"]) / "data_sync" / "summary.json").read_text())
    assert [s["details"]["objects"]["copied"] for s in summaries] == [0, 0]
    assert sum(s["details"]["objects"]["skipped"] for s in summaries) == 3
    # A run that changed nothing records no commit: a rollback still undoes the first run.
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("commit-then-skip", "data_sync").status == "unchanged"
    assert runlog.live_commit("commit-then-skip", "data_sync")[0] == run_id
    runlog.close()
    forced = migrate(plan_path=str(plan), force=["data_sync"])
    assert forced["phases"] == {"preflight": "PASS", "data_sync": "PASS"}
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert [r.status for r in runlog.runs("commit-then-skip")] == ["completed"] * 3
    runlog.close()


def test_failed_gate_rolls_the_phase_back_and_a_fixed_rerun_resumes(prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    plan = write_plan(tmp_path, "gate-fails", allow_extra=False)
    stray = tmp_path / "dst" / "a" / "stray.bin"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"not in the source")
    with pytest.raises(GateFailed, match="gate failed") as failed:
        migrate(plan_path=str(plan))
    gate = Path(str(failed.value).rsplit("report: ", 1)[1].rstrip(")")).read_text()
    assert "- extra_in_target: a/stray.bin" in gate  # the report names the key, not only a count
    # ferry rolled back what the phase created; what was there before stays.
    assert sorted(p.name for p in (tmp_path / "dst").rglob("*") if p.is_file()) == ["stray.bin"]
    runlog = RunLog(tmp_path / ".ferry" / "state")
    phase = runlog.phase("gate-fails", "data_sync")
    assert phase.status == "rolled_back" and "gate failed" in phase.detail
    runlog.close()

    stray.unlink()  # the cause, fixed
    outcome = migrate(plan_path=str(plan))
    assert outcome["phases"] == {"preflight": "PASS", "data_sync": "PASS"}


def test_approval_pauses_and_resumes_through_the_api(prefect_api, tmp_path) -> None:
    from ferry.errors import UsageError
    from flows.approvals import approve_run
    from flows.pipeline import migrate, new_run_id

    plan = write_plan(tmp_path, "needs-approval", extra="approve_before: [data_sync]")
    run_id = new_run_id(str(plan))
    outcome: dict = {}
    # The run's thread carries this context: the test server's settings live in it.
    context = contextvars.copy_context()
    worker = threading.Thread(
        target=context.run, args=(lambda: outcome.update(migrate(plan_path=str(plan), run_id=run_id)),)
    )
    worker.start()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            approve_run(run_id)
            break
        except UsageError:  # not paused yet
            assert not (tmp_path / "dst").exists(), "the phase ran before it was approved"
            time.sleep(0.5)
    worker.join(timeout=120)
    assert outcome.get("phases") == {"preflight": "PASS", "data_sync": "PASS"}
    assert artifacts(run_id).get("approval-data-sync") == "markdown"


def test_timed_out_approval_changes_nothing(prefect_api, tmp_path) -> None:
    from ferry.errors import FerryError
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    plan = write_plan(tmp_path, "approval-times-out", extra="approve_before: [data_sync]")
    with pytest.raises(FerryError, match="^approval for data_sync timed out after 3 s; nothing was changed$"):
        migrate(plan_path=str(plan), approval_timeout_s=3)
    assert not (tmp_path / "dst").exists()
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("approval-times-out", "data_sync").status == "not_approved"
    runlog.close()


def test_nothing_to_change_needs_no_approval(prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate

    plan = write_plan(tmp_path, "approval-not-needed")
    migrate(plan_path=str(plan))  # the target now holds everything
    plan.write_text(plan.read_text() + "approve_before: [data_sync]\n")
    # Nothing to copy: no pause (else it would wait here for the whole timeout and fail the test's own).
    outcome = migrate(plan_path=str(plan), approval_timeout_s=600)
    assert outcome["phases"]["data_sync"] == "PASS"


def test_failed_preflight_stops_before_any_phase(prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    plan = write_plan(tmp_path, "preflight-fails")
    plan.write_text(plan.read_text().replace("storage: ./src", "storage: ./missing"))
    with pytest.raises(GateFailed, match="preflight failed, nothing was changed.*missing: no such directory"):
        migrate(plan_path=str(plan))
    assert not (tmp_path / "dst").exists()
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("preflight-fails", "data_sync") is None
    runlog.close()
