"""The interconnect probe as Kubernetes objects: a ConfigMap holding probe.py, a headless Service, two Jobs.

The server Job echoes one session; the client Job, kept off the server's node by pod anti-affinity, connects
through the headless Service (straight to the server pod's IP: pod to pod, no kube-proxy NAT), prints every
sample as JSON to its log and writes the summary to its termination message, where run() reads it. Any image with
python3 runs it: the script is stdlib only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferry.errors import PermanentError, TransientError, UsageError
from ferry.golive import probe
from ferry.kube import translated

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
        "--wait", "600", "--json", "--summary-file", "/dev/termination-log",
    ]  # fmt: skip
    client = _job(f"{NAME}-client", "client", image, client_args, apart)
    for job in (server, client):
        job["metadata"].update(meta)
    return [config_map, headless, server, client]


def _create(api: Any, doc: dict) -> None:
    from kubernetes import client

    namespace = doc["metadata"]["namespace"]
    if doc["kind"] == "ConfigMap":
        client.CoreV1Api(api).create_namespaced_config_map(namespace, doc)
    elif doc["kind"] == "Service":
        client.CoreV1Api(api).create_namespaced_service(namespace, doc)
    else:
        client.BatchV1Api(api).create_namespaced_job(namespace, doc)


def _delete(api: Any, doc: dict) -> None:
    """Delete one rendered object (a Job with its pods); absent is fine."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    # The answer is not read: servers answer a deleted object or a Status, and only the code matters.
    raw = {"_preload_content": False}
    try:
        if doc["kind"] == "ConfigMap":
            response = client.CoreV1Api(api).delete_namespaced_config_map(name, namespace, **raw)
        elif doc["kind"] == "Service":
            response = client.CoreV1Api(api).delete_namespaced_service(name, namespace, **raw)
        else:
            batch = client.BatchV1Api(api)
            response = batch.delete_namespaced_job(name, namespace, propagation_policy="Background", **raw)
        response.read()
    except ApiException as exc:
        if exc.status != 404:
            raise


def _client_summary(api: Any, namespace: str) -> dict:
    """The client pod's termination message: the probe's summary (JSON)."""
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"job-name={NAME}-client").items
    for pod in pods:
        for status in (pod.status.container_statuses or []) if pod.status else []:
            terminated = status.state.terminated if status.state else None
            if terminated is not None and terminated.message:
                return json.loads(terminated.message)
    raise PermanentError(f"the client Job succeeded but no pod of it carries the probe's summary ({len(pods)} pod(s))")


def run(api: Any, docs: list[dict], timeout_s: float, *, poll_s: float = 2.0) -> dict:
    """Apply the rendered objects, wait for the client Job, return its summary; delete them all in a finally.

    Leftovers of a crashed run (same names) are deleted first. A client Job that fails or does not finish within
    timeout_s is a PermanentError; a cluster that does not answer a TransientError.
    """
    from kubernetes import client

    namespace = docs[0]["metadata"]["namespace"]
    batch = client.BatchV1Api(api)
    try:
        with translated(f"the probe Jobs in {namespace}"):
            for doc in docs:
                _delete(api, doc)
            for doc in docs:
                _create(api, doc)
            started = time.monotonic()
            while True:
                status = batch.read_namespaced_job_status(f"{NAME}-client", namespace).status
                if status is not None and (status.succeeded or 0) >= 1:
                    return _client_summary(api, namespace)
                if status is not None and (status.failed or 0) >= 1:
                    raise PermanentError(f"the probe's client Job failed in {namespace}: see its pod's log")
                if time.monotonic() - started >= timeout_s:
                    raise PermanentError(f"the probe's client Job did not finish within {timeout_s:g} s")
                time.sleep(poll_s)
    finally:
        with translated(f"deleting the probe Jobs in {namespace}"):
            for doc in reversed(docs):
                _delete(api, doc)


def measure(
    docs: list[dict], path: Path, connect: Callable[[], Any] | None, timeout_s: float, *, poll_s: float = 2.0
) -> dict:
    """What the latency step records of the probe pair rendered at path: run() through a client from connect (None:
    the plan names no cluster); the summary (jobs_result), else why not (jobs_reason, a SKIP) or what failed
    (jobs_problem, a FAIL)."""
    found: dict[str, Any] = {"jobs": str(path), "jobs_result": None, "jobs_reason": ""}
    if connect is None:
        found["jobs_reason"] = f"no cluster (target.cluster): the Jobs are rendered in {path}, not run"
        return found
    try:
        api = connect()
    except UsageError as exc:
        found["jobs_reason"] = f"no cluster: {exc}; the Jobs are rendered in {path}, not run"
        return found
    try:
        found["jobs_result"] = run(api, docs, timeout_s, poll_s=poll_s)
    except TransientError as exc:
        found["jobs_reason"] = str(exc)
    except PermanentError as exc:
        found["jobs_problem"] = str(exc)
    finally:
        api.close()
    return found
