"""Azure: role assignments (`az role assignment list --all`), custom role definitions (`az role definition
list --custom-role-only true`) and group members (`az ad group member list --group NAME`, one list per group).

A role that can assign roles (Owner, User Access Administrator, Role Based Access Control
Administrator, a custom role allowing `Microsoft.Authorization/roleAssignments/write`) is an
escalation path; the principal is bound at the level of what the role holds besides. An assignment
whose principal no longer resolves (deleted: no name, type Unknown) is reported, never bound.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ferry.errors import UsageError
from ferry.iam.aws import wildcard
from ferry.iam.model import Level, Principal

ASSIGNS_ROLES = "Microsoft.Authorization/roleAssignments/write"
# Built-in roles that can assign roles, with the level of what each holds besides that.
_ROLE_ASSIGNERS = {
    "Owner": Level.WRITE,
    "User Access Administrator": Level.READ,
    "Role Based Access Control Administrator": Level.READ,
}
# Built-in roles that administer the cluster itself.
_CLUSTER_ADMIN_ROLES = frozenset(
    {
        "Azure Kubernetes Service Cluster Admin Role",
        "Azure Kubernetes Service RBAC Cluster Admin",
        "Azure Kubernetes Service RBAC Admin",
    }
)
_WRITE_SUFFIXES = ("Contributor", "Data Owner", "Writer", "AcrPush", "AcrDelete")
_READ_SUFFIXES = ("Reader", "AcrPull", "Azure Kubernetes Service Cluster User Role")
_KINDS = {"User": "user", "Group": "group", "ServicePrincipal": "service", "MSI": "service"}


@dataclass(frozen=True)
class RoleDefinition:
    """A custom role's permissions: control-plane and data-plane actions, each minus its not-actions."""

    name: str
    actions: tuple[str, ...]
    not_actions: tuple[str, ...]

    def allows(self, operation: str) -> bool:
        def named(patterns: tuple[str, ...]) -> bool:
            return any(wildcard(p, True).match(operation) for p in patterns)

        return named(self.actions) and not named(self.not_actions)

    def level(self) -> Level | None:
        """The level of what the role holds besides assigning roles: write for any write, delete or action."""
        others = [a for a in self.actions if a.lower() != ASSIGNS_ROLES.lower()]
        if any(a.lower().endswith(("/write", "/delete", "/action", "*")) for a in others):
            return Level.WRITE
        return Level.READ if others else None


def role_definitions(export: Any, where: str) -> dict[str, RoleDefinition]:
    """Custom roles by name from `az role definition list --custom-role-only true`."""
    if not isinstance(export, list):
        raise UsageError(f"{where}: not the output of `az role definition list --custom-role-only true` (a JSON list)")
    found = {}
    for index, entry in enumerate(export):
        name = entry.get("roleName") if isinstance(entry, dict) else None
        if not name:
            raise UsageError(f"{where}: entry {index} has no roleName")
        actions: list[str] = []
        not_actions: list[str] = []
        for permission in entry.get("permissions", []):
            actions += permission.get("actions", []) + permission.get("dataActions", [])
            not_actions += permission.get("notActions", []) + permission.get("notDataActions", [])
        found[name] = RoleDefinition(name, tuple(actions), tuple(not_actions))
    return found


def role_level(
    role: str, custom: dict[str, Level], definitions: dict[str, RoleDefinition]
) -> tuple[Level | None, bool]:
    """(the level a role gives besides assigning roles, whether it can assign roles); level None if unknown."""
    definition = definitions.get(role)
    escalates = role in _ROLE_ASSIGNERS or (definition is not None and definition.allows(ASSIGNS_ROLES))
    if role in custom:
        return custom[role], escalates
    if role in _ROLE_ASSIGNERS:
        return _ROLE_ASSIGNERS[role], escalates
    if definition is not None:
        return definition.level(), escalates
    if role in _CLUSTER_ADMIN_ROLES:
        return Level.ADMIN, escalates
    if role.endswith(_WRITE_SUFFIXES):
        return Level.WRITE, escalates
    if role.endswith(_READ_SUFFIXES):
        return Level.READ, escalates
    return None, escalates


class Directory:
    """Group members as `az ad group member list` prints them, keyed by group object id or display name."""

    def __init__(self, export: Any, where: str, groups: dict[str, str]):
        """groups: object id -> display name of the groups the assignments name (to refuse ambiguous names)."""
        if not isinstance(export, dict):
            raise UsageError(
                f"{where}: a JSON object keyed by group object id or display name, each value the "
                "output of `az ad group member list --group NAME`"
            )
        self.where = where
        self.lists: dict[str, list[dict]] = export
        named = Counter(groups.values())
        for key in export:
            if key not in groups and named.get(key, 0) > 1:
                raise UsageError(
                    f"{where}: {key!r} is the display name of {named[key]} groups in the assignments; key it by "
                    "object id"
                )

    def members_of(self, gid: str, name: str) -> tuple[list[str], list[str], list[str]] | None:
        """(effective members, unresolved members, nested groups) of a group; None if the export lacks it."""
        key = gid if gid in self.lists else name if name in self.lists else None
        if key is None:
            return None
        users: set[str] = set()
        unresolved: list[str] = []
        nested: list[str] = []
        seen = {key}
        queue = [key]
        while queue:
            for member in self.lists[queue.pop(0)]:
                kind = str(member.get("@odata.type", "")).rsplit(".", 1)[-1]
                label = member.get("userPrincipalName") or member.get("displayName") or member.get("id") or "?"
                if kind != "group":
                    users.add(label)
                    continue
                inner = next((k for k in (member.get("id"), member.get("displayName")) if k in self.lists), None)
                if inner is None:
                    unresolved.append(f"member group {label} ({member.get('id')}): its members are not in {self.where}")
                elif inner not in seen:
                    seen.add(inner)
                    nested.append(label)
                    queue.append(inner)
        return sorted(users), unresolved, nested


def azure_principals(
    assignments: list[dict],
    custom: dict[str, Level],
    definitions: dict[str, RoleDefinition] | None = None,
    members: Any = None,
    members_where: str = "azure_group_members",
) -> tuple[list[Principal], list[str]]:
    """Principals of `az role assignment list --all` output, one per principal, with every assignment; also
    the assignments of principals Kubernetes cannot name (foreign groups, devices)."""
    definitions = definitions or {}
    groups = {
        a.get("principalId", ""): a.get("principalName", "")
        for a in assignments
        if a.get("principalType") == "Group" and a.get("principalName")
    }
    directory = Directory(members, members_where, groups) if members is not None else None
    found: dict[str, Principal] = {}
    skipped: list[str] = []
    for assignment in assignments:
        kind_name = assignment.get("principalType") or "Unknown"
        name = assignment.get("principalName") or ""
        object_id = assignment.get("principalId") or ""
        role = assignment.get("roleDefinitionName") or ""
        scope = assignment.get("scope") or "/"
        if not role or not (name or object_id):
            fields = {k: assignment.get(k) for k in ("principalId", "principalName", "roleDefinitionName")}
            raise UsageError(
                "azure export: an assignment lacks roleDefinitionName or a principal (id or name): "
                f"{json.dumps(fields)}"
            )
        if kind_name == "Unknown" or not name:
            pid = f"azure:unknown/{object_id}"
            principal = found.setdefault(pid, Principal(pid, "user", object_id, resolved=False))
            principal.unresolved.append(
                f"{role} at {scope} is assigned to object {object_id}, which no longer "
                "resolves (deleted?); not bound: remove the assignment at the source"
            )
            continue
        kind = _KINDS.get(kind_name)
        if kind is None:
            skipped.append(f"azure:{kind_name}/{name}: {role} at {scope}: no Kubernetes subject for a {kind_name}")
            continue
        pid = f"azure:{kind}/{name}"
        principal = found.get(pid)
        if principal is None:
            principal = found[pid] = Principal(pid, kind, name)
            if kind == "group" and directory is not None:
                _members(principal, directory, object_id)
        level, escalates = role_level(role, custom, definitions)
        if escalates:
            principal.escalations.append(f"{pid} -> {role} at {scope}: can assign roles ({ASSIGNS_ROLES})")
        if level is None:
            if not escalates:
                principal.unmapped.append(
                    f"{role} at {scope}: custom role; classify it under phases.iam.azure_roles or export its "
                    "definition (source.iam.azure_role_definitions)"
                )
            continue
        principal.grants.append((f"{role} at {scope}", int(level)))
        if "/providers/" in scope and "/managementGroups/" not in scope:
            principal.widened.append(f"{role}: scoped to {scope} in the source; namespace-wide on the target")
        if assignment.get("condition"):
            principal.widened.append(f"{role} at {scope}: its condition is dropped")
    return list(found.values()), skipped


def _members(principal: Principal, directory: Directory, object_id: str) -> None:
    listed = directory.members_of(object_id, principal.name)
    if listed is None:
        principal.resolved = False
        principal.unresolved.append(
            f"group {principal.name} ({object_id}): its members are not in {directory.where}; not bound"
        )
        return
    principal.members, unresolved, nested = listed
    principal.unresolved += unresolved
    if nested:
        principal.notes.append(
            f"nested groups {', '.join(nested)}: their members reach the cluster only if the identity provider "
            "flattens group claims"
        )
