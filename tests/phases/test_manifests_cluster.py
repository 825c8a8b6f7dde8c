"""The manifests phase against a real control plane (tests/controlplane): kube-apiserver with etcd, the
controller-manager and scheduler, kwok's GPU nodes. Deployments become ReplicaSets and Pods that kwok turns Ready,
Jobs run to completion, server-side apply keeps field ownership, deletion goes through finalizers.

Each test has namespaces of its own, removed after it.
"""

from __future__ import annotations

import contextlib
import json
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.audit import AuditFolder
from ferry.errors import PermanentError, UsageError
from ferry.layout import StateLayout
from ferry.manifests.apply import restorable
from ferry.manifests.undo import without_generated_job_fields
from ferry.phases.base import Reporter, open_phase
from ferry.phases.manifests import ManifestsPhase
from ferry.plan import load_plan
from ferry.results import Status
from ferry.runlog import RunLog
from tests.controlplane.cluster import ControlPlane
from tests.support import free_port

PLAN = """\
name: llm-train
source:
  storage: ./src
  registry: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml
target:
  storage: ./dst
  registry: registry.meta.example/ai-training
  profile: meta-compute
  cluster: {{context: meta-eu, namespace: {ns}, kubeconfig: kubeconfig}}
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
# What the controllers write that a restore does not (and need not) put back.
_WRITTEN_BY_CONTROLLERS = ("deployment.kubernetes.io/revision",)


@pytest.fixture
def ns(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace name of the test's own (the test or ferry creates it); deleted after the test."""
    name = f"ai-{uuid.uuid4().hex[:8]}"
    yield name
    control_plane.delete_namespace(name)


def _write_plan(root: Path, plane: ControlPlane, ns: str, *, timeout: float = 60, manifests: str = MANIFESTS,
                user: str | None = None) -> Path:  # fmt: skip
    (root / "k8s").mkdir(parents=True, exist_ok=True)
    (root / "k8s" / "app.yaml").write_text(manifests, encoding="utf-8")
    if user is None:
        plane.kubeconfig(root / "kubeconfig", context="meta-eu")
    else:
        plane.kubeconfig(root / "kubeconfig", context="meta-eu", user=user, groups=())
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(ns=ns, timeout=timeout), encoding="utf-8")
    return plan


def _previous_state(plane: ControlPlane, ns: str) -> None:
    """What the cluster holds before the rollout: the namespace, an older ConfigMap, Secret and Job, a stranger."""
    for obj in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"team": "ml"}}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "trainer-config", "namespace": ns, "annotations": {"note": "old"}},
            "data": {"EPOCHS": "5", "LR": "0.1"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "trainer-secrets", "namespace": ns},
            "data": {"TOKEN": "b2xkLXRva2Vu"},
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wandb", "namespace": ns}, "data": {"K": "eA=="}},
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "preprocess", "namespace": ns},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "p", "image": "old/preprocess:1"}]}
                }
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "someone-elses", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "x", "image": "x:1"}]},
                },
            },
        },
    ):
        plane.seed(obj)
    plane.wait(f"default ServiceAccount of {ns}", lambda: plane.get("v1", "ServiceAccount", "default", ns))


# What a person wrote into the namespace, as a restore must give it back (not what controllers make or write).
_KINDS = (
    ("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "PersistentVolumeClaim"),
    ("apps/v1", "Deployment"), ("batch/v1", "Job"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
)  # fmt: skip


def _state(plane: ControlPlane, ns: str) -> dict[str, dict]:
    found = {}
    namespace = plane.get("v1", "Namespace", ns)
    if namespace is not None:
        found[f"Namespace/{ns}"] = restorable(namespace)
    for api_version, kind in _KINDS:
        for obj in plane.resource(api_version, kind).get(namespace=ns).to_dict()["items"]:
            name = obj["metadata"]["name"]
            if (kind, name) in (("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")):
                continue
            clean = restorable({**obj, "apiVersion": api_version, "kind": kind})
            if kind == "Job":
                clean = without_generated_job_fields(clean)
            for annotation in _WRITTEN_BY_CONTROLLERS:
                (clean["metadata"].get("annotations") or {}).pop(annotation, None)
            if not clean["metadata"].get("annotations"):
                clean["metadata"].pop("annotations", None)
            found[f"{kind}/{name}"] = clean
    return found


def _phase(plan: Path) -> ManifestsPhase:
    phase = open_phase(load_plan(plan), "manifests")
    assert isinstance(phase, ManifestsPhase)
    return phase


def _run(phase: ManifestsPhase, root: Path, run: str = "run-1") -> tuple[AuditFolder, dict]:
    audit = AuditFolder(root / ".ferry" / "runs" / run)
    for step in phase.steps():
        phase.run(step, audit, Reporter())
    return audit, {r.name: r for r in phase.gate(audit)}


def _applied(audit: AuditFolder) -> list[tuple[str, str]]:
    lines = (audit.root / "manifests" / "applied.jsonl").read_text().splitlines()
    return [(json.loads(line)["key"].split("|")[1], json.loads(line)["action"]) for line in lines]


def test_preflight_asks_the_api_server_over_tls_with_a_client_certificate(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    plan = _write_plan(tmp_path, control_plane, ns)
    phase = _phase(plan)
    assert [(r.name, r.status, r.measured) for r in phase.preflight()] == [
        ("preflight.manifests_sources", Status.PASS, {"files": 1, "documents": 7}),
        ("preflight.manifests_cluster", Status.PASS, {"server": "1.37"}),
    ]
    config = (tmp_path / "kubeconfig").read_text()
    assert "https://127.0.0.1:" in config and "client-certificate-data" in config
    # Validated against other schemas than the server runs: a warning.
    plan.write_text(
        plan.read_text().replace("  profile: meta-compute\n", '  profile: meta-compute\n  kubernetes_version: "1.30"\n')
    )
    assert _phase(plan).preflight()[1].status == Status.WARN
    # A cluster that does not answer, and sources that do not read.
    (tmp_path / "kubeconfig").write_text(config.replace(control_plane.url, f"https://127.0.0.1:{free_port()}"))
    (tmp_path / "k8s" / "bad.yaml").write_text("kind: [\n")
    sources, cluster = _phase(plan).preflight()
    assert sources.status == Status.FAIL and "bad.yaml:2: not valid YAML" in sources.evidence[0]
    assert cluster.status == Status.FAIL and "discovery" in cluster.evidence[0]


def test_objects_server_side_apply_cannot_take_are_reported_not_applied(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    # What sits beside real manifests: a run object named by generateName (kubectl create, argo submit) and the
    # folder's kustomization.
    extra = (
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: eval-run-, namespace: ml-train}\n"
        "data: {K: v}\n---\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "namespace: ml-train\nresources: [app.yaml]\n"
    )
    phase = _phase(_write_plan(tmp_path, control_plane, ns, manifests=MANIFESTS + extra))
    assert phase.changes().totals == {"create": 7, "update": 0}
    findings = [str(f) for f in phase.render().findings]
    assert (
        "k8s/app.yaml#7 ConfigMap/ml-train/?: metadata.name: generateName without a name: server-side apply "
        "needs a name; rendered but not applied" in findings
    )
    assert any(f.startswith("k8s/app.yaml#8 Kustomization/?: a kustomization") for f in findings)
    audit, _ = _run(phase, tmp_path)
    applied = _applied(audit)
    assert len(applied) == 7 and ("Kustomization", "created") not in applied


def test_rollout_in_waves_then_rollback_restores_exactly(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    _previous_state(control_plane, ns)
    before = _state(control_plane, ns)
    plan = _write_plan(tmp_path, control_plane, ns)
    iam = StateLayout(tmp_path / ".ferry").bindings("llm-train")
    iam.parent.mkdir(parents=True)
    iam.write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: ferry-compute-admin, "
        f"namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}\n"
        "subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]\n"
    )
    phase = _phase(plan)
    preview = phase.changes()
    assert preview.totals == {"create": 4, "update": 4}
    assert "by a server-side dry run: created 4: " in preview.text
    assert f"ConfigMap/{ns}/trainer-config (data.EPOCHS, metadata.labels)" in preview.text
    assert f"Job/{ns}/preprocess (spec.template: the Job is replaced, its template immutable)" in preview.text
    assert _state(control_plane, ns) == before, "the dry run changes nothing"
    audit, gate = _run(phase, tmp_path)
    assert all(r.status == Status.PASS for name, r in gate.items() if name != "manifests.warnings"), gate

    # Waves: namespace, RBAC (the iam phase's binding too), config and secrets, storage, workloads.
    assert _applied(audit) == [
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
    deployment = control_plane.get("apps/v1", "Deployment", "trainer", ns)
    assert deployment["metadata"]["labels"] == {"ferry.io/plan": "llm-train", "app.kubernetes.io/managed-by": "ferry"}
    applies = [m["manager"] for m in deployment["metadata"]["managedFields"] if m["operation"] == "Apply"]
    assert applies == ["ferry"]
    # Ready through real controllers: a ReplicaSet, two Pods on kwok's GPU nodes.
    assert deployment["status"]["readyReplicas"] == 2
    pods = control_plane.core().list_namespaced_pod(ns, label_selector="app=trainer").items
    assert len(pods) == 2 and all(p.spec.node_name.startswith("gpu-node-") for p in pods)
    assert deployment["spec"]["template"]["metadata"]["annotations"]["compute.meta.com/interconnect"] == "roce-v2"
    claim = control_plane.get("v1", "PersistentVolumeClaim", "checkpoints", ns)
    assert claim["spec"]["storageClassName"] == "meta-block-ssd"
    binding = control_plane.get("rbac.authorization.k8s.io/v1", "RoleBinding", "ferry-compute-admin", ns)
    assert binding["metadata"]["labels"]["ferry.io/plan"] == "llm-train"
    job = control_plane.get("batch/v1", "Job", "preprocess", ns)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.meta.example/ai-training/preprocess:2"
    # stringData went into data on the server.
    secret = control_plane.get("v1", "Secret", "trainer-secrets", ns)
    assert "stringData" not in secret and secret["data"]["TOKEN"] == "czNjcjN0LW4zdw=="

    # The snapshot: Secrets (the applied one and the referenced one) only in the state directory, mode 0600.
    secrets = tmp_path / ".ferry" / "manifests" / "secret-snapshots" / "run-1.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert set(json.loads(secrets.read_text())) == {f"v1|Secret|{ns}|trainer-secrets", f"v1|Secret|{ns}|wandb"}
    for file in audit.root.rglob("*"):
        if file.is_file():
            text = file.read_text()
            assert "b2xkLXRva2Vu" not in text and "s3cr3t" not in text and "czNjcjN0" not in text, file

    preview = phase.rollback(audit, dry_run=True)
    assert preview.items[0] == f"restore batch/v1 Job {ns} preprocess (workloads)"
    assert preview.items[-1] == f"restore v1 Namespace {ns} (namespaces)"
    undo = phase.rollback(audit)
    assert undo.text == "restored 8 object(s) of run run-1 in reverse wave order"
    assert _state(control_plane, ns) == before
    # The Deployment went in the foreground: its ReplicaSet and Pods with it.
    assert not control_plane.core().list_namespaced_pod(ns, label_selector="app=trainer").items
    assert phase.rollback(audit).text.startswith("nothing to undo")


def test_a_refusal_in_the_dry_run_applies_nothing(control_plane: ControlPlane, ns: str, grant, tmp_path: Path) -> None:
    _previous_state(control_plane, ns)
    before = _state(control_plane, ns)
    # ferry's identity may do everything the rollout does but create Deployments.
    grant("ferry-deployer", apps=False)
    phase = _phase(_write_plan(tmp_path, control_plane, ns, user="ferry-deployer"))
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-2")
    with pytest.raises(PermanentError, match="dry run of apply Deployment trainer: the API answered 403 Forbidden"):
        phase.run("rollout", audit, Reporter())
    assert not (audit.root / "manifests" / "applied.jsonl").exists()
    assert _state(control_plane, ns) == before


def test_a_failed_wave_in_a_namespace_it_creates_is_rolled_back_exactly(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    # The namespace is the run's own, so what goes into it cannot be dry-run first; the target's admission policy
    # admits no Deployment there: the workloads wave is refused after namespaces, RBAC, config and storage. (A
    # ResourceQuota applied with the config is no such refusal: the API's quota admission caches "no quota in this
    # namespace" for 30 s from the run's first ConfigMap, so a Deployment created in the same second may pass it.)
    with _no_deployments_in(control_plane, ns):
        phase = _phase(_write_plan(tmp_path, control_plane, ns))
        audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-2")
        with pytest.raises(PermanentError, match="^apply Deployment trainer: the API answered 403 Forbidden: .*policy"):
            phase.run("rollout", audit, Reporter())
    assert control_plane.get("v1", "PersistentVolumeClaim", "checkpoints", ns) is not None
    undo = phase.rollback(audit)
    assert undo.items[0] == f"delete apps/v1 Deployment {ns} trainer (workloads)"
    assert undo.items[1] == f"delete v1 PersistentVolumeClaim {ns} checkpoints (storage)"
    assert undo.items[-1] == f"delete v1 Namespace {ns} (namespaces)"
    assert control_plane.get("v1", "Namespace", ns) is None, "the namespace it created is gone, with what it held"


@contextlib.contextmanager
def _no_deployments_in(plane: ControlPlane, ns: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing every Deployment in ns (and one named probe-<ns> in default, to tell
    when the API enforces it), removed after."""
    from kubernetes.client.rest import ApiException

    admission = "admissionregistration.k8s.io/v1"
    name = f"no-deployments-{ns}"
    refusal = "the target's policy admits no Deployment in this namespace"
    policy = {
        "apiVersion": admission, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "validations": [{
                "expression": f"object.metadata.namespace != '{ns}' && object.metadata.name != 'probe-{ns}'",
                "message": refusal, "reason": "Forbidden",
            }],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": admission, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }  # fmt: skip
    probe = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"probe-{ns}", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}}, "template": {
            "metadata": {"labels": {"app": "probe"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }  # fmt: skip

    def enforced() -> bool:
        try:
            plane.resource("apps/v1", "Deployment").create(body=probe, namespace="default", dry_run="All")
        except ApiException as exc:
            return exc.status == 403 and refusal in exc.body
        return False

    try:
        plane.seed(policy)
        plane.seed(binding)
        plane.wait("the admission policy enforced", enforced)
        yield
    finally:
        for made in (binding, policy):
            if plane.get(admission, made["kind"], name) is not None:
                plane.resource(admission, made["kind"]).delete(name=name)


def test_rollback_deletes_only_what_carries_the_plan_label(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    manifests = MANIFESTS.replace("ml-train", ns)
    phase = _phase(_write_plan(tmp_path, control_plane, ns, manifests=manifests))
    audit, _ = _run(phase, tmp_path)
    # Meanwhile someone put their own ConfigMap in the namespace ferry created, and replaced ferry's PVC by theirs.
    control_plane.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": ns}})
    control_plane.core().delete_namespaced_persistent_volume_claim("checkpoints", ns)
    control_plane.wait("the claim gone", lambda: control_plane.get("v1", "PersistentVolumeClaim", "checkpoints", ns)
                       is None)  # fmt: skip
    control_plane.seed(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    )
    undo = phase.rollback(audit, force=True)
    assert undo.items[:2] == [
        "kept PersistentVolumeClaim checkpoints: it does not carry ferry.io/plan=llm-train (not ferry's)",
        f"kept Namespace {ns}: it holds objects ferry did not apply "
        "(ConfigMap/theirs, PersistentVolumeClaim/checkpoints)",
    ]
    assert control_plane.get("v1", "Namespace", ns) is not None
    assert control_plane.get("apps/v1", "Deployment", "trainer", ns) is None
    assert control_plane.get("v1", "ConfigMap", "theirs", ns) is not None


def test_a_rollout_that_never_gets_ready_fails_the_gate(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    _previous_state(control_plane, ns)
    before = _state(control_plane, ns)
    # Six pods of eight GPUs each fit on the six GPU nodes; nine do not.
    manifests = MANIFESTS.replace("replicas: 2", "replicas: 9")
    phase = _phase(_write_plan(tmp_path, control_plane, ns, timeout=10, manifests=manifests))
    audit, gate = _run(phase, tmp_path)
    assert gate["manifests.rollout"].status == Status.FAIL
    [waiting] = gate["manifests.rollout"].evidence
    assert waiting.startswith(f"apps/v1|Deployment|{ns}|trainer: ") and "of 9" in waiting
    phase.rollback(audit)
    assert _state(control_plane, ns) == before


def test_a_later_rollback_stops_on_what_a_person_changed_not_on_what_controllers_wrote(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    _previous_state(control_plane, ns)
    phase = _phase(_write_plan(tmp_path, control_plane, ns))
    audit, _ = _run(phase, tmp_path)
    runlog = RunLog(tmp_path / ".ferry" / "state")
    runlog.set_phase("llm-train", "manifests", phase.input_hash(), "committed", "run-1")
    runlog.close()
    # The controllers go on writing (status, the Deployment's revision, the Job's completion): no drift.
    control_plane.wait("the Job to complete", lambda: control_plane.get("batch/v1", "Job", "preprocess", ns)
                       .get("status", {}).get("succeeded") == 1)  # fmt: skip
    assert not any(i.startswith("changed since") for i in phase.rollback(audit, dry_run=True).items)
    # A person's kubectl patch is.
    control_plane.kubectl("patch", "configmap", "trainer-config", "-n", ns, "-p", '{"data":{"EPOCHS":"12"}}')
    preview = phase.rollback(audit, dry_run=True)
    assert preview.items[0] == f"changed since the rollout: v1 ConfigMap {ns} trainer-config"
    assert not any(i.startswith("changed since") for i in preview.items[1:])
    with pytest.raises(UsageError, match="1 object\\(s\\) changed since the rollout of run run-1"):
        phase.rollback(audit)
    assert control_plane.get("v1", "ConfigMap", "trainer-config", ns)["data"]["EPOCHS"] == "12"
    phase.rollback(audit, force=True)
    assert control_plane.get("v1", "ConfigMap", "trainer-config", ns)["data"] == {"EPOCHS": "5", "LR": "0.1"}


def test_a_retried_step_keeps_the_first_snapshot_and_a_job_is_replaced_once(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    _previous_state(control_plane, ns)
    before = _state(control_plane, ns)
    phase = _phase(_write_plan(tmp_path, control_plane, ns))
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-3")
    phase.run("run", audit, Reporter())
    job = control_plane.get("batch/v1", "Job", "preprocess", ns)
    phase.run("run", audit, Reporter())  # as Prefect retries a step after a transient error
    # The second apply of the same pod template is accepted: the Job is not replaced (re-run) again.
    assert control_plane.get("batch/v1", "Job", "preprocess", ns)["metadata"]["uid"] == job["metadata"]["uid"]
    assert [action for _, action in _applied(audit)].count("replaced") == 1
    undo = phase.rollback(audit)
    assert len(undo.items) == 7
    assert _state(control_plane, ns) == before


def test_a_field_the_hpa_owns_is_left_to_it_and_reported(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    # The autoscaler's floor is above the manifest's replicas: the HPA controller scales the Deployment up through
    # its scale subresource (no metrics needed for that) and owns spec.replicas from then on.
    hpa = (
        "---\napiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
        "metadata: {name: trainer, namespace: ml-train}\n"
        "spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: trainer}\n  minReplicas: 3\n"
        "  maxReplicas: 3\n  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, "
        "averageUtilization: 80}}}]\n"
    )
    plan = _write_plan(tmp_path, control_plane, ns, manifests=MANIFESTS + hpa)
    _run(_phase(plan), tmp_path, "run-1")
    control_plane.wait(
        "the HPA to scale to its floor",
        lambda: control_plane.get("apps/v1", "Deployment", "trainer", ns)["spec"]["replicas"] == 3,
    )
    audit, gate = _run(_phase(plan), tmp_path, "run-2")
    assert control_plane.get("apps/v1", "Deployment", "trainer", ns)["spec"]["replicas"] == 3, "not fought over"
    applied = gate["manifests.applied"]
    assert applied.status == Status.WARN
    assert (
        f"left .spec.replicas (owned by kube-controller-manager) of apps/v1 Deployment {ns} trainer as it is: ferry "
        "takes no field the control plane owns" in applied.evidence
    )
    deployment = control_plane.get("apps/v1", "Deployment", "trainer", ns)
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.meta.example/ai-training/trainer:2024.06", "the rest is applied"


def test_a_claims_storage_class_is_reported_and_kept(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    control_plane.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    control_plane.seed(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "resources": {"requests": {"storage": "100Gi"}},
            },
        }  # fmt: skip
    )
    phase = _phase(_write_plan(tmp_path, control_plane, ns))
    audit, gate = _run(phase, tmp_path)
    claim = control_plane.get("v1", "PersistentVolumeClaim", "checkpoints", ns)
    assert claim["spec"]["storageClassName"] == "gp3", "never recreated"
    assert gate["manifests.applied"].status == Status.WARN
    assert (
        f"kept v1 PersistentVolumeClaim {ns} checkpoints storageClassName 'gp3' (the rendering has 'meta-block-ssd'): "
        "a claim's spec cannot change once created; move its data to a new claim to change it"
    ) in gate["manifests.applied"].evidence
    assert ("PersistentVolumeClaim", "updated") in _applied(audit)


@pytest.fixture
def grant(control_plane: ControlPlane) -> Iterator:
    """grant(user, apps=...): cluster-wide RBAC for user, what the rollout needs but creating Deployments unless
    apps, in force when it returns; the ClusterRole and its binding removed after the test."""
    made: list[str] = []

    def grant(user: str, *, apps: bool) -> None:
        rules = [
            {"apiGroups": [""], "verbs": ["*"], "resources": [
                "namespaces", "configmaps", "secrets", "serviceaccounts", "persistentvolumeclaims", "services",
                "pods"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "verbs": ["*"], "resources": ["rolebindings", "roles"]},
            {"apiGroups": ["batch"], "verbs": ["*"], "resources": ["jobs", "cronjobs"]},
            {"apiGroups": ["apps"], "verbs": ["*"] if apps else ["get", "list"],
             "resources": ["deployments", "statefulsets", "daemonsets"]},
        ]  # fmt: skip
        name = f"{user}-{uuid.uuid4().hex[:6]}"
        rbac = "rbac.authorization.k8s.io/v1"
        control_plane.seed({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
        control_plane.seed(
            {
                "apiVersion": rbac,
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
            }
        )
        made.append(name)
        # The authorizer reads bindings from its informer: wait until it knows this one.
        subject = {"kind": "User", "name": user}
        control_plane.wait(
            f"{user} may create namespaces", lambda: control_plane.allowed(subject, "", "create", "", "namespaces")
        )

    yield grant
    for name in made:
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            control_plane.resource("rbac.authorization.k8s.io/v1", kind).delete(name=name)


SERVICE = """\
---
apiVersion: v1
kind: Service
metadata: {name: trainer, namespace: ml-train}
spec:
  selector: {app: trainer}
  ports: [{port: 80, targetPort: 8080}]
"""


def test_a_real_namespace_export_renders_what_a_person_wrote_and_applies_elsewhere(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    _run(_phase(_write_plan(source, control_plane, ns, manifests=MANIFESTS + SERVICE)), source)
    control_plane.wait(
        "the endpoints", lambda: control_plane.get("v1", "Endpoints", "trainer", ns).get("subsets") is not None
    )
    export = control_plane.kubectl(
        "get", "all,configmaps,serviceaccounts,secrets,persistentvolumeclaims,endpoints,endpointslices,events",
        "-n", ns, "-o", "yaml",
    )  # fmt: skip
    target = f"{ns}-b"
    migrated = tmp_path / "migrated"
    (migrated / "k8s").mkdir(parents=True)
    (migrated / "k8s" / "export.yaml").write_text(export, encoding="utf-8")
    plan = _write_plan(migrated, control_plane, target)
    (migrated / "k8s" / "app.yaml").unlink()
    plan.write_text(plan.read_text().replace("{ml-train: " + target + "}", "{" + f"{ns}: {target}" + "}"))
    phase = _phase(plan)
    rendering = phase.render()
    left = {doc.label.split("/")[0] + "/" + doc.label.split("/")[-1]: doc.left_out for doc in rendering.left_out}
    replica_set = next(name for name in left if name.startswith("ReplicaSet/trainer-"))
    assert left[replica_set] == "owned by Deployment/trainer, whose controller makes it on the target"
    pods = [name for name in left if name.startswith("Pod/trainer-")]
    assert len(pods) == 2 and all(left[p].startswith(f"owned by {replica_set}") for p in pods)
    assert left["Endpoints/trainer"].startswith("a Service's endpoints")
    assert any(name.startswith("EndpointSlice/trainer-") for name in left)
    assert any(name.startswith("Event/") for name in left)
    assert left["ConfigMap/kube-root-ca.crt"].startswith("the cluster's CA bundle")
    assert left["ServiceAccount/default"] == "made in every namespace by the cluster itself"
    # The Job's pods are the Job's; the Job is a person's, as are the rest.
    kept = sorted(doc.label.split("/", 1)[0] + "/" + doc.label.rsplit("/", 1)[-1] for doc in rendering.documents)
    assert kept == [
        "ConfigMap/trainer-config", "Deployment/trainer", "Job/preprocess", "PersistentVolumeClaim/checkpoints",
        "Secret/trainer-secrets", "Service/trainer", "ServiceAccount/trainer",
    ]  # fmt: skip
    for doc in rendering.documents:
        obj = doc.plain()
        assert "status" not in obj and obj["metadata"]["namespace"] == target
        assert not {"uid", "resourceVersion", "managedFields", "creationTimestamp"} & set(obj["metadata"]), obj
    # And it applies on the target as the export's owner wrote it: ready, and the Job made again from its template.
    control_plane.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}})
    try:
        audit, gate = _run(phase, migrated)
        assert gate["manifests.rollout"].status == Status.PASS, gate["manifests.rollout"].evidence
        assert control_plane.get("apps/v1", "Deployment", "trainer", target)["status"]["readyReplicas"] == 2
        assert (
            control_plane.get("v1", "Service", "trainer", target)["spec"]["clusterIP"]
            != (control_plane.get("v1", "Service", "trainer", ns)["spec"]["clusterIP"])
        ), "the target allocates its own address"
    finally:
        control_plane.delete_namespace(target)


def test_a_job_refused_for_another_field_is_kept_not_replaced(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    plan = _write_plan(tmp_path, control_plane, ns)
    _run(_phase(plan), tmp_path)
    job = control_plane.get("batch/v1", "Job", "preprocess", ns)
    # The manifest now changes how many completions the Job needs and nothing else, which the API server refuses
    # (422) for its own reason: not the pod template's, so the live Job (and its history) stays.
    source = tmp_path / "k8s" / "app.yaml"
    job_spec = "kind: Job\nmetadata: {name: preprocess, namespace: ml-train}\nspec:\n"
    source.write_text(source.read_text().replace(job_spec, job_spec + "  completions: 3\n"))
    assert "completions: 3" in source.read_text()
    with pytest.raises(PermanentError, match="dry run of apply Job preprocess: the API answered 422 .*completions"):
        _phase(plan).run("rollout", AuditFolder(tmp_path / ".ferry" / "runs" / "run-2"), Reporter())
    assert control_plane.get("batch/v1", "Job", "preprocess", ns)["metadata"]["uid"] == job["metadata"]["uid"]


CRD = """\
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: trainingruns.ml.example.com}
spec:
  group: ml.example.com
  scope: Namespaced
  names: {plural: trainingruns, singular: trainingrun, kind: TrainingRun}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: ml.example.com/v1
kind: TrainingRun
metadata: {name: llama-70b, namespace: ml-train}
spec: {epochs: 3}
"""


def test_a_definition_is_served_before_its_custom_resources_and_both_roll_back(
    control_plane: ControlPlane, ns: str, tmp_path: Path
) -> None:
    phase = _phase(_write_plan(tmp_path, control_plane, ns, manifests=MANIFESTS + CRD))
    try:
        audit, gate = _run(phase, tmp_path)
        assert gate["manifests.rollout"].status == Status.PASS
        run = control_plane.get("ml.example.com/v1", "TrainingRun", "llama-70b", ns)
        assert run["spec"] == {"epochs": 3} and run["metadata"]["labels"]["ferry.io/plan"] == "llm-train"
        assert ("CustomResourceDefinition", "created") in _applied(audit)
        phase.rollback(audit)
        assert control_plane.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "trainingruns.ml.example.com") \
            is None  # fmt: skip
    finally:
        definitions = control_plane.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        if control_plane.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "trainingruns.ml.example.com"):
            definitions.delete(name="trainingruns.ml.example.com")


def test_the_api_servers_warnings_reach_the_gate(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    deprecated = "      serviceAccountName: trainer\n      nodeSelector: {beta.kubernetes.io/arch: amd64}\n"
    manifests = MANIFESTS.replace("      serviceAccountName: trainer\n", deprecated)
    _, gate = _run(_phase(_write_plan(tmp_path, control_plane, ns, manifests=manifests)), tmp_path)
    applied = gate["manifests.applied"]
    assert applied.status == Status.WARN
    assert applied.evidence == [
        "the API server warned: spec.template.spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; "
        'use "kubernetes.io/arch" instead'
    ]


def test_a_terminating_namespace_is_waited_for_and_what_holds_it_named(
    control_plane: ControlPlane, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ferry.errors import TransientError
    from ferry.manifests import apply

    # The namespace of an earlier try is being deleted, and an object in it is held by a finalizer.
    control_plane.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    held = {"name": "held", "namespace": ns, "finalizers": ["example.com/hold"]}
    control_plane.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
    control_plane.delete_namespace(ns)
    control_plane.wait(
        "the namespace controller to say what holds it",
        lambda: any(c["type"] == "NamespaceFinalizersRemaining" and c["status"] == "True"
                    for c in control_plane.get("v1", "Namespace", ns)["status"].get("conditions") or []),
    )  # fmt: skip
    monkeypatch.setattr(apply, "TERMINATING_WAIT_S", 3.0)
    phase = _phase(_write_plan(tmp_path, control_plane, ns))
    with pytest.raises(TransientError, match=f"namespace {ns} is Terminating: still there after 3 s, being deleted "
                                             r"\(held by finalizers kubernetes; .*example.com/hold"):  # fmt: skip
        phase.run("rollout", AuditFolder(tmp_path / ".ferry" / "runs" / "run-1"), Reporter())
    # Once what held it lets go, the namespace goes and the rollout (retried) makes it again.
    control_plane.core().patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})
    monkeypatch.setattr(apply, "TERMINATING_WAIT_S", 60.0)
    _, gate = _run(phase, tmp_path, "run-2")
    assert gate["manifests.rollout"].status == Status.PASS
    assert not control_plane.get("v1", "Namespace", ns)["metadata"].get("deletionTimestamp")
