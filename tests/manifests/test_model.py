"""A rendering's reports: the diff shows each changed resource, and no Secret value reaches the findings, the diff or
the bundle."""

from __future__ import annotations

from typing import Any

from tests.manifests.examples import META, PINNED


def test_secret_values_never_reach_findings_diff_or_bundle(rendered: tuple[dict, Any]) -> None:
    _, rendering = rendered
    reported = "\n".join(map(str, rendering.findings)) + rendering.diff() + rendering.bundle()
    for value in ("c2VjcmV0LXZhbHVlLW5ldmVyLXByaW50ZWQ=", "hunter2", "postgres://"):
        assert value not in reported
    # The rendered file itself carries the Secret untouched: it is what gets applied.
    config = next(f for f in rendering.files if str(f.relative) == "k8s/config.yaml")
    assert "WANDB_API_KEY: c2VjcmV0LXZhbHVlLW5ldmVyLXByaW50ZWQ=" in config.text()
    assert "DB_URL: postgres://user:hunter2@db.ml-train.svc:5432/runs" in config.text()


def test_diff_shows_each_changed_resource(rendered: tuple[dict, Any]) -> None:
    _, rendering = rendered
    diff = rendering.diff()
    assert "+++ k8s/training/pod.yaml#0 Pod/ai-training-v4/debug-gpu (rendered)" in diff
    assert f"+    image: {META}trainer@{PINNED}" in diff
    assert '+          image: "registry.meta.example/ai-training/inference:1.0"' in diff  # quoting kept
