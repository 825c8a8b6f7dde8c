"""The iam gate's checks: rendered bindings valid and faithful to the mapping, coverage, ambiguity, widening."""

from __future__ import annotations

import copy
import json

from checks.iam import (
    check_iam_coverage,
    check_iam_widened,
    check_rbac_bindings,
    check_rbac_schema,
)
from ferry.iam.model import Mapping, map_principals, render_rbac
from ferry.results import Status
from tests.iam.test_mapping import ROLES, example_mapping


def test_rendered_bindings_are_valid_and_match_the_mapping() -> None:
    mapping = example_mapping()
    docs = render_rbac(mapping, "demo")
    assert [d["kind"] for d in docs] == ["ServiceAccount"] * 4 + ["RoleBinding"] * 3
    assert check_rbac_schema(docs, None).status == Status.PASS
    assert check_rbac_bindings(docs, mapping).status == Status.PASS
    # Round trip through the audit folder's JSON keeps every decision.
    assert Mapping.from_dict(json.loads(json.dumps(mapping.to_dict()))).to_dict() == mapping.to_dict()


def test_tampered_bindings_fail_the_gate() -> None:
    mapping = example_mapping()
    docs = render_rbac(mapping, "demo")
    escalated = copy.deepcopy(docs)
    admin = next(d for d in escalated if d["metadata"]["name"] == "ferry-compute-admin")
    admin["subjects"].append({"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"})
    result = check_rbac_bindings(escalated, mapping)
    assert result.status == Status.FAIL and any("bound 2 times" in e for e in result.evidence)
    viewer = next(d for d in escalated if d["metadata"]["name"] == "ferry-compute-viewer")
    viewer["subjects"] = [s for s in viewer["subjects"] if s["name"] != "bob"]
    result = check_rbac_bindings(escalated, mapping)
    assert any("User bob: escalated to compute-admin" in e for e in result.evidence)
    missing = [d for d in docs if d["metadata"]["name"] != "ferry-compute-admin"]
    assert any("no binding renders it" in e for e in check_rbac_bindings(missing, mapping).evidence)

    invalid = copy.deepcopy(docs)
    next(d for d in invalid if d["kind"] == "RoleBinding")["subjects"][0]["team"] = "ml"
    schema = check_rbac_schema(invalid, "1.30")
    assert schema.status == Status.FAIL and "'team' was unexpected" in schema.evidence[0]
    assert check_rbac_schema(docs, "1.99").status == Status.FAIL


def test_coverage_and_widening_thresholds() -> None:
    mapping = example_mapping()
    assert check_iam_coverage(mapping, 0.9).status == Status.WARN
    assert check_iam_coverage(mapping, 0.95).status == Status.FAIL
    assert check_iam_widened(mapping, True).status == Status.WARN
    assert check_iam_widened(mapping, False).status == Status.FAIL
    clean = map_principals([], "ml", ROLES, {})
    assert check_iam_coverage(clean, 1.0).status == Status.PASS
    assert check_iam_widened(clean, False).status == Status.PASS
