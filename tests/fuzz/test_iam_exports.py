"""IAM exports, mutated: `ferry iam explain PLAN PRINCIPAL` reads every export the plan names and maps it (what the
iam phase does before it renders anything); a mutated export is mapped (exit 0, or 2 for a principal it no longer
holds) or refused in one line naming the file (exit 2), and nothing is written.

The exports are the demo's: AWS `get-account-authorization-details`, Azure role assignments, custom role
definitions and group members (JSON), and LDAP groups (LDIF); each is mutated alone, the others as they are.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import TRIED, check_cli, fuzz_settings, mutated, write_bytes
from tests.support import ROOT

IAM = ROOT / "examples" / "iam"
EXPORTS = {
    "aws": "aws-authorization-details.json",
    "azure": "azure-role-assignments.json",
    "azure_definitions": "azure-role-definitions.json",
    "azure_members": "azure-group-members.json",
}
JSON_BASES: dict[str, Any] = {k: json.loads((IAM / name).read_text(encoding="utf-8")) for k, name in EXPORTS.items()}
LDIF = (IAM / "groups.ldif").read_text(encoding="utf-8")
PLAN = """\
name: fuzz-iam
source:
  storage: ./src
  iam:
{sources}
target: {{storage: ./dst, profile: meta-compute}}
phases:
  iam:
    namespace: ml-training
    ldap_groups: {ldap_groups}
    assume_conditions: {{aws:MultiFactorAuthPresent: true}}
"""
SOURCES = {
    "aws": "    aws: {export: aws-authorization-details.json}",
    "azure": "    azure_export: azure-role-assignments.json",
    "azure_definitions": "    azure_export: azure-role-assignments.json\n"
    "    azure_role_definitions: azure-role-definitions.json",
    "azure_members": "    azure_export: azure-role-assignments.json\n    azure_group_members: azure-group-members.json",
    "ldif": "    ldif: groups.ldif",
}
PRINCIPALS = {
    "aws": "aws:user/bob",
    "azure": "azure:user/alice@corp.example.com",
    "azure_definitions": "azure:service/platform-automation",
    "azure_members": "azure:group/ML Platform",
    "ldif": "ldap:group/ml-engineers",
}


@pytest.fixture(scope="module")
def workroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-iam")


def _explain(root: Path, kind: str, export: bytes, what: str) -> tuple[int, str]:
    """`ferry iam explain` on a plan naming the mutated export of kind (and the unmutated ones it needs)."""
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        for name in (*EXPORTS.values(), "groups.ldif"):
            shutil.copy(IAM / name, work / name)
        write_bytes(work / ("groups.ldif" if kind == "ldif" else EXPORTS[kind]), export)
        ldap_groups = "{ml-engineers: write, data-readers: read}" if kind == "ldif" else "{}"
        plan = write_bytes(
            work / "migration.yaml", PLAN.format(sources=SOURCES[kind], ldap_groups=ldap_groups).encode()
        )
        code, _, err = check_cli(
            "iam", ("iam", "explain", str(plan), PRINCIPALS[kind]), unchanged=(work,), read_only=True, what=what
        )
        return code, err
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("kind", [*EXPORTS, "ldif"])
def test_the_base_exports_map(workroot: Path, kind: str) -> None:
    data = LDIF.encode() if kind == "ldif" else json.dumps(JSON_BASES[kind]).encode()
    assert _explain(workroot, kind, data, f"{kind} as it is")[0] == 0


# -- JSON exports ---------------------------------------------------------------------------------------


def _json_text(tree: Any, how: str, draw: st.DrawFn) -> bytes:
    text = json.dumps(tree, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    if how == "truncated":
        text = text[: int(len(text) * draw(st.floats(0, 1)))]
    elif how == "garbage":
        at = draw(st.integers(0, len(text)))
        return text[:at].encode() + draw(st.binary(min_size=1, max_size=32)) + text[at:].encode()
    elif how == "deep":
        text = "[" * draw(st.sampled_from([100, 1000, 100_000])) + "]" * draw(st.sampled_from([0, 100, 1000]))
    elif how == "huge number":
        text = text.replace('"Path": "/"', '"Path": ' + "9" * 5000, 1).replace(":", ": " + "1" * 5000 + ",", 1)
    elif how == "non-finite":
        text = text.replace("true", draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999"])), 1)
    elif how == "lone surrogate":
        text = text.replace('"', '"\\ud800', 2)
    elif how == "bom":
        text = "\ufeff" + text
    elif how == "utf-16":
        return text.encode("utf-16")
    elif how == "empty":
        text = draw(st.sampled_from(["", " ", "null", "0", '"text"', "[]", "{}"]))
    elif how == "duplicate key":
        text = text.replace("{", '{"UserDetailList": 1, ', 1)
    return text.encode("utf-8", errors="surrogatepass")


JSON_MUTATIONS = [
    "none",
    "none",
    "none",
    "truncated",
    "garbage",
    "deep",
    "huge number",
    "non-finite",
    "lone surrogate",
    "bom",
    "utf-16",
    "empty",
    "duplicate key",
]


@st.composite
def json_exports(draw: st.DrawFn) -> tuple[str, bytes, str]:
    kind = draw(st.sampled_from(list(EXPORTS)))
    tree = draw(mutated(JSON_BASES[kind], max_mutations=4))
    how = draw(st.sampled_from(JSON_MUTATIONS))
    return kind, _json_text(tree, how, draw), how


def _aws(change) -> bytes:
    details = json.loads(json.dumps(JSON_BASES["aws"]))
    change(details)
    return json.dumps(details).encode()


def _statement(details: dict) -> dict:
    return details["UserDetailList"][1]["UserPolicyList"][0]["PolicyDocument"]["Statement"][0]


# Regressions this fuzzing found: (kind, export, what the one line says). Each was an internal error (a TypeError,
# KeyError, AttributeError... deep in the mapping, a RecursionError, a ValueError of an integer of 5000 digits, a
# UnicodeDecodeError) or, for an Effect other than Allow or Deny, a statement silently ignored.
REGRESSIONS = [
    ("azure_definitions", b'[{"roleName": "x", "permissions": 5}]', "[0].permissions: Input should be a valid list"),
    ("azure_definitions", b'[{"roleName": "x", "permissions": [{"actions": [[]]}]}]', "actions[0]: Input should be"),
    ("azure", b'[{"principalName": "a", "roleDefinitionName": "R", "scope": true}]', "[0].scope: Input should be"),
    ("azure", b'["not an assignment"]', "[0]: Input should be a valid dictionary"),
    ("azure_members", b'{"ML Platform": false}', "ML Platform: Input should be a valid list"),
    ("azure_members", b'{"ML Platform": [{"id": ["x"]}]}', "ML Platform[0].id: Input should be a valid string"),
    ("aws", b'{"UserDetailList": null}', "UserDetailList: Input should be a valid list"),
    ("aws", b'{"UserDetailList": [null]}', "UserDetailList[0]: Input should be a valid dictionary"),
    ("aws", b'{"UserDetailList": [{"UserName": 0}]}', "UserDetailList[0].UserName: Input should be a valid string"),
    ("aws", _aws(lambda d: _statement(d).update(Action=5)), "Statement[0].Action: Input should be a valid string"),
    ("aws", _aws(lambda d: _statement(d).update(Effect="deny")), "Statement[0].Effect: Input should be 'Allow' or"),
    (
        "aws",
        _aws(lambda d: d["Policies"][0].update(PolicyVersionList=[{"IsDefaultVersion": True, "Document": "%7Bx"}])),
        "Policies[0].PolicyVersionList[0].Document: not a policy document (JSON, or URL-encoded JSON, each key once)",
    ),
    ("aws", _aws(lambda d: d["UserDetailList"][0]["UserPolicyList"].append({})), "UserPolicyList[0].PolicyName: F"),
    ("aws", b'{"UserDetailList": [], "Policies": [{"Arn": ' + b"1" * 5000 + b"}]}", "not valid JSON: Exceeds the"),
    ("azure", b"[" * 100_000, "not valid JSON: nested too deeply"),
    ("aws", b'{"UserDetailList": [], "UserDetailList": []}', "not valid JSON: 'UserDetailList' is given twice"),
    (
        "aws",
        _aws(
            lambda d: d["Policies"][0].update(
                PolicyVersionList=[
                    {"IsDefaultVersion": True, "Document": "%7B%22Statement%22%3A%5B%5D%2C%22Statement%22%3A%5B%5D%7D"}
                ]
            )
        ),
        "Document: not a policy document (JSON, or URL-encoded JSON, each key once)",
    ),
    ("azure", b'[{"principalName": "caf\xe9"}]', "not UTF-8 text (at byte offset 23)"),
    ("ldif", b"dn:: !!!not base64\nobjectClass: groupOfNames\ncn: ml-engineers\n", "groups.ldif:1: dn: not base64"),
    ("ldif", b"dn:: //79/A==\nobjectClass: groupOfNames\ncn: ml-engineers\n", "groups.ldif:1: dn: not base64 of UTF-8"),
    ("ldif", b"# people\ndn: cn=x\n\ndn: cn=y\nnonsense line\n", "groups.ldif:5: 'nonsense line' is not"),
]


@pytest.mark.parametrize(("kind", "data", "says"), REGRESSIONS, ids=[f"{r[0]}-{i}" for i, r in enumerate(REGRESSIONS)])
def test_what_the_fuzzing_found_is_one_line(workroot: Path, kind: str, data: bytes, says: str) -> None:
    code, err = _explain(workroot, kind, data, f"{kind}: {data[:300]!r}")
    assert code == 2 and says in err, err


@given(case=json_exports())
@fuzz_settings(250)
def test_mutated_json_exports_are_mapped_or_one_line(workroot: Path, case: tuple[str, bytes, str]) -> None:
    kind, data, how = case
    _explain(workroot, kind, data, f"{kind}, {how}:\n{data[:3000]!r}")


# -- LDIF -----------------------------------------------------------------------------------------------

LDIF_LINES = [
    "dn: cn=ml-engineers,ou=groups,dc=corp,dc=example,dc=com",
    "dn:: Y249ZW5naW5lZXJzLGRjPWV4YW1wbGU=",
    "dn:: !!!not base64",
    "dn:: //79/A==",
    "dn: ",
    "dn:",
    "objectClass: groupOfNames",
    "objectClass: posixGroup",
    "objectclass: GROUPOFUNIQUENAMES",
    "cn: ml-engineers",
    "cn:: bWwtZW5naW5lZXJz",
    "member: uid=alice,ou=people,dc=corp,dc=example,dc=com",
    "member: cn=ml-engineers,ou=groups,dc=corp,dc=example,dc=com",
    "member: UID=Ivan\\2C Jr, OU=People, DC=corp",
    "member: uid=\\C3\\A9,dc=x",
    "member: uid=\\ZZ,dc=x",
    "member: uid=\\C3,dc=x",
    "member:< file:///etc/passwd",
    "uniqueMember: uid=bob,ou=people,dc=corp,dc=example,dc=com#'0101'B",
    "memberUid: carol",
    "memberUid:",
    "owner: uid=carol,ou=people,dc=corp,dc=example,dc=com",
    "uid: alice",
    "objectClass: inetOrgPerson",
    "version: 1",
    "changetype: modify",
    "add: member",
    "-",
    "# a comment",
    " continued",
    "  continued with two spaces",
    "\tstarts with a tab",
    "no colon at all",
    ":",
    "::",
    ": value without attribute",
    "ünïcödé: välue",
    "member: " + "x" * 5000,
    "",
    "",
    "",
]


@st.composite
def ldif_texts(draw: st.DrawFn) -> tuple[bytes, str]:
    lines = LDIF.splitlines()
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["insert", "insert", "drop", "duplicate", "replace"]))
        at = draw(st.integers(0, len(lines)))
        if op == "insert" or not lines or at == len(lines):
            lines.insert(at, draw(st.sampled_from(LDIF_LINES)))
        elif op == "drop":
            del lines[at]
        elif op == "duplicate":
            lines.insert(at, lines[at])
        else:
            lines[at] = draw(st.sampled_from(LDIF_LINES))
    ending = draw(st.sampled_from(["\n", "\n", "\r\n", "\r"]))
    text = ending.join(lines) + draw(st.sampled_from(["", ending]))
    how = draw(st.sampled_from(["none", "none", "none", "bom", "utf-16", "garbage", "truncated", "nul"]))
    if how == "bom":
        text = "\ufeff" + text
    elif how == "truncated":
        text = text[: int(len(text) * draw(st.floats(0, 1)))]
    elif how == "nul":
        text = text.replace("\n", "\n\0", 1)
    elif how == "utf-16":
        return text.encode("utf-16"), how
    elif how == "garbage":
        at = draw(st.integers(0, len(text)))
        return text[:at].encode() + draw(st.binary(min_size=1, max_size=32)) + text[at:].encode(), how
    return text.encode(), how


@given(case=ldif_texts())
@fuzz_settings(120)
def test_mutated_ldif_is_mapped_or_one_line(workroot: Path, case: tuple[bytes, str]) -> None:
    data, how = case
    _explain(workroot, "ldif", data, f"ldif, {how}:\n{data[:3000]!r}")


def test_inputs_were_counted() -> None:
    assert TRIED["iam"] > 0
