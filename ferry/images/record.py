"""An image's record for the digest map: its references, digest and kind, and the CUDA toolkit its config names."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ferry.digest_map import ImageRecord
from ferry.images.oci import Registry, RegistryError
from ferry.images.reference import Reference, normalise

# NGC's images set CUDA_VERSION; newer ones also NV_CUDA_LIB_VERSION, a package version ("12.4.1-1").
_CUDA_ENV = ("CUDA_VERSION", "NV_CUDA_LIB_VERSION")
_CUDA_LABELS = ("com.nvidia.cuda.version", "cuda.version")


def cuda_version(config: dict | None) -> str | None:
    """The CUDA toolkit an image config names (its CUDA_VERSION or NV_CUDA_* env, else a label), None if none."""
    inner = (config or {}).get("config") or {}
    env = dict(item.partition("=")[::2] for item in inner.get("Env") or [])
    labels = inner.get("Labels") or {}
    for value in [env.get(k) for k in _CUDA_ENV] + [labels.get(k) for k in _CUDA_LABELS]:
        if value:
            return value.split("-", 1)[0]
    return None


def image_record(
    registry_of: Callable[[str], Registry], source: str, target: str, digest: str, kind: str, base: str | None
) -> ImageRecord:
    """The digest map's record of an image, with its CUDA toolkit (from its config, else its base's)."""
    ref = Reference.parse(target)
    cuda = cuda_version(registry_of(ref.host).config(ref.repository, digest))
    if cuda is None and base:
        base_ref = Reference.parse(normalise(base))
        with contextlib.suppress(RegistryError):
            cuda = cuda_version(registry_of(base_ref.host).config(base_ref.repository, base_ref.ref))
    return ImageRecord(source, target, digest, kind, cuda)  # type: ignore[arg-type]
