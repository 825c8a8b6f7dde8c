"""The rollout's view of objects: the readiness of live objects, the ConfigMaps and Secrets a workload references."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.manifests.rollout import readiness, references
from tests.manifests.examples import example_rules


def _workload(kind: str, status: dict, generation: int = 1, **spec: Any) -> dict:
    return {"kind": kind, "metadata": {"generation": generation}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (_workload("Deployment", {}, replicas=2), ("waiting", "generation 1 not observed yet")),
        (
            _workload("Deployment", {"observedGeneration": 1, "updatedReplicas": 2, "readyReplicas": 1}, replicas=2),
            ("waiting", "readyReplicas 1 of 2"),
        ),
        (
            _workload(
                "Deployment",
                {"observedGeneration": 1, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2},
                replicas=2,
            ),
            ("ready", ""),
        ),
        (
            _workload(
                "Deployment",
                {
                    "observedGeneration": 1,
                    "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}],
                },
            ),
            ("failed", "progress deadline exceeded"),
        ),
        (_workload("StatefulSet", {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": 1}), ("ready", "")),
        (_workload("DaemonSet", {"observedGeneration": 1}), ("waiting", "scheduled 0 of ?")),
        (
            _workload("DaemonSet", {"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": 3}),
            ("ready", ""),
        ),
        (_workload("Job", {}), ("waiting", "not started")),
        (_workload("Job", {"startTime": "2026-01-01T00:00:00Z"}), ("ready", "")),
        (
            _workload("Job", {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
            ("failed", "job failed: BackoffLimitExceeded"),
        ),
        (_workload("Pod", {"conditions": [{"type": "Ready", "status": "False"}]}), ("waiting", "not Ready")),
        (_workload("Pod", {"conditions": [{"type": "Ready", "status": "True"}]}), ("ready", "")),
        (_workload("ConfigMap", {}), ("ready", "")),
    ],
)
def test_readiness_of_live_objects(obj: dict, expected: tuple[str, str]) -> None:
    assert readiness(obj) == expected


def test_references_to_config_maps_and_secrets(rendered: tuple[dict, Any]) -> None:
    _, rendering = rendered
    job = next(d for d in rendering.documents if d.name == "eval-once")
    assert references(job.plain(), example_rules()) == {("ConfigMap", "eval-config-7f9g2h")}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "configMap": {"name": "cm-vol"}},
                {"name": "b", "secret": {"secretName": "s-vol"}},
                {
                    "name": "c",
                    "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-p"}}]},
                },
            ],
            "containers": [
                {
                    "name": "x",
                    "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "cm-from"}}],
                }
            ],
        },
    }
    assert references(pod, example_rules()) == {
        ("Secret", "pull"),
        ("ConfigMap", "cm-vol"),
        ("Secret", "s-vol"),
        ("ConfigMap", "cm-proj"),
        ("Secret", "s-p"),
        ("Secret", "s-env"),
        ("ConfigMap", "cm-from"),
    }
