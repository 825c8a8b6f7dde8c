"""The mapping over the example exports (examples/iam): levels, overrides, subjects, what is never bound, and
the per-principal report (`ferry iam explain`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.iam import check_iam_ambiguous, check_iam_conditional, check_iam_escalation, check_iam_unresolved
from ferry.errors import UsageError
from ferry.iam.aws import aws_principals
from ferry.iam.azure import azure_principals, role_definitions
from ferry.iam.ldap import ldap_principals
from ferry.iam.model import Level, Mapping, map_principals, render_rbac
from ferry.results import Status
from tests.support import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "iam"
ROLES = ["compute-viewer", "compute-operator", "compute-admin"]
# The escalation paths of the example exports that the demo plan accepts.
ACCEPTED = {
    "aws:role/ci-runner": "compute-operator",
    "aws:role/build-bot": "none",
    "azure:service/platform-automation": "compute-viewer",
}


def example_mapping(
    overrides: dict[str, str] | None = None, subjects: dict[str, str] | None = None, mfa: bool = True
) -> Mapping:
    """The example exports mapped as the demo plan maps them (with MFA assumed unless mfa is False)."""
    assume = {"aws:MultiFactorAuthPresent": True} if mfa else {}
    principals, skipped = aws_principals(
        json.loads((EXAMPLES / "aws-authorization-details.json").read_text()), assume=assume
    )
    found, not_carried = azure_principals(
        json.loads((EXAMPLES / "azure-role-assignments.json").read_text()),
        {},
        role_definitions(json.loads((EXAMPLES / "azure-role-definitions.json").read_text()), "definitions"),
        json.loads((EXAMPLES / "azure-group-members.json").read_text()),
    )
    principals += found
    skipped += not_carried
    levels = {"ml-engineers": Level.WRITE, "data-readers": Level.READ, "gpu-oncall": Level.ADMIN}
    principals += ldap_principals((EXAMPLES / "groups.ldif").read_text(), levels)
    return map_principals(
        principals, "ml-training", ROLES, ACCEPTED if overrides is None else overrides, skipped, subjects
    )


def outcome(mapping: Mapping) -> dict[str, str]:
    return {p.id: mapping.headline(p) for p in mapping.principals}


def test_every_principal_of_the_examples_at_its_effective_level() -> None:
    assert outcome(example_mapping()) == {
        "aws:user/alice": "compute-operator (write)",  # only through group ml-engineers
        "aws:user/bob": "compute-viewer (read)",
        "aws:user/carol": "compute-operator (write)",  # eks:* and iam:PassRole: the edge is no level
        "aws:user/dave": "compute-operator (write)",
        "aws:user/mallory": "not bound: no effective privileges",  # group offboarded denies * on *
        "aws:user/oscar": "compute-viewer (read)",  # logs:FilterLogEvents, ecr:BatchCheckLayerAvailability
        "aws:user/pat": "not bound: unresolved",  # member of a group the export lacks
        "aws:role/training-job-role": "compute-operator (write)",
        "aws:role/ci-runner": "compute-operator (override compute-operator)",
        "aws:role/build-bot": "not bound (override none)",
        "azure:user/alice@corp.example.com": "compute-operator (write)",
        "azure:group/ML Platform": "compute-operator (write)",
        "azure:service/inference-api": "compute-viewer (read)",
        "azure:user/erin@corp.example.com": "compute-viewer (read)",  # custom role, from its definition
        "azure:unknown/6f0c0000-0000-4000-8000-0000000000d0": "not bound: unresolved",  # deleted principal
        "azure:service/platform-automation": "compute-viewer (override compute-viewer)",
        "ldap:group/ml-engineers": "compute-operator (write)",
        "ldap:group/ml-interns": "not bound: nothing that maps",
        "ldap:group/data-readers": "compute-viewer (read)",
        "ldap:group/gpu-oncall": "compute-admin (admin)",
    }


def test_without_mfa_assumed_the_force_mfa_policy_takes_everything_from_its_group() -> None:
    assert outcome(example_mapping(mfa=False))["aws:user/oscar"] == "not bound: no effective privileges"


def test_the_gate_counts_escalations_no_override_accepts() -> None:
    accepted = example_mapping()
    assert check_iam_escalation(accepted, 0).status == Status.PASS
    assert check_iam_escalation(accepted, 0).measured == {"escalation": 0, "accepted_by_override": 3}
    unaccepted = example_mapping({})
    result = check_iam_escalation(unaccepted, 0)
    assert result.status == Status.FAIL and result.measured["escalation"] == 3
    assert check_iam_escalation(unaccepted, 3).status == Status.WARN
    assert (
        "aws:role/build-bot: aws:role/build-bot -> aws:role/ci-runner -> CreateEC2WithExistingIP" in result.evidence[1]
    )
    by_id = {p.id: p for p in unaccepted.principals}
    assert by_id["aws:role/ci-runner"].level == Level.WRITE  # what it holds besides the escalation
    assert by_id["aws:role/build-bot"].level is None


def test_unresolved_and_conditional_warn_and_fail_above_a_limit() -> None:
    mapping = example_mapping()
    unresolved = check_iam_unresolved(mapping, None)
    assert unresolved.status == Status.WARN and unresolved.measured == {"unresolved": 5}
    assert check_iam_unresolved(mapping, 4).status == Status.FAIL
    conditional = check_iam_conditional(mapping, None)
    assert conditional.status == Status.WARN and conditional.measured == {"conditional": 1}
    assert check_iam_conditional(mapping, 0).status == Status.FAIL


def test_unresolved_principals_are_never_bound_even_by_an_override() -> None:
    deleted = "azure:unknown/6f0c0000-0000-4000-8000-0000000000d0"
    mapping = example_mapping({**ACCEPTED, deleted: "compute-admin", "aws:user/pat": "compute-viewer"})
    assert {p.id: p.level for p in mapping.principals if not p.resolved} == {deleted: None, "aws:user/pat": None}
    subjects = {s["name"] for d in render_rbac(mapping, "demo") for s in d.get("subjects", [])}
    assert "6f0c0000-0000-4000-8000-0000000000d0" not in subjects and "pat" not in subjects


def test_a_subject_claimed_at_two_levels_is_ambiguous_and_one_named_twice_is_noted() -> None:
    # oscar (AWS, read) signs in as the Azure user alice (write): least privilege until the plan decides.
    clash = example_mapping(subjects={"aws:user/oscar": "alice@corp.example.com"})
    ambiguous = {p.id: p.level for p in clash.principals if p.ambiguous}
    assert ambiguous == {"aws:user/oscar": Level.READ, "azure:user/alice@corp.example.com": Level.READ}
    assert check_iam_ambiguous(clash, 0).status == Status.FAIL
    # dave (AWS, write) as the same alice (write): one subject, one binding, and a note on both.
    same = example_mapping(subjects={"aws:user/dave": "alice@corp.example.com"})
    docs = render_rbac(same, "demo")
    operators = next(d for d in docs if d["metadata"]["name"] == "ferry-compute-operator")["subjects"]
    assert [s["name"] for s in operators].count("alice@corp.example.com") == 1
    dave = same.principal("aws:user/dave")
    assert any(n.startswith("User alice@corp.example.com is also named by another source") for n in dave.notes)
    with pytest.raises(UsageError, match="phases.iam.subjects: 'aws:user/zed' names no principal"):
        example_mapping(subjects={"aws:user/zed": "zed@corp.example.com"})


def test_overrides_that_raise_access_are_widening_and_bad_overrides_are_refused() -> None:
    mapping = example_mapping({**ACCEPTED, "aws:user/bob": "compute-admin"})
    bob = mapping.principal("aws:user/bob")
    assert bob.level == Level.ADMIN
    assert any("override binds compute-admin where the source gives read" in w for w in bob.widened)
    with pytest.raises(UsageError, match="'aws:user/zed' names no principal"):
        example_mapping({"aws:user/zed": "compute-viewer"})
    with pytest.raises(UsageError, match="'root' is not a role of the target"):
        example_mapping({"aws:user/bob": "root"})


def test_everything_ferry_renders_carries_its_labels() -> None:
    for doc in render_rbac(example_mapping(), "demo"):
        assert doc["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "ferry", "ferry.io/plan": "demo"}


def test_explain_gives_each_category_on_its_principal() -> None:
    mapping = example_mapping({})
    assert mapping.explain("aws:user/mallory").splitlines()[0] == "aws:user/mallory: not bound: no effective privileges"
    assert "  access only through group ml-engineers" in mapping.explain("aws:user/alice")
    assert "  escalation path: aws:role/build-bot -> aws:role/ci-runner" in mapping.explain("aws:role/build-bot")
    assert "  conditional: vpc-only (inline) statement 0: allows s3:PutObject only when" in mapping.explain(
        "aws:role/training-job-role"
    )
    assert "  unresolved: memberUid grace of gpu-oncall names no person" in mapping.explain("ldap:group/gpu-oncall")
    report = mapping.markdown()
    for heading in (
        "## Escalation paths",
        "## Unresolved",
        "## Conditional",
        "## Widened",
        "## Unmapped",
        "## Each principal",
    ):
        assert heading in report
    with pytest.raises(UsageError, match="no principal 'aws:user/zed' in the IAM sources; there are: aws:user/alice"):
        mapping.explain("aws:user/zed")


def test_ferry_iam_explain_prints_one_principal(monkeypatch) -> None:
    monkeypatch.setenv("FERRY_DEMO_S3_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("FERRY_DEMO_KEY", "k")
    monkeypatch.setenv("FERRY_DEMO_SECRET", "s")
    plan = str(EXAMPLES.parent / "demo" / "migration.yaml")
    code, out, _ = run_cli("iam", "explain", plan, "aws:role/build-bot")
    assert code == 0
    assert out.splitlines()[:2] == [
        "aws:role/build-bot: not bound (override none)",
        "  subject: ServiceAccount build-bot",
    ]
    code, _, err = run_cli("iam", "explain", plan, "aws:user/zed")
    assert code == 2 and err.startswith("ferry: error: no principal 'aws:user/zed'") and len(err.splitlines()) == 1
