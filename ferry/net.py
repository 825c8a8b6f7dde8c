"""Network failures in words, and the one rule for plain HTTP.

A socket, TLS or HTTP library says why a connection failed in its own terms (`[SSL: WRONG_VERSION_NUMBER]`,
`http: server gave HTTP response to HTTPS client`, `[Errno 111]`); `in_words` turns that into the cause and what to
change, for preflight and every phase alike. `plain_http` decides, for preflight and the images phase alike, which
registries are spoken to without TLS.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

# (what the libraries say, in any case; the cause in words). The first that matches wins.
_CAUSES: list[tuple[tuple[str, ...], str]] = [
    (
        ("wrong_version_number", "server gave http response to https client", "record layer failure",
         "unknown protocol", "packet length too long"),
        "{where} speaks plain HTTP, not TLS{plain}",
    ),
    (
        ("certificate_verify_failed", "certificate signed by unknown authority", "certificate verify failed",
         "self-signed certificate", "self signed certificate", "x509: certificate"),
        "{where}'s TLS certificate is not trusted here: add its CA to the system's trust store (or name a bundle "
        "in SSL_CERT_FILE){untrusted}",
    ),
    (
        ("connection refused", "errno 111", "econnrefused"),
        "nothing accepts connections at {where} (connection refused): check the host and port, and that the "
        "service is up",
    ),
    (
        ("name or service not known", "nodename nor servname", "no such host", "temporary failure in name resolution",
         "getaddrinfo failed", "name resolution"),
        "{where} does not resolve (DNS): check the host name",
    ),
    (("connection reset", "econnreset", "errno 104"), "{where} reset the connection"),
    (("timed out", "i/o timeout", "timeout"), "{where} did not answer in time"),
]  # fmt: skip


# What says another attempt may pass: a connection refused (the service restarting) or reset, an answer that stopped
# or never came, 429 or a 5xx.
_PASSING = re.compile(
    r"connection refused|econnrefused|errno 111|connection reset|econnreset|errno 104|broken pipe|unexpected eof"
    r"|timed out|timeout|too many requests|service unavailable|bad gateway|\b(?:429|50[0-4])\b"
)


def may_pass_again(said: object) -> bool:
    """Whether a failure (an exception or what a tool printed) is one another attempt may not meet."""
    return bool(_PASSING.search(_said(said)))


def _said(cause: object) -> str:
    """What an exception (with its causes and reasons) or a tool's output said, as one lower-case text."""
    parts, seen = [], set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        parts.append(str(cause))
        reason = getattr(cause, "reason", None)
        if isinstance(reason, BaseException):
            parts.append(str(reason))
        cause = cause.__cause__ or cause.__context__ if isinstance(cause, BaseException) else None
    return " ".join(parts).lower()


def in_words(said: object, where: str, *, plain: str = "", untrusted: str = "") -> str | None:
    """The cause of a network failure at where (host:port or a URL) in words and what to change; None if what
    was said (an exception or a tool's output) is not a network failure ferry knows.

    plain and untrusted are what to change in the plan for TLS spoken to a plain-HTTP endpoint and for a
    certificate not trusted here, each starting with ": ".
    """
    text = _said(said)
    for needles, cause in _CAUSES:
        if any(needle in text for needle in needles):
            return cause.format(where=where, plain=plain, untrusted=untrusted)
    return None


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (host without a port; an IPv6 address with or without brackets)."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_host(host: str) -> str:
    """The host name of host[:port] ([v6]:port too)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


def plain_http(host: str, insecure: Iterable[str] = ()) -> bool:
    """Whether a registry at host[:port] is spoken to over plain HTTP, without TLS: as Docker does, a loopback
    registry is; so is one that `phases.images.insecure_registries` names (host:port, or the host for every port).
    Every other registry gets HTTPS with its certificate verified."""
    named = set(insecure)
    return is_loopback(split_host(host)) or host in named or split_host(host) in named


# What to change when a registry fails so: for preflight, the API client and the tools' output alike.
REGISTRY_HINTS = {
    "plain": ": name it in phases.images.insecure_registries (a loopback registry is spoken to over HTTP already)",
    "untrusted": ", or name it in phases.images.insecure_registries to skip the verification",
}


def registry_failure(said: object, where: str) -> str | None:
    """in_words for a registry at where, with what to change in the plan."""
    return in_words(said, where, **REGISTRY_HINTS)
