"""Approvals from outside the run: find a paused run by its name and resume it."""

from __future__ import annotations

from prefect import resume_flow_run
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

from ferry.errors import UsageError


def approve_run(run_id: str) -> None:
    """Resume the flow run named run_id if it is paused; UsageError otherwise."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_id])))
    if not runs:
        raise UsageError(f"no run named {run_id!r} on this Prefect server")
    paused = [r for r in runs if r.state is not None and r.state.is_paused()]
    if not paused:
        states = ", ".join(r.state.name for r in runs if r.state is not None)
        raise UsageError(f"run {run_id!r} is not waiting for approval (state: {states})")
    resume_flow_run(paused[0].id)
