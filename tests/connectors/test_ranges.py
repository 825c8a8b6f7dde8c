"""Key ranges: a prefix's key space probed into ranges that together list every key once, kept for later runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from connectors.base import Part
from connectors.registry import open_connector
from connectors.transfer import ObjectRecord, TransferSettings, TransferState, listing
from connectors.transfer.ranges import boundaries_path, key_ranges, midpoint, probe, ranges, split_outgrown
from connectors.transfer.state import UploadRecord
from ferry.errors import PermanentError
from ferry.profiles import Profile
from tests.connectors.test_s3 import new_bucket

keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@given(keys, st.one_of(st.none(), keys))
@example("\U0010ffff", None)
@example("a\U0010ffff\U0010ffff", "b")
def test_a_midpoint_lies_between_its_ends_and_has_a_utf8_form(low: str, high: str | None) -> None:
    if high is not None and high <= low:
        low, high = high, low
    if high == low:
        return
    middle = midpoint(low, high)
    if middle is None:
        assert high is not None and high.startswith(low) and set(high[len(low) :]) == {"\x00"}, (low, high)
        return
    assert low < middle and (high is None or middle < high), (low, middle, high)
    middle.encode("utf-8")  # a StartAfter S3 can be sent


def test_a_midpoint_halves_ascii_keys() -> None:
    assert midpoint("img/000000", "img/999999") == "img/4"
    assert midpoint("a", "b") == "a?"  # adjacent: after a, anything that starts with a
    assert midpoint("a", None) == "p"  # halfway from a to the top of printable ASCII
    assert midpoint("a", "a\x00") is None


def every_key(connector, settings: TransferSettings) -> list[str]:
    return [info.key for info in listing(connector, settings)]


def test_probed_ranges_list_every_key_once_and_none_is_empty() -> None:
    source = open_connector("synthetic://5000x1K+300x2M", {})
    found = probe(lambda after: next((i.key for i in source.list(start_after=after)), None), 8)
    assert 7 <= len(found) < 16 and found == sorted(found)  # at least 8 ranges, at most twice as many
    listed = [every_key(source, TransferSettings(start_after=a, end_at=b)) for a, b in ranges(found)]
    assert all(listed), "a range with no key"
    assert [k for part in listed for k in part] == every_key(source, TransferSettings())
    # Even in key space, and here the keys are even too: no range holds more than twice its share.
    assert max(map(len, listed)) <= 2 * 5300 / len(listed)


def test_a_source_of_few_keys_gets_as_many_ranges_as_it_can() -> None:
    source = open_connector("synthetic://3x1K", {})
    found = probe(lambda after: next((i.key for i in source.list(start_after=after)), None), 16)
    assert 1 <= len(found) <= 2
    assert probe(lambda after: None, 16) == []  # an empty source: one range


def test_ranges_are_kept_and_every_later_call_reads_them(tmp_path) -> None:
    source = open_connector("synthetic://2000x1K", {})
    first = key_ranges(source, "null://sink", "", 4, tmp_path)
    assert 4 <= len(first) < 8 and first[0][0] == "" and first[-1][1] == ""
    kept = boundaries_path(tmp_path, source.url, "null://sink", "")
    assert json.loads(kept.read_text())["boundaries"] == [b for _, b in first[:-1]]
    # Asked again (another run, another worker, another count): the same ranges, no probe.
    source.list = None  # type: ignore[method-assign]
    assert key_ranges(source, "null://sink", "", 12, tmp_path) == first


def test_an_outgrown_range_is_split_at_its_median_key_and_its_halves_take_its_rows(tmp_path) -> None:
    """Objects, unfinished uploads and their parts go to the half their key lies in; the range's own file goes; a
    range within its bound is left as it is."""
    record = {"source": "s3://src", "target": "s3://dst", "prefix": "", "asked": 2, "boundaries": ["m"]}
    path = boundaries_path(tmp_path, "s3://src", "s3://dst", "")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    low = TransferState(tmp_path, "s3://src", "s3://dst", "", ("", "m"))
    for key in ("a", "b", "c", "d", "e"):
        low.record_object(ObjectRecord(key, 1, "s", "d", None))
    low.begin_upload(UploadRecord("e/big", "u-1", 10, "s", 5))
    low.record_part("e/big", "u-1", Part(1, 5, "etag", 7))
    low.close()
    high = TransferState(tmp_path, "s3://src", "s3://dst", "", ("m", ""))
    high.record_object(ObjectRecord("x", 1, "s", "d", None))
    high.close()

    assert split_outgrown(tmp_path, "s3://src", "s3://dst", "", 4) == [("", "m")]
    assert ranges(json.loads(path.read_text())["boundaries"]) == [("", "c"), ("c", "m"), ("m", "")]
    assert not low.path.exists() and high.path.exists()
    first = TransferState(tmp_path, "s3://src", "s3://dst", "", ("", "c"))
    second = TransferState(tmp_path, "s3://src", "s3://dst", "", ("c", "m"))
    try:
        assert [r.key for r in first.objects()] == ["a", "b", "c"]
        assert [r.key for r in second.objects()] == ["d", "e"]
        assert first.upload("e/big") is None
        assert second.upload("e/big") == UploadRecord("e/big", "u-1", 10, "s", 5)
        assert second.parts("e/big", "u-1") == [Part(1, 5, "etag", 7)]
    finally:
        first.close()
        second.close()
    assert split_outgrown(tmp_path, "s3://src", "s3://dst", "", 4) == []


def test_a_source_whose_listing_cannot_seek_is_split_by_prefix_instead(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    source = open_connector(str(tmp_path / "src"), {})
    with pytest.raises(PermanentError, match=r"give its shards as prefixes \(shards: \[a/, b/\]\)"):
        key_ranges(source, "null://sink", "", 4, tmp_path / "state")


def test_s3_ranges_by_start_after_list_every_key_once(moto_env, tmp_path) -> None:
    bucket = new_bucket(moto_env.endpoint)
    client = moto_env.client("s3")
    names = [f"data/{i:05d}.bin" for i in range(0, 3000, 3)] + ["other/x", "data/~last"]
    for name in names:
        client.put_object(Bucket=bucket, Key=name, Body=b"x")
    profile = Profile(type="s3", endpoint_url=moto_env.endpoint)
    source = open_connector(f"moto://{bucket}", {"moto": profile})
    try:
        found = key_ranges(source, "null://sink", "data/", 6, tmp_path)
        assert 6 <= len(found) < 12 and all(a.startswith("data/") for a, _ in found[1:])
        settings = [TransferSettings(prefix="data/", start_after=a, end_at=b) for a, b in found]
        listed = [every_key(source, s) for s in settings]
        assert all(listed)
        assert [k for part in listed for k in part] == sorted(n for n in names if n.startswith("data/"))
    finally:
        source.close()
