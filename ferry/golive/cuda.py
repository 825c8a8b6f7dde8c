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
# A toolkit as images and tools print it: nvcc's "V12.4.131", a package version's revision ("12.4.1-1").
_TOOLKIT = re.compile(r"^[Vv]?(\d+(?:\.\d+){0,3})(?:-\d+)?$")
# A driver branch ("r550", "R550", "550"): not one driver, so not comparable with a release's exact minimum.
_BRANCH = re.compile(r"^[rR]?\d+$")
# A third part this high is a component's build (nvcc, cudart: 12.4.131), not an update (12.4.1): updates so far
# run to 4 (11.4.4).
_FIRST_BUILD = 10
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
    # The family's minor-version-compatibility minimum (None before CUDA 11, which had none).
    minor_minimum: str | None
    reason: str

    def line(self) -> str:
        """One line: the status, then why."""
        return f"{self.status.value} {self.reason}"


def parse_version(text: str, what: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); ValueError naming what it is when it is not dotted numbers."""
    if not isinstance(text, str) or not _VERSION.fullmatch(text.strip()):
        raise ValueError(f"{what} {text!r} is not a version (dotted numbers, e.g. 12.4.1, 550.54.15)")
    return tuple(int(p) for p in text.strip().split("."))


def parse_toolkit(text: str) -> tuple[int, ...]:
    """A CUDA toolkit version as written in the wild ('12.4', '12.4.1', '12.4.1-1', nvcc's 'V12.4.131'), as numbers;
    ValueError naming the text otherwise."""
    match = _TOOLKIT.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"CUDA version {text!r} is not a version (e.g. 12.4, 12.4.1, nvcc's V12.4.131)")
    return tuple(int(p) for p in match.group(1).split("."))


def parse_driver(text: str) -> tuple[int, ...]:
    """An NVIDIA driver version as nvidia-smi prints it ('550.54.15', '570.26'), as numbers; ValueError naming the
    text otherwise, and for a branch alone ('550', 'r550'), which cannot be held against an exact minimum."""
    stripped = text.strip() if isinstance(text, str) else text
    if isinstance(stripped, str) and _BRANCH.fullmatch(stripped):
        raise ValueError(
            f"driver version {text!r} is a driver branch, not a driver: give the version nvidia-smi prints "
            "(e.g. 550.54.15)"
        )
    return parse_version(text, "driver version")


@cache
def table() -> dict:
    """The published table (toolkit_driver, minor_version_compatibility, source)."""
    return yaml.safe_load(TABLE.read_text(encoding="utf-8"))


def _toolkit_key(cuda: tuple[int, ...]) -> str:
    """The table's key of a toolkit version: major.minor.patch, '12.4' meaning its GA, 12.4.0."""
    return ".".join(str(p) for p in (*cuda, 0, 0)[:3])


def _own_minimum(toolkit: tuple[int, ...], rows: dict[str, str]) -> tuple[str, str, str | None]:
    """The release's name, what its minimum is called, and that minimum from rows (None when the table lacks it).

    A component build (nvcc's 12.4.131) does not say which update of 12.4 it came with: it is held against the
    highest minimum of the 12.4 releases in the table, so that a PASS holds whichever update it was.
    """
    if len(toolkit) >= 3 and toolkit[2] >= _FIRST_BUILD:
        line, build = f"{toolkit[0]}.{toolkit[1]}", ".".join(map(str, toolkit))
        minimums = [v for k, v in rows.items() if k.startswith(f"{line}.")]
        name = f"{line} (build {build})"
        if not minimums:
            return name, "", None
        highest = max(minimums, key=lambda v: parse_version(v, "table"))
        return name, f"the highest minimum of the CUDA {line} releases ({build} is a component build)", highest
    key = _toolkit_key(toolkit)
    return key, f"CUDA {key}'s minimum", rows.get(key)


def check(cuda: str, driver: str) -> Verdict:
    """The verdict for one toolkit and one driver; ValueError for a malformed version or an unknown major family."""
    toolkit, installed = parse_toolkit(cuda), parse_driver(driver)
    cuda, driver = cuda.strip(), driver.strip()
    data = table()
    family = str(toolkit[0])
    minor_min = data["minor_version_compatibility"].get(family)
    key, minimum, own = _own_minimum(toolkit, data["toolkit_driver"])
    if minor_min is None:
        # Before CUDA 11 there was no minor-version compatibility: the release's own minimum alone decides.
        if own is None:
            known = sorted({k.split(".")[0] for k in data["toolkit_driver"]}, key=int)
            raise ValueError(f"CUDA {cuda}: no {family}.x release in ferry's table ({known[0]}.x to {known[-1]}.x)")
        if installed >= parse_version(own, "table"):
            return Verdict(Status.PASS, cuda, driver, own, None, f"driver {driver} >= {own}, {minimum}")
        reason = f"driver {driver} < {own}, {minimum} (CUDA {family}.x has no minor-version compatibility)"
        return Verdict(Status.FAIL, cuda, driver, own, None, reason + f": CUDA {key} will not initialise")
    minor_ok = installed >= parse_version(minor_min, "table")
    losing = "; ".join(MINOR_LIMITS)
    if own is not None and installed >= parse_version(own, "table"):
        return Verdict(Status.PASS, cuda, driver, own, minor_min, f"driver {driver} >= {own}, {minimum}")
    if own is None:
        reason = f"CUDA {key} is not in the table ({data['source']}): its own minimum is unknown; "
    else:
        reason = f"driver {driver} < {own}, {minimum}; "
    if minor_ok:
        reason += f"minor-version compatibility holds ({family}.x needs >= {minor_min}), which loses: {losing}"
        return Verdict(Status.WARN, cuda, driver, own, minor_min, reason)
    reason += f"nor minor-version compatibility ({family}.x needs >= {minor_min}): CUDA {key} will not initialise"
    return Verdict(Status.FAIL, cuda, driver, own, minor_min, reason)
