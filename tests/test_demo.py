"""`make demo` as a user runs it: the main plan twice (the second resumes), then the images phase between a local
registry pair where buildah, skopeo and docker-registry are installed; where they are not, one line says which are
missing and how to install them, and that the images phase was skipped (never a PASS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from examples import demo
from ferry.results import Status
from ferry.runlog import RunLog
from tests.support import ROOT

HINT = "install with: apt-get install buildah skopeo docker-registry"


@pytest.mark.timeout(1500)
def test_make_demo_runs_every_phase_it_has_the_tools_for(prefect_api) -> None:
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1400
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    runlog = RunLog(demo.WORK / "state")
    for phase in ("iam", "data_sync", "manifests", "golive"):
        assert runlog.phase("demo-migration", phase).status in ("committed", "unchanged"), phase
    if demo.missing_tools():
        skipped = [line for line in done.stdout.splitlines() if line.startswith("images: SKIP")]
        assert len(skipped) == 1 and skipped[0].endswith(HINT), done.stdout[-3000:]
        assert runlog.phase("demo-images", "images") is None
        return
    assert "$ ferry run examples/demo/images.yaml" in done.stdout
    assert runlog.phase("demo-images", "images").status == "committed"
    (run,) = runlog.runs("demo-images")
    gate = json.loads((demo.WORK / "runs" / run.run_id / "images" / "gate.json").read_text())
    assert gate and all(r["status"] == Status.PASS.value for r in gate), gate
    published = json.loads((demo.WORK / "images" / "demo-images" / "digests.json").read_text())["images"]
    assert sorted((r["source"].split("/", 1)[1], r["kind"], r["cuda"]) for r in published) == [
        ("ml/eval:1", "copied", "12.2.2"),
        ("ml/eval:2", "copied", "12.4.1"),
        ("ml/tokenizer:1.0", "copied", None),
        ("ml/trainer:2024.06", "rebuilt", "12.4.1"),
    ]


@pytest.mark.parametrize("on_path", [[], ["skopeo"]])
def test_without_the_tools_the_images_phase_is_one_line_and_a_skip(tmp_path, monkeypatch, capsys, on_path) -> None:
    for tool in on_path:
        (tmp_path / tool).symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert demo.run_images([sys.executable, "-m", "ferry.cli"], dict(os.environ)) == 0
    missing = ", ".join(tool for tool in demo.TOOLS if tool not in on_path)
    assert capsys.readouterr().out.strip() == f"images: SKIP (not run): {missing} not on PATH; {HINT}"
