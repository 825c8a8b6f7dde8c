"""Local connector: the shared suite in a temp dir, plus path-safety rules."""

from __future__ import annotations

import pytest

from connectors.base import WriteSpec
from connectors.registry import open_connector
from ferry.errors import RejectedKey
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
