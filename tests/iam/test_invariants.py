"""Invariants of the AWS mapping over generated accounts (hypothesis): the rule that no subject is ever bound
above what the source effectively grants, and that more allows or fewer denies never lower or raise a level.

The oracle in test_never_above_what_the_source_allows evaluates every request (action, resource) the way
AWS's policy evaluation logic describes, statement by statement, without ferry's evaluator.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ferry.iam.aws import DEFAULT_AWS_SERVICES, EDGES, IDENTITY_SERVICES, action_level, database
from ferry.iam.model import map_principals
from tests.iam.test_aws import account
from tests.iam.test_mapping import ROLES

ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:Get*",
    "s3:Put*",
    "S3:getobject",
    "ec2:DescribeInstances",
    "ec2:RunInstances",
    "ec2:*",
    "iam:PassRole",
    "iam:AttachUserPolicy",
    "iam:Get*",
    "logs:FilterLogEvents",
    "sts:AssumeRole",
    "dynamodb:GetItem",
]
RESOURCES = ["*", "arn:aws:s3:::data/*", "arn:aws:s3:::Data/*", "arn:aws:s3:::data/x"]
USERS = ["u0", "u1", "u2"]
GROUPS = ["g0", "g1"]
MFA = {"Bool": {"aws:MultiFactorAuthPresent": "true"}}

statement = st.fixed_dictionaries(
    {
        "Effect": st.sampled_from(["Allow", "Deny"]),
        "actions": st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3),
        "negated": st.booleans(),
        "resource": st.sampled_from(RESOURCES),
        "not_resource": st.booleans(),
        "conditional": st.booleans(),
    }
).map(
    lambda s: {
        "Effect": s["Effect"],
        ("NotAction" if s["negated"] and s["Effect"] == "Allow" and len(s["actions"]) > 2 else "Action"): s["actions"],
        ("NotResource" if s["not_resource"] and s["resource"] != "*" else "Resource"): s["resource"],
        **({"Condition": MFA} if s["conditional"] else {}),
    }
)
accounts = st.fixed_dictionaries(
    {
        "users": st.fixed_dictionaries(
            {
                u: st.tuples(st.lists(st.sampled_from(GROUPS), unique=True), st.lists(statement, max_size=3))
                for u in USERS
            }
        ),
        "groups": st.fixed_dictionaries({g: st.lists(statement, max_size=3) for g in GROUPS}),
    }
)
quick = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def levels(spec: dict, assume: dict | None = None) -> dict[str, int | None]:
    """Each user's bound level for the generated account."""
    from ferry.iam.aws import aws_principals

    found, skipped = aws_principals(account(spec["users"], spec["groups"]), assume=assume)
    mapping = map_principals(found, "ns", ROLES, {}, skipped)
    return {p.id: p.level for p in mapping.principals}


def _raised(before: dict, after: dict) -> list[str]:
    return [pid for pid, level in after.items() if (level or 0) > (before[pid] or 0)]


def _with(spec: dict, where: str, added: dict) -> dict:
    """spec with a statement added to a user's own policy or to a group's."""
    users = {u: (groups, list(statements)) for u, (groups, statements) in spec["users"].items()}
    groups = {g: list(statements) for g, statements in spec["groups"].items()}
    if where in users:
        users[where][1].append(added)
    else:
        groups[where].append(added)
    return {"users": users, "groups": groups}


@quick
@given(accounts, st.sampled_from(USERS + GROUPS), statement)
def test_adding_a_deny_never_raises_a_level(spec: dict, where: str, added: dict) -> None:
    added = {**added, "Effect": "Deny"}
    added.pop("NotAction", None)
    added.setdefault("Action", ["*"])
    assert _raised(levels(spec), levels(_with(spec, where, added))) == []


@quick
@given(accounts, st.sampled_from(USERS + GROUPS), statement)
def test_adding_an_allow_never_lowers_a_level(spec: dict, where: str, added: dict) -> None:
    before, after = levels(spec), levels(_with(spec, where, {**added, "Effect": "Allow"}))
    assert _raised(after, before) == []


@quick
@given(accounts, st.sampled_from(USERS), st.sampled_from(GROUPS))
def test_leaving_a_group_without_denies_never_raises_a_level(spec: dict, user: str, group: str) -> None:
    spec["groups"][group] = [s for s in spec["groups"][group] if s["Effect"] == "Allow"]
    groups, statements = spec["users"][user]
    left = {**spec, "users": {**spec["users"], user: ([g for g in groups if g != group], statements)}}
    assert _raised(levels(spec), levels(left)) == []


# -- the oracle --------------------------------------------------------------------------------------
@functools.cache
def _pattern(text: str, ignore_case: bool) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in text) + r"\Z", re.I if ignore_case else 0)


CARRIED = frozenset(DEFAULT_AWS_SERVICES) | IDENTITY_SERVICES
UNIVERSE = [a for a in database() if a.split(":", 1)[0] in CARRIED and a not in EDGES]
# A resource each pattern names, a fresh one no pattern names specifically, and one named exactly.
REQUESTS = ["arn:aws:s3:::zz9", "arn:aws:s3:::data/zz9", "arn:aws:s3:::Data/zz9", "arn:aws:s3:::data/x"]


def _requests(statement: dict) -> set[tuple[str, str]]:
    """Every request (action, resource) of the universe the statement matches."""
    names = statement.get("Action") or statement.get("NotAction")
    patterns = [_pattern(n, True) for n in ([names] if isinstance(names, str) else names)]
    named = {a for a in UNIVERSE if any(p.match(a) for p in patterns)}
    actions = set(UNIVERSE) - named if "NotAction" in statement else named
    resource = _pattern(statement.get("Resource") or statement.get("NotResource"), False)
    resources = [r for r in REQUESTS if bool(resource.match(r)) != ("NotResource" in statement)]
    return {(a, r) for a in actions for r in resources}


def _highest_allowed(held: list[dict]) -> int:
    """The highest level of any request AWS would allow with these statements, conditions not known to hold
    (an Allow under one does not apply; a Deny under one does)."""
    allowed: set[tuple[str, str]] = set()
    for s in held:
        if s["Effect"] == "Allow" and "Condition" not in s:
            allowed |= _requests(s)
    for s in held:
        if s["Effect"] == "Deny":
            allowed -= _requests(s)
    return max((int(action_level(a) or 0) for a, _ in allowed), default=0)


# Found by the search: two Denies that together name every resource (data/*, and everything but data/*).
SPLIT_DENY = {
    "users": {"u0": (["g0"], [])},
    "groups": {
        "g0": [
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"},
            {"Effect": "Deny", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::data/*"},
            {"Effect": "Deny", "Action": ["s3:GetObject"], "NotResource": "arn:aws:s3:::data/*"},
        ]
    },
}


# And again: two Denies on everything outside data/* and outside Data/* (ARNs are case-sensitive: no resource is
# in both, so together they deny every one).
CASE_SPLIT_DENY = {
    "users": {"u0": ([], [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"},
        {"Effect": "Deny", "Action": ["s3:GetObject"], "NotResource": "arn:aws:s3:::data/*"},
        {"Effect": "Deny", "Action": ["s3:GetObject"], "NotResource": "arn:aws:s3:::Data/*"},
    ])},
    "groups": {},
}  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(accounts)
@example(SPLIT_DENY)
@example(CASE_SPLIT_DENY)
def test_never_above_what_the_source_allows(spec: dict) -> None:
    bound = levels(spec)
    for user, (groups, statements) in spec["users"].items():
        held: list[dict[str, Any]] = statements + [s for g in groups for s in spec["groups"][g]]
        assert (bound[f"aws:user/{user}"] or 0) <= _highest_allowed(held), (user, held)
