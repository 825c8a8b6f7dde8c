"""A two-phase pipeline (iam, then data_sync) against the real Prefect server: a failure in one phase
rolls back that phase only; the other stays as it is, and a fixed rerun resumes where it stopped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ferry.layout import StateLayout
from tests.support import run_ferry, write_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "iam"
IAM_SOURCE = """\
  iam:
    aws: {export: iam/aws-authorization-details.json}
    azure_export: iam/azure-role-assignments.json
    azure_role_definitions: iam/azure-role-definitions.json
    ldif: iam/groups.ldif
"""
IAM_PHASE = """\
  iam:
    namespace: ml-training
    ldap_groups: {ml-engineers: write, data-readers: read, gpu-oncall: admin}
"""
# The escalation paths of the example exports, accepted.
OVERRIDES = """\
    overrides: {aws:role/ci-runner: compute-operator, aws:role/build-bot: none, azure:service/platform-automation: none}
"""


def write_two_phase_plan(root: Path, name: str, allow_extra: bool = True) -> Path:
    plan = write_plan(root, name, allow_extra=allow_extra)
    shutil.copytree(EXAMPLES, root / "iam")
    text = plan.read_text().replace("  storage: ./src\n", "  storage: ./src\n" + IAM_SOURCE)
    plan.write_text(text.replace("phases:\n", "phases:\n" + IAM_PHASE + OVERRIDES))
    return plan


def test_second_phase_fails_its_gate_first_stays_and_a_fixed_rerun_resumes(prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate, new_run_id

    plan = write_two_phase_plan(tmp_path, "second-fails", allow_extra=False)
    stray = tmp_path / "dst" / "a" / "stray.bin"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"not in the source")
    run_id = new_run_id(str(plan))
    with pytest.raises(GateFailed, match="data_sync: gate failed"):
        migrate(plan_path=str(plan), run_id=run_id)

    # data_sync's rollback hooks deleted what it created; the stray file that was there stays.
    assert sorted(p.name for p in (tmp_path / "dst").rglob("*") if p.is_file()) == ["stray.bin"]
    assert (tmp_path / ".ferry" / "runs" / run_id / "data_sync" / "created-a.rollback.json").exists()
    # iam committed and its published bindings are untouched.
    published = StateLayout(tmp_path / ".ferry").bindings("second-fails")
    rendered = tmp_path / ".ferry" / "runs" / run_id / "iam" / "rbac.yaml"
    assert published.read_text() == rendered.read_text() and "ferry-compute-admin" in published.read_text()
    assert not (tmp_path / ".ferry" / "runs" / run_id / "iam" / "rollback.json").exists()
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("second-fails", "iam").status == "committed"
    assert runlog.phase("second-fails", "data_sync").status == "rolled_back"
    runlog.close()

    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert "committed" in rows["iam"] and "WARN" in rows["iam"]
    assert "rolled back" in rows["data_sync"] and "data_sync: data_sync: gate failed" in out

    stray.unlink()  # the cause, fixed
    outcome = migrate(plan_path=str(plan))
    assert outcome["phases"] == {"preflight": "PASS", "iam": "skipped", "data_sync": "PASS"}
    assert published.read_text() == rendered.read_text()


def test_failed_iam_gate_restores_the_previous_bindings_and_rollback_by_hand(prefect_api, tmp_path) -> None:
    from ferry.errors import GateFailed
    from flows.pipeline import migrate

    plan = write_two_phase_plan(tmp_path, "iam-fails")
    first = migrate(plan_path=str(plan), only=["iam"])
    assert first["phases"] == {"preflight": "PASS", "iam": "WARN"}
    published = StateLayout(tmp_path / ".ferry").bindings("iam-fails")
    before = published.read_text()

    # Without the overrides, three escalation paths are accepted by none, and the gate allows none.
    plan.write_text(plan.read_text().replace(OVERRIDES, ""))
    with pytest.raises(GateFailed, match="iam: gate failed: iam.escalation"):
        migrate(plan_path=str(plan))
    assert published.read_text() == before, "the failed run's bindings must not stay published"
    assert not (tmp_path / "dst").exists(), "data_sync ran after a failed iam gate"
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "rolled back" in out and f"the target still holds committed run {first['run_id']}" in out

    code, out, err = run_ferry("rollback", str(plan), "--phase", "iam", "--yes", api=prefect_api)
    assert code == 0, err
    assert f"rolled back iam of run {first['run_id']}: removed" in out
    assert "no bindings were published before run" in out
    assert not published.exists()
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "rolled back" in out and "still holds" not in out
    code, _, err = run_ferry("rollback", str(plan), "--phase", "iam", "--yes", api=prefect_api)
    assert code == 2 and "iam has no committed run to roll back" in err
