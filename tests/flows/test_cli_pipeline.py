"""`ferry run`, `ferry status` and `ferry rollback` as a user types them, against the real Prefect server.

Each command is its own process, as in a shell (Prefect binds its log handlers to the streams a
process starts with).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.flows.test_pipeline import write_plan

FERRY = str(Path(sys.executable).with_name("ferry"))


def run_cli(api: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PREFECT_API_URL": api, "COLUMNS": "200"}
    done = subprocess.run([FERRY, *args], env=env, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stdout, done.stderr


def files(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_run_status_rollback(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "cli-flow")
    code, out, err = run_cli(prefect_api, "run", str(plan))
    assert code == 0, err
    assert "data_sync PASS" in out and "audit folder" in out
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]

    code, out, _ = run_cli(prefect_api, "status", str(plan))
    assert code == 0 and "committed" in out and "unchanged" in out

    # Not on a terminal: nothing happens without --yes; --dry-run lists what would go.
    code, _, err = run_cli(prefect_api, "rollback", str(plan), "--phase", "data_sync")
    assert code == 2 and "add --yes to confirm" in err
    code, out, err = run_cli(prefect_api, "rollback", str(plan), "--phase", "data_sync", "--dry-run")
    assert code == 0, err
    assert "delete 3 object(s) it created" in out and "  delete a/one.bin" in out and "nothing was changed" in out
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]
    code, out, err = run_cli(prefect_api, "rollback", str(plan), "--phase", "data_sync", "--yes")
    assert code == 0, err
    assert "deleted 3 object(s)" in out
    assert files(tmp_path / "dst") == []
    code, out, _ = run_cli(prefect_api, "status", str(plan))
    assert "rolled_back" in out

    code, _, err = run_cli(prefect_api, "rollback", str(plan), "--phase", "data_sync", "--yes")
    assert code == 2 and "no committed run to roll back" in err


def test_failed_gate_exits_1_and_status_shows_it(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "cli-gate-fails", allow_extra=False)
    (tmp_path / "dst" / "b").mkdir(parents=True)
    (tmp_path / "dst" / "b" / "stray.bin").write_bytes(b"x")
    code, out, err = run_cli(prefect_api, "run", str(plan))
    assert code == 1
    assert "gate failed" in err and "FAIL" in out
    code, out, _ = run_cli(prefect_api, "status", str(plan))
    assert "rolled_back" in out


def test_bad_plan_runs_nothing(prefect_api, tmp_path) -> None:
    plan = tmp_path / "migration.yaml"
    plan.write_text("name: x\nsource: {storage: ./s}\ntarget: {storage: ./d}\nphases: {images: {}}\n")
    code, _, err = run_cli(prefect_api, "run", str(plan))
    assert code == 2 and "phase 'images' is not available" in err
    assert not (tmp_path / ".ferry").exists()


def test_ferry_ui_starts_a_local_server_and_prints_its_url(tmp_path) -> None:
    import signal
    import time
    import urllib.request

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
    finally:
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.returncode is not None, "ferry ui did not stop on Ctrl-C"


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
        deadline, deployment = time.monotonic() + 60, None
        while deployment is None and time.monotonic() < deadline:
            time.sleep(0.5)
            with get_client(sync_client=True) as client:
                try:
                    deployment = client.read_deployment_by_name("migrate/every-minute")
                except Exception:  # noqa: BLE001 - not registered yet
                    deployment = None
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


def test_ferry_deploy_registers_for_a_work_pool_and_a_worker_runs_it(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client

    plan = write_plan(tmp_path, "pooled", extra='schedule: "30 3 * * *"')
    code, out, err = run_cli(prefect_api, "deploy", str(plan), "--pool", "ferry-test-pool")
    assert code == 0, err
    assert "deployment migrate/pooled" in out and "in work pool ferry-test-pool, on '30 3 * * *'" in out
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("migrate/pooled")
        assert deployment.work_pool_name == "ferry-test-pool"
        assert [s.schedule.cron for s in deployment.schedules] == ["30 3 * * *"]
        run = client.create_flow_run_from_deployment(deployment.id)

    # A real worker of the pool picks the run up and runs the plan from this checkout.
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    prefect = str(Path(sys.executable).with_name("prefect"))
    worker = subprocess.run(
        [prefect, "worker", "start", "--pool", "ferry-test-pool", "--run-once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    with get_client(sync_client=True) as client:
        state = client.read_flow_run(run.id).state
    assert state is not None and state.is_completed(), (state, worker.stdout[-2000:], worker.stderr[-2000:])
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]


def test_ferry_deploy_needs_a_server_and_a_process_pool(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    plan = write_plan(tmp_path, "pooled-wrong")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run(
        [FERRY, "deploy", str(plan), "--pool", "p"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2 and "deploy needs the Prefect server" in done.stderr
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="ferry-k8s-pool", type="kubernetes"))
    code, _, err = run_cli(prefect_api, "deploy", str(plan), "--pool", "ferry-k8s-pool")
    assert code == 2 and "'ferry-k8s-pool' is a kubernetes pool" in err
