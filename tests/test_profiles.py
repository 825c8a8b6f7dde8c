"""Credentials name their secrets, one reference type for all of them (ferry/profiles.py)."""

from __future__ import annotations

import pytest

from ferry.errors import UsageError
from ferry.images.auth import RegistryAuth
from ferry.profiles import Credentials, SecretRef


def test_the_secrets_credentials_can_name_come_from_their_fields() -> None:
    assert Credentials.secret_names() == (
        "access_key_id",
        "secret_access_key",
        "session_token",
        "connection_string",
        "account_key",
        "sas_token",
        "sse_customer_key",
    )
    assert RegistryAuth.secret_names() == (*Credentials.secret_names(), "username", "password")


@pytest.mark.parametrize("model", [Credentials, RegistryAuth])
def test_a_secret_named_twice_is_refused_whatever_the_credentials(model) -> None:
    name = model.secret_names()[-1]
    with pytest.raises(ValueError, match=f"{name}: name an environment variable or a Prefect Secret block, not both"):
        model(**{f"{name}_env": "A", f"{name}_secret": "b"})


def test_a_reference_says_where_a_secret_comes_from_and_never_what_it_is(monkeypatch) -> None:
    monkeypatch.setenv("META_SECRET", "s3cr3t-value")
    credentials = Credentials(secret_access_key_env="META_SECRET", session_token_secret="meta-token")
    refs = credentials.refs()
    assert refs == [
        SecretRef("secret_access_key", env="META_SECRET"),
        SecretRef("session_token", block="meta-token"),
    ]
    assert [str(r) for r in refs] == ["$META_SECRET", "Prefect Secret block 'meta-token'"]
    assert [r.field for r in refs] == ["secret_access_key_env", "session_token_secret"]
    assert "s3cr3t" not in repr(refs) + str(refs)
    assert credentials.resolve("secret_access_key") == "s3cr3t-value"
    assert credentials.resolve("access_key_id") is None
    monkeypatch.delenv("META_SECRET")
    with pytest.raises(UsageError, match=r"credentials.secret_access_key_env names \$META_SECRET, which is not set"):
        credentials.resolve("secret_access_key")
