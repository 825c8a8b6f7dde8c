"""S3 connector: the shared suite against moto's real S3 server, plus S3-only behaviour."""

from __future__ import annotations

import os
import uuid

import boto3
import pytest

from connectors.base import WriteSpec
from connectors.registry import open_connector
from connectors.s3 import PROBE_KEY, S3Connector
from ferry.errors import PermanentError, UsageError
from ferry.profiles import Credentials, Profile
from tests.connectors.conformance import ConnectorSuite


def new_bucket(endpoint: str) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


class TestS3Conformance(ConnectorSuite):
    @pytest.fixture
    def connector(self, moto_env):
        connector = open_connector(f"s3://{new_bucket(moto_env.endpoint)}/root/prefix", {})
        connector.check()
        yield connector
        connector.close()


class TestS3ConformanceBotocore(ConnectorSuite):
    """The same suite with every request botocore's (transfer_client botocore: no awscrt, or a proxy)."""

    @pytest.fixture
    def connector(self, moto_env):
        profile = Profile(type="s3", endpoint_url=moto_env.endpoint, transfer_client="botocore")
        connector = open_connector(f"moto://{new_bucket(moto_env.endpoint)}/root/prefix", {"moto": profile})
        assert connector._crt is None and connector.body_copies() == 1
        connector.check()
        yield connector
        connector.close()


def test_object_bytes_go_by_the_crt_where_awscrt_is_installed(moto_env) -> None:
    connector = open_connector(f"s3://{new_bucket(moto_env.endpoint)}", {})
    assert connector._crt is not None and connector._crt.host == moto_env.endpoint.removeprefix("http://")
    assert connector._crt.prefix == f"/{connector.bucket}/"  # moto's endpoint: path style, as botocore addresses it
    by_botocore = []
    put_object = connector.client.put_object
    connector.client.put_object = lambda **kw: by_botocore.append(kw["Key"]) or put_object(**kw)
    for n in range(3):
        connector.put(f"k{n} ü+%", b"x" * n, WriteSpec(content_type="text/plain", metadata={"team": "ml"}))
    assert by_botocore == [], "botocore's HEAD of the bucket proves the endpoint and its region; the CRT writes"
    assert connector.body_copies() == 2  # the CRT's own copy of each body it sends, beside ferry's
    for n in range(3):
        info = connector.stat(f"k{n} ü+%")
        assert (info.size, info.content_type, info.metadata) == (n, "text/plain", {"team": "ml"})


def test_a_bucket_in_another_region_than_the_clients_is_left_to_botocore(moto_env) -> None:
    bucket = new_bucket(moto_env.endpoint)  # in us-east-1
    elsewhere = Profile(type="s3", endpoint_url=moto_env.endpoint, region="eu-west-1")
    auto = open_connector(f"moto://{bucket}", {"moto": elsewhere})
    auto.check()
    assert auto._crt is not None and not auto._by_crt()  # botocore follows the bucket to its region; the CRT cannot
    auto.put("k", b"abc", WriteSpec())
    assert [i.key for i in auto.list()] == ["k"]
    crt = open_connector(f"moto://{bucket}", {"moto": elsewhere.model_copy(update={"transfer_client": "crt"})})
    with pytest.raises(UsageError, match="the bucket is in us-east-1, the client signs for eu-west-1: set the"):
        crt.check()


def test_transfer_client_crt_that_cannot_be_is_one_line(moto_env, monkeypatch) -> None:
    profile = Profile(type="s3", endpoint_url=moto_env.endpoint, transfer_client="crt")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    with pytest.raises(UsageError, match=r"transfer_client crt: a proxy \(http://proxy.example:3128\) is set"):
        open_connector("moto://bucket", {"moto": profile})
    # auto leaves the bytes to botocore, which uses the proxy
    auto = profile.model_copy(update={"transfer_client": "auto"})
    assert open_connector("moto://bucket", {"moto": auto})._crt is None
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setattr("connectors.s3_crt.available", lambda: False)
    with pytest.raises(UsageError, match="transfer_client crt: awscrt is not installed"):
        open_connector("moto://bucket", {"moto": profile})


def test_aws_endpoint_env_is_honoured(moto_env) -> None:
    connector = open_connector(f"s3://{new_bucket(moto_env.endpoint)}", {})
    assert isinstance(connector, S3Connector)
    assert connector.endpoint == moto_env.endpoint


def test_profile_alias_with_env_credentials(moto_env, monkeypatch) -> None:
    bucket = new_bucket(moto_env.endpoint)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("META_KEY", "testing")
    monkeypatch.setenv("META_SECRET", "testing")
    profile = Profile(
        type="s3",
        endpoint_url=moto_env.endpoint,
        region="eu-frankfurt-1",
        credentials=Credentials(access_key_id_env="META_KEY", secret_access_key_env="META_SECRET"),
    )
    connector = open_connector(f"meta://{bucket}/datasets", {"meta": profile})
    connector.put("x", b"abc", WriteSpec())
    direct = boto3.client("s3", endpoint_url=moto_env.endpoint, region_name="us-east-1")
    assert direct.get_object(Bucket=bucket, Key="datasets/x")["Body"].read() == b"abc"


def test_profile_naming_unset_env_is_usage_error(moto_env) -> None:
    profile = Profile(type="s3", credentials=Credentials(access_key_id_env="FERRY_NOT_SET_ANYWHERE"))
    with pytest.raises(UsageError, match=r"\$FERRY_NOT_SET_ANYWHERE"):
        open_connector("meta://bucket", {"meta": profile})


@pytest.mark.parametrize("region", ["us-east-1", None])
def test_an_aws_profile_that_does_not_exist_is_one_line_naming_it(moto_env, monkeypatch, tmp_path, region) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))  # no profiles at all
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    if region is None:
        monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    profile = Profile(type="s3", endpoint_url=moto_env.endpoint, credentials=Credentials(aws_profile="no-such"))
    with pytest.raises(UsageError, match="no-such") as caught:
        open_connector("named://bucket", {"named": profile})
    assert "\n" not in str(caught.value)


def test_missing_bucket_is_usage_error(moto_env) -> None:
    connector = open_connector("s3://no-such-bucket-here", {})
    with pytest.raises(UsageError, match="does not exist"):
        connector.check()


def test_missing_credentials_is_usage_error(moto_env, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    connector = open_connector("s3://some-bucket", {})
    with pytest.raises(UsageError, match="no AWS credentials"):
        connector.check()


def test_server_side_copy_needs_no_bytes(moto_env) -> None:
    src = open_connector(f"s3://{new_bucket(moto_env.endpoint)}/a", {})
    dst = open_connector(f"s3://{new_bucket(moto_env.endpoint)}/b", {})
    data = os.urandom(600 * 1024)
    src.put("obj", data, WriteSpec(content_type="text/plain", metadata={"m": "1"}, checksum="crc32c:01020304"))
    assert dst.can_copy_from(src)
    info = next(src.list())
    dst.copy_from(src, info, "copied")
    stat = dst.stat("copied")
    assert (stat.size, stat.checksum, stat.metadata, stat.content_type) == (
        len(data),
        "crc32c:01020304",
        {"m": "1"},
        "text/plain",
    )
    upload = dst.begin("parts", WriteSpec(), 256 * 1024)
    parts = [
        dst.copy_part_from(
            src, info, "parts", upload, n, (n - 1) * 256 * 1024, min(256 * 1024, len(data) - (n - 1) * 256 * 1024)
        )
        for n in (1, 2, 3)
    ]
    dst.complete("parts", upload, parts, WriteSpec())
    assert dst.open_range("parts", 0, len(data)) == data


def test_a_listing_by_the_crt_pages_and_decodes_keys_as_botocores(moto_env) -> None:
    fast = open_connector(f"s3://{new_bucket(moto_env.endpoint)}/r", {})
    fast.check()
    keys = [f"k/{n:04d}" for n in range(1003)] + ["k/a b+c", "k/%41", "k/\x01ctl", "k/ü/é", "k//x", "k/./y"]
    for key in keys:
        fast.put(key, b"", WriteSpec())
    slow = open_connector(f"moto://{fast.bucket}/r", {"moto": Profile(type="s3", endpoint_url=moto_env.endpoint,
                                                                        transfer_client="botocore")})  # fmt: skip
    assert fast._by_crt() and not slow._by_crt()
    for prefix, after in (("", ""), ("k/", "k/0999"), ("k/0", ""), ("nothing", "")):
        listed = list(fast.list(prefix, after))
        assert listed == list(slow.list(prefix, after))
    assert [i.key for i in fast.list()] == sorted(keys)


@pytest.mark.parametrize("client", ["crt", "botocore"])
def test_no_listing_shows_the_receipt_probes_key_at_the_root(moto_env, client: str) -> None:
    bucket = new_bucket(moto_env.endpoint)
    for key in (f"r/{PROBE_KEY}", "r/a", f"r/sub/{PROBE_KEY}", f"{PROBE_KEY}"):
        moto_env.client("s3").put_object(Bucket=bucket, Key=key, Body=b"x")
    profile = Profile(type="s3", endpoint_url=moto_env.endpoint, transfer_client=client)
    connector = open_connector(f"moto://{bucket}/r", {"moto": profile})
    assert connector._by_crt() == (client == "crt")
    # Only the name at the connector's root is ferry's.
    assert [info.key for info in connector.list()] == ["a", f"sub/{PROBE_KEY}"]


@pytest.mark.parametrize("client", ["crt", "botocore"])
def test_metadata_not_in_us_ascii_is_written_rfc2047_encoded_by_either_client_and_read_back_as_it_was(
    moto_env, client
) -> None:  # fmt: skip
    """botocore refuses such a value and the CRT would send it raw: both send what S3 documents (RFC 2047)."""
    profile = Profile(type="s3", endpoint_url=moto_env.endpoint, transfer_client=client)
    connector = open_connector(f"moto://{new_bucket(moto_env.endpoint)}", {"moto": profile})
    connector.check()
    assert connector._by_crt() == (client == "crt")
    written = {"title": "ACME™ Anvil", "team": "ml", "long": "é" * 80}
    connector.put("k", b"data", WriteSpec(metadata=written))
    stored = boto3.client("s3", endpoint_url=moto_env.endpoint).head_object(Bucket=connector.bucket, Key="k")
    assert stored["Metadata"]["title"] == "=?utf-8?q?ACME=E2=84=A2_Anvil?="
    assert stored["Metadata"]["team"] == "ml"
    assert connector.stat("k").metadata == written
    with pytest.raises(PermanentError, match="user metadata name 'título' is not US-ASCII"):
        connector.put("k2", b"data", WriteSpec(metadata={"título": "x"}))


def test_static_credentials_are_given_to_the_crt_once_and_refreshable_ones_at_each_signing(moto_env, monkeypatch):
    import datetime

    import botocore.credentials
    import botocore.session

    asked: list[str] = []

    def counted(cls):
        class Counted(cls):
            def get_frozen_credentials(self):
                asked.append(cls.__name__)
                return super().get_frozen_credentials()

        return Counted

    static = counted(botocore.credentials.Credentials)("testing", "testing")
    monkeypatch.setattr(botocore.session.Session, "get_credentials", lambda self: static)
    connector = open_connector(f"s3://{new_bucket(moto_env.endpoint)}", {})
    connector.put("first", b"x", WriteSpec())  # botocore's own requests before it (the bucket's HEAD, the probe)
    asked.clear()
    for n in range(3):
        connector.put(f"s{n}", b"x", WriteSpec())
    assert connector._crt is not None and asked == [], "given to the CRT's client when it was made"

    expiry = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    metadata = {"access_key": "testing", "secret_key": "testing", "token": None, "expiry_time": expiry}
    refreshable = counted(botocore.credentials.RefreshableCredentials).create_from_metadata(
        metadata, refresh_using=lambda: metadata, method="test"
    )
    monkeypatch.setattr(botocore.session.Session, "get_credentials", lambda self: refreshable)
    connector = open_connector(f"s3://{new_bucket(moto_env.endpoint)}", {})
    connector.put("first", b"x", WriteSpec())
    asked.clear()
    for n in range(3):
        connector.put(f"r{n}", b"x", WriteSpec())
    assert connector._crt is not None and len(asked) >= 3, "asked at every signing"
    assert set(asked) == {"RefreshableCredentials"}
    assert {info.key for info in connector.list()} == {"first", "r0", "r1", "r2"}
