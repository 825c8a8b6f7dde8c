"""The cut-over's record and its report: `report.json` (the figures), `report.md` (the same in words); what was not
measured says so (null in JSON, "not measured" in Markdown)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.cutover.predict import Delta, Prediction
from ferry.files import write_atomic

NOT_MEASURED = "not measured"


@dataclass
class Record:
    """What a cut-over did and measured, filled in as it goes (monotonic instants as epoch seconds)."""

    run_id: str
    plan: str
    budget_s: float
    rehearsal: bool
    deltas: list[Delta] = field(default_factory=list)
    prediction: Prediction | None = None
    freeze_started: float | None = None
    final_delta_done: float | None = None
    verified_at: float | None = None
    ended_at: float | None = None  # switched, or unfrozen in a rehearsal
    final: Delta | None = None
    verified: bool = False
    switched: bool = False
    freeze_steps_s: dict[str, float] = field(default_factory=dict)
    switch_s: dict[str, float] = field(default_factory=dict)
    uploads_outside_copy: list[str] = field(default_factory=list)
    verification: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = "running"

    @property
    def freeze_window_s(self) -> float | None:
        """From the freeze's start to switched (to unfrozen, in a rehearsal); None when it did not get there."""
        if self.freeze_started is None or self.ended_at is None:
            return None
        return self.ended_at - self.freeze_started

    def to_dict(self) -> dict[str, Any]:
        def since_freeze(instant: float | None) -> float | None:
            return None if instant is None or self.freeze_started is None else round(instant - self.freeze_started, 3)

        return {
            "run_id": self.run_id,
            "plan": self.plan,
            "outcome": self.outcome,
            "rehearsal": self.rehearsal,
            "freeze_budget_s": self.budget_s,
            "deltas": [_delta(d) for d in self.deltas],
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "predicted_freeze_s": None if self.prediction is None else round(self.prediction.freeze_s, 3),
            "freeze_window_s": None if self.freeze_window_s is None else round(self.freeze_window_s, 3),
            "timeline_s": {
                "final_delta_done": since_freeze(self.final_delta_done),
                "verified": since_freeze(self.verified_at),
                "unfrozen" if self.rehearsal else "switched": since_freeze(self.ended_at),
            },
            "freeze_steps_s": {k: round(v, 3) for k, v in self.freeze_steps_s.items()},
            "switch_s": {k: round(v, 3) for k, v in self.switch_s.items()},
            "final_delta": None if self.final is None else _delta(self.final),
            "verified": self.verified,
            "verification": self.verification,
            "switched": self.switched,
            "uploads_outside_copy": self.uploads_outside_copy,
        }

    def markdown(self) -> str:
        def seconds(value: float | None) -> str:
            return NOT_MEASURED if value is None else f"{value:.1f} s"

        data = self.to_dict()
        lines = [
            f"# Cut-over {self.run_id}{' (rehearsal)' if self.rehearsal else ''}: {self.outcome}",
            "",
            f"- freeze budget: {self.budget_s:g} s",
            f"- predicted freeze window (P90): {seconds(data['predicted_freeze_s'])}",
            f"- measured freeze window: {seconds(data['freeze_window_s'])}",
            f"- final delta: {_words(data['final_delta'])}",
            f"- verified point in time (every object on both sides): {'yes' if self.verified else 'no'}",
            f"- switched: {'yes' if self.switched else 'no'}",
        ]
        if self.prediction is not None:
            lines.append(f"- {self.prediction.text(self.budget_s)}")
        if self.uploads_outside_copy:
            keys = ", ".join(self.uploads_outside_copy[:20])
            lines.append(f"- multipart uploads unfinished at the freeze, outside the copy: {keys}")
        for name, value in {**self.freeze_steps_s, **self.switch_s}.items():
            lines.append(f"- {name}: {value:.1f} s")
        lines += ["", "| delta | started (s) | seconds | objects | bytes | deleted | changed during copy |"]
        lines.append("|---|---|---|---|---|---|---|")
        origin = self.deltas[0].started if self.deltas else 0.0
        for d in [*self.deltas, *([self.final] if self.final else [])]:
            name = "final" if d.final else str(d.number)
            lines.append(
                f"| {name} | {d.started - origin:.1f} | {d.seconds:.2f} | {d.objects} | {d.bytes} | {d.deleted} | "
                f"{d.changed_during_copy} |"
            )
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> Path:
        """report.json and report.md into folder; the JSON's path."""
        write_atomic(folder / "report.md", self.markdown())
        return write_atomic(folder / "report.json", json.dumps(self.to_dict(), indent=2) + "\n")


def _delta(delta: Delta) -> dict[str, Any]:
    return {**delta.to_dict(), "seconds": round(delta.seconds, 3)}


def _words(delta: dict[str, Any] | None) -> str:
    if delta is None:
        return NOT_MEASURED
    return f"{delta['objects']} objects, {delta['bytes']} bytes, {delta['deleted']} deleted in {delta['seconds']} s"
