"""What the iam phase decides: each principal's level, why, and what the mapping could not carry.

Every source permission is classified into one of three access levels (read, write, admin), which
the target profile names as roles (its `rbac_roles`, least privileged first). A principal is bound
to the role of the highest level it *effectively* holds, never above it. Kubernetes RBAC is
coarser than the sources: it has no deny, no conditions and no per-resource scope inside a
namespace, so what the source restricted that way is reported as *widened*; permissions with no
counterpart on the target are *unmapped*; what cannot be decided with certainty is *ambiguous*
until the plan overrides it; a principal that can raise its own access is on an *escalation* path;
a grant that holds only under a condition is *conditional* (not bound); a principal or member the
exports cannot resolve is *unresolved* (never bound).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ferry.errors import UsageError


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


SUBJECT_KINDS = {"user": "User", "group": "Group", "service": "ServiceAccount"}
RBAC_GROUP = "rbac.authorization.k8s.io"
# The labels of everything ferry applies: rollbacks and the manifests phase find its objects by them.
MANAGED_BY = "app.kubernetes.io/managed-by"
PLAN_LABEL = "ferry.io/plan"

# The report's categories, in the order a reviewer reads them: attribute of Principal -> (heading, label).
CATEGORIES = {
    "escalations": ("Escalation paths", "escalation path"),
    "unresolved": ("Unresolved", "unresolved"),
    "conditional": ("Conditional", "conditional"),
    "ambiguous": ("Ambiguous", "ambiguous"),
    "widened": ("Widened", "widened"),
    "unmapped": ("Unmapped", "unmapped"),
}


@dataclass
class Principal:
    """One identity of a source with what it may effectively do, classified."""

    id: str  # "aws:user/alice", "azure:group/ml-team", "ldap:group/ml-admins"
    kind: str  # user | group | service
    name: str
    members: list[str] = field(default_factory=list)  # a group's effective members (nested groups expanded)
    grants: list[tuple[str, int]] = field(default_factory=list)  # (what, Level) of each effective permission
    unmapped: list[str] = field(default_factory=list)
    widened: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    escalations: list[str] = field(default_factory=list)  # "a -> b -> method (actions)"
    unresolved: list[str] = field(default_factory=list)  # the principal or members the exports cannot resolve
    conditional: list[str] = field(default_factory=list)  # grants that hold only under a condition: not bound
    notes: list[str] = field(default_factory=list)  # why the level is what it is: denies, groups, edges
    # False when the principal itself does not resolve (a deleted Azure principal, a user in a group the
    # export lacks): it is never bound. Its members not resolving leaves a group resolved.
    resolved: bool = True
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

    def principal(self, pid: str) -> Principal:
        """The principal whose id is pid, or a UsageError naming the ids there are."""
        for p in self.principals:
            if p.id == pid:
                return p
        known = ", ".join(p.id for p in self.principals)
        raise UsageError(f"no principal {pid!r} in the IAM sources; there are: {known}")

    def escalating(self) -> list[Principal]:
        """Principals on an escalation path that no override of the plan has accepted."""
        return [p for p in self.principals if p.escalations and p.override is None]

    def totals(self) -> dict[str, int]:
        return {
            "principals": len(self.principals),
            "bound": sum(p.level is not None for p in self.principals),
            "grants": sum(len(p.grants) for p in self.principals),
            "unmapped": sum(len(p.unmapped) for p in self.principals),
            "widened": sum(len(p.widened) for p in self.principals),
            "ambiguous": sum(len(p.ambiguous) for p in self.principals),
            "escalation": len(self.escalating()),
            "unresolved": sum(len(p.unresolved) for p in self.principals),
            "conditional": sum(len(p.conditional) for p in self.principals),
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

    def headline(self, p: Principal) -> str:
        """One principal's outcome in a few words: its role, or why it has none."""
        if p.level is not None:
            how = f"override {p.override}" if p.override else Level(p.level).name.lower()
            return f"{self.roles[p.level]} ({how})"
        if p.override == "none":
            return "not bound (override none)"
        if not p.resolved:
            return "not bound: unresolved"
        if p.conditional and not p.grants:
            return "not bound: conditional only"
        if p.unmapped and not p.grants:
            return "not bound: nothing that maps"
        return "not bound: no effective privileges"

    def explain(self, pid: str) -> str:
        """One principal as the report gives it: level and the grants behind it, then every note and category."""
        p = self.principal(pid)
        kind, name = self.subject(p)
        lines = [f"{p.id}: {self.headline(p)}"] + ([f"  subject: {kind} {name}"] if p.resolved else [])
        if p.members:
            lines.append(f"  effective members: {', '.join(p.members)}")
        lines += [f"  grants {Level(level).name.lower()}: {what}" for what, level in p.grants]
        lines += [f"  {text}" for text in p.notes]
        for attr, (_, label) in CATEGORIES.items():
            lines += [f"  {label}: {text}" for text in getattr(p, attr)]
        return "\n".join(lines) + "\n"

    def markdown(self) -> str:
        """The mapping report a reviewer reads: one row per principal, each category, then every principal."""
        totals = self.totals()
        lines = [
            f"# IAM mapping to namespace `{self.namespace}`",
            "",
            f"{totals['principals']} principal(s), {totals['bound']} bound; {totals['grants']} permission(s) mapped, "
            f"{totals['unmapped']} unmapped (coverage {self.coverage():.1%}); {totals['escalation']} on an "
            f"escalation path, {totals['unresolved']} unresolved, {totals['conditional']} conditional, "
            f"{totals['widened']} widened, {totals['ambiguous']} ambiguous.",
            "",
            "| principal | subject | outcome | notes |",
            "|---|---|---|---|",
        ]
        for p in self.principals:
            subject = " ".join(self.subject(p)) if p.resolved else "-"
            counts = [f"{len(getattr(p, attr))} {label}" for attr, (_, label) in CATEGORIES.items() if getattr(p, attr)]
            lines.append(f"| {p.id} | {subject} | {self.headline(p)} | {', '.join(counts)} |")
        for attr, (title, _) in CATEGORIES.items():
            entries = [f"- {p.id}: {text}" for p in self.principals for text in getattr(p, attr)]
            if entries:
                lines += ["", f"## {title}", *entries]
        if self.skipped:
            lines += ["", "## Not carried", *(f"- {text}" for text in self.skipped)]
        lines += ["", "## Each principal", ""]
        for p in self.principals:
            lines += ["```", self.explain(p.id).rstrip("\n"), "```"]
        return "\n".join(lines) + "\n"


def service_account_name(name: str) -> str:
    """A DNS-1123 name for a workload identity (AWS role, Azure service principal)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")
    return slug or "unnamed"


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
    sources is one subject. A principal that does not resolve is never bound, whatever the plan says.
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
        if not p.resolved:
            p.level = None
            if p.id in overrides:
                p.notes.append(f"the plan's override {overrides[p.id]} is not applied: the principal does not resolve")
        elif p.id in overrides:
            p.override = overrides[p.id]
            p.level = None if p.override == "none" else int(by_role[p.override])
            if p.level and (derived is None or p.level > derived):
                was = derived.name.lower() if derived else "no access"
                p.widened.append(f"the plan's override binds {p.override} where the source gives {was}")
            if p.escalations:
                p.notes.append(f"the plan's override {p.override} accepts its escalation path(s)")
            # An override is the plan's answer to what was ambiguous about the principal itself.
            p.ambiguous.clear()
        else:
            p.level = int(derived) if derived else None
    claimed: dict[tuple[str, str], list[Principal]] = {}
    for p in principals:
        if p.level is not None:
            claimed.setdefault(mapping.subject(p), []).append(p)
    for (kind, name), claimants in claimed.items():
        if len(claimants) < 2:
            continue
        ids = ", ".join(f"{p.id} ({Level(p.level).name.lower()})" for p in claimants)
        levels = {p.level for p in claimants}
        for p in claimants:
            if len(levels) > 1:
                # Least privilege until the plan says which is right.
                lowest = min(levels)
                p.ambiguous.append(
                    f"{kind} {name} is claimed by {ids}: bound at {Level(lowest).name.lower()}; "
                    "override one so they agree"
                )
                p.level = lowest
            else:
                p.notes.append(f"{kind} {name} is named by more than one principal: {ids}; bound once")
    _service_accounts_run_by_others(mapping)
    return mapping


def _service_accounts_run_by_others(mapping: Mapping) -> None:
    """A ServiceAccount bound above people who can create pods is theirs too: Kubernetes lets whoever creates
    pods in a namespace run them as any ServiceAccount there. Reported as widened on the ServiceAccount."""
    runners = [
        p
        for p in mapping.principals
        if p.level and p.level >= Level.WRITE and mapping.subject(p)[0] != "ServiceAccount"
    ]
    for p in mapping.principals:
        if not p.level or mapping.subject(p)[0] != "ServiceAccount":
            continue
        below = [q for q in runners if q.level < p.level]
        if below:
            p.widened.append(
                f"bound at {mapping.roles[p.level]} in {mapping.namespace}, where {len(below)} subject(s) at "
                f"{mapping.roles[min(q.level for q in below)]} can create pods and run them as this ServiceAccount; "
                "bind it in a namespace of its own"
            )


def render_rbac(mapping: Mapping, plan: str) -> list[dict]:
    """ServiceAccounts for workload identities and one RoleBinding per target role, subjects sorted."""
    labels = {MANAGED_BY: "ferry", PLAN_LABEL: plan}
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
                "metadata": {"name": name, "namespace": mapping.namespace, "labels": dict(labels)},
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
                "metadata": {"name": f"ferry-{role}", "namespace": mapping.namespace, "labels": dict(labels)},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
                "subjects": entries,
            }
        )
    return docs


def _roles_by_subject(docs: list[dict]) -> dict[str, set[str]]:
    """Each RoleBinding subject (`Kind/name`) and the roles it is bound to."""
    roles: dict[str, set[str]] = {}
    for doc in docs:
        if doc.get("kind") == "RoleBinding":
            for subject in doc.get("subjects") or []:
                roles.setdefault(f"{subject['kind']}/{subject['name']}", set()).add(doc["roleRef"]["name"])
    return roles


def binding_changes(rendered: list[dict], published: list[dict]) -> dict[str, list[str]]:
    """What publishing rendered would do to the bindings published before, per subject: added (with its roles),
    changed (the roles before and after), removed (with the roles it loses)."""
    new, old = _roles_by_subject(rendered), _roles_by_subject(published)
    words = ", ".join
    return {
        "add": [f"{s} ({words(sorted(new[s]))})" for s in sorted(new.keys() - old.keys())],
        "change": [
            f"{s} ({words(sorted(old[s]))} -> {words(sorted(new[s]))})"
            for s in sorted(new.keys() & old.keys())
            if new[s] != old[s]
        ],
        "remove": [f"{s} ({words(sorted(old[s]))})" for s in sorted(old.keys() - new.keys())],
    }
