"""Where every command prints, and in what form: the two consoles, --log-format's check, FERRY_DEBUG."""

from __future__ import annotations

import os

import typer
from rich.console import Console

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def check_log_format(value: str) -> str:
    """--log-format's value, or typer's usage error (exit 2) naming the option."""
    if value not in ("console", "json"):
        raise typer.BadParameter(f"{value!r} is not one of console, json")
    return value


def debugging() -> bool:
    """FERRY_DEBUG=1: show Python and Prefect tracebacks, for a bug report."""
    return bool(os.environ.get("FERRY_DEBUG"))
