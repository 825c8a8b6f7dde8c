"""One real Prefect server for the pipeline tests, started once on a free port, stopped by PID."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "ferry")
# Everything here talks to the session's server; a silent fall-back to an ephemeral one is a bug.
os.environ.setdefault("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
# The server's scheduler looks for due deployments every 5 s, not 60: `ferry serve` is tested firing.
os.environ.setdefault("PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS", "5")


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import start_server

    # A database of its own: nothing from an earlier session (or the user's runs) is seen.
    proc, api = start_server(0, home=tmp_path_factory.mktemp("prefect-home"))
    try:
        with temporary_settings(updates={PREFECT_API_URL: api}):
            os.environ["PREFECT_API_URL"] = api
            yield api
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all()  # send the last run logs while the server still listens
    finally:
        # Nothing may send logs to the API any more: not to this server, nor to a temporary one.
        os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"
        os.environ.pop("PREFECT_API_URL", None)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
