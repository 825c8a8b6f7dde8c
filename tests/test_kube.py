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
