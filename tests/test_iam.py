"""IAM mapping: classification of each source, overrides and collisions (the gate's checks: tests/checks/)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from checks.iam import check_iam_ambiguous, check_rbac_bindings
from ferry.errors import UsageError
from ferry.iam import (
    DEFAULT_AWS_SERVICES,
    Level,
    Mapping,
    aws_action_level,
    aws_principals,
    azure_principals,
    ldap_principals,
    map_principals,
    parse_ldif,
    render_rbac,
)
from ferry.results import Status

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "iam"
ROLES = ["compute-viewer", "compute-operator", "compute-admin"]


@pytest.mark.parametrize(
    ("action", "level"),
    [
        ("*", Level.ADMIN),
        ("s3:GetObject", Level.READ),
        ("S3:getobject", Level.READ),  # IAM action names are case-insensitive
        ("*:*", Level.ADMIN),
        ("s3:Get*", Level.READ),
        ("s3:ListBucket", Level.READ),
        ("ecr:BatchGetImage", Level.READ),
        ("s3:PutObject", Level.WRITE),
        ("s3:*", Level.WRITE),
        ("s3:*Object", Level.WRITE),  # could be Put or Delete: the wider reading wins
        ("iam:PassRole", Level.ADMIN),
        ("iam:*", Level.ADMIN),
        ("iam:GetRole", Level.READ),
        ("dynamodb:GetItem", "dynamodb has no counterpart"),
        ("s3", "is not an IAM action"),
    ],
)
def test_aws_action_levels(action: str, level: Level | str) -> None:
    found = aws_action_level(action, DEFAULT_AWS_SERVICES)
    if isinstance(level, Level):
        assert found == level
    else:
        assert isinstance(found, str) and level in found


def example_mapping(overrides: dict[str, str] | None = None, subjects: dict[str, str] | None = None) -> Mapping:
    principals, skipped = aws_principals(json.loads((EXAMPLES / "aws-authorization-details.json").read_text()))
    found, not_carried = azure_principals(
        json.loads((EXAMPLES / "azure-role-assignments.json").read_text()), {"GPU Quota Requester": Level.READ}
    )
    principals += found
    skipped += not_carried
    levels = {"ml-engineers": Level.WRITE, "data-readers": Level.WRITE, "gpu-oncall": Level.ADMIN}
    principals += ldap_principals((EXAMPLES / "groups.ldif").read_text(), levels)
    return map_principals(principals, "ml-training", ROLES, overrides or {}, skipped, subjects)


def test_aws_export_classified_with_what_did_not_fit() -> None:
    mapping = example_mapping()
    by_id = {p.id: p for p in mapping.principals}
    assert by_id["aws:user/carol"].level == Level.ADMIN  # URL-encoded document with iam:PassRole
    assert by_id["aws:user/dave"].level == Level.WRITE
    assert [u.split(": ")[-2] for u in by_id["aws:user/dave"].unmapped] == ["dynamodb:GetItem", "dynamodb:Query"]
    assert by_id["aws:user/alice"].level is None  # only group access: the group is bound
    # The default version of MLTraining is read, not its older `*` version.
    assert by_id["aws:group/ml-engineers"].level == Level.WRITE
    assert any("Deny s3:DeleteBucket" in w for w in by_id["aws:group/ml-engineers"].widened)
    role = by_id["aws:role/training-job-role"]
    assert role.kind == "service" and mapping.subject(role) == ("ServiceAccount", "training-job-role")
    assert any("condition on StringEquals is dropped" in w for w in role.widened)
    assert mapping.skipped == [
        "aws:role/AWSServiceRoleForSupport: service-linked role, managed by AWS itself",
        "azure:ForeignGroup/partner-ml-team: Reader at /subscriptions/00000000-0000-4000-8000-000000000001/"
        "resourceGroups/ml: no Kubernetes subject for a ForeignGroup",
    ]
    assert any(
        "permissions boundary arn:aws:iam::123456789012:policy/ContractorBoundary caps it" in w
        for w in by_id["aws:user/bob"].widened
    )
    assert by_id["azure:service/inference-api"].level == Level.READ
    assert any("storageAccounts/mldata" in w for w in by_id["azure:user/alice@corp.example.com"].widened)
    assert by_id["ldap:group/ml-engineers"].members == ["alice", "frank"]
    assert by_id["ldap:group/gpu-oncall"].members == ["carol", "grace"]
    assert mapping.totals()["unmapped"] == 2 and round(mapping.coverage(), 3) == 0.931


def test_a_subject_claimed_at_two_levels_is_ambiguous_until_overridden() -> None:
    mapping = example_mapping()
    ambiguous = {p.id for p in mapping.principals if p.ambiguous}
    assert ambiguous == {"aws:group/data-readers", "ldap:group/data-readers"}
    # Least privilege until the plan decides.
    assert {p.level for p in mapping.principals if p.id in ambiguous} == {Level.READ}
    assert check_iam_ambiguous(mapping, 0).status == Status.FAIL

    settled = example_mapping({"ldap:group/data-readers": "compute-viewer"})
    assert not any(p.ambiguous for p in settled.principals)
    assert check_iam_ambiguous(settled, 0).status == Status.PASS


def test_overrides_that_raise_access_are_widening_and_bad_overrides_are_refused() -> None:
    mapping = example_mapping({"aws:user/bob": "compute-admin", "ldap:group/data-readers": "compute-viewer"})
    bob = next(p for p in mapping.principals if p.id == "aws:user/bob")
    assert bob.level == Level.ADMIN
    assert any("override binds compute-admin where the source gives read" in w for w in bob.widened)
    dropped = example_mapping({"aws:user/carol": "none", "ldap:group/data-readers": "compute-viewer"})
    assert next(p for p in dropped.principals if p.id == "aws:user/carol").level is None
    with pytest.raises(UsageError, match="'aws:user/zed' names no principal"):
        example_mapping({"aws:user/zed": "compute-viewer"})
    with pytest.raises(UsageError, match="'root' is not a role of the target"):
        example_mapping({"aws:user/bob": "root"})


def test_subjects_name_one_person_across_sources() -> None:
    settled = {"ldap:group/data-readers": "compute-viewer"}
    # dave (AWS, write) signs in as the Azure user alice@corp.example.com (write): one subject, one binding.
    same = example_mapping(settled, {"aws:user/dave": "alice@corp.example.com"})
    docs = render_rbac(same)
    operators = next(d for d in docs if d["metadata"]["name"] == "ferry-compute-operator")["subjects"]
    assert [s["name"] for s in operators].count("alice@corp.example.com") == 1
    assert "dave" not in [s["name"] for s in operators]
    assert check_rbac_bindings(docs, same).status == Status.PASS
    # carol (AWS, admin) under the same name: two levels for one subject is ambiguous.
    clash = example_mapping(settled, {"aws:user/carol": "alice@corp.example.com"})
    assert {p.id for p in clash.principals if p.ambiguous} == {"aws:user/carol", "azure:user/alice@corp.example.com"}
    with pytest.raises(UsageError, match="phases.iam.subjects: 'aws:user/zed' names no principal"):
        example_mapping(settled, {"aws:user/zed": "zed@corp.example.com"})


def test_azure_custom_role_is_unmapped_until_classified() -> None:
    assignments = json.loads((EXAMPLES / "azure-role-assignments.json").read_text())
    erin = next(p for p in azure_principals(assignments, {})[0] if p.name == "erin@corp.example.com")
    assert erin.grants == [] and "classify it under phases.iam.azure_roles" in erin.unmapped[0]
    with pytest.raises(UsageError, match="lacks principalType, principalName"):
        azure_principals([{"principalName": "x", "roleDefinitionName": "Reader"}], {})


def test_ldif_continuations_base64_and_unlisted_groups() -> None:
    encoded = base64.b64encode("ml-ops ü".encode()).decode()
    text = (
        "dn: cn=ml-ops,ou=groups,dc=x\nobjectClass: groupOfUniqueNames\n"
        f"cn:: {encoded}\nuniqueMember: uid=hen\n ry,ou=people,dc=x\n\n"
        "# a comment\ndn: cn=finance,dc=x\nobjectClass: groupOfNames\ncn: finance\nmember: uid=ivy,dc=x\n"
    )
    assert parse_ldif(text)[0]["uniquemember"] == ["uid=henry,ou=people,dc=x"]
    principals = ldap_principals(text, {"ml-ops ü": Level.READ})
    assert [(p.name, p.members, p.level is None) for p in principals] == [
        ("ml-ops ü", ["henry"], True),
        ("finance", ["ivy"], True),
    ]
    assert principals[0].grants and principals[1].unmapped  # the plan gave ml-ops a level, not finance
    with pytest.raises(UsageError, match="is not 'attribute: value'"):
        parse_ldif("dn: cn=x\nnonsense line\n")
    with pytest.raises(UsageError, match="the LDIF export has no group named 'ml-opz'"):
        ldap_principals(text, {"ml-opz": Level.READ})
