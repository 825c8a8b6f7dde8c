"""`ferry deploy`: the plan as a Prefect deployment that a work pool's workers run, on the plan's schedule."""

from __future__ import annotations

from pathlib import Path

from prefect import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectNotFound

from ferry.plan import LoadedPlan
from flows.pipeline import migrate

# The tree the workers import the flow from: this checkout (or installed package root).
SOURCE_ROOT = Path(__file__).resolve().parents[1]


def ensure_pool(name: str) -> str:
    """The work pool's type; a pool that does not exist yet is created as a process pool."""
    with get_client(sync_client=True) as client:
        try:
            return client.read_work_pool(name).type
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            return "process"


def deploy_plan(loaded: LoadedPlan, pool: str) -> str:
    """Register `migrate` for the plan in the pool, scheduled on the plan's cron; returns the deployment id."""
    flow = migrate.from_source(source=str(SOURCE_ROOT), entrypoint="flows/pipeline.py:migrate")
    deployment_id = flow.deploy(
        name=loaded.plan.name,
        work_pool_name=pool,
        cron=loaded.plan.schedule,
        parameters={"plan_path": str(loaded.path.resolve())},
        build=False,
        push=False,
        print_next_steps=False,
    )
    return str(deployment_id)
