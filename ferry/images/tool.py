"""The build and copy tools run as subprocesses: their output, or their failure as a transient or permanent error."""

from __future__ import annotations

import re
import subprocess

from ferry.errors import PermanentError, TransientError
from ferry.net import may_pass_again, registry_failure

_TIMEOUT_S = 3600


def run_tool(argv: list[str], what: str) -> str:
    """Run a build or copy tool; its stdout, or with the last lines it printed a TransientError where its fatal line
    may not recur (a reset, a refused connection, 429, 5xx), else a PermanentError."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise PermanentError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise PermanentError(f"{what}: {argv[0]} ran past {_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        tail = " | ".join(lines[-3:])
        # The tools name the registry they failed at in the URL they asked ("https://host/v2/"). The cause is the
        # last line's: the lines before may be attempts that failed otherwise and were retried.
        host = re.search(r"https?://([^/\"'\s]+)/v2/", done.stderr)
        fatal = lines[-1] if lines else ""
        cause = registry_failure(fatal, host.group(1) if host else "the registry")
        error = TransientError if may_pass_again(fatal) else PermanentError
        raise error(f"{what}: {cause + '; ' if cause else ''}{argv[0]} exited {done.returncode}: {tail}")
    return done.stdout
