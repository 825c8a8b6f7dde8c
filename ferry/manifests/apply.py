"""The rollout against a cluster: objects keyed for journals, the snapshot, the journaled apply, readiness awaited."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time

import structlog

from ferry.errors import PermanentError
from ferry.files import Journal
from ferry.interrupts import failpoint
from ferry.kube import ClusterApi
from ferry.manifests.model import MANAGED_BY_LABEL, PLAN_LABEL, Rules
from ferry.manifests.rollout import WAVES, readiness, references, wave_of

# The phase's own events: JSON log lines name this logger.
log = structlog.get_logger("ferry.phases.manifests")
# Server-set metadata: never part of what is restored or compared.
_SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink")


def key_of(obj: dict) -> str:
    """An object's identity in journals: apiVersion/kind/namespace/name (namespace empty when cluster-wide)."""
    meta = obj.get("metadata") or {}
    return "|".join((obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"]))


def shown(key: str) -> str:
    """A journal key as reports show it: apiVersion kind [namespace] name."""
    return " ".join(part for part in key.split("|") if part)


def restorable(obj: dict) -> dict:
    """obj without status and server-set metadata: what a restore writes back."""
    clean = copy.deepcopy(obj)
    clean.pop("status", None)
    for field_name in _SERVER_FIELDS:
        clean.get("metadata", {}).pop(field_name, None)
    return clean


def fingerprint(obj: dict) -> str:
    """A digest of what a person or tool may change (status and server-set metadata left out)."""
    return hashlib.sha256(json.dumps(restorable(obj), sort_keys=True).encode()).hexdigest()[:16]


def to_apply(cluster: ClusterApi, objects: list[dict], bindings: list[dict], plan: str, namespace: str) -> list[dict]:
    """What to apply, in wave order: the rendered objects and the iam phase's bindings (labelled as the plan's), each
    with a namespace when its kind is namespaced (namespace, when the manifest names none)."""
    found = list(objects)
    for binding in bindings:
        labels = binding.setdefault("metadata", {}).setdefault("labels", {})
        labels.update({PLAN_LABEL: plan, MANAGED_BY_LABEL: "ferry"})
        found.append(binding)
    for obj in found:
        if cluster.namespaced(obj["apiVersion"], obj["kind"]):
            obj["metadata"].setdefault("namespace", namespace)
    return sorted(found, key=lambda o: WAVES.index(wave_of(o["kind"])))


def take_snapshot(cluster: ClusterApi, objects: list[dict], rules: Rules) -> tuple[list[dict], dict[str, dict]]:
    """Every object the run will touch, and every ConfigMap and Secret its workloads reference, as they are: one
    entry each (a Secret by its keys only), and the Secrets whole by key."""
    wanted = {key_of(o): o for o in objects}
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        for kind, name in references(obj, rules):
            ref = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}
            wanted.setdefault(key_of(ref), ref)
    snapshot, secrets = [], {}
    for key, obj in wanted.items():
        meta = obj["metadata"]
        live = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        entry = {"key": key, "existed": live is not None, "applied": key in {key_of(o) for o in objects}}
        if obj["kind"] == "Secret":
            entry["keys"] = sorted({**(live or {}).get("data", {})}) if live else []
            if live is not None:
                secrets[key] = live
        else:
            entry["object"] = live
        snapshot.append(entry)
    return snapshot, secrets


# How the API server refuses a change to a Job's pod template (`spec.template: Invalid value: ...: field is
# immutable`); any other 422 (a value the schema refuses, a webhook) is the apply's own failure.
_TEMPLATE_IMMUTABLE = re.compile(r"\bspec\.template: .*field is immutable", re.S)


def apply_in_waves(
    cluster: ClusterApi, objects: list[dict], snapshot: dict[str, dict], journal: Journal, stopping: threading.Event
) -> int:
    """Apply objects (in wave order) one by one, journaling each before it is changed; a Job whose pod template
    changed (the API server refuses the apply, saying the template is immutable) is replaced. The number applied."""

    def record(key: str, kind: str, action: str) -> None:
        journal.add({"key": key, "wave": wave_of(kind), "action": action})

    for obj in objects:
        key, meta = key_of(obj), obj["metadata"]
        action = "updated" if snapshot[key]["existed"] else "created"
        record(key, obj["kind"], action)
        try:
            cluster.apply(obj)
        except PermanentError as exc:
            if obj["kind"] != "Job" or exc.code != "422" or not _TEMPLATE_IMMUTABLE.search(str(exc)):
                raise
            action = "replaced"
            record(key, obj["kind"], action)
            cluster.delete(obj["apiVersion"], "Job", meta["name"], meta.get("namespace"))
            cluster.create(obj)
        log.info("applied", object=key, action=action)
        failpoint("manifests:mid-wave", stopping)
    return len(objects)


def wait_ready(cluster: ClusterApi, objects: list[dict], timeout_s: float, stopping: threading.Event) -> list[str]:
    """Poll until every object is ready, one fails, the timeout passes or stopping is set; what is not ready, and
    why."""
    deadline = time.monotonic() + timeout_s
    pending = {key_of(o): o for o in objects}
    why: dict[str, str] = {}
    while pending:
        for key, obj in list(pending.items()):
            meta = obj["metadata"]
            live = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            state, reason = readiness(live) if live else ("waiting", "not found")
            if state == "ready":
                del pending[key]
            elif state == "failed":
                return [f"{key}: {reason}"]
            else:
                why[key] = reason
        if not pending or time.monotonic() >= deadline or stopping.is_set():
            break
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
    return [f"{key}: {why.get(key, 'not ready')}" for key in pending]


def changed_since(snapshot: dict[str, dict], secrets: dict[str, dict], left: dict[str, str | None]) -> list[str]:
    """The keys of what a rollout left (`fingerprints()`) whose object is not what the run's snapshot found before it
    changed anything (a Secret's, whole, in secrets): what the run changed on the cluster."""

    def before(key: str) -> str | None:
        entry = snapshot[key]
        found = entry["object"] if "object" in entry else secrets.get(key)
        return fingerprint(found) if found else None

    return [key for key, now in left.items() if now != before(key)]


def fingerprints(cluster: ClusterApi, objects: list[dict]) -> dict[str, str | None]:
    """The fingerprint of each object as the cluster has it now, by key (None: not there)."""
    live = {}
    for obj in objects:
        meta = obj["metadata"]
        found = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        live[key_of(obj)] = fingerprint(found) if found else None
    return live
