"""Preflight: before any phase changes anything, every endpoint answers and the state dir is writable.

Platform guidance is to reach storage, registries and clusters over private endpoints (PrivateLink
or the like), never through the public internet: an endpoint that resolves to a public address is
a WARN.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import yaml

from connectors.base import Connector
from ferry.errors import FerryError
from ferry.kube import kubeconfig_path
from ferry.net import plain_http, registry_failure, split_host
from ferry.results import CheckResult, Status

if TYPE_CHECKING:
    from ferry.plan import AwsIamSource, Cluster, LoadedPlan


def check_storage_access(role: str, connector: Connector) -> CheckResult:
    """The credentials work and the bucket, container or directory exists (a local one written to may be created:
    the target's, data_sync's state_url)."""
    name = f"preflight.{role}_storage_access"
    try:
        if role != "source":
            connector.prepare_target(dry_run=True)
        else:
            connector.check()
    except FerryError as exc:
        return CheckResult(name, Status.FAIL, {"url": connector.url}, evidence=[str(exc)])
    return CheckResult(name, Status.PASS, {"url": connector.url}, evidence=["reached with the configured credentials"])


def check_private_endpoint(role: str, connector: Connector) -> CheckResult:
    """The storage endpoint is private; SKIP for storage that is not reached over the network."""
    name = f"preflight.{role}_endpoint_private"
    host = connector.network_host()
    if host is None:
        return CheckResult(name, Status.SKIP, {"url": connector.url}, evidence=["not a network endpoint"])
    return check_private_host(name, host)


def check_private_host(name: str, host: str) -> CheckResult:
    """Every address host resolves to is private (or loopback): no public internet hop."""
    try:
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
    except OSError as exc:
        return CheckResult(
            name, Status.FAIL, {"host": host}, evidence=[f"cannot resolve {host}: {exc.strerror or exc}"]
        )
    public = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_private]
    measured = {"host": host, "addresses": addresses}
    if public:
        return CheckResult(
            name,
            Status.WARN,
            measured,
            {"public_addresses": 0},
            [f"{host} resolves to public {', '.join(public)}: use a private (PrivateLink) endpoint"],
        )
    return CheckResult(name, Status.PASS, measured, {"public_addresses": 0})


def check_registry(role: str, registry: str, insecure: Iterable[str] = ()) -> list[CheckResult]:
    """The registry answers the Docker Registry HTTP API v2 (401 counts: it asks for credentials), privately.

    Spoken to as the images phase speaks to it (`ferry.net.plain_http`): plain HTTP for a loopback registry and
    one named in insecure (`phases.images.insecure_registries`), HTTPS otherwise.
    """
    name = f"preflight.{role}_registry"
    host = registry.split("/", 1)[0]
    hostname = split_host(host)
    url = f"{'http' if plain_http(host, insecure) else 'https'}://{host}/v2/"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        cause = registry_failure(exc, host)
        said = f"{cause} ({reason})" if cause else reason
        return [CheckResult(name, Status.FAIL, {"url": url}, evidence=[f"{url}: {said}"])]
    if status in (200, 401):
        result = CheckResult(
            name,
            Status.PASS,
            {"url": url, "http_status": status},
            evidence=[f"answers the registry API v2 (HTTP {status})"],
        )
    else:
        result = CheckResult(
            name,
            Status.FAIL,
            {"url": url, "http_status": status},
            evidence=[f"{url} answered HTTP {status}: not a registry API v2"],
        )
    return [result, check_private_host(f"preflight.{role}_registry_private", hostname)]


def check_cluster(role: str, cluster: Cluster, loaded: LoadedPlan) -> list[CheckResult]:
    """The kubeconfig names the cluster's context, and its API server is a private address.

    The API server itself is first contacted by the phase that applies manifests; this only
    proves the plan points at a context that exists.
    """
    name = f"preflight.{role}_cluster"
    path = kubeconfig_path(cluster.kubeconfig, loaded.path.parent.resolve())
    measured = {"kubeconfig": str(path), "context": cluster.context}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        return [CheckResult(name, Status.FAIL, measured, evidence=[f"{path}: cannot read a kubeconfig: {exc}"])]
    contexts = {c.get("name"): c.get("context", {}) for c in config.get("contexts") or []}
    if cluster.context not in contexts:
        known = ", ".join(sorted(str(c) for c in contexts)) or "none"
        return [
            CheckResult(
                name, Status.FAIL, measured, evidence=[f"{path} has no context {cluster.context!r} (it has: {known})"]
            )
        ]
    clusters = {c.get("name"): c.get("cluster", {}) for c in config.get("clusters") or []}
    server = clusters.get(contexts[cluster.context].get("cluster"), {}).get("server")
    if not server:
        return [
            CheckResult(
                name,
                Status.FAIL,
                measured,
                evidence=[f"context {cluster.context!r} names no cluster with a server URL"],
            )
        ]
    measured["server"] = server
    found = CheckResult(
        name,
        Status.PASS,
        measured,
        evidence=[
            f"context {cluster.context!r}: API server {server}, namespace {cluster.namespace} (not contacted here)"
        ],
    )
    return [found, check_private_host(f"preflight.{role}_cluster_private", urlsplit(server).hostname or server)]


def check_state_dir_writable(path: Path) -> CheckResult:
    """The state directory (run log, transfer state) can be created and written."""
    name = "preflight.state_dir_writable"
    probe = path / f".ferry-probe-{secrets.token_hex(4)}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"probe")
    except OSError as exc:
        return CheckResult(name, Status.FAIL, {"path": str(path)}, evidence=[f"cannot write: {exc.strerror or exc}"])
    finally:
        probe.unlink(missing_ok=True)
    return CheckResult(name, Status.PASS, {"path": str(path)})


def check_iam_sources(exports: list[Path], aws: AwsIamSource | None) -> CheckResult:
    """The IAM export files are readable, and the live IAM API (aws without an export) answers."""
    from ferry.iam.aws import aws_iam_call

    name = "preflight.iam_sources"
    problems, reached = [], []
    for path in exports:
        if os.access(path, os.R_OK) and path.is_file():
            reached.append(str(path))
        else:
            problems.append(f"{path}: not a readable file")
    if aws is not None and not aws.export:
        try:
            aws_iam_call(aws, lambda client: client.list_users(MaxItems=1))
            reached.append(f"IAM API at {aws.endpoint_url or 'AWS'}")
        except FerryError as exc:
            problems.append(str(exc))
    return CheckResult(
        name,
        Status.FAIL if problems else Status.PASS,
        {"sources": len(reached) + len(problems)},
        evidence=problems or [f"read {', '.join(reached)}"],
    )


def preflight(loaded: LoadedPlan) -> list[CheckResult]:
    """The plan-wide preflight checks: both storage ends, registries, clusters, the state directory.

    Each phase adds its own (Phase.preflight); the pipeline runs both.
    """
    from connectors.registry import open_connector

    results = []
    for role in ("source", "target"):
        url = loaded.storage(role)
        try:
            connector = open_connector(url, loaded.plan.profiles)
        except FerryError as exc:
            failed = CheckResult(f"preflight.{role}_storage_access", Status.FAIL, {"url": url}, evidence=[str(exc)])
            results.append(failed)
            continue
        try:
            results.append(check_storage_access(role, connector))
            results.append(check_private_endpoint(role, connector))
        finally:
            connector.close()
        side = getattr(loaded.plan, role)
        if side.registry:
            images = getattr(loaded.plan.phases, "images", None)
            results += check_registry(role, side.registry, getattr(images, "insecure_registries", ()))
        if side.cluster:
            results += check_cluster(role, side.cluster, loaded)
    results.append(check_state_dir_writable(loaded.layout.state))
    return results
