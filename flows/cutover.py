"""The flow `cutover`: `ferry/cutover/run.py` under the plan's run lock, with an approval by Prefect's pause and the
switch phases run as `ferry run` runs a phase (`flows/pipeline.py`); its report as Prefect artifacts."""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import structlog
from prefect import flow, pause_flow_run, runtime
from prefect.artifacts import create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.exceptions import FlowPauseTimeout
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled

from ferry.audit import AuditFolder
from ferry.cutover.run import check_ready, run_cutover, still_frozen
from ferry.errors import FerryError, Interrupted
from ferry.lock import held
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from ferry.runlog import RunLog, RunStatus
from flows.pipeline import interrupts_as_one, new_run_id, run_one_phase

log = structlog.get_logger("ferry.flows.cutover")


def _run_name() -> str:
    return runtime.flow_run.parameters.get("run_id") or new_run_id(runtime.flow_run.parameters["plan_path"])


@flow(name="cutover", flow_run_name=_run_name, log_prints=True)
def cutover(plan_path: str, run_id: str, yes: bool = False, rehearse: bool = False, approval_timeout_s: int = 3600):
    """The cut-over of the plan: its report's figures (`Record.to_dict`)."""
    loaded = load_plan(Path(plan_path))
    with held(loaded.layout.state, "ferry cutover", run_id):
        runlog = RunLog(loaded.layout.state)
        audit = AuditFolder(loaded.layout.run(run_id))
        audit.write_text("plan", "plan.yaml", loaded.masked())
        runlog.start_run(run_id, loaded.plan.name, str(audit.root), str(runtime.flow_run.id or ""))
        structlog.contextvars.bind_contextvars(run_id=run_id)

        def approve(text: str) -> float:
            if yes:
                return 0.0
            switching = [p for p in loaded.plan.cutover.switch if p in loaded.plan.approve_before]
            also = f" This approves the switch phases {', '.join(switching)} too." if switching and not rehearse else ""
            create_markdown_artifact(
                f"# Approval needed: the freeze\n\n{text}.{also}\n\n"
                f"Resume this run in the Prefect UI or run `ferry approve {run_id}`.",
                key="approval-cutover",
                description="the cut-over's freeze",
            )
            log.warning(f"the freeze waits for approval: {text}. To approve: ferry approve {run_id}")
            began = time.monotonic()
            try:
                pause_flow_run(timeout=approval_timeout_s, poll_interval=2)
            except FlowPauseTimeout:
                raise FerryError(f"approval of the freeze timed out after {approval_timeout_s} s") from None
            return time.monotonic() - began

        def switch(name: str) -> None:
            structlog.contextvars.bind_contextvars(phase=name)
            run_one_phase(open_phase(loaded, name), audit, runlog, run_id, None, approval_timeout_s, approved=True)

        try:
            with interrupts_as_one(), _cancel_as_sigterm(runtime.flow_run.id):
                check_ready(loaded, runlog)
                record = run_cutover(loaded, run_id, rehearse=rehearse, approve=approve, switch=switch, say=log.info)
            runlog.end_run(run_id, RunStatus.COMPLETED)
        except Interrupted as exc:
            runlog.end_run(run_id, RunStatus.INTERRUPTED, str(exc))
            exc.then = still_frozen(loaded) or exc.then
            raise
        except BaseException as exc:
            runlog.end_run(run_id, RunStatus.FAILED, str(exc))
            raise
        finally:
            _artifact(loaded.layout.run(run_id) / "cutover")
            structlog.contextvars.unbind_contextvars("run_id", "phase")
            runlog.close()
    return record.to_dict()


# How often a cut-over asks the server whether its run was cancelled (as Prefect's pause polls for a resume).
_CANCEL_POLL_S = 2.0


@contextlib.contextmanager
def _cancel_as_sigterm(flow_run_id: UUID | str | None) -> Iterator[None]:
    """A cancel of this run from the UI (or the API) delivered as SIGTERM to this process, the interrupt it then is
    (`settle_cancel` marks the run Cancelled once it stopped).

    A run in this process hears of a cancel only when it next proposes a state, and a cut-over proposes none for
    minutes (a delta, the approval's wait, the freeze): without this it would freeze and switch after its cancel."""
    done, fired = threading.Event(), threading.Event()

    def watch() -> None:
        with get_client(sync_client=True) as client:
            while not done.wait(_CANCEL_POLL_S):
                try:
                    state = client.read_flow_run(UUID(str(flow_run_id))).state
                except Exception:  # noqa: BLE001 - the server out of reach a moment: asked again at the next poll
                    continue
                if state is not None and (state.is_cancelling() or state.is_cancelled()) and not done.is_set():
                    fired.set()
                    os.kill(os.getpid(), signal.SIGTERM)
                    return

    # In this run's Prefect settings (a context the new thread would not have); none without a server: no UI there.
    watcher = threading.Thread(target=contextvars.copy_context().run, args=(watch,), name="cutover-cancel", daemon=True)
    if flow_run_id and PREFECT_API_URL.value():
        watcher.start()
    try:
        yield
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        if fired.is_set():
            log.warning("the run was cancelled from the Prefect UI: stopped as for SIGTERM")


def settle_cancel(run_id: str) -> None:
    """After the flow run run_id ended by an interrupt: if a cancel from the UI stopped it, mark it Cancelled (as
    Prefect's runner marks a run it stopped; the engine's own Failed is refused while the run is Cancelling). The
    server out of reach leaves the run Cancelling: the interrupt's own line is what the operator needs."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    named = FlowRunFilter(name=FlowRunFilterName(any_=[run_id]))
    try:
        with get_client(sync_client=True) as client:
            for run in client.read_flow_runs(flow_run_filter=named):
                if run.state is not None and run.state.is_cancelling():
                    client.set_flow_run_state(run.id, Cancelled(message="cancelled: the same command resumes"))
    except Exception as exc:  # noqa: BLE001 - never in place of the interrupt being reported
        log.warning("the cancelled run's state could not be set", error=f"{type(exc).__name__}: {exc}")


def _artifact(folder: Path) -> None:
    """The report, as written, into the run's Prefect artifacts."""
    report = folder / "report.md"
    if report.exists():
        create_markdown_artifact(report.read_text(encoding="utf-8"), key="cutover-report", description="the cut-over")
