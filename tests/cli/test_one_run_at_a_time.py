"""One run per plan at a time: `ferry run`, `sync` and `rollback` take the state directory's lock; a second is
refused with one line naming the first, and a lock left by a killed run is taken over, saying so."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest
import structlog

from ferry.lock import LOCK_FILE, Busy, held
from tests.support import run_ferry, write_plan

HOLDER = re.compile(r"is in use by run r-first \(pid \d+ on \S+, since \d{4}-\d\d-\d\dT[\d:]+\+00:00\)")


def test_the_lock_names_its_holder_and_is_free_once_released(tmp_path) -> None:
    with held(tmp_path, "ferry run", "r-first") as record:
        on_disk = json.loads((tmp_path / LOCK_FILE).read_text())
        assert on_disk == record and record["command"] == "ferry run"
        with pytest.raises(Busy) as refused, held(tmp_path, "ferry sync"):
            pytest.fail("two holders at once")
        assert HOLDER.search(str(refused.value)) and "nothing was changed" in str(refused.value)
    assert (tmp_path / LOCK_FILE).read_text() == "", "released cleanly: no record left"
    with structlog.testing.capture_logs() as logged, held(tmp_path, "ferry sync"):
        pass
    assert logged == [], "a clean release leaves nothing to take over"


def test_a_lock_left_by_a_killed_run_is_taken_over_saying_whose(tmp_path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from ferry.lock import held\n"
         f"with held(Path({str(tmp_path)!r}), 'ferry run', 'r-first'):\n"
         "    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Busy), held(tmp_path, "ferry run", "r-second"):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    finally:
        holder.kill()
    with structlog.testing.capture_logs() as logged, held(tmp_path, "ferry run", "r-second") as record:
        assert record["run_id"] == "r-second"
    (warning,) = logged
    assert warning["log_level"] == "warning"
    took_over = r"took over the lock of run r-first \(pid \d+ on \S+, since .*\), which ended without releasing it"
    assert re.match(took_over, warning["event"])


def test_run_sync_and_rollback_are_refused_while_a_run_holds_the_plan(prefect_api, tmp_path) -> None:
    plan = write_plan(tmp_path, "one-at-a-time")
    state = tmp_path / ".ferry" / "state"
    with held(state, "ferry run", "r-first"):
        for args in (
            ("run", str(plan)),
            ("sync", str(tmp_path / "src"), str(tmp_path / "dst"), "--state-dir", str(state)),
            ("rollback", str(plan), "--phase", "data_sync", "--yes"),
        ):
            code, out, err = run_ferry(*args, api=prefect_api)
            assert code == 1, (args, err)
            ours = [line for line in err.splitlines() if line.startswith("ferry: ")]
            assert len(ours) == 1 and ours[0].startswith(f"ferry: failed: {state} is in use by run r-first"), err
            assert HOLDER.search(ours[0]) and "Traceback" not in err
        assert not (tmp_path / "dst").exists(), "nothing was copied"
        # Looking changes nothing: a dry run needs no lock.
        code, out, err = run_ferry("sync", str(tmp_path / "src"), str(tmp_path / "dst"), "--state-dir", str(state),
                                   "--dry-run")  # fmt: skip
        assert code == 0, err
    code, _, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0, err
