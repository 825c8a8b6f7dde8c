"""Source principals and policies to target RBAC, with a report of what is unmapped, ambiguous or widened.

Every source permission is classified into one of three access levels (read, write, admin),
which the target profile names as roles (its `rbac_roles`, least privileged first). A principal
is bound to the role of the highest level it holds. Kubernetes RBAC is coarser than IAM: it has
no deny, no conditions and no per-resource scope inside a namespace, so whatever the source
restricted that way is reported as *widened*; permissions with no counterpart on the target are
*unmapped*; what cannot be classified with certainty is *ambiguous* until the plan overrides it.

Sources: AWS IAM (live through the IAM API, or the JSON of `aws iam
get-account-authorization-details`), Azure role assignments (the JSON of `az role assignment
list --all`) and LDAP groups (LDIF; groups carry no permissions, the plan gives each a level).
"""

from __future__ import annotations

import base64
import enum
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ferry.errors import UsageError

if TYPE_CHECKING:
    from ferry.phases.iam import IamSettings
    from ferry.plan import AwsIamSource, LoadedPlan


class Level(enum.IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(f"{text!r} is not a level (read, write, admin)") from None


# AWS services whose permissions a Kubernetes GPU namespace can stand in for.
DEFAULT_AWS_SERVICES = (
    "s3",
    "ecr",
    "eks",
    "ec2",
    "sagemaker",
    "elasticfilesystem",
    "fsx",
    "cloudwatch",
    "logs",
    "autoscaling",
    "batch",
)
# Writing to these manages identities and permissions: on the target that is the admin role.
_AWS_ADMIN_SERVICES = frozenset({"iam", "organizations", "sso", "identitystore"})
_READ_VERBS = ("get", "list", "describe", "head", "select", "search", "lookup", "view", "batchget", "query", "read")

_AZURE_ADMIN_ROLES = frozenset(
    {
        "Owner",
        "User Access Administrator",
        "Role Based Access Control Administrator",
        "Azure Kubernetes Service Cluster Admin Role",
        "Azure Kubernetes Service RBAC Cluster Admin",
        "Azure Kubernetes Service RBAC Admin",
    }
)
_AZURE_WRITE_SUFFIXES = ("Contributor", "Data Owner", "Writer", "AcrPush", "AcrDelete")
_AZURE_READ_SUFFIXES = ("Reader", "AcrPull", "Azure Kubernetes Service Cluster User Role")

SUBJECT_KINDS = {"user": "User", "group": "Group", "service": "ServiceAccount"}
RBAC_GROUP = "rbac.authorization.k8s.io"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ferry"}


@dataclass
class Principal:
    """One identity of a source with what it may do, classified."""

    id: str  # "aws:user/alice", "azure:group/ml-team", "ldap:group/ml-admins"
    kind: str  # user | group | service
    name: str
    members: list[str] = field(default_factory=list)
    grants: list[tuple[str, int]] = field(default_factory=list)  # (what, Level) of each mapped permission
    unmapped: list[str] = field(default_factory=list)
    widened: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    override: str | None = None  # the role the plan set, or "none"
    level: int | None = None  # the level it is bound at (None: not bound)
    subject_name: str | None = None  # the name the target's identity provider knows it by, if not its own

    @property
    def source(self) -> str:
        return self.id.split(":", 1)[0]

    def derived_level(self) -> Level | None:
        return Level(max(level for _, level in self.grants)) if self.grants else None


@dataclass
class Mapping:
    """The result: every principal with its level, the role of each level, and what did not fit."""

    namespace: str
    roles: dict[int, str]  # Level -> target role
    principals: list[Principal]
    skipped: list[str] = field(default_factory=list)

    def subject(self, principal: Principal) -> tuple[str, str]:
        """The Kubernetes subject (kind, name) a principal is bound as."""
        kind = SUBJECT_KINDS[principal.kind]
        name = principal.subject_name or principal.name
        return kind, service_account_name(name) if kind == "ServiceAccount" else name

    def totals(self) -> dict[str, int]:
        grants = sum(len(p.grants) for p in self.principals)
        unmapped = sum(len(p.unmapped) for p in self.principals)
        return {
            "principals": len(self.principals),
            "bound": sum(p.level is not None for p in self.principals),
            "grants": grants,
            "unmapped": unmapped,
            "widened": sum(len(p.widened) for p in self.principals),
            "ambiguous": sum(len(p.ambiguous) for p in self.principals),
            "skipped": len(self.skipped),
        }

    def coverage(self) -> float:
        """Mapped permissions over all permissions found (1.0 when there were none)."""
        totals = self.totals()
        found = totals["grants"] + totals["unmapped"]
        return totals["grants"] / found if found else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "roles": {Level(k).name.lower(): v for k, v in self.roles.items()},
            "totals": self.totals(),
            "coverage": round(self.coverage(), 4),
            "principals": [asdict(p) for p in self.principals],
            "skipped": self.skipped,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mapping:
        roles = {int(Level.parse(k)): v for k, v in data["roles"].items()}
        principals = [Principal(**{**p, "grants": [tuple(g) for g in p["grants"]]}) for p in data["principals"]]
        return cls(data["namespace"], roles, principals, data["skipped"])

    def markdown(self) -> str:
        """The mapping report a reviewer reads: one row per principal, then what did not fit."""
        totals = self.totals()
        lines = [
            f"# IAM mapping to namespace `{self.namespace}`",
            "",
            f"{totals['principals']} principal(s), {totals['bound']} bound; {totals['grants']} permission(s) mapped, "
            f"{totals['unmapped']} unmapped (coverage {self.coverage():.1%}); {totals['widened']} widened, "
            f"{totals['ambiguous']} ambiguous.",
            "",
            "| principal | subject | level | role | notes |",
            "|---|---|---|---|---|",
        ]
        for p in self.principals:
            kind, name = self.subject(p)
            level = Level(p.level).name.lower() if p.level else "-"
            role = self.roles[p.level] if p.level else "not bound"
            notes = [f"override {p.override}"] if p.override else []
            notes += [
                f"{n} {what}"
                for n, what in (
                    (len(p.unmapped), "unmapped"),
                    (len(p.widened), "widened"),
                    (len(p.ambiguous), "ambiguous"),
                )
                if n
            ]
            lines.append(f"| {p.id} | {kind} {name} | {level} | {role} | {', '.join(notes)} |")
        for title, attr in (("Unmapped", "unmapped"), ("Ambiguous", "ambiguous"), ("Widened", "widened")):
            entries = [f"- {p.id}: {text}" for p in self.principals for text in getattr(p, attr)]
            if entries:
                lines += ["", f"## {title}", *entries]
        if self.skipped:
            lines += ["", "## Not carried", *(f"- {text}" for text in self.skipped)]
        return "\n".join(lines) + "\n"


def service_account_name(name: str) -> str:
    """A DNS-1123 name for a workload identity (AWS role, Azure service principal)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return slug or "unnamed"


def _as_list(value: Any) -> list:
    return [value] if isinstance(value, str | dict) else list(value or [])


def _document(raw: Any) -> dict:
    """A policy document as the API or an export holds it: parsed, or URL-encoded JSON."""
    if isinstance(raw, str):
        return json.loads(unquote(raw))
    return raw


def aws_action_level(action: str, services: Iterable[str]) -> Level | str:
    """The level an IAM action grants on the target, or why it has none."""
    service, sep, verb = action.partition(":")
    service = service.lower()
    if action == "*" or service == "*":
        return Level.ADMIN
    if not sep or not verb:
        return f"{action!r} is not an IAM action"
    # IAM matches action names case-insensitively.
    read = verb != "*" and verb.lower().startswith(_READ_VERBS)
    if service in _AWS_ADMIN_SERVICES:
        return Level.READ if read else Level.ADMIN
    if service not in services:
        return f"{action}: {service} has no counterpart on the target"
    return Level.READ if read else Level.WRITE


def _aws_policy(principal: Principal, policy: str, document: dict, services: Iterable[str]) -> None:
    """Classify every statement of one policy into principal's grants, unmapped, widened, ambiguous."""
    for index, statement in enumerate(_as_list(document.get("Statement"))):
        where = f"{policy} statement {statement.get('Sid') or index}"
        actions = _as_list(statement.get("Action"))
        if statement.get("Effect") == "Deny":
            principal.widened.append(
                f"{where}: Deny {', '.join(actions or _as_list(statement.get('NotAction')))} has no RBAC "
                "counterpart and is dropped"
            )
            continue
        for negated in ("NotAction", "NotResource"):
            if negated in statement:
                principal.ambiguous.append(
                    f"{where}: {negated} {', '.join(_as_list(statement[negated]))}: what it allows cannot be "
                    "mapped exactly; set an override"
                )
        mapped = False
        for action in actions:
            level = aws_action_level(action, services)
            if isinstance(level, Level):
                principal.grants.append((f"{policy}: {action}", int(level)))
                mapped = True
            else:
                principal.unmapped.append(f"{policy}: {level}")
        if not mapped:
            continue
        resources = _as_list(statement.get("Resource"))
        if resources and resources != ["*"]:
            principal.widened.append(
                f"{where}: scoped to {', '.join(resources)} in the source; namespace-wide on the target"
            )
        if statement.get("Condition"):
            principal.widened.append(f"{where}: condition on {', '.join(statement['Condition'])} is dropped")


def aws_principals(details: dict, services: Iterable[str] = DEFAULT_AWS_SERVICES) -> tuple[list[Principal], list[str]]:
    """Users, groups and roles of `get-account-authorization-details`; also what is not carried, and why."""
    services = frozenset(s.lower() for s in services)
    documents = {}
    for policy in details.get("Policies", []):
        default = next((v for v in policy.get("PolicyVersionList", []) if v.get("IsDefaultVersion")), None)
        if default is not None:
            documents[policy["Arn"]] = _document(default["Document"])
    principals: list[Principal] = []
    skipped: list[str] = []

    def policies(principal: Principal, entry: dict, inline_key: str) -> None:
        for attached in entry.get("AttachedManagedPolicies", []):
            document = documents.get(attached["PolicyArn"])
            if document is None:
                principal.unmapped.append(f"{attached['PolicyName']}: the export holds no document for it")
            else:
                _aws_policy(principal, attached["PolicyName"], document, services)
        for inline in entry.get(inline_key, []):
            _aws_policy(principal, f"{inline['PolicyName']} (inline)", _document(inline["PolicyDocument"]), services)
        boundary = (entry.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
        if boundary and principal.grants:
            principal.widened.append(f"the permissions boundary {boundary} caps it in the source; RBAC has none")

    members: dict[str, list[str]] = {}
    for user in details.get("UserDetailList", []):
        for group in user.get("GroupList", []):
            members.setdefault(group, []).append(user["UserName"])
    for user in details.get("UserDetailList", []):
        principal = Principal(f"aws:user/{user['UserName']}", "user", user["UserName"])
        policies(principal, user, "UserPolicyList")
        principals.append(principal)
    for group in details.get("GroupDetailList", []):
        name = group["GroupName"]
        principal = Principal(f"aws:group/{name}", "group", name, sorted(members.get(name, [])))
        policies(principal, group, "GroupPolicyList")
        principals.append(principal)
    for role in details.get("RoleDetailList", []):
        if role.get("Path", "/").startswith("/aws-service-role/"):
            skipped.append(f"aws:role/{role['RoleName']}: service-linked role, managed by AWS itself")
            continue
        principal = Principal(f"aws:role/{role['RoleName']}", "service", role["RoleName"])
        policies(principal, role, "RolePolicyList")
        principals.append(principal)
    return principals, skipped


def aws_iam_call(source: AwsIamSource, call: Callable[[Any], Any]) -> Any:
    """call(client) on an IAM client for the source; SDK errors come out as ferry errors naming the endpoint."""
    import boto3
    import botocore.config

    from connectors.s3 import translate

    session_args = source.credentials.boto3_session_args()
    try:
        session = boto3.session.Session(**session_args)
        # The SDK retries each page; Prefect retries the whole task only for what is still transient.
        config = botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 4})
        return call(session.client("iam", endpoint_url=source.endpoint_url, region_name=source.region, config=config))
    except Exception as exc:  # noqa: BLE001 - SDK errors become ferry errors here, at the boundary
        raise translate(exc, f"IAM API at {source.endpoint_url or 'AWS'}") from None


def fetch_aws_details(client: Any) -> dict:
    """The whole account's authorization details from the live IAM API, every page merged."""
    merged: dict[str, list] = {"UserDetailList": [], "GroupDetailList": [], "RoleDetailList": [], "Policies": []}
    for page in client.get_paginator("get_account_authorization_details").paginate():
        for key, items in merged.items():
            items.extend(page.get(key, []))
    return merged


def azure_role_level(role: str, custom: dict[str, Level]) -> Level | None:
    """The level of an Azure built-in role name, or of a custom role the plan classified; None if unknown."""
    if role in custom:
        return custom[role]
    if role in _AZURE_ADMIN_ROLES:
        return Level.ADMIN
    if role.endswith(_AZURE_WRITE_SUFFIXES):
        return Level.WRITE
    if role.endswith(_AZURE_READ_SUFFIXES):
        return Level.READ
    return None


def azure_principals(assignments: list[dict], custom: dict[str, Level]) -> tuple[list[Principal], list[str]]:
    """Principals of `az role assignment list --all` output, one per principal, with every assignment; also
    the assignments of principals Kubernetes cannot name (foreign groups, devices, deleted principals)."""
    kinds = {"User": "user", "Group": "group", "ServicePrincipal": "service", "MSI": "service"}
    found: dict[str, Principal] = {}
    skipped: list[str] = []
    for assignment in assignments:
        kind_name = assignment.get("principalType") or ""
        name = assignment.get("principalName") or assignment.get("principalId") or ""
        role = assignment.get("roleDefinitionName") or ""
        if not kind_name or not name or not role:
            fields = {k: assignment.get(k) for k in ("principalType", "principalName", "roleDefinitionName")}
            raise UsageError(
                "azure export: an assignment lacks principalType, principalName (or principalId) or "
                f"roleDefinitionName: {json.dumps(fields)}"
            )
        scope = assignment.get("scope") or "/"
        kind = kinds.get(kind_name)
        if kind is None:
            skipped.append(f"azure:{kind_name}/{name}: {role} at {scope}: no Kubernetes subject for a {kind_name}")
            continue
        pid = f"azure:{kind}/{name}"
        principal = found.setdefault(pid, Principal(pid, kind, name))
        level = azure_role_level(role, custom)
        if level is None:
            principal.unmapped.append(f"{role} at {scope}: custom role; classify it under phases.iam.azure_roles")
            continue
        principal.grants.append((f"{role} at {scope}", int(level)))
        if "/providers/" in scope and "/managementGroups/" not in scope:
            principal.widened.append(f"{role}: scoped to {scope} in the source; namespace-wide on the target")
        if assignment.get("condition"):
            principal.widened.append(f"{role} at {scope}: its condition is dropped")
    return list(found.values()), skipped


def parse_ldif(text: str) -> list[dict[str, list[str]]]:
    """Entries of an LDIF file as attribute -> values (continuations joined, base64 values decoded)."""
    entries: list[dict[str, list[str]]] = []
    lines: list[str] = []
    for raw in [*text.splitlines(), ""]:
        if raw.startswith(" ") and lines:
            lines[-1] += raw[1:]
            continue
        if raw.strip():
            if not raw.startswith("#"):
                lines.append(raw)
            continue
        if lines:
            entry: dict[str, list[str]] = {}
            for line in lines:
                attr, sep, value = line.partition(":")
                if not sep:
                    raise UsageError(f"ldif: {line!r} is not 'attribute: value'")
                if value.startswith(":"):
                    value = base64.b64decode(value[1:].strip()).decode("utf-8")
                entry.setdefault(attr.strip().lower(), []).append(value.strip())
            entries.append(entry)
            lines = []
    return entries


def _member_name(value: str) -> str:
    """alice from uid=alice,ou=people,dc=example,dc=com; a plain name as it is."""
    first = value.split(",", 1)[0]
    return first.split("=", 1)[1] if "=" in first else first


def ldap_principals(ldif: str, levels: dict[str, Level]) -> list[Principal]:
    """Groups of an LDIF export; each group's level comes from the plan (LDAP holds no permissions)."""
    group_classes = {"groupofnames", "groupofuniquenames", "posixgroup", "group"}
    principals = []
    for entry in parse_ldif(ldif):
        if not group_classes & {c.lower() for c in entry.get("objectclass", [])}:
            continue
        name = entry.get("cn", [""])[0] or _member_name(entry.get("dn", ["?"])[0])
        members = [_member_name(v) for key in ("member", "uniquemember", "memberuid") for v in entry.get(key, [])]
        principal = Principal(f"ldap:group/{name}", "group", name, sorted(members))
        if name in levels:
            principal.grants.append(("phases.iam.ldap_groups", int(levels[name])))
        else:
            principal.unmapped.append("LDAP groups carry no permissions: give it a level under phases.iam.ldap_groups")
        principals.append(principal)
    unknown = sorted(set(levels) - {p.name for p in principals})
    if unknown:
        raise UsageError(f"phases.iam.ldap_groups: the LDIF export has no group named {', '.join(map(repr, unknown))}")
    return principals


def map_principals(
    principals: list[Principal],
    namespace: str,
    roles: list[str],
    overrides: dict[str, str],
    skipped: Iterable[str] = (),
    subjects: dict[str, str] | None = None,
) -> Mapping:
    """Decide each principal's level: derived, or the plan's override; subjects claimed twice are ambiguous.

    subjects renames principals to what the target's identity provider calls them (an AWS user
    alice who signs in to the cluster as alice@corp.example.com), so one person found in several
    sources is one subject.
    """
    if len(roles) != 3:
        raise UsageError(f"the target profile's rbac_roles must name 3 roles (read, write, admin), not {roles}")
    by_role = {role: Level(i + 1) for i, role in enumerate(roles)}
    known = {p.id for p in principals}
    for pid in subjects or {}:
        if pid not in known:
            raise UsageError(f"phases.iam.subjects: {pid!r} names no principal in the IAM sources")
    for pid, role in overrides.items():
        if pid not in known:
            raise UsageError(f"phases.iam.overrides: {pid!r} names no principal in the IAM sources")
        if role != "none" and role not in by_role:
            raise UsageError(f"phases.iam.overrides.{pid}: {role!r} is not a role of the target ({', '.join(roles)})")
    mapping = Mapping(namespace, {int(level): role for role, level in by_role.items()}, principals, list(skipped))
    for p in principals:
        p.subject_name = (subjects or {}).get(p.id)
        derived = p.derived_level()
        if p.id in overrides:
            p.override = overrides[p.id]
            p.level = None if p.override == "none" else int(by_role[p.override])
            if p.level and (derived is None or p.level > derived):
                was = derived.name.lower() if derived else "no access"
                p.widened.append(f"the plan's override binds {p.override} where the source gives {was}")
            # An override is the plan's answer to what was ambiguous about the principal itself.
            p.ambiguous.clear()
        else:
            p.level = int(derived) if derived else None
    claimed: dict[tuple[str, str], list[Principal]] = {}
    for p in principals:
        if p.level is not None:
            claimed.setdefault(mapping.subject(p), []).append(p)
    for (kind, name), claimants in claimed.items():
        levels = {p.level for p in claimants}
        if len(levels) > 1:
            # Least privilege until the plan says which is right.
            lowest = min(levels)
            ids = ", ".join(f"{p.id} ({Level(p.level).name.lower()})" for p in claimants)
            for p in claimants:
                p.ambiguous.append(
                    f"{kind} {name} is claimed by {ids}: bound at {Level(lowest).name.lower()}; "
                    "override one so they agree"
                )
                p.level = lowest
    return mapping


def render_rbac(mapping: Mapping) -> list[dict]:
    """ServiceAccounts for workload identities and one RoleBinding per target role, subjects sorted."""
    docs: list[dict] = []
    subjects: dict[str, set[tuple[str, str]]] = {}
    for p in mapping.principals:
        if p.level is None:
            continue
        subjects.setdefault(mapping.roles[p.level], set()).add(mapping.subject(p))
    accounts = sorted({name for subs in subjects.values() for kind, name in subs if kind == "ServiceAccount"})
    for name in accounts:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": mapping.namespace, "labels": dict(MANAGED_BY)},
            }
        )
    for role in [mapping.roles[level] for level in sorted(mapping.roles)]:
        if role not in subjects:
            continue
        entries = []
        for kind, name in sorted(subjects[role]):
            if kind == "ServiceAccount":
                entries.append({"kind": kind, "name": name, "namespace": mapping.namespace})
            else:
                entries.append({"kind": kind, "name": name, "apiGroup": RBAC_GROUP})
        docs.append(
            {
                "apiVersion": f"{RBAC_GROUP}/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"ferry-{role}", "namespace": mapping.namespace, "labels": dict(MANAGED_BY)},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
                "subjects": entries,
            }
        )
    return docs


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
        found, not_carried = aws_principals(details, settings.aws_services)
        principals += found
        skipped += not_carried
    if sources.azure_export:
        assignments = _read_export(loaded.resolve(sources.azure_export), "azure_export")
        if not isinstance(assignments, list):
            raise UsageError(
                f"source.iam.azure_export: {sources.azure_export}: not the output of "
                "`az role assignment list --all` (a JSON list)"
            )
        found, not_carried = azure_principals(assignments, {k: Level.parse(v) for k, v in settings.azure_roles.items()})
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
