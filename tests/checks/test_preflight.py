"""Preflight of the registry and cluster each side names: a real docker-registry, kubeconfig files."""

from __future__ import annotations

import http.server
import threading

from checks.preflight import check_cluster, check_registry, preflight
from ferry.plan import load_plan
from ferry.results import Status
from tests.support import free_port

PLAN = """\
name: preflight
source:
  storage: ./src
  registry: {source_registry}
target:
  storage: ./dst
  registry: {target_registry}
  cluster: {{context: meta-prod, namespace: ml-training, kubeconfig: kubeconfig.yaml}}
phases:
  data_sync: {{}}
"""
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: meta
  cluster: {{server: "{server}"}}
contexts:
- name: meta-prod
  context: {{cluster: meta, user: ops}}
users:
- name: ops
  user: {{token: not-a-real-token}}
"""


def write(tmp_path, source_registry: str, target_registry: str, server: str):
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "kubeconfig.yaml").write_text(KUBECONFIG.format(server=server))
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(source_registry=source_registry, target_registry=target_registry))
    return load_plan(plan)


def by_name(results) -> dict:
    return {r.name: r for r in results}


def test_registries_and_cluster_in_the_preflight(registry_server, tmp_path) -> None:
    silent = free_port()  # nothing listens there
    loaded = write(tmp_path, f"127.0.0.1:{registry_server.port}/ml", f"127.0.0.1:{silent}/ml", "https://10.0.0.1:6443")
    results = by_name(preflight(loaded))
    assert results["preflight.source_registry"].status == Status.PASS
    assert "answers the registry API v2 (HTTP 200)" in results["preflight.source_registry"].evidence[0]
    assert results["preflight.source_registry_private"].status == Status.PASS
    assert results["preflight.target_registry"].status == Status.FAIL
    assert f"127.0.0.1:{silent}/v2/" in results["preflight.target_registry"].evidence[0]
    cluster = results["preflight.target_cluster"]
    assert cluster.status == Status.PASS and cluster.measured["server"] == "https://10.0.0.1:6443"
    assert results["preflight.target_cluster_private"].status == Status.PASS


def test_a_web_server_that_is_not_a_registry_fails(tmp_path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (result, _) = check_registry("target", f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert result.status == Status.FAIL and "answered HTTP 404: not a registry API v2" in result.evidence[0]


def test_missing_context_fails_and_a_public_api_server_warns(tmp_path) -> None:
    loaded = write(tmp_path, "127.0.0.1:1/ml", "127.0.0.1:1/ml", "https://8.8.8.8:6443")
    cluster = loaded.plan.target.cluster
    found, private = check_cluster("target", cluster, loaded)
    assert found.status == Status.PASS
    assert private.status == Status.WARN and "resolves to public 8.8.8.8" in private.evidence[0]
    missing = check_cluster("target", cluster.model_copy(update={"context": "meta-staging"}), loaded)
    assert len(missing) == 1 and missing[0].status == Status.FAIL
    assert "has no context 'meta-staging' (it has: meta-prod)" in missing[0].evidence[0]
    unreadable = check_cluster("target", cluster.model_copy(update={"kubeconfig": "nope.yaml"}), loaded)
    assert unreadable[0].status == Status.FAIL and "cannot read a kubeconfig" in unreadable[0].evidence[0]
