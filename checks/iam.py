"""The iam gate: how much of the source's access carried over; what is ambiguous, widened, on an escalation
path, unresolved or conditional; and whether the rendered bindings are what the mapping decided and valid
Kubernetes objects."""

from __future__ import annotations

from checks.kube_schema import (
    SchemaNotFoundError,
    VersionNotSupportedError,
    schema_errors,
    schema_version,
    unknown_version,
)
from ferry.iam.model import RBAC_GROUP, Level, Mapping
from ferry.results import CheckResult, Status


def check_iam_coverage(mapping: Mapping, min_coverage: float) -> CheckResult:
    """Mapped permissions over all permissions found; below the threshold FAIL, any unmapped WARN."""
    totals = mapping.totals()
    coverage = mapping.coverage()
    measured = {"coverage": round(coverage, 4), "mapped": totals["grants"], "unmapped": totals["unmapped"]}
    evidence = [f"{p.id}: {text}" for p in mapping.principals for text in p.unmapped]
    status = Status.FAIL if coverage < min_coverage else Status.WARN if totals["unmapped"] else Status.PASS
    return CheckResult("iam.coverage", status, measured, {"min_coverage": min_coverage}, evidence)


def check_iam_ambiguous(mapping: Mapping, max_ambiguous: int) -> CheckResult:
    """Principals whose access could not be decided with certainty (the plan's overrides settle them)."""
    evidence = [f"{p.id}: {text}" for p in mapping.principals for text in p.ambiguous]
    status = Status.FAIL if len(evidence) > max_ambiguous else Status.WARN if evidence else Status.PASS
    return CheckResult(
        "iam.ambiguous", status, {"ambiguous": len(evidence)}, {"max_ambiguous": max_ambiguous}, evidence
    )


def check_iam_widened(mapping: Mapping, allow_widening: bool) -> CheckResult:
    """What the target grants more broadly than the source did (scopes, conditions, denies, overrides)."""
    evidence = [f"{p.id}: {text}" for p in mapping.principals for text in p.widened]
    status = Status.PASS if not evidence else Status.WARN if allow_widening else Status.FAIL
    return CheckResult("iam.widened", status, {"widened": len(evidence)}, {"allow_widening": allow_widening}, evidence)


def check_iam_escalation(mapping: Mapping, max_escalation: int) -> CheckResult:
    """Principals that can raise their own access (escalation paths no override of the plan accepted)."""
    escalating = mapping.escalating()
    evidence = [f"{p.id}: {text}" for p in escalating for text in p.escalations]
    accepted = sum(1 for p in mapping.principals if p.escalations and p.override is not None)
    status = Status.FAIL if len(escalating) > max_escalation else Status.WARN if escalating else Status.PASS
    measured = {"escalation": len(escalating), "accepted_by_override": accepted}
    return CheckResult("iam.escalation", status, measured, {"max_escalation": max_escalation}, evidence)


def _counted(name: str, mapping: Mapping, attr: str, limit: int | None) -> CheckResult:
    """A category the gate counts: WARN when there is any, FAIL above the plan's limit when it sets one."""
    evidence = [f"{p.id}: {text}" for p in mapping.principals for text in getattr(p, attr)]
    status = Status.FAIL if limit is not None and len(evidence) > limit else Status.WARN if evidence else Status.PASS
    return CheckResult(f"iam.{name}", status, {name: len(evidence)}, {f"max_{name}": limit}, evidence)


def check_iam_unresolved(mapping: Mapping, max_unresolved: int | None) -> CheckResult:
    """Principals and members the exports cannot resolve (never bound)."""
    return _counted("unresolved", mapping, "unresolved", max_unresolved)


def check_iam_conditional(mapping: Mapping, max_conditional: int | None) -> CheckResult:
    """Grants that hold only under a condition the plan does not assume (not bound)."""
    return _counted("conditional", mapping, "conditional", max_conditional)


def check_rbac_bindings(docs: list[dict], mapping: Mapping) -> CheckResult:
    """The rendered bindings give each subject exactly the role the mapping decided: no more, no less."""
    expected: dict[tuple[str, str], str] = {}
    for p in mapping.principals:
        if p.level is not None:
            expected[mapping.subject(p)] = mapping.roles[p.level]
    found: dict[tuple[str, str], list[str]] = {}
    problems = []
    roles = set(mapping.roles.values())
    for doc in docs:
        if doc.get("kind") != "RoleBinding":
            continue
        ref = doc.get("roleRef", {})
        role = ref.get("name", "")
        if role not in roles or ref.get("apiGroup") != RBAC_GROUP:
            problems.append(f"{doc['metadata']['name']}: binds {ref}, not a role of the target profile")
            continue
        if doc["metadata"].get("namespace") != mapping.namespace:
            problems.append(
                f"{doc['metadata']['name']}: namespace {doc['metadata'].get('namespace')!r}, not {mapping.namespace!r}"
            )
        for subject in doc.get("subjects", []):
            found.setdefault((subject["kind"], subject["name"]), []).append(role)
    rank = {role: level for level, role in mapping.roles.items()}
    for subject, bound in sorted(found.items()):
        want = expected.get(subject)
        if want is None:
            problems.append(f"{subject[0]} {subject[1]}: bound to {', '.join(bound)} but the mapping binds it nowhere")
        elif len(bound) > 1:
            problems.append(f"{subject[0]} {subject[1]}: bound {len(bound)} times ({', '.join(bound)})")
        elif rank[bound[0]] > rank[want]:
            problems.append(f"{subject[0]} {subject[1]}: escalated to {bound[0]}; the mapping says {want}")
        elif bound[0] != want:
            problems.append(f"{subject[0]} {subject[1]}: bound to {bound[0]}; the mapping says {want}")
    problems += [
        f"{kind} {name}: the mapping binds {role} but no binding renders it"
        for (kind, name), role in sorted(expected.items())
        if (kind, name) not in found
    ]
    measured = {
        "subjects": len(found),
        "expected": len(expected),
        "admins": sum(1 for role in expected.values() if rank[role] == Level.ADMIN),
    }
    return CheckResult(
        "iam.bindings_match_mapping", Status.FAIL if problems else Status.PASS, measured, {"mismatches": 0}, problems
    )


def check_rbac_schema(docs: list[dict], kubernetes_version: str | None, name: str = "iam.rbac_schema") -> CheckResult:
    """Every rendered object validates, strictly, against the Kubernetes OpenAPI schema of the version.

    name: the check's name (the go-live phase validates its probe Jobs with it too).
    """
    try:
        version = schema_version(kubernetes_version)
    except VersionNotSupportedError:
        return unknown_version(name, len(docs), kubernetes_version)
    problems = []
    for doc in docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            problems += [f"{where}: {error}" for error in schema_errors(doc, version)]
        except SchemaNotFoundError:
            problems.append(f"{where}: no schema for it in Kubernetes {version}")
    measured = {"objects": len(docs), "kubernetes": version}
    return CheckResult(name, Status.FAIL if problems else Status.PASS, measured, {"invalid": 0}, problems)
