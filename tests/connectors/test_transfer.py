"""The engine's pure parts: the diff, part sizing, latency quantiles, CRC32C combination. No network."""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
from pathlib import Path

import pytest

from connectors.base import Capabilities, GiB, MiB, ObjectInfo, Part
from connectors.checksum import CRCS, combine_parts, crc32c, md5_hex, to_b64
from connectors.registry import open_connector
from connectors.transfer import (
    COMPARE,
    COPY,
    DELETE,
    SKIP,
    LatencyHistogram,
    ObjectRecord,
    Stats,
    TransferSettings,
    diff,
    part_size_for,
)
from connectors.transfer.retry import Recopy
from connectors.transfer.route import Route, Upload
from ferry.errors import PermanentError


def info(key: str, size: int = 1, sig: str = "s") -> ObjectInfo:
    return ObjectInfo(key=key, size=size, signature=sig)


def kinds(source, target, records=(), **settings) -> dict[str, str]:
    return {a.key: a.kind for a in diff(iter(source), iter(target), iter(records), TransferSettings(**settings))}


def test_diff_merge_joins_in_key_order() -> None:
    source = [info("a"), info("b", 2), info("c"), info("d")]
    target = [info("b", 3), info("c", 1, "t"), info("e")]
    records = [ObjectRecord("c", 1, "s", "t", "crc32c:00000000")]
    assert kinds(source, target, records) == {"a": COPY, "b": COPY, "c": SKIP, "d": COPY, "e": SKIP}
    assert kinds(source, target, records, delete=True)["e"] == DELETE


def test_diff_without_record_compares_and_with_changed_signatures_copies() -> None:
    record = ObjectRecord("k", 1, "s", "t", None)
    assert kinds([info("k")], [info("k", sig="t")]) == {"k": COMPARE}
    assert kinds([info("k")], [info("k", sig="t2")], [record]) == {"k": COPY}
    assert kinds([info("k", sig="s2")], [info("k", sig="t")], [record]) == {"k": COPY}
    assert kinds([info("k")], [info("k", sig="t")], [record], checksum=True) == {"k": COMPARE}


def test_diff_filters_and_stale_records_do_not_leak() -> None:
    records = [ObjectRecord("a", 1, "s", "t", None), ObjectRecord("zz", 1, "s", "t", None)]
    got = kinds([info("a"), info("x.tmp"), info("y")], [info("a", sig="t")], records, exclude=("*.tmp",))
    assert got == {"a": SKIP, "y": COPY}


def test_diff_refuses_unordered_listings() -> None:
    with pytest.raises(PermanentError, match="out of key order"):
        kinds([info("b"), info("a")], [])


def test_part_size_fits_the_target_limits() -> None:
    caps = Capabilities(min_part_size=5 * MiB, max_part_size=5 * GiB, max_parts=10_000)

    class Target:
        capabilities = caps

    settings = TransferSettings(part_size=8 * MiB)
    assert part_size_for(100 * MiB, settings, Target()) == 8 * MiB
    assert part_size_for(1024 * GiB, settings, Target()) == 105 * MiB  # 10,000 parts at most
    assert part_size_for(10 * MiB, TransferSettings(part_size=1 * MiB), Target()) == 5 * MiB
    with pytest.raises(PermanentError):
        part_size_for(60_000 * GiB, settings, Target())


def test_latency_quantiles_are_close() -> None:
    hist = LatencyHistogram()
    for ms in range(1, 1001):
        hist.add(ms / 1000)
    assert hist.quantile(0.5) == pytest.approx(0.5, rel=0.06)
    assert hist.quantile(0.99) == pytest.approx(0.99, rel=0.06)
    assert LatencyHistogram().quantile(0.5) is None


def test_crc32c_combines_parts_in_any_split() -> None:
    data = os.urandom(100_000)
    for cut in (0, 1, 4096, 99_999):
        parts = [data[:cut], data[cut:]]
        assert combine_parts([(crc32c(p), len(p)) for p in parts]) == crc32c(data)


def test_retry_waits_honour_retry_after_and_only_transient_errors_retry() -> None:
    from tenacity import RetryCallState

    from connectors.transfer import retrying
    from ferry.errors import TransientError

    policy = retrying(TransferSettings(retries=3, retry_base_s=0.01, retry_max_s=0.05))
    state = RetryCallState(policy, None, (), {})
    error = TransientError("slow down", code="SlowDown", retry_after=7.0)
    state.set_exception((TransientError, error, None))
    assert policy.wait(state) == 7.0
    state.set_exception((TransientError, TransientError("reset"), None))
    assert policy.wait(state) <= 0.05

    calls = []

    def denied() -> None:
        calls.append(1)
        raise PermanentError("403", code="AccessDenied")

    with pytest.raises(PermanentError):
        policy.copy()(denied)
    assert len(calls) == 1

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError("503", code="SlowDown")
        return "done"

    calls.clear()
    assert policy.copy()(flaky) == "done" and len(calls) == 3


def test_local_only_routes_use_fewer_threads_network_routes_all() -> None:
    from connectors.transfer import effective_threads

    class Disk:
        capabilities = Capabilities(useful_threads=8)

    class Network:
        capabilities = Capabilities()

    assert effective_threads(128, Disk(), Disk()) == 8
    assert effective_threads(4, Disk(), Disk()) == 4
    assert effective_threads(128, Disk(), Network()) == 128
    assert effective_threads(128, Network(), Disk()) == 128


def test_passwords_in_urls_never_reach_messages() -> None:
    from connectors.base import redact_url
    from connectors.registry import open_connector

    assert redact_url("sftp://ops:hunter2@host:22/data") == "sftp://ops:***@host:22/data"
    assert redact_url("s3://bucket/a@b:c") == "s3://bucket/a@b:c"
    assert redact_url("./local/path") == "./local/path"
    assert open_connector("memory://ops:hunter2@bucket/x", {}).url == "memory://ops:***@bucket/x"


class FlakyListing:
    """A listing that fails transiently after yielding a given number of objects, once per entry of fail_after."""

    def __init__(self, count: int, fail_after: list[int]):
        self.keys = [f"k{i:05d}" for i in range(count)]
        self.fail_after = list(fail_after)
        self.started_after: list[str] = []

    def list(self, prefix: str = "", start_after: str = ""):
        from ferry.errors import TransientError

        self.started_after.append(start_after)
        limit = self.fail_after.pop(0) if self.fail_after else None
        for served, key in enumerate(k for k in self.keys if k > start_after):
            if served == limit:
                raise TransientError("connection reset", code="Reset")
            yield info(key)


def test_listing_resumes_after_the_last_key_under_the_retry_policy() -> None:
    from connectors.transfer import listing

    settings = TransferSettings(retries=3, retry_base_s=0.001, retry_max_s=0.002)
    flaky = FlakyListing(2500, fail_after=[5, 0, 1200])
    retries = []
    keys = [i.key for i in listing(flaky, settings, on_retry=lambda: retries.append(1))]
    assert keys == flaky.keys
    assert flaky.started_after == ["", "k00004", "k00004", "k01204"]
    assert len(retries) == 3


def test_listing_gives_each_batch_all_its_attempts_and_then_gives_up() -> None:
    from connectors.transfer import listing
    from ferry.errors import TransientError

    settings = TransferSettings(retries=2, retry_base_s=0.001, retry_max_s=0.002)
    # One failure per batch of a thousand: progress between failures keeps the listing going.
    assert [i.key for i in listing(FlakyListing(3000, [1000, 1000]), settings)] == FlakyListing(3000, []).keys
    retries = []
    with pytest.raises(TransientError):
        list(listing(FlakyListing(10, [0, 0, 0]), settings, on_retry=lambda: retries.append(1)))
    assert len(retries) == 1


class GatedListing:
    """A listing whose second batch may be served only once `release` is set; it records what it served."""

    def __init__(self, count: int):
        self.keys = [f"k{i:05d}" for i in range(count)]
        self.asked_for_more = threading.Event()
        self.release = threading.Event()
        self.served = 0
        self.context: list[str] = []
        self.threads: list[threading.Thread] = []

    def list(self, prefix: str = "", start_after: str = ""):
        self.context.append(RUN.get())
        self.threads.append(threading.current_thread())
        for key in (k for k in self.keys if k > start_after):
            if self.served == 1000:
                self.asked_for_more.set()
                assert self.release.wait(30), "never released"
            self.served += 1
            yield info(key)


RUN = contextvars.ContextVar("run", default="-")


def test_a_listing_lists_its_next_batch_while_the_caller_uses_this_one() -> None:
    from connectors.transfer import listing

    gated = GatedListing(2500)
    token = RUN.set("run-7")
    try:
        keys = listing(gated, TransferSettings())
        assert next(keys).key == "k00000"
    finally:
        RUN.reset(token)
    # Nobody asked for the 1001st key: the listing went on in its own thread, in the caller's context (bound log
    # fields reach its retry lines).
    assert gated.asked_for_more.wait(30)
    assert gated.context == ["run-7"]
    gated.release.set()
    assert [i.key for i in keys] == gated.keys[1:]


def test_a_listing_dropped_half_way_stops_listing() -> None:
    from connectors.transfer import listing

    gated = GatedListing(5000)
    keys = listing(gated, TransferSettings())
    assert next(keys).key == "k00000"
    assert gated.asked_for_more.wait(30)
    keys.close()
    gated.release.set()
    (thread,) = gated.threads
    thread.join(30)  # it finishes the batch it was listing, then sees nobody wants it
    assert not thread.is_alive()
    assert gated.served == 2000  # the batch in hand and the one read ahead; not one more


def test_a_listing_dropped_while_it_waits_to_retry_sends_nothing_more() -> None:
    from connectors.transfer import listing

    # The second batch fails, and its retry would wait a minute.
    flaky = FlakyListing(2500, fail_after=[1000])
    waiting: list[threading.Thread] = []
    backoff = threading.Event()
    settings = TransferSettings(retries=5, retry_base_s=60, retry_max_s=60)
    keys = listing(flaky, settings, on_retry=lambda: (waiting.append(threading.current_thread()), backoff.set()))
    assert next(keys).key == "k00000"
    assert backoff.wait(30)
    keys.close()
    (thread,) = waiting
    thread.join(30)
    assert not thread.is_alive()
    assert flaky.started_after == [""]  # no attempt after it was dropped


def test_a_sampled_dry_run_lists_nothing_ahead() -> None:
    from connectors.transfer import listing

    gated = GatedListing(2500)
    keys = listing(gated, TransferSettings(dry_run=True, sample=10))
    assert [next(keys).key for _ in range(10)] == gated.keys[:10]
    keys.close()
    assert gated.served == 1000 and not gated.asked_for_more.is_set()


def test_a_listing_raises_its_error_after_the_objects_listed_before_it() -> None:
    from connectors.transfer import listing
    from ferry.errors import TransientError

    settings = TransferSettings(retries=1)
    seen = []
    with pytest.raises(TransientError):
        for item in listing(FlakyListing(2500, [1500]), settings):
            seen.append(item.key)
    assert seen == FlakyListing(2500, []).keys[:1000]  # the batch before the failing one, all of it


def test_a_listing_with_a_range_end_asks_for_nothing_past_it() -> None:
    from connectors.transfer import listing

    gated = GatedListing(5000)
    keys = [i.key for i in listing(gated, TransferSettings(end_at="k00010"))]
    assert keys == gated.keys[:11]
    assert gated.served == 1000 and not gated.asked_for_more.is_set()


def test_a_checksum_mismatch_is_copied_once_more_and_a_second_one_fails() -> None:
    from connectors.transfer.retry import Recopy
    from ferry.errors import ChecksumMismatch

    recopied = []
    recopy = Recopy(on_recopy=lambda: recopied.append(1))
    outcomes = [ChecksumMismatch("MD5 differs"), "copied"]

    def copy() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert recopy.run("k", copy) == "copied" and len(recopied) == 1
    outcomes[:] = [ChecksumMismatch("first"), ChecksumMismatch("second"), "never"]
    with pytest.raises(ChecksumMismatch, match="second"):
        recopy.run("k", copy)
    assert len(recopied) == 2 and outcomes == ["never"]
    # An attempt that is not the first gets no other: what the large-object path asks.
    assert recopy.again(2, "k", ChecksumMismatch("late")) is False and len(recopied) == 2


def test_a_listed_part_the_state_did_not_record_is_kept_only_where_the_store_proves_it(tmp_path: Path) -> None:
    """A resumed upload's parts the store lists beyond the state's record (route.adopt_part): one with the store's
    CRC32C is kept as listed; a streamed one whose ETag is the MD5 of the source's bytes at its span is kept (read
    again, not sent again); a wrong size or an ETag that is no such MD5 (SSE-KMS, another body) is sent again."""
    data = os.urandom(10_240)  # in parts of 4,096
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "blob").write_bytes(data)
    source = open_connector(str(tmp_path / "src"), {})
    target = open_connector(str(tmp_path / "dst"), {})
    stats = Stats()
    route = Route(source, target, TransferSettings(), stats, lambda fn, *a, **k: fn(*a, **k), Recopy(lambda: None))
    upload = Upload("blob", source.stat("blob"), 4096, "stream", upload_id="u")
    second = data[4096:8192]

    listed = Part(number=2, size=4096, etag="not-an-md5", crc32c=crc32c(second))
    assert route.adopt_part(upload, listed) is listed and stats.bytes_read == 0
    proven = route.adopt_part(upload, Part(number=2, size=4096, etag=md5_hex(second), crc32c=None))
    assert proven == Part(number=2, size=4096, etag=md5_hex(second), crc32c=crc32c(second))
    assert stats.bytes_read == 4096
    assert route.adopt_part(upload, Part(number=2, size=4096, etag=md5_hex(data[:4096]), crc32c=None)) is None
    assert route.adopt_part(upload, Part(number=3, size=4096, etag=md5_hex(data[8192:]), crc32c=None)) is None
    last = data[8192:]
    assert route.adopt_part(upload, Part(number=3, size=len(last), etag=md5_hex(last), crc32c=None)) is not None
    copied = Upload("blob", upload.info, 4096, "server", upload_id="u")
    assert route.adopt_part(copied, Part(number=2, size=4096, etag=md5_hex(second), crc32c=None)) is None


def test_a_streamed_part_costs_the_budget_every_copy_of_it_the_write_holds(tmp_path: Path) -> None:
    """The CRT keeps its own copy of each body it sends (S3Connector.body_copies): a part sent through it holds
    twice its size of the memory budget; a part the store copies itself holds none."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "blob").write_bytes(b"x" * 100)
    source = open_connector(str(tmp_path / "src"), {})
    info = source.stat("blob")
    assert Upload("blob", info, 8 * MiB, "stream", copies=2).part_cost == 16 * MiB
    assert Upload("blob", info, 8 * MiB, "stream").part_cost == 8 * MiB
    assert Upload("blob", info, 8 * MiB, "server", copies=2).part_cost == 0
    assert source.body_copies() == 1


def test_an_upload_not_held_to_the_checksum_its_source_holds_says_why(tmp_path: Path) -> None:
    """A SHA-256 cannot be made from parallel parts (read_in_parts); a CRC64NVME whose early parts an earlier run sent
    has no sums for them (resumed_parts); with every part's sum it is held; a source holding nothing says nothing."""
    data = os.urandom(8192)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "blob").write_bytes(data)
    source = open_connector(str(tmp_path / "src"), {})
    route = Route(source, open_connector(str(tmp_path / "dst"), {}), TransferSettings(), Stats(),
                  lambda fn, *a: fn(*a), Recopy(lambda: None))  # fmt: skip
    parts = [Part(number=1, size=4096, etag="e1", crc32c=None), Part(number=2, size=4096, etag="e2", crc32c=None)]
    info = source.stat("blob")
    sha = dataclasses.replace(info, digests={"sha256": "x"})
    assert route.held_upload(Upload("blob", sha, 4096, "stream"), parts, None) == (None, "read_in_parts")
    crc = CRCS["crc64nvme"]
    whole = dataclasses.replace(info, digests={"crc64nvme": to_b64(crc.compute(data, 0), crc.width)})
    resumed = Upload("blob", whole, 4096, "stream", check="crc64nvme", sums={2: crc.compute(data[4096:], 0)})
    assert route.held_upload(resumed, parts, None) == (None, "resumed_parts")
    resumed.sums[1] = crc.compute(data[:4096], 0)
    assert route.held_upload(resumed, parts, None) == ("crc64nvme", None)
    assert route.held_upload(Upload("blob", info, 4096, "stream"), parts, None) == (None, None)
