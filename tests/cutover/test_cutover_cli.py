"""`ferry cutover` as a user types it, against moto with a real writer process keeping the source live, and a real
Prefect server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import Watched, run_ferry

WRITER = Path(__file__).with_name("writer.py")


def contents(s3, bucket: str) -> dict[str, bytes]:
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]  # fmt: skip
    return {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def cutover_plan(root: Path, moto, name: str, cutover: str, objects: int = 30) -> Path:
    """Buckets `name-src` (objects under live/) and `name-dst`, and a plan whose cut-over is `cutover` (YAML)."""
    s3 = moto.client("s3")
    for bucket in (f"{name}-src", f"{name}-dst"):
        s3.create_bucket(Bucket=bucket)
    for n in range(objects):
        s3.put_object(Bucket=f"{name}-src", Key=f"live/seed-{n:03d}", Body=os.urandom(100 + n))
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: {name}\nsource: {{storage: 'moto://{name}-src'}}\ntarget: {{storage: 'moto://{name}-dst'}}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{moto.endpoint}'}}}}\n"
        "phases:\n  data_sync: {threads: 4}\n"
        "retries: {attempts: 0, delay_s: 0}\n"
        f"cutover:\n{cutover}"
    )
    return plan


def cutover_with_writer(plan: Path, moto, bucket: str, api: str, *args: str) -> tuple[int, str, str]:
    """`ferry cutover PLAN --yes ARGS` while a writer process keeps changing bucket (stopped after, if not by the
    freeze)."""
    writer = start_writer(plan.parent, moto, bucket)
    try:
        return run_ferry("cutover", str(plan), "--yes", *args, api=api)
    finally:
        writer.terminate()
        writer.wait(timeout=30)


def start_writer(root: Path, moto, bucket: str) -> subprocess.Popen:
    pidfile = root / "writer.pid"
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), moto.endpoint, bucket, str(pidfile)], env={**os.environ, **moto.env}
    )
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


# The freeze step that stops the writer: SIGTERM, then wait for its pid file to go (it finishes its request first).
STOP_WRITER = "- run: 'kill -TERM $(cat writer.pid) && while [ -e writer.pid ]; do sleep 0.05; done'\n"


def report(plan: Path) -> dict:
    (path,) = plan.parent.glob(".ferry/runs/*/cutover/report.json")
    return json.loads(path.read_text())


def test_cutover_with_a_live_writer_ends_with_the_target_equal_to_the_source(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(
        tmp_path,
        moto_env,
        "co-live",
        "  freeze_budget: 10m\n  delta_interval: 0.3s\n  max_deltas: 6\n"
        "  max_delete: {count: 1000, percent: 100}\n  freeze:\n    " + STOP_WRITER,
    )
    code, out, err = cutover_with_writer(plan, moto_env, "co-live-src", prefect_api)
    assert code == 0, err
    assert "switched, verified; freeze window" in out
    s3 = moto_env.client("s3")
    source, target = contents(s3, "co-live-src"), contents(s3, "co-live-dst")
    assert source == target
    assert any(key.startswith("live/new-") for key in source)  # the writer wrote during the deltas
    got = report(plan)
    assert got["verified"] is True and got["switched"] is True and got["rehearsal"] is False
    assert len(got["deltas"]) >= 2 and got["deltas"][0]["objects"] > 0  # the writer may delete seeds before it
    assert all({"objects", "bytes", "seconds"} <= set(d) for d in got["deltas"])
    assert got["final_delta"]["final"] is True
    assert got["freeze_window_s"] > 0 and got["predicted_freeze_s"] is not None
    (folder,) = plan.parent.glob(".ferry/runs/*/cutover")
    assert "measured freeze window" in (folder / "report.md").read_text()
    page = (folder / "report.html").read_text()
    assert "measured freeze window" in page and 'alt="churn and delta duration over time"' in page
    assert "data:image/png;base64,iVBOR" in page  # the chart, a PNG
    # Switched: the freeze stays (the source no longer serves) and `ferry status` does not call it stuck.
    code, out, _ = run_ferry("status", str(plan))
    assert "frozen" not in out


def test_a_final_delta_that_never_fits_stops_before_freezing_and_says_why(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(
        tmp_path,
        moto_env,
        "co-never",
        "  freeze_budget: 0.001s\n  delta_interval: 0.2s\n  max_deltas: 2\n  max_delete: {percent: 100}\n"
        "  freeze:\n    "
        "- {run: 'touch froze', undo: 'touch unfroze'}\n",
    )
    code, _, err = cutover_with_writer(plan, moto_env, "co-never-src", prefect_api)
    assert code == 1, err
    assert "after 2 deltas the freeze window is still predicted at" in err, err[-600:]
    assert "over the budget of 0.001 s" in err
    assert not (tmp_path / "froze").exists()
    got = report(plan)
    assert got["freeze_window_s"] is None and got["verified"] is False and len(got["deltas"]) == 2


def test_deletes_over_max_delete_stop_the_delta_and_name_the_keys(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "co-maxdel", "  freeze_budget: 10m\n  max_delete: {count: 2}\n")
    s3 = moto_env.client("s3")
    for n in range(3):
        s3.put_object(Bucket="co-maxdel-dst", Key=f"old/{n}", Body=b"x")
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 1, err
    assert "would delete 3 object(s)" in err and "old/0, old/1, old/2" in err
    assert "nothing was deleted" in err
    assert {f"old/{n}" for n in range(3)} <= set(contents(s3, "co-maxdel-dst"))


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("  freeze_budget: soon\n", "cutover.freeze_budget: 'soon' is not a duration"),
        ("  freeze_budget: 5m\n  freeze: [{pause: {}}]\n", "cutover.freeze.0: a freeze step is"),
        ("  freeze_budget: 5m\n  freeze: [{quiesce: {}}]\n", "cutover.freeze.0.quiesce.cluster: Field required"),
        ("  freeze_budget: 5m\n  switch: [golive]\n", "cutover.switch: 'golive' is not an enabled phase"),
        ("  freeze_budget: 5m\n  max_delete: {count: -1}\n", "cutover.max_delete.count:"),
        ("  freeze_budget: 5m\n  surprise: 1\n", "cutover.surprise: unknown field"),
        (
            "  freeze_budget: 5m\n  freeze: [{quiesce: {cluster: source, workloads: [Deployment/x]}}]\n",
            "quiesce scales the source cluster's workloads: name source.cluster",
        ),
        (
            "  freeze_budget: 5m\n  inventory: {manifest: 's3://reports/inv/manifest.json'}\n",
            "cutover.inventory: an S3 Inventory report needs an S3 source",
        ),
        (
            "  freeze_budget: 5m\n  change_log: {sqs_queue_url: 'https://sqs.example/q'}\n",
            "cutover.change_log: S3 event notifications need an S3 source",
        ),
    ],
)
def test_a_bad_cutover_section_is_one_line_with_its_field(tmp_path, section: str, problem: str) -> None:
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        "name: bad\nsource: {storage: ./src}\ntarget: {storage: ./dst}\nphases: {data_sync: {}}\n"
        f"cutover:\n{section}"
    )
    code, out, err = run_ferry("cutover", str(plan), "--yes")
    assert code == 2
    assert problem in err and err.count("\n") == 1 and "Traceback" not in err


def test_bucket_policy_needs_an_s3_source_and_approval_needs_a_server(tmp_path) -> None:
    plan = tmp_path / "migration.yaml"
    base = "name: local\nsource: {storage: ./src}\ntarget: {storage: ./dst}\nphases: {data_sync: {}}\ncutover:\n"
    plan.write_text(base + "  freeze_budget: 5m\n  freeze: [{bucket_policy: deny_writes}]\n")
    code, _, err = run_ferry("cutover", str(plan), "--yes")
    assert code == 2 and "bucket_policy needs an S3 source" in err
    plan.write_text(base + "  freeze_budget: 5m\n")
    code, _, err = run_ferry("cutover", str(plan))
    assert code == 2 and "needs a Prefect server: set PREFECT_API_URL or --yes" in err


def approval_plan(root: Path, moto, name: str) -> Path:
    """A plan whose cut-over fits at once; its one freeze step touches `froze` (and its undo `unfroze`)."""
    return cutover_plan(
        root, moto, name, "  freeze_budget: 10m\n  delta_interval: 0.2s\n  freeze:\n    "
        "- {run: 'touch froze', undo: 'touch unfroze'}\n"
    )  # fmt: skip


def test_without_yes_the_freeze_waits_for_ferry_approve(prefect_api, moto_env, tmp_path) -> None:
    plan = approval_plan(tmp_path, moto_env, "co-approve")
    run = Watched("cutover", str(plan), api=prefect_api)
    assert run.wait_for("the freeze waits for approval")
    assert not (tmp_path / "froze").exists()
    (line,) = [line for line in run.lines if "To approve: ferry approve" in line]
    run_id = line.split("To approve: ferry approve ")[1].split()[0]
    code, out, err = run_ferry("approve", run_id, api=prefect_api)
    assert code == 0, err
    code, out, err = run.finish()
    assert code == 0, err
    # The approval took longer than delta_interval: one more live delta ran before the freeze, with no second wait.
    assert "the approval waited longer than delta_interval" in err
    assert err.count("the freeze waits for approval") == 1
    assert (tmp_path / "froze").exists() and report(plan)["verified"] is True


def test_an_approval_that_times_out_freezes_nothing_and_a_rerun_works(prefect_api, moto_env, tmp_path) -> None:
    plan = approval_plan(tmp_path, moto_env, "co-timeout")
    code, _, err = run_ferry("cutover", str(plan), "--approval-timeout", "3", api=prefect_api)
    assert code == 1, err
    assert "the freeze waits for approval" in err
    last = err.strip().splitlines()[-1]
    assert "approval of the freeze timed out after 3 s" in last and "Traceback" not in err
    assert not (tmp_path / "froze").exists()
    got = report(plan)
    assert got["outcome"] == "stopped" and got["freeze_window_s"] is None and got["final_delta"] is None
    code, out, _ = run_ferry("status", str(plan))
    assert "frozen" not in out
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 0, err
    assert (tmp_path / "froze").exists()
    s3 = moto_env.client("s3")
    assert contents(s3, "co-timeout-src") == contents(s3, "co-timeout-dst")


def test_a_cancel_of_the_approval_wait_from_the_ui_freezes_nothing(prefect_api, moto_env, tmp_path) -> None:
    from tests.cutover.test_cutover_rollback import cancel, final_state

    plan = approval_plan(tmp_path, moto_env, "co-cancel-wait")
    run = Watched("cutover", str(plan), api=prefect_api)
    assert run.wait_for("the freeze waits for approval")
    flow_run_id = cancel(plan)
    code, _, err = run.finish(timeout=60)  # well within the approval's hour
    assert code == 143, err
    assert final_state(flow_run_id) == "Cancelled"
    assert "run the same command again to resume" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "froze").exists()
    code, out, _ = run_ferry("status", str(plan))
    assert "frozen" not in out
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 0, err
