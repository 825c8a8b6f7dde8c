"""Nothing verified is ever deleted by an interrupt or a retry: `ferry run` through the installed command,
against a real moto server and a real Prefect server, stopped at each window by SIGINT.

Each window is found by the process's own events: a log line, or a failpoint (FERRY_FAILPOINTS) where it
waits for the signal. Each test checks the target bucket, not only the exit code and the message.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.layout import StateLayout
from ferry.runlog import RunLog
from tests.faults.proxy import FaultProxy
from tests.support import Watched, run_ferry

SMALL = 28  # small objects per shard: 56 in all, as the operator's report had


def data_plan(root: Path, bucket: str, moto, *, slow_b: bool = False, extra: str = "", endpoint: str = "") -> Path:
    """A plan syncing ./src (shards a/ and b/, SMALL objects each) to moto bucket `bucket`; slow_b adds a
    24 MiB object to b/ sent at 4 MB/s, so that b/ is still copying for seconds after a/ is done."""
    for shard in ("a", "b"):
        for i in range(SMALL):
            path = root / "src" / shard / f"{i:03d}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"{shard}{i}".encode() * 50)
    if slow_b:
        (root / "src" / "b" / "zz-large.bin").write_bytes(os.urandom(24 << 20))
    moto.client("s3").create_bucket(Bucket=bucket)
    limit = ", bwlimit: 4M" if slow_b else ""
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: {bucket}\nsource: {{storage: ./src}}\ntarget: {{storage: 'moto://{bucket}/p'}}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{endpoint or moto.endpoint}', min_part_size: 262144}}}}\n"
        "phases:\n  data_sync: {threads: 4, part_size: 256K, multipart_threshold: 1M, shards: [a/, b/]"
        f"{limit}}}\n" + (extra or "retries: {attempts: 0, delay_s: 0}\n")
    )
    return plan


def keys(moto, bucket: str) -> list[str]:
    pages = moto.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def source_keys(root: Path) -> list[str]:
    return sorted(f"p/{p.relative_to(root / 'src').as_posix()}" for p in (root / "src").rglob("*") if p.is_file())


def phase_record(root: Path, plan: str, phase: str = "data_sync"):
    runlog = RunLog(root / ".ferry" / "state")
    try:
        return runlog.phase(plan, phase)
    finally:
        runlog.close()


def interrupted_at(
    plan: Path, api: str, failpoint: str, sig: int = signal.SIGINT, command: tuple[str, ...] = ("run",)
) -> tuple[int, str]:
    """`ferry COMMAND plan` stopped by sig once it reports reaching failpoint; (exit code, stderr)."""
    run = Watched(command[0], str(plan), *command[1:], api=api, env={"FERRY_FAILPOINTS": failpoint})
    reached = run.wait_for(f"ferry failpoint: {failpoint}")
    code, _, err = run.finish(sig if reached else None)
    assert reached, err[-3000:]
    return code, err


def rerun_copies_nothing(plan: Path, api: str) -> None:
    code, out, err = run_ferry("run", str(plan), api=api)
    assert code == 0 and "data_sync PASS" in out, err[-3000:]
    audit = Path(out.split("audit folder: ")[1].split()[0])
    summaries = json.loads((audit / "data_sync" / "summary.json").read_text())
    assert [s["details"]["objects"]["copied"] for s in summaries] == [0, 0]


def test_ctrl_c_in_the_gate_keeps_every_object(prefect_api, moto_env, tmp_path) -> None:
    plan = data_plan(tmp_path, "gate-interrupted", moto_env)
    code, err = interrupted_at(plan, prefect_api, "gate")
    assert code == 130, err[-3000:]
    assert "ferry: interrupted by SIGINT; what was verified is kept: run the same command again to resume" in err
    assert "Traceback" not in err and "rolling back" not in err, err[-3000:]
    assert keys(moto_env, "gate-interrupted") == source_keys(tmp_path)  # all 56 kept
    assert phase_record(tmp_path, "gate-interrupted").status == "interrupted"
    rerun_copies_nothing(plan, prefect_api)
    # The rerun copied nothing, yet it commits: it took over the interrupted run, whose 56 objects its rollback
    # would delete.
    assert phase_record(tmp_path, "gate-interrupted").status == "committed"
    code, out, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--dry-run")
    assert code == 0 and f"delete {2 * SMALL} object(s)" in out, err


def test_sigterm_in_the_gate_keeps_every_object(prefect_api, moto_env, tmp_path) -> None:
    plan = data_plan(tmp_path, "gate-terminated", moto_env)
    code, err = interrupted_at(plan, prefect_api, "gate", signal.SIGTERM)
    assert code == 143 and "Traceback" not in err, err[-3000:]
    assert keys(moto_env, "gate-terminated") == source_keys(tmp_path)


def test_ctrl_c_in_the_commit_lets_the_commit_record_be_written_whole(prefect_api, moto_env, tmp_path) -> None:
    plan = data_plan(tmp_path, "commit-interrupted", moto_env)
    code, err = interrupted_at(plan, prefect_api, "commit")
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert keys(moto_env, "commit-interrupted") == source_keys(tmp_path)
    # The signal was held until the record was written, then delivered: committed, and the run interrupted.
    assert phase_record(tmp_path, "commit-interrupted").status == "committed"
    runlog = RunLog(tmp_path / ".ferry" / "state")
    try:
        assert runlog.runs("commit-interrupted")[0].status == "interrupted"
    finally:
        runlog.close()
    rerun_copies_nothing(plan, prefect_api)


def test_ctrl_c_between_two_shards_keeps_the_finished_one(prefect_api, moto_env, tmp_path) -> None:
    """Shard a/ has finished (its task completed), b/ is still copying: the interrupt must not undo a/."""
    plan = data_plan(tmp_path, "between-shards", moto_env, slow_b=True)
    run = Watched("run", str(plan), api=prefect_api)
    finished_a = run.wait_for("shard=a/")
    code, _, err = run.finish(signal.SIGINT)
    assert finished_a and code == 130 and "Traceback" not in err, err[-3000:]
    held = keys(moto_env, "between-shards")
    assert [k for k in held if k.startswith("p/a/")] == [k for k in source_keys(tmp_path) if k.startswith("p/a/")]
    assert "p/b/zz-large.bin" not in held  # b/ was stopped mid-copy, not finished
    rerun = run_ferry("run", str(plan), api=prefect_api)
    assert rerun[0] == 0, rerun[2][-3000:]
    assert keys(moto_env, "between-shards") == source_keys(tmp_path)


def test_ctrl_c_in_an_approval_wait_keeps_what_an_earlier_run_committed(prefect_api, moto_env, tmp_path) -> None:
    plan = data_plan(tmp_path, "approval-wait", moto_env)
    assert run_ferry("run", str(plan), api=prefect_api)[0] == 0
    committed = keys(moto_env, "approval-wait")
    (tmp_path / "src" / "a" / "new.bin").write_bytes(b"new")
    plan.write_text(plan.read_text() + "approve_before: [data_sync]\n")
    run = Watched("run", str(plan), api=prefect_api)
    waiting = run.wait_for("waits for approval")
    code, _, err = run.finish(signal.SIGINT)
    assert waiting and code == 130 and "Traceback" not in err, err[-3000:]
    assert keys(moto_env, "approval-wait") == committed and len(committed) == 2 * SMALL
    assert phase_record(tmp_path, "approval-wait").status == "interrupted"


def rollback_stopped_by_ctrl_c(root: Path, bucket: str, moto, api: str) -> Path:
    """`ferry run` of a plan whose gate fails (an object in the target the source lacks, allow_extra false),
    interrupted in its rollback after the first deletion; the plan."""
    plan = data_plan(
        root, bucket, moto, extra="gates:\n  data_sync: {allow_extra: false}\nretries: {attempts: 0, delay_s: 0}\n"
    )
    moto.client("s3").put_object(Bucket=bucket, Key="p/a/stray.bin", Body=b"someone else's")
    code, err = interrupted_at(plan, api, "rollback-item")
    assert code == 130 and "Traceback" not in err, err[-3000:]
    # Announced before anything was deleted, with what it deletes.
    assert "rolling back data_sync of run " in err and "  delete a/000.bin" in err, err[-3000:]
    assert "the rollback of data_sync stopped between two items; `ferry rollback --phase data_sync`" in err
    assert phase_record(root, bucket).status == "rollback_interrupted"
    return plan


def test_ctrl_c_in_a_rollback_stops_between_items_and_ferry_rollback_finishes_it(
    prefect_api, moto_env, tmp_path
) -> None:
    bucket = "rollback-interrupted"
    plan = rollback_stopped_by_ctrl_c(tmp_path, bucket, moto_env, prefect_api)
    record = phase_record(tmp_path, bucket)
    left = keys(moto_env, bucket)
    # It stopped after the first item of the first shard: one object deleted, the rest still there.
    assert len([k for k in source_keys(tmp_path) if k not in left]) == 1 and "p/a/stray.bin" in left
    code, out, _ = run_ferry("status", str(plan), api=prefect_api)
    assert "rollback interrupted" in out, out

    # `ferry rollback` itself, interrupted between two items too: it says how to finish, and the record stays.
    by_hand = ("rollback", "--phase", "data_sync", "--yes")
    code, err = interrupted_at(plan, prefect_api, "rollback-item", command=by_hand)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert "ferry: interrupted by SIGINT; the rollback of data_sync stopped between two items" in err
    assert phase_record(tmp_path, bucket).status == "rollback_interrupted"
    assert len(keys(moto_env, bucket)) == len(left) - 1

    # Someone overwrites one object ferry created: that one is no longer ferry's to delete.
    moto_env.client("s3").put_object(Bucket=bucket, Key="p/b/005.bin", Body=b"changed by someone")
    code, out, err = run_ferry("rollback", str(plan), "--phase", "data_sync", "--yes")
    assert code == 0, err
    # Announced as it will be done: what was deleted before the interrupt is not listed again.
    assert f"rollback of data_sync, run {record.run_id}: delete 53 object(s)" in out, out
    listing = Path(out.split(" in all: ")[1].split(")")[0]).read_text()
    assert "keep b/005.bin: changed since ferry wrote it" in listing.splitlines(), listing
    assert "kept 1 that someone else changed or ferry never verified" in out, out
    assert keys(moto_env, bucket) == ["p/a/stray.bin", "p/b/005.bin"]
    assert phase_record(tmp_path, bucket).status == "rolled_back"
    # Done once: a second rollback has nothing to undo.
    assert run_ferry("rollback", str(plan), "--phase", "data_sync", "--yes")[0] == 2


def test_the_same_run_again_finishes_an_interrupted_rollback_then_runs_the_phase(
    prefect_api, moto_env, tmp_path
) -> None:
    bucket = "rollback-rerun"
    plan = rollback_stopped_by_ctrl_c(tmp_path, bucket, moto_env, prefect_api)
    run_id = phase_record(tmp_path, bucket).run_id
    moto_env.client("s3").delete_object(Bucket=bucket, Key="p/a/stray.bin")  # the cause, fixed
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0 and "data_sync PASS" in out, err[-3000:]
    assert f"rolling back data_sync of run {run_id} (finishing the rollback that run {run_id} decided)" in err
    assert keys(moto_env, bucket) == source_keys(tmp_path)


def test_a_resumed_runs_rollback_covers_what_the_interrupted_run_created(prefect_api, moto_env, tmp_path) -> None:
    bucket = "resumed-rollback"
    plan = data_plan(
        tmp_path,
        bucket,
        moto_env,
        slow_b=True,
        extra="gates:\n  data_sync: {allow_extra: false}\nretries: {attempts: 0, delay_s: 0}\n",
    )
    run = Watched("run", str(plan), api=prefect_api)
    assert run.wait_for("shard=a/")
    assert run.finish(signal.SIGINT)[0] == 130
    first = phase_record(tmp_path, bucket).run_id
    assert any(k.startswith("p/a/") for k in keys(moto_env, bucket))
    moto_env.client("s3").put_object(Bucket=bucket, Key="p/a/stray.bin", Body=b"someone else's")
    # The resumed run copies only b/ (a/ is there), and its gate fails: its rollback undoes a/ as well.
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 1 and "gate failed" in err, err[-3000:]
    assert f"; run {first}: deleted " in err, err[-3000:]
    assert keys(moto_env, bucket) == ["p/a/stray.bin"]


def test_a_shard_retried_by_prefect_leaves_every_shards_objects_in_place(prefect_api, moto_env, tmp_path) -> None:
    """Shard b/'s writes are refused (503) until its first attempt has given up after the engine's own retries;
    Prefect retries the task, it succeeds, and shard a/, finished long before, keeps every object."""
    with FaultProxy(moto_env.port, unavailable="/retried/p/b/") as proxy:
        plan = data_plan(
            tmp_path, "retried", moto_env, endpoint=proxy.endpoint, extra="retries: {attempts: 2, delay_s: 1}\n"
        )
        plan.write_text(plan.read_text().replace("threads: 4,", "threads: 4, retries: 2,"))
        run = Watched("run", str(plan), api=prefect_api)
        gave_up = run.wait_for("Retry 1/2 will start")
        proxy.unavailable = None
        code, out, err = run.finish()
    assert gave_up and code == 0 and "data_sync PASS" in out, err[-3000:]
    assert "rolled back" not in err and "rolling back" not in err
    assert keys(moto_env, "retried") == source_keys(tmp_path)
    assert proxy.refused > 0


# -- iam, images and manifests: an interrupt in the step (after it changed the target) or in the gate ----------


def iam_plan(root: Path, name: str, ports: dict) -> tuple[Path, callable]:
    from tests.flows.test_iam_phase import write_two_phase_plan

    plan = write_two_phase_plan(root, name)
    published = StateLayout(root / ".ferry").bindings(name)

    def kept() -> None:
        assert "ferry-compute-admin" in published.read_text()
        assert not list((root / ".ferry" / "runs").glob("*/iam/rollback.json"))

    return plan, kept


def images_plan(root: Path, name: str, ports: dict) -> tuple[Path, callable]:
    from ferry.images.oci import Registry
    from tests.flows.test_images_pipeline import PLAN
    from tests.support import buildah, busybox_image

    busybox_image(root / "buildah", "tool", "amd64", ["CUDA_VERSION=12.2.0"])
    buildah(root / "buildah", "push", "--tls-verify=false", "tool", f"docker://127.0.0.1:{ports['src']}/ml/tool:1")
    (root / "src").mkdir()
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(name=name, copy=json.dumps(["tool:1"]), **ports))

    def kept() -> None:
        assert Registry(f"127.0.0.1:{ports['tgt']}", insecure=True).digest("ai/tool", "1") is not None

    return plan, kept


def manifests_plan(root: Path, name: str, ports: dict) -> tuple[Path, callable]:
    from tests.flows.test_manifests_phase import _plan

    plane, ns = ports["cluster"]()
    plan = _plan(root, name, plane, ns)

    def kept() -> None:
        assert plane.get("v1", "ConfigMap", "trainer-config", ns)["data"] == {"EPOCHS": "10"}
        assert plane.get("apps/v1", "Deployment", "trainer", ns) is not None

    return plan, kept


def golive_plan(root: Path, name: str, ports: dict) -> tuple[Path, callable]:
    from tests.support import write_plan

    plan = write_plan(root, name)
    plan.write_text(
        plan.read_text().replace(
            "gates:\n",
            "  golive: {checkpoint: {size: 2M, shards: 4, threads: 2, prefix: golive/ckpt/}, gpu_probe: false}\n"
            "gates:\n  golive: {checkpoint_write_gb_per_s: 1e-9, checkpoint_read_gb_per_s: 1e-9}\n",
        )
    )

    def kept() -> None:  # go-live keeps nothing: an interrupted measurement still cleans up after itself
        assert not [p for p in (root / "dst" / "golive").rglob("*") if p.is_file()]

    return plan, kept


PLANS = {"iam": iam_plan, "images": images_plan, "manifests": manifests_plan, "golive": golive_plan}
# Each phase's window inside its step: the target changed, the step not done.
INSIDE = {"iam": "iam:published", "images": "images:pushed", "manifests": "manifests:mid-wave",
          "golive": "golive:checkpoint"}  # fmt: skip


@pytest.fixture
def ends(request: pytest.FixtureRequest) -> Iterator[dict]:
    """Two real registries, and on first use the control plane with a namespace holding an older trainer-config,
    for whichever phase the test runs."""
    from tests.support import start_registry

    source, target = start_registry(), start_registry()
    made: list[tuple] = []

    def cluster() -> tuple:
        plane = request.getfixturevalue("control_plane")
        ns = plane.namespace("interrupt")
        plane.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trainer-config", "namespace": ns},
                    "data": {"EPOCHS": "5"}})  # fmt: skip
        made.append((plane, ns))
        return plane, ns

    try:
        yield {"src": source.port, "tgt": target.port, "cluster": cluster}
    finally:
        source.stop()
        target.stop()
        for plane, ns in made:
            plane.delete_namespace(ns)


# Ctrl-C at every window of every phase; SIGTERM at a sample (images and go-live, inside their step).
CASES = [(phase, signal.SIGINT, window) for phase in sorted(PLANS) for window in ("inside", "step", "gate")]
CASES += [("images", signal.SIGTERM, "inside"), ("golive", signal.SIGTERM, "inside")]


@pytest.mark.parametrize(
    ("phase", "sig", "window"), CASES, ids=[f"{p}-{signal.Signals(s).name}-{w}" for p, s, w in CASES]
)
def test_an_interrupt_keeps_what_the_phase_changed(prefect_api, ends, tmp_path, phase, sig, window) -> None:
    point = INSIDE[phase] if window == "inside" else window
    name = f"{phase}-{window}-{int(sig)}"
    plan, kept = PLANS[phase](tmp_path, name, ends)
    run = Watched("run", str(plan), "--only", phase, api=prefect_api, env={"FERRY_FAILPOINTS": point})
    reached = run.wait_for(f"ferry failpoint: {point}")
    code, _, err = run.finish(sig if reached else None)
    assert reached and code == 128 + sig, err[-3000:]
    assert "Traceback" not in err and "rolling back" not in err and "rolled back the" not in err, err[-3000:]
    assert "what was verified is kept: run the same command again to resume" in err
    kept()
    assert phase_record(tmp_path, name, phase).status == "interrupted"
    code, out, err = run_ferry("run", str(plan), "--only", phase, api=prefect_api)
    assert code == 0 and f"{phase} " in out, err[-3000:]
    kept()


READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}  # the read system call's number


def test_ctrl_c_at_the_rollback_prompt_on_a_terminal_changes_nothing(prefect_api, moto_env, tmp_path) -> None:
    """`ferry rollback` on a terminal (a pty) lists the first 20 items, asks, and Ctrl-C there is one line."""
    import pty

    from tests.support import FERRY

    plan = data_plan(tmp_path, "prompt", moto_env)
    assert run_ferry("run", str(plan), api=prefect_api)[0] == 0
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: ferry with the pty as its controlling terminal, as a shell starts it
        # With SIGINT at its default, as a shell starts a job: an ignored one (inherited from a test worker) would
        # stay ignored across exec, and the Ctrl-C below would never arrive.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(FERRY, [FERRY, "rollback", str(plan), "--phase", "data_sync"], {**env, "COLUMNS": "200"})
    screen = b""
    while b"roll back data_sync of run" not in screen:
        chunk = os.read(fd, 4096)
        assert chunk, screen.decode(errors="replace")
        screen += chunk
    # Only once ferry is blocked reading its terminal: a SIGINT that lands between the prompt's write and the
    # read is flagged for Python and the read then waits for a line (no human types that fast; a test on a busy
    # machine does).
    reading = f"{READ_SYSCALL[os.uname().machine]} 0x0 "  # read(0, ...): /proc/PID/syscall
    deadline = time.monotonic() + 60
    while not Path(f"/proc/{pid}/syscall").read_text().startswith(reading) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.write(fd, b"\x03")  # Ctrl-C, through the terminal's line discipline: SIGINT to the foreground job
    try:
        # Until the child closes the terminal; a child that never reacts fails here, with what it showed.
        while select.select([fd], [], [], 120)[0] and (chunk := os.read(fd, 4096)):
            screen += chunk
    except OSError:  # EIO once the child has closed the terminal
        pass
    deadline = time.monotonic() + 60
    while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    if ended == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("ferry did not end after Ctrl-C at the prompt: " + screen.decode(errors="replace")[-2000:])
    status = ended[1]
    text = screen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, text
    assert "ferry: interrupted at the prompt; nothing was changed" in text and "Traceback" not in text
    assert text.count("  delete ") == 20 and f"... and {2 * SMALL - 20} more ({2 * SMALL} in all: " in text
    assert keys(moto_env, "prompt") == source_keys(tmp_path)


# A cancel from the Prefect UI at a sample of the windows (data_sync's: tests/cli/test_pipeline_commands.py).
CANCELLED = [("images", "inside"), ("golive", "gate")]


@pytest.mark.parametrize(("phase", "window"), CANCELLED, ids=[f"{p}-{w}" for p, w in CANCELLED])
def test_a_cancel_from_the_ui_keeps_what_the_phase_changed(prefect_api, ends, tmp_path, phase, window) -> None:
    """A served run cancelled through the API, as the UI's Cancel button does, while it waits at the window."""
    from prefect.client.orchestration import get_client

    from tests.cli.test_pipeline_commands import cancelled, wait_for_deployment
    from tests.support import FERRY

    point = INSIDE[phase] if window == "inside" else f"{phase}:{window}"
    name = f"{phase}-cancelled"
    plan, kept = PLANS[phase](tmp_path, name, ends)
    plan.write_text(plan.read_text() + "schedule: '0 0 1 1 *'\n")
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "FERRY_FAILPOINTS": point}  # fmt: skip
    served = tmp_path / "serve.log"
    with served.open("w") as log:
        serve = subprocess.Popen([FERRY, "serve", str(plan)], env=env, stdout=log,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deployment = wait_for_deployment(f"migrate/{name}")
            assert deployment is not None, served.read_text()[-3000:]
            with get_client(sync_client=True) as client:
                flow_run = client.create_flow_run_from_deployment(deployment.id)
            deadline = time.monotonic() + 180
            while f"ferry failpoint: {point}" not in served.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert f"ferry failpoint: {point}" in served.read_text(), served.read_text()[-3000:]
            final = cancelled(flow_run.id)
            assert final is not None and final.state.is_cancelled(), (final, served.read_text()[-3000:])
        finally:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=30)
    text = served.read_text()
    assert "Traceback" not in text.split(f"ferry failpoint: {point}")[1], text[-3000:]
    assert "rolling back" not in text and "rolled back the" not in text, text[-3000:]
    kept()
    assert phase_record(tmp_path, name, phase).status == "interrupted", text[-3000:]
