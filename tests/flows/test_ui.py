"""The Prefect UI as a person sees it: headless Chromium on a run's page of the real local server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import write_plan

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[2] / ".ferry" / "screenshots"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_run_page_shows_the_run_and_its_gate_report(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    from flows.pipeline import migrate, new_run_id
    from tests.browser import Browser

    plan = write_plan(tmp_path, "ui-check")
    run_id = new_run_id(str(plan))
    migrate(plan_path=str(plan), run_id=run_id)
    with get_client(sync_client=True) as client:
        (flow_run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_id])))
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
