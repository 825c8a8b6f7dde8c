"""The interconnect probe as Kubernetes objects: a ConfigMap holding probe.py, a headless Service, two Jobs.

The server Job echoes one session; the client Job, kept off the server's node by pod anti-affinity, connects
through the headless Service (straight to the server pod's IP: pod to pod, no kube-proxy NAT) and prints the
JSON summary as its log. Any image with python3 runs it: the script is stdlib only.
"""

from __future__ import annotations

from pathlib import Path

from ferry.golive import probe

DEFAULT_IMAGE = "python:3.12-slim"
NAME = "ferry-probe"
_PART_OF = "app.kubernetes.io/name"
_END = "ferry.io/probe-end"
_MOUNT = "/probe"
# Long enough for 20,000 round trips and an image pull; the Job fails rather than hanging past it.
DEADLINE_S = 1800


def script() -> str:
    """The standalone probe script's source, as the ConfigMap carries it."""
    return Path(probe.__file__).read_text(encoding="utf-8")


def _labels(end: str) -> dict[str, str]:
    return {_PART_OF: NAME, _END: end}


def _job(name: str, end: str, image: str, args: list[str], affinity: dict | None = None) -> dict:
    pod_spec: dict = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
        "containers": [
            {
                "name": end,
                "image": image,
                "command": ["python3", "-I", "-B", f"{_MOUNT}/probe.py", *args],
                "ports": [{"name": "probe", "containerPort": probe.DEFAULT_PORT}] if end == "server" else [],
                "resources": {"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "probe", "mountPath": _MOUNT, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "probe", "configMap": {"name": NAME}}],
    }
    if affinity:
        pod_spec["affinity"] = affinity
    if not pod_spec["containers"][0]["ports"]:
        del pod_spec["containers"][0]["ports"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": _labels(end)},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_S,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": _labels(end)}, "spec": pod_spec},
        },
    }


def render(namespace: str, *, protocol: str = "tcp", samples: int = 20000, image: str = DEFAULT_IMAGE) -> list[dict]:
    """The ConfigMap, headless Service and the server and client Jobs, in the order to apply them."""
    port = probe.DEFAULT_PORT
    service = f"{NAME}-server"
    meta = {"namespace": namespace}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, **meta, "labels": {_PART_OF: NAME}},
        "data": {"probe.py": script()},
    }
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, **meta, "labels": {_PART_OF: NAME}},
        "spec": {
            "clusterIP": "None",
            "selector": _labels("server"),
            "ports": [{"name": "probe", "port": port, "targetPort": port, "protocol": protocol.upper()}],
        },
    }
    server = _job(service, "server", image, ["serve", "--port", str(port), "--protocol", protocol, "--sessions", "1"])
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": _labels("server")}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    client_args = [
        "ping", "--server", f"{service}.{namespace}.svc:{port}", "--protocol", protocol, "--samples", str(samples),
        "--wait", "600", "--json",
    ]  # fmt: skip
    client = _job(f"{NAME}-client", "client", image, client_args, apart)
    for job in (server, client):
        job["metadata"].update(meta)
    return [config_map, headless, server, client]
