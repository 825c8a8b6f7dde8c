"""The iam phase's bindings on a real API server with RBAC on (tests/controlplane): mapped from the example exports,
applied by the manifests phase, then asked of the authorizer itself with SubjectAccessReviews. Each subject may do
what its level grants in the plan's namespace, nothing above it, and nothing outside that namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ferry.audit import AuditFolder
from ferry.layout import StateLayout
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from ferry.results import Status
from tests.controlplane.cluster import ControlPlane
from tests.flows.test_iam_phase import write_two_phase_plan

# The target's roles as the profile names them, made as a GPU cloud would: Kubernetes' own view, edit and admin.
ROLES = {"compute-viewer": "view", "compute-operator": "edit", "compute-admin": "admin"}
# (verb, group, resource) each level may do in its namespace, and the first one above it that it may not.
MAY = {
    "compute-viewer": [("get", "", "pods"), ("list", "apps", "deployments")],
    "compute-operator": [("get", "", "pods"), ("create", "apps", "deployments"), ("delete", "batch", "jobs")],
    "compute-admin": [("create", "apps", "deployments"), ("create", "rbac.authorization.k8s.io", "rolebindings")],
}
MAY_NOT = {
    "compute-viewer": [("create", "apps", "deployments"), ("get", "", "secrets")],
    "compute-operator": [("create", "rbac.authorization.k8s.io", "rolebindings")],
    "compute-admin": [("delete", "", "namespaces")],
}


@pytest.fixture
def target_roles(control_plane: ControlPlane) -> Iterator[None]:
    rbac = control_plane.resource("rbac.authorization.k8s.io/v1", "ClusterRole")
    for name, builtin in ROLES.items():
        rules = rbac.get(name=builtin).to_dict()["rules"]
        rbac.create(body={"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                          "metadata": {"name": name}, "rules": rules})  # fmt: skip
    yield
    for name in ROLES:
        rbac.delete(name=name)


def test_each_subject_gets_its_level_in_the_namespace_and_nothing_more(
    control_plane: ControlPlane, namespace: str, target_roles: None, tmp_path: Path
) -> None:
    plan = write_two_phase_plan(tmp_path, "iam-sar")
    control_plane.kubeconfig(tmp_path / "kubeconfig", context="meta-eu")
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "ns.yaml").write_text(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n")
    text = plan.read_text().replace("namespace: ml-training", f"namespace: {namespace}")
    text = text.replace(
        "target:\n", f"target:\n  cluster: {{context: meta-eu, namespace: {namespace}, kubeconfig: kubeconfig}}\n"
    )
    plan.write_text(text.replace("phases:\n", "phases:\n  manifests: {sources: [k8s/]}\n"))
    loaded = load_plan(plan)
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    for name in ("iam", "manifests"):
        phase = open_phase(loaded, name)
        for step in phase.steps():
            phase.run(step, audit, Reporter())
        assert all(r.status != Status.FAIL for r in phase.gate(audit)), (name, phase.gate(audit))

    bindings = [
        doc
        for doc in yaml.safe_load_all(StateLayout(tmp_path / ".ferry").bindings("iam-sar").read_text())
        if doc and doc["kind"] == "RoleBinding"
    ]
    assert {b["roleRef"]["name"] for b in bindings} == set(ROLES)
    checked = 0
    for binding in bindings:
        live = control_plane.get("rbac.authorization.k8s.io/v1", "RoleBinding", binding["metadata"]["name"], namespace)
        assert live is not None and live["subjects"] == binding["subjects"]
        role = binding["roleRef"]["name"]
        for subject in binding["subjects"]:
            for attributes in MAY[role]:
                assert control_plane.allowed(subject, namespace, *attributes), (subject, role, attributes)
            for attributes in MAY_NOT[role]:
                assert not control_plane.allowed(subject, namespace, *attributes), (subject, role, attributes)
            # Nothing outside the plan's namespace.
            assert not control_plane.allowed(subject, "default", "get", "", "pods"), subject
            checked += 1
    assert checked >= 3
    # Someone the exports do not name has nothing.
    assert not control_plane.allowed({"kind": "User", "name": "mallory"}, namespace, "get", "", "pods")
