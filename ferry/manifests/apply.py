"""The rollout against a cluster: objects keyed for journals, the snapshot, the journaled apply, readiness awaited."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable

import structlog

from ferry.errors import NotFoundError, PermanentError
from ferry.files import Journal
from ferry.interrupts import failpoint
from ferry.kube import CONTROL_PLANE_MANAGERS, FIELD_MANAGER, ClusterApi, NotServed
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
    # A custom resource's scope, where its definition comes with it (the cluster does not serve it yet).
    scopes = {}
    for definition in (o for o in found if o["kind"] == "CustomResourceDefinition"):
        spec = definition.get("spec") or {}
        scopes[(spec.get("group"), (spec.get("names") or {}).get("kind"))] = spec.get("scope") == "Namespaced"
    for obj in found:
        group = obj["apiVersion"].rpartition("/")[0]
        namespaced = scopes.get((group, obj["kind"]))
        if namespaced is None:
            namespaced = cluster.namespaced(obj["apiVersion"], obj["kind"])
        if namespaced:
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


# A claim's spec is immutable once created but for its size: these the rendering may not change on a live claim.
_CLAIM_FIXED = ("storageClassName", "accessModes", "volumeMode", "volumeName", "selector", "dataSource",
                "dataSourceRef")  # fmt: skip


def keep_fixed(objects: list[dict], snapshot: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """The objects with what a live claim (in the snapshot) has for the fields that cannot change (the API server
    refuses it), and a note for each: a claim is never recreated (its volume holds data)."""
    kept, notes = [], []
    for obj in objects:
        live = snapshot[key_of(obj)].get("object")
        if obj["kind"] == "PersistentVolumeClaim" and live is not None:
            obj = copy.deepcopy(obj)
            spec, now = obj.setdefault("spec", {}), live.get("spec") or {}
            for name in _CLAIM_FIXED:
                if name in spec and name in now and spec[name] != now[name]:
                    notes.append(
                        f"kept {shown(key_of(obj))} {name} {now[name]!r} (the rendering has {spec[name]!r}): a "
                        "claim's spec cannot change once created; move its data to a new claim to change it"
                    )
                    spec[name] = now[name]
        kept.append(obj)
    return kept, notes


# How long a rollout waits for a namespace of its own that is being deleted (Terminating) to go first, and for a
# CustomResourceDefinition it applied to be served before its custom resources.
TERMINATING_WAIT_S = 120.0
ESTABLISHED_WAIT_S = 60.0


def _not_terminating(cluster: ClusterApi, name: str) -> None:
    """A namespace being deleted refuses new objects: wait for it to go (then the rollout creates it again), and
    say what holds it when it does not."""
    live = cluster.get("v1", "Namespace", name, None)
    if live is not None and (live.get("metadata") or {}).get("deletionTimestamp"):
        log.info("waiting for a terminating namespace", namespace=name)
        cluster.gone("v1", "Namespace", name, None, TERMINATING_WAIT_S, f"namespace {name} is Terminating")


def dry_run(cluster: ClusterApi, objects: list[dict]) -> None:
    """Every object the API server can check now admitted and validated by it (dryRun=All) before the first one is
    changed: a refusal stops the rollout with nothing applied. What it cannot check yet (in a namespace, or of a
    custom resource's kind, the rollout creates first) and a Job it refuses for a changed pod template (the apply
    replaces it) pass on to the apply. A namespace of the rollout that is being deleted is waited for first."""
    for obj in objects:
        if obj["kind"] == "Namespace":
            _not_terminating(cluster, obj["metadata"]["name"])
    for obj in objects:
        try:
            cluster.apply(obj, dry_run=True)
        except NotFoundError:
            continue  # its namespace comes in an earlier wave
        except NotServed:
            continue  # its CustomResourceDefinition comes in an earlier wave
        except PermanentError as exc:
            if not job_replaced(obj, exc):
                raise


def job_replaced(obj: dict, exc: PermanentError) -> bool:
    """Whether the server refused obj, a Job, for its changed pod template (immutable): the apply replaces it."""
    return obj["kind"] == "Job" and exc.code == "422" and bool(_TEMPLATE_IMMUTABLE.search(str(exc)))


def apply_in_waves(
    cluster: ClusterApi, objects: list[dict], snapshot: dict[str, dict], journal: Journal, stopping: threading.Event
) -> tuple[int, list[str], list[str]]:
    """Apply objects (in wave order) one by one, journaling each before it is changed; a Job whose pod template
    changed (the API server refuses the apply, saying the template is immutable) is replaced, a field the control
    plane owns is left to it. The number applied, notes on what the cluster kept (with the API's own warnings), and
    the fields taken from other managers."""

    def record(key: str, kind: str, action: str) -> None:
        journal.add({"key": key, "wave": wave_of(kind), "action": action})

    notes: list[str] = []
    took: list[str] = []
    for obj in objects:
        key, meta = key_of(obj), obj["metadata"]
        action = "updated" if snapshot[key]["existed"] else "created"
        record(key, obj["kind"], action)
        try:
            _, left, taken = cluster.apply(obj)
        except PermanentError as exc:
            if not job_replaced(obj, exc):
                raise
            action, left, taken = "replaced", [], []
            record(key, obj["kind"], action)
            cluster.delete(obj["apiVersion"], "Job", meta["name"], meta.get("namespace"))
            cluster.create(obj)
        notes += [f"left {c} of {shown(key)} as it is: ferry takes no field the control plane owns" for c in left]
        took += [f"took {c.field} of {shown(key)} from {c.manager}, as the manifest says" for c in taken]
        conflicts = {"left": [str(c) for c in left], "taken": [str(c) for c in taken]}
        log.info("applied", object=key, action=action, **{k: v for k, v in conflicts.items() if v})
        if obj["kind"] == "CustomResourceDefinition":
            cluster.established(meta["name"], ESTABLISHED_WAIT_S)
        failpoint("manifests:mid-wave", stopping)
    warned = [f"the API server warned: {warning}" for warning in cluster.warnings]
    return len(objects), notes + warned, took


def wait_ready(cluster: ClusterApi, objects: list[dict], timeout_s: float, stopping: threading.Event) -> list[str]:
    """Poll until every object is ready, one fails, the timeout passes or stopping is set; what is not ready, and
    why."""
    deadline = time.monotonic() + timeout_s
    pending = {key_of(o): o for o in objects}
    why: dict[str, str] = {}
    pause = 0.1  # doubling up to 2 s: a small rollout is seen ready at once, a long one is not polled hard
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
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2.0, pause * 2)
    return [f"{key}: {why.get(key, 'not ready')}" for key in pending]


def changed_since(snapshot: dict[str, dict], secrets: dict[str, dict], left: dict[str, str | None]) -> list[str]:
    """The keys of what a rollout left (`fingerprints()`) whose object is not what the run's snapshot found before it
    changed anything (a Secret's, whole, in secrets): what the run changed on the cluster."""

    def before(key: str) -> str | None:
        entry = snapshot[key]
        found = entry["object"] if "object" in entry else secrets.get(key)
        return fingerprint(found) if found else None

    return [key for key, now in left.items() if now != before(key)]


def foreign_owners(obj: dict) -> str:
    """A digest of the object's managed fields that neither ferry nor the control plane owns, with when each
    manager last changed them: it changes when a person (kubectl edit, apply, patch) or another tool changes it."""
    entries = [
        [entry.get(k) for k in ("manager", "operation", "subresource", "time", "fieldsV1")]
        for entry in (obj.get("metadata") or {}).get("managedFields") or []
        if entry.get("manager") not in CONTROL_PLANE_MANAGERS | {FIELD_MANAGER}
    ]
    return hashlib.sha256(json.dumps(sorted(entries, key=json.dumps), sort_keys=True).encode()).hexdigest()[:16]


def live_objects(cluster: ClusterApi, objects: list[dict]) -> dict[str, dict | None]:
    """Each object as the cluster has it now, by key (None: not there)."""
    found = {}
    for obj in objects:
        meta = obj["metadata"]
        found[key_of(obj)] = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
    return found


def fingerprints(live: dict[str, dict | None], of: Callable[[dict], str] = fingerprint) -> dict[str, str | None]:
    """of (the fingerprint, or foreign_owners) each live object, by key (None: not there)."""
    return {key: of(found) if found else None for key, found in live.items()}
