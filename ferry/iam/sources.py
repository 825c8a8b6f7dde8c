"""Read every IAM source a plan names and map its principals to the target's roles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry.errors import UsageError
from ferry.iam.aws import aws_iam_call, aws_principals, fetch_aws_details
from ferry.iam.azure import azure_principals, role_definitions
from ferry.iam.ldap import ldap_principals
from ferry.iam.model import Level, Mapping, Principal, map_principals

if TYPE_CHECKING:
    from ferry.phases.iam import IamSettings
    from ferry.plan import LoadedPlan


def _read_export(path: Path, field_name: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"source.iam.{field_name}: {path}: cannot read: {exc.strerror or exc}") from None
    if field_name == "ldif":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"source.iam.{field_name}: {path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def read_sources(loaded: LoadedPlan, settings: IamSettings, namespace: str) -> Mapping:
    """Read every IAM source the plan names and map its principals to the target's roles in namespace."""
    sources = loaded.plan.source.iam
    assert sources is not None
    principals: list[Principal] = []
    skipped: list[str] = []
    if sources.aws is not None:
        if sources.aws.export:
            details = _read_export(loaded.resolve(sources.aws.export), "aws.export")
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
        assignments = _read_export(loaded.resolve(sources.azure_export), "azure_export")
        if not isinstance(assignments, list):
            raise UsageError(
                f"source.iam.azure_export: {sources.azure_export}: not the output of "
                "`az role assignment list --all` (a JSON list)"
            )
        definitions = (
            role_definitions(
                _read_export(loaded.resolve(sources.azure_role_definitions), "azure_role_definitions"),
                f"source.iam.azure_role_definitions: {sources.azure_role_definitions}",
            )
            if sources.azure_role_definitions
            else {}
        )
        members = (
            _read_export(loaded.resolve(sources.azure_group_members), "azure_group_members")
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
        ldif = _read_export(loaded.resolve(sources.ldif), "ldif")
        principals += ldap_principals(ldif, {k: Level.parse(v) for k, v in settings.ldap_groups.items()})
    return map_principals(
        principals, namespace, loaded.target.rbac_roles, settings.overrides, skipped, settings.subjects
    )
