"""The iam phase: map the source principals to the target's roles, render the RoleBindings, run the gate.

The phase publishes the bindings to `<state>/iam/rbac.yaml` (the manifests phase applies them with
the workloads) and keeps what it replaced in the run's audit folder, so rolling the phase back
puts the previous bindings back exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog
import yaml
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.transactions import get_transaction

from checks.iam import (
    check_iam_ambiguous,
    check_iam_coverage,
    check_iam_widened,
    check_rbac_bindings,
    check_rbac_schema,
)
from ferry.audit import AuditFolder
from ferry.iam import Level, Mapping, read_sources, render_rbac
from ferry.plan import LoadedPlan, load_plan
from flows.retry import transient_retries

log = structlog.get_logger("ferry.flows.iam")
PHASE = "iam"


def published(loaded: LoadedPlan) -> Path:
    """Where the phase publishes the bindings for the cluster."""
    return loaded.state_dir / "iam" / "rbac.yaml"


def _replace(target: Path, text: str) -> None:
    """Write target atomically: readers see the old bindings or the new ones, never half of them."""
    staging = target.with_name(target.name + ".staging")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, target)


def _publish(loaded: LoadedPlan, audit: AuditFolder, text: str) -> None:
    """Replace the published bindings; keep what was there in the audit folder."""
    target = published(loaded)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        audit.write_text(PHASE, "previous-rbac.yaml", target.read_text(encoding="utf-8"))
    _replace(target, text)
    audit.write_json(PHASE, "published.json", {"path": str(target)})


def restore(loaded: LoadedPlan, audit_root: Path) -> str:
    """Undo one run's publication: the bindings from before it come back (or none, if there were none)."""
    folder = audit_root / PHASE
    previous, target = folder / "previous-rbac.yaml", published(loaded)
    if previous.exists():
        _replace(target, previous.read_text(encoding="utf-8"))
        done = f"restored the bindings published before run {audit_root.name} at {target}"
    else:
        target.unlink(missing_ok=True)
        done = f"removed {target}: no bindings were published before run {audit_root.name}"
    (folder / "rollback.json").write_text(json.dumps({"done": done}) + "\n", encoding="utf-8")
    log.warning("rolled back the iam phase", done=done)
    return done


def undo_unfinished(loaded: LoadedPlan, audit_root: Path) -> int:
    """Restore a publication whose task never completed (Prefect rolls back completed tasks only)."""
    folder = audit_root / PHASE
    if (folder / "published.json").exists() and not (folder / "rollback.json").exists():
        restore(loaded, audit_root)
        return 1
    return 0


@task(name="map-iam", cache_policy=NO_CACHE)
def map_iam(plan_path: str, audit_root: str) -> dict:
    """Read the sources, map them, write the report and bindings to the audit folder, publish them."""
    loaded = load_plan(Path(plan_path))
    audit = AuditFolder(Path(audit_root))
    mapping = read_sources(loaded)
    text = yaml.safe_dump_all(render_rbac(mapping), sort_keys=False)
    report = mapping.markdown()
    audit.write_json(PHASE, "mapping.json", mapping.to_dict())
    audit.write_text(PHASE, "report.md", report)
    audit.write_text(PHASE, "rbac.yaml", text)
    create_markdown_artifact(report, key="iam-report", description="IAM mapping report")
    get_transaction().set("plan_path", plan_path)
    get_transaction().set("audit_root", audit_root)
    _publish(loaded, audit, text)
    log.info("mapped IAM", **mapping.totals())
    return mapping.totals()


@map_iam.on_rollback
def _undo_map(transaction) -> None:  # noqa: ANN001 - Prefect passes the task's transaction
    restore(load_plan(Path(transaction.get("plan_path"))), Path(transaction.get("audit_root")))


@task(name="iam-gate", cache_policy=NO_CACHE)
def iam_gate(plan_path: str, audit_root: str) -> list[dict]:
    """The iam gate over what the phase rendered (read back from the audit folder)."""
    loaded = load_plan(Path(plan_path))
    gate = loaded.plan.gates.iam
    folder = Path(audit_root) / PHASE
    mapping = Mapping.from_dict(json.loads((folder / "mapping.json").read_text(encoding="utf-8")))
    docs = [doc for doc in yaml.safe_load_all((folder / "rbac.yaml").read_text(encoding="utf-8")) if doc]
    results = [
        check_iam_coverage(mapping, gate.min_coverage),
        check_iam_ambiguous(mapping, gate.max_ambiguous),
        check_iam_widened(mapping, gate.allow_widening),
        check_rbac_bindings(docs, mapping),
        check_rbac_schema(docs, gate.kubernetes_version),
    ]
    return [r.to_dict() for r in results]


def describe(loaded: LoadedPlan) -> tuple[str, dict]:
    """What the phase would bind (the mapping, nothing written), for an approval request."""
    mapping = read_sources(loaded)
    totals = mapping.totals()
    per_role: dict[str, int] = {}
    for p in mapping.principals:
        if p.level is not None:
            per_role[mapping.roles[p.level]] = per_role.get(mapping.roles[p.level], 0) + 1
    admins = [p.id for p in mapping.principals if p.level == Level.ADMIN]
    roles = ", ".join(f"{n} to {role}" for role, n in per_role.items()) or "nothing"
    text = (
        f"iam will bind {totals['bound']} of {totals['principals']} principal(s) in namespace "
        f"{mapping.namespace} ({roles}); admin: {', '.join(admins) or 'none'}. "
        f"{totals['unmapped']} permission(s) unmapped, {totals['widened']} widened, {totals['ambiguous']} ambiguous."
    )
    return text, totals


def rollback_committed(loaded: LoadedPlan, audit_root: Path) -> str:
    """Undo a committed run of the phase: its publication is replaced by what it replaced."""
    return restore(loaded, audit_root)


@flow(name="iam", flow_run_name="iam")
def iam_flow(plan_path: str, audit_root: str) -> list[dict]:
    """Map and publish the bindings, then run the iam gate; returns the gate results."""
    map_iam.with_options(**transient_retries(load_plan(Path(plan_path))))(plan_path, audit_root)
    return iam_gate(plan_path, audit_root)
