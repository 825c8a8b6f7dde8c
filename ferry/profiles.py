"""Scheme aliases: `meta://store/path` means a connector type, an endpoint and a credential reference.

Secrets are never inline: a profile names environment variables, an AWS profile or a
connection-string variable, and the connector reads them when it opens.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ferry.config import load_yaml_model
from ferry.errors import UsageError

ConnectorType = Literal["s3", "azure", "local", "fsspec"]


@dataclass(frozen=True)
class SecretRef:
    """Where one secret comes from: an environment variable or a Prefect Secret block, never its value.

    name is the secret's name in its credentials (`password`); its plan fields are `<name>_env` and
    `<name>_secret`. Printing one shows where the secret comes from, never what it is.
    """

    name: str
    env: str | None = None
    block: str | None = None

    @property
    def field(self) -> str:
        """The plan field that names it."""
        return f"{self.name}_env" if self.env else f"{self.name}_secret"

    def __str__(self) -> str:
        return f"${self.env}" if self.env else f"Prefect Secret block {self.block!r}"

    def resolve(self) -> str:
        """The secret's value, read now (never logged, never stored): UsageError naming the field when its variable
        is not set or its block does not exist."""
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise UsageError(f"credentials.{self.field} names ${self.env}, which is not set")
            return value
        from prefect.blocks.system import Secret

        try:
            return str(Secret.load(self.block).get())
        except ValueError:
            raise UsageError(f"credentials.{self.field}: no Prefect Secret block named {self.block!r}") from None


class Credentials(BaseModel):
    """Where a connector finds its secrets: names only, never values.

    Each secret is named either as an environment variable (`<secret>_env`) or as a Prefect
    Secret block (`<secret>_secret`), never both; a subclass names more secrets by adding such pairs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key_id_env: str | None = None
    access_key_id_secret: str | None = None
    secret_access_key_env: str | None = None
    secret_access_key_secret: str | None = None
    session_token_env: str | None = None
    session_token_secret: str | None = None
    aws_profile: str | None = None
    connection_string_env: str | None = None
    connection_string_secret: str | None = None
    account_name: str | None = None
    account_key_env: str | None = None
    account_key_secret: str | None = None
    sas_token_env: str | None = None
    sas_token_secret: str | None = None
    # S3 SSE-C: the 256-bit customer key, base64 (what `openssl rand -base64 32` prints). How objects are stored,
    # not which: out of hashes (as the profile's receipt and kms_key_id are).
    sse_customer_key_env: str | None = Field(default=None, exclude=True)
    sse_customer_key_secret: str | None = Field(default=None, exclude=True)

    @classmethod
    def secret_names(cls) -> tuple[str, ...]:
        """The secrets these credentials can name: every `<name>_env` field with its `<name>_secret`."""
        fields = cls.model_fields
        return tuple(f.removesuffix("_env") for f in fields if f.endswith("_env") and f"{f[:-4]}_secret" in fields)

    @model_validator(mode="after")
    def _one_source_each(self) -> Credentials:
        for name in self.secret_names():
            if getattr(self, f"{name}_env") and getattr(self, f"{name}_secret"):
                raise ValueError(f"{name}: name an environment variable or a Prefect Secret block, not both")
        return self

    def refs(self) -> list[SecretRef]:
        """Every secret named here, where it comes from."""
        found = (SecretRef(n, getattr(self, f"{n}_env"), getattr(self, f"{n}_secret")) for n in self.secret_names())
        return [ref for ref in found if ref.env or ref.block]

    def named(self, name: str) -> bool:
        """True if the secret `name` has a source."""
        return any(ref.name == name for ref in self.refs())

    def resolve(self, name: str) -> str | None:
        """The secret `name` from its variable or Prefect Secret block; None if neither is named."""
        ref = next((ref for ref in self.refs() if ref.name == name), None)
        return ref.resolve() if ref else None

    def boto3_session_args(self) -> dict[str, str]:
        """boto3 Session arguments for what is named here; the rest is left to boto3's credential chain."""
        args = {
            "profile_name": self.aws_profile,
            "aws_access_key_id": self.resolve("access_key_id"),
            "aws_secret_access_key": self.resolve("secret_access_key"),
            "aws_session_token": self.resolve("session_token"),
        }
        return {k: v for k, v in args.items() if v is not None}


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
    # Seconds a request may wait for the store's next bytes before it fails as transient (and is retried); the
    # connector's default (READ_TIMEOUT_S in connectors/base.py) when unset. How patient, not where: out of hashes.
    read_timeout_s: float | None = Field(default=None, gt=0, le=3600, exclude=True)
    # S3: how a write's receipt is checked (see connectors/s3.py and docs/sync.md): "crc32c", the store verifies the
    # CRC32C ferry sends and echoes it (AWS S3); "md5", Content-MD5 as well and an unencrypted object's ETag held
    # to the body's MD5 (a store that does not verify the CRC32C); "auto", crc32c on AWS's endpoints, elsewhere as
    # the first write's probe finds the endpoint: crc32c where it refuses a wrong CRC32C, else md5.
    receipt: Literal["auto", "crc32c", "md5"] = Field(default="auto", exclude=True)
    # S3: what sends the requests that carry object bytes (PutObject, UploadPart): "crt", the AWS Common Runtime
    # (awscrt: HTTP and signing in C, a fraction of botocore's CPU per request); "botocore"; "auto", the CRT where
    # awscrt is installed and no proxy is set for the endpoint. How bytes travel, not where: out of hashes.
    transfer_client: Literal["auto", "crt", "botocore"] = Field(default="auto", exclude=True)
    # S3: SSE-KMS on every object ferry writes, with this key (an ID, ARN or alias/...); SSE-C is a credential
    # (credentials.sse_customer_key_env or _secret).
    kms_key_id: str | None = Field(default=None, min_length=1, exclude=True)
    # S3: the bucket is Requester Pays: every request says the requester (ferry's account) pays for it and for the
    # bytes it reads (x-amz-request-payer), as S3 requires of such a bucket. Who pays, not what: out of hashes.
    requester_pays: bool = Field(default=False, exclude=True)

    @model_validator(mode="after")
    def _one_encryption(self) -> Profile:
        if self.kms_key_id and self.credentials.named("sse_customer_key"):
            raise ValueError(
                "kms_key_id and credentials.sse_customer_key: an object is encrypted by KMS or by your key, name one"
            )
        return self

    def encryption_args(self) -> dict[str, str]:
        """The SSE-KMS arguments of an S3 write (none without kms_key_id)."""
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self.kms_key_id} if self.kms_key_id else {}

    def customer_key(self) -> bytes | None:
        """The SSE-C key named in the credentials, decoded (None if none is named); UsageError if it is not 32
        bytes of base64. The value is never shown."""
        if not self.credentials.named("sse_customer_key"):
            return None
        text = self.credentials.resolve("sse_customer_key") or ""
        try:
            key = base64.b64decode(text.strip(), validate=True)
        except ValueError:
            key = b""
        if len(key) != 32:
            raise UsageError("credentials.sse_customer_key: the key must be 32 bytes, base64-encoded (44 characters)")
        return key


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
