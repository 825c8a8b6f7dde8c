"""The synthetic source and the null target: the null target passes the shared suite (reads refused), the
synthetic source lists and reads like a store and refuses writes, and `ferry sync` runs the real engine
between them as its own process."""

from __future__ import annotations

import json
import zlib

import pytest

from connectors.base import WriteSpec
from connectors.checksum import crc32c, label
from connectors.registry import open_connector
from connectors.synthetic import MIB, SyntheticConnector
from ferry.errors import NotFoundError, PermanentError, UsageError
from tests.connectors.conformance import ConnectorSuite
from tests.support import run_ferry


class TestNullConformance(ConnectorSuite):
    reads_back = False

    @pytest.fixture
    def connector(self):
        connector = open_connector("null://sink/p", {})
        connector.prepare_target(dry_run=False)
        return connector


def test_null_target_refuses_a_part_it_never_got() -> None:
    null = open_connector("null://sink", {})
    upload = null.begin("k", WriteSpec(), 4)
    part = null.put_part("k", upload, 1, b"abcd")
    forged = type(part)(2, 4, "made-up", crc32c(b"abcd"))
    with pytest.raises(PermanentError, match="part 2 was not uploaded"):
        null.complete("k", upload, [part, forged], WriteSpec())
    with pytest.raises(NotFoundError):
        null.put_part("k", "no-such-upload", 1, b"x")


def test_null_target_keeps_what_the_engine_checks_and_starts_empty() -> None:
    first, second = open_connector("null://sink", {}), open_connector("null://sink", {})
    written = first.put("a", b"12345", WriteSpec(checksum=label(crc32c(b"12345"))))
    assert [(i.key, i.size, i.signature, i.checksum) for i in first.list()] == [
        ("a", 5, written.signature, label(crc32c(b"12345")))
    ]
    assert list(second.list()) == []  # another connector (another process) sees nothing of it


def synthetic(url: str) -> SyntheticConnector:
    connector = open_connector(url, {})
    assert isinstance(connector, SyntheticConnector)
    return connector


def test_synthetic_lists_in_key_order_by_prefix_and_start() -> None:
    source = synthetic("synthetic://12x1K+3x2M+1x10")
    keys = [i.key for i in source.list()]
    assert keys == sorted(keys)
    assert len(keys) == source.objects == 16
    assert keys[:3] == ["10/0", "1K/00", "1K/01"]  # '/' sorts before every digit
    assert {i.key: i.size for i in source.list("2M/")} == {"2M/0": 2 * MIB, "2M/1": 2 * MIB, "2M/2": 2 * MIB}
    for prefix in ["", "1", "1K/", "1K/1", "1K/05", "2M", "zz"]:
        for after in ["", "10/0", "1K/05", "1K/11", "2M/0", "3"]:
            got = [i.key for i in source.list(prefix, after)]
            assert got == [k for k in keys if k.startswith(prefix) and k > after], (prefix, after)
    assert source.total_bytes == 12 * 1024 + 3 * 2 * MIB + 10


def test_synthetic_bytes_follow_seed_and_key_and_any_range_agrees() -> None:
    source = synthetic("synthetic://3x3M+2x100?seed=7")
    whole = source.get("3M/1")[0]
    assert len(whole) == 3 * MIB
    assert whole == synthetic("synthetic://3x3M+2x100?seed=7").open_range("3M/1", 0, 3 * MIB)
    assert whole != synthetic("synthetic://3x3M+2x100?seed=8").open_range("3M/1", 0, 3 * MIB)
    # A key's bytes follow from the seed and the key, whatever else the shape names (its signature is the seed's).
    assert whole == synthetic("synthetic://2x100+5x3M?seed=7").get("3M/1")[0]
    assert source.stat("3M/1").signature == synthetic("synthetic://5x3M?seed=7").stat("3M/1").signature
    for start, length in [(0, 1), (5, 30), (MIB - 7, 20), (MIB, MIB), (2 * MIB - 1, MIB + 1), (3 * MIB - 3, 99)]:
        assert source.open_range("3M/1", start, length) == whole[start : start + length], (start, length)
    chunks = {source.open_range(k, c * MIB, MIB) for k in ("3M/0", "3M/1", "3M/2") for c in range(3)}
    assert len(chunks) == 9  # no MiB repeats, within or across objects
    assert len(zlib.compress(whole)) > 0.99 * len(whole)
    assert source.open_range("100/0", 0, 100) != source.open_range("100/1", 0, 100)


@pytest.mark.parametrize("key", ["3M/3", "3M/01", "3M/", "4M/0", "100", "x"])
def test_synthetic_has_only_its_keys(key: str) -> None:
    with pytest.raises(NotFoundError):
        synthetic("synthetic://3x3M+2x100").stat(key)


def test_synthetic_source_refuses_writes_in_one_line() -> None:
    source = synthetic("synthetic://2x1K")
    writes = [
        lambda: source.put("k", b"x", WriteSpec()),
        lambda: source.delete("1K/0"),
        lambda: source.begin("k", WriteSpec(), 8),
        lambda: source.put_part("k", "u", 1, b"x"),
        lambda: source.complete("k", "u", [], WriteSpec()),
        lambda: source.abort("k", "u"),
    ]
    for write in writes:
        with pytest.raises(PermanentError) as refused:
            write()
        assert str(refused.value).count("\n") == 0 and "read-only" in str(refused.value)
    with pytest.raises(UsageError, match="read-only"):
        source.prepare_target(dry_run=False)
    assert list(source.list_incomplete()) == []


def assert_one_line_usage_error(done: tuple[int, str, str], *needles: str) -> None:
    code, out, err = done
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("synthetic://", "no bucket"),
        ("synthetic://x64K", "not COUNTxSIZE"),
        ("synthetic://2000", "not COUNTxSIZE"),
        ("synthetic://10x0", "not a positive size"),
        ("synthetic://10xlots", "not a size"),
        ("synthetic://0x1K", "count must be positive"),
        ("synthetic://10x1K+5x1024", "one size"),
        ("synthetic://10x1K/sub", "no path"),
        ("synthetic://10x1K?seed=abc", "seed=N"),
        ("synthetic://10x1K?size=3", "seed=N"),
    ],
)
def test_bad_synthetic_urls_are_one_line_exit_2(tmp_path, url: str, why: str) -> None:
    done = run_ferry("sync", url, "null://sink", "--state-dir", str(tmp_path / "state"))
    assert_one_line_usage_error(done, url, why)


def test_bad_null_url_and_synthetic_target_are_one_line_exit_2(tmp_path) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    assert_one_line_usage_error(run_ferry("sync", "synthetic://2x1K", "null://sink?keep=1", *state), "null://sink?keep")
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path), "synthetic://2x1K", *state), "read-only")


def test_ferry_sync_runs_the_engine_from_synthetic_into_null(tmp_path) -> None:
    report = tmp_path / "report.json"
    url = "synthetic://300x4K+3x20M?seed=5"  # 20M: above the 16M multipart threshold, three 8M parts each
    code, out, err = run_ferry(
        "sync", url, "null://sink", "--no-progress", "--state-dir", str(tmp_path / "state"), "--report", str(report)
    )
    assert code == 0, (out, err)
    done = json.loads(report.read_text())
    assert done["summary"]["objects"]["copied"] == 303
    assert done["summary"]["bytes"]["copied"] == 300 * 4096 + 3 * 20 * MIB
    assert done["gate"]["status"] == "PASS"
    assert done["gate"]["measured"]["verified_by_state"] == 303


def test_synthetic_bytes_land_as_generated(tmp_path) -> None:
    url = "synthetic://20x4K+1x20M?seed=3"
    code, out, err = run_ferry("sync", url, str(tmp_path / "dst"), "--no-progress", "--state-dir", str(tmp_path / "s"))
    assert code == 0, (out, err)
    source = synthetic(url)
    landed = sorted(str(p.relative_to(tmp_path / "dst")) for p in (tmp_path / "dst").rglob("*") if p.is_file())
    assert landed == [i.key for i in source.list()]
    for key in landed:
        assert (tmp_path / "dst" / key).read_bytes() == source.get(key)[0], key
