"""The IAM exports read and checked for the shape the mapping needs (`read_export`); the iam phase reads the
sources its plan names with them and maps their principals to the target's roles."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError

from ferry.errors import UsageError


# The shapes of the exports, as far as the mapping reads them (an export holds more: that is let through). A
# value of another type is refused here, in one line naming where it is, rather than failing in the mapping.
class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


Strings = str | list[str]


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (json keeps the last silently: a second Statement would hide
    the first, its Deny with it)."""
    found = dict(pairs)
    if len(found) < len(pairs):
        twice = next(key for key, n in Counter(key for key, _ in pairs).items() if n > 1)
        raise ValueError(f"{twice!r} is given twice in one object")
    return found


def _decoded(value: Any) -> Any:
    """A policy document as the API holds it (URL-encoded JSON), parsed; any other value as it is."""
    if isinstance(value, str):
        try:
            return json.loads(unquote(value), object_pairs_hook=_unique)
        except (ValueError, RecursionError):
            raise ValueError("not a policy document (JSON, or URL-encoded JSON, each key once)") from None
    return value


class _Statement(_Shape):
    Effect: Literal["Allow", "Deny"] = "Allow"
    Action: Strings | None = None
    NotAction: Strings | None = None
    Resource: Strings | None = None
    NotResource: Strings | None = None
    # A trust policy's: "*", or {AWS: ..., Federated: ..., Service: ...}.
    Principal: str | dict[str, Strings] | None = None
    Condition: dict[str, dict[str, Any] | None] | None = None


class _Document(_Shape):
    Statement: _Statement | list[_Statement] | None = None


Document = Annotated[_Document, BeforeValidator(_decoded)]


class _Attached(_Shape):
    PolicyName: str
    PolicyArn: str


class _Inline(_Shape):
    PolicyName: str
    PolicyDocument: Document


class _Boundary(_Shape):
    PermissionsBoundaryArn: str | None = None


class _Tag(_Shape):
    Key: str
    Value: str = ""


class _Holder(_Shape):
    Arn: str = ""
    AttachedManagedPolicies: list[_Attached] = []
    PermissionsBoundary: _Boundary | None = None
    Tags: list[_Tag] | None = None


class _User(_Holder):
    UserName: str
    GroupList: list[str] = []
    UserPolicyList: list[_Inline] = []


class _Group(_Holder):
    GroupName: str
    GroupPolicyList: list[_Inline] = []


class _Role(_Holder):
    RoleName: str
    Path: str = "/"
    AssumeRolePolicyDocument: Document | None = None
    RolePolicyList: list[_Inline] = []


class _Version(_Shape):
    IsDefaultVersion: bool = False
    Document: Document


class _Policy(_Shape):
    Arn: str
    PolicyVersionList: list[_Version] = []


class _AwsDetails(_Shape):
    UserDetailList: list[_User]
    GroupDetailList: list[_Group] = []
    RoleDetailList: list[_Role] = []
    Policies: list[_Policy] = []


class _Assignment(_Shape):
    principalName: str | None = None
    principalType: str | None = None
    principalId: str | None = None
    roleDefinitionName: str | None = None
    scope: str | None = None
    condition: str | None = None


class _Permission(_Shape):
    actions: list[str] = []
    notActions: list[str] = []
    dataActions: list[str] = []
    notDataActions: list[str] = []


class _RoleDefinition(_Shape):
    roleName: str | None = None
    permissions: list[_Permission] = []


class _Member(_Shape):
    id: str | None = None
    displayName: str | None = None
    userPrincipalName: str | None = None


SHAPES: dict[str, TypeAdapter] = {
    "aws.export": TypeAdapter(_AwsDetails),
    "azure_export": TypeAdapter(list[_Assignment]),
    "azure_role_definitions": TypeAdapter(list[_RoleDefinition]),
    "azure_group_members": TypeAdapter(dict[str, list[_Member]]),
}


def _data_path(data: Any, loc: tuple) -> list[str]:
    """The parts of pydantic's error location that are the export's own keys and indexes (pydantic puts the names
    of union members in it too)."""
    path, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int):
            path.append(f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part))
            node = node[part]
    return path


def _shape_problem(data: Any, errors: list[dict]) -> str:
    """`where: problem` for the error deepest in the export (of a union's, the member that matched furthest)."""
    error = max(errors, key=lambda e: len(_data_path(data, e["loc"])))
    path = _data_path(data, error["loc"])
    if error["type"] == "missing":  # the field it lacks, which the export cannot name
        path.append(f".{error['loc'][-1]}" if path else str(error["loc"][-1]))
    return f"{''.join(path) or '(top level)'}: {error['msg'].removeprefix('Value error, ')}"


def read_export(path: Path, field_name: str) -> Any:
    where = f"source.iam.{field_name}: {path}"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{where}: not UTF-8 text (at byte offset {exc.start})") from None
    if field_name == "ldif":
        return text
    try:
        data = json.loads(text, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        raise UsageError(f"source.iam.{field_name}: {path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # a key given twice, a number of more digits than Python converts
        raise UsageError(f"{where}: not valid JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:
        raise UsageError(f"{where}: not valid JSON: nested too deeply") from None
    try:
        SHAPES[field_name].validate_python(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        # Not even the right kind of JSON value: the reader of that export says what it expects.
        if error["loc"] and not (error["loc"] == ("UserDetailList",) and error["type"] == "missing"):
            raise UsageError(f"{where}: {_shape_problem(data, exc.errors())}") from None
    return data
