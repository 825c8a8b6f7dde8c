"""The cut-over's record and its report: `report.json` (the figures), `report.md` (the same in words) and `report.html`
(with a matplotlib chart of churn and delta duration over time, inlined); what was not measured says so (null in
JSON, "not measured" in words)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from ferry.charts import png
from ferry.cutover.predict import Delta, Prediction
from ferry.files import write_atomic

NOT_MEASURED = "not measured"
TEMPLATE = Path(__file__).with_name("report.html.j2")


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

    def facts(self) -> list[str]:
        """The report's figures in words, one line each (Markdown's list, the page's)."""

        def seconds(value: float | None) -> str:
            return NOT_MEASURED if value is None else f"{value:.1f} s"

        data = self.to_dict()
        lines = [
            f"freeze budget: {self.budget_s:g} s",
            f"predicted freeze window (P90): {seconds(data['predicted_freeze_s'])}",
            f"measured freeze window: {seconds(data['freeze_window_s'])}",
            f"final delta: {_words(data['final_delta'])}",
            f"verified point in time (every object on both sides): {'yes' if self.verified else 'no'}",
            f"switched: {'yes' if self.switched else 'no'}",
        ]
        if self.prediction is not None:
            lines.append(self.prediction.text(self.budget_s))
        if self.uploads_outside_copy:
            keys = ", ".join(self.uploads_outside_copy[:20])
            lines.append(f"multipart uploads unfinished at the freeze, outside the copy: {keys}")
        lines += [f"{name}: {value:.1f} s" for name, value in {**self.freeze_steps_s, **self.switch_s}.items()]
        return lines

    def rows(self) -> list[list[str]]:
        """Each delta's figures, the final one last: name, start (seconds after the first), seconds, objects, bytes,
        deleted, changed during its copy."""
        origin = self.deltas[0].started if self.deltas else 0.0
        return [
            [
                "final" if d.final else str(d.number),
                f"{d.started - origin:.1f}",
                f"{d.seconds:.2f}",
                str(d.objects),
                str(d.bytes),
                str(d.deleted),
                str(d.changed_during_copy),
            ]
            for d in [*self.deltas, *([self.final] if self.final else [])]
        ]

    @property
    def title(self) -> str:
        return f"Cut-over {self.run_id}{' (rehearsal)' if self.rehearsal else ''}"

    def markdown(self) -> str:
        lines = [f"# {self.title}: {self.outcome}", "", *(f"- {line}" for line in self.facts())]
        lines += ["", "| delta | started (s) | seconds | objects | bytes | deleted | changed during copy |"]
        lines.append("|---|---|---|---|---|---|---|")
        lines += [f"| {' | '.join(row)} |" for row in self.rows()]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        """One self-contained page: the figures, the chart of churn and delta duration over time, the table."""
        environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
        template = environment.from_string(TEMPLATE.read_text(encoding="utf-8"))
        return template.render(
            title=self.title, outcome=self.outcome, facts=self.facts(), chart=self.chart(), rows=self.rows()
        )

    def chart(self) -> str | None:
        """Churn (objects changed per second since the previous delta) and each delta's duration against the time
        since the first delta started, as a base64 PNG; None with fewer than two deltas."""
        deltas = [*self.deltas, *([self.final] if self.final else [])]
        if len(deltas) < 2:
            return None
        from matplotlib.figure import Figure

        origin = deltas[0].started
        figure = Figure(figsize=(7.5, 4.6))
        churn, duration = figure.subplots(2, 1, sharex=True)
        pairs = list(zip(deltas, deltas[1:], strict=False))
        churn.plot(
            [b.started - origin for _, b in pairs],
            [b.changed / (b.started - a.started) if b.started > a.started else 0.0 for a, b in pairs],
            marker="o",
            color="#E45756",
        )
        churn.set_ylabel("churn (objects/s)")
        duration.bar(
            [d.started - origin for d in deltas],
            [d.seconds for d in deltas],
            width=max(0.5, (deltas[-1].started - origin) / (3 * len(deltas))),
            color=["#B279A2" if d.final else "#4C78A8" for d in deltas],
        )
        duration.set_ylabel("delta duration (s)")
        duration.set_xlabel("seconds since the first delta started (the final delta in purple)")
        return png(figure)

    def write(self, folder: Path) -> Path:
        """report.json, report.md and report.html into folder; the JSON's path."""
        write_atomic(folder / "report.md", self.markdown())
        write_atomic(folder / "report.html", self.html())
        return write_atomic(folder / "report.json", json.dumps(self.to_dict(), indent=2) + "\n")


def _delta(delta: Delta) -> dict[str, Any]:
    return {**delta.to_dict(), "seconds": round(delta.seconds, 3)}


def _words(delta: dict[str, Any] | None) -> str:
    if delta is None:
        return NOT_MEASURED
    return f"{delta['objects']} objects, {delta['bytes']} bytes, {delta['deleted']} deleted in {delta['seconds']} s"
