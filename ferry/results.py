"""CheckResult (what a check measured, against what threshold, with what evidence) and the gate verdict."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

# How many items of a list (a rollback's, a gate's evidence, a sync's failures) the terminal shows before the rest
# is counted or goes to a file.
SHOWN_ITEMS = 20


class Status(enum.StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    # The check did not measure (and says why in evidence); never reported as PASS.
    SKIP = "SKIP"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    measured: dict[str, Any] = field(default_factory=dict)
    threshold: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(data["name"], Status(data["status"]), data["measured"], data["threshold"], data["evidence"])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data


def blocking(results: list[CheckResult], strict: bool) -> list[CheckResult]:
    """The results that fail a gate: FAIL, and under strict WARN too."""
    return [r for r in results if r.status == Status.FAIL or (strict and r.status == Status.WARN)]


def gate_status(results: list[CheckResult], strict: bool) -> Status:
    """FAIL if a check failed (or, strict, warned); else WARN if one warned; else PASS."""
    if blocking(results, strict):
        return Status.FAIL
    return Status.WARN if any(r.status == Status.WARN for r in results) else Status.PASS
