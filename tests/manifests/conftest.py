"""The examples rendered once for the tests of the manifests domain."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.manifests.roundtrip import plain
from ferry.manifests.rules import transform
from tests.manifests.examples import example_rules, load_examples


@pytest.fixture(scope="package")
def rendered() -> tuple[dict, Any]:
    """Every document of the examples as plain Python before the transforms, by (file, index); the rendering."""
    before = {
        (str(f.relative), d.index): plain(d.data) for f in load_examples() for d in f.documents if d.data is not None
    }
    files = load_examples()
    rendering = transform(files, example_rules())
    return before, rendering
