"""Undoing a rollout: the journal in reverse, drift from what the rollout left, one object restored or deleted."""

from __future__ import annotations

import copy
from collections.abc import Callable

from ferry.kube import ClusterApi
from ferry.manifests.apply import restorable
from ferry.manifests.model import PLAN_LABEL
from ferry.manifests.paths import drop_generated_job_fields


def undo_order(applied: list[dict], undone: set[str]) -> list[dict]:
    """One undo per journaled object, in exactly the reverse order of application, those already undone left out;
    a Job replaced after its apply was refused is undone as replaced (a retried step may have journaled an object
    twice)."""
    merged: dict[str, dict] = {}
    for entry in applied:
        first = merged.setdefault(entry["key"], dict(entry))
        if entry["action"] == "replaced" and first["action"] != "created":
            first["action"] = "replaced"
    return [a for a in list(merged.values())[::-1] if a["key"] not in undone]


def drifted(cluster: ClusterApi, recorded: dict[str, str | None], of: Callable[[dict], str]) -> list[str]:
    """Keys of objects whose live state differs from what the rollout recorded of it (`of`: foreign_owners, or
    the whole object's fingerprint in a run an earlier ferry recorded)."""
    found = []
    for key, before in recorded.items():
        api_version, kind, namespace, name = key.split("|")
        live = cluster.get(api_version, kind, name, namespace or None)
        if (of(live) if live else None) != before:
            found.append(key)
    return found


def undo_one(cluster: ClusterApi, entry: dict, snap: dict, secret: dict | None, plan: str) -> str | None:
    """Undo one journaled change of plan's rollout; a note when something is kept instead (it is not ferry's to
    delete)."""
    api_version, kind, namespace, name = entry["key"].split("|")
    ns = namespace or None
    if entry["action"] == "created":
        live = cluster.get(api_version, kind, name, ns)
        if live is None:
            return None
        labels = (live.get("metadata") or {}).get("labels") or {}
        if labels.get(PLAN_LABEL) != plan:
            return f"kept {kind} {name}: it does not carry {PLAN_LABEL}={plan} (not ferry's)"
        if kind == "Namespace":
            strangers = cluster.strangers(name, PLAN_LABEL, plan)
            if strangers:
                return f"kept Namespace {name}: it holds objects ferry did not apply ({', '.join(strangers[:3])})"
        cluster.delete(api_version, kind, name, ns)
        return None
    previous = secret if kind == "Secret" else snap.get("object")
    if previous is None:
        return None
    restored = restorable(previous)
    live = cluster.get(api_version, kind, name, ns)
    if entry["action"] == "replaced" or live is None:
        if live is not None:
            cluster.delete(api_version, kind, name, ns)
        cluster.create(without_generated_job_fields(restored) if kind == "Job" else restored)
        return None
    restored["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    cluster.replace(restored)
    return None


def without_generated_job_fields(job: dict) -> dict:
    """A Job as it can be created again: the selector and controller-uid labels the API server generated removed."""
    job = copy.deepcopy(job)
    drop_generated_job_fields(job)
    return job
