"""The manifests phase through its contract: render-only without a cluster; with one, rollout in waves and an
exact rollback, against the in-process Kubernetes API emulator (tests/kube_emulator.py).

No real API server can run on these machines: the emulator stores objects and answers the official client as
one does, but nothing runs. Readiness and failure are simulated by setting `.status` as a controller would.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.audit import AuditFolder
from ferry.errors import PermanentError, UsageError
from ferry.files import write_atomic
from ferry.layout import StateLayout
from ferry.manifests.apply import restorable
from ferry.phases.base import Reporter, open_phase
from ferry.phases.manifests import ManifestsPhase
from ferry.plan import load_plan
from ferry.results import Status
from ferry.runlog import RunLog
from tests.kube_emulator import KubeEmulator

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
MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: ml-train
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: trainer, namespace: ml-train}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: trainer-config, namespace: ml-train}
data:
  EPOCHS: "10"   # more epochs on the target
---
apiVersion: v1
kind: Secret
metadata: {name: trainer-secrets, namespace: ml-train}
stringData:
  TOKEN: s3cr3t-n3w
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: checkpoints, namespace: ml-train}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: gp3
  resources: {requests: {storage: 100Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml-train}
spec:
  replicas: 2
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      serviceAccountName: trainer
      containers:
      - name: trainer
        image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:2024.06
        envFrom:
        - configMapRef: {name: trainer-config}
        - secretRef: {name: trainer-secrets}
        - secretRef: {name: wandb}
        resources: {limits: {nvidia.com/gpu: 8}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: preprocess, namespace: ml-train}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: p
        image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/preprocess:2
"""


def _write_plan(root: Path, emulator: KubeEmulator | None, timeout: float = 3, manifests: str = MANIFESTS) -> Path:
    (root / "k8s").mkdir(parents=True, exist_ok=True)
    (root / "k8s" / "app.yaml").write_text(manifests, encoding="utf-8")
    cluster = ""
    if emulator is not None:
        emulator.write_kubeconfig(root / "kubeconfig", context="meta-eu")
        cluster = f"  cluster: {{context: meta-eu, namespace: {NS}, kubeconfig: kubeconfig}}"
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(cluster=cluster, ns=NS, timeout=timeout), encoding="utf-8")
    return plan


def _ready(emulator: KubeEmulator) -> None:
    """Controllers that always succeed: Deployments roll out, Jobs start."""
    emulator.on_write(
        "Deployment",
        lambda d: {
            "observedGeneration": d["metadata"]["generation"],
            **{f: d["spec"]["replicas"] for f in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")},
        },
    )
    emulator.on_write("Job", lambda j: {"startTime": "2026-01-01T00:00:00Z", "active": 1})


def _previous_state(emulator: KubeEmulator) -> dict[str, dict]:
    """What the cluster holds before the rollout: the namespace, an older ConfigMap, Secret and Job, a stranger."""
    for obj in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"team": "ml"}}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-config", "namespace": NS, "annotations": {"note": "old"}},
            "data": {"EPOCHS": "5", "LR": "0.1"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "trainer-secrets", "namespace": NS},
            "data": {"TOKEN": "b2xkLXRva2Vu"},
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wandb", "namespace": NS}, "data": {"K": "eA=="}},
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "preprocess", "namespace": NS},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "p", "image": "old/preprocess:1"}]}
                }
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "someone-elses", "namespace": NS},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "x", "image": "x:1"}]}}},
        },
    ):
        emulator.seed(obj)
    return {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()}


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emu:
        yield emu


def _phase(plan: Path) -> ManifestsPhase:
    phase = open_phase(load_plan(plan), "manifests")
    assert isinstance(phase, ManifestsPhase)
    return phase


def _run(phase: ManifestsPhase, root: Path) -> tuple[AuditFolder, list]:
    audit = AuditFolder(root / ".ferry" / "runs" / "run-1")
    for step in phase.steps():
        phase.run(step, audit, Reporter())
    return audit, phase.gate(audit)


def _by_name(results: list) -> dict:
    return {r.name: r for r in results}


class _Recorder(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.reports: dict[str, str] = {}

    def markdown(self, key: str, text: str, description: str) -> None:
        self.reports[key] = text


def test_without_a_cluster_it_renders_and_validates_only(tmp_path: Path) -> None:
    phase = _phase(_write_plan(tmp_path, None))
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


def test_preflight_reads_the_sources_and_asks_the_cluster(emulator: KubeEmulator, tmp_path: Path) -> None:
    phase = _phase(_write_plan(tmp_path, emulator))
    assert [(r.name, r.status, r.measured) for r in phase.preflight()] == [
        ("preflight.manifests_sources", Status.PASS, {"files": 1, "documents": 7}),
        ("preflight.manifests_cluster", Status.PASS, {"server": "1.30"}),
    ]
    emulator.version = "1.31"
    assert phase.preflight()[1].status == Status.WARN
    (tmp_path / "k8s" / "bad.yaml").write_text("kind: [\n")
    emulator.stop()
    sources, cluster = phase.preflight()
    assert sources.status == Status.FAIL and "bad.yaml:2: not valid YAML" in sources.evidence[0]
    assert cluster.status == Status.FAIL and "discovery" in cluster.evidence[0]


def test_rollout_in_waves_then_rollback_restores_exactly(emulator: KubeEmulator, tmp_path: Path) -> None:
    _ready(emulator)
    before = _previous_state(emulator)
    plan = _write_plan(tmp_path, emulator)
    iam = StateLayout(tmp_path / ".ferry").bindings("llm-train")
    iam.parent.mkdir(parents=True)
    iam.write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: ferry-compute-admin, "
        f"namespace: {NS}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}\n"
        "subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]\n"
    )
    phase = _phase(plan)
    assert phase.changes().totals == {"create": 4, "update": 4}
    emulator.requests.clear()
    audit, results = _run(phase, tmp_path)
    assert all(r.status == Status.PASS for r in results if r.name != "manifests.warnings"), results

    # Waves: namespace, RBAC (the iam phase's binding too), config and secrets, storage, workloads.
    applied = [json.loads(line) for line in (audit.root / "manifests" / "applied.jsonl").read_text().splitlines()]
    assert [(a["key"].split("|")[1], a["action"]) for a in applied] == [
        ("Namespace", "updated"),
        ("ServiceAccount", "created"),
        ("RoleBinding", "created"),
        ("ConfigMap", "updated"),
        ("Secret", "updated"),
        ("PersistentVolumeClaim", "created"),
        ("Deployment", "created"),
        # The API server refused to change the Job's pod template (immutable): replaced.
        ("Job", "updated"),
        ("Job", "replaced"),
    ]
    deployment = emulator.get("apps/v1", "Deployment", "trainer", NS)
    assert deployment["metadata"]["labels"] == {"ferry.io/plan": "llm-train", "app.kubernetes.io/managed-by": "ferry"}
    assert [m["manager"] for m in deployment["metadata"]["managedFields"]] == ["ferry"]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["compute.meta.com/interconnect"] == "roce-v2"
    assert (
        emulator.get("v1", "PersistentVolumeClaim", "checkpoints", NS)["spec"]["storageClassName"] == "meta-block-ssd"
    )
    binding = emulator.get("rbac.authorization.k8s.io/v1", "RoleBinding", "ferry-compute-admin", NS)
    assert binding["metadata"]["labels"]["ferry.io/plan"] == "llm-train"
    job = emulator.get("batch/v1", "Job", "preprocess", NS)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.meta.example/ai-training/preprocess:2"

    # The snapshot: Secrets (the applied one and the referenced one) only in the state directory, mode 0600.
    secrets = tmp_path / ".ferry" / "manifests" / "secret-snapshots" / "run-1.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert set(json.loads(secrets.read_text())) == {f"v1|Secret|{NS}|trainer-secrets", f"v1|Secret|{NS}|wandb"}
    for file in audit.root.rglob("*"):
        if file.is_file():
            text = file.read_text()
            assert "b2xkLXRva2Vu" not in text and "s3cr3t" not in text and "eA==" not in text, file
    snapshot = {e["key"]: e for e in json.loads((audit.root / "manifests" / "snapshot.json").read_text())}
    assert snapshot[f"v1|Secret|{NS}|wandb"] == {
        "key": f"v1|Secret|{NS}|wandb",
        "existed": True,
        "applied": False,
        "keys": ["K"],
    }

    preview = phase.rollback(audit, dry_run=True)
    assert preview.items[0] == f"restore batch/v1 Job {NS} preprocess (workloads)"
    assert preview.items[-1] == f"restore v1 Namespace {NS} (namespaces)"
    undo = phase.rollback(audit)
    assert undo.text == "restored 8 object(s) of run run-1 in reverse wave order"
    after = {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()}
    assert after == before
    assert phase.rollback(audit).text.startswith("nothing to undo")


def test_a_failed_wave_is_rolled_back_exactly(emulator: KubeEmulator, tmp_path: Path) -> None:
    before = _previous_state(emulator)
    # A policy engine refuses the Deployment: the workloads wave fails after namespaces, RBAC, config and storage.
    emulator.deny("Deployment", "GPU quota exceeded")
    phase = _phase(_write_plan(tmp_path, emulator))
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-2")
    with pytest.raises(
        PermanentError, match="apply Deployment trainer: the API answered 403 Forbidden: .*GPU quota exceeded"
    ):
        phase.run("rollout", audit, Reporter())
    assert emulator.get("v1", "PersistentVolumeClaim", "checkpoints", NS) is not None
    assert emulator.get("v1", "ConfigMap", "trainer-config", NS)["data"]["EPOCHS"] == "10"
    undo = phase.rollback(audit)
    assert undo.items[0] == f"delete apps/v1 Deployment {NS} trainer (workloads)"
    after = {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()}
    assert after == before
    # Objects without the plan's label were never touched.
    assert "ferry.io/plan" not in str(emulator.get("apps/v1", "Deployment", "someone-elses", NS))


def test_rollback_deletes_only_what_carries_the_plan_label(emulator: KubeEmulator, tmp_path: Path) -> None:
    _ready(emulator)
    manifests = MANIFESTS.replace("ml-train", "fresh").replace(f"namespaces: {{ml-train: {NS}}}", "")
    phase = _phase(_write_plan(tmp_path, emulator, manifests=manifests))
    audit, _ = _run(phase, tmp_path)
    # Meanwhile someone put their own ConfigMap in the namespace ferry created, and replaced ferry's PVC by theirs.
    emulator.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": "fresh"}})
    from kubernetes import dynamic

    claims = dynamic.DynamicClient(emulator.api_client()).resources.get(api_version="v1", kind="PersistentVolumeClaim")
    claims.delete(name="checkpoints", namespace="fresh")
    emulator.seed(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": "fresh"},
            "spec": {"accessModes": ["ReadWriteOnce"]},
        }
    )
    undo = phase.rollback(audit, force=True)
    assert undo.items[:2] == [
        "kept PersistentVolumeClaim checkpoints: it does not carry ferry.io/plan=llm-train (not ferry's)",
        "kept Namespace fresh: it holds objects ferry did not apply "
        "(ConfigMap/theirs, PersistentVolumeClaim/checkpoints)",
    ]
    assert emulator.get("v1", "Namespace", "fresh") is not None
    assert {o["metadata"]["name"] for o in emulator.objects() if o["metadata"].get("namespace") == "fresh"} == {
        "theirs",
        "checkpoints",
    }
    assert emulator.get("apps/v1", "Deployment", "trainer", "fresh") is None


def test_a_rollout_that_never_gets_ready_fails_the_gate(emulator: KubeEmulator, tmp_path: Path) -> None:
    before = _previous_state(emulator)
    emulator.on_write("Job", lambda j: {"startTime": "2026-01-01T00:00:00Z"})
    emulator.on_write("Deployment", lambda d: {"observedGeneration": d["metadata"]["generation"], "readyReplicas": 1})
    phase = _phase(_write_plan(tmp_path, emulator, timeout=0.5))
    audit, results = _run(phase, tmp_path)
    rollout = _by_name(results)["manifests.rollout"]
    assert rollout.status == Status.FAIL
    assert rollout.evidence == [f"apps/v1|Deployment|{NS}|trainer: updatedReplicas 0 of 2"]
    phase.rollback(audit)
    assert {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()} == before


def test_a_later_rollback_stops_on_objects_changed_since_unless_forced(emulator: KubeEmulator, tmp_path: Path) -> None:
    _ready(emulator)
    _previous_state(emulator)
    phase = _phase(_write_plan(tmp_path, emulator))
    audit, _ = _run(phase, tmp_path)
    from kubernetes import client

    client.CoreV1Api(emulator.api_client()).patch_namespaced_config_map(
        "trainer-config", NS, {"data": {"EPOCHS": "12"}}
    )
    # Before the run commits (its own gate failed), its rollback does not ask: nobody else could have changed it.
    assert not any(i.startswith("changed since") for i in phase.rollback(audit, dry_run=True).items)
    runlog = RunLog(tmp_path / ".ferry" / "state")
    runlog.set_phase("llm-train", "manifests", phase.input_hash(), "committed", "run-1")
    runlog.close()
    preview = phase.rollback(audit, dry_run=True)
    assert preview.items[0] == f"changed since the rollout: v1 ConfigMap {NS} trainer-config"
    with pytest.raises(UsageError, match="1 object\\(s\\) changed since the rollout of run run-1"):
        phase.rollback(audit)
    assert emulator.get("v1", "ConfigMap", "trainer-config", NS)["data"]["EPOCHS"] == "12"
    phase.rollback(audit, force=True)
    assert emulator.get("v1", "ConfigMap", "trainer-config", NS)["data"] == {"EPOCHS": "5", "LR": "0.1"}


def test_a_retried_step_keeps_the_first_snapshot_and_a_job_is_replaced_once(
    emulator: KubeEmulator, tmp_path: Path
) -> None:
    _ready(emulator)
    before = _previous_state(emulator)
    phase = _phase(_write_plan(tmp_path, emulator))
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-3")
    phase.run("run", audit, Reporter())
    job = emulator.get("batch/v1", "Job", "preprocess", NS)
    phase.run("run", audit, Reporter())  # as Prefect retries a step after a transient error
    # The second apply of the same pod template is accepted: the Job is not replaced (re-run) again.
    assert emulator.get("batch/v1", "Job", "preprocess", NS)["metadata"]["uid"] == job["metadata"]["uid"]
    actions = [
        json.loads(line)["action"] for line in (audit.root / "manifests" / "applied.jsonl").read_text().splitlines()
    ]
    assert actions.count("replaced") == 1
    undo = phase.rollback(audit)
    assert len(undo.items) == 7
    assert {f"{o['kind']}/{o['metadata']['name']}": restorable(o) for o in emulator.objects()} == before


def test_the_images_phase_digest_map_pins_images_and_the_policy_checks_it(tmp_path: Path) -> None:
    from ferry import digest_map

    plan = _write_plan(tmp_path, None)
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


def test_objects_server_side_apply_cannot_take_are_reported_not_applied(emulator: KubeEmulator, tmp_path: Path) -> None:
    _ready(emulator)
    # What sits beside real manifests: a run object named by generateName (kubectl create, argo submit) and the
    # folder's kustomization.
    extra = (
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: eval-run-, namespace: ml-train}\n"
        "data: {K: v}\n---\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "namespace: ml-train\nresources: [app.yaml]\n"
    )
    phase = _phase(_write_plan(tmp_path, emulator, manifests=MANIFESTS + extra))
    assert phase.changes().totals == {"create": 7, "update": 0}
    findings = [str(f) for f in phase.render().findings]
    assert (
        "k8s/app.yaml#7 ConfigMap/ml-train/?: metadata.name: generateName without a name: server-side apply "
        "needs a name; rendered but not applied" in findings
    )
    assert any(f.startswith("k8s/app.yaml#8 Kustomization/?: a kustomization") for f in findings)
    audit, results = _run(phase, tmp_path)
    applied = [json.loads(line) for line in (audit.root / "manifests" / "applied.jsonl").read_text().splitlines()]
    assert len(applied) == 7 and not any("Kustomization" in a["key"] or a["key"].endswith("|") for a in applied)
