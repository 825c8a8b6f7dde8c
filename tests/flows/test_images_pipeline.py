"""The images phase in the pipeline, on the real Prefect server and two real registries: a copy step that fails
for one image is rolled back by the pipeline (the tag it did push is deleted); a fixed plan commits and
publishes the digest map."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.images.oci import Registry
from ferry.layout import StateLayout
from tests.support import buildah, busybox_image, start_registry

PLAN = """\
name: {name}
source: {{storage: ./src, registry: 127.0.0.1:{src}/ml}}
target: {{storage: ./dst, registry: 127.0.0.1:{tgt}/ai}}
phases:
  images:
    copy: {copy}
retries: {{attempts: 1, delay_s: 0}}
"""


def test_failed_copy_rolled_back_by_the_pipeline_then_a_fixed_plan_commits(prefect_api, tmp_path: Path) -> None:
    from ferry.errors import PermanentError
    from ferry.runlog import RunLog
    from flows.pipeline import migrate

    source, target = start_registry(), start_registry()
    try:
        busybox_image(tmp_path / "buildah", "tool", "amd64", ["CUDA_VERSION=12.2.0"])
        buildah(
            tmp_path / "buildah", "push", "--tls-verify=false", "tool", f"docker://127.0.0.1:{source.port}/ml/tool:1"
        )
        (tmp_path / "src").mkdir()
        plan = tmp_path / "migration.yaml"
        ports = {"src": source.port, "tgt": target.port}
        plan.write_text(PLAN.format(name="images-pipe", copy=json.dumps(["tool:1", "missing:1"]), **ports))
        with pytest.raises(PermanentError, match="missing:1: 127.0.0.1:.*/ml/missing:1 is not on the source registry"):
            migrate(plan_path=str(plan), run_id="r1")
        registry = Registry(f"127.0.0.1:{target.port}", insecure=True)
        assert registry.digest("ai/tool", "1") is None  # pushed, then deleted by the rollback
        runlog = RunLog(tmp_path / ".ferry" / "state")
        assert runlog.phase("images-pipe", "images").status == "rolled_back"

        plan.write_text(PLAN.format(name="images-pipe", copy=json.dumps(["tool:1"]), **ports))
        migrate(plan_path=str(plan), run_id="r2")
        assert runlog.phase("images-pipe", "images").status == "committed"
        published = json.loads(StateLayout(tmp_path / ".ferry").digest_map("images-pipe").read_text())["images"]
        assert [(r["target"], r["digest"], r["cuda"]) for r in published] == [
            (f"127.0.0.1:{target.port}/ai/tool:1", registry.digest("ai/tool", "1"), "12.2.0")
        ]
    finally:
        source.stop()
        target.stop()
