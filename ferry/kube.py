"""The target cluster through the official client: a client from a kubeconfig context, its errors as ferry's, objects
read and written through the dynamic API."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferry.errors import NotFoundError, PermanentError, TransientError, UsageError

# The field manager of every server-side apply.
FIELD_MANAGER = "ferry"


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
    import json

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


class ClusterApi:
    """The target cluster through the official client's dynamic API: get, apply, replace, delete by object."""

    def __init__(self, api_client: Any, discovery_cache: Path):
        from kubernetes import dynamic

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
                raise PermanentError(f"the cluster does not serve {api_version} {kind}") from None

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

    def version(self) -> str:
        """The API server's Kubernetes version, major.minor (from discovery)."""
        found = self.client.version["kubernetes"]
        return f"{found['major']}.{str(found['minor']).rstrip('+')}"

    def namespaced(self, api_version: str, kind: str) -> bool:
        return bool(self._resource(api_version, kind).namespaced)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict | None:
        from kubernetes.dynamic.exceptions import NotFoundError as Missing

        resource = self._resource(api_version, kind)
        with translated(f"get {kind} {name}"):
            try:
                return resource.get(name=name, namespace=namespace).to_dict()
            except Missing:
                return None

    def apply(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with translated(f"apply {obj['kind']} {obj['metadata']['name']}"):
            return resource.server_side_apply(
                body=obj, namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER, force_conflicts=True
            ).to_dict()

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
        deadline = time.monotonic() + wait_s
        while self.get(api_version, kind, name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TransientError(f"delete {kind} {name}: still there after {wait_s:g} s (finalizers?)")
            time.sleep(0.5)
        return True
