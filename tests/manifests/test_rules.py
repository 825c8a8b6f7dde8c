"""Manifest transforms over real-world manifests (examples/manifests): every path that changes, and nothing else.

Each case names a document of a source file and every path whose value the transforms must change; every
other path of the document must keep its value and type, and every comment its bytes (test_source.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ferry.manifests.model import Rules
from ferry.manifests.rules import rewrite_image, transform
from ferry.manifests.source import load_sources
from tests.manifests.examples import ECR, META, NS, PINNED


def flat(node: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a document by path (`a.b[0]["key.with/dots"]`), with its value."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            step = f'["{key}"]' if re.search(r"[./]", key) else (f".{key}" if path else key)
            out.update(flat(value, path + step))
        return out
    if isinstance(node, list) and node:
        return {k: v for i, item in enumerate(node) for k, v in flat(item, f"{path}[{i}]").items()}
    return {path: node}


RDMA = '["compute.meta.com/rdma-fabric"]'
ROCE = '["compute.meta.com/interconnect"]'


def gpu(template: str) -> dict[str, str]:
    """The profile's annotations on the pod template at template."""
    prefix = f"{template}.metadata.annotations" if template else "metadata.annotations"
    return {f"{prefix}{RDMA}": "high-throughput", f"{prefix}{ROCE}": "roce-v2"}


LABELS = {'metadata.labels["ferry.io/plan"]': "llm-train", 'metadata.labels["app.kubernetes.io/managed-by"]': "ferry"}
IN_NS = {"metadata.namespace": NS}
C0 = "spec.template.spec.containers[0].image"

# (file, document index): every path that changes, with its new value (labels added to every object).
CASES: dict[tuple[str, int], dict[str, Any]] = {
    ("k8s/namespace.yaml", 0): {"metadata.name": NS},
    ("k8s/training/deployment-sidecar.yaml", 0): {
        **IN_NS,
        C0: f"{META}trainer@{PINNED}",
        **gpu("spec.template"),
    },
    ("k8s/training/statefulset.yaml", 0): {
        **IN_NS,
        C0: f"{META}store@sha256:{'a' * 64}",
        "spec.volumeClaimTemplates[0].spec.storageClassName": "meta-flash",
    },
    ("k8s/training/daemonset.yaml", 0): IN_NS,
    ("k8s/training/job-init.yaml", 0): {
        **IN_NS,
        "spec.template.spec.initContainers[0].image": f"{META}fetcher:1.2",
        C0: f"{META}preprocess:latest",
    },
    ("k8s/training/cronjob.yaml", 0): {
        **IN_NS,
        "spec.jobTemplate.spec.template.spec.containers[0].image": f"{META}eval:0.9",
        **gpu("spec.jobTemplate.spec.template"),
    },
    ("k8s/training/pod.yaml", 0): {
        **IN_NS,
        "spec.containers[0].image": f"{META}trainer@{PINNED}",
        "spec.ephemeralContainers[0].image": f"{META}debug:1",
        **gpu(""),
    },
    ("k8s/training/replicaset.yaml", 0): {**IN_NS, C0: f"{META}inference:1.0", **gpu("spec.template")},
    ("k8s/training/pytorchjob.yaml", 0): {
        **IN_NS,
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image": f"{META}trainer@{PINNED}",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image": f"{META}trainer@{PINNED}",
        **gpu("spec.pytorchReplicaSpecs.Master.template"),
        **gpu("spec.pytorchReplicaSpecs.Worker.template"),
    },
    ("k8s/training/jobset.yaml", 0): {
        **IN_NS,
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image": f"{META}sweep:3",
        **gpu("spec.replicatedJobs[0].template.spec.template"),
    },
    ("k8s/cpu-flavour.yaml", 0): {**IN_NS, C0: f"{META}embedder:1.0"},  # nvidia.com/gpu: 0, no annotations
    ("k8s/eks-extras.yaml", 0): IN_NS,
    ("k8s/eks-extras.yaml", 1): IN_NS,
    ("k8s/eks-extras.yaml", 2): {},
    ("k8s/lookalikes.yaml", 0): IN_NS,
    ("k8s/pvc.yaml", 0): IN_NS,
    ("k8s/pvc.yaml", 1): {**IN_NS, "spec.storageClassName": "meta-block-ssd"},
    ("k8s/rbac.yaml", 0): IN_NS,
    ("k8s/rbac.yaml", 1): {**IN_NS, "subjects[0].namespace": NS},
    ("k8s/rbac.yaml", 2): {"subjects[0].namespace": NS},
    ("k8s/service.yaml", 0): IN_NS,
    ("k8s/config.yaml", 0): IN_NS,
    ("k8s/config.yaml", 1): IN_NS,
    ("k8s/ingress.yaml", 0): IN_NS,
    ("k8s/hpa.yaml", 0): IN_NS,
    ("k8s/unknown.yaml", 0): IN_NS,
    ("k8s/workflow.yaml", 0): IN_NS,
    ("k8s/existing-annotations.yaml", 0): {
        **IN_NS,
        "spec.template.spec.initContainers[0].image": f"{META}warmup:1",
        C0: f"{META}finetune:2.1",
        **gpu("spec.template"),
    },
    ("rendered/chart.yaml", 0): {},
    ("rendered/chart.yaml", 1): {C0: f"{META}inference:1.0", **gpu("spec.template")},
    ("rendered/chart.yaml", 2): {},
    # Helm output: sequences indented two ways, a blank line of spaces, `{}` on its own line, a template rendered
    # empty, `---` with a comment, a comment-only last document: all kept as written.
    ("rendered/vllm-helm.yaml", 0): IN_NS,
    ("rendered/vllm-helm.yaml", 2): {
        **IN_NS,
        C0: f"{META}vllm-openai:v0.6.3",
        **gpu("spec.template"),  # nvidia.com/gpu: "1" in requests only
    },
    ("rendered/kustomize.yml", 0): IN_NS,
    ("rendered/kustomize.yml", 1): {**IN_NS, C0: f"{META}eval@sha256:{'b' * 64}"},
}


# What the transforms cannot carry, by file#document: (path, words of the message).
FINDINGS = {
    ("k8s/training/daemonset.yaml#0", "spec.template.spec.nodeSelector.node.kubernetes.io/instance-type"),
    ("k8s/training/cronjob.yaml#0", "was 'tcp'; the target needs 'roce-v2'"),
    ("k8s/training/replicaset.yaml#0", "resource 'vpc.amazonaws.com/efa' is not mapped"),
    ("k8s/training/pytorchjob.yaml#0", "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources"),
    ("k8s/pvc.yaml#0", "storage class 'efs-sc' is not mapped"),
    ("k8s/rbac.yaml#0", "an IRSA role (AWS workload identity)"),
    ("k8s/eks-extras.yaml#0", "metadata.annotations.eks.amazonaws.com/role-arn: an IRSA role"),
    ("k8s/eks-extras.yaml#0", "metadata.annotations.eks.amazonaws.com/sts-regional-endpoints: an EKS setting"),
    ("k8s/eks-extras.yaml#1", "metadata.annotations.kubernetes.io/ingress.class: ingress class 'alb' of the source"),
    ("k8s/eks-extras.yaml#2", "spec.csi.driver: CSI driver 'fsx.csi.aws.com' of the source cloud"),
    ("k8s/service.yaml#0", "metadata.annotations.service.beta.kubernetes.io/aws-load-balancer-type"),
    ("k8s/service.yaml#0", "metadata.annotations.service.beta.kubernetes.io/aws-load-balancer-internal"),
    ("k8s/config.yaml#0", "data.MLFLOW_URL: names the old namespace 'ml-train'"),
    ("k8s/config.yaml#1", "stringData.DB_URL: names the old namespace 'ml-train'"),
    ("k8s/ingress.yaml#0", "ingress class 'alb' of the source cloud"),
    ("k8s/ingress.yaml#0", "metadata.annotations.alb.ingress.kubernetes.io/scheme"),
    ("k8s/unknown.yaml#0", "monitoring.coreos.com/v1 ServiceMonitor has no template path"),
    ("k8s/workflow.yaml#0", "metadata.name: generateName without a name: server-side apply needs a name"),
    ("k8s/workflow.yaml#0", "argoproj.io/v1alpha1 Workflow has no template path"),
    # What a covered kind would have had mapped or warned about, in a kind no rule covers.
    (
        "k8s/workflow.yaml#0",
        "spec.volumeClaimTemplates[0].spec.storageClassName: storage class 'gp3' in a kind no rule",
    ),
    ("k8s/workflow.yaml#0", "spec.templates[0].nodeSelector.node.kubernetes.io/instance-type: selects the source"),
    ("k8s/existing-annotations.yaml#0", "by karpenter.k8s.aws/instance-gpu-name"),
    ("k8s/existing-annotations.yaml#0", "pull secret 'ecr-pull' was made for the source registry"),
}


# What the source's controllers wrote into an example exported from its cluster: left out.
SERVER_WRITTEN = {
    ("k8s/training/deployment-sidecar.yaml", 0): {'metadata.annotations["deployment.kubernetes.io/revision"]'},
}
# Objects another manager claims (Helm's `managed-by: Helm`): ferry adds its plan label only; theirs stays as written,
# or `helm upgrade` on the target refuses the release's own objects ("invalid ownership metadata").
CLAIMED = {("rendered/chart.yaml", 0): "Helm", ("rendered/chart.yaml", 1): "Helm"}


def test_the_table_covers_every_document_of_the_examples(rendered: tuple[dict, Any]) -> None:
    before, rendering = rendered
    assert set(before) == set(CASES)
    assert len(CASES) >= 20
    kinds = {d.kind for d in rendering.documents}
    assert {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "PyTorchJob"} <= kinds


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}#{c[1]}")
def test_each_path_changes_as_the_rules_say_and_no_other(case: tuple[str, int], rendered: tuple[dict, Any]) -> None:
    before, rendering = rendered
    doc = next(d for d in rendering.documents if (str(d.file.relative), d.index) == case)
    old, new = flat(before[case]), flat(doc.plain())
    changed = {path: value for path, value in new.items() if path not in old or old[path] != value}
    # A map that gained its first key shows up as a leaf that disappeared: `{}` / absent becomes a subtree.
    removed = {path for path in old if path not in new and old[path] not in ({}, None)}
    labels = {k: v for k, v in LABELS.items() if "managed-by" not in k} if case in CLAIMED else LABELS
    assert changed == {**labels, **CASES[case]}
    assert removed == SERVER_WRITTEN.get(case, set())
    if case in CLAIMED:
        assert new['metadata.labels["app.kubernetes.io/managed-by"]'] == CLAIMED[case]
    # Types are kept: a string stays a string, a number a number.
    assert all(type(new[p]) is type(v) for p, v in old.items() if p in new and p not in changed)


def test_findings_name_file_document_and_path(rendered: tuple[dict, Any]) -> None:
    _, rendering = rendered
    lines = [str(f) for f in rendering.findings]
    for where, words in FINDINGS:
        assert any(line.startswith(where) and words in line for line in lines), (where, words, lines)
    # Nothing else is reported: one finding per entry above.
    assert len(lines) == len(FINDINGS)
    assert rendering.untransformed == [
        "k8s/unknown.yaml#0 ServiceMonitor/ml-train/trainer",
        "k8s/workflow.yaml#0 Workflow/ml-train/?",
    ]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (f"{ECR}trainer:1", f"{META}trainer:1"),
        (f"{ECR}trainer@sha256:{'d' * 64}", f"{META}trainer@sha256:{'d' * 64}"),
        (f"{ECR}team/nested/img", f"{META}team/nested/img"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/ml-other/x:1", None),
        ("999999999999.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:1", None),
        ("public.ecr.aws/ml/trainer:1", None),
        ("trainer:1", None),
    ],
)
def test_images_move_by_prefix_up_to_a_path_boundary(image: str, expected: str | None) -> None:
    assert rewrite_image(image, {ECR: META}) == expected
    # A registry named without the trailing slash (source.registry) owns the same references.
    assert rewrite_image(image, {ECR.rstrip("/"): META.rstrip("/")}) == expected


def test_a_bare_host_prefix_does_not_swallow_a_port() -> None:
    assert rewrite_image("registry:5000/x:1", {"registry": "target"}) is None
    assert rewrite_image("registry/x:1", {"registry": "target"}) == "target/x:1"


def test_a_value_merged_in_by_an_anchor_changes_where_the_anchor_defines_it(tmp_path: Path) -> None:
    text = f"""\
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - &base
    name: a
    image: {ECR}worker:1.0
  - <<: *base
    name: b
"""
    (tmp_path / "p.yaml").write_text(text, encoding="utf-8")
    rendering = transform(load_sources([tmp_path / "p.yaml"]), Rules(plan="p", images={ECR: META}))
    assert [c["image"] for c in rendering.documents[0].plain()["spec"]["containers"]] == [f"{META}worker:1.0"] * 2
    # The merge stays a merge: b gets no image of its own.
    assert rendering.files[0].text().endswith("  - <<: *base\n    name: b\n")


EXPORTED = """\
apiVersion: v1
kind: Service
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1","kind":"Service","metadata":{"name":"api","namespace":"ml-train"}}
  creationTimestamp: "2026-11-30T10:00:00Z"
  name: api
  namespace: ml-train
  resourceVersion: "48121"
  uid: 0b7a4c7e-8f1d-4c55-9d7e-3f7d2b1c9a10
spec:
  clusterIP: 10.100.12.7
  clusterIPs:
  - 10.100.12.7
  ports:
  - port: 80
    targetPort: 8080
  selector:
    app: api
status:
  loadBalancer: {}
---
apiVersion: v1
kind: Service
metadata:
  name: workers
  namespace: ml-train
spec:
  clusterIP: None
  selector:
    app: workers
status:
  loadBalancer: {}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  annotations:
    pv.kubernetes.io/bind-completed: "yes"
    pv.kubernetes.io/bound-by-controller: "yes"
    volume.kubernetes.io/storage-provisioner: ebs.csi.aws.com
  managedFields:
  - manager: kube-controller-manager
    operation: Update
  name: data
  namespace: ml-train
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Gi}}
  volumeName: pvc-2f0c1d9e
status:
  phase: Bound
"""
WRITTEN = """\
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: static
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
  volumeName: shared-nfs
---
apiVersion: v1
kind: Service
metadata:
  name: fixed
spec:
  clusterIP: 10.0.0.10
  ports:
  - port: 53
"""


def test_what_the_server_wrote_into_an_export_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "export.yaml").write_text(EXPORTED, encoding="utf-8")
    rendering = transform(load_sources([tmp_path / "export.yaml"]), Rules(plan="p"))
    api, workers, claim = (d.plain() for d in rendering.documents)
    assert api["metadata"] == {"name": "api", "namespace": "ml-train", "labels": api["metadata"]["labels"]}
    assert "status" not in api and "clusterIP" not in api["spec"] and "clusterIPs" not in api["spec"]
    assert api["spec"]["ports"] == [{"port": 80, "targetPort": 8080}]
    assert workers["spec"]["clusterIP"] == "None", "a headless Service stays headless"
    assert "volumeName" not in claim["spec"] and "annotations" not in claim["metadata"]
    assert "managedFields" not in claim["metadata"] and "status" not in claim
    assert rendering.findings == [], "an export's server fields are not the user's to fix"


def test_a_manifest_a_person_wrote_keeps_its_pinned_volume_and_cluster_ip(tmp_path: Path) -> None:
    (tmp_path / "written.yaml").write_text(WRITTEN, encoding="utf-8")
    rendering = transform(load_sources([tmp_path / "written.yaml"]), Rules(plan="p"))
    claim, service = (d.plain() for d in rendering.documents)
    assert claim["spec"]["volumeName"] == "shared-nfs"
    assert service["spec"]["clusterIP"] == "10.0.0.10"


def test_template_paths_add_to_the_built_ins(tmp_path: Path) -> None:
    rules = Rules(plan="p", template_paths={"Deployment": ("spec.extra.template",), "x.io/Thing": ("spec.t",)})
    assert rules.paths_for("apps/v1", "Deployment") == ("spec.template", "spec.extra.template")
    assert rules.paths_for("x.io/v1", "Thing") == ("spec.t",)
    assert rules.paths_for("x.io/v1", "Deployment") is None
    assert rules.paths_for("v1", "ConfigMap") is None
