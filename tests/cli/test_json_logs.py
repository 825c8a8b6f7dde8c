"""--log-format json is for machines: stderr carries one JSON object per line and nothing else, the last one the
closing summary (`"event": "summary"`), in `ferry sync` as in `ferry run`."""

from __future__ import annotations

import json

from tests.support import run_ferry, write_plan


def events(stderr: str) -> list[dict]:
    """Every stderr line as JSON (json.loads fails the test on any line that is not one object)."""
    parsed = [json.loads(line) for line in stderr.splitlines()]
    assert parsed and all(isinstance(event, dict) for event in parsed), stderr
    return parsed


def tree(root, count: int):
    for n in range(count):
        (root / f"d{n % 2}" / f"{n}.bin").parent.mkdir(parents=True, exist_ok=True)
        (root / f"d{n % 2}" / f"{n}.bin").write_bytes(b"x" * (n + 1))
    return root


def test_sync_json_is_json_lines_ending_in_the_summary(tmp_path) -> None:
    src = tree(tmp_path / "src", 5)
    args = ["sync", str(src), str(tmp_path / "dst"), "--state-dir", str(tmp_path / "state"), "--log-format", "json"]
    code, out, err = run_ferry(*args, "--dry-run")
    assert code == 0, err
    closing = events(err)[-1]
    assert closing["event"] == "summary" and closing["dry_run"] is True
    assert len(closing["would_change"]) == 5 and closing["would_change"][0]["action"] == "would copy"
    assert "┃" not in out  # no table: the summary is the JSON
    code, out, err = run_ferry(*args)
    assert code == 0, err
    closing = events(err)[-1]
    assert closing["event"] == "summary" and closing["ok"] is True
    assert closing["summary"]["objects"]["copied"] == 5 and closing["gate"]["status"] == "PASS"


def test_a_dry_run_prints_no_none_figures(tmp_path) -> None:
    src = tree(tmp_path / "src", 3)
    code, out, err = run_ferry("sync", str(src), str(tmp_path / "dst"), "--dry-run", "--state-dir", str(tmp_path / "s"))
    assert code == 0, err
    assert "would copy" in out and "None" not in out


def test_run_json_is_json_lines_ending_in_the_summary(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "json-run")
    code, out, err = run_ferry("run", str(plan), "--log-format", "json", api=prefect_api)
    assert code == 0, err
    found = events(err)
    assert any(e.get("logger", "").startswith("prefect") for e in found)  # Prefect's own lines, as JSON too
    assert any(e["event"] == "gate" and e.get("phase") == "data_sync" for e in found)  # ferry's events, unwrapped
    closing = found[-1]
    assert closing["event"] == "summary" and closing["ok"] is True
    assert closing["phases"] == {"preflight": "PASS", "data_sync": "PASS"}
    assert {g["phase"] for g in closing["gates"]} == {"preflight", "data_sync"}


def test_a_failed_run_ends_in_a_json_summary_too(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "json-fails", allow_extra=False)
    (tmp_path / "dst" / "b").mkdir(parents=True)
    (tmp_path / "dst" / "b" / "stray.bin").write_bytes(b"x")
    code, _, err = run_ferry("run", str(plan), "--log-format", "json", api=prefect_api)
    assert code == 1
    closing = events(err)[-1]
    assert closing["event"] == "summary" and closing["ok"] is False and closing["outcome"] == "failed"
    assert "data_sync: gate failed" in closing["error"]
