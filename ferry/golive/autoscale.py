"""Autoscaling under a spike: raise a Deployment (or its HPA's floor) to N replicas, time until N are Ready, and
restore what was there in a `finally`. Its writes are ferry's own (field manager `ferry`): the manifests phase's
drift check does not take a spike for a person's change.

With an HPA named, its minReplicas (and maxReplicas, if lower) is raised so that the autoscaler itself scales
the Deployment, as a load spike would make it; otherwise the Deployment's replicas are set directly. The original
replica count and HPA bounds are returned before anything changes, so a crashed run can be restored later: a run
journals them (ORIGINAL) before the spike and marks them put back (RESTORED) after.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.errors import FerryError, PermanentError, TransientError, UsageError
from ferry.kube import FIELD_MANAGER, translated

# In a run's golive audit folder: the snapshot taken before the spike (journalled first), and that it was put back.
ORIGINAL, RESTORED = "autoscaling-original.json", "autoscaling-restored.json"


@dataclass
class ScaleUp:
    """What one spike measured: seconds to N Ready (None if never), the evidence, and problems (a FAIL)."""

    replicas: int
    seconds: float | None = None
    original: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    restored: bool = False


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
        client.AutoscalingV2Api(api).patch_namespaced_horizontal_pod_autoscaler(
            hpa["name"], namespace, body, field_manager=FIELD_MANAGER
        )
        done.append(f"HPA {hpa['name']} back to min {hpa['minReplicas']}, max {hpa['maxReplicas']}")
    else:
        body = {"spec": {"replicas": original["replicas"]}}
        client.AppsV1Api(api).patch_namespaced_deployment(
            original["deployment"], namespace, body, field_manager=FIELD_MANAGER
        )
        done.append(f"Deployment {original['deployment']} back to {original['replicas']} replica(s)")


def spike(
    api: Any,
    original: dict[str, Any],
    replicas: int,
    timeout_s: float,
    *,
    poll_s: float = 1.0,
    stop: threading.Event | None = None,
) -> ScaleUp:
    """Raise to replicas and time until that many are Ready (polling every poll_s); restore in a finally.

    A set stop event (an interrupted run) ends the wait early, unmeasured; the restore still runs.
    """
    result = ScaleUp(replicas, original=original)
    try:
        with translated(f"scaling {original['namespace']}/{original['deployment']}"):
            _raise_and_wait(api, original, replicas, timeout_s, poll_s, result, stop or threading.Event())
    except (PermanentError, TransientError) as exc:
        result.problems.append(str(exc))
    finally:
        try:
            result.evidence.append(f"restored: {restore(api, original)}")
            result.restored = True
        except (PermanentError, TransientError) as exc:
            result.problems.append(f"{exc}: run `ferry rollback --phase golive` to restore")
    return result


def _raise_and_wait(
    api: Any, original: dict, replicas: int, timeout_s: float, poll_s: float, result: ScaleUp, stop: threading.Event
) -> None:
    from kubernetes import client

    apps, namespace, name = client.AppsV1Api(api), original["namespace"], original["deployment"]
    started = time.monotonic()
    if original.get("hpa"):
        hpa = original["hpa"]
        body = {"spec": {"minReplicas": replicas, "maxReplicas": max(replicas, hpa["maxReplicas"])}}
        client.AutoscalingV2Api(api).patch_namespaced_horizontal_pod_autoscaler(
            hpa["name"], namespace, body, field_manager=FIELD_MANAGER
        )
        result.evidence.append(f"raised HPA {hpa['name']} minReplicas {hpa['minReplicas']} -> {replicas}")
    else:
        apps.patch_namespaced_deployment(name, namespace, {"spec": {"replicas": replicas}}, field_manager=FIELD_MANAGER)
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
        if stop.wait(poll_s):
            result.problems.append(f"interrupted with {ready} of {replicas} replica(s) Ready")
            return


def measure(
    connect: Callable[[], Any],
    namespace: str,
    deployment: str,
    hpa: str | None,
    replicas: int,
    timeout_s: float,
    *,
    poll_s: float,
    stop: threading.Event,
    journal: Callable[[str, dict], object],
) -> dict:
    """What the autoscaling step records of one spike through a client from connect: seconds (None unmeasured), and
    evidence and problems (a FAIL), or a reason (a SKIP). journal(name, data) writes a file whole into the run's
    golive audit folder: the snapshot (ORIGINAL) before anything changes, RESTORED once it is put back."""
    try:
        api = connect()
    except UsageError as exc:
        return {"seconds": None, "reason": f"no cluster: {exc}"}
    try:
        original = snapshot(api, namespace, deployment, hpa)
        # Journalled before anything changes: rollback restores it if this run dies before its finally.
        journal(ORIGINAL, original)
        result = spike(api, original, replicas, timeout_s, poll_s=poll_s, stop=stop)
        if result.restored:
            journal(RESTORED, {"restored": True})
        return {"seconds": result.seconds, "evidence": result.evidence, "problems": result.problems}
    except TransientError as exc:
        return {"seconds": None, "reason": str(exc)}
    except PermanentError as exc:
        return {"seconds": None, "evidence": [], "problems": [str(exc)]}
    finally:
        api.close()


def unrestored(folder: Path) -> dict[str, Any] | None:
    """The snapshot a run (folder: its golive audit folder) journalled and did not put back, else None."""
    original = folder / ORIGINAL
    if not original.exists() or (folder / RESTORED).exists():
        return None
    return json.loads(original.read_text(encoding="utf-8"))


def restore_journalled(folder: Path, original: dict[str, Any], connect: Callable[[], Any] | None) -> str:
    """Put a run's journalled snapshot back through a client from connect (None: the plan names no cluster any more)
    and mark that run's folder restored; a line starting "could not" when it could not."""
    if connect is None:
        return "could not restore the replica count: target.cluster is no longer set"
    try:
        api = connect()
        try:
            text = restore(api, original)
        finally:
            api.close()
    except FerryError as exc:
        return f"could not restore the replica count: {exc}"
    (folder / RESTORED).write_text(json.dumps({"restored": True}) + "\n", encoding="utf-8")
    return f"restored {text}"
