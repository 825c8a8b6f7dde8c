"""`ferry deploy`: the plan as a Prefect deployment that a work pool's workers run on the plan's schedule, one run
at a time; registered with the API, or written as the `prefect.yaml` (and `automations.yaml`) a team keeps in git.

Both come from one description (`deployment`), so `prefect --no-prompt deploy --all` from the written file
registers what `ferry deploy` would have. A process pool's workers run the ferry installed where they are; a
kubernetes pool's run each flow in a pod of the worker image (deploy/worker.Dockerfile) that the deployment names.
"""

from __future__ import annotations

import os
from typing import Any
from uuid import UUID

import yaml
from prefect import __version__ as prefect_version
from prefect import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import ConcurrencyLimitConfig
from prefect.events.schemas.automations import AutomationCore
from prefect.exceptions import ObjectNotFound
from prefect.flows import EntrypointType

from ferry import __version__
from ferry.errors import UsageError
from ferry.plan import LoadedPlan
from flows.pipeline import migrate

# The flow by its module path: a worker on any machine with ferry installed imports it, whatever its working folder.
ENTRYPOINT = "flows.pipeline.migrate"
# One run per plan: a run (a scheduled one that finds the last still running) is cancelled while another runs, never
# started beside it on the same transfer state. ferry's run lock still guards runs started outside deployments.
ONE_RUN = {"limit": 1, "collision_strategy": "CANCEL_NEW"}


def ensure_pool(name: str, *, create: bool = True) -> str | None:
    """The work pool's type; a pool that does not exist yet is created as a process pool, or with create False
    left alone (None)."""
    with get_client(sync_client=True) as client:
        try:
            return client.read_work_pool(name).type
        except ObjectNotFound:
            if not create:
                return None
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
            return "process"


def deployment(loaded: LoadedPlan, pool: str | None = None, image: str | None = None) -> dict[str, Any]:
    """The plan's deployment as prefect.yaml spells one; with its work pool when it has one (`ferry serve` runs it
    itself), and as the pool's job variables the image its flow runs' pods run (a kubernetes pool's)."""
    plan = loaded.plan
    # Absolute, its links kept: a ConfigMap's files (deploy/k8s's plan) are links into a folder that each update of
    # the ConfigMap replaces, so the resolved path would be gone for the next run's pod.
    path = os.path.abspath(loaded.path)
    spec: dict[str, Any] = {
        "name": plan.name,
        "description": f"ferry's migration pipeline for the plan {plan.name} ({path})",
        "entrypoint": ENTRYPOINT,
        "parameters": {"plan_path": path},
        "schedules": [{"cron": plan.schedule}] if plan.schedule else [],
        "concurrency_limit": dict(ONE_RUN),
        "tags": ["ferry"],
    }
    if pool is not None:
        spec["work_pool"] = {"name": pool, **({"job_variables": {"image": image}} if image else {})}
    return spec


def deploy_plan(loaded: LoadedPlan, pool: str, image: str | None = None) -> str:
    """Register the plan's deployment in the pool (its flow runs in image's pods, for a kubernetes pool); returns
    its id."""
    spec = deployment(loaded, pool, image)
    runner = migrate.to_deployment(
        spec["name"],
        cron=loaded.plan.schedule,
        parameters=spec["parameters"],
        concurrency_limit=ConcurrencyLimitConfig(**spec["concurrency_limit"]),
        description=spec["description"],
        tags=spec["tags"],
        work_pool_name=spec["work_pool"]["name"],
        job_variables=spec["work_pool"].get("job_variables"),
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    return str(runner.apply())


def serve_plan(loaded: LoadedPlan) -> None:
    """Serve the plan's deployment from this process on its cron, one run at a time, until interrupted."""
    spec = deployment(loaded)
    migrate.serve(
        name=spec["name"],
        cron=loaded.plan.schedule,
        parameters=spec["parameters"],
        global_limit=ConcurrencyLimitConfig(**spec["concurrency_limit"]),
        description=spec["description"],
        tags=spec["tags"],
    )


def prefect_yaml(loaded: LoadedPlan, pool: str, image: str | None = None) -> str:
    """The prefect.yaml that registers the plan's deployment (`prefect --no-prompt deploy --all` beside it)."""
    project = {
        "name": "ferry",
        "prefect-version": prefect_version,
        # Nothing to build, push or pull: the workers (or the image) have ferry installed and import the flow by its
        # module path.
        "build": None,
        "push": None,
        "pull": [],
        "deployments": [deployment(loaded, pool, image)],
    }
    command = f"ferry deploy {loaded.path.name} --pool {pool}" + (f" --image {image}" if image else "") + " --emit"
    if image is None:
        create = f"prefect work-pool create {pool} --type process"
        needs = "Its workers need ferry installed and the plan at the path below."
    else:
        create = f"prefect work-pool create {pool} --type kubernetes --base-job-template deploy/work-pool.json"
        needs = "Its flow runs' pods (deploy/k8s) run the image below and need the plan at the path below."
    return (
        f"# Written by ferry {__version__} (`{command}`): the deployment\n"
        f"# `ferry deploy` registers. Register it: prefect --no-prompt deploy --all (the work pool {pool} must\n"
        f"# exist: {create}).\n# {needs}\n" + yaml.safe_dump(project, sort_keys=False)
    )


def notification_block(reference: str) -> UUID:
    """The id of the notification block named TYPE/NAME (`custom-webhook/ops`, `slack-webhook/oncall`)."""
    kind, _, name = reference.partition("/")
    if not kind or not name:
        raise UsageError(f"--notify {reference!r}: give the block as TYPE/NAME, for example slack-webhook/oncall")
    with get_client(sync_client=True) as client:
        try:
            return client.read_block_document_by_name(name=name, block_type_slug=kind).id
        except ObjectNotFound:
            raise UsageError(
                f"--notify {reference!r}: no such block on the Prefect server (create it in the UI, Blocks)"
            ) from None


def failure_automation(loaded: LoadedPlan, block: UUID) -> dict[str, Any]:
    """A Prefect automation that sends the notification block a message when a run of the plan's deployment fails
    or crashes (as `prefect automation create --from-file` reads it)."""
    name = loaded.plan.name
    automation = {
        "name": f"ferry {name}: a run failed",
        "description": f"Sent when a run of the deployment migrate/{name} fails or crashes (written by ferry).",
        "enabled": True,
        "trigger": {
            "type": "event",
            "posture": "Reactive",
            "expect": ["prefect.flow-run.Failed", "prefect.flow-run.Crashed"],
            "match": {"prefect.resource.id": "prefect.flow-run.*"},
            "match_related": {"prefect.resource.role": "deployment", "prefect.resource.name": name},
            "threshold": 1,
            "within": 0,
        },
        "actions": [
            {
                "type": "send-notification",
                "block_document_id": str(block),
                "subject": f"ferry: migrate/{name} {{{{ flow_run.state.name }}}}",
                "body": (
                    f"ferry's run {{{{ flow_run.name }}}} of the plan {name} ended {{{{ flow_run.state.name }}}}: "
                    "{{ flow_run.state.message }}. `ferry status` on the plan says which phase and what to do."
                ),
            }
        ],
    }
    AutomationCore.model_validate(automation)  # what `prefect automation create` checks, checked here first
    return automation


def create_automation(automation: dict[str, Any]) -> str:
    """Create the automation on the server (a second one of the same name replaces the first); returns its id."""
    with get_client(sync_client=True) as client:
        for old in client.read_automations_by_name(automation["name"]):
            client.delete_automation(old.id)
        return str(client.create_automation(AutomationCore.model_validate(automation)))


def automations_yaml(automation: dict[str, Any]) -> str:
    """The automation as `prefect automation create --from-file` reads it."""
    return (
        "# Written by ferry: create it with prefect automation create --from-file automations.yaml\n"
        + yaml.safe_dump({"automations": [automation]}, sort_keys=False)
    )
