"""Run the `ferry` console entry point in-process, as a user's shell would, and capture what it prints.

Output is captured by redirecting sys.stdout and sys.stderr for the call alone, not with pytest's
capsys: Prefect's console handler keeps the stream it first sees, and capsys's is closed after its test.
"""

from __future__ import annotations

import contextlib
import io
import sys

import pytest

from ferry import cli


def run_cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ferry ARGS...`."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["ferry", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
            cli.run()
    finally:
        sys.argv = old
    return exited.value.code, out.getvalue(), err.getvalue()
