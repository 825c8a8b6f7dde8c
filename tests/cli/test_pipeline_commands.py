"""`ferry run`, `status`, `rollback`, `ui`, `serve` and `deploy` as a user types them, against a real Prefect server.

Each command is its own process, as in a shell (Prefect binds its log handlers to the streams a
process starts with).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import FERRY, parts_recorded, run_ferry, signal_mid_copy, write_plan


def files(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def wait_for_deployment(name: str):
    """The deployment `ferry serve` registers under name, once it has (None after 60 s)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        with get_client(sync_client=True) as client:
            try:
                return client.read_deployment_by_name(name)
            except Exception:  # noqa: BLE001 - not registered yet
                continue
    return None


def cancelled(flow_run_id):
    """Cancel a flow run as the UI's Cancel button does; the run once its state is final (None after 120 s)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Cancelling(), force=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1)
        with get_client(sync_client=True) as client:
            (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        if run.state is not None and run.state.is_final():
            return run
    return None


def slow_copy_plan(root: Path, name: str, moto_env, extra: str = "", sync: str = "") -> Path:
    """A plan copying a small object, then a 24 MiB one in 96 parts at 4 MB/s, to a fresh moto bucket `name`
    (`sync`: more of data_sync's settings, `extra`: more of the plan)."""
    (root / "src" / "a").mkdir(parents=True)
    (root / "src" / "a" / "small.bin").write_bytes(b"small")
    (root / "src" / "ckpt.bin").write_bytes(os.urandom(24 << 20))
    moto_env.client("s3").create_bucket(Bucket=name)
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: {name}\nsource: {{storage: ./src}}\ntarget: {{storage: 'moto://{name}/p'}}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{moto_env.endpoint}', min_part_size: 262144}}}}\n"
        f"phases:\n  data_sync: {{threads: 4, part_size: 256K, multipart_threshold: 1M, bwlimit: 4M{sync}}}\n"
        "retries: {attempts: 0, delay_s: 0}\n" + extra
    )
    return plan


def run_until_approval_waits(plan: Path, api: str, timeout_s: int) -> tuple[subprocess.Popen, str]:
    """`ferry run` of a plan that needs an approval, once `ferry status` at 80 columns shows its data_sync row
    waiting (the process, and that row; "" if it never did within 60 s)."""
    env = {**os.environ, "PREFECT_API_URL": api}
    run = subprocess.Popen(
        [FERRY, "run", str(plan), "--approval-timeout", str(timeout_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # At 80 columns, as a small terminal: the run id is never cut.
        _, out, _ = run_ferry("status", str(plan), api=api, env={"COLUMNS": "80"})
        row = next((line for line in out.splitlines() if line.startswith("│ data_sync")), "")
        if "waiting for approval" in row:
            return run, row
        time.sleep(1)
    return run, ""


def test_run_status_rollback(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "cli-flow")
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0, err
    assert "data_sync PASS" in out and "audit folder" in out
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]

    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert code == 0 and "committed" in out and "unchanged" in out

    # Not on a terminal: nothing happens without --yes; --dry-run lists what would go.
    code, _, err = run_ferry("rollback", str(plan), "--phase", "data_sync", api=prefect_api)
    assert code == 2 and "add --yes to confirm" in err
    code, out, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--dry-run", api=prefect_api)
    assert code == 0, err
    assert "delete 3 object(s) it created" in out and "  delete a/one.bin" in out and "nothing was changed" in out
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]
    code, out, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--yes", api=prefect_api)
    assert code == 0, err
    assert "deleted 3 object(s)" in out
    assert files(tmp_path / "dst") == []
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "rolled back" in out

    code, _, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--yes", api=prefect_api)
    assert code == 2 and "no committed run to roll back" in err


def test_failed_gate_exits_1_and_status_shows_it(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "cli-gate-fails", allow_extra=False)
    (tmp_path / "dst" / "b").mkdir(parents=True)
    (tmp_path / "dst" / "b" / "stray.bin").write_bytes(b"x")
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 1
    assert "gate failed" in err and "FAIL" in out
    # The gate names the key behind its count, for the operator to look at.
    audit = Path(out.split("audit folder: ")[1].split()[0])
    assert "- extra_in_target: b/stray.bin" in (audit / "data_sync" / "gate.md").read_text()
    assert "extra_in_target: b/stray.bin" in json.dumps(json.loads((audit / "data_sync" / "gate.json").read_text()))
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "rolled back" in out


def test_bad_plan_runs_nothing(prefect_api, tmp_path) -> None:
    plan = tmp_path / "migration.yaml"
    plan.write_text("name: x\nsource: {storage: ./s}\ntarget: {storage: ./d}\nphases: {manifests: {}}\n")
    code, _, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 2 and "phases.manifests.sources: Field required" in err
    assert not (tmp_path / ".ferry").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ferry_ui_starts_a_local_server_and_stops_it_with_itself(tmp_path, sig) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # its own database
    proc = subprocess.Popen([FERRY, "ui", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Prefect UI: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        assert f"PREFECT_API_URL={url}/api" in proc.stdout.readline()
        with urllib.request.urlopen(f"{url}/api/health", timeout=5) as response:
            assert response.status == 200
        with urllib.request.urlopen(url, timeout=5) as response:
            assert b"<html" in response.read().lower()
        proc.send_signal(sig)  # Ctrl-C, or a service manager's stop
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    with pytest.raises(OSError):  # nothing listens there any more: the server went with ferry ui
        urllib.request.urlopen(f"{url}/api/health", timeout=2)


def test_ferry_serve_runs_the_plan_when_its_cron_fires(prefect_api, tmp_path) -> None:
    import signal
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    # Every minute: the shortest a five-field cron allows, so the test sees it fire within ~70 s.
    plan = write_plan(tmp_path, "every-minute", extra='schedule: "* * * * *"')
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([FERRY, "serve", str(plan)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deployment = wait_for_deployment("migrate/every-minute")
        assert deployment is not None, "ferry serve registered no deployment"
        assert [s.schedule.cron for s in deployment.schedules] == ["* * * * *"]
        assert deployment.parameters["plan_path"] == str(plan.resolve())

        only_this = DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
        deadline, done = time.monotonic() + 150, []
        while not done and time.monotonic() < deadline:
            time.sleep(2)
            with get_client(sync_client=True) as client:
                runs = client.read_flow_runs(deployment_filter=only_this)
            done = [r for r in runs if r.state is not None and r.state.is_final()]
        assert done, f"no scheduled run finished; runs: {[(r.name, r.state_name) for r in runs]}"
        assert done[0].state.is_completed(), (done[0].state, (tmp_path / "serve.log").read_text()[-3000:])
        assert done[0].auto_scheduled, "the run was not created by the schedule"
        assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        log.close()


def test_a_waiting_approval_shows_its_command_and_a_timeout_is_one_line(prefect_api, tmp_path) -> None:
    # The timeout is what is tested, so nothing races it: the run id comes from the run's own output.
    plan = write_plan(tmp_path, "approval-visible", extra="approve_before: [data_sync]")
    code, _, err = run_ferry("run", str(plan), "--approval-timeout", "1", api=prefect_api)
    assert code == 1
    run_id = re.search(r"To approve: ferry approve (migration-\d{8}-\d{6}-\d{3})", err)
    assert run_id and "will copy 3 object(s)" in err, err
    ours = [line for line in err.splitlines() if line.startswith("ferry: ")]
    timed_out = f"ferry: failed: run {run_id.group(1)}: approval for data_sync timed out after 1 s; nothing was changed"
    assert ours == [timed_out]
    assert "Traceback" not in err and not (tmp_path / "dst").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_keeps_what_it_copied_and_the_rerun_resumes(prefect_api, moto_env, tmp_path, sig) -> None:
    bucket = f"interrupted-{int(sig)}"
    plan = slow_copy_plan(tmp_path, bucket, moto_env)  # mid-phase for seconds
    size = (tmp_path / "src" / "ckpt.bin").stat().st_size
    state = tmp_path / ".ferry" / "state"
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    run = subprocess.Popen(
        [FERRY, "run", str(plan)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    err = signal_mid_copy(run, state, 10, sig)
    assert run.returncode == 128 + sig, err
    name = signal.Signals(sig).name
    assert f"ferry: interrupted by {name}; what was verified is kept: run the same command again" in err
    assert "Traceback" not in err
    kept = parts_recorded(state)
    assert 10 <= kept < 96
    # Nothing was rolled back: the small object copied before the interrupt is still there.
    listed = moto_env.client("s3").list_objects_v2(Bucket=bucket, Prefix="p/").get("Contents", [])
    assert [o["Key"] for o in listed] == ["p/a/small.bin"]
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "interrupted" in next(line for line in out.splitlines() if line.startswith("│ data_sync")), out

    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0 and "data_sync PASS" in out, err
    audit = Path(out.split("audit folder: ")[1].split()[0])
    summary = json.loads((audit / "data_sync" / "sync-all.json").read_text())["summary"]
    # Only the parts that were not recorded are sent again.
    assert summary["multipart"] == {"resumed_uploads": 1, "parts_resumed": kept, "parts_reconciled": 0}
    assert summary["bytes"]["read_through_ferry"] == size - kept * (256 << 10)


def test_plan_show_exits_1_when_a_preflight_check_fails(tmp_path) -> None:
    plan = write_plan(tmp_path, "show-fails")
    code, out, err = run_ferry("plan", "show", str(plan))
    assert code == 0 and "FAIL" not in out, err
    plan.write_text(plan.read_text().replace("storage: ./src", "storage: ./no-such-src"))
    code, out, err = run_ferry("plan", "show", str(plan))
    assert code == 1 and "preflight.source_storage_access" in out and "FAIL" in out
    assert "Traceback" not in out + err


def test_a_cancel_from_the_prefect_ui_is_an_interrupt(prefect_api, moto_env, tmp_path) -> None:
    """A served run cancelled through the API (as the UI's Cancel button does) keeps what it copied."""
    from prefect.client.orchestration import get_client

    from ferry.runlog import RunLog

    plan = slow_copy_plan(tmp_path, "cancelled", moto_env, extra="schedule: '0 0 1 1 *'\n")
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen([FERRY, "serve", str(plan)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deployment = wait_for_deployment("migrate/cancelled")
        assert deployment is not None, "ferry serve registered no deployment"
        with get_client(sync_client=True) as client:
            flow_run = client.create_flow_run_from_deployment(deployment.id)
        deadline = time.monotonic() + 120
        while parts_recorded(tmp_path / ".ferry" / "state") < 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert parts_recorded(tmp_path / ".ferry" / "state") >= 10, (tmp_path / "serve.log").read_text()[-3000:]
        final = cancelled(flow_run.id)
        assert final is not None and final.state.is_cancelled(), final
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=30)
        log.close()
    runlog = RunLog(tmp_path / ".ferry" / "state")
    try:
        assert runlog.phase("cancelled", "data_sync").status == "interrupted", (tmp_path / "serve.log").read_text()[
            -3000:
        ]
    finally:
        runlog.close()
    # Nothing was rolled back.
    listed = moto_env.client("s3").list_objects_v2(Bucket="cancelled", Prefix="p/").get("Contents", [])
    assert [o["Key"] for o in listed] == ["p/a/small.bin"]
    assert parts_recorded(tmp_path / ".ferry" / "state") >= 10


def test_ctrl_c_during_an_approval_wait_is_an_interrupt(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "approval-interrupted", extra="approve_before: [data_sync]")
    run, row = run_until_approval_waits(plan, prefect_api, 120)
    try:
        assert row, "the run never waited for approval"
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    _, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert re.search(r"run migration-\S+: interrupted", out), out
    assert not (tmp_path / "dst").exists()
