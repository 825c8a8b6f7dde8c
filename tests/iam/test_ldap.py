"""LDAP groups as directories define membership: DNs, nesting, posixGroup memberUids, unresolved members."""

from __future__ import annotations

import base64

import pytest

from ferry.errors import UsageError
from ferry.iam.ldap import ldap_principals, normal_dn, parse_ldif
from ferry.iam.model import Level

PEOPLE = "".join(
    f"dn: uid={uid},ou=people,dc=x\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: {uid}\ncn: {uid}\n\n"
    for uid in ("alice", "bob", "carol")
)


def groups(ldif: str) -> dict:
    return {p.name: p for p in ldap_principals(PEOPLE + ldif, {})}


def test_nested_groups_expand_transitively_and_a_cycle_ends() -> None:
    found = groups(
        "dn: cn=all,ou=groups,dc=x\nobjectClass: groupOfNames\ncn: all\nmember: cn=eng,ou=groups,dc=x\n\n"
        "dn: cn=eng,ou=groups,dc=x\nobjectClass: groupOfNames\ncn: eng\nmember: uid=alice,ou=people,dc=x\n"
        "member: cn=ops,ou=groups,dc=x\n\n"
        "dn: cn=ops,ou=groups,dc=x\nobjectClass: groupOfUniqueNames\ncn: ops\nuniqueMember: uid=bob,ou=people,dc=x\n"
        "uniqueMember: cn=all,ou=groups,dc=x\n\n"
    )
    assert found["all"].members == ["alice", "bob"] and found["ops"].members == ["alice", "bob"]
    assert any("nested groups eng, ops" in n and "flattens group claims" in n for n in found["all"].notes)


def test_dns_compare_case_insensitively_and_unique_ids_are_dropped() -> None:
    assert normal_dn("UID=Alice , OU=People,DC=x") == "uid=alice,ou=people,dc=x"
    found = groups(
        "dn: cn=eng,dc=x\nobjectClass: groupOfUniqueNames\ncn: eng\nuniqueMember: UID=Alice, OU=People, DC=X\n"
        "uniqueMember: uid=bob,ou=people,dc=x#'0101'B\n\n"
    )
    assert found["eng"].members == ["alice", "bob"] and found["eng"].unresolved == []


def test_posix_members_are_uids_owner_is_not_membership_and_what_resolves_to_nothing_is_reported() -> None:
    found = groups(
        "dn: cn=oncall,dc=x\nobjectClass: posixGroup\ncn: oncall\ngidNumber: 5\nmemberUid: carol\nmemberUid: grace\n"
        "owner: uid=alice,ou=people,dc=x\n\n"
        "dn: cn=eng,dc=x\nobjectClass: groupOfNames\ncn: eng\nmember: uid=frank,ou=people,dc=x\n\n"
    )
    assert found["oncall"].members == ["carol"]
    assert found["oncall"].unresolved == ["memberUid grace of oncall names no person in the export"]
    assert found["eng"].members == []
    assert found["eng"].unresolved == ["member uid=frank,ou=people,dc=x of eng has no entry in the export"]
    assert found["eng"].resolved  # its member does not resolve; the group itself does


def test_ldif_continuations_base64_and_unlisted_groups() -> None:
    encoded = base64.b64encode("ml-ops ü".encode()).decode()
    text = (
        "dn: uid=henry,ou=people,dc=x\nobjectClass: person\nuid: henry\n\n"
        "dn: cn=ml-ops,ou=groups,dc=x\nobjectClass: groupOfUniqueNames\n"
        f"cn:: {encoded}\nuniqueMember: uid=hen\n ry,ou=people,dc=x\n\n"
        "# a comment\ndn: cn=finance,dc=x\nobjectClass: groupOfNames\ncn: finance\nmember: uid=ivy,dc=x\n"
    )
    assert parse_ldif(text)[1]["uniquemember"] == ["uid=henry,ou=people,dc=x"]
    principals = ldap_principals(text, {"ml-ops ü": Level.READ})
    assert [(p.name, p.members) for p in principals] == [("ml-ops ü", ["henry"]), ("finance", [])]
    assert principals[0].grants and principals[1].unmapped  # the plan gave ml-ops a level, not finance
    with pytest.raises(UsageError, match="is not 'attribute: value'"):
        parse_ldif("dn: cn=x\nnonsense line\n")
    with pytest.raises(UsageError, match="the LDIF export has no group named 'ml-opz'"):
        ldap_principals(text, {"ml-opz": Level.READ})
