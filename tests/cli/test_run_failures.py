"""A `ferry run` that fails, as the terminal shows it: one line per cause, no Python or Prefect stack.

The run's logs in the Prefect API keep the traceback: only the console leaves it out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import pytest

from tests.support import run_ferry, write_plan


class Ends:
    """The servers a row needs, each started on first use (a data_sync row starts none), stopped after its test."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._registries: tuple | None = None
        self._request = request
        self._namespaces: list[str] = []

    def registries(self) -> tuple[int, int]:
        from tests.support import start_registry

        if self._registries is None:
            self._registries = (start_registry(), start_registry())
        return self._registries[0].port, self._registries[1].port

    def control_plane(self):
        """The session's control plane, and a namespace of this test's own on it."""
        plane = self._request.getfixturevalue("control_plane")
        self._namespaces.append(plane.namespace())
        return plane, self._namespaces[-1]

    def stop(self) -> None:
        for server in self._registries or ():
            server.stop()
        for namespace in self._namespaces:
            self._request.getfixturevalue("control_plane").delete_namespace(namespace)


@pytest.fixture
def ends(request: pytest.FixtureRequest) -> Iterator[Ends]:
    started = Ends(request)
    try:
        yield started
    finally:
        started.stop()


def _gate_fails(root, ends):
    plan = write_plan(root, "terminal-gate-fails", allow_extra=False)
    (root / "dst" / "b").mkdir(parents=True)
    (root / "dst" / "b" / "stray.bin").write_bytes(b"x")
    return plan


def _preflight_fails(root, ends):
    plan = write_plan(root, "terminal-preflight-fails")
    plan.write_text(plan.read_text().replace("storage: ./src", "storage: ./no-such-src"))
    return plan


def _iam_gate_fails(root, ends):
    from tests.flows.test_iam_phase import OVERRIDES, write_two_phase_plan

    # Without the overrides that accept them, the example exports' escalation paths fail the iam gate.
    plan = write_two_phase_plan(root, "terminal-iam-fails")
    plan.write_text(plan.read_text().replace(OVERRIDES, ""))
    return plan


def _images_step_fails(root, ends):
    from tests.flows.test_images_pipeline import PLAN

    source, target = ends.registries()
    (root / "src").mkdir()
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(name="terminal-images-fails", copy=json.dumps(["missing:1"]), src=source, tgt=target))
    return plan


def _manifests_step_fails(root, ends):
    from tests.flows.test_manifests_phase import _plan

    plane, namespace = ends.control_plane()
    # The namespace's quota allows no Deployment: the API server refuses it (in the dry run, before any change).
    plane.seed({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "none", "namespace": namespace},
                "spec": {"hard": {"count/deployments.apps": "0"}}})  # fmt: skip
    return _plan(root, "terminal-manifests-fails", plane, namespace)


def _golive_gate_fails(root, ends):
    from tests.flows.test_golive_phase import golive_plan

    # Under strict, what the go-live phase could not measure (no cluster, no latency server) fails its gate.
    return golive_plan(root, "terminal-golive-fails", strict=True)


# (id, what to set up -> the plan, the one line ferry prints, how many flow runs Prefect says failed: the run,
# and for a step that failed the phase's subflow too)
FAILURES = [
    ("gate fails", _gate_fails, r"ferry: failed: run \S+: data_sync: gate failed: data\.target_matches_source\[", 1),
    (
        "preflight fails",
        _preflight_fails,
        r"ferry: failed: run \S+: preflight failed, nothing was changed: preflight\.source_storage_access: "
        r"\S+no-such-src: no such directory",
        1,
    ),
    ("iam gate fails", _iam_gate_fails, r"ferry: failed: run \S+: iam: gate failed: iam\.escalation", 1),
    (
        "images step fails",
        _images_step_fails,
        # The image named once: the copy's own error does not repeat it.
        r"ferry: failed: run \S+: images: 1 of 1 failed: missing:1: 127\.0\.0\.1:\d+/ml/missing:1 is not on the "
        r"source registry$",
        2,
    ),
    (
        "manifests step fails",
        _manifests_step_fails,
        r"ferry: failed: run \S+: manifests: dry run of apply Deployment trainer: the API answered 403 Forbidden: "
        r".*exceeded quota",
        2,
    ),
    ("golive gate fails", _golive_gate_fails, r"ferry: failed: run \S+: golive: gate failed: golive\.", 1),
]


@pytest.mark.parametrize(("setup", "line", "flows"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_a_failed_run_is_one_line_per_cause(prefect_api, tmp_path, ends, setup, line, flows) -> None:
    code, _, err = run_ferry("run", str(setup(tmp_path, ends)), api=prefect_api)
    assert code == 1, err
    assert "Traceback" not in err and 'File "' not in err, err
    ours = [entry for entry in err.splitlines() if entry.startswith("ferry: ")]
    assert len(ours) == 1 and re.fullmatch(line + r".*", ours[0]), err
    # Prefect's own record of the failure stays on the console, one line per flow run that failed.
    assert sum("Encountered exception during execution" in entry for entry in err.splitlines()) == flows, err
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
