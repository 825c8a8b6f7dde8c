"""The target cluster through the official client: a client from a kubeconfig context, its errors as ferry's, objects
read and written through the dynamic API."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferry.errors import NotFoundError, PermanentError, TransientError, UsageError

# The field manager of every server-side apply.
FIELD_MANAGER = "ferry"
# Field managers of the control plane: what they write (status, a Deployment's revision, a claim's binding, an
# HPA's replicas, a Job's generated selector) is the cluster working, not a person's change, and ferry leaves it.
CONTROL_PLANE_MANAGERS = frozenset(
    {"kube-controller-manager", "kube-scheduler", "kube-apiserver", "kubelet", "cloud-controller-manager"}
)


def kubeconfig_path(named: str | None, plan_dir: Path) -> Path:
    """The kubeconfig the plan names (relative to the plan), else $KUBECONFIG's first file, else ~/.kube/config."""
    if named:
        return Path(named) if Path(named).is_absolute() else plan_dir / named
    if os.environ.get("KUBECONFIG"):
        return Path(os.environ["KUBECONFIG"].split(os.pathsep)[0])
    return Path.home() / ".kube" / "config"


def api_client(kubeconfig: Path, context: str) -> Any:
    """An official-client ApiClient for context; UsageError (one line) when the kubeconfig cannot give one."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    if not kubeconfig.is_file():
        raise UsageError(f"no kubeconfig at {kubeconfig}")
    try:
        return config.new_client_from_config(config_file=str(kubeconfig), context=context)
    except ConfigException as exc:
        raise UsageError(f"{kubeconfig}: context {context!r}: {exc}") from None


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """The client's errors as ferry's: 404 NotFoundError, throttling and 5xx TransientError, other answers
    PermanentError (with the API's own message: an admission webhook's reason), no answer TransientError."""
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ApiException as exc:  # the dynamic client's DynamicApiError too
        status = exc.status or 0
        error = NotFoundError if status == 404 else TransientError if status == 429 or status >= 500 else PermanentError
        try:
            said = f": {json.loads(exc.body)['message']}"
        except (TypeError, ValueError, KeyError):
            said = ""
        raise error(f"{what}: the API answered {status} {exc.reason}{said}", code=str(status)) from None
    except HTTPError as exc:
        raise TransientError(f"{what}: the cluster did not answer ({type(exc).__name__})") from None


# GPU feature discovery's node labels: the newer full version, else the older major/minor/rev triple.
_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
_DRIVER_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")


def node_drivers(api: Any) -> dict[str, str]:
    """The NVIDIA driver version of each node that GPU feature discovery labelled, by node name."""
    from kubernetes import client

    with translated("listing the cluster's nodes"):
        nodes = client.CoreV1Api(api).list_node().items
    drivers = {}
    for node in nodes:
        labels = node.metadata.labels or {}
        if _DRIVER_FULL in labels:
            drivers[node.metadata.name] = labels[_DRIVER_FULL]
        elif all(part in labels for part in _DRIVER_PARTS):
            # A two-part driver (570.26) carries an empty rev label.
            drivers[node.metadata.name] = ".".join(labels[part] for part in _DRIVER_PARTS if labels[part])
    return drivers


# What the API server answers a `Warning:` header with: `299 - "text"` (RFC 7234 warn-code, agent, text).
_WARNING = re.compile(r'^\s*\d{3}\s+\S+\s+"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Conflict:
    """A field another field manager owns, which an apply would have changed: `.spec.replicas` by the HPA's
    kube-controller-manager."""

    field: str
    manager: str

    def __str__(self) -> str:
        return f"{self.field} (owned by {self.manager})"


def conflicts_of(exc: Any) -> list[Conflict]:
    """The field manager conflicts a 409 answer to an apply names (its status causes), else none."""
    try:
        causes = json.loads(exc.body)["details"]["causes"]
    except (TypeError, ValueError, KeyError):
        return []
    found = []
    for cause in causes:
        manager = re.search(r'conflicts? with "([^"]*)"', cause.get("message", ""))
        if cause.get("reason") == "FieldManagerConflict" and cause.get("field") and manager:
            found.append(Conflict(cause["field"], manager.group(1)))
    return found


class NotServed(PermanentError):
    """The cluster serves no such kind (yet: its CustomResourceDefinition may come in an earlier wave)."""


class ClusterApi:
    """The target cluster through the official client's dynamic API: get, apply, replace, delete by object. The
    API's `Warning` headers of every answer are kept, in order, in `warnings`."""

    def __init__(self, api_client: Any, discovery_cache: Path):
        from kubernetes import dynamic

        self.warnings: list[str] = []
        rest = api_client.rest_client
        request = rest.request

        def heeded(*args: Any, **kwargs: Any) -> Any:
            response = request(*args, **kwargs)
            for header in response.headers.getlist("Warning") if hasattr(response.headers, "getlist") else []:
                said = _WARNING.match(header)
                text = said.group(1).replace('\\"', '"') if said else header
                if text not in self.warnings:
                    self.warnings.append(text)
            return response

        rest.request = heeded
        # Discovered afresh each time (the client would reuse a file in /tmp shared by every process, however
        # old): what the cluster serves, and at which version, may have changed since the last call.
        discovery_cache.parent.mkdir(parents=True, exist_ok=True)
        discovery_cache.unlink(missing_ok=True)
        with translated("discovery"):
            self.client = dynamic.DynamicClient(api_client, cache_file=str(discovery_cache))

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with translated(f"discovery of {api_version} {kind}"):
            try:
                return self.client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # A CustomResourceDefinition applied in an earlier wave: discovery must look again.
                self.client.resources.invalidate_cache()
            try:
                return self.client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                raise NotServed(f"the cluster does not serve {api_version} {kind}") from None

    # Kinds looked for in a namespace before deleting it; what a controller owns (pods of a Deployment) is not asked.
    _NAMESPACED = (
        ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "PersistentVolumeClaim"), ("v1", "Service"), ("v1", "Pod"),
        ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
    )  # fmt: skip

    def strangers(self, namespace: str, label: str, value: str) -> list[str]:
        """Objects in namespace not labelled label=value that no controller owns (kind/name each)."""
        found = []
        for api_version, kind in self._NAMESPACED:
            resource = self._resource(api_version, kind)
            with translated(f"list {kind} in {namespace}"):
                items = resource.get(namespace=namespace, label_selector=f"{label}!={value}").to_dict()["items"]
            for item in items:
                meta = item["metadata"]
                # Every namespace gets the cluster's CA bundle ConfigMap: it is no one's.
                if not meta.get("ownerReferences") and meta["name"] != "kube-root-ca.crt":
                    found.append(f"{kind}/{meta['name']}")
        return found

    def established(self, name: str, wait_s: float) -> None:
        """Wait until the CustomResourceDefinition name is Established (its kind served), then look again at what the
        cluster serves, so that its custom resources can be applied next."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name, None) or {}
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                said = "; ".join(f"{c.get('type')}: {c.get('message', '')}" for c in conditions) or "no condition yet"
                raise TransientError(f"CustomResourceDefinition {name} not Established after {wait_s:g} s ({said})")
            time.sleep(0.2)
        with translated("discovery"):
            self.client.resources.invalidate_cache()

    def version(self) -> str:
        """The API server's Kubernetes version, major.minor (from discovery)."""
        found = self.client.version["kubernetes"]
        return f"{found['major']}.{str(found['minor']).rstrip('+')}"

    def namespaced(self, api_version: str, kind: str) -> bool:
        return bool(self._resource(api_version, kind).namespaced)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict | None:
        """The object as the cluster has it; None when it is not there (nor is its kind served)."""
        from kubernetes.dynamic.exceptions import NotFoundError as Missing

        try:
            resource = self._resource(api_version, kind)
        except NotServed:
            return None
        with translated(f"get {kind} {name}"):
            try:
                return resource.get(name=name, namespace=namespace).to_dict()
            except Missing:
                return None

    def apply(self, obj: dict, *, dry_run: bool = False) -> tuple[dict, list[Conflict], list[Conflict]]:
        """Server-side apply as field manager ferry, conflicts not forced at first. A field a controller owns (the
        HPA's spec.replicas: the control plane keeps writing it) is left out of the apply; a field an earlier write
        of a person or tool owns (kubectl, a CI job) is then taken, as the manifest says. The applied object, the
        fields left, the fields taken. dry_run: the API server admits and validates it (dryRun=All) and stores
        nothing."""
        from kubernetes.client.rest import ApiException

        resource = self._resource(obj["apiVersion"], obj["kind"])
        what = f"{'dry run of ' if dry_run else ''}apply {obj['kind']} {obj['metadata']['name']}"
        body, left, taken = obj, [], []
        while True:
            with translated(what):
                try:
                    applied = resource.server_side_apply(
                        body=body, namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
                        force_conflicts=bool(taken), dry_run="All" if dry_run else None,
                    ).to_dict()  # fmt: skip
                    return applied, left, taken
                except ApiException as exc:
                    found = conflicts_of(exc) if exc.status == 409 else []
                    if not found or left or taken:  # a conflict after these were settled is the server's to say
                        raise
                    left = [c for c in found if c.manager in CONTROL_PLANE_MANAGERS]
                    taken = [c for c in found if c.manager not in CONTROL_PLANE_MANAGERS]
                    body = without_fields(obj, [conflict.field for conflict in left])

    def create(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with translated(f"create {obj['kind']} {obj['metadata']['name']}"):
            return resource.create(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def replace(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with translated(f"replace {obj['kind']} {obj['metadata']['name']}"):
            return resource.replace(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None, wait_s: float = 300) -> bool:
        """Delete (foreground: a Job's pods go with it) and wait until it is gone, so that the name can be created
        again; False when it was already gone."""
        from kubernetes.dynamic.exceptions import NotFoundError as Missing

        resource = self._resource(api_version, kind)
        with translated(f"delete {kind} {name}"):
            try:
                resource.delete(name=name, namespace=namespace, body={"propagationPolicy": "Foreground"})
            except Missing:
                return False
        self.gone(api_version, kind, name, namespace, wait_s, f"delete {kind} {name}")
        return True

    def gone(self, api_version: str, kind: str, name: str, namespace: str | None, wait_s: float, what: str) -> None:
        """Wait until the object is gone (a foreground delete waits for its dependents, a namespace for its content);
        TransientError naming the finalizers that still hold it after wait_s."""
        deadline = time.monotonic() + wait_s
        while (live := self.get(api_version, kind, name, namespace)) is not None:
            if time.monotonic() > deadline:
                meta = live.get("metadata") or {}
                holding = [*(meta.get("finalizers") or []), *((live.get("spec") or {}).get("finalizers") or [])]
                held = [f"held by finalizers {', '.join(holding)}" if holding else "no finalizer named"]
                # A namespace says what in it holds it (content left, and its finalizers).
                held += [c["message"] for c in (live.get("status") or {}).get("conditions") or []
                         if c.get("status") == "True" and c.get("message")]  # fmt: skip
                raise TransientError(f"{what}: still there after {wait_s:g} s, being deleted ({'; '.join(held)})")
            time.sleep(0.5)


def _selector(text: str) -> dict[str, Any]:
    """A managed-fields list item key, `name="web",protocol="TCP"`, as a map (values are JSON)."""
    decoder, found, at = json.JSONDecoder(), {}, 0
    while at < len(text):
        name, _, _ = text[at:].partition("=")
        value, end = decoder.raw_decode(text, at + len(name) + 1)
        found[name] = value
        at = end + 1  # past the comma
    return found


def without_fields(obj: dict, fields: list[str]) -> dict:
    """A copy of obj without each field, as managed fields name them: `.spec.replicas`,
    `.spec.template.spec.containers[name="web"].image`, `.metadata.labels.app.kubernetes.io/name` (a key with dots is
    matched against the object's own keys, longest first); a field obj does not have is left alone."""
    trimmed = copy.deepcopy(obj)
    for field_path in fields:
        _remove(trimmed, field_path)
    return trimmed


def _remove(node: Any, rest: str) -> None:
    if isinstance(node, dict) and rest.startswith("."):
        for key in sorted((k for k in node if isinstance(k, str)), key=len, reverse=True):
            tail = rest[1 + len(key) :]
            if rest[1:].startswith(key) and (not tail or tail[0] in ".["):
                if not tail:
                    del node[key]
                else:
                    _remove(node[key], tail)
                return
    elif isinstance(node, list) and rest.startswith("["):
        close = _closing(rest)
        inside, tail = rest[1:close], rest[close + 1 :]
        wanted = _selector(inside) if not inside.startswith("=") else None
        for index, item in enumerate(node):
            same = item == json.loads(inside[1:]) if wanted is None else (
                isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items())
            )  # fmt: skip
            if same:
                if not tail:
                    del node[index]
                else:
                    _remove(item, tail)
                return


def _closing(text: str) -> int:
    """Where the `[` that text starts with closes (quoted values may hold brackets)."""
    quoted = escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "]" and not quoted:
            return index
    return len(text)
