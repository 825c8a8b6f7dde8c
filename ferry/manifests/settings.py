"""The manifests phase's settings (`phases.manifests`) and gate (`gates.manifests`): the sources, what moves where."""

from __future__ import annotations

from pydantic import Field, field_validator

from ferry.config import Settings
from ferry.manifests.model import ExportRule
from ferry.plan import FilePath


class ManifestsSettings(Settings):
    """Settings of the manifests phase: where the manifests are and what moves where."""

    # Files and folders (*.yaml, *.yml), relative to the plan.
    sources: list[FilePath] = Field(min_length=1)
    # Image prefix on the source -> on the target; source.registry -> target.registry is added by default.
    images: dict[str, str] = Field(default_factory=dict)
    # Added to (and overriding) the target profile's storage class map.
    storage_classes: dict[str, str] = Field(default_factory=dict)
    namespaces: dict[str, str] = Field(default_factory=dict)
    # Where pod templates live in kinds beyond the built-ins ("group/Kind": dotted paths, `*`, `[]`).
    template_paths: dict[str, list[str]] = Field(default_factory=dict)
    # Beyond ferry's export rules (ferry/manifests/export_rules.yaml): more of what the source cluster made by
    # itself, left out of the rendering with why.
    leave_out: list[ExportRule] = Field(default_factory=list)

    @field_validator("template_paths")
    @classmethod
    def _paths(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for kind, paths in value.items():
            for path in paths:
                for segment in path.split("."):
                    if not segment or (segment != "*" and not segment.removesuffix("[]").replace("-", "").isalnum()):
                        raise ValueError(f"{kind}: {path!r} is not a dotted path (segments: key, key[], *)")
        return value


class ManifestsGate(Settings):
    # What the transforms could not carry over; more FAILs (None: unlimited, each is still reported).
    max_warnings: int | None = Field(default=None, ge=0)
    # How long the rollout may take to become ready.
    rollout_timeout_s: float = Field(default=600, gt=0, le=24 * 3600)
