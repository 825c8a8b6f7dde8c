"""Local connector: the shared suite in a temp dir, plus path-safety rules."""

from __future__ import annotations

import os

import pytest

from connectors.base import WriteSpec
from connectors.registry import open_connector
from ferry.errors import NotFoundError, RejectedKey
from tests.connectors.conformance import ConnectorSuite


class TestLocalConformance(ConnectorSuite):
    @pytest.fixture
    def connector(self, tmp_path):
        connector = open_connector(str(tmp_path / "root"), {})
        connector.prepare_target(dry_run=False)
        return connector


@pytest.mark.parametrize("key", ["../escape", "a/../../escape", "/etc/passwd", "a//b", "./a", "a/./b", "x\0y"])
def test_unsafe_keys_are_rejected_and_never_written(tmp_path, key) -> None:
    target = tmp_path / "inside"
    connector = open_connector(str(target), {})
    connector.prepare_target(dry_run=False)
    with pytest.raises(RejectedKey):
        connector.put(key, b"evil", WriteSpec())
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []


@pytest.mark.parametrize("read", ["get", "open_range"])
@pytest.mark.parametrize("replacement", ["fifo", "directory"])
def test_a_listed_file_replaced_by_a_fifo_or_folder_is_said_gone_not_waited_on(tmp_path, read, replacement) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "data.bin").write_bytes(b"x" * 10)
    connector = open_connector(str(root), {})
    [listed] = connector.list()
    (root / "data.bin").unlink()
    if replacement == "fifo":
        os.mkfifo(root / "data.bin")  # opened for reading the usual way, it would wait for a writer forever
    else:
        (root / "data.bin").mkdir()
    with pytest.raises(NotFoundError, match="not a regular file any more") as raised:
        connector.get(listed.key) if read == "get" else connector.open_range(listed.key, 0, listed.size)
    assert raised.value.code == "ENOENT"
