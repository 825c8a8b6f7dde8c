"""LDAP groups from an LDIF export, with membership as the directory defines it.

`groupOfNames` / `groupOfUniqueNames` members are DNs (compared case-insensitively); a member DN
that is a group nests, transitively and cycle-safe; `posixGroup` members are `memberUid`s naming a
person's uid; `owner` is not membership. A member that resolves to no entry of the export is
reported as unresolved. LDAP groups hold no permissions: the plan gives each a level.
"""

from __future__ import annotations

import base64
import re

from ferry.errors import UsageError
from ferry.iam.model import Level, Principal

_GROUP_CLASSES = frozenset({"groupofnames", "groupofuniquenames", "posixgroup", "group"})


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


def normal_dn(dn: str) -> str:
    """A DN as LDAP compares it: case-insensitive, no spaces around separators, no `#'...'B` unique id."""
    dn = re.sub(r"#'[01]*'B$", "", dn.strip())
    return re.sub(r"\s*([,=+])\s*", r"\1", dn).lower()


def ldap_principals(ldif: str, levels: dict[str, Level]) -> list[Principal]:
    """Groups of an LDIF export with their effective members; each group's level comes from the plan."""
    groups: dict[str, tuple[str, dict[str, list[str]]]] = {}  # normal DN -> (name, entry)
    people: dict[str, str] = {}  # normal DN -> name
    uids: set[str] = set()
    for entry in parse_ldif(ldif):
        dn = normal_dn(entry.get("dn", [""])[0])
        if _GROUP_CLASSES & {c.lower() for c in entry.get("objectclass", [])}:
            groups[dn] = (entry.get("cn", [""])[0] or dn.split(",", 1)[0].split("=", 1)[-1], entry)
        elif "uid" in entry or "cn" in entry:
            name = (entry.get("uid") or entry.get("cn"))[0]
            people[dn] = name
            uids.update(entry.get("uid", []))
    principals = []
    for dn, (name, _) in groups.items():
        principal = Principal(f"ldap:group/{name}", "group", name)
        members, nested = _expand(dn, groups, people, uids, principal.unresolved)
        principal.members = sorted(members)
        if nested:
            principal.notes.append(
                f"nested groups {', '.join(nested)}: their members reach the cluster only if the identity provider "
                "flattens group claims"
            )
        if name in levels:
            principal.grants.append(("phases.iam.ldap_groups", int(levels[name])))
        else:
            principal.unmapped.append("LDAP groups carry no permissions: give it a level under phases.iam.ldap_groups")
        principals.append(principal)
    unknown = sorted(set(levels) - {p.name for p in principals})
    if unknown:
        raise UsageError(f"phases.iam.ldap_groups: the LDIF export has no group named {', '.join(map(repr, unknown))}")
    return principals


def _expand(
    dn: str,
    groups: dict[str, tuple[str, dict[str, list[str]]]],
    people: dict[str, str],
    uids: set[str],
    unresolved: list[str],
) -> tuple[set[str], list[str]]:
    """(the people a group holds, its nested groups by name), following member groups once each."""
    members: set[str] = set()
    nested: list[str] = []
    seen = {dn}
    queue = [dn]
    while queue:
        name, entry = groups[queue.pop(0)]
        for value in entry.get("member", []) + entry.get("uniquemember", []):
            member = normal_dn(value)
            if member in groups:
                if member not in seen:
                    seen.add(member)
                    nested.append(groups[member][0])
                    queue.append(member)
            elif member in people:
                members.add(people[member])
            else:
                unresolved.append(f"member {value} of {name} has no entry in the export")
        for uid in entry.get("memberuid", []):
            if uid in uids:
                members.add(uid)
            else:
                unresolved.append(f"memberUid {uid} of {name} names no person in the export")
    return members, nested
