"""The quiesce freeze step against the real control plane (tests/controlplane, kwok nodes): the source cluster's
workloads scaled to 0 and their pods gone, what would scale them back named first, the replica counts restored."""

from __future__ import annotations

from pathlib import Path

from ferry.cutover.freeze import Freeze
from ferry.plan import load_plan
from tests.controlplane.cluster import ControlPlane
from tests.golive.test_autoscale import deployment, hpa


def pods(plane: ControlPlane, namespace: str, app: str) -> int:
    return len(plane.core().list_namespaced_pod(namespace, label_selector=f"app={app}").items)


def quiesce_plan(root: Path, plane: ControlPlane, namespace: str) -> Path:
    plane.kubeconfig(root / "kubeconfig", context="source-eks")
    plan = root / "migration.yaml"
    plan.write_text(
        "name: qz\nsource:\n  storage: ./src\n"
        f"  cluster: {{context: source-eks, namespace: {namespace}, kubeconfig: kubeconfig}}\n"
        "target: {storage: ./dst}\nphases: {data_sync: {}}\n"
        "cutover:\n  freeze_budget: 5m\n  freeze:\n"
        "    - quiesce: {cluster: source, workloads: [Deployment/llama-serve, Deployment/feature-writer]}\n"
    )
    return plan


def test_quiesce_scales_to_zero_waits_for_the_pods_and_restores(control_plane, namespace, tmp_path) -> None:
    control_plane.seed(deployment(namespace, "llama-serve", replicas=2))
    writer = deployment(namespace, "feature-writer", replicas=1)
    writer["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "features:apps/Deployment:ns/feature-writer"}
    control_plane.seed(writer)
    control_plane.seed(hpa(namespace))
    control_plane.wait("pods scheduled", lambda: pods(control_plane, namespace, "llama-serve") == 2)
    freeze = Freeze(load_plan(quiesce_plan(tmp_path, control_plane, namespace)))
    said: list[str] = []
    freeze.apply("run-q", said.append)

    warnings = [line for line in said if line.startswith("warning:")]
    assert any("HorizontalPodAutoscaler llama-serve scales Deployment/llama-serve" in w for w in warnings)
    assert any("Deployment/feature-writer is tracked by Argo CD" in w for w in warnings)
    assert said.index(warnings[-1]) < next(i for i, s in enumerate(said) if s.startswith("frozen:"))
    for app in ("llama-serve", "feature-writer"):
        assert control_plane.get("apps/v1", "Deployment", app, namespace)["spec"]["replicas"] == 0
        assert pods(control_plane, namespace, app) == 0  # waited for: gone when apply returned
    (entry,) = freeze.frozen().steps
    assert entry["replicas"] == {"Deployment/llama-serve": 2, "Deployment/feature-writer": 1}

    assert freeze.undo(said.append) == 0
    assert control_plane.get("apps/v1", "Deployment", "llama-serve", namespace)["spec"]["replicas"] == 2
    assert control_plane.get("apps/v1", "Deployment", "feature-writer", namespace)["spec"]["replicas"] == 1
    assert freeze.frozen() is None
