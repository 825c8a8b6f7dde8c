"""fsspec connector: the shared suite on fsspec's memory filesystem."""

from __future__ import annotations

import uuid

import pytest

from connectors.registry import open_connector
from tests.connectors.conformance import ConnectorSuite


class TestFsspecMemoryConformance(ConnectorSuite):
    @pytest.fixture
    def connector(self):
        connector = open_connector(f"memory://ferry-test/{uuid.uuid4().hex}", {})
        connector.prepare_target(dry_run=False)
        return connector
