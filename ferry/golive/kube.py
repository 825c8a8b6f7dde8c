"""The target cluster through the official client: a client from a kubeconfig context, and its errors as ferry's."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ferry.errors import NotFoundError, PermanentError, TransientError, UsageError


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
