"""`ferry deploy` as a user types it, against a real Prefect server and real process workers: a deployment
registered or written as the prefect.yaml a team keeps in git (and registered from it by `prefect deploy`), one
run at a time, and a failed run told to a notification block through an automation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from tests.cli.test_pipeline_commands import files
from tests.support import ROOT, run_ferry, write_plan

PREFECT = str(Path(sys.executable).with_name("prefect"))
# A kubernetes pool's Job template, as deploy/README.md has ops teams create the pool with it.
WORK_POOL_TEMPLATE = ROOT / "deploy" / "work-pool.json"


def worker(api: str, pool: str, *, run_once: bool, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`prefect worker start --pool POOL` as an operator starts one (polling every 2 s)."""
    environ = {**os.environ, "PREFECT_API_URL": api, "PREFECT_WORKER_QUERY_SECONDS": "2", **(env or {})}
    command = [PREFECT, "worker", "start", "--pool", pool, *(["--run-once"] if run_once else [])]
    return subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def final_state(flow_run_id, timeout: float = 240):
    """The flow run's state once final (its last state after timeout)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    while True:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(flow_run_id).state
        if (state is not None and state.is_final()) or time.monotonic() > deadline:
            return state
        time.sleep(1)


def run_by_a_worker(api: str, deployment: str, pool: str):
    """A run of the deployment, made now and run by a real worker of the pool (started in another folder, as an
    operator starts one); (the run, its final state, the worker's output)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(client.read_deployment_by_name(deployment).id)
    proc = worker(api, pool, run_once=True)
    out, _ = proc.communicate(timeout=240)
    return run, final_state(run.id, timeout=10), out


def registered(name: str) -> dict:
    """What the server holds of a deployment, as far as the plan decides it."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        d = client.read_deployment_by_name(name)
    return {
        "entrypoint": d.entrypoint,
        "parameters": d.parameters,
        "work_pool": d.work_pool_name,
        "crons": [s.schedule.cron for s in d.schedules],
        "limit": d.global_concurrency_limit.limit if d.global_concurrency_limit else None,
        "collision": d.concurrency_options.collision_strategy.value if d.concurrency_options else None,
        "pull_steps": d.pull_steps or [],  # none: an update may say so by None
        "tags": d.tags,
        "job_variables": d.job_variables,
    }


def test_ferry_deploy_registers_for_a_work_pool_and_a_worker_runs_it(prefect_api, tmp_path) -> None:

    plan = write_plan(tmp_path, "pooled", extra='schedule: "30 3 * * *"')
    code, out, err = run_ferry("deploy", str(plan), "--pool", "ferry-test-pool", api=prefect_api)
    assert code == 0, err
    assert "deployment migrate/pooled" in out and "in work pool ferry-test-pool, on '30 3 * * *', one run at" in out
    assert registered("migrate/pooled") == {
        "entrypoint": "flows.pipeline.migrate",
        "parameters": {"plan_path": str(plan.resolve())},
        "work_pool": "ferry-test-pool",
        "crons": ["30 3 * * *"],
        "limit": 1,
        "collision": "CANCEL_NEW",
        "pull_steps": [],
        "tags": ["ferry"],
        "job_variables": {},
    }
    # The worker runs the installed ferry's flow, by its module path.
    _, state, out = run_by_a_worker(prefect_api, "migrate/pooled", "ferry-test-pool")
    assert state is not None and state.is_completed(), (state, out[-3000:])
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"]


def test_ferry_deploy_needs_a_server_and_a_process_pool(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    plan = write_plan(tmp_path, "pooled-wrong")
    code, _, err = run_ferry("deploy", str(plan), "--pool", "p")
    assert code == 2 and "deploy needs the Prefect server" in err
    code, _, err = run_ferry("deploy", str(plan), "--pool", "p", api="http://127.0.0.1:9/api")
    assert code == 2 and err.startswith("ferry: error: deploy needs the Prefect server the workers poll: ") and (
        "PREFECT_API_URL http://127.0.0.1:9/api does not answer (" in err and len(err.splitlines()) == 1
    ), err
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="ferry-k8s-pool", type="kubernetes"))
    code, _, err = run_ferry("deploy", str(plan), "--pool", "ferry-k8s-pool", api=prefect_api)
    assert code == 2 and "'ferry-k8s-pool' is a kubernetes pool" in err
    code, _, err = run_ferry("deploy", str(plan), "--pool", "p", "--notify", "nothing-named", api=prefect_api)
    assert code == 2 and "--notify 'nothing-named': give the block as TYPE/NAME" in err, err
    code, _, err = run_ferry("deploy", str(plan), "--pool", "p", "--notify", "custom-webhook/absent", api=prefect_api)
    assert code == 2 and "--notify 'custom-webhook/absent': no such block" in err, err
    (tmp_path / "a-file").write_text("")
    code, _, err = run_ferry("deploy", str(plan), "--pool", "p", "--emit", str(tmp_path / "a-file" / "prefect.yaml"))
    assert code == 2 and len(err.splitlines()) == 1 and "prefect.yaml: cannot write prefect.yaml there: " in err, err


def test_the_emitted_prefect_yaml_registers_what_ferry_deploy_does_and_runs_one_run_at_a_time(
    prefect_api, tmp_path
) -> None:
    from prefect.client.orchestration import get_client

    plan = write_plan(tmp_path, "emitted", extra='schedule: "15 2 * * *"')
    ops = tmp_path / "ops-repo"  # where a team keeps it: not ferry's tree, not the plan's folder
    code, out, err = run_ferry("deploy", str(plan), "--pool", "ferry-emit-pool", "--emit", str(ops / "prefect.yaml"))
    assert code == 0, err  # no server needed to write it
    assert "prefect --no-prompt deploy --all\n" in out and not (ops / "automations.yaml").exists()
    code, out, err = run_ferry("deploy", str(plan), "--pool", "ferry-emit-pool", "--emit", str(ops / "deploy.yaml"))
    assert code == 0 and "prefect --no-prompt deploy --all --prefect-file deploy.yaml" in out, out + err
    written = yaml.safe_load((ops / "prefect.yaml").read_text())
    assert written["deployments"][0]["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}

    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    done = subprocess.run([PREFECT, "work-pool", "create", "ferry-emit-pool", "--type", "process"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], cwd=ops, env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from_file = registered("migrate/emitted")
    code, _, err = run_ferry("deploy", str(plan), "--pool", "ferry-emit-pool", api=prefect_api)
    assert code == 0, err
    assert registered("migrate/emitted") == from_file  # the same deployment, registered either way
    assert from_file["limit"] == 1 and from_file["collision"] == "CANCEL_NEW"

    # One run at a time: the first holds its slot (waiting at the data gate), the second is cancelled at once.
    with get_client(sync_client=True) as client:
        deployment_id = client.read_deployment_by_name("migrate/emitted").id
        first = client.create_flow_run_from_deployment(deployment_id)
    held = {"FERRY_FAILPOINTS": "data_sync:gate", "FERRY_FAILPOINT_WAIT_S": "30"}
    proc = worker(prefect_api, "ferry-emit-pool", run_once=False, env=held)
    try:
        deadline = time.monotonic() + 180
        with get_client(sync_client=True) as client:
            while not client.read_flow_run(first.id).state.is_running() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert client.read_flow_run(first.id).state.is_running()
            second = client.create_flow_run_from_deployment(deployment_id)
        state = final_state(second.id, timeout=120)
        assert state is not None and state.is_cancelled(), state
        state = final_state(first.id)
        assert state is not None and state.is_completed(), state
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert files(tmp_path / "dst") == ["a/one.bin", "a/two.bin", "b/three.bin"], out[-3000:]


def test_a_kubernetes_pool_gets_the_deployment_with_the_worker_image(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    pool = "ferry-k8s-image-pool"
    # The pool as deploy/README.md makes it; the server checks that the template declares every variable it uses.
    done = subprocess.run([PREFECT, "work-pool", "create", pool, "--type", "kubernetes", "--base-job-template",
                           str(WORK_POOL_TEMPLATE)], env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    plan = write_plan(tmp_path, "in-pods", extra='schedule: "0 4 * * *"')
    code, _, err = run_ferry("deploy", str(plan), "--pool", pool, api=prefect_api)
    assert code == 2 and err.splitlines() == [f"ferry: error: --pool: '{pool}' is a kubernetes pool: give --image, "
                                              "the worker image its flow runs run in"], err  # fmt: skip

    image = "registry.example.com/ml-platform/ferry-worker@sha256:" + "ab" * 32
    ops = tmp_path / "ops-repo"
    emit = ("--emit", str(ops / "prefect.yaml"))
    code, out, err = run_ferry("deploy", str(plan), "--pool", pool, "--image", image, *emit)
    assert code == 0, err
    written = (ops / "prefect.yaml").read_text()
    assert "--type kubernetes --base-job-template deploy/work-pool.json" in written
    assert yaml.safe_load(written)["deployments"][0]["work_pool"] == {"name": pool, "job_variables": {"image": image}}
    done = subprocess.run([PREFECT, "--no-prompt", "deploy", "--all"], cwd=ops, env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from_file = registered("migrate/in-pods")
    code, out, err = run_ferry("deploy", str(plan), "--pool", pool, "--image", image, api=prefect_api)
    assert code == 0, err
    assert "start a worker: deploy/k8s's worker" in out
    assert registered("migrate/in-pods") == from_file == {
        "entrypoint": "flows.pipeline.migrate",
        "parameters": {"plan_path": str(plan.resolve())},
        "work_pool": pool,
        "crons": ["0 4 * * *"],
        "limit": 1,
        "collision": "CANCEL_NEW",
        "pull_steps": [],
        "tags": ["ferry"],
        "job_variables": {"image": image},
    }

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="ferry-image-process-pool", type="process"))
    code, _, err = run_ferry("deploy", str(plan), "--pool", "ferry-image-process-pool", "--image", image,
                             api=prefect_api)  # fmt: skip
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--image: 'ferry-image-process-pool' is a process pool, whose workers run the ferry installed" in err
    code, _, err = run_ferry("deploy", str(plan), "--pool", "nowhere", "--image", image, api=prefect_api)
    assert code == 2 and "--pool: no work pool 'nowhere' for --image: prefect work-pool create nowhere" in err, err
    with get_client(sync_client=True) as client, pytest.raises(ObjectNotFound):
        client.read_work_pool("nowhere")  # not made a process pool on the way


def test_a_plan_in_a_configmap_volume_is_named_by_its_link(tmp_path) -> None:
    # A ConfigMap volume as the kubelet lays it out (deploy/k8s mounts the plan so): each file a link through ..data
    # into a folder named for the update, which the next update replaces. The deployment must name the link.
    volume = tmp_path / "etc-ferry-plan"
    update = volume / "..2026_12_04_19_30_00.000000001"
    update.mkdir(parents=True)
    write_plan(update, "from-configmap")
    (volume / "..data").symlink_to(update.name)
    (volume / "migration.yaml").symlink_to("..data/migration.yaml")
    emitted = tmp_path / "ops" / "prefect.yaml"
    code, _, err = run_ferry("deploy", str(volume / "migration.yaml"), "--pool", "ferry-k8s", "--image",
                             "registry.example.com/ferry-worker:1", "--emit", str(emitted))  # fmt: skip
    assert code == 0, err
    (spec,) = yaml.safe_load(emitted.read_text())["deployments"]
    assert spec["parameters"] == {"plan_path": str(volume / "migration.yaml")}


class Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def webhook() -> Iterator[str]:
    """A local HTTP endpoint a custom-webhook notification block posts to; its URL."""
    server = HTTPServer(("127.0.0.1", 0), Hook)
    Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook"
    finally:
        server.shutdown()


def test_a_failed_run_is_told_to_the_notification_block(prefect_api, tmp_path, webhook) -> None:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client

    CustomWebhookNotificationBlock(name="ferry-test", url=webhook, json_data={"text": "{{body}}"}).save(
        "ferry-oncall", overwrite=True
    )
    # A gate that fails: the target holds an object the source lacks, and the plan allows no extra.
    plan = write_plan(tmp_path, "notified", allow_extra=False)
    (tmp_path / "dst" / "a").mkdir(parents=True)
    (tmp_path / "dst" / "a" / "stray.bin").write_bytes(b"someone else's")
    ops = tmp_path / "ops-repo"
    code, out, err = run_ferry("deploy", str(plan), "--pool", "ferry-notify-pool", "--emit", str(ops / "prefect.yaml"),
                               "--notify", "custom-webhook/ferry-oncall", api=prefect_api)  # fmt: skip
    assert code == 0, err
    assert "automations.yaml: custom-webhook/ferry-oncall is told when a run fails" in out
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    done = subprocess.run([PREFECT, "automation", "create", "--from-file", "automations.yaml"], cwd=ops, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    code, out, err = run_ferry("deploy", str(plan), "--pool", "ferry-notify-pool", api=prefect_api)
    assert code == 0, err
    run, state, out = run_by_a_worker(prefect_api, "migrate/notified", "ferry-notify-pool")
    assert state is not None and state.is_failed(), (state, out[-3000:])
    deadline = time.monotonic() + 90
    while not Hook.received and time.monotonic() < deadline:
        time.sleep(0.5)
    assert Hook.received, "the automation sent nothing"
    with get_client(sync_client=True) as client:
        name = client.read_flow_run(run.id).name  # ferry names its runs by their run id
    text = Hook.received[0]["text"]
    assert f"ferry's run {name} of the plan notified ended Failed: " in text and "GateFailed: data_sync" in text, text
