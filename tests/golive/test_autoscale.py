"""Autoscaling under a spike against the real control plane (tests/controlplane): the Deployment controller makes
the Pods, the scheduler binds them to kwok's nodes, kwok turns them Ready, and the HPA controller scales through its
floor. What is timed is how long this control plane takes, not a GPU cloud's: nothing is pulled or started.
"""

from __future__ import annotations

import threading

import pytest

from ferry import kube
from ferry.errors import NotFoundError, TransientError
from ferry.golive import autoscale
from tests.controlplane.cluster import ControlPlane
from tests.support import free_port


def deployment(namespace: str, name: str = "llama-serve", replicas: int = 2) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "m", "image": "m:1"}]}},
        },
    }


def hpa(namespace: str, minimum: int = 2, maximum: int = 4) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llama-serve", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-serve"},
            "minReplicas": minimum,
            "maxReplicas": maximum,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                   "averageUtilization": 80}}}],
        },
    }  # fmt: skip


def _ready(plane: ControlPlane, namespace: str, replicas: int) -> None:
    plane.wait(
        f"{replicas} replicas Ready",
        lambda: (plane.get("apps/v1", "Deployment", "llama-serve", namespace).get("status") or {}).get("readyReplicas")
        == replicas,
    )


def _replica_owners(plane: ControlPlane, namespace: str) -> set[str]:
    found = plane.get("apps/v1", "Deployment", "llama-serve", namespace)
    return {
        entry["manager"]
        for entry in found["metadata"]["managedFields"]
        if "f:replicas" in (entry.get("fieldsV1") or {}).get("f:spec", {})
    }


def test_scale_up_is_timed_and_the_replica_count_restored(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.seed(deployment(namespace))
    _ready(control_plane, namespace, 2)
    api = control_plane.api_client()
    original = autoscale.snapshot(api, namespace, "llama-serve", None)
    assert original == {"namespace": namespace, "deployment": "llama-serve", "replicas": 2}
    result = autoscale.spike(api, original, 8, timeout_s=60, poll_s=0.1)
    assert not result.problems and result.restored, result.problems
    assert result.seconds is not None and result.seconds > 0, "timed from the patch to the last replica Ready"
    assert any("8 replica(s) Ready after" in line for line in result.evidence)
    assert control_plane.get("apps/v1", "Deployment", "llama-serve", namespace)["spec"]["replicas"] == 2
    # The spike and its restore were ferry's own writes.
    assert "ferry" in _replica_owners(control_plane, namespace)
    _ready(control_plane, namespace, 2)


def test_not_ready_in_time_is_a_problem_and_still_restored(control_plane: ControlPlane, namespace: str) -> None:
    # Eight GPUs a pod: more replicas than the GPU nodes hold never get Ready.
    wanted = deployment(namespace)
    wanted["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    wanted["spec"]["replicas"] = 1
    control_plane.seed(wanted)
    _ready(control_plane, namespace, 1)
    api = control_plane.api_client()
    original = autoscale.snapshot(api, namespace, "llama-serve", None)
    result = autoscale.spike(api, original, 40, timeout_s=3, poll_s=0.1)
    assert result.seconds is None and len(result.problems) == 1
    assert result.problems[0].startswith("only ") and result.problems[0].endswith(" of 40 replica(s) Ready after 3 s")
    assert result.restored
    assert control_plane.get("apps/v1", "Deployment", "llama-serve", namespace)["spec"]["replicas"] == 1


def test_through_the_hpa_its_bounds_are_raised_then_restored(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.seed(deployment(namespace))
    control_plane.seed(hpa(namespace, 2, 4))
    _ready(control_plane, namespace, 2)
    api = control_plane.api_client()
    original = autoscale.snapshot(api, namespace, "llama-serve", "llama-serve")
    assert original["hpa"] == {"name": "llama-serve", "minReplicas": 2, "maxReplicas": 4}
    result = autoscale.spike(api, original, 8, timeout_s=60, poll_s=0.1)
    assert not result.problems and result.seconds is not None, result.problems
    bounds = control_plane.get("autoscaling/v2", "HorizontalPodAutoscaler", "llama-serve", namespace)["spec"]
    assert (bounds["minReplicas"], bounds["maxReplicas"]) == (2, 4)
    # The HPA controller scaled the Deployment (through its scale subresource): ferry did not touch its replicas.
    assert _replica_owners(control_plane, namespace) == {"kube-controller-manager"}


def test_a_missing_deployment_and_an_absent_cluster(control_plane: ControlPlane, namespace: str, tmp_path) -> None:
    with pytest.raises(NotFoundError, match="404"):
        autoscale.snapshot(control_plane.api_client(), namespace, "nope", None)
    kubeconfig = control_plane.kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.write_text(kubeconfig.read_text().replace(control_plane.url, f"https://127.0.0.1:{free_port()}"))
    with pytest.raises(TransientError, match="did not answer"):
        autoscale.snapshot(kube.api_client(kubeconfig, "test"), namespace, "llama-serve", None)


def test_an_interrupt_ends_the_wait_and_still_restores(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.seed(deployment(namespace))
    _ready(control_plane, namespace, 2)
    api = control_plane.api_client()
    stop = threading.Event()
    stop.set()
    result = autoscale.spike(api, autoscale.snapshot(api, namespace, "llama-serve", None), 8, 60, stop=stop)
    assert result.problems == ["interrupted with 2 of 8 replica(s) Ready"] and result.restored
    assert control_plane.get("apps/v1", "Deployment", "llama-serve", namespace)["spec"]["replicas"] == 2
