"""What a cut-over leaves when it does not switch: a rehearsal unfreezes after the verified final delta, a failed
switch phase undoes the freeze in reverse, an interrupt under the freeze says so (and `ferry status` too) and the same
command resumes, `--unfreeze` undoes it."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import botocore.exceptions
import pytest

from ferry.phase_registry import register, unregister
from tests.cutover.test_cutover_cli import contents, cutover_plan, report
from tests.support import Watched, run_cli, run_ferry

STEPS = "    - {run: 'echo 1 >> steps', undo: 'echo undo-1 >> steps'}\n"


def steps(root: Path) -> list[str]:
    path = root / "steps"
    return path.read_text().split() if path.exists() else []


def test_a_rehearsal_measures_the_freeze_and_unfreezes_without_switching(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(
        tmp_path,
        moto_env,
        "co-rehearse",
        "  freeze_budget: 10m\n  delta_interval: 0.1s\n  freeze:\n" + STEPS + "    - bucket_policy: deny_writes\n",
    )
    code, out, err = run_ferry("cutover", str(plan), "--yes", "--rehearse", api=prefect_api)
    assert code == 0, err
    assert "rehearsed, verified; freeze window" in out
    got = report(plan)
    assert got["rehearsal"] is True and got["switched"] is False and got["verified"] is True
    assert got["freeze_window_s"] > 0 and got["timeline_s"]["unfrozen"] is not None
    assert steps(tmp_path) == ["1", "undo-1"]
    s3 = moto_env.client("s3")
    with pytest.raises(botocore.exceptions.ClientError, match="NoSuchBucketPolicy"):
        s3.get_bucket_policy(Bucket="co-rehearse-src")
    assert contents(s3, "co-rehearse-src") == contents(s3, "co-rehearse-dst")
    durations = json.loads((tmp_path / ".ferry/cutover/co-rehearse/durations.json").read_text())
    assert set(durations) == {"freeze steps", "verification"}  # the next prediction counts them


@pytest.fixture
def stamp_phase() -> Iterator[None]:
    register("stamp", "tests.phases.test_contract:StampPhase", after="data_sync")
    yield
    unregister("stamp")


def local_plan(root: Path, name: str, max_files: int) -> Path:
    (root / "src").mkdir()
    for n in range(5):
        (root / "src" / f"f{n}").write_text(str(n) * 100)
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: {name}\nsource: {{storage: ./src}}\ntarget: {{storage: ./dst}}\n"
        "phases:\n  data_sync: {threads: 2}\n  stamp: {words: [one]}\n"
        f"gates:\n  stamp: {{max_files: {max_files}}}\nretries: {{attempts: 0, delay_s: 0}}\n"
        "cutover:\n  freeze_budget: 10m\n  delta_interval: 0.1s\n  switch: [stamp]\n  freeze:\n" + STEPS
    )
    return plan


@pytest.mark.parametrize("gate_passes", [True, False], ids=["switched", "rolled-back"])
def test_a_switch_phase_runs_under_the_freeze_and_its_failure_unfreezes(
    prefect_api, stamp_phase, tmp_path, gate_passes
) -> None:
    plan = local_plan(tmp_path, "co-switch", max_files=10 if gate_passes else 0)
    code, out, err = run_cli("cutover", str(plan), "--yes")
    got = report(plan)
    assert got["verified"] is True
    if gate_passes:
        assert code == 0, err
        assert got["switched"] is True and set(got["switch_s"]) == {"stamp"}
        assert (tmp_path / ".ferry/stamps/one").exists()
        assert steps(tmp_path) == ["1"]  # switched: the freeze stays, the source no longer serves
    else:
        assert code == 1, err
        assert "stamp: gate failed" in err
        assert got["switched"] is False and got["outcome"] == "rolled back" and got["freeze_window_s"] is None
        assert not (tmp_path / ".ferry/stamps/one").exists()  # the phase rolled itself back
        assert steps(tmp_path) == ["1", "undo-1"]
    code, out, _ = run_cli("status", str(plan))
    assert "the source is frozen" not in out


def cancel(plan: Path):
    """Cancel the cut-over of plan that runs now through the server's API, as the UI's Cancel button does."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.states import Cancelling

    (folder,) = plan.parent.glob(".ferry/runs/*/cutover")  # the run's id is its flow run's name
    with get_client(sync_client=True) as client:
        (flow_run,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[folder.parent.name]))
        )
        client.set_flow_run_state(flow_run.id, Cancelling(), force=True)
    return flow_run.id


def final_state(flow_run_id):
    """The flow run's state name now."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id).state.name


# How each interrupt reaches a cut-over stopped under the freeze, and the exit code it ends with.
INTERRUPTS = {"SIGTERM": 143, "SIGINT": 130, "cancel": 143}


@pytest.mark.parametrize(
    ("how", "then"), [("SIGTERM", "resume"), ("SIGTERM", "unfreeze"), ("SIGINT", "resume"), ("cancel", "resume")]
)
def test_an_interrupt_under_the_freeze_says_so_and_the_same_command_resumes(
    prefect_api, moto_env, tmp_path, how, then
) -> None:
    name = f"co-int-{how.lower()}-{then}"
    plan = cutover_plan(tmp_path, moto_env, name, "  freeze_budget: 10m\n  delta_interval: 0.1s\n"
                        "  freeze:\n" + STEPS)  # fmt: skip
    run = Watched("cutover", str(plan), "--yes", api=prefect_api, env={"FERRY_FAILPOINTS": "cutover:frozen"})
    assert run.wait_for("ferry failpoint: cutover:frozen")
    if how == "cancel":
        flow_run_id = cancel(plan)
        code, _, err = run.finish()
        assert "the run was cancelled from the Prefect UI" in err
        assert final_state(flow_run_id) == "Cancelled"
    else:
        code, _, err = run.finish(getattr(signal, how))
    assert code == INTERRUPTS[how], err
    last = err.strip().splitlines()[-1]
    assert "the source is still frozen" in last and f"ferry cutover {plan} --unfreeze" in last
    assert "Traceback" not in err
    code, out, _ = run_ferry("status", str(plan))
    assert "the source is frozen by cutover run" in out and "--unfreeze" in out
    assert steps(tmp_path) == ["1"]
    if then == "resume":
        code, out, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
        assert code == 0, err
        assert "resuming under the freeze" in err
        assert steps(tmp_path) == ["1"]  # not applied twice
        s3 = moto_env.client("s3")
        assert contents(s3, f"{name}-src") == contents(s3, f"{name}-dst")
    else:
        code, out, err = run_ferry("cutover", str(plan), "--unfreeze")
        assert code == 0, err
        assert "unfrozen" in out
        assert steps(tmp_path) == ["1", "undo-1"]
    code, out, _ = run_ferry("status", str(plan))
    assert "the source is frozen" not in out
