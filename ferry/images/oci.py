"""The OCI distribution API, as much as the images phase and its gate need: manifests, tags, blobs, deletes.

Registries answer over HTTPS unless `ferry.net.plain_http` says otherwise (loopback, or named insecure). Basic
credentials, and the bearer token a registry's 401 challenge asks for, are sent; they never leave this
module in a message.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ferry.errors import FerryError
from ferry.net import registry_failure

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
_ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
_TIMEOUT_S = 30
# The repository a /v2/ path is of (the key of its bearer token).
_REPOSITORY = re.compile(r"(.+?)/(?:manifests|blobs|tags)/")


class RegistryError(FerryError):
    """A registry refused or failed a request (the message names the registry and what was asked, no secret)."""


class _Transient(Exception):
    """A failure another attempt may not meet (a reset, a cut or stalled answer, 429, 5xx)."""


# Attempts after the first for a transient failure (skopeo and buildah are given as many: --retry-times, --retry).
RETRIES = 3


@dataclass(frozen=True)
class Manifest:
    """A manifest or index as the registry stores it: its bytes are what its digest is of."""

    digest: str
    media_type: str
    body: bytes

    @property
    def is_index(self) -> bool:
        return self.media_type in (OCI_INDEX, DOCKER_LIST)

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


class Registry:
    """One registry host."""

    def __init__(self, host: str, *, insecure: bool = False, username: str | None = None, password: str | None = None):
        self.host = host
        self._base = f"{'http' if insecure else 'https'}://{host}/v2/"
        self._basic = (
            "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode() if username and password else None
        )
        # Bearer tokens by repository: a registry's token server grants each token one repository's scope, so
        # one token for the whole host would be overwritten by parallel work on another repository.
        self._tokens: dict[str, str] = {}

    def _request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
    ) -> tuple[int, Any, bytes]:
        """(status, headers, body) of one request; 404 is an answer, other errors raise RegistryError.

        A reset, a refused connection, a truncated or stalled answer, a 429 or 5xx is tried again (RETRIES times,
        backing off); TLS that cannot work, a name that does not resolve or any other answer is not.
        """
        for attempt in range(RETRIES + 1):
            try:
                return self._once(method, path, headers, body)
            except _Transient as exc:
                if attempt == RETRIES:
                    raise RegistryError(str(exc)) from None
                time.sleep(min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    def _once(
        self, method: str, path: str, headers: dict[str, str] | None, body: bytes | None
    ) -> tuple[int, Any, bytes]:
        repository = _REPOSITORY.match(path)
        key = repository.group(1) if repository else ""
        token = self._tokens.get(key)
        for attempt in (0, 1):
            request = urllib.request.Request(self._base + path, data=body, method=method, headers=dict(headers or {}))
            if token or self._basic:
                request.add_header("Authorization", f"Bearer {token}" if token else self._basic or "")
            try:
                with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                    return response.status, response.headers, response.read()
            except urllib.error.HTTPError as exc:
                # The retry sends the token fetched here, whatever another thread has cached meanwhile.
                if exc.code == 401 and attempt == 0:
                    token = self._fetch_token(exc.headers.get("WWW-Authenticate", ""))
                    if token:
                        self._tokens[key] = token
                        continue
                if exc.code == 404:
                    return 404, exc.headers, b""
                said = f"{self.host}: {method} /v2/{path}: HTTP {exc.code} {exc.reason}"
                raise (_Transient if exc.code == 429 or exc.code >= 500 else RegistryError)(said) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", exc)
                cause = registry_failure(exc, self.host)
                said = f"{self.host}: {method} /v2/{path}: {f'{cause} ({reason})' if cause else reason}"
                lasting = cause is not None and ("TLS" in cause or "resolve" in cause)
                raise (RegistryError if lasting else _Transient)(said) from None
        raise RegistryError(f"{self.host}: {method} /v2/{path}: unauthorized")

    def _fetch_token(self, challenge: str) -> str | None:
        """The token a Bearer challenge (realm, service, scope) asks for, using the basic credentials if any."""
        if not challenge.lower().startswith("bearer "):
            return None
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            return None
        request = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(params)}")
        if self._basic:
            request.add_header("Authorization", self._basic)
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
        token = (answer.get("token") or answer.get("access_token")) if isinstance(answer, dict) else None
        return token if isinstance(token, str) and token else None

    def manifest(self, repository: str, ref: str) -> Manifest | None:
        """The manifest or index at a tag or digest, None when there is none."""
        status, headers, body = self._request("GET", f"{repository}/manifests/{ref}", headers={"Accept": _ACCEPT})
        if status == 404:
            return None
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        # What the registry says a manifest's digest is (Docker-Content-Digest) is not read: its bytes are hashed,
        # and a manifest asked for by digest, or one that is not a JSON object, is refused here, not later.
        said = f"{self.host}: GET /v2/{repository}/manifests/{ref}"
        if ref.startswith("sha256:") and digest != ref:
            raise RegistryError(f"{said}: the registry answered other bytes ({digest})")
        try:
            fields = json.loads(body)
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            raise RegistryError(f"{said}: the answer is not a manifest (not a JSON object)")
        media_type = headers.get("Content-Type", "").split(";")[0] or fields.get("mediaType", "")
        return Manifest(digest, media_type, body)

    def digest(self, repository: str, ref: str) -> str | None:
        """The digest the registry holds at a tag or digest, None when it holds none."""
        found = self.manifest(repository, ref)
        return found.digest if found else None

    def tags(self, repository: str) -> list[str]:
        """Every tag of repository (following the API's pagination)."""
        tags: list[str] = []
        path: str | None = f"{repository}/tags/list?n=1000"
        while path:
            status, headers, body = self._request("GET", path)
            if status == 404:
                return tags
            tags += json.loads(body).get("tags") or []
            link = re.search(r"<([^>]+)>", headers.get("Link", "") or "")
            path = link.group(1).removeprefix("/v2/") if link else None
        return tags

    def put_manifest(self, repository: str, ref: str, manifest: Manifest) -> None:
        """Store manifest's exact bytes under ref (a tag): its digest is unchanged."""
        self._request(
            "PUT", f"{repository}/manifests/{ref}", headers={"Content-Type": manifest.media_type}, body=manifest.body
        )

    def delete(self, repository: str, digest: str) -> bool:
        """Delete the manifest at digest (every tag on it goes); False when the registry does not allow deletes."""
        try:
            status, _, _ = self._request("DELETE", f"{repository}/manifests/{digest}")
        except RegistryError as exc:
            if "HTTP 405" in str(exc):
                return False
            raise
        return status != 404

    def blob(self, repository: str, digest: str) -> bytes:
        """A blob's bytes, checked against its digest."""
        status, _, body = self._request("GET", f"{repository}/blobs/{digest}")
        if status == 404:
            raise RegistryError(f"{self.host}: blob {digest} of {repository} is missing")
        found = "sha256:" + hashlib.sha256(body).hexdigest()
        if digest.startswith("sha256:") and found != digest:
            raise RegistryError(
                f"{self.host}: blob {digest} of {repository}: the registry answered other bytes ({found})"
            )
        return body

    def config(self, repository: str, ref: str, platform: str = "linux/amd64") -> dict[str, Any] | None:
        """The image config at ref (for an index: the entry for platform, else its first), None when absent."""
        found = self.manifest(repository, ref)
        if found is None:
            return None
        if found.is_index:
            entries = found.json().get("manifests") or []
            os_name, _, arch = platform.partition("/")
            chosen = next(
                (
                    m
                    for m in entries
                    if m.get("platform", {}).get("os") == os_name and m["platform"].get("architecture") == arch
                ),
                entries[0] if entries else None,
            )
            if chosen is None:
                return None
            found = self.manifest(repository, chosen["digest"])
            if found is None:
                return None
        return json.loads(self.blob(repository, found.json()["config"]["digest"]))
