"""The rollout's order and what it waits for: waves by kind, the ConfigMaps and Secrets workloads use, readiness."""

from __future__ import annotations

from typing import Any

from ferry.manifests.model import Rules
from ferry.manifests.paths import containers, pod_templates, sub_list, sub_map

# The order objects are applied in; rollback undoes them in reverse.
WAVES = ("namespaces", "rbac", "config", "storage", "workloads")
_WAVE_OF = {
    "Namespace": "namespaces",
    "CustomResourceDefinition": "namespaces",
    "PriorityClass": "namespaces",
    "ServiceAccount": "rbac",
    "Role": "rbac",
    "RoleBinding": "rbac",
    "ClusterRole": "rbac",
    "ClusterRoleBinding": "rbac",
    "ConfigMap": "config",
    "Secret": "config",
    # A namespace's limits are in place before anything they limit.
    "ResourceQuota": "config",
    "LimitRange": "config",
    "PersistentVolumeClaim": "storage",
    "PersistentVolume": "storage",
    "StorageClass": "storage",
}


def wave_of(kind: str) -> str:
    """The rollout wave of a kind: definitions and namespaces, RBAC, config and secrets, storage, workloads."""
    return _WAVE_OF.get(kind, "workloads")


def references(data: Any, rules: Rules) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the object's pod templates reference."""
    found: set[tuple[str, str]] = set()
    for _, template in pod_templates(data, rules):
        spec = sub_map(template, "spec")
        found |= {
            ("Secret", str(s["name"]))
            for s in sub_list(spec, "imagePullSecrets")
            if isinstance(s, dict) and s.get("name")
        }
        for volume in sub_list(spec, "volumes"):
            if sub_map(volume, "configMap").get("name"):
                found.add(("ConfigMap", str(volume["configMap"]["name"])))
            if sub_map(volume, "secret").get("secretName"):
                found.add(("Secret", str(volume["secret"]["secretName"])))
            for source in sub_list(sub_map(volume, "projected"), "sources"):
                for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                    if sub_map(source, key).get("name"):
                        found.add((kind, str(source[key]["name"])))
        for _, container in containers(template):
            for ref in sub_list(container, "envFrom"):
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if sub_map(ref, key).get("name"):
                        found.add((kind, str(ref[key]["name"])))
            for env in sub_list(container, "env"):
                for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    if sub_map(sub_map(env, "valueFrom"), key).get("name"):
                        found.add((kind, str(env["valueFrom"][key]["name"])))
    return found


def _condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def readiness(obj: dict) -> tuple[str, str]:
    """("ready" | "waiting" | "failed", why) of a live object: rollout done, DaemonSet scheduled, Job started,
    Pod Ready; objects with nothing to wait for are ready."""
    kind, status = obj.get("kind"), obj.get("status") or {}
    spec, generation = obj.get("spec") or {}, (obj.get("metadata") or {}).get("generation")
    if (
        kind in ("Deployment", "StatefulSet", "DaemonSet")
        and generation
        and status.get("observedGeneration", 0) < generation
    ):
        return "waiting", f"generation {generation} not observed yet"
    if kind == "Deployment":
        progressing = _condition(obj, "Progressing")
        if progressing.get("reason") == "ProgressDeadlineExceeded":
            return "failed", f"progress deadline exceeded: {progressing.get('message', '')}".rstrip(": ")
    if kind in ("Deployment", "StatefulSet"):
        want = spec.get("replicas", 1)
        for field_name in ("updatedReplicas", "readyReplicas"):
            if status.get(field_name, 0) < want:
                return "waiting", f"{field_name} {status.get(field_name, 0)} of {want}"
        if kind == "Deployment" and status.get("availableReplicas", 0) < want:
            return "waiting", f"availableReplicas {status.get('availableReplicas', 0)} of {want}"
    if kind == "DaemonSet":
        desired = status.get("desiredNumberScheduled")
        if desired is None or status.get("currentNumberScheduled", 0) < desired:
            return (
                "waiting",
                f"scheduled {status.get('currentNumberScheduled', 0)} of {desired if desired is not None else '?'}",
            )
    if kind == "Job":
        if _condition(obj, "Failed").get("status") == "True":
            return "failed", f"job failed: {_condition(obj, 'Failed').get('reason', '')}"
        if not (status.get("startTime") or status.get("active") or status.get("succeeded")):
            return "waiting", "not started"
    if kind == "Pod":
        if status.get("phase") == "Failed":
            return "failed", f"pod failed: {status.get('reason', '')}"
        if _condition(obj, "Ready").get("status") != "True":
            return "waiting", "not Ready"
    return "ready", ""
