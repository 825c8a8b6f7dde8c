"""The official client's errors as ferry's, and the kubeconfig lookup (ferry/kube.py, every phase's cluster adapter)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from ferry.errors import NotFoundError, PermanentError, TransientError
from ferry.kube import kubeconfig_path, translated


@pytest.mark.parametrize(
    ("status", "error"),
    [(404, NotFoundError), (403, PermanentError), (422, PermanentError), (429, TransientError), (503, TransientError)],
)
def test_api_answers_become_ferry_errors_with_the_apis_message(status: int, error: type) -> None:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": "what the API server said"})
    with pytest.raises(error) as raised, translated("apply Job x"):
        raise exc
    assert str(raised.value) == f"apply Job x: the API answered {status} Reason: what the API server said"
    assert raised.value.code == str(status)


def test_kubeconfig_is_the_plans_else_the_first_of_kubeconfig(tmp_path, monkeypatch) -> None:
    assert kubeconfig_path("kube/config", tmp_path) == tmp_path / "kube" / "config"
    monkeypatch.setenv("KUBECONFIG", "/a/one:/b/two")
    assert str(kubeconfig_path(None, tmp_path)) == "/a/one"


# Fields as the API server names them in a conflict, and what is left of the object without each.
OBJ = {
    "metadata": {"labels": {"app.kubernetes.io/name": "web", "app": "web"}},
    "spec": {
        "replicas": 3,
        "template": {
            "spec": {
                "containers": [
                    {"name": "web", "image": "w:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "side]car", "image": "s:1"},
                ],
                "finalizers": ["a", "b"],
            }
        },
    },
}
WITHOUT = [
    (".spec.replicas", ("spec", "replicas")),
    (".metadata.labels.app.kubernetes.io/name", ("metadata", "labels", "app.kubernetes.io/name")),
    ('.spec.template.spec.containers[name="web"].image', ("spec", "template", "spec", "containers", 0, "image")),
    ('.spec.template.spec.containers[name="side]car"]', ("spec", "template", "spec", "containers", 1)),
    (
        '.spec.template.spec.containers[name="web"].ports[containerPort=80,protocol="TCP"]',
        ("spec", "template", "spec", "containers", 0, "ports", 0),
    ),
    ('.spec.template.spec.finalizers[="b"]', ("spec", "template", "spec", "finalizers", 1)),
]


@pytest.mark.parametrize(("field", "gone"), WITHOUT, ids=[w[0] for w in WITHOUT])
def test_a_conflicting_field_is_taken_out_and_nothing_else(field: str, gone: tuple) -> None:
    import copy

    from ferry.kube import without_fields

    expected = copy.deepcopy(OBJ)
    node = expected
    for step in gone[:-1]:
        node = node[step]
    del node[gone[-1]]
    assert without_fields(OBJ, [field]) == expected
    assert OBJ["spec"]["replicas"] == 3, "the object itself is left as it was"


def test_a_field_the_object_does_not_have_is_left_alone() -> None:
    from ferry.kube import without_fields

    assert without_fields(OBJ, [".spec.paused", '.spec.template.spec.containers[name="db"].image']) == OBJ


def test_a_delete_held_by_a_finalizer_names_it(control_plane, namespace, tmp_path) -> None:
    from ferry.kube import ClusterApi

    held = {"name": "held", "namespace": namespace, "finalizers": ["example.com/hold"]}
    control_plane.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": held})
    cluster = ClusterApi(control_plane.api_client(), tmp_path / "discovery.json")
    with pytest.raises(TransientError, match="delete ConfigMap held: still there after 2 s, being deleted "
                                             r"\(held by finalizers example.com/hold\)"):  # fmt: skip
        cluster.delete("v1", "ConfigMap", "held", namespace, wait_s=2)
    control_plane.core().patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    control_plane.wait("the ConfigMap gone", lambda: control_plane.get("v1", "ConfigMap", "held", namespace) is None)
    assert not cluster.delete("v1", "ConfigMap", "held", namespace), "already gone"
