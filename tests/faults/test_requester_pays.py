"""A Requester Pays bucket (the profile's `requester_pays: true`): every request that can say so says the requester
pays (x-amz-request-payer), by botocore and by the CRT, reads, writes, listings and copies from it; through a proxy
in front of moto that keeps the bucket Requester Pays as S3 does (moto 5.2.5 does not): a request without the
header is refused."""

from __future__ import annotations

import dataclasses

import pytest

from ferry.errors import PermanentError
from ferry.profiles import Profile
from ferry.sync import run_sync
from tests.faults.proxy import FaultProxy
from tests.faults.test_lying_store import SETTINGS, Store, make_source

PAYER = "x-amz-request-payer"


@pytest.fixture
def s3(moto_env) -> Store:
    return Store("s3", moto_env)


def _profile(proxy: FaultProxy, client: str, **settings) -> Profile:
    return Profile(type="s3", endpoint_url=proxy.endpoint, min_part_size=256 << 10, transfer_client=client, **settings)


@pytest.mark.parametrize("client", ["crt", "botocore"])
def test_every_request_to_a_requester_pays_bucket_says_the_requester_pays(s3: Store, tmp_path, client) -> None:
    files = make_source(tmp_path / "src")
    bucket = s3.new_place()
    with FaultProxy(s3.server.port, requester_pays=bucket) as proxy:
        # Without requester_pays, the bucket refuses every request of its objects: its listing first.
        with pytest.raises(PermanentError, match="AccessDenied"):
            run_sync(str(tmp_path / "src"), f"payer://{bucket}/p", SETTINGS,
                     profiles={"payer": _profile(proxy, client)}, state_dir=tmp_path / "no")  # fmt: skip
        assert s3.held(bucket) == {}
        unpaid = {method: proxy.headers[(method, "host")] for method in ("GET", "PUT", "POST", "HEAD")}
        assert not any(proxy.headers[(method, PAYER)] for method in unpaid)
        profiles = {"payer": _profile(proxy, client, requester_pays=True)}
        # Into the bucket (PUTs, a multipart upload, listings, HEADs), then out of it (GETs).
        into = run_sync(str(tmp_path / "src"), f"payer://{bucket}/p", SETTINGS, profiles=profiles,
                        state_dir=tmp_path / "in")  # fmt: skip
        out = run_sync(f"payer://{bucket}/p", str(tmp_path / "back"), SETTINGS, profiles=profiles,
                       state_dir=tmp_path / "out")  # fmt: skip
    assert into.ok and out.ok, (into.stats.failures, out.stats.failures)
    assert {p.relative_to(tmp_path / "back").as_posix(): p.read_bytes() for p in (tmp_path / "back").rglob("*")
            if p.is_file()} == files  # fmt: skip
    for method in ("GET", "PUT", "POST"):
        paid = proxy.headers[(method, "host")] - unpaid[method]
        assert proxy.headers[(method, PAYER)] == paid >= 1, method
    # Every HEAD of an object; not the HEAD of the bucket each connector opens with (HeadBucket takes no payer).
    assert 1 <= proxy.headers[("HEAD", PAYER)] < proxy.headers[("HEAD", "host")] - unpaid["HEAD"]


def test_a_copy_from_a_requester_pays_bucket_says_the_requester_pays(s3: Store, tmp_path) -> None:
    files = make_source(tmp_path / "src")
    source, target = s3.new_place(), s3.new_place()
    with FaultProxy(s3.server.port, requester_pays=source) as proxy:
        profiles = {"payer": _profile(proxy, "botocore", requester_pays=True), "owner": _profile(proxy, "botocore")}
        run_sync(str(tmp_path / "src"), f"payer://{source}/p", SETTINGS, profiles=profiles, state_dir=tmp_path / "a")
        written = proxy.headers[("PUT", PAYER)]
        # The same endpoint and credentials: the store copies (CopyObject, UploadPartCopy) from the payer's bucket.
        settings = dataclasses.replace(SETTINGS, copy_threshold=1 << 20)  # the large one by parts
        copied = run_sync(f"payer://{source}/p", f"owner://{target}/p", settings, profiles=profiles,
                          state_dir=tmp_path / "b")  # fmt: skip
    assert copied.ok and copied.stats.bytes_server_side > 0, copied.stats.failures
    assert s3.held(target) == files
    assert proxy.headers[("PUT", "x-amz-copy-source")] >= 3
    # Each copy says the requester pays (the target's own requests, an upload's begin and commit, need not).
    assert proxy.headers[("PUT", PAYER)] - written == proxy.headers[("PUT", "x-amz-copy-source")]
