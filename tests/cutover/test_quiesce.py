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


# Argo CD's Application CRD, as little of it as the API server needs to serve Applications (Argo CD's own schema
# preserves unknown fields under spec and status too).
APPLICATION_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "applications.argoproj.io"},
    "spec": {
        "group": "argoproj.io",
        "names": {"kind": "Application", "plural": "applications", "singular": "application"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def application(namespace: str, name: str, self_heal: bool, tracks: str | None = None) -> dict:
    """An Application in namespace syncing automatically (selfHeal or not); tracks: the Deployment its status lists."""
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"project": "default", "syncPolicy": {"automated": {"prune": True, "selfHeal": self_heal}}},
    }
    if tracks is not None:
        app["status"] = {"resources": [{"group": "apps", "kind": "Deployment", "namespace": namespace, "name": tracks}]}
    return app


def test_argo_cd_self_heal_is_read_from_the_applications_that_track_the_workloads(
    control_plane, namespace, tmp_path
) -> None:
    from kubernetes import client

    if control_plane.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "applications.argoproj.io") is None:
        control_plane.seed(APPLICATION_CRD)
    extensions = client.ApiextensionsV1Api(control_plane.api_client())

    def established() -> bool:
        status = extensions.read_custom_resource_definition("applications.argoproj.io").status
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    control_plane.wait("the Application CRD established", established)
    apps = client.CustomObjectsApi(control_plane.api_client())
    # llama-serve: listed by a self-healing Application's status. feature-writer: its tracking annotation names an
    # Application that syncs without selfHeal (nothing to say), which the annotation alone would have warned of.
    control_plane.seed(deployment(namespace, "llama-serve", replicas=1))
    writer = deployment(namespace, "feature-writer", replicas=1)
    writer["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": f"{namespace}_argo-features:apps/x:y/z"}
    control_plane.seed(writer)
    created = [
        application(namespace, "argo-serving", True, "llama-serve"),
        application(namespace, "argo-features", False),
    ]
    for app in created:
        apps.create_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "applications", app)
    try:
        plan = load_plan(quiesce_plan(tmp_path, control_plane, namespace))
        said: list[str] = []
        Freeze(plan).apply("run-argo", said.append)
        warnings = [line for line in said if line.startswith("warning:")]
        assert warnings == [
            f"warning: Argo CD Application {namespace}/argo-serving syncs Deployment/llama-serve with selfHeal: it may "
            "scale a quiesced workload back up during the freeze"
        ]
        assert Freeze(plan).undo(said.append) == 0
    finally:  # other tests' workloads are tracked by name: none of these may outlive this test
        for app in created:
            name = app["metadata"]["name"]
            apps.delete_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "applications", name)
