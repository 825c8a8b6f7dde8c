"""The Kubernetes API emulator (tests/kube_emulator.py) through the official client, as ferry's phases use it.

No real API server can run on these machines: these tests show the emulator answers as one does for what the
phases need (create, list by label, replace, server-side apply, patches, delete, discovery), not that a real
cluster would schedule anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, dynamic
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import BadRequestError

from tests.kube_emulator import KubeEmulator, matches_labels


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emu:
        yield emu


def _deployment(name: str, image: str = "trainer:1", labels: dict | None = None) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }


def test_namespaces_and_objects_through_the_typed_client(emulator: KubeEmulator) -> None:
    api = client.ApiClient(client.Configuration(host=emulator.url))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    with pytest.raises(ApiException) as missing:
        apps.create_namespaced_deployment("team", _deployment("early"))
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'namespaces "team" not found'

    core.create_namespace({"metadata": {"name": "team"}})
    assert "team" in [n.metadata.name for n in core.list_namespace().items]
    created = apps.create_namespaced_deployment("team", _deployment("a", labels={"app": "a", "tier": "gpu"}))
    apps.create_namespaced_deployment("team", _deployment("b", labels={"app": "b"}))
    assert created.metadata.namespace == "team" and created.metadata.generation == 1
    with pytest.raises(ApiException) as exists:
        apps.create_namespaced_deployment("team", _deployment("a"))
    assert exists.value.status == 409

    assert [d.metadata.name for d in apps.list_namespaced_deployment("team", label_selector="tier=gpu").items] == ["a"]
    assert [d.metadata.name for d in apps.list_deployment_for_all_namespaces(label_selector="app in (a,b)").items] == [
        "a",
        "b",
    ]
    assert [d.metadata.name for d in apps.list_namespaced_deployment("team", label_selector="!tier").items] == ["b"]

    # PUT: a stale resourceVersion is a conflict; the current one replaces the object and bumps generation.
    current = apps.read_namespaced_deployment("a", "team")
    current.spec.replicas = 3
    replaced = apps.replace_namespaced_deployment("a", "team", current)
    assert replaced.spec.replicas == 3 and replaced.metadata.generation == 2
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_deployment("a", "team", current)
    assert stale.value.status == 409

    # The typed client's patch is a strategic merge: containers merge by name.
    apps.patch_namespaced_deployment(
        "a", "team", {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "trainer:2"}]}}}}
    )
    assert emulator.get("apps/v1", "Deployment", "a", "team")["spec"]["template"]["spec"]["containers"] == [
        {"name": "main", "image": "trainer:2"}
    ]

    # A list is a JSON patch.
    apps.patch_namespaced_deployment("a", "team", [{"op": "replace", "path": "/spec/replicas", "value": 5}])
    assert apps.read_namespaced_deployment("a", "team").spec.replicas == 5

    apps.delete_namespaced_deployment("b", "team")
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_deployment("b", "team")
    assert gone.value.status == 404

    core.delete_namespace("team")
    assert emulator.objects("Deployment") == []


def test_server_side_apply_creates_updates_and_prunes_what_its_manager_dropped(
    emulator: KubeEmulator, tmp_path: Path
) -> None:
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", context="emu")
    api = config.new_client_from_config(str(kubeconfig), context="emu")
    dyn = dynamic.DynamicClient(api)
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = _deployment("trainer")
    body["metadata"]["annotations"] = {"owner": "ml", "old": "yes"}

    created = deployments.server_side_apply(body=body, namespace="default", field_manager="ferry")
    assert created.metadata.name == "trainer"
    assert [(m.manager, m.operation) for m in created.metadata.managedFields] == [("ferry", "Apply")]

    # Another writer's field survives ferry's next apply; the annotation ferry no longer applies goes.
    deployments.patch(body={"metadata": {"name": "trainer", "labels": {"team": "x"}}}, namespace="default")
    del body["metadata"]["annotations"]["old"]
    body["spec"]["replicas"] = 4
    applied = deployments.server_side_apply(body=body, namespace="default", field_manager="ferry").to_dict()
    assert applied["metadata"]["annotations"] == {"owner": "ml"}
    assert applied["metadata"]["labels"] == {"app": "trainer", "team": "x"}
    assert applied["spec"]["replicas"] == 4

    with pytest.raises(BadRequestError) as anonymous:
        deployments.server_side_apply(body=_deployment("x"), namespace="default")
    assert "requires fieldManager" in anonymous.value.summary()


def test_rbac_batch_autoscaling_and_namespaces_by_apply(emulator: KubeEmulator) -> None:
    dyn = dynamic.DynamicClient(emulator.api_client())
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
    namespaces.server_side_apply(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, field_manager="ferry"
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "alice", "namespace": "ml", "labels": {"ferry.io/plan": "p"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }
    dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding").server_side_apply(
        body=binding, field_manager="ferry"
    )
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"},
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }
    autoscaling = client.AutoscalingV2Api(emulator.api_client())
    autoscaling.create_namespaced_horizontal_pod_autoscaler("ml", hpa)
    assert autoscaling.read_namespaced_horizontal_pod_autoscaler("trainer", "ml").spec.max_replicas == 4
    # autoscaling/v1 serves the same object (no conversion: the emulator does not translate fields).
    assert client.AutoscalingV1Api(emulator.api_client()).list_namespaced_horizontal_pod_autoscaler("ml").items

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "t:1"}]}}},
    }
    batch = client.BatchV1Api(emulator.api_client())
    batch.create_namespaced_job("ml", job)
    # As on a real server, a Job's pod template cannot change: it must be replaced.
    with pytest.raises(ApiException) as immutable:
        batch.patch_namespaced_job("train", "ml", {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}})
    assert immutable.value.status == 422 and "immutable" in immutable.value.body
    listed = dyn.resources.get(api_version="rbac.authorization.k8s.io/v1", kind="RoleBinding").get(
        namespace="ml", label_selector="ferry.io/plan=p"
    )
    assert [i.metadata.name for i in listed.items] == ["alice"]


def test_custom_resources_by_crd_and_merge_patch(emulator: KubeEmulator) -> None:
    api = emulator.api_client()
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "pytorchjobs.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org",
            "scope": "Namespaced",
            "names": {"plural": "pytorchjobs", "kind": "PyTorchJob", "singular": "pytorchjob"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llm"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", job)
    # The client's default for custom objects is a JSON merge patch.
    custom.patch_namespaced_custom_object(
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        "llm",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}},
    )
    stored = custom.get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", "llm")
    assert stored["spec"]["pytorchReplicaSpecs"] == {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}
    # A real server answers 415 to a strategic merge of a custom resource; so does the emulator.
    with pytest.raises(ApiException) as unsupported:
        custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            "default",
            "pytorchjobs",
            "llm",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert unsupported.value.status == 415
    dyn = dynamic.DynamicClient(api)
    assert dyn.resources.get(api_version="kubeflow.org/v1", kind="PyTorchJob").namespaced


def test_tests_set_status_as_a_controller_would(emulator: KubeEmulator) -> None:
    apps = client.AppsV1Api(emulator.api_client())

    def rolled_out(deployment: dict) -> dict:
        want = deployment["spec"]["replicas"]
        return {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": want,
            "readyReplicas": want,
            "updatedReplicas": want,
            "availableReplicas": want,
        }

    emulator.on_write("Deployment", rolled_out)
    apps.create_namespaced_deployment("default", _deployment("ready"))
    assert apps.read_namespaced_deployment_status("ready", "default").status.ready_replicas == 1

    before = apps.read_namespaced_deployment("ready", "default").metadata.resource_version
    emulator.set_status("apps/v1", "Deployment", "ready", "default", {"replicas": 1, "unavailableReplicas": 1})
    after = apps.read_namespaced_deployment("ready", "default")
    assert after.status.ready_replicas is None and after.status.unavailable_replicas == 1
    assert int(after.metadata.resource_version) > int(before)
    # An admission webhook's refusal: creating and updating the kind are 403s.
    emulator.deny("Deployment", "no GPUs for you")
    with pytest.raises(ApiException) as denied:
        apps.create_namespaced_deployment("default", _deployment("refused"))
    assert denied.value.status == 403 and "no GPUs for you" in json.loads(denied.value.body)["message"]
    with pytest.raises(ApiException):
        apps.patch_namespaced_deployment("ready", "default", {"spec": {"replicas": 2}})
    # A write of the status passes (controllers are not admitted by the webhook here), and keeps the rest.
    apps.patch_namespaced_deployment_status("ready", "default", {"status": {"readyReplicas": 1}})
    assert apps.read_namespaced_deployment("ready", "default").status.ready_replicas == 1


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", True),
        ("app==a,tier=gpu", True),
        ("app!=a", False),
        ("tier", True),
        ("!tier", False),
        ("app in (a, b)", True),
        ("app notin (a,b)", False),
        ("missing=x", False),
        ("", True),
    ],
)
def test_label_selectors(selector: str, expected: bool) -> None:
    assert matches_labels({"app": "a", "tier": "gpu"}, selector) is expected
