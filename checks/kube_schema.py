"""Strict validation against the Kubernetes OpenAPI schemas that kubernetes-validate ships, every error listed.

kubernetes-validate stops at the first error; this builds the same validator (its strict schema of the kind,
its definitions as a registry) and iterates all of them. Validators are cached per schema, as loading the
definitions is most of the cost.
"""

from __future__ import annotations

import functools
import re

import jsonschema
from kubernetes_validate.utils import SchemaNotFoundError, VersionNotSupportedError, all_versions, schema_contents
from packaging.version import Version
from referencing import Registry, Resource

from ferry.results import CheckResult, Status

__all__ = ["SchemaNotFoundError", "VersionNotSupportedError", "schema_errors", "schema_name", "schema_version"]


def schema_version(version: str | None) -> str:
    """The schema set for a Kubernetes version (the newest not newer than it); the newest when None.

    Raises VersionNotSupportedError for a version newer than every schema set or older than all.
    """
    known = all_versions()
    if version is None:
        return known[-1]
    wanted = Version(version.removeprefix("v"))
    if wanted.release[:2] > Version(known[-1]).release[:2]:
        raise VersionNotSupportedError(version)
    older = [v for v in known if Version(v).release[:2] <= wanted.release[:2]]
    if not older:
        raise VersionNotSupportedError(version)
    return older[-1]


def schema_name(api_version: str, kind: str) -> str:
    """The schema file of a kind, as kubernetes-validate names it (rbac.authorization.k8s.io/v1 -> rbac-v1)."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}"


@functools.lru_cache(maxsize=128)
def _validator(name: str, version: str) -> jsonschema.protocols.Validator | None:
    if not re.fullmatch(r"[a-z0-9.-]+", name):  # no kind nor API version has a "/" or a NUL: no schema file either
        return None
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = schema_contents(f"{folder}/{name}.json", version)
    except FileNotFoundError:
        return None
    definitions = schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _message(error: jsonschema.ValidationError, hide_values: bool) -> str:
    # jsonschema names the offending value first ("'x' is not of type ..."); a Secret's value must not be shown.
    if hide_values:
        return error.message.replace(repr(error.instance), "the value")
    return error.message


def schema_errors(doc: dict, version: str | None, schema: str | None = None, hide_values: bool = False) -> list[str]:
    """Every violation of doc against the strict schema of its kind (or the named one): `path: message` each,
    with `the value` for the offending value when hide_values (a Secret's).

    Raises SchemaNotFoundError when the version has no schema for the kind (a custom resource).
    """
    api_version, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    found = schema_version(version)
    validator = _validator(schema or schema_name(api_version, kind), found)
    if validator is None:
        raise SchemaNotFoundError(kind, found, api_version)
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {_message(e, hide_values)}" for e in errors]


def unknown_version(name: str, objects: int, kubernetes_version: str | None) -> CheckResult:
    """The check name's FAIL when kubernetes-validate has no schemas for the plan's Kubernetes version."""
    return CheckResult(
        name,
        Status.FAIL,
        {"objects": objects, "kubernetes": kubernetes_version},
        evidence=[
            f"kubernetes-validate has no schemas for Kubernetes {kubernetes_version}: set target.kubernetes_version"
        ],
    )
