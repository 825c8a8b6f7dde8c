"""Registry credentials as a plan names them, and the logins they give: the API client's and the tools' auth file."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from pydantic import model_validator

from ferry.errors import PermanentError, UsageError
from ferry.profiles import Credentials

# An ECR registry host: its region is the API's.
ECR_HOST = re.compile(r"^\d{12}\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")

Login = tuple[str | None, str | None]


class RegistryAuth(Credentials):
    """A registry's credentials, named: a username and password (variables or Prefect Secret blocks), an auth
    file (auth.json, docker config), or for ECR the AWS credentials its token is asked with (default: boto3's)."""

    # The login, each named by an environment variable or a Prefect Secret block (resolved as Credentials does).
    username_env: str | None = None
    username_secret: str | None = None
    password_env: str | None = None
    password_secret: str | None = None
    auth_file: str | None = None
    # ECR only: the ECR API's endpoint (default: AWS's, in the registry's region).
    ecr_endpoint_url: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> RegistryAuth:
        if self.named("username") != self.named("password"):
            raise ValueError("name both a username and a password")
        if self.named("username") and self.auth_file:
            raise ValueError("name either a username and password or an auth_file")
        return self


def _ecr_login(region: str, auth: RegistryAuth | None) -> tuple[str, str]:
    """ECR's registry login: a 12-hour token from GetAuthorizationToken, asked with the named AWS credentials."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.Session(**(auth.boto3_session_args() if auth else {}))
    try:
        client = session.client("ecr", region_name=region, endpoint_url=auth.ecr_endpoint_url if auth else None)
        token = client.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    except (BotoCoreError, ClientError) as exc:
        raise PermanentError(f"ECR in {region}: no registry token: {type(exc).__name__}") from None
    username, _, password = base64.b64decode(token).decode().partition(":")
    return username, password


def login(host: str, auth: RegistryAuth | None, resolve: Callable[[str], Path]) -> Login:
    """The username and password for host from what the plan names (None, None: the tools' defaults); resolve
    turns the plan's auth_file into a path."""
    if auth is not None and auth.named("username"):
        return auth.resolve("username"), auth.resolve("password")
    if auth is not None and auth.auth_file:
        path = resolve(auth.auth_file)
        try:
            entry = json.loads(path.read_text(encoding="utf-8")).get("auths", {}).get(host, {})
        except (OSError, ValueError) as exc:
            raise UsageError(f"phases.images.auth.{host}.auth_file: cannot read {path}: {exc}") from None
        username, _, password = base64.b64decode(entry.get("auth", "")).decode().partition(":")
        return username or None, password or None
    if ecr := ECR_HOST.match(host):
        return _ecr_login(ecr.group("region"), auth)
    return None, None


@contextlib.contextmanager
def authfile_option(logins: Mapping[str, Login]) -> Iterator[list[str]]:
    """The tools' --authfile option for the logins (a private file removed after), or nothing."""
    auths = {}
    for host, (username, password) in logins.items():
        if username and password:
            auths[host] = {"auth": base64.b64encode(f"{username}:{password}".encode()).decode()}
    if not auths:
        yield []
        return
    folder = Path(tempfile.mkdtemp(prefix="ferry-auth-"))
    try:
        file = folder / "auth.json"
        file.touch(mode=0o600)
        file.write_text(json.dumps({"auths": auths}), encoding="utf-8")
        yield ["--authfile", str(file)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
