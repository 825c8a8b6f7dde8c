"""A `ferry run` that fails, as the terminal shows it: one line per cause, no Python or Prefect stack.

The run's logs in the Prefect API keep the traceback: only the console leaves it out.
"""

from __future__ import annotations

import logging
import re

import pytest

from tests.support import run_ferry, write_plan


def _gate_fails(root):
    plan = write_plan(root, "terminal-gate-fails", allow_extra=False)
    (root / "dst" / "b").mkdir(parents=True)
    (root / "dst" / "b" / "stray.bin").write_bytes(b"x")
    return plan


def _preflight_fails(root):
    plan = write_plan(root, "terminal-preflight-fails")
    plan.write_text(plan.read_text().replace("storage: ./src", "storage: ./no-such-src"))
    return plan


# (id, what to set up -> the plan, the one line ferry prints)
FAILURES = [
    ("gate fails", _gate_fails, r"ferry: failed: run \S+: data_sync: gate failed: data\.target_matches_source\["),
    (
        "preflight fails",
        _preflight_fails,
        r"ferry: failed: run \S+: preflight failed, nothing was changed: preflight\.source_storage_access: "
        r"\S+no-such-src: no such directory",
    ),
]


@pytest.mark.parametrize(("setup", "line"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_a_failed_run_is_one_line_per_cause(prefect_api, tmp_path, setup, line) -> None:
    code, _, err = run_ferry("run", str(setup(tmp_path)), api=prefect_api)
    assert code == 1, err
    assert "Traceback" not in err and 'File "' not in err, err
    ours = [entry for entry in err.splitlines() if entry.startswith("ferry: ")]
    assert len(ours) == 1 and re.fullmatch(line + r".*", ours[0]), err
    # Prefect's own record of the failure stays on the console, as one line.
    assert sum("Encountered exception during execution" in entry for entry in err.splitlines()) == 1, err
    run_id = ours[0].split()[3].rstrip(":")
    assert "Traceback" in _flow_run_error_log(run_id)


def test_a_phase_the_plan_lacks_is_a_usage_error(prefect_api, tmp_path) -> None:
    code, _, err = run_ferry("run", str(write_plan(tmp_path, "terminal-only")), "--only", "teleport", api=prefect_api)
    assert code == 2, err
    assert "Traceback" not in err
    ours = [entry for entry in err.splitlines() if entry.startswith("ferry: ")]
    assert len(ours) == 1 and ours[0].startswith("ferry: error: ") and "'teleport' is not a phase" in ours[0], err


def _flow_run_error_log(flow_run_name: str) -> str:
    """The ERROR log lines the Prefect API holds for the flow run of that name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
    return "\n".join(log.message for log in logs if log.level >= logging.ERROR)
