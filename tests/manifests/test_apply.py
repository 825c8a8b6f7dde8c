"""The rollout's apply: which refusal of the API server replaces a Job (ferry/manifests/apply.py)."""

from __future__ import annotations

import threading

import pytest

from ferry.errors import PermanentError
from ferry.files import Journal
from ferry.manifests.apply import apply_in_waves, key_of

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "prep", "namespace": "ml"}, "spec": {}}
IMMUTABLE = (
    'the API answered 422 Unprocessable Entity: Job.batch "prep" is invalid: spec.template: Invalid value: '
    'core.PodTemplateSpec{ObjectMeta:v1.ObjectMeta{Name:""}}: field is immutable'
)
INVALID = (
    'the API answered 422 Unprocessable Entity: Job.batch "prep" is invalid: '
    "spec.template.spec.containers[0].image: Required value"
)


class Refusing:
    """A cluster whose server-side apply of a Job answers one 422, as kube-apiserver words it."""

    def __init__(self, message: str):
        self.message, self.calls, self.warnings = message, [], []

    def apply(self, obj: dict) -> dict:
        self.calls.append("apply")
        raise PermanentError(self.message, code="422")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> bool:
        self.calls.append("delete")
        return True

    def create(self, obj: dict) -> dict:
        self.calls.append("create")
        return obj


def _apply(cluster: Refusing, tmp_path) -> Journal:
    journal = Journal(tmp_path / "applied.jsonl")
    apply_in_waves(cluster, [JOB], {key_of(JOB): {"existed": True}}, journal, threading.Event())
    return journal


def test_a_job_whose_template_is_immutable_is_replaced(tmp_path) -> None:
    cluster = Refusing(IMMUTABLE)
    journal = _apply(cluster, tmp_path)
    assert cluster.calls == ["apply", "delete", "create"]
    assert [e["action"] for e in journal.entries()] == ["updated", "replaced"]


def test_any_other_422_on_a_job_fails_the_apply_and_deletes_nothing(tmp_path) -> None:
    cluster = Refusing(INVALID)
    with pytest.raises(PermanentError, match="Required value"):
        _apply(cluster, tmp_path)
    assert cluster.calls == ["apply"], "the live Job is kept"
