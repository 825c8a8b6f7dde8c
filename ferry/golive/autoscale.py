"""Autoscaling under a spike: raise a Deployment (or its HPA's floor) to N replicas, time until N are Ready, and
restore what was there in a `finally`.

With an HPA named, its minReplicas (and maxReplicas, if lower) is raised so that the autoscaler itself scales
the Deployment, as a load spike would make it; otherwise the Deployment's replicas are set directly. The original
replica count and HPA bounds are returned before anything changes, so a crashed run can be restored later.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.errors import NotFoundError, PermanentError, TransientError, UsageError


@dataclass
class ScaleUp:
    """What one spike measured: seconds to N Ready (None if never), the evidence, and problems (a FAIL)."""

    replicas: int
    seconds: float | None = None
    original: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    restored: bool = False


def kubeconfig_path(named: str | None, plan_dir: Path) -> Path:
    """The kubeconfig the plan names (relative to the plan), else $KUBECONFIG, else ~/.kube/config."""
    if named:
        return Path(named) if Path(named).is_absolute() else plan_dir / named
    return Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")


def api_client(kubeconfig: Path, context: str) -> Any:
    """An official-client ApiClient for context; UsageError (one line) when the kubeconfig cannot give one."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    if not kubeconfig.is_file():
        raise UsageError(f"no kubeconfig at {kubeconfig}")
    try:
        return config.new_client_from_config(config_file=str(kubeconfig), context=context)
    except ConfigException as exc:
        raise UsageError(f"{kubeconfig}: context {context!r}: {exc}") from None


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """The client's errors as ferry's: 404 NotFoundError, other answers PermanentError, no answer TransientError."""
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ApiException as exc:
        error = NotFoundError if exc.status == 404 else PermanentError
        raise error(f"{what}: the API answered {exc.status} {exc.reason}", code=str(exc.status)) from None
    except HTTPError as exc:
        raise TransientError(f"{what}: the cluster did not answer ({type(exc).__name__})") from None


def snapshot(api: Any, namespace: str, deployment: str, hpa: str | None) -> dict[str, Any]:
    """What restore() puts back: the Deployment's replicas and the HPA's bounds."""
    from kubernetes import client

    with translated(f"reading Deployment {namespace}/{deployment}"):
        scale = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace).spec.replicas
    original: dict[str, Any] = {"namespace": namespace, "deployment": deployment, "replicas": scale}
    if hpa:
        with translated(f"reading HorizontalPodAutoscaler {namespace}/{hpa}"):
            spec = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(hpa, namespace).spec
        original["hpa"] = {"name": hpa, "minReplicas": spec.min_replicas, "maxReplicas": spec.max_replicas}
    return original


def restore(api: Any, original: dict[str, Any]) -> str:
    """Put the HPA's bounds and the Deployment's replica count back as snapshot() found them; say what was done."""
    from kubernetes import client

    namespace, done = original["namespace"], []
    with translated(f"restoring {namespace}/{original['deployment']}"):
        _restore(client, api, original, namespace, done)
    return "; ".join(done)


def _restore(client: Any, api: Any, original: dict[str, Any], namespace: str, done: list[str]) -> None:
    if original.get("hpa"):
        hpa = original["hpa"]
        body = {"spec": {"minReplicas": hpa["minReplicas"], "maxReplicas": hpa["maxReplicas"]}}
        client.AutoscalingV2Api(api).patch_namespaced_horizontal_pod_autoscaler(hpa["name"], namespace, body)
        done.append(f"HPA {hpa['name']} back to min {hpa['minReplicas']}, max {hpa['maxReplicas']}")
    else:
        body = {"spec": {"replicas": original["replicas"]}}
        client.AppsV1Api(api).patch_namespaced_deployment(original["deployment"], namespace, body)
        done.append(f"Deployment {original['deployment']} back to {original['replicas']} replica(s)")


def spike(api: Any, original: dict[str, Any], replicas: int, timeout_s: float, *, poll_s: float = 1.0) -> ScaleUp:
    """Raise to replicas and time until that many are Ready (polling every poll_s); restore in a finally."""
    result = ScaleUp(replicas, original=original)
    try:
        with translated(f"scaling {original['namespace']}/{original['deployment']}"):
            _raise_and_wait(api, original, replicas, timeout_s, poll_s, result)
    except (PermanentError, TransientError) as exc:
        result.problems.append(str(exc))
    finally:
        try:
            result.evidence.append(f"restored: {restore(api, original)}")
            result.restored = True
        except (PermanentError, TransientError) as exc:
            result.problems.append(f"{exc}: run `ferry rollback --phase golive` to restore")
    return result


def _raise_and_wait(api: Any, original: dict, replicas: int, timeout_s: float, poll_s: float, result: ScaleUp) -> None:
    from kubernetes import client

    apps, namespace, name = client.AppsV1Api(api), original["namespace"], original["deployment"]
    started = time.monotonic()
    if original.get("hpa"):
        hpa = original["hpa"]
        body = {"spec": {"minReplicas": replicas, "maxReplicas": max(replicas, hpa["maxReplicas"])}}
        client.AutoscalingV2Api(api).patch_namespaced_horizontal_pod_autoscaler(hpa["name"], namespace, body)
        result.evidence.append(f"raised HPA {hpa['name']} minReplicas {hpa['minReplicas']} -> {replicas}")
    else:
        apps.patch_namespaced_deployment(name, namespace, {"spec": {"replicas": replicas}})
        result.evidence.append(f"scaled Deployment {name} {original['replicas']} -> {replicas}")
    while True:
        status = apps.read_namespaced_deployment(name, namespace).status
        ready = (status.ready_replicas or 0) if status else 0
        if ready >= replicas:
            result.seconds = time.monotonic() - started
            result.evidence.append(f"{ready} replica(s) Ready after {result.seconds:.2f} s")
            return
        if time.monotonic() - started >= timeout_s:
            result.problems.append(f"only {ready} of {replicas} replica(s) Ready after {timeout_s:g} s")
            return
        time.sleep(poll_s)
