"""The images phase's settings (`phases.images`) and gate (`gates.images`): what to rebuild and copy, and how."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ferry.config import Settings
from ferry.images.auth import RegistryAuth
from ferry.plan import BaseImageRule, FilePath

# An image as a plan names it under a registry: repository:tag.
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class DockerfileEntry(Settings):
    """A Dockerfile to rebase and rebuild; `image` names it under both source.registry and target.registry."""

    path: FilePath = Field(min_length=1)
    image: str
    # The build context; default: the Dockerfile's folder.
    context: FilePath | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    # The stage to build; default: the last.
    target: str | None = None

    @field_validator("image")
    @classmethod
    def _name_tag(cls, value: str) -> str:
        if not _IMAGE.fullmatch(value):
            raise ValueError(
                f"{value!r}: name it repository:tag, lower-case, as under a registry (e.g. trainer:2024.06)"
            )
        return value


class ImagesSettings(Settings):
    """Settings of the images phase."""

    dockerfiles: list[DockerfileEntry] = Field(default_factory=list)
    # name:tag, name@sha256:..., or name:pattern (`*` spans any characters, expanded from the source's tags).
    copy_images: list[str] = Field(default_factory=list, alias="copy")
    # Rebase rules before the target profile's (first match wins).
    base_images: list[BaseImageRule] = Field(default_factory=list)
    builder: Literal["buildah", "docker", "kaniko"] = "buildah"
    platforms: list[str] = Field(default_factory=lambda: ["linux/amd64"], min_length=1)
    # Builds and copies at once.
    parallel: int = Field(default=4, ge=1, le=64)
    # Credentials by registry host (e.g. registry.meta.example); default: the tools' own auth file, and for an
    # ECR host a token from boto3's credential chain.
    auth: dict[str, RegistryAuth] = Field(default_factory=dict)
    # Hosts (host:port, or a host for every port) spoken to over plain HTTP, without TLS verification; a loopback
    # registry always is (`ferry.net.plain_http`, the rule preflight follows too).
    insecure_registries: list[str] = Field(default_factory=list)
    # The kaniko executor image the rendered Jobs run.
    kaniko_image: str = "gcr.io/kaniko-project/executor:v1.23.2"

    @model_validator(mode="after")
    def _something(self) -> ImagesSettings:
        if not self.dockerfiles and not self.copy_images:
            raise ValueError("name dockerfiles to rebuild or images to copy")
        if self.builder == "buildah" and len(self.platforms) > 1:
            raise ValueError("buildah builds one platform here (RUN steps of others need emulation): use docker")
        images = [d.image for d in self.dockerfiles]
        if len(set(images)) != len(images):
            raise ValueError("two dockerfiles build the same image")
        if clash := set(images) & set(self.copy_images):
            raise ValueError(f"{', '.join(sorted(clash))}: both rebuilt from a Dockerfile and copied")
        return self


class ImagesGate(Settings):
    # A base that no rule maps and that is not the target's: WARN when allowed, else FAIL.
    allow_unmapped_base: bool = False
