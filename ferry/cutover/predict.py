"""The freeze window, predicted from the live deltas so far: churn (what changed per second between two deltas) and
what a delta costs (a fixed part, the listing and diff, plus a part per changed object), no I/O."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Delta:
    """What one delta measured."""

    number: int
    started: float  # epoch seconds
    seconds: float
    objects: int  # copied
    bytes: int
    deleted: int = 0
    changed_during_copy: int = 0
    listed: int = 0
    target_objects: int = 0  # as listed; a delta by the change log carries the last listing's
    by_change_log: bool = False  # the keys the change log named, not the listings
    by_inventory: bool = False  # the source listed by an S3 Inventory report
    final: bool = False

    @property
    def changed(self) -> int:
        """Objects this delta found changed: copied, deleted, or changing under its copy."""
        return self.objects + self.deleted + self.changed_during_copy

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Prediction:
    """The final delta's duration (P90 and its spread over the churn samples) and the freeze window it gives."""

    final_delta_s: float
    spread_s: tuple[float, float]
    freeze_s: float  # P90 of the freeze steps + the final delta + its verification + the switch phases
    fits: bool
    churn_objects_per_s: float
    churn_bytes_per_s: float
    copy_objects_per_s: float | None  # None: no delta copied enough to measure it
    copy_bytes_per_s: float | None
    parts: dict[str, float | None] = field(default_factory=dict)  # None: not measured yet

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spread_s": list(self.spread_s)}

    def text(self, budget_s: float) -> str:
        low, high = self.spread_s
        unmeasured = [name for name, value in self.parts.items() if value is None]
        note = f" ({', '.join(unmeasured)}: not measured yet, counted as 0)" if unmeasured else ""
        return (
            f"predicted freeze window {self.freeze_s:.1f} s (P90; budget {budget_s:g} s): final delta "
            f"{self.final_delta_s:.1f} s (spread {low:.1f}-{high:.1f} s) at a churn of "
            f"{self.churn_objects_per_s:.2f} objects/s, {self.churn_bytes_per_s / 1e6:.3f} MB/s{note}"
        )


def _p90(values: list[float]) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def cost_model(deltas: list[Delta]) -> tuple[float, float]:
    """(fixed seconds, seconds per changed object) of a delta: the least-squares line through the deltas' (changed
    objects, seconds), neither below 0; with no spread in the counts, all of a delta's time is its fixed part."""
    xs, ys = [d.changed for d in deltas], [d.seconds for d in deltas]
    if len(set(xs)) < 2:
        return min(ys), 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    slope = max(slope, 0.0)
    fixed = max(min(intercept, min(ys)), 0.0)
    return fixed, slope


def predict(
    deltas: list[Delta], budget_s: float, measured: dict[str, float | None], gap_s: float | None = None
) -> Prediction | None:
    """The prediction once there is a churn sample (two deltas); None before.

    Each delta after the first is a churn sample: what it found changed over the time since the previous delta
    started. The final delta finds what changes from the last delta's start to the freeze (`gap_s`: by default the
    last delta's duration), and costs the fixed part plus its changed objects at the per-object cost. measured:
    the last durations of the freeze steps, the verification and the switch phases (None: not measured yet)."""
    if len(deltas) < 2:
        return None
    fixed, per_object = cost_model(deltas)
    windows = [(b.changed, b.bytes, b.started - a.started) for a, b in zip(deltas, deltas[1:], strict=False)]
    rates = [(n / w, size / w) for n, size, w in windows if w > 0]
    if not rates:
        return None
    gap = deltas[-1].seconds if gap_s is None else gap_s
    copied = [d for d in deltas if d.objects and d.seconds > fixed]
    copy_objects = sum(d.objects for d in copied) / sum(d.seconds - fixed for d in copied) if copied else None
    copy_bytes = sum(d.bytes for d in copied) / sum(d.seconds - fixed for d in copied) if copied else None
    # The verification lists both sides again, as the fixed part of a delta does, unless a cut-over measured it.
    return from_churn(rates, fixed, per_object, gap, budget_s, measured, fixed, (copy_objects, copy_bytes))


def from_churn(
    rates: list[tuple[float, float]],
    fixed: float,
    per_object: float,
    gap: float,
    budget_s: float,
    measured: dict[str, float | None],
    verification_s: float,
    copy: tuple[float | None, float | None] = (None, None),
) -> Prediction:
    """The final delta (P90 over the churn samples `rates`, objects/s and bytes/s: what changes in `gap` seconds,
    at `fixed` seconds plus `per_object` each) and the freeze window: it plus the measured freeze steps,
    verification (verification_s where not measured) and switch phases. copy: the deltas' copy rates, if known."""
    samples = sorted(fixed + per_object * objects_per_s * gap for objects_per_s, _ in rates)
    final = _p90(samples)
    parts = {**measured, "verification": verification_s} if measured.get("verification") is None else dict(measured)
    freeze = final + sum(value for value in parts.values() if value is not None)
    return Prediction(
        final_delta_s=final,
        spread_s=(samples[0], samples[-1]),
        freeze_s=freeze,
        fits=freeze <= budget_s,
        churn_objects_per_s=statistics.fmean(r for r, _ in rates),
        churn_bytes_per_s=statistics.fmean(b for _, b in rates),
        copy_objects_per_s=copy[0],
        copy_bytes_per_s=copy[1],
        parts=parts,
    )


def never_fits(prediction: Prediction, budget_s: float, deltas: int) -> str:
    """Why the cut-over stops after max_deltas: the churn against the copy, by how much."""
    said = f"after {deltas} deltas the freeze window is still predicted at {prediction.freeze_s:.1f} s, over the "
    said += f"budget of {budget_s:g} s"
    if prediction.copy_objects_per_s:
        ratio = prediction.churn_objects_per_s / prediction.copy_objects_per_s
        said += (
            f": the source changes {prediction.churn_objects_per_s:.2f} objects/s and a delta copies "
            f"{prediction.copy_objects_per_s:.2f} objects/s ({ratio:.2f}x"
            f"{', churn faster than the copy' if ratio >= 1 else ''})"
        )
    return said + "; raise freeze_budget, slow the writers or give the deltas more threads"
