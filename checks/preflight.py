"""Preflight: before any phase changes anything, every endpoint answers and the state dir is writable.

Platform guidance is to reach storage over a private endpoint (PrivateLink or the like), never
through the public internet: an endpoint that resolves to a public address is a WARN.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
from pathlib import Path

from checks.base import CheckResult, Status
from connectors.base import Connector
from ferry.errors import FerryError


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


def preflight(storage: dict[str, str], profiles: dict, state_dir: Path) -> list[CheckResult]:
    """All preflight checks for the named storage URLs (role -> URL) and the state directory."""
    from connectors.registry import open_connector

    results = []
    for role, url in storage.items():
        try:
            connector = open_connector(url, profiles)
        except FerryError as exc:
            failed = CheckResult(f"preflight.{role}_storage_access", Status.FAIL, {"url": url}, evidence=[str(exc)])
            results.append(failed)
            continue
        try:
            results.append(check_storage_access(role, connector))
            results.append(check_private_endpoint(role, connector))
        finally:
            connector.close()
    results.append(check_state_dir_writable(state_dir))
    return results
