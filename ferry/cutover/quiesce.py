"""The quiesce freeze step on the source cluster: its workloads scaled to 0 (their replica counts kept for the undo),
their pods waited out, and what would scale them back up (an HPA, a KEDA ScaledObject, an Argo CD Application that
self-heals) named first."""

from __future__ import annotations

import time
from typing import Any

from ferry.errors import FerryError, NotFoundError, PermanentError
from ferry.kube import api_client, kubeconfig_path, translated
from ferry.plan import LoadedPlan

ARGO_TRACKING = ("argocd.argoproj.io/tracking-id", "argocd.argoproj.io/instance")
# Argo CD's Application custom resource: (group, version, plural).
ARGO_APPLICATIONS = ("argoproj.io", "v1alpha1", "applications")


class Workloads:
    """The source cluster's namespace as the plan names it (`source.cluster`), through the one cluster adapter."""

    def __init__(self, loaded: LoadedPlan):
        cluster = loaded.plan.source.cluster
        assert cluster is not None  # the plan requires it with a quiesce step
        self.namespace = cluster.namespace
        self.api = api_client(kubeconfig_path(cluster.kubeconfig, loaded.path.parent), cluster.context)

    def _apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.api)

    def _read(self, workload: str) -> Any:
        kind, name = workload.split("/", 1)
        reader = getattr(self._apps(), f"read_namespaced_{_snake(kind)}")
        with translated(f"{workload} in {self.namespace}"):
            return reader(name, self.namespace)

    def replicas(self, workload: str) -> int:
        """The workload's replica count now."""
        return int(self._read(workload).spec.replicas or 0)

    def scale(self, workload: str, replicas: int) -> None:
        """Set the workload's replica count (its scale subresource)."""
        kind, name = workload.split("/", 1)
        patch = getattr(self._apps(), f"patch_namespaced_{_snake(kind)}_scale")
        with translated(f"scaling {workload} in {self.namespace}"):
            patch(name, self.namespace, {"spec": {"replicas": replicas}})

    def wait_gone(self, workload: str, timeout_s: float = 300) -> None:
        """Wait until no pod of the workload is left (its selector's pods); FerryError after timeout_s."""
        from kubernetes import client

        labels = self._read(workload).spec.selector.match_labels or {}
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        deadline = time.monotonic() + timeout_s
        while True:
            with translated(f"pods of {workload} in {self.namespace}"):
                pods = client.CoreV1Api(self.api).list_namespaced_pod(self.namespace, label_selector=selector).items
            if not pods:
                return
            if time.monotonic() > deadline:
                raise FerryError(f"quiesce: {len(pods)} pod(s) of {workload} still there after {timeout_s:g} s")
            time.sleep(0.5)

    def scalers(self, workloads: list[str]) -> list[str]:
        """What would scale the workloads back up while frozen, in words: HPAs and KEDA ScaledObjects targeting
        them, Argo CD Applications that track them with `selfHeal` (it puts the replica count back); where no
        Application can be read (Argo CD's CRD absent, or not allowed), Argo CD's tracking annotation."""
        from kubernetes import client

        found: list[str] = []
        wanted = {tuple(w.split("/", 1)) for w in workloads}
        with translated(f"HorizontalPodAutoscalers in {self.namespace}"):
            hpas = client.AutoscalingV2Api(self.api).list_namespaced_horizontal_pod_autoscaler(self.namespace).items
        for hpa in hpas:
            ref = hpa.spec.scale_target_ref
            if (ref.kind, ref.name) in wanted:
                found.append(f"HorizontalPodAutoscaler {hpa.metadata.name} scales {ref.kind}/{ref.name}")
        try:
            with translated(f"KEDA ScaledObjects in {self.namespace}"):
                scaled = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
                    "keda.sh", "v1alpha1", self.namespace, "scaledobjects"
                )["items"]
        except NotFoundError:  # KEDA is not installed
            scaled = []
        for item in scaled:
            ref = item.get("spec", {}).get("scaleTargetRef", {})
            if (ref.get("kind", "Deployment"), ref.get("name")) in wanted:
                kind = ref.get("kind", "Deployment")
                found.append(f"KEDA ScaledObject {item['metadata']['name']} scales {kind}/{ref['name']}")
        applications = self._argo_applications()
        for workload in workloads:
            annotations = self._read(workload).metadata.annotations or {}
            tracking = [a for a in applications or () if _tracks(a, workload, self.namespace, annotations)]
            for app in tracking:
                automated = ((app.get("spec") or {}).get("syncPolicy") or {}).get("automated") or {}
                if automated.get("selfHeal") is True:
                    where = f"{app['metadata'].get('namespace')}/{app['metadata']['name']}"
                    found.append(f"Argo CD Application {where} syncs {workload} with selfHeal")
            if not tracking and any(key in annotations for key in ARGO_TRACKING):
                found.append(f"{workload} is tracked by Argo CD: an Application with selfHeal puts its replicas back")
        return found

    def _argo_applications(self) -> list[dict] | None:
        """Argo CD's Applications in every namespace; None where they cannot be read (no such CRD: Argo CD is not
        installed there; or not allowed to list them)."""
        from kubernetes import client

        try:
            with translated("Argo CD Applications"):
                return client.CustomObjectsApi(self.api).list_cluster_custom_object(*ARGO_APPLICATIONS)["items"]
        except PermanentError:  # 404 (NotFoundError) or 403
            return None

    def close(self) -> None:
        self.api.close()


def _tracks(app: dict, workload: str, namespace: str, annotations: dict[str, str]) -> bool:
    """Whether Argo CD's Application app tracks the workload: among the resources its status lists, or named by the
    workload's tracking annotation (`APP:GROUP/KIND:NAMESPACE/NAME`, APP `NAMESPACE_NAME` outside Argo CD's own
    namespace; or the legacy instance annotation's APP)."""
    kind, name = workload.split("/", 1)
    resources = (app.get("status") or {}).get("resources") or []
    if any((r.get("kind"), r.get("name"), r.get("namespace")) == (kind, name, namespace) for r in resources):
        return True
    meta = app["metadata"]
    named = annotations.get(ARGO_TRACKING[0], "").split(":", 1)[0] or annotations.get(ARGO_TRACKING[1], "")
    return named in (meta["name"], f"{meta.get('namespace')}_{meta['name']}")


def _snake(kind: str) -> str:
    return {"Deployment": "deployment", "StatefulSet": "stateful_set"}[kind]
