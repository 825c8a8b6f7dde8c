"""Session-wide real servers (moto S3, Azurite, a registry, a Prefect server, a Kubernetes control plane), each
started once on first use and stopped by PID."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.support import Server, start_azurite, start_moto, start_registry

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "ferry")
# Everything here talks to the session's server; a silent fall-back to an ephemeral one is a bug.
os.environ.setdefault("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
# The server's scheduler looks for due deployments every 5 s, not 60: `ferry serve` is tested firing.
os.environ.setdefault("PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS", "5")
# A suite started in the background by a script (`make test &`, nohup) inherits SIGINT ignored, and so would every
# ferry it starts, which would then sit through the Ctrl-C tests' SIGINT: the processes get it as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Server]:
    # 256 KiB minimum parts keep multipart tests small and fast.
    server = start_moto(min_part_size=256 * 1024)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[Server]:
    server = start_azurite()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def registry_server() -> Iterator[Server]:
    server = start_registry()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd, kube-apiserver (TLS, client certificates, RBAC), controller-manager, scheduler and kwok's GPU nodes.

    The go-live probe's pods are left to the tests (tests/golive/test_jobs.py plays their kubelet): kwok runs no
    container, so it could not end them with the probe's summary as their termination message."""
    with ControlPlane(kubelet_by_test="ferry.io/probe-end") as plane:
        print(f"\ncontrol plane up in {plane.started_s:.1f} s at {plane.url}", file=sys.stderr)
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace of the test's own on the control plane, deleted after it."""
    name = control_plane.namespace()
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture
def moto_env(moto_server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The moto server's credentials and endpoint in this test's environment, as the AWS CLI reads them."""
    for key in ("AWS_PROFILE", "AWS_CA_BUNDLE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    return moto_server


@pytest.fixture
def azurite_env(azurite_server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    for key, value in azurite_server.env.items():
        monkeypatch.setenv(key, value)
    return azurite_server


@pytest.fixture(autouse=True)
def _no_real_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach a real cloud from a test, whatever the developer's shell holds.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import start_server, stop_server

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
        stop_server(proc)


# tests/fuzz counts the inputs it tries: the session's last lines say how many, from every worker under xdist.
def pytest_sessionfinish(session: pytest.Session) -> None:
    fuzz = sys.modules.get("tests.fuzz.common")
    if fuzz is not None and hasattr(session.config, "workeroutput"):  # an xdist worker hands its counts over
        session.config.workeroutput["fuzz"] = [dict(fuzz.TRIED), dict(fuzz.CALLS)]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # the xdist controller, as each worker ends
    if counts := getattr(node, "workeroutput", {}).get("fuzz"):
        from tests.fuzz.common import CALLS, TRIED

        TRIED.update(counts[0])
        CALLS.update(counts[1])


def pytest_terminal_summary(terminalreporter) -> None:
    fuzz = sys.modules.get("tests.fuzz.common")
    if fuzz is not None and (line := fuzz.summary()):
        terminalreporter.write_line(line)
