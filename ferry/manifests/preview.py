"""What a rendering would change, object by object: created, changed (with the fields), unchanged, left out; against
what a cluster would hold after a server-side dry run, or, without a cluster, against the last rendered bundle."""

from __future__ import annotations

from typing import Any

import yaml

from ferry.errors import FerryError, PermanentError
from ferry.kube import ClusterApi
from ferry.manifests.apply import job_replaced

# Fields the API server sets on every write (or that describe the object's state, not what was applied): never
# counted as a change.
_SERVER_SET = {"resourceVersion", "generation", "managedFields", "creationTimestamp", "uid", "selfLink"}


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of value by its dotted path (list items by index)."""
    if isinstance(value, dict):
        return {k: v for key, inner in value.items() for k, v in _flat(inner, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list) and value:
        return {k: v for i, inner in enumerate(value) for k, v in _flat(inner, f"{path}[{i}]").items()}
    return {path: value}


def _counted(path: str) -> bool:
    """Whether a leaf's change is a change: not the status, not what the server sets in the metadata."""
    top, _, rest = path.partition(".")
    if top == "status":
        return False
    return top != "metadata" or rest.split(".")[0].split("[")[0] not in _SERVER_SET


def changed_fields(before: dict, after: dict) -> list[str]:
    """The fields, to two levels (spec.template, data.key), whose leaves differ; status and what the server sets
    aside."""
    a, b = _flat(before), _flat(after)
    paths = {p for p in a.keys() | b.keys() if _counted(p) and a.get(p) != b.get(p)}
    return sorted({".".join(p.split(".")[:2]).split("[")[0] for p in paths})


def key(obj: dict) -> str:
    """Kind/namespace/name of a plain object."""
    meta = obj.get("metadata") or {}
    return "/".join(p for p in (obj.get("kind") or "?", meta.get("namespace"), meta.get("name") or "?") if p)


def against_bundle(objects: list[dict], bundle: str) -> dict[str, list[str]]:
    """Each object against the last rendered bundle's: created, changed (its fields), unchanged."""
    before = {key(obj): obj for obj in yaml.safe_load_all(bundle) if obj}
    return _sorted(objects, lambda obj: before.get(key(obj)))


def against_cluster(cluster: ClusterApi, objects: list[dict]) -> dict[str, list[str]]:
    """Each object against the cluster: created where it is not there, else the fields a server-side dry run of the
    apply would change (not known where the server cannot dry-run it yet, said)."""
    result: dict[str, list[str]] = {"created": [], "changed": [], "unchanged": [], "not known": []}
    for obj in objects:
        meta = obj["metadata"]
        live = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        if live is None:
            result["created"].append(key(obj))
            continue
        try:
            applied, _, _ = cluster.apply(obj, dry_run=True)
        except PermanentError as exc:
            if job_replaced(obj, exc):
                result["changed"].append(f"{key(obj)} (spec.template: the Job is replaced, its template immutable)")
            else:
                result["not known"].append(f"{key(obj)} ({str(exc)[:200]})")
            continue
        except FerryError as exc:
            result["not known"].append(f"{key(obj)} ({str(exc)[:200]})")
            continue
        fields = changed_fields(live, applied)
        result["changed" if fields else "unchanged"].append(f"{key(obj)} ({', '.join(fields)})" if fields else key(obj))
    return result


def _sorted(objects: list[dict], before_of) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {"created": [], "changed": [], "unchanged": []}
    for obj in objects:
        before = before_of(obj)
        if before is None:
            result["created"].append(key(obj))
        elif fields := changed_fields(before, obj):
            result["changed"].append(f"{key(obj)} ({', '.join(fields)})")
        else:
            result["unchanged"].append(key(obj))
    return result


def in_words(result: dict[str, list[str]], left_out: list[str]) -> str:
    """The preview in one paragraph: each category's count and its objects."""
    parts = [f"{what} {len(items)}: {'; '.join(items)}" for what, items in result.items() if items]
    if left_out:
        parts.append(f"left out {len(left_out)}: {'; '.join(left_out)}")
    return ". ".join(parts) or "nothing"
