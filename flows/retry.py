"""Prefect task retries for transient errors only, with the plan's attempts and delay."""

from __future__ import annotations

from typing import Any

from ferry.errors import TransientError
from ferry.plan import LoadedPlan


def only_transient(task, task_run, state) -> bool:  # noqa: ANN001 - Prefect's retry_condition_fn signature
    """Retry a task only when it failed for a transient reason."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:  # noqa: BLE001 - anything else is final
        return False
    return False


def transient_retries(loaded: LoadedPlan) -> dict[str, Any]:
    """`Task.with_options` arguments: the plan's retries, for transient errors only."""
    retries = loaded.plan.retries
    return {"retries": retries.attempts, "retry_delay_seconds": retries.delay_s, "retry_condition_fn": only_transient}
