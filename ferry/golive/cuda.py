"""The CUDA fingerprint: a toolkit version against a driver version, by NVIDIA's published minimum-driver table.

PASS when the driver meets the toolkit's own minimum; WARN when only minor-version compatibility holds (the
driver is new enough for the toolkit's major family but older than the release needs); FAIL when neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ferry.results import Status

TABLE = Path(__file__).with_name("cuda_drivers.yaml")
_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")
# What a driver older than the toolkit's own minimum cannot do, in NVIDIA's words (CUDA Compatibility guide,
# "Minor Version Compatibility": limited feature set).
MINOR_LIMITS = (
    "PTX JIT of PTX built by this newer toolkit fails (cudaErrorUnsupportedPtxVersion): ship SASS (cubins) for the "
    "GPU's architecture",
    "APIs added after the driver's release return cudaErrorCallRequiresNewerDriver",
)


@dataclass(frozen=True)
class Verdict:
    status: Status
    cuda: str
    driver: str
    # The toolkit release's own minimum driver (None when the release is not in the table).
    toolkit_minimum: str | None
    minor_minimum: str
    reason: str

    def line(self) -> str:
        """One line: the status, then why."""
        return f"{self.status.value} {self.reason}"


def parse_version(text: str, what: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); ValueError naming what it is when it is not dotted numbers."""
    if not isinstance(text, str) or not _VERSION.fullmatch(text.strip()):
        raise ValueError(f"{what} {text!r} is not a version (dotted numbers, e.g. 12.4.1, 550.54.15)")
    return tuple(int(p) for p in text.strip().split("."))


@cache
def table() -> dict:
    """The published table (toolkit_driver, minor_version_compatibility, source)."""
    return yaml.safe_load(TABLE.read_text(encoding="utf-8"))


def _toolkit_key(cuda: tuple[int, ...]) -> str:
    """The table's key of a toolkit version: major.minor.patch, '12.4' meaning its GA, 12.4.0."""
    return ".".join(str(p) for p in (*cuda, 0, 0)[:3])


def check(cuda: str, driver: str) -> Verdict:
    """The verdict for one toolkit and one driver; ValueError for a malformed version or an unknown major family."""
    toolkit = parse_version(cuda, "CUDA version")
    installed = parse_version(driver, "driver version")
    data = table()
    family = str(toolkit[0])
    minor_min = data["minor_version_compatibility"].get(family)
    if minor_min is None:
        known = ", ".join(f"{k}.x" for k in data["minor_version_compatibility"])
        raise ValueError(f"CUDA {cuda}: no {family}.x row in NVIDIA's table (known: {known})")
    key = _toolkit_key(toolkit)
    own = data["toolkit_driver"].get(key)
    minor_ok = installed >= parse_version(minor_min, "table")
    losing = "; ".join(MINOR_LIMITS)
    if own is not None and installed >= parse_version(own, "table"):
        return Verdict(Status.PASS, cuda, driver, own, minor_min, f"driver {driver} >= {own}, CUDA {key}'s minimum")
    if own is None:
        reason = f"CUDA {key} is not in the table ({data['source']}): its own minimum is unknown; "
    else:
        reason = f"driver {driver} < {own}, CUDA {key}'s minimum; "
    if minor_ok:
        reason += f"minor-version compatibility holds ({family}.x needs >= {minor_min}), which loses: {losing}"
        return Verdict(Status.WARN, cuda, driver, own, minor_min, reason)
    reason += f"nor minor-version compatibility ({family}.x needs >= {minor_min}): CUDA {key} will not initialise"
    return Verdict(Status.FAIL, cuda, driver, own, minor_min, reason)
