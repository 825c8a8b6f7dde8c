"""A matplotlib figure as a PNG a page inlines (base64), for the reports that are one self-contained HTML file."""

from __future__ import annotations

import base64
import io
from typing import Any


def png(figure: Any) -> str:
    """The figure as a base64 PNG, for a data: URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
