"""Undoing a rollout, one object at a time: a Job put back as it can be created again."""

from __future__ import annotations

from ferry.manifests.undo import without_generated_job_fields


def test_a_restored_job_drops_what_the_api_server_generated() -> None:
    labels = {"app": "p", "controller-uid": "u", "batch.kubernetes.io/controller-uid": "u", "job-name": "p"}
    job = {
        "kind": "Job",
        "spec": {"selector": {"matchLabels": {"controller-uid": "u"}}, "template": {"metadata": {"labels": labels}}},
    }
    restored = without_generated_job_fields(job)
    assert restored["spec"] == {"template": {"metadata": {"labels": {"app": "p"}}}}
    assert job["spec"]["selector"], "the snapshot itself is left as it was"
    job["spec"]["manualSelector"] = True
    assert without_generated_job_fields(job) == job
