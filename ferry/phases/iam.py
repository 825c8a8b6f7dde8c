"""The iam phase: map the source principals to the target's roles, render the RoleBindings, gate them.

The phase publishes the bindings to `<state>/iam/<plan>/rbac.yaml` (the plan's manifests phase applies
them with the workloads) and keeps what it replaced in the run's audit folder, so rolling the phase back
puts the previous bindings back exactly.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Literal

import structlog
import yaml
from pydantic import Field, field_validator, model_validator

from checks.iam import (
    check_iam_ambiguous,
    check_iam_conditional,
    check_iam_coverage,
    check_iam_escalation,
    check_iam_unresolved,
    check_iam_widened,
    check_rbac_bindings,
    check_rbac_schema,
)
from checks.preflight import check_iam_sources
from ferry.audit import AuditFolder
from ferry.config import Settings
from ferry.errors import UsageError
from ferry.iam.aws import DEFAULT_AWS_SERVICES, PER_PRINCIPAL_KEYS, aws_iam_call, aws_principals, fetch_aws_details
from ferry.iam.azure import azure_principals, role_definitions
from ferry.iam.ldap import ldap_principals
from ferry.iam.model import Level, Mapping, Principal, binding_changes, map_principals, render_rbac
from ferry.iam.sources import read_export
from ferry.interrupts import failpoint
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.plan import DNS_LABEL, LoadedPlan, Plan
from ferry.results import CheckResult

# What the phase renders and publishes, in its audit folder.
BINDINGS = "rbac.yaml"
log = structlog.get_logger("ferry.phases.iam")
LevelName = Literal["read", "write", "admin"]


class IamSettings(Settings):
    """Settings of the iam phase: where the bindings go and how to read what the sources cannot say."""

    # Where the bindings go; default: the target cluster's namespace.
    namespace: str | None = Field(default=None, pattern=DNS_LABEL)
    # AWS services whose permissions carry over; actions of others are reported unmapped.
    aws_services: list[str] = Field(default_factory=lambda: list(DEFAULT_AWS_SERVICES))
    # LDAP groups hold no permissions: the level each group gets.
    ldap_groups: dict[str, LevelName] = Field(default_factory=dict)
    # Azure custom roles (built-in ones are known): the level each gets.
    azure_roles: dict[str, LevelName] = Field(default_factory=dict)
    # Principal id (e.g. aws:user/alice) -> a role of the target profile, or "none" to bind nothing.
    overrides: dict[str, str] = Field(default_factory=dict)
    # Principal id -> the name the target's identity provider knows it by (e.g. alice@corp.example.com).
    subjects: dict[str, str] = Field(default_factory=dict)
    # AWS condition keys known to hold for every request (e.g. aws:MultiFactorAuthPresent: true); an Allow under
    # any other condition grants nothing and is reported as conditional.
    assume_conditions: dict[str, bool | int | float | str | list[str]] = Field(default_factory=dict)

    @field_validator("assume_conditions")
    @classmethod
    def _not_per_principal(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key.lower().startswith(PER_PRINCIPAL_KEYS):
                raise ValueError(f"{key} is read from each principal in the export (its name, ARN, tags): not assumed")
        return value


class IamGate(Settings):
    # Mapped permissions over all permissions found; below it the gate fails.
    min_coverage: float = Field(default=0.9, ge=0, le=1)
    max_ambiguous: int = Field(default=0, ge=0)
    # Widened permissions (scope, conditions, denies RBAC cannot express) WARN; false makes them FAIL.
    allow_widening: bool = True
    # Principals on an escalation path that no override accepts; above it the gate fails.
    max_escalation: int = Field(default=0, ge=0)
    # Unresolved principals and members, conditional grants: WARN, or FAIL above these counts when set.
    max_unresolved: int | None = Field(default=None, ge=0)
    max_conditional: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "kubernetes_version" in data:
            raise ValueError("kubernetes_version moved to target.kubernetes_version (one version for the whole plan)")
        return data


def namespace(plan: Plan) -> str | None:
    """The namespace the iam phase binds in: its own setting, else the target cluster's."""
    own = plan.phases.iam.namespace if plan.phases.iam else None
    return own or (plan.target.cluster.namespace if plan.target.cluster else None)


class IamPhase(Phase):
    """Source principals (AWS IAM, Azure role assignments, LDAP groups) bound to the target's RBAC roles."""

    name = "iam"
    settings_model = IamSettings
    gate_model = IamGate

    @property
    def live_inputs(self) -> bool:
        """A live IAM API is read on every run; exports are files the hash covers."""
        aws = self.loaded.plan.source.iam.aws if self.loaded.plan.source.iam else None
        return aws is not None and not aws.export

    @classmethod
    def check_plan(cls, plan: Plan) -> None:
        if plan.source.iam is None:
            raise ValueError("phases.iam needs source.iam, where the principals come from: aws, azure_export, ldif")
        if namespace(plan) is None:
            raise ValueError("phases.iam needs a namespace: set phases.iam.namespace or target.cluster")

    def files(self) -> dict[tuple, Path]:
        """The export files the phase reads."""
        sources = self.loaded.plan.source.iam
        assert sources is not None
        named = {
            ("source", "iam", "aws", "export"): sources.aws.export if sources.aws else None,
            ("source", "iam", "azure_export"): sources.azure_export,
            ("source", "iam", "azure_role_definitions"): sources.azure_role_definitions,
            ("source", "iam", "azure_group_members"): sources.azure_group_members,
            ("source", "iam", "ldif"): sources.ldif,
        }
        return {loc: self.loaded.resolve(path) for loc, path in named.items() if path}

    def published(self) -> Path:
        """Where the phase publishes the bindings for the cluster."""
        return self.loaded.layout.bindings(self.loaded.plan.name)

    def inputs(self) -> dict[str, Any]:
        sources = self.loaded.plan.source.iam
        assert sources is not None
        return {
            "sources": sources.model_dump(mode="json"),
            "namespace": namespace(self.loaded.plan),
            "roles": self.loaded.target.rbac_roles,
            # A changed export is a changed input (a live IAM account is read on every run).
            "exports": {
                str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "missing"
                for p in self.files().values()
            },
        }

    def mapping(self) -> Mapping:
        """The sources read and mapped to the target's roles (nothing written)."""
        ns = namespace(self.loaded.plan)
        assert ns is not None
        return read_sources(self.loaded, self.settings, ns)

    def summary(self) -> str:
        sources = self.loaded.plan.source.iam
        assert sources is not None
        named = [
            f"AWS IAM {'export ' + sources.aws.export if sources.aws.export else 'API'}" if sources.aws else "",
            f"Azure role assignments {sources.azure_export}" if sources.azure_export else "",
            f"LDAP groups {sources.ldif}" if sources.ldif else "",
        ]
        gate, target = self.gate_settings, self.loaded.target
        return (
            f"map principals of {', '.join(n for n in named if n)} to the roles of {target.name} "
            f"({', '.join(target.rbac_roles)}) in namespace {namespace(self.loaded.plan)}, render RoleBindings "
            f"and publish them to {self.published()}; gate: coverage >= {gate.min_coverage:.0%}, "
            f"ambiguous <= {gate.max_ambiguous}, escalation paths <= {gate.max_escalation}, "
            f"widening {'reported' if gate.allow_widening else 'fails'}, "
            "bindings valid against the Kubernetes schema"
        )

    def changes(self) -> Changes:
        """The mapping's totals, and per subject the bindings it would add, change and remove against those the
        plan published before."""
        mapping = self.mapping()
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
            f"{totals['unmapped']} permission(s) unmapped, {totals['escalation']} on an escalation path, "
            f"{totals['unresolved']} unresolved, {totals['conditional']} conditional, {totals['widened']} widened, "
            f"{totals['ambiguous']} ambiguous."
        )
        published = self.published()
        before = list(yaml.safe_load_all(published.read_text(encoding="utf-8"))) if published.exists() else []
        diff = binding_changes(render_rbac(mapping, self.loaded.plan.name), [d for d in before if d])
        against = "against the published bindings" if published.exists() else "nothing published yet"
        said = "; ".join(f"{what} {len(items)}: {', '.join(items)}" for what, items in diff.items() if items)
        text += f" Bindings {against}: {said or 'no change'}."
        return Changes(text, totals)

    def preflight(self) -> list[CheckResult]:
        sources = self.loaded.plan.source.iam
        return [check_iam_sources(list(self.files().values()), sources.aws if sources else None)]

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Map, write the report and bindings to the audit folder, publish them (keeping what they replace)."""
        mapping = self.mapping()
        text = yaml.safe_dump_all(render_rbac(mapping, self.loaded.plan.name), sort_keys=False)
        report = mapping.markdown()
        audit.write_json(self.name, "mapping.json", mapping.to_dict())
        audit.write_text(self.name, "report.md", report)
        reporter.markdown("iam-report", report, "IAM mapping report")
        changed = audit.publish(self.name, BINDINGS, text, at=self.published())
        failpoint("iam:published", reporter.stopping)
        log.info("mapped IAM", **mapping.totals())
        return StepResult(changed=changed, details=mapping.totals())

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """The iam gate over what the run rendered (read back from the audit folder)."""
        gate = self.gate_settings
        folder = audit.root / self.name
        mapping = Mapping.from_dict(json.loads((folder / "mapping.json").read_text(encoding="utf-8")))
        docs = [doc for doc in yaml.safe_load_all((folder / BINDINGS).read_text(encoding="utf-8")) if doc]
        return [
            check_iam_coverage(mapping, gate.min_coverage),
            check_iam_ambiguous(mapping, gate.max_ambiguous),
            check_iam_widened(mapping, gate.allow_widening),
            check_iam_escalation(mapping, gate.max_escalation),
            check_iam_unresolved(mapping, gate.max_unresolved),
            check_iam_conditional(mapping, gate.max_conditional),
            check_rbac_bindings(docs, mapping),
            check_rbac_schema(docs, self.loaded.plan.target.kubernetes_version),
        ]

    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """The run's publication is replaced by what it replaced (or removed, if it replaced nothing)."""
        done = audit.unpublish(self.name, BINDINGS, "the bindings", dry_run=dry_run)
        run = audit.root.name
        if done is None:
            return Undo(f"nothing to undo: run {run} published no bindings")
        if done.action == "leave":
            return Undo(done.item, [done.item])
        if done.action == "restore":
            text = f"the bindings published before run {run} at {done.at}"
        else:
            text = f"{done.at}: no bindings were published before run {run}"
        return Undo(f"{done.action if dry_run else done.action + 'd'} {text}", [done.item])


def read_sources(loaded: LoadedPlan, settings: IamSettings, namespace: str) -> Mapping:
    """Read every IAM source the plan names and map its principals to the target's roles in namespace."""
    sources = loaded.plan.source.iam
    assert sources is not None
    principals: list[Principal] = []
    skipped: list[str] = []
    if sources.aws is not None:
        if sources.aws.export:
            details = read_export(loaded.resolve(sources.aws.export), "aws.export")
            if not isinstance(details, dict) or "UserDetailList" not in details:
                raise UsageError(
                    f"source.iam.aws.export: {sources.aws.export}: not the output of "
                    "`aws iam get-account-authorization-details`"
                )
        else:
            details = aws_iam_call(sources.aws, fetch_aws_details)
        found, not_carried = aws_principals(details, settings.aws_services, settings.assume_conditions)
        principals += found
        skipped += not_carried
    if sources.azure_export:
        assignments = read_export(loaded.resolve(sources.azure_export), "azure_export")
        if not isinstance(assignments, list):
            raise UsageError(
                f"source.iam.azure_export: {sources.azure_export}: not the output of "
                "`az role assignment list --all` (a JSON list)"
            )
        definitions = (
            role_definitions(
                read_export(loaded.resolve(sources.azure_role_definitions), "azure_role_definitions"),
                f"source.iam.azure_role_definitions: {sources.azure_role_definitions}",
            )
            if sources.azure_role_definitions
            else {}
        )
        members = (
            read_export(loaded.resolve(sources.azure_group_members), "azure_group_members")
            if sources.azure_group_members
            else None
        )
        found, not_carried = azure_principals(
            assignments,
            {k: Level.parse(v) for k, v in settings.azure_roles.items()},
            definitions,
            members,
            f"source.iam.azure_group_members: {sources.azure_group_members}",
        )
        principals += found
        skipped += not_carried
    if settings.ldap_groups and not sources.ldif:
        raise UsageError("phases.iam.ldap_groups: the plan names no source.iam.ldif to find the groups in")
    if sources.ldif:
        ldif = read_export(loaded.resolve(sources.ldif), "ldif")
        levels = {k: Level.parse(v) for k, v in settings.ldap_groups.items()}
        principals += ldap_principals(ldif, levels, f"source.iam.ldif: {loaded.resolve(sources.ldif)}")
    return map_principals(
        principals, namespace, loaded.target.rbac_roles, settings.overrides, skipped, settings.subjects
    )
