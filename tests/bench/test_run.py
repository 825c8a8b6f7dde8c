"""The benchmark harness: its table's CPU columns and ceiling choice from known records, and a quick run of an
engine-only scenario and an S3 one (every tool, both ceilings) against a real moto."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run import BY_NAME, COLUMNS, Record, Scenario, render, summarize
from tests.support import ROOT

SMALL = BY_NAME["local-s3-small"]
TOOLS = ("ferry", "rclone", "aws", "ceiling", "ceiling-crt")


def records(scenario: Scenario, walls: dict[str, float], cpu: dict[str, float], server: dict[str, float]):
    return [Record(scenario.name, tool, 0, [], wall_s=walls[tool], rss_mb=50.0, cpu_s=cpu[tool],
                   server_cpu_s=server[tool]) for tool in TOOLS]


def test_targets_use_the_faster_ceiling_and_name_it(tmp_path) -> None:
    # The synthetic dataset needs nothing generated: 2,000 x 64 KiB in the quick shapes.
    scenario = Scenario("local-s3-small", "local-s3", ("synthetic-small",), TOOLS, SMALL.goals)
    walls = {"ferry": 4.0, "rclone": 5.0, "aws": 6.0, "ceiling": 4.4, "ceiling-crt": 3.9}
    cpu = {"ferry": 1.0, "rclone": 2.0, "aws": 3.0, "ceiling": 0.5, "ceiling-crt": 1.25}
    server = {"ferry": 2.0, "rclone": 2.0, "aws": 2.0, "ceiling": 2.0, "ceiling-crt": 2.0}
    rows, lines = summarize(scenario, records(scenario, walls, cpu, server), tmp_path, quick=True)
    ferry = next(r for r in rows if r["tool"] == "ferry")
    assert (ferry["cpu_s"], ferry["cpu_ms_obj"], ferry["server_cpu_ms_obj"]) == (1.0, 0.5, 1.0)
    assert ferry["cpu_s_gib"] == round(1.0 / (2000 * 65536 / 2**30), 3)
    # ceiling-crt is faster, so the CPU ratio is ferry's 1.0 s against its 1.25 s, not the boto3 loop's 0.5 s.
    assert lines[0] == ("local-s3-small: target (primary) ferry client CPU per object <= 1.0x the bare loop's "
                        "(ceiling-crt, ferry/ceiling-crt): got 0.80 -> ok")
    assert lines[1] == "local-s3-small: target ferry wall throughput >= the better peer's: got 1.25 -> ok"
    walls["ceiling"] = 3.0
    _rows, lines = summarize(scenario, records(scenario, walls, cpu, server), tmp_path, quick=True)
    assert "(ceiling, ferry/ceiling): got 2.00 -> MISSED" in lines[0]
    table = render(rows, lines, "header")
    assert all(title in table for _key, title, _fmt in COLUMNS)


def test_a_failed_ceiling_leaves_the_other_and_a_failed_pair_says_na(tmp_path) -> None:
    large = BY_NAME["local-s3-large"]
    scenario = Scenario("local-s3-large", "local-s3", ("synthetic-large",), TOOLS, large.goals)
    walls = {"ferry": 10.0, "rclone": 13.0, "aws": 14.0, "ceiling": 9.0, "ceiling-crt": 1.0}
    cpu = dict.fromkeys(TOOLS, 1.0)
    server = {"ferry": 10.5, "rclone": 9.0, "aws": 9.0, "ceiling": 10.0, "ceiling-crt": 1.0}
    failed = records(scenario, walls, cpu, server)
    failed[-1].error = "exit 1"  # ceiling-crt failed: the boto3 loop is the ceiling
    _rows, lines = summarize(scenario, failed, tmp_path, quick=True)
    assert lines[0].endswith("(ceiling, ferry/ceiling): got 1.05 -> ok")
    assert lines[1].endswith("(ceiling, ceiling/ferry wall): got 0.90 -> ok")
    assert lines[2].endswith("got 1.30 -> ok")
    failed[3].error = "exit 1"
    _rows, lines = summarize(scenario, failed, tmp_path, quick=True)
    assert lines[0].endswith("(the faster ceiling, ferry/the faster ceiling): n/a (a run failed)")


@pytest.mark.skipif(not (shutil.which("rclone") and os.access("/usr/bin/aws", os.X_OK)), reason="needs rclone, aws")
def test_quick_bench_runs_every_row_and_column(tmp_path) -> None:
    argv = [sys.executable, "-m", "bench.run", "--quick", "--runs", "1", "--threads", "16",
            "--scenarios", "engine-small,local-s3-small", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["scenario"], r["tool"]): r for r in results["rows"]}
    assert set(rows) == {("engine-small", "ferry"), *(("local-s3-small", tool) for tool in (*TOOLS, "ferry-md5"))}
    for (scenario, _tool), row in rows.items():
        assert row["cpu_ms_obj"] > 0 and row["cpu_s_gib"] > 0
        assert ("server_cpu_ms_obj" in row) == (scenario == "local-s3-small")
    engine = rows[("engine-small", "ferry")]
    assert engine["objects_s"] > 0 and "server_cpu_s" not in engine
    lines = results["targets"]
    assert any(line.startswith("engine-small: one ferry process, verification on") for line in lines)
    ceiling_lines = [line for line in lines if "bare loop's" in line]
    assert len(ceiling_lines) == 1 and ("(ceiling," in ceiling_lines[0] or "(ceiling-crt," in ceiling_lines[0])
    assert Path(tmp_path / "results.md").read_text().count("| local-s3-small |") == len(TOOLS) + 1  # and ferry-md5
