"""data_sync's shards on a local Dask cluster of worker processes: each shard travels as a ShardSpec (no plan path,
no secret value), runs in a worker, and the results merge into one summary and one gate."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import time
from pathlib import Path

import pytest

from ferry.phases.base import open_phase
from ferry.plan import load_plan
from tests.cli.test_pipeline_commands import slow_copy_plan
from tests.flows.test_pipeline import run_artifacts
from tests.support import Watched, parts_recorded, run_ferry

PLAN = """\
name: {name}
source:
  storage: {source}
target:
  storage: ./dst
phases:
  data_sync:
    threads: 4
    memory_budget: 64MiB
    shards: [a/, b/, c/]
    runner: {runner}
retries: {{attempts: 1, delay_s: 0}}
"""


def tree(root: Path) -> dict[str, bytes]:
    files = {f"{shard}/{i}.bin": os.urandom(100 + i) for shard in "abc" for i in range(5)}
    for key, data in files.items():
        (root / "src" / key).parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / key).write_bytes(data)
    return files


def test_shards_run_in_worker_processes_and_merge_into_one_gate(prefect_api: str, tmp_path: Path) -> None:
    files = tree(tmp_path)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="dask-local", source="./src", runner="{dask: {workers: 2}}"))
    ferry = Watched("run", str(plan), api=prefect_api)
    code, out, err = ferry.finish()
    assert code == 0, out + err
    assert {k: (tmp_path / "dst" / k).read_bytes() for k in files} == files
    (run,) = (tmp_path / ".ferry" / "runs").iterdir()
    summaries = json.loads((run / "data_sync" / "summary.json").read_text())
    assert sum(s["details"]["objects"]["copied"] for s in summaries) == len(files)
    hosts = {s["details"]["ran_on"] for s in summaries}
    # Not the driver's process: the cluster's worker processes (one or both, as the scheduler placed them).
    assert all(not ran_on.endswith(f":{ferry.proc.pid}") for ran_on in hosts) and 1 <= len(hosts) <= 2, hosts
    gate = json.loads((run / "data_sync" / "gate.json").read_text())
    assert {r["status"] for r in gate} == {"PASS"}, gate
    assert {"data.target_matches_source[a/]", "data.target_matches_source[c/]"} <= {r["name"] for r in gate}
    # One progress view: the workers' shard gauges merged on the driver, beside each shard's own.
    found = {a.key: a for a in run_artifacts(run.name)}
    assert {"data-sync-a", "data-sync-b", "data-sync-c"} <= found.keys()
    assert found["data-sync"].type == "progress" and found["data-sync"].data == 100.0
    code, out, err = run_ferry("plan", "show", str(plan))
    assert code == 0 and "shards on 2 local Dask workers, 4 threads each" in out, out + err


def test_a_shard_travels_without_the_plan_or_a_secret(tmp_path: Path, monkeypatch) -> None:
    tree(tmp_path)
    monkeypatch.setenv("FERRY_TEST_SECRET_KEY", "s3cr3t-value-never-pickled")
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        PLAN.format(name="spec", source="sealed://bucket/data", runner="{dask: {workers: 2}}")
        + """profiles:
  sealed:
    type: s3
    endpoint_url: http://127.0.0.1:9
    credentials: {access_key_id_env: FERRY_TEST_KEY_ID, secret_access_key_env: FERRY_TEST_SECRET_KEY}
"""
    )
    phase = open_phase(load_plan(plan), "data_sync")
    spec = phase.step_spec("b/")
    blob = pickle.dumps(spec)
    assert b"s3cr3t-value-never-pickled" not in blob and b"FERRY_TEST_SECRET_KEY" in blob
    assert str(plan).encode() not in blob
    assert pickle.loads(blob) == spec
    # The run's budgets shared by the workers that run shards at once.
    halves = spec.divided(2, in_process=False).settings
    assert halves.memory_budget == 32 * 2**20 and halves.threads == spec.settings.threads
    # Steps that share this process (the threads runner) share its engine threads too.
    assert spec.divided(2, in_process=True).settings.threads == spec.settings.threads // 2


@pytest.mark.parametrize(
    ("runner", "problem"),
    [
        ("{dask: {workers: 2, address: 'tls://s:8786'}}", "name one of address"),
        ("{dask: {}}", "name one of address"),
        ("{dask: {address: 'tcp://10.1.2.3:8786'}}", "over tls://"),
        ("{dask: {address: 'scheduler:8786'}}", "give tls://host:port"),
        ("{dask: {workers: 0}}", "greater than or equal to 1"),
        ("processes", "runner"),
    ],
)
def test_a_bad_runner_is_one_line_naming_the_field(tmp_path: Path, runner: str, problem: str) -> None:
    tree(tmp_path)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="bad", source="./src", runner=runner))
    code, out, err = run_ferry("plan", "validate", str(plan))
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "phases.data_sync.runner" in line and problem in line, line


def test_a_password_in_a_url_does_not_travel_to_workers(tmp_path: Path) -> None:
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="pw", source="sftp://me:hunter2@host/data", runner="{dask: {workers: 2}}"))
    code, out, err = run_ferry("plan", "validate", str(plan))
    assert code == 2 and "source.storage" in err and "hunter2" not in err, out + err


@pytest.mark.parametrize(
    ("state_url", "problem"),
    [
        ("./dst/ferry-state", "lies inside target.storage"),
        ("./src/.state", "lies inside source.storage"),
        ("sftp://me:hunter2@host/state", "a URL with a password"),
        ("./.ferry/checkpoints", "and state_dir '.ferry' overlap"),
        ("./dst/", "lies inside target.storage"),
        ("gopher://host/state", "phases.data_sync.state_url"),
    ],
)
def test_a_state_url_inside_what_is_synced_is_one_line(tmp_path: Path, state_url: str, problem: str) -> None:
    tree(tmp_path)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="state", source="./src", runner=f"threads\n    state_url: '{state_url}'"))
    code, out, err = run_ferry("plan", "validate", str(plan))
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert problem in line and "hunter2" not in line, line


def test_a_worker_that_does_not_see_the_audit_folder_keeps_the_shard_in_state_url(tmp_path: Path) -> None:
    """A worker on another machine runs the shard in a folder of its own (as flows.phase._run_step gives it one, which
    tests/deploy/test_k8s.py runs) and copies the state and journal to state_url (a shared path here); the driver
    fetches them for the gate and the rollback."""
    from ferry.audit import AuditFolder
    from ferry.phases.base import Reporter

    files = tree(tmp_path)
    plan_path = tmp_path / "migration.yaml"
    plan_path.write_text(PLAN.format(name="remote", source="./src", runner="threads\n    state_url: ./shared"))
    phase = open_phase(load_plan(plan_path), "data_sync")
    (check,) = phase.preflight()
    assert (check.name, check.status.value) == ("preflight.state_storage_access", "PASS"), check.to_dict()
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    elsewhere = AuditFolder(tmp_path / "worker-disk" / "run-1")  # the worker's scratch folder of the run's name
    for step in phase.steps():
        phase.step_spec(step).run(elsewhere, Reporter())
    assert sorted(p.name for p in (tmp_path / "shared" / "runs" / "run-1" / "data_sync").iterdir()) == [
        f"{kind}-{shard}.{ext}" for shard in "abc" for kind, ext in (("created", "jsonl"),)
    ] + [f"sync-{shard}.json" for shard in "abc"] + [f"target-{shard}.json" for shard in "abc"]
    assert len(list((tmp_path / "shared" / "transfers").glob("*.sqlite"))) == 3
    assert not (tmp_path / ".ferry" / "state" / "transfers").exists()
    # The driver: the gate reads the shards' state fetched from state_url (its transfer-state check finds every
    # object recorded), the rollback the journals.
    results = phase.gate(audit)
    assert {r.status.value for r in results} == {"PASS"}, [r.to_dict() for r in results]
    assert (audit.root / "data_sync" / "created-a.jsonl").exists()
    undo = phase.undo(audit, dry_run=False, force=False, stopping=None)
    assert undo.failed == 0 and f"deleted {len(files)} object(s)" in undo.text, undo.text
    assert not [p for p in (tmp_path / "dst").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("where", "said"),
    [("{root}/a-file", "not a directory"), ("{root}/dst/state", "lies inside target.storage"),
     ("{root}/.ferry", "and the plan's state directory")],
)  # fmt: skip
def test_a_state_url_that_cannot_serve_fails_preflight(tmp_path: Path, where: str, said: str) -> None:
    """Absolute paths where the plan's are relative: the overlap is found with both resolved."""
    tree(tmp_path)
    (tmp_path / "a-file").write_text("not a folder")
    plan = tmp_path / "migration.yaml"
    url = where.format(root=tmp_path)
    plan.write_text(PLAN.format(name="state", source="./src", runner=f"threads\n    state_url: '{url}'"))
    (check,) = open_phase(load_plan(plan), "data_sync").preflight()
    assert (check.name, check.status.value) == ("preflight.state_storage_access", "FAIL"), check.to_dict()
    assert said in check.evidence[0], check.evidence


def test_an_existing_scheduler_needs_the_prefect_api(tmp_path: Path) -> None:
    tree(tmp_path)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="remote", source="./src", runner="{dask: {address: 'tls://scheduler:8786'}}"))
    code, out, err = run_ferry("plan", "validate", str(plan))
    assert code == 2 and "phases.data_sync.runner.dask.address: PREFECT_API_URL is not set" in err, out + err
    code, out, err = run_ferry("plan", "validate", str(plan), api="http://127.0.0.1:9/api")
    assert code == 0, out + err


PART = 256 * 1024  # slow_copy_plan's part size


def slow_big_shard(root: Path, bucket: str, moto) -> tuple[Path, bytes]:
    """slow_copy_plan's 24 MiB object at 4 MB/s in 256 KiB parts, its one shard on a local Dask cluster of two
    workers; (the plan, the object's bytes)."""
    plan = slow_copy_plan(root, bucket, moto, sync=", runner: {dask: {workers: 2}}")
    return plan, (root / "src" / "ckpt.bin").read_bytes()


def parts_once(state: Path, parts: int, proc) -> None:
    deadline = time.monotonic() + 180
    while parts_recorded(state) < parts and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert parts_recorded(state) >= parts, "the shard never reached its parts"


def resumed(root: Path, moto, bucket: str, data: bytes, before: int) -> dict:
    """The last run's one shard summary, once it is shown to have resumed the upload (the parts recorded before
    were not sent again) and the object is whole."""
    (*_, run) = sorted((root / ".ferry" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    (shard,) = json.loads((run / "data_sync" / "summary.json").read_text())
    details = shard["details"]
    multipart = details["multipart"]
    assert multipart["resumed_uploads"] == 1 and multipart["parts_resumed"] >= before, multipart
    # The parts resumed were not sent again; those the state recorded were not read again either (those the store's
    # list of parts added were, to prove them). The 5-byte object beside it may have been copied by either run.
    recorded = multipart["parts_resumed"] - multipart["parts_reconciled"]
    read = details["bytes"]["read_through_ferry"] - len(data) + recorded * PART
    written = details["bytes"]["written_through_ferry"] - len(data) + multipart["parts_resumed"] * PART
    assert read in (0, len(b"small")) and written in (0, len(b"small")), details["bytes"]
    assert {r["status"] for r in json.loads((run / "data_sync" / "gate.json").read_text())} == {"PASS"}
    assert moto.client("s3").get_object(Bucket=bucket, Key="p/ckpt.bin")["Body"].read() == data
    return details


def test_a_worker_killed_mid_shard_its_shard_resumes_on_another(prefect_api, moto_env, tmp_path) -> None:
    import psutil

    plan, data = slow_big_shard(tmp_path, "dask-killed", moto_env)
    state = tmp_path / ".ferry" / "state"
    ferry = Watched("run", str(plan), api=prefect_api)
    parts_once(state, 10, ferry.proc)
    (state_file,) = state.glob("transfers/*.sqlite")
    (worker,) = [
        child
        for child in psutil.Process(ferry.proc.pid).children(recursive=True)
        if any(f.path == str(state_file) for f in child.open_files())
    ]
    worker.kill()  # SIGKILL: nothing of the worker winds down
    worker.wait(30)
    before = parts_recorded(state)
    code, out, err = ferry.finish()
    assert code == 0, (out + err)[-3000:]
    # Dask ran the shard again on a worker that lives; it resumed the upload from the shard's transfer state.
    details = resumed(tmp_path, moto_env, "dask-killed", data, before)
    assert not details["ran_on"].endswith(f":{worker.pid}")


def checkpointed_parts(moto, bucket: str, prefix: str, into: Path) -> int:
    """Parts the one shard's transfer state copied to state_url (bucket/prefix) records (0 before the first copy)."""
    client = moto.client("s3")
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/transfers/").get("Contents", [])
    if not listed:
        return 0
    (state,) = listed
    copy = into / "checkpoint.sqlite"
    copy.write_bytes(client.get_object(Bucket=bucket, Key=state["Key"])["Body"].read())
    return _parts_in(copy)


def _parts_in(path: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT count(*) FROM parts").fetchone()[0]


def test_a_killed_worker_s_shard_resumes_from_state_url_on_another(prefect_api, moto_env, tmp_path) -> None:
    """Workers keep a shard's transfer state on their own disk and copy it to state_url (a moto bucket here); the
    worker that takes over a killed one's shard restores it from there, keeps the parts the checkpoint recorded and
    those the store's list of parts proves, and the gate (on the driver, from the fetched copy) passes; the
    rollback finds the created keys' journal there too."""
    import psutil

    moto_env.client("s3").create_bucket(Bucket="ferry-state")
    plan = slow_copy_plan(
        tmp_path,
        "dask-state-url",
        moto_env,
        sync=", runner: {dask: {workers: 2}}, state_url: 'moto://ferry-state/runs-of-x', checkpoint_every_s: 0.5",
    )
    data = (tmp_path / "src" / "ckpt.bin").read_bytes()
    ferry = Watched("run", str(plan), api=prefect_api)
    deadline = time.monotonic() + 180
    while checkpointed_parts(moto_env, "ferry-state", "runs-of-x", tmp_path) < 10 and time.monotonic() < deadline:
        assert ferry.proc.poll() is None, "the run ended before its shard was checkpointed"
        time.sleep(0.2)
    # The worker holding the shard's state in its own scratch folder, not in the plan's state directory.
    (worker,) = [
        child
        for child in psutil.Process(ferry.proc.pid).children(recursive=True)
        if any("/ferry-shard-" in f.path and f.path.endswith(".sqlite") for f in child.open_files())
    ]
    assert not list((tmp_path / ".ferry" / "state").glob("transfers/*.sqlite"))
    worker.kill()
    worker.wait(30)
    before = checkpointed_parts(moto_env, "ferry-state", "runs-of-x", tmp_path)
    code, out, err = ferry.finish()
    assert code == 0, (out + err)[-3000:]
    details = resumed(tmp_path, moto_env, "dask-state-url", data, before)
    assert not details["ran_on"].endswith(f":{worker.pid}")
    (run,) = (tmp_path / ".ferry" / "runs").iterdir()
    stored = {o["Key"] for o in moto_env.client("s3").list_objects_v2(Bucket="ferry-state")["Contents"]}
    assert f"runs-of-x/runs/{run.name}/data_sync/created-all.jsonl" in stored, stored
    code, out, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--yes", api=prefect_api)
    assert code == 0, out + err
    left = moto_env.client("s3").list_objects_v2(Bucket="dask-state-url").get("Contents", [])
    assert left == [], left


def test_ctrl_c_stops_the_workers_mid_shard_and_a_rerun_resumes(prefect_api, moto_env, tmp_path) -> None:
    import psutil

    plan, data = slow_big_shard(tmp_path, "dask-interrupted", moto_env)
    state = tmp_path / ".ferry" / "state"
    ferry = Watched("run", str(plan), api=prefect_api)
    parts_once(state, 4, ferry.proc)
    children = psutil.Process(ferry.proc.pid).children(recursive=True)
    code, _, err = ferry.finish(signal.SIGINT)
    assert code == 130, err[-3000:]
    assert "ferry: interrupted by SIGINT; what was verified is kept" in err and "Traceback" not in err, err[-3000:]
    # The cluster goes with the run: its worker processes end (a worker notices its nanny is gone within seconds).
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive
    before = parts_recorded(state)
    assert 4 <= before < len(data) // PART
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0, (out + err)[-3000:]
    resumed(tmp_path, moto_env, "dask-interrupted", data, before)


def test_shards_auto_splits_the_source_into_key_ranges_each_on_a_worker(prefect_api, moto_env, tmp_path) -> None:
    bucket = "dask-ranges"
    client = moto_env.client("s3")
    client.create_bucket(Bucket=bucket)
    objects = {f"data/{i:04d}.bin": os.urandom(64) for i in range(300)}
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        f"name: {bucket}\nsource: {{storage: 'moto://{bucket}/data'}}\ntarget: {{storage: ./dst}}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{moto_env.endpoint}'}}}}\n"
        "phases:\n  data_sync: {threads: 4, shards: auto, runner: {dask: {workers: 2}}}\n"
        "retries: {attempts: 1, delay_s: 0}\n"
    )

    def run() -> tuple[list[dict], list[str]]:
        code, out, err = run_ferry("run", str(plan), api=prefect_api)
        assert code == 0, (out + err)[-3000:]
        audit = Path(out.split("audit folder: ")[1].split()[0])
        gate = json.loads((audit / "data_sync" / "gate.json").read_text())
        assert {r["status"] for r in gate} == {"PASS"}, gate
        return json.loads((audit / "data_sync" / "summary.json").read_text()), [r["name"] for r in gate]

    summaries, names = run()
    # 3 ranges per worker asked for, and up to twice as many made: each listed and copied on a worker.
    assert 6 <= len(summaries) < 12 and names[0] == f"data.target_matches_source[range-{1:0{len(str(len(names)))}d}]"
    copied = [s["details"]["objects"]["copied"] for s in summaries]
    assert sum(copied) == len(objects) and min(copied) > 0, copied
    assert {k.removeprefix("data/"): v for k, v in objects.items()} == {
        p.relative_to(tmp_path / "dst").as_posix(): p.read_bytes() for p in (tmp_path / "dst").rglob("*.bin")
    }
    # The next run finds the same ranges (kept beside the transfer state), resumes each one's state: nothing to copy.
    again, same_names = run()
    assert same_names == names and [s["details"]["objects"]["copied"] for s in again] == [0] * len(again)
    assert len(list((tmp_path / ".ferry" / "state" / "transfers").glob("ranges-*.json"))) == 1


def test_ferry_s_dask_workers_are_not_profiled(monkeypatch) -> None:
    """Dask's sampling profiler deadlocks a worker with the garbage collector on CPython 3.11 before 3.11.9
    (python/cpython#106883): bench.scale hung a worker running the engine's 128 threads with it on. The driver's Dask
    config, which a local cluster's nannies hand their workers, turns it off."""
    # distributed's defaults loaded first: leaving the block below restores the config as it found it, and would drop
    # every `distributed.*` default an import inside the block had added, for every later test in this process (a
    # LocalCluster then fails on `distributed.comm`, as CI found).
    import dask
    import distributed  # noqa: F401

    from ferry.phases.base import Placement
    from flows.cluster import task_runner

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    with dask.config.set({"distributed.worker.profile.enabled": True}):
        task_runner(Placement(dask_address="tls://scheduler:8786"))
        assert dask.config.get("distributed.worker.profile.enabled") is False
    assert dask.config.get("distributed.comm.require-encryption", "gone") != "gone"


DASK_ERRORS = """
import logging, os
os.environ["PREFECT_API_URL"] = "http://127.0.0.1:9/api"
from distributed import Client, LocalCluster
from ferry.phases.base import Placement
from flows.cluster import task_runner

def heartbeat_lost():
    try:
        raise OSError("Stream is closed")
    except OSError:
        logging.getLogger("distributed.worker").exception("Failed to communicate with scheduler during heartbeat.")
    return os.getpid()

task_runner(Placement(dask_workers=1))  # the driver's Dask config and logging, as a run sets them
with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
    with Client(cluster) as client:
        (worker,) = client.run(heartbeat_lost).values()
assert worker != os.getpid()
heartbeat_lost()
"""


def test_dask_s_own_errors_reach_the_terminal_as_one_line_in_the_driver_and_the_workers() -> None:
    """As a cluster closes on Ctrl-C, a worker's heartbeat can find the scheduler gone, and distributed logs that
    with its traceback on the terminal (CI saw it once, in the Ctrl-C test above)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", DASK_ERRORS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    line = "Failed to communicate with scheduler during heartbeat. (OSError: Stream is closed)"
    assert done.stderr.count(line) == 2, done.stderr[-3000:]  # the worker's and the driver's
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
