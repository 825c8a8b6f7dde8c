"""The manifests phase without a cluster: render and validate only, the images phase's digest map pinning images.
With a cluster: tests/phases/test_manifests_cluster.py, on the real control plane."""

from __future__ import annotations

from pathlib import Path

from ferry.audit import AuditFolder
from ferry.files import write_atomic
from ferry.layout import StateLayout
from ferry.phases.base import Reporter, open_phase
from ferry.phases.manifests import ManifestsPhase
from ferry.plan import load_plan
from ferry.results import Status
from tests.phases.test_manifests_cluster import MANIFESTS

NS = "ai-training-v4"
PLAN = """\
name: llm-train
source:
  storage: ./src
  registry: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml
target:
  storage: ./dst
  registry: registry.meta.example/ai-training
  profile: meta-compute
  kubernetes_version: "1.30"
{cluster}
phases:
  manifests:
    sources: [k8s/]
    namespaces: {{ml-train: {ns}}}
gates:
  manifests: {{rollout_timeout_s: {timeout}}}
"""


def _write_plan(root: Path) -> Path:
    (root / "k8s").mkdir(parents=True, exist_ok=True)
    (root / "k8s" / "app.yaml").write_text(MANIFESTS, encoding="utf-8")
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(cluster="", ns=NS, timeout=3), encoding="utf-8")
    return plan


def _phase(plan: Path) -> ManifestsPhase:
    phase = open_phase(load_plan(plan), "manifests")
    assert isinstance(phase, ManifestsPhase)
    return phase


def _by_name(results: list) -> dict:
    return {r.name: r for r in results}


class _Recorder(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.reports: dict[str, str] = {}

    def markdown(self, key: str, text: str, description: str) -> None:
        self.reports[key] = text


def test_without_a_cluster_it_renders_and_validates_only(tmp_path: Path) -> None:
    phase = _phase(_write_plan(tmp_path))
    assert not phase.live_inputs
    assert "no target.cluster: render and validate only" in phase.summary()
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    reporter = _Recorder()
    phase.run("run", audit, reporter)
    results = phase.gate(audit)
    report = reporter.reports["manifests-report"]
    assert "7 object(s) from 1 file(s); manifests.schema **PASS**" in report and "s3cr3t" not in report
    gate = _by_name(results)
    assert gate["manifests.rollout"].status == Status.SKIP
    assert gate["manifests.rollout"].evidence == ["no target.cluster: rendered and validated only"]
    assert gate["manifests.schema"].status == Status.PASS
    assert gate["manifests.policy"].status == Status.PASS, gate["manifests.policy"].evidence
    bundle = (audit.root / "manifests" / "bundle.yaml").read_text()
    # source.registry -> target.registry is the default image rule.
    assert "image: registry.meta.example/ai-training/trainer:2024.06" in bundle
    assert "s3cr3t" not in bundle and "s3cr3t" not in (audit.root / "manifests" / "diff.patch").read_text()
    assert phase.rollback(audit).text == "nothing to undo: run run-1 applied nothing to a cluster"


def test_its_change_set_is_object_by_object_against_the_last_rendering(tmp_path: Path) -> None:
    plan = _write_plan(tmp_path)
    assert _phase(plan).changes().text.endswith("no earlier rendering to compare with: 7 object(s) rendered")
    _phase(plan).run("run", AuditFolder(tmp_path / ".ferry" / "runs" / "run-1"), Reporter())
    assert _phase(plan).changes().text.endswith(
        "against the rendering of run run-1: unchanged 7: Namespace/ai-training-v4; ServiceAccount/ai-training-v4/"
        "trainer; ConfigMap/ai-training-v4/trainer-config; Secret/ai-training-v4/trainer-secrets; "
        "PersistentVolumeClaim/ai-training-v4/checkpoints; Deployment/ai-training-v4/trainer; "
        "Job/ai-training-v4/preprocess"
    )
    app = tmp_path / "k8s" / "app.yaml"
    app.write_text(app.read_text().replace("  replicas: 2", "  replicas: 3"))
    said = _phase(plan).changes().text
    assert "changed 1: Deployment/ai-training-v4/trainer (spec.replicas). unchanged 6: " in said
    assert not (tmp_path / ".ferry" / "runs" / "run-1" / "manifests" / "bundle.yaml").read_text().count("replicas: 3")


def test_the_images_phase_digest_map_pins_images_and_the_policy_checks_it(tmp_path: Path) -> None:
    from ferry import digest_map

    plan = _write_plan(tmp_path)
    source = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:2024.06"
    digest = "sha256:" + "e" * 64
    record = digest_map.ImageRecord(source, "registry.meta.example/ai-training/trainer:2024.06", digest, "rebuilt")
    write_atomic(StateLayout(tmp_path / ".ferry").digest_map("llm-train"), digest_map.render([record]))
    phase = _phase(plan)
    rendering = phase.render()
    deployment = next(d for d in rendering.documents if d.kind == "Deployment").plain()
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.meta.example/ai-training/trainer@{digest}"
    # The Job's image is not in the map: with a map published, an unpinned moved image fails the policy.
    policy = _by_name(phase.validate(rendering))["manifests.policy"]
    assert policy.status == Status.FAIL
    assert policy.evidence == [
        f"k8s/app.yaml#6 Job/{NS}/preprocess: spec.template.spec.containers[0].image: "
        "registry.meta.example/ai-training/preprocess:2 is not pinned by digest (not in the digest map)"
    ]
    # The map is an input of the phase: publishing another changes its hash.
    before = phase.input_hash()
    write_atomic(StateLayout(tmp_path / ".ferry").digest_map("llm-train"), digest_map.render([]))
    assert _phase(plan).input_hash() != before
