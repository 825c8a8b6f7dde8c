"""Manifests as clusters export them: a `kubectl get -o yaml` List of a namespace, unwrapped item by item, what the
source cluster made by itself left out (each with why), what the server wrote stripped.

The dump below has the shape `kubectl get all,cm,sa,secrets,endpoints,endpointslices,events -n ml -o yaml` gives
(its server fields abridged); tests/phases/test_manifests_cluster.py takes a real one from the test control plane.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ferry.manifests.model import ExportRule, Rules
from ferry.manifests.rules import transform
from ferry.manifests.source import load_sources

_META = (
    "resourceVersion: '4711'\n    uid: 0b6e2a8c-1f3c-4d0e-9a57-1e2f3a4b5c6d\n"
    "    creationTimestamp: '2026-03-01T10:00:00Z'"
)
DUMP = f"""\
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
    namespace: ml
    generation: 3
    {_META}
    annotations:
      deployment.kubernetes.io/revision: "3"
      kubectl.kubernetes.io/last-applied-configuration: |
        {{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"ml"}}}}
    managedFields:
    - manager: kubectl-client-side-apply
      operation: Update
  spec:
    replicas: 2
    selector: {{matchLabels: {{app: web}}}}
    template:
      metadata: {{labels: {{app: web}}}}
      spec:
        containers:
        - name: web
          image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/web:1.4
  status: {{replicas: 2, readyReplicas: 2, observedGeneration: 3}}
- apiVersion: apps/v1
  kind: ReplicaSet
  metadata:
    name: web-7d4b9
    namespace: ml
    {_META}
    ownerReferences:
    - {{apiVersion: apps/v1, kind: Deployment, name: web, uid: 1a, controller: true, blockOwnerDeletion: true}}
  spec:
    replicas: 2
    selector: {{matchLabels: {{app: web, pod-template-hash: 7d4b9}}}}
    template:
      metadata: {{labels: {{app: web, pod-template-hash: 7d4b9}}}}
      spec:
        containers:
        - {{name: web, image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/web:1.4}}
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-7d4b9-x2k4q
    namespace: ml
    {_META}
    ownerReferences:
    - {{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d4b9, uid: 2b, controller: true}}
  spec:
    nodeName: ip-10-0-1-17.ec2.internal
    containers:
    - {{name: web, image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/web:1.4}}
  status: {{phase: Running}}
- apiVersion: v1
  kind: Pod
  metadata: {{name: debug-shell, namespace: ml}}
  spec:
    nodeName: ip-10-0-1-17.ec2.internal
    containers:
    - {{name: sh, image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/tools:1}}
  status: {{phase: Running}}
- apiVersion: batch/v1
  kind: CronJob
  metadata: {{name: nightly-eval, namespace: ml}}
  spec:
    schedule: "0 3 * * *"
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - {{name: eval, image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/eval:7}}
- apiVersion: batch/v1
  kind: Job
  metadata:
    name: nightly-eval-29511360
    namespace: ml
    ownerReferences:
    - {{apiVersion: batch/v1, kind: CronJob, name: nightly-eval, uid: 3c, controller: true}}
  spec:
    template:
      spec:
        restartPolicy: Never
        containers:
        - {{name: eval, image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/eval:7}}
- apiVersion: v1
  kind: Service
  metadata: {{name: web, namespace: ml}}
  spec:
    selector: {{app: web}}
    clusterIP: 172.20.14.3
    clusterIPs: [172.20.14.3]
    ports: [{{port: 80}}]
  status: {{loadBalancer: {{}}}}
- apiVersion: v1
  kind: Endpoints
  metadata:
    name: web
    namespace: ml
    labels: {{endpoints.kubernetes.io/managed-by: endpoint-controller}}
  subsets: [{{addresses: [{{ip: 10.0.1.33}}], ports: [{{port: 80}}]}}]
- apiVersion: v1
  kind: Endpoints
  metadata:
    name: web-legacy
    namespace: ml
    annotations: {{endpoints.kubernetes.io/last-change-trigger-time: "2026-03-01T10:00:00Z"}}
  subsets: []
- apiVersion: v1
  kind: Endpoints
  metadata: {{name: external-db, namespace: ml}}
  subsets: [{{addresses: [{{ip: 10.9.0.5}}], ports: [{{port: 5432}}]}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: web-abcde
    namespace: ml
    labels:
      kubernetes.io/service-name: web
      endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
  addressType: IPv4
  endpoints: [{{addresses: [10.0.1.33]}}]
- apiVersion: v1
  kind: Event
  metadata: {{name: web-7d4b9-x2k4q.17f, namespace: ml}}
  involvedObject: {{kind: Pod, name: web-7d4b9-x2k4q}}
  reason: Scheduled
- apiVersion: events.k8s.io/v1
  kind: Event
  metadata: {{name: web.17e, namespace: ml}}
  reason: ScalingReplicaSet
  eventTime: null
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: kube-root-ca.crt, namespace: ml}}
  data: {{ca.crt: "-----BEGIN CERTIFICATE-----"}}
- apiVersion: v1
  kind: ConfigMap
  metadata: {{name: web-config, namespace: ml}}
  data: {{WORKERS: "4"}}
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: run-42-params
    namespace: ml
    ownerReferences:
    - {{apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: run-42, uid: 4d}}
  data: {{LR: "0.1"}}
- apiVersion: v1
  kind: ServiceAccount
  metadata: {{name: default, namespace: ml}}
- apiVersion: v1
  kind: ServiceAccount
  metadata: {{name: default, namespace: ml-pull}}
  imagePullSecrets: [{{name: ecr-pull}}]
- apiVersion: v1
  kind: ServiceAccount
  metadata: {{name: trainer, namespace: ml}}
- apiVersion: v1
  kind: Secret
  metadata:
    name: trainer-token-8hx2z
    namespace: ml
    annotations: {{kubernetes.io/service-account.name: trainer}}
  type: kubernetes.io/service-account-token
  data: {{token: ZXlK, ca.crt: LS0t, namespace: bWw=}}
- apiVersion: v1
  kind: Secret
  metadata:
    name: ci-token
    namespace: ml
    annotations: {{kubernetes.io/service-account.name: trainer}}
  type: kubernetes.io/service-account-token
- apiVersion: v1
  kind: Secret
  metadata:
    name: web-tls
    namespace: ml
    annotations: {{cert-manager.io/certificate-name: web}}
  type: kubernetes.io/tls
  data: {{tls.crt: LS0t, tls.key: LS0t}}
"""

# Every item of the dump: left out (with why) or rendered.
LEFT_OUT = {
    "ReplicaSet/ml/web-7d4b9": "owned by Deployment/web, whose controller makes it on the target",
    "Pod/ml/web-7d4b9-x2k4q": "owned by ReplicaSet/web-7d4b9, whose controller makes it on the target",
    "Job/ml/nightly-eval-29511360": "owned by CronJob/nightly-eval, whose controller makes it on the target",
    "Endpoints/ml/web": "a Service's endpoints, which the target's endpoints controller writes",
    "Endpoints/ml/web-legacy": "a Service's endpoints, which the target's endpoints controller writes",
    "EndpointSlice/ml/web-abcde": "a Service's endpoint slice, which the target's endpoint slice controller writes",
    "Event/ml/web-7d4b9-x2k4q.17f": "an event, the source cluster's record of what happened there",
    "Event/ml/web.17e": "an event, the source cluster's record of what happened there",
    "ConfigMap/ml/kube-root-ca.crt": "the cluster's CA bundle, which every namespace gets from its own cluster",
    "ServiceAccount/ml/default": "made in every namespace by the cluster itself",
    "Secret/ml/trainer-token-8hx2z": (
        "a token the source cluster issued to a service account; the target issues its own"
    ),
}
RENDERED = [
    "Deployment/ml/web",
    "Pod/ml/debug-shell",
    "CronJob/ml/nightly-eval",
    "Service/ml/web",
    "Endpoints/ml/external-db",  # a selector-less Service's endpoints, written by a person
    "ConfigMap/ml/web-config",
    "ConfigMap/ml/run-42-params",
    "ServiceAccount/ml-pull/default",  # pull secrets a person set
    "ServiceAccount/ml/trainer",
    "Secret/ml/ci-token",  # a token Secret a person asked for: the target fills it in
    "Secret/ml/web-tls",
]


@pytest.fixture
def rendered(tmp_path: Path):
    (tmp_path / "ml.yaml").write_text(DUMP, encoding="utf-8")
    rules = Rules(plan="p", images={"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml": "registry.meta.example/ml"})
    rendering = transform(load_sources([tmp_path / "ml.yaml"], tmp_path), rules)
    return rendering, tmp_path


def test_every_item_is_left_out_with_why_or_rendered(rendered) -> None:
    rendering, _ = rendered
    assert {doc.label: doc.left_out for doc in rendering.left_out} == LEFT_OUT
    assert [doc.label for doc in rendering.documents] == RENDERED
    assert all(doc.applicable for doc in rendering.documents)


def test_the_items_are_transformed_and_stripped_of_what_the_server_wrote(rendered) -> None:
    rendering, _ = rendered
    objects = {doc.label: doc.plain() for doc in rendering.documents}
    web = objects["Deployment/ml/web"]
    assert web["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.meta.example/ml/web:1.4"
    assert set(web["metadata"]) == {"name", "namespace", "labels"}, "server metadata and annotations go"
    assert "status" not in web
    assert "nodeName" not in objects["Pod/ml/debug-shell"]["spec"]
    assert "clusterIP" not in objects["Service/ml/web"]["spec"]
    image = objects["CronJob/ml/nightly-eval"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == "registry.meta.example/ml/eval:7"
    for obj in objects.values():
        assert obj["metadata"]["labels"]["ferry.io/plan"] == "p"


def test_an_owner_named_by_the_source_clusters_uid_is_dropped_with_a_finding(rendered) -> None:
    rendering, _ = rendered
    params = next(d.plain() for d in rendering.documents if d.label == "ConfigMap/ml/run-42-params")
    assert "ownerReferences" not in params["metadata"]
    assert [str(f) for f in rendering.findings if "ownerReferences" in f.path] == [
        "ml.yaml#0 ConfigMap/ml/run-42-params: metadata.ownerReferences: dropped the owner(s) PyTorchJob/run-42: "
        "they name the source cluster's objects by uid, and the target's garbage collector deletes what names an "
        "owner it does not have"
    ]


def test_the_rendered_file_is_the_list_without_what_was_left_out(rendered) -> None:
    rendering, tmp_path = rendered
    [written] = rendering.write(tmp_path / "out")
    [output] = list(yaml.safe_load_all(written.read_text(encoding="utf-8")))
    assert output["kind"] == "List"
    items = [f"{i['kind']}/{i['metadata'].get('namespace')}/{i['metadata']['name']}" for i in output["items"]]
    assert items == RENDERED
    assert "registry.meta.example/ml/web:1.4" in written.read_text(encoding="utf-8")
    report = rendering.report("meta", [])
    assert "## Left out: made by the source cluster (11)" in report
    assert "- ml.yaml#0.items[1] ReplicaSet/ml/web-7d4b9 (owned by Deployment/web, whose controller" in report


def test_a_plan_adds_rules_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "ml.yaml").write_text(DUMP, encoding="utf-8")
    mine = ExportRule(
        why="issued by cert-manager, which issues it again on the target",
        kinds=("Secret",),
        annotations={"cert-manager.io/certificate-name": "*"},
    )
    rules = Rules(plan="p")
    rules = Rules(plan="p", export_rules=(*rules.export_rules, mine))
    rendering = transform(load_sources([tmp_path / "ml.yaml"], tmp_path), rules)
    assert {d.label: d.left_out for d in rendering.left_out}["Secret/ml/web-tls"] == mine.why
    assert "Secret/ml/web-tls" not in [d.label for d in rendering.documents]


def test_a_typed_list_from_the_api_is_unwrapped_too(tmp_path: Path) -> None:
    (tmp_path / "deployments.yaml").write_text(
        "apiVersion: apps/v1\nkind: DeploymentList\nmetadata: {resourceVersion: '9'}\nitems:\n"
        "- metadata: {name: a, namespace: ml}\n  spec: {template: {spec: {containers: [{name: a, image: a:1}]}}}\n",
        encoding="utf-8",
    )
    rendering = transform(load_sources([tmp_path / "deployments.yaml"], tmp_path), Rules(plan="p"))
    # The API names no kind nor apiVersion in a typed List's items: they are the List's.
    assert [doc.label for doc in rendering.documents] == ["Deployment/ml/a"]
    assert rendering.documents[0].plain()["apiVersion"] == "apps/v1"
    assert rendering.findings == []
