"""Connector kinds by name, loaded on first use; URL schemes and profile aliases resolve to them."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from connectors.base import Connector, Location
from ferry.errors import UsageError

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile

# kind -> "module:Class". Third parties add kinds through the "ferry.connectors" entry point group.
KINDS = {
    "local": "connectors.local:LocalConnector",
    "s3": "connectors.s3:S3Connector",
    "azure": "connectors.azure_blob:AzureBlobConnector",
    "fsspec": "connectors.fsspec_any:FsspecConnector",
    "synthetic": "connectors.synthetic:SyntheticConnector",
    "null": "connectors.synthetic:NullConnector",
}
# URL scheme -> kind, for URLs that name no profile.
SCHEMES = {"": "local", "file": "local", "s3": "s3", "az": "azure", "azure": "azure", "synthetic": "synthetic",
           "null": "null"}
INSTALL_HINTS = {"azure": "pip install azure-storage-blob azure-identity"}


def parse_location(url: str) -> Location:
    """Split a storage URL; a plain path is a local directory."""
    if "://" not in url:
        return Location(url=url, scheme="", bucket="", prefix=url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return Location(url=url, scheme="file", bucket="", prefix=parts.path)
    # Keep the path as written: no URL-decoding, no collapsing of '//'.
    rest = url.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(f"{url}: no bucket or container in the URL")
    return Location(url=url, scheme=scheme, bucket=bucket, prefix=prefix.rstrip("/"))


def _load_kind(kind: str) -> type[Connector]:
    target = KINDS.get(kind)
    if target is None:
        plugin = next((ep for ep in entry_points(group="ferry.connectors") if ep.name == kind), None)
        if plugin is None:
            raise UsageError(f"unknown connector type {kind!r}")
        target = plugin.value
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = INSTALL_HINTS.get(kind, f"install the package that provides {module_name}")
        raise UsageError(f"the {kind} connector needs a missing package ({exc.name}): {hint}") from None
    return getattr(module, class_name)


def _fsspec_knows(scheme: str) -> bool:
    from fsspec.registry import known_implementations, registry

    return scheme in known_implementations or scheme in registry


def connector_kind(url: str, profiles: Mapping[str, Profile]) -> str:
    """The connector kind url names: a profile alias, a built-in scheme, or any fsspec protocol; else UsageError."""
    location = parse_location(url)
    profile = profiles.get(location.scheme)
    if profile is not None:
        return profile.type
    if location.scheme in SCHEMES:
        return SCHEMES[location.scheme]
    if _fsspec_knows(location.scheme):
        return "fsspec"
    known = ", ".join(sorted({*SCHEMES, *profiles} - {""}))
    raise UsageError(f"{url}: unknown scheme {location.scheme!r} (known: {known}, a profile, or an fsspec protocol)")


def connector_class(url: str, profiles: Mapping[str, Profile]) -> type[Connector]:
    """The connector class url names (its declared capabilities, before anything is opened)."""
    return _load_kind(connector_kind(url, profiles))


def open_connector(url: str, profiles: Mapping[str, Profile]) -> Connector:
    """The connector for url: a profile alias, a built-in scheme, or any fsspec protocol."""
    location = parse_location(url)
    return connector_class(url, profiles).from_location(location, profiles.get(location.scheme))
