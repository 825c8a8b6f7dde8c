"""Finding things in a document: maps and lists by key, leaves, dotted paths, pod templates, containers, requests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ferry.manifests.model import Rules

# The lists of a pod spec that hold containers.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def join(path: str, key: str) -> str:
    """path.key, or key at the top of a document."""
    return f"{path}.{key}" if path else key


def sub_map(node: Any, key: str) -> dict:
    """node[key] when both are maps, else an empty map: a field of the wrong type is the schema check's to name,
    never a crash of the transforms."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def sub_list(node: Any, key: str) -> list:
    """node[key] when node is a map and it a list, else an empty list (see sub_map)."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, list) else []


def leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every scalar in a document (`a.b[0].c`), in document order."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, join(path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, node


def resolve(node: Any, dotted: str) -> Iterator[tuple[str, Any]]:
    """(concrete path, node) for each match of a dotted path: `*` any map key, `name[]` every list item."""
    segments = dotted.split(".") if dotted else []

    def walk(current: Any, i: int, path: str) -> Iterator[tuple[str, Any]]:
        if i == len(segments):
            yield path, current
            return
        segment = segments[i]
        if segment == "*":
            if isinstance(current, dict):
                for key, value in current.items():
                    yield from walk(value, i + 1, join(path, str(key)))
            return
        each = segment.endswith("[]")
        key = segment[:-2] if each else segment
        if not isinstance(current, dict) or key not in current:
            return
        child, path = current[key], join(path, key)
        if not each:
            yield from walk(child, i + 1, path)
        elif isinstance(child, list):
            for j, item in enumerate(child):
                yield from walk(item, i + 1, f"{path}[{j}]")

    yield from walk(node, 0, "")


def pod_templates(data: Any, rules: Rules) -> list[tuple[str, dict]]:
    """(path, pod template) of every pod template in an object, by its kind's template paths."""
    if not isinstance(data, dict):
        return []
    paths = rules.paths_for(str(data.get("apiVersion", "")), str(data.get("kind", ""))) or ()
    return [(path, node) for dotted in paths for path, node in resolve(data, dotted) if isinstance(node, dict)]


def containers(template: dict) -> Iterator[tuple[str, dict]]:
    """(path below the template, container) of every container, init container and ephemeral container."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    for kind in CONTAINER_LISTS:
        for i, container in enumerate(sub_list(spec, kind)):
            if isinstance(container, dict):
                yield f"spec.{kind}[{i}]", container


def _none(quantity: Any) -> bool:
    try:
        return float(str(quantity)) == 0
    except ValueError:
        return False


def requested(container: dict) -> set[str]:
    """The resources a container asks for: in its limits or requests, with a quantity other than zero (a chart's
    CPU flavour renders `nvidia.com/gpu: 0`)."""
    resources = sub_map(container, "resources")
    return {
        str(name)
        for part in ("limits", "requests")
        for name, quantity in sub_map(resources, part).items()
        if not _none(quantity)
    }


def is_gpu_workload(template: dict, gpu_resource: str) -> bool:
    """Whether a container or init container of the pod template requests the GPU resource."""
    return any(
        gpu_resource in requested(c) for path, c in containers(template) if not path.startswith("spec.ephemeral")
    )


# What the API server writes into a Job it made the selector of: the selector itself, and labels naming the Job
# and its uid on the Job and its pod template. Another cluster (or the same one, on the Job made again) refuses
# them: the uid is not the new Job's.
_JOB_GENERATED_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


def drop_generated_job_fields(job: Any) -> bool:
    """Remove, in place, what the API server generated in a Job (unless it says manualSelector); whether any was."""
    spec = sub_map(job, "spec")
    if spec.get("manualSelector"):
        return False
    found = spec.pop("selector", None) is not None
    for meta in (sub_map(job, "metadata"), sub_map(sub_map(spec, "template"), "metadata")):
        labels = sub_map(meta, "labels")
        for label in _JOB_GENERATED_LABELS:
            found = labels.pop(label, None) is not None or found
        if "labels" in meta and not labels:
            del meta["labels"]
    return found
