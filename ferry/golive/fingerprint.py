"""The fingerprint step's record: each image's CUDA toolkit, the driver to judge it against, the GPU probe's figures.

The driver is the plan's, else the oldest that GPU feature discovery's node labels report; the GPU probe runs as
its own process, so that torch stays out of ferry's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferry import digest_map, kube
from ferry.errors import FerryError
from ferry.golive import cuda, gpu_probe


def fingerprint(published: Path, driver: str | None, connect: Callable[[], Any] | None, *, gpu: bool) -> dict:
    """What the fingerprint step records: the toolkits of the digest map at published, the driver (the plan's, else
    read from the nodes through connect, None without target.cluster) and where it came from, the GPU probe's
    figures (a SKIP unless gpu)."""
    images = {r.target: r.cuda for r in digest_map.read(published).values()}
    found = probe_gpu() if gpu else {"status": "SKIP", "reason": "gpu_probe: false"}
    driver, driver_source = find_driver(driver, connect)
    return {
        "images": images,
        "images_source": str(published),
        "driver": driver,
        "driver_source": driver_source,
        "gpu": found,
    }


def find_driver(given: str | None, connect: Callable[[], Any] | None) -> tuple[str | None, str]:
    """The driver to judge against and where it came from: given (the plan's), else the oldest the nodes' labels say
    through a client from connect (None: the plan names no cluster); no driver (None) says why."""
    if given:
        return given, "phases.golive.nodes.driver"
    if connect is None:
        return None, "no driver: set phases.golive.nodes.driver (or target.cluster, to read the node labels)"
    try:
        api = connect()
        try:
            drivers = kube.node_drivers(api)
        finally:
            api.close()
    except FerryError as exc:
        return (
            None,
            f"no driver: phases.golive.nodes.driver is not set and the node labels could not be read: {exc}",
        )
    if not drivers:
        return None, "no driver: no node carries GPU feature discovery's driver labels (nvidia.com/cuda.driver*)"
    oldest = min(drivers.values(), key=_version_order)
    shown = ", ".join(f"{node} {version}" for node, version in sorted(drivers.items()))
    return oldest, f"the oldest driver on the labelled nodes ({shown})"


def _version_order(driver: str) -> tuple[int, ...]:
    """A node label's driver for ordering; one that is not a version sorts first, so that it is judged (and said)."""
    try:
        return cuda.parse_driver(driver)
    except ValueError:
        return ()


def probe_gpu() -> dict:
    """The standalone GPU probe run as its own process (torch stays out of ferry's); a SKIP says why it gave nothing."""
    try:
        done = subprocess.run(
            [sys.executable, gpu_probe.__file__], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired:
        return {"status": "SKIP", "reason": "the GPU probe did not finish within 600 s"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"status": "SKIP", "reason": f"the GPU probe failed: {done.stderr.strip()[-300:] or 'no output'}"}
