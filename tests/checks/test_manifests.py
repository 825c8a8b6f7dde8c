"""The manifests gate's checks: strict schemas with every error listed, the profile's policy, warnings counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.kube_schema import SchemaNotFoundError, schema_errors
from checks.manifests import check_manifests_policy, check_manifests_schema, check_manifests_warnings
from ferry.manifests.model import Rendering
from ferry.manifests.rollout import references
from ferry.manifests.rules import transform
from ferry.manifests.source import load_sources
from ferry.results import Status
from tests.manifests.examples import EXAMPLES, META, example_rules

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  replicas: "two"
  selector:
    matchLabels: {app: trainer}
  template:
    metadata:
      labels: {app: trainer}
    spec:
      contaners:
      - name: main
        image: registry.meta.example/ai-training/trainer:1
      initContainers:
      - image: registry.meta.example/ai-training/init:1
"""


def _render(tmp_path: Path, text: str) -> Rendering:
    (tmp_path / "in.yaml").write_text(text, encoding="utf-8")
    return transform(load_sources([tmp_path / "in.yaml"], tmp_path), example_rules())


def test_every_schema_error_is_listed_not_only_the_first() -> None:
    import yaml

    errors = schema_errors(yaml.safe_load(DEPLOYMENT), "1.30")
    assert errors == [
        "spec.replicas: 'two' is not of type 'integer', 'null'",
        "spec.template.spec: 'containers' is a required property",
        "spec.template.spec: Additional properties are not allowed ('contaners' was unexpected)",
        "spec.template.spec.initContainers.0: 'name' is a required property",
    ]
    assert schema_errors({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}, "1.30") == []
    with pytest.raises(SchemaNotFoundError):
        schema_errors({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}, "1.30")


def test_schema_check_fails_with_each_error_and_warns_for_custom_resources(tmp_path: Path) -> None:
    result = check_manifests_schema(_render(tmp_path, DEPLOYMENT), "1.30", example_rules())
    assert result.status == Status.FAIL and result.measured["errors"] == 4
    assert result.evidence[0] == "in.yaml#0 Deployment/trainer: spec.replicas: 'two' is not of type 'integer', 'null'"

    job = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llm}
spec:
  pytorchReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: w
            image: registry.meta.example/ai-training/t:1
            resourcs: {}
"""
    result = check_manifests_schema(_render(tmp_path, job), "1.30", example_rules())
    assert result.status == Status.FAIL
    assert result.evidence == [
        "in.yaml#0 PyTorchJob/llm: spec.pytorchReplicaSpecs.Worker.template.spec.containers.0: Additional "
        "properties are not allowed ('resourcs' was unexpected)",
        "in.yaml#0 PyTorchJob/llm: no schema for kubeflow.org/v1 PyTorchJob in Kubernetes 1.30.0: its 1 pod "
        "template(s) validated as PodTemplateSpec",
    ]
    unknown = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: m}\n"
    result = check_manifests_schema(_render(tmp_path, unknown), "1.30", example_rules())
    assert result.status == Status.WARN and "not validated" in result.evidence[0]
    assert check_manifests_schema(_render(tmp_path, unknown), "1.99", example_rules()).status == Status.FAIL


SECRETS = """\
apiVersion: v1
kind: Secret
metadata: {name: db}
data:
  pin: 123456
  tls.key: !!binary |
    c3VwZXJzZWNyZXRiaW5hcnlrZXk=
stringData:
  port: 5432
  nested: {password: hunter2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: blobs}
binaryData:
  blob: !!binary AAECAwQ=
"""


def test_schema_errors_of_a_secret_never_show_its_values(tmp_path: Path) -> None:
    result = check_manifests_schema(_render(tmp_path, SECRETS), "1.30", example_rules())
    assert result.evidence == [
        "in.yaml#0 Secret/db: data.pin: the value is not of type 'string', 'null'",
        "in.yaml#0 Secret/db: stringData.nested: the value is not of type 'string', 'null'",
        "in.yaml#0 Secret/db: stringData.port: the value is not of type 'string', 'null'",
    ]
    # `!!binary` is the base64 text it was written as: valid data and binaryData, never its decoded bytes.
    assert not any("supersecret" in e or "tls.key" in e or "blob" in e for e in result.evidence)


def test_the_examples_are_valid_kubernetes_1_30() -> None:
    rendering = transform(load_sources([EXAMPLES], EXAMPLES), example_rules())
    result = check_manifests_schema(rendering, "1.30", example_rules())
    # Only the custom resources lack a schema; JobSet's and PyTorchJob's pod templates are validated.
    assert result.status == Status.WARN, result.evidence
    assert result.measured["errors"] == 0 and result.measured["without_schema"] == 4


def test_policy_of_the_profile(tmp_path: Path) -> None:
    rendering = transform(load_sources([EXAMPLES], EXAMPLES), example_rules())
    result = check_manifests_policy(rendering, example_rules())
    # The examples keep one :latest image (the preprocess Job) and unpinned moved images (not in the digest map).
    assert result.status == Status.FAIL
    assert any(e.endswith(f"{META}preprocess:latest is :latest (name a tag or a digest)") for e in result.evidence)
    assert not any("still on the source registry" in e or "without annotation" in e for e in result.evidence)
    assert result.measured["gpu_workloads"] == 10

    broken = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: a
    image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/x:1
    resources: {limits: {nvidia.com/gpu: 1}}
  - name: b
    image: python
  - name: c
    image:
"""
    rendering = _render(tmp_path, broken)
    rendering.documents[0].data["spec"]["containers"][0]["image"] = (
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/x:1"
    )
    del rendering.documents[0].data["metadata"]["annotations"]["compute.meta.com/interconnect"]
    evidence = check_manifests_policy(rendering, example_rules()).evidence
    assert evidence == [
        "in.yaml#0 Pod/p: metadata: GPU workload without annotation compute.meta.com/interconnect: roce-v2",
        "in.yaml#0 Pod/p: spec.containers[1].image: python is :latest (name a tag or a digest)",
        "in.yaml#0 Pod/p: spec.containers[2].image: no image",
        "in.yaml#0 Pod/p: spec.containers[0].image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/x:1 is still "
        "on the source registry",
    ]
    # Kinds no template path covers keep their images where they were: the policy finds every `image` field.
    serving = """\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: llama3, namespace: ml-serve}
spec:
  predictor:
    model:
      modelFormat: {name: huggingface}
      image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/kserve-hf:v0.13
---
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: train-}
spec:
  templates:
  - name: prep
    container: {image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/prep:3.1}
  - name: other
    container: {image: 210987654321.dkr.ecr.us-east-1.amazonaws.com/ml/prep:3.1}
"""
    assert check_manifests_policy(_render(tmp_path, serving), example_rules()).evidence == [
        "in.yaml#0 InferenceService/ml-serve/llama3: spec.predictor.model.image: "
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/kserve-hf:v0.13 is still on the source registry",
        "in.yaml#1 Workflow/?: spec.templates[0].container.image: "
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/prep:3.1 is still on the source registry",
    ]


def test_warnings_are_counted_against_the_limit() -> None:
    rendering = transform(load_sources([EXAMPLES], EXAMPLES), example_rules())
    count = len(rendering.findings)
    assert check_manifests_warnings(rendering, None).status == Status.WARN
    assert check_manifests_warnings(rendering, count).status == Status.WARN
    assert check_manifests_warnings(rendering, count - 1).status == Status.FAIL
    assert check_manifests_warnings(Rendering([]), 0).status == Status.PASS


POD = "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ml-train, {meta}}}\nspec: {{{spec}}}\n"


@pytest.mark.parametrize(
    ("meta", "spec", "error"),
    [
        ("finalizers: 5", "containers: [{name: c, image: 'x:1'}]", "metadata.finalizers: 5 is not of type"),
        ("annotations: x", "containers: [{name: c, image: 'x:1'}]", "metadata.annotations: 'x' is not of type"),
        ("x: 1", "containers: 5", "spec.containers: 5 is not of type 'array'"),
        ("x: 1", "nodeSelector: 5, containers: []", "spec.nodeSelector: 5 is not of type"),
        ("x: 1", "imagePullSecrets: [{a: b}], containers: []", "spec.imagePullSecrets.0: Additional properties"),
        ("x: 1", "volumes: [{name: v, csi: x}], containers: []", "spec.volumes.0.csi: 'x' is not of type"),
        ("x: 1", "containers: [{name: c, image: 'x:1', env: x}]", "spec.containers.0.env: 'x' is not of type"),
        ("x: 1", "containers: [{name: c, image: 'x:1', resources: {limits: 5}}]", "resources.limits: 5 is not of"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_schema_error_not_a_crash(
    meta: str, spec: str, error: str, tmp_path: Path
) -> None:
    rendering = _render(tmp_path, POD.format(meta=meta, spec=spec))
    # Before, the transforms, the policy or the references of the rollout raised on these (an internal error).
    check_manifests_policy(rendering, example_rules())
    references(rendering.documents[0].plain(), example_rules())
    rendering.files[0].text()
    result = check_manifests_schema(rendering, "1.30", example_rules())
    assert result.status == Status.FAIL and any(error in e for e in result.evidence), result.evidence


def test_namespaces_and_storage_classes_of_the_wrong_type_are_left_to_the_schema(tmp_path: Path) -> None:
    pvc = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c, namespace: [ml-train]}\n"
    rendering = _render(tmp_path, pvc + "spec: {storageClassName: [gp3]}\n")
    errors = check_manifests_schema(rendering, "1.30", example_rules()).evidence
    assert any("metadata.namespace: ['ml-train'] is not of type" in e for e in errors)
    assert any("spec.storageClassName: ['gp3'] is not of type" in e for e in errors)
