"""`ferry ui`: a local Prefect server on 127.0.0.1, for the UI and for approvals."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from rich.console import Console

from ferry.errors import FerryError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, timeout_s: float = 60.0, home: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start `prefect server start` on 127.0.0.1:port; return the process and its API URL once healthy.

    home, if given, is the server's own PREFECT_HOME (its database); else the user's.
    """
    port = port or free_port()
    prefect = str(Path(sys.executable).with_name("prefect"))
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "true",
        # The UI asks this URL for its data; by default it would try port 4200.
        "PREFECT_UI_API_URL": api,
    }
    env.pop("PREFECT_API_URL", None)
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FerryError(f"prefect server exited with {proc.returncode} before it was healthy (port {port} taken?)")
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=1) as response:
                if response.status == 200:
                    return proc, api
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise FerryError(f"prefect server did not become healthy on port {port} within {timeout_s:.0f}s")


def stop_server(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Stop a server started by start_server and every process it started (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_ui(port: int, console: Console) -> None:
    """Run the server in the foreground until Ctrl-C or SIGTERM; either stops the server with it."""
    proc, api = start_server(port)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        console.print(f"Prefect UI: {api.removesuffix('/api')}", markup=False, highlight=False)
        console.print(f"for runs to appear there: export PREFECT_API_URL={api}", markup=False, highlight=False)
        proc.wait()
    except KeyboardInterrupt:
        console.print("stopping the Prefect server", markup=False, highlight=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_server(proc)
