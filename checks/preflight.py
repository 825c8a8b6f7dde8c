"""Preflight: before any phase changes anything, every endpoint answers and the state dir is writable.

Platform guidance is to reach storage over a private endpoint (PrivateLink or the like), never
through the public internet: an endpoint that resolves to a public address is a WARN.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from checks.base import CheckResult, Status
from connectors.base import Connector
from ferry.errors import FerryError

if TYPE_CHECKING:
    from ferry.plan import LoadedPlan


def check_storage_access(role: str, connector: Connector) -> CheckResult:
    """The credentials work and the bucket, container or directory exists (a local target may be created)."""
    name = f"preflight.{role}_storage_access"
    try:
        if role == "target":
            connector.prepare_target(dry_run=True)
        else:
            connector.check()
    except FerryError as exc:
        return CheckResult(name, Status.FAIL, {"url": connector.url}, evidence=[str(exc)])
    return CheckResult(name, Status.PASS, {"url": connector.url}, evidence=["reached with the configured credentials"])


def check_private_endpoint(role: str, connector: Connector) -> CheckResult:
    """Every address the endpoint resolves to is private (or loopback): no public internet hop."""
    name = f"preflight.{role}_endpoint_private"
    host = connector.network_host()
    if host is None:
        return CheckResult(name, Status.SKIP, {"url": connector.url}, evidence=["not a network endpoint"])
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


def check_state_dir_writable(path: Path) -> CheckResult:
    """The ledger's directory can be created and written."""
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


def check_iam_sources(loaded: LoadedPlan) -> CheckResult:
    """The IAM exports the plan names are readable, and the live IAM API answers with its credentials."""
    from ferry.iam import aws_iam_call

    name = "preflight.iam_sources"
    problems, reached = [], []
    for path in loaded.iam_exports():
        if os.access(path, os.R_OK) and path.is_file():
            reached.append(str(path))
        else:
            problems.append(f"{path}: not a readable file")
    aws = loaded.plan.source.iam.aws if loaded.plan.source.iam else None
    if aws is not None and not aws.export:
        try:
            aws_iam_call(aws, lambda client: client.list_users(MaxItems=1))
            reached.append(f"IAM API at {aws.endpoint_url or 'AWS'}")
        except FerryError as exc:
            problems.append(str(exc))
    return CheckResult(name, Status.FAIL if problems else Status.PASS, {"sources": len(reached) + len(problems)},
                       evidence=problems or [f"read {', '.join(reached)}"])


def preflight(loaded: LoadedPlan) -> list[CheckResult]:
    """All preflight checks of a plan: both storage ends, the IAM sources, the ledger's directory."""
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
    if loaded.plan.phases.iam is not None:
        results.append(check_iam_sources(loaded))
    results.append(check_state_dir_writable(loaded.state_dir / "state"))
    return results
