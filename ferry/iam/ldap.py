"""LDAP groups from an LDIF export, with membership as the directory defines it.

`groupOfNames` / `groupOfUniqueNames` members are DNs (compared case-insensitively); a member DN
that is a group nests, transitively and cycle-safe; `posixGroup` members are `memberUid`s naming a
person's uid; `owner` is not membership. A member that resolves to no entry of the export is
reported as unresolved. LDAP groups hold no permissions: the plan gives each a level.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import Counter

from ferry.errors import UsageError
from ferry.iam.model import Level, Principal

_GROUP_CLASSES = frozenset({"groupofnames", "groupofuniquenames", "posixgroup", "group"})
_PERSON_CLASSES = frozenset(
    {"person", "organizationalperson", "inetorgperson", "posixaccount", "shadowaccount", "account", "user", "inetuser"}
)


def parse_ldif(text: str, where: str = "ldif") -> list[dict[str, list[str]]]:
    """Entries of an LDIF file as attribute -> values (continuations joined, base64 values decoded).

    where: how errors name the file (`where:line: problem`).
    """
    entries: list[dict[str, list[str]]] = []
    lines: list[tuple[int, str]] = []  # (line number, the line with its continuations)
    comment = False  # a comment continues over indented lines too (RFC 2849)
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        if raw.startswith(" ") and (comment or lines):
            if not comment:
                lines[-1] = (lines[-1][0], lines[-1][1] + raw[1:])
            continue
        comment = raw.startswith("#")
        if raw.strip():
            if not comment:
                lines.append((number, raw))
            continue
        if lines:
            entry: dict[str, list[str]] = {}
            for at, line in lines:
                attr, sep, value = line.partition(":")
                if not sep:
                    raise UsageError(f"{where}:{at}: {line!r} is not 'attribute: value'")
                if value.startswith(":"):
                    try:
                        value = base64.b64decode(value[1:].strip()).decode("utf-8")
                    except (binascii.Error, UnicodeDecodeError):
                        raise UsageError(f"{where}:{at}: {attr.strip()}: not base64 of UTF-8 text") from None
                entry.setdefault(attr.strip().lower(), []).append(value.strip())
            entries.append(entry)
            lines = []
    return entries


def normal_dn(dn: str) -> str:
    """A DN as LDAP compares it: case-insensitive, no spaces around separators, no `#'...'B` unique id, and
    RFC 4514 hex escapes (`\\C3\\A9`) decoded (a decoded separator stays escaped)."""

    def decoded(match: re.Match[str]) -> str:
        text = bytes.fromhex(match.group(0).replace("\\", "")).decode("utf-8", errors="replace")
        return "".join("\\" + c if c in ',+"\\<>;=' else c for c in text)

    dn = re.sub(r"#'[01]*'B$", "", dn.strip())
    dn = re.sub(r"(?:\\[0-9A-Fa-f]{2})+", decoded, dn)
    return re.sub(r"(?<!\\)\s*([,=+])\s*", r"\1", dn).lower()


def ldap_principals(ldif: str, levels: dict[str, Level], where: str = "ldif") -> list[Principal]:
    """Groups of an LDIF export with their effective members; each group's level comes from the plan (where: how
    errors name the export)."""
    groups: dict[str, tuple[str, dict[str, list[str]]]] = {}  # normal DN -> (name, entry)
    people: dict[str, str] = {}  # normal DN -> name
    others: dict[str, str] = {}  # normal DN -> its object classes (neither a person nor a group)
    uids: set[str] = set()
    for entry in parse_ldif(ldif, where):
        dn = normal_dn(entry.get("dn", [""])[0])
        classes = {c.lower() for c in entry.get("objectclass", [])}
        if _GROUP_CLASSES & classes:
            groups[dn] = (entry.get("cn", [""])[0] or dn.split(",", 1)[0].split("=", 1)[-1], entry)
        elif _PERSON_CLASSES & classes:
            people[dn] = (entry.get("uid") or entry.get("cn") or [dn])[0]
            uids.update(entry.get("uid", []))
        else:
            others[dn] = ", ".join(entry.get("objectclass", [])) or "no objectClass"
    names = Counter(name for name, _ in groups.values())
    principals = []
    for dn, (name, _) in groups.items():
        # Two groups of one cn (in two OUs) stay two, by DN; as subjects they are one name.
        pid = f"ldap:group/{name}" if names[name] == 1 else f"ldap:group/{name} ({dn})"
        principal = Principal(pid, "group", name)
        members, nested = _expand(dn, groups, people, others, uids, principal.unresolved)
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
    others: dict[str, str],
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
            if not member:
                continue
            if member in groups:
                if member not in seen:
                    seen.add(member)
                    nested.append(groups[member][0])
                    queue.append(member)
            elif member in people:
                members.add(people[member])
            elif member in others:
                unresolved.append(f"member {value} of {name} is a {others[member]} entry, not a person or a group")
            else:
                unresolved.append(f"member {value} of {name} has no entry in the export")
        for uid in filter(None, entry.get("memberuid", [])):
            if uid in uids:
                members.add(uid)
            else:
                unresolved.append(f"memberUid {uid} of {name} names no person in the export")
    return members, nested
