"""Scheme aliases: `meta://store/path` means a connector type, an endpoint and a credential reference.

Secrets are never inline: a profile names environment variables, an AWS profile or a
connection-string variable, and the connector reads them when it opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ferry.config import load_yaml_model

ConnectorType = Literal["s3", "azure", "local", "fsspec"]


class Credentials(BaseModel):
    """Where a connector finds its secrets: names only, never values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    aws_profile: str | None = None
    connection_string_env: str | None = None
    account_name: str | None = None
    account_key_env: str | None = None
    sas_token_env: str | None = None


class Profile(BaseModel):
    """A connector type and where it points."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ConnectorType
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    # The store's smallest multipart part, where it differs from the provider's usual limit.
    min_part_size: int | None = Field(default=None, gt=0)
    # fsspec only: the protocol and its non-secret storage options.
    protocol: str | None = None
    options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    credentials: Credentials = Field(default_factory=Credentials)


class ProfilesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profiles: dict[str, Profile] = Field(default_factory=dict)

    @field_validator("profiles")
    @classmethod
    def _scheme_names(cls, value: dict[str, Profile]) -> dict[str, Profile]:
        for name in value:
            if not name.isidentifier() or name.lower() != name:
                raise ValueError(f"profile name {name!r} must be a lowercase scheme such as 'meta'")
        return value


def load_profiles(path: Path | None) -> dict[str, Profile]:
    """The profiles in path (empty without a path)."""
    if path is None:
        return {}
    return load_yaml_model(path, ProfilesFile).profiles
