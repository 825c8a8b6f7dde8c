"""The Prefect UI as a person sees it: headless Chromium on a run's page of the real local server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.flows.test_pipeline import write_plan
from tests.servers import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FERRY = str(Path(sys.executable).with_name("ferry"))
SHOTS = Path(__file__).resolve().parents[2] / ".ferry" / "screenshots"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_run_page_shows_the_run_and_its_gate_report(prefect_api, tmp_path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    from flows.pipeline import migrate, new_run_id
    from tests.flows.browser import Browser

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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ferry_ui_stops_its_server_on_sigterm_as_on_ctrl_c(sig) -> None:
    port = free_port()
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    ui = subprocess.Popen([FERRY, "ui", "--port", str(port)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert f"127.0.0.1:{port}" in ui.stdout.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as response:
            assert response.status == 200
        ui.send_signal(sig)
        assert ui.wait(timeout=60) == 0
    finally:
        ui.kill()
    with pytest.raises(OSError):  # nothing listens there any more: the server went with ferry ui
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
