"""`ferry manifests render`: rendered files beside each other as the inputs were, warnings printed, the audit
folder holding the bundle and the diff, and one line for what the user got wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support import ROOT, run_cli

PLAN = """\
name: render-demo
source:
  storage: ./src
target:
  storage: ./dst
  profile: meta-compute
  kubernetes_version: "1.30"
phases:
  manifests:
    sources: [manifests/k8s/, manifests/rendered/chart.yaml]
    images: {{"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/": "registry.meta.example/ai-training/"}}
    namespaces: {{ml-train: ai-training-v4}}
    template_paths: {{"jobset.x-k8s.io/JobSet": ["spec.replicatedJobs[].template.spec.template"]}}
{gates}
"""


def _plan(root: Path, gates: str = "") -> Path:
    shutil.copytree(ROOT / "examples" / "manifests", root / "manifests")
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(gates=gates), encoding="utf-8")
    return plan


def test_render_writes_each_file_at_its_relative_path_and_prints_the_warnings(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    code, out, err = run_cli("manifests", "render", str(plan), "--out", str(tmp_path / "out"))
    # The examples keep a :latest image, which the profile's policy refuses: exit 1, the reason printed.
    assert code == 1, err
    assert "manifests.policy: FAIL" in out and "preprocess:latest is :latest" in out
    assert "manifests.schema: WARN" in out  # custom resources have no schema; their pod templates were checked
    assert (
        "WARN manifests/k8s/training/daemonset.yaml#0 DaemonSet/ml-train/dcgm-exporter: "
        "spec.template.spec.nodeSelector.node.kubernetes.io/instance-type: selects the source cloud's nodes" in out
    )
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    sources = sorted(
        str(p.relative_to(tmp_path / "manifests" / "k8s")) for p in (tmp_path / "manifests" / "k8s").rglob("*.yaml")
    )
    assert written == sorted([*sources, "chart.yaml"])
    chart = (tmp_path / "out" / "chart.yaml").read_text()
    # Documents in input order, comments kept.
    assert [line for line in chart.splitlines() if line.startswith("# Source:")] == [
        "# Source: inference/templates/serviceaccount.yaml",
        "# Source: inference/templates/deployment.yaml",
        "# Source: inference/templates/pdb.yaml",
    ]
    (audit,) = (tmp_path / ".ferry" / "runs").glob("render-*/manifests")
    assert {p.name for p in audit.iterdir()} >= {"bundle.yaml", "diff.patch", "findings.txt", "gate.json", "gate.md"}
    assert "c2VjcmV0LXZhbHVlLW5ldmVyLXByaW50ZWQ=" not in (audit / "bundle.yaml").read_text() + out


def test_plan_validate_accepts_a_sources_folder_and_names_a_missing_one(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    code, out, err = run_cli("plan", "validate", str(plan))
    assert code == 0, err
    plan.write_text(plan.read_text().replace("manifests/k8s/", "manifests/missing/"))
    code, _, err = run_cli("plan", "validate", str(plan))
    assert code == 2
    assert f"phases.manifests.sources.0: {tmp_path / 'manifests' / 'missing'}: no such readable file or folder" in err


def test_render_fails_on_too_many_warnings_and_one_line_for_a_plan_without_the_phase(tmp_path: Path) -> None:
    plan = _plan(tmp_path, gates="gates:\n  manifests: {max_warnings: 2}")
    code, out, _ = run_cli("manifests", "render", str(plan), "--out", str(tmp_path / "out"))
    assert code == 1 and "manifests.warnings: FAIL" in out

    other = tmp_path / "sync.yaml"
    other.write_text("name: s\nsource: {storage: ./src}\ntarget: {storage: ./dst}\nphases: {data_sync: {}}\n")
    code, _, err = run_cli("manifests", "render", str(other))
    assert code == 2
    assert err.strip().splitlines()[-1].endswith("phases.manifests: the plan has no manifests phase to render")


def test_render_never_writes_over_the_sources_and_an_out_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    before = {p: p.read_bytes() for p in (tmp_path / "manifests").rglob("*.yaml")}
    code, _, err = run_cli("manifests", "render", str(plan), "--out", str(tmp_path / "manifests" / "k8s"))
    assert code == 2
    assert err.strip().splitlines()[-1].endswith("choose an output folder outside the sources")
    assert {p: p.read_bytes() for p in (tmp_path / "manifests").rglob("*.yaml")} == before
    (tmp_path / "afile").write_text("")
    code, _, err = run_cli("manifests", "render", str(plan), "--out", str(tmp_path / "afile"))
    assert code == 2 and err.strip().splitlines()[-1].endswith("afile: not a folder (the rendered files go under it)")
