"""The manifests phase in the pipeline on the real Prefect server, against the real control plane
(tests/controlplane): a rollout that never gets ready is rolled back exactly, and a later `ferry rollback` stops on
what a person changed since unless --force."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.phases.test_manifests_cluster import _state
from tests.support import run_cli

PLAN = """\
name: {name}
source:
  storage: ./src
target:
  storage: ./dst
  profile: meta-compute
  cluster: {{context: meta-eu, namespace: {ns}, kubeconfig: kubeconfig}}
phases:
  manifests:
    sources: [k8s/]
    images: {{"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/": "registry.meta.example/ai-training/"}}
    namespaces: {{ml-train: {ns}}}
gates:
  manifests: {{rollout_timeout_s: {timeout}}}
"""
MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: trainer-config, namespace: ml-train}
data: {EPOCHS: "10"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml-train}
spec:
  replicas: 1
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - name: trainer
        image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:2024.06
        envFrom: [{configMapRef: {name: trainer-config}}]
        resources: {limits: {nvidia.com/gpu: 8}}
"""


@pytest.fixture
def ns(control_plane: ControlPlane) -> Iterator[str]:
    """The target namespace, holding an older trainer-config."""
    name = f"ai-{uuid.uuid4().hex[:8]}"
    control_plane.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    control_plane.seed(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-config", "namespace": name},
            "data": {"EPOCHS": "5"},
        }
    )
    yield name
    control_plane.delete_namespace(name)


def _plan(root: Path, name: str, plane: ControlPlane, ns: str, replicas: int = 1, timeout: float = 60) -> Path:
    for folder in ("src", "dst", "k8s"):
        (root / folder).mkdir()
    (root / "k8s" / "app.yaml").write_text(MANIFESTS.replace("replicas: 1", f"replicas: {replicas}"))
    plane.kubeconfig(root / "kubeconfig", context="meta-eu")
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(name=name, ns=ns, timeout=timeout))
    return plan


def test_a_rollout_that_never_gets_ready_is_rolled_back_by_the_pipeline(
    prefect_api: str, control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    before = _state(control_plane, ns)
    # More pods of eight GPUs than the GPU nodes hold.
    plan = _plan(tmp_path, "never-ready", control_plane, ns, replicas=9, timeout=5)
    with pytest.raises(GateFailed, match="manifests: gate failed: manifests.rollout"):
        migrate(plan_path=str(plan))
    assert _state(control_plane, ns) == before
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("never-ready", "manifests").status == "rolled_back"
    runlog.close()


def test_a_later_rollback_stops_on_drift_and_force_restores(
    prefect_api: str, control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    from flows.pipeline import migrate

    before = _state(control_plane, ns)
    plan = _plan(tmp_path, "drifted", control_plane, ns)
    outcome = migrate(plan_path=str(plan))
    assert outcome["phases"]["manifests"] == "PASS"
    assert control_plane.get("v1", "ConfigMap", "trainer-config", ns)["data"] == {"EPOCHS": "10"}

    control_plane.kubectl("patch", "configmap", "trainer-config", "-n", ns, "-p", '{"data":{"EPOCHS":"12"}}')
    code, out, err = run_cli("rollback", str(plan), "--phase", "manifests", "--yes")
    assert code == 2
    assert f"changed since the rollout: v1 ConfigMap {ns} trainer-config" in out
    assert "rollback stopped; --force restores anyway" in err.strip().splitlines()[-1]
    assert control_plane.get("v1", "ConfigMap", "trainer-config", ns)["data"] == {"EPOCHS": "12"}

    code, out, err = run_cli("rollback", str(plan), "--phase", "manifests", "--yes", "--force")
    assert code == 0, err
    assert f"rolled back manifests of run {outcome['run_id']}: restored 2 object(s)" in out
    assert _state(control_plane, ns) == before
