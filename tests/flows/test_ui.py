"""The Prefect UI as a person sees it: headless Chromium on a run's pages of the real local server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.flows.test_dask_runner import PLAN, tree
from tests.flows.test_pipeline import run_and_subflows
from tests.support import run_ferry, write_plan

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[2] / ".ferry" / "screenshots"

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@needs_chromium
def test_run_page_shows_the_run_and_its_gate_report(prefect_api, tmp_path) -> None:
    from flows.pipeline import migrate, new_run_id
    from tests.browser import Browser

    plan = write_plan(tmp_path, "ui-check")
    run_id = new_run_id(str(plan))
    migrate(plan_path=str(plan), run_id=run_id)
    flow_run, _ = run_and_subflows(run_id)
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser = Browser(CHROMIUM)
    try:
        browser.goto(f"{prefect_api.removesuffix('/api')}/runs/flow-run/{flow_run.id}")
        assert browser.wait_for_text(run_id), "the run's name is not on its page"
        assert browser.wait_for_text("Completed")
        browser.screenshot(SHOTS / "run-page.png")
        assert browser.click_text("Artifacts")
        assert browser.wait_for_text("gate-data-sync"), "the phase's gate report is not on the run's page"
        browser.screenshot(SHOTS / "run-artifacts.png")
    finally:
        browser.close()
    assert (SHOTS / "run-artifacts.png").stat().st_size > 10_000


@needs_chromium
def test_a_sharded_run_on_dask_as_an_ops_person_sees_it(prefect_api, tmp_path) -> None:
    """`ferry run` of three shards on a local Dask cluster of two workers, then its pages: the run Completed and its
    gate; the data_sync subflow's task run per shard, each Completed; the phase's merged progress at 100% beside
    each shard's own gauge. What the page says, read as a person reads it (the text, whitespace aside)."""
    from tests.browser import Browser

    tree(tmp_path)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(name="ui-sharded", source="./src", runner="{dask: {workers: 2}}"))
    code, out, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0, (out + err)[-3000:]
    (run,) = (tmp_path / ".ferry" / "runs").iterdir()
    parent, subflows = run_and_subflows(run.name)
    (data_sync,) = [subflow for subflow in subflows if subflow.name == "data_sync"]
    ui = prefect_api.removesuffix("/api")
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser = Browser(CHROMIUM, window=(1400, 1300))
    try:
        # The run: its name beside its state; the phase's gate among its artifacts, a row per shard.
        browser.goto(f"{ui}/runs/flow-run/{parent.id}")
        assert browser.wait_for_text(f"{run.name} Completed"), "the run's page does not show it Completed"
        assert browser.click_text("Artifacts")
        assert browser.wait_for_text("MARKDOWN gate-data-sync Created"), "no gate report among the run's artifacts"
        assert browser.wait_for_text("TABLE gate-table-data-sync Created"), "no gate table among the run's artifacts"
        assert browser.click_text("gate-table-data-sync")
        assert browser.wait_for_text("data_sync gate results 3 Items check status evidence")
        for shard in "abc":
            assert browser.wait_for_text(f"data.target_matches_source[{shard}/] PASS"), f"gate row of {shard}/"
        # The phase's subflow: a task run per shard, each Completed, then the gate.
        browser.goto(f"{ui}/runs/flow-run/{data_sync.id}")
        assert browser.wait_for_text(f"Parent Run {run.name}"), "the subflow's page does not name its run"
        assert browser.wait_for_text("data_sync Completed"), "the subflow's page does not show it Completed"
        assert browser.click_text("Task Runs")
        assert browser.wait_for_text("4 Task runs (4 Completed)")
        for shard in "abc":
            assert browser.wait_for_text(f"data_sync '{shard}/' Completed"), f"shard {shard}/ is not shown Completed"
        assert browser.wait_for_text("data_sync gate Completed")
        # Its artifacts: the merged gauge on the subflow run, each shard's own gauge on its task run.
        assert browser.click_text("Artifacts")
        assert browser.wait_for_text("Flow run PROGRESS data-sync Created"), "no merged progress on the subflow run"
        assert browser.scroll_to_text("Task runs")  # the grid renders its cards once they are in view
        for shard in "abc":
            assert browser.wait_for_text(f"PROGRESS data-sync-{shard} Created"), f"no gauge of shard {shard}/"
            assert browser.wait_for_text(f"data_sync progress, shard {shard}/")
        browser.screenshot(SHOTS / "sharded-run.png")
        assert browser.click_text("data-sync")
        assert browser.wait_for_text("data_sync progress, all 3 steps Progress: 100%"), "the merged gauge is not full"
    finally:
        browser.close()
