"""The shared connector conformance suite: every connector passes it against a real server.

A connector's test file subclasses ConnectorSuite and provides one fixture, `connector`:
a connector on a fresh, empty root, already prepared as a target. A target that keeps no bytes (the null
target) sets `reads_back = False`: every read the suite makes must then be refused, everything else holds.
"""

from __future__ import annotations

import os
import unicodedata

import pytest

from connectors.base import Connector, WriteSpec
from connectors.checksum import combine_parts, crc32c, label
from ferry.errors import NotFoundError, PermanentError

PART = 256 * 1024  # the smallest part size the test servers accept


def _keys(connector: Connector, prefix: str = "") -> list[str]:
    return [info.key for info in connector.list(prefix)]


class ConnectorSuite:
    """Behaviour every connector shares. Subclasses provide the `connector` fixture."""

    reads_back = True  # False for a target that keeps no bytes: reading is then refused

    def assert_reads(self, connector: Connector, key: str, start: int, expected: bytes) -> None:
        """Bytes start.. of key are expected, or (reads_back False) the read is refused with an error."""
        if self.reads_back:
            assert connector.open_range(key, start, len(expected)) == expected
        else:
            with pytest.raises(PermanentError) as refused:
                connector.open_range(key, start, len(expected))
            assert not isinstance(refused.value, NotFoundError)  # the object is there, its bytes are not

    def test_put_stat_read_roundtrip(self, connector: Connector) -> None:
        data = os.urandom(3000)
        spec = WriteSpec(content_type="application/x-test", metadata={"owner": "ml-team"}, checksum=label(crc32c(data)))
        written = connector.put("dir/obj.bin", data, spec)
        assert written.size == 3000
        info = connector.stat("dir/obj.bin")
        assert info.size == 3000
        assert info.signature
        if connector.capabilities.stores_checksum:
            assert info.checksum == label(crc32c(data))
            assert info.content_type == "application/x-test"
            assert info.metadata == {"owner": "ml-team"}
        self.assert_reads(connector, "dir/obj.bin", 0, data)
        self.assert_reads(connector, "dir/obj.bin", 1000, data[1000:1017])

    def test_stat_missing_is_not_found(self, connector: Connector) -> None:
        with pytest.raises(NotFoundError):
            connector.stat("no/such/key")

    def test_list_is_sorted_streamed_and_prefixed(self, connector: Connector) -> None:
        keys = ["b", "a/x", "a-b", "a/y/z", "c.txt", "a0"]
        for key in keys:
            connector.put(key, key.encode(), WriteSpec())
        assert _keys(connector) == sorted(keys)
        assert _keys(connector, "a/") == ["a/x", "a/y/z"]
        assert [i.key for i in connector.list(start_after="a0")] == ["b", "c.txt"]
        sizes = {info.key: info.size for info in connector.list()}
        assert sizes == {key: len(key) for key in keys}

    def test_empty_object_and_directory_marker(self, connector: Connector) -> None:
        connector.put("empty.dat", b"", WriteSpec())
        connector.put("marker/", b"", WriteSpec())
        assert connector.stat("empty.dat").size == 0
        listed = {info.key: info.size for info in connector.list()}
        assert listed == {"empty.dat": 0, "marker/": 0}

    def test_keys_are_carried_exactly(self, connector: Connector) -> None:
        nfc = unicodedata.normalize("NFC", "café.txt")
        nfd = unicodedata.normalize("NFD", "café.txt")
        keys = [nfc, nfd, "with space", "percent%20encoded", "plus+sign", "sp€cial/ünïcode"]
        if connector.capabilities.exact_keys:
            keys += ["double//slash", "trailing-dot."]
        for key in keys:
            connector.put(key, key.encode(), WriteSpec())
        assert _keys(connector) == sorted(keys)
        for key in keys:
            self.assert_reads(connector, key, 0, key.encode())

    def test_multipart_out_of_order_parts(self, connector: Connector) -> None:
        data = os.urandom(2 * PART + 1234)
        chunks = [data[i : i + PART] for i in range(0, len(data), PART)]
        checksum = label(combine_parts([(crc32c(c), len(c)) for c in chunks]))
        spec = WriteSpec(content_type="application/octet-stream", metadata={"k": "v"})
        upload = connector.begin("big/object", spec, PART)
        assert connector.upload_alive("big/object", upload)
        parts = [connector.put_part("big/object", upload, n, chunks[n - 1]) for n in (3, 1, 2)]
        assert [p.crc32c for p in parts] == [crc32c(chunks[2]), crc32c(chunks[0]), crc32c(chunks[1])]
        assert ("big/object", upload) in set(connector.list_incomplete())
        done = sorted(parts, key=lambda p: p.number)
        info = connector.complete("big/object", upload, done, WriteSpec(spec.content_type, spec.metadata, checksum))
        assert info.size == len(data)
        self.assert_reads(connector, "big/object", 0, data)
        stat = connector.stat("big/object")
        assert stat.size == len(data)
        if connector.capabilities.stores_checksum:
            assert stat.checksum == checksum
        assert ("big/object", upload) not in set(connector.list_incomplete())
        assert _keys(connector) == ["big/object"]

    def test_abort_discards_upload(self, connector: Connector) -> None:
        upload = connector.begin("aborted", WriteSpec(), PART)
        connector.put_part("aborted", upload, 1, os.urandom(PART))
        connector.abort("aborted", upload)
        assert not connector.upload_alive("aborted", upload)
        assert list(connector.list_incomplete()) == []
        assert _keys(connector) == []

    def test_delete(self, connector: Connector) -> None:
        connector.put("gone", b"x", WriteSpec())
        connector.delete("gone")
        connector.delete("never-was")
        assert _keys(connector) == []

    def test_overwrite_changes_signature(self, connector: Connector) -> None:
        first = connector.put("obj", b"one", WriteSpec())
        second = connector.put("obj", b"two!", WriteSpec())
        assert connector.stat("obj").size == 4
        assert first.signature != second.signature
