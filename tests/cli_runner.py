"""Run the `ferry` console entry point in-process, as a user's shell would, and capture what it prints."""

from __future__ import annotations

import sys

import pytest

from ferry import cli


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ferry ARGS...`."""
    old = sys.argv
    sys.argv = ["ferry", *args]
    try:
        with pytest.raises(SystemExit) as exited:
            cli.run()
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err
