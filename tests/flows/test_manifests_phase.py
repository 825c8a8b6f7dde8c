"""The manifests phase in the pipeline on the real Prefect server, against the in-process Kubernetes API emulator
(tests/kube_emulator.py; no real API server can run here, so readiness is status the test sets): a rollout that
never gets ready is rolled back exactly, and a later `ferry rollback` stops on what changed since unless --force."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.manifests.apply import restorable
from tests.kube_emulator import KubeEmulator
from tests.support import run_cli

NS = "ai-training-v4"
PLAN = """\
name: {name}
source:
  storage: ./src
target:
  storage: ./dst
  profile: meta-compute
  kubernetes_version: "1.30"
  cluster: {{context: meta-eu, namespace: {ns}, kubeconfig: kubeconfig}}
phases:
  manifests:
    sources: [k8s/]
    images: {{"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/": "registry.meta.example/ai-training/"}}
    namespaces: {{ml-train: {ns}}}
gates:
  manifests: {{rollout_timeout_s: 1}}
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


def seed(emu: KubeEmulator) -> KubeEmulator:
    """The cluster before the rollout: the target namespace, holding an older trainer-config."""
    emu.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    emu.seed(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-config", "namespace": NS},
            "data": {"EPOCHS": "5"},
        }
    )
    return emu


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emu:
        yield seed(emu)


def _plan(root: Path, name: str, emulator: KubeEmulator) -> Path:
    for folder in ("src", "dst", "k8s"):
        (root / folder).mkdir()
    (root / "k8s" / "app.yaml").write_text(MANIFESTS)
    emulator.write_kubeconfig(root / "kubeconfig", context="meta-eu")
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(name=name, ns=NS))
    return plan


def _state(emulator: KubeEmulator) -> dict[str, dict]:
    return {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()}


def test_a_rollout_that_never_gets_ready_is_rolled_back_by_the_pipeline(
    prefect_api: str, emulator: KubeEmulator, tmp_path: Path
) -> None:
    from ferry.errors import GateFailed
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    before = _state(emulator)
    plan = _plan(tmp_path, "never-ready", emulator)
    with pytest.raises(GateFailed, match="manifests: gate failed: manifests.rollout"):
        migrate(plan_path=str(plan))
    assert _state(emulator) == before
    runlog = RunLog(tmp_path / ".ferry" / "state")
    assert runlog.phase("never-ready", "manifests").status == "rolled_back"
    runlog.close()


def test_a_later_rollback_stops_on_drift_and_force_restores(
    prefect_api: str, emulator: KubeEmulator, tmp_path: Path
) -> None:
    from kubernetes import client

    from flows.pipeline import migrate

    emulator.on_write(
        "Deployment",
        lambda d: {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1},
    )  # fmt: skip
    before = _state(emulator)
    plan = _plan(tmp_path, "drifted", emulator)
    outcome = migrate(plan_path=str(plan))
    assert outcome["phases"]["manifests"] == "PASS"
    assert emulator.get("v1", "ConfigMap", "trainer-config", NS)["data"] == {"EPOCHS": "10"}

    client.CoreV1Api(emulator.api_client()).patch_namespaced_config_map(
        "trainer-config", NS, {"data": {"EPOCHS": "12"}}
    )
    code, out, err = run_cli("rollback", str(plan), "--phase", "manifests", "--yes")
    assert code == 2
    assert f"changed since the rollout: v1 ConfigMap {NS} trainer-config" in out
    assert "rollback stopped; --force restores anyway" in err.strip().splitlines()[-1]
    assert emulator.get("v1", "ConfigMap", "trainer-config", NS)["data"] == {"EPOCHS": "12"}

    code, out, err = run_cli("rollback", str(plan), "--phase", "manifests", "--yes", "--force")
    assert code == 0, err
    assert f"rolled back manifests of run {outcome['run_id']}: restored 2 object(s)" in out
    assert _state(emulator) == before
