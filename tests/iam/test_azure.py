"""Azure role assignments, custom role definitions and group members as `az` prints them."""

from __future__ import annotations

import pytest

from ferry.errors import UsageError
from ferry.iam.azure import azure_principals, role_definitions
from ferry.iam.model import Level

SCOPE = "/subscriptions/00000000-0000-4000-8000-000000000001/resourceGroups/ml"


def assignment(name: str, role: str, kind: str = "User", object_id: str = "", **extra: object) -> dict:
    return {
        "principalName": name,
        "principalType": kind,
        "principalId": object_id or f"id-{name or 'none'}",
        "roleDefinitionName": role,
        "scope": SCOPE,
        **extra,
    }


def definition(name: str, actions: list[str], not_actions: list[str] | None = None) -> dict:
    return {
        "roleName": name,
        "roleType": "CustomRole",
        "permissions": [{"actions": actions, "notActions": not_actions or [], "dataActions": [], "notDataActions": []}],
    }


def user_of(role: str, definitions: list[dict] | None = None, custom: dict | None = None):
    found, _ = azure_principals(
        [assignment("u@corp.example.com", role)], custom or {}, role_definitions(definitions or [], "defs")
    )
    return found[0]


@pytest.mark.parametrize(
    ("role", "definitions", "level", "escalates"),
    [
        ("Reader", [], Level.READ, False),
        ("Contributor", [], Level.WRITE, False),
        ("Storage Blob Data Contributor", [], Level.WRITE, False),
        ("AcrPull", [], Level.READ, False),
        ("Azure Kubernetes Service RBAC Cluster Admin", [], Level.ADMIN, False),
        # Roles that assign roles: an escalation path, bound at what they hold besides.
        ("Owner", [], Level.WRITE, True),
        ("User Access Administrator", [], Level.READ, True),
        ("Role Based Access Control Administrator", [], Level.READ, True),
        (
            "Delegator",
            [definition("Delegator", ["Microsoft.Authorization/roleAssignments/write", "*/read"])],
            Level.READ,
            True,
        ),
        ("Everything", [definition("Everything", ["*"])], Level.WRITE, True),
        (
            "Everything but auth",
            [definition("Everything but auth", ["*"], ["Microsoft.Authorization/*"])],
            Level.WRITE,
            False,
        ),
        ("Quota reader", [definition("Quota reader", ["Microsoft.Quota/quotas/read"])], Level.READ, False),
        ("Undocumented custom", [], None, False),
    ],
)
def test_role_levels_and_escalation(role: str, definitions: list[dict], level: Level | None, escalates: bool) -> None:
    found = user_of(role, definitions)
    assert found.derived_level() == level
    assert bool(found.escalations) == escalates
    if escalates:
        assert found.escalations[0].endswith("can assign roles (Microsoft.Authorization/roleAssignments/write)")
    if level is None:
        assert "classify it under phases.iam.azure_roles" in found.unmapped[0]


def test_the_plans_classification_wins_but_the_escalation_stays() -> None:
    found = user_of(
        "Delegator",
        [definition("Delegator", ["Microsoft.Authorization/roleAssignments/write"])],
        {"Delegator": Level.WRITE},
    )
    assert found.derived_level() == Level.WRITE and found.escalations


@pytest.mark.parametrize(
    "deleted",
    [
        assignment("", "Contributor", "User", "6f0c-deleted"),
        assignment("", "Contributor", "Unknown", "6f0c-deleted"),
        assignment("someone", "Contributor", "Unknown", "6f0c-deleted"),
    ],
)
def test_an_assignment_to_a_deleted_principal_is_unresolved_never_a_user_named_by_its_id(deleted: dict) -> None:
    found, _ = azure_principals([deleted], {})
    assert [(p.id, p.resolved) for p in found] == [("azure:unknown/6f0c-deleted", False)]
    assert "which no longer resolves (deleted?); not bound" in found[0].unresolved[0]


def test_foreign_principals_are_not_carried_and_bad_rows_are_refused() -> None:
    found, skipped = azure_principals([assignment("partner", "Reader", "ForeignGroup")], {})
    assert found == [] and "no Kubernetes subject for a ForeignGroup" in skipped[0]
    with pytest.raises(UsageError, match="lacks roleDefinitionName or a principal"):
        azure_principals([{"principalType": "User", "roleDefinitionName": "Reader"}], {})
    with pytest.raises(UsageError, match="entry 0 has no roleName"):
        role_definitions([{"permissions": []}], "defs.json")


def member(kind: str, object_id: str, name: str) -> dict:
    entry = {"@odata.type": f"#microsoft.graph.{kind}", "id": object_id, "displayName": name}
    if kind == "user":
        entry["userPrincipalName"] = f"{name}@corp.example.com"
    return entry


def test_group_members_nest_transitively_and_cycles_end() -> None:
    members = {
        "ML Platform": [member("user", "u1", "alice"), member("group", "g2", "ML Interns")],
        "g2": [member("user", "u2", "ivan"), member("group", "g1", "ML Platform"), member("group", "g3", "Cohort")],
    }
    found, _ = azure_principals([assignment("ML Platform", "Contributor", "Group", "g1")], {}, None, members, "m.json")
    group = found[0]
    assert group.members == ["alice@corp.example.com", "ivan@corp.example.com"]
    assert group.resolved and group.derived_level() == Level.WRITE
    assert group.unresolved == ["member group Cohort (g3): its members are not in m.json"]
    assert any("flattens group claims" in n for n in group.notes)


def test_a_group_whose_members_are_not_exported_is_unresolved() -> None:
    found, _ = azure_principals([assignment("Ghosts", "Reader", "Group", "g9")], {}, None, {}, "m.json")
    assert not found[0].resolved and "its members are not in m.json; not bound" in found[0].unresolved[0]


def test_members_keyed_by_a_display_name_two_groups_share_are_refused() -> None:
    rows = [assignment("ML", "Reader", "Group", "g1"), assignment("ML", "Contributor", "Group", "g2")]
    with pytest.raises(
        UsageError, match="'ML' is the display name of 2 groups in the assignments; key it by object id"
    ):
        azure_principals(rows, {}, None, {"ML": []}, "m.json")
    by_id, _ = azure_principals(rows, {}, None, {"g1": [member("user", "u1", "a")], "g2": []}, "m.json")
    assert by_id[0].members == ["a@corp.example.com"]
