"""The prediction from deltas' figures (no I/O): churn samples, the cost model, P90 and spread, never-fits words."""

from __future__ import annotations

import pytest

from ferry.cutover.predict import Delta, cost_model, never_fits, predict

NONE_MEASURED = {"freeze steps": None, "verification": None, "switch phases": None}


def deltas(*figures: tuple[float, float, int]) -> list[Delta]:
    """Deltas from (started, seconds, objects copied)."""
    return [
        Delta(n, started, seconds, objects, objects * 1000) for n, (started, seconds, objects) in enumerate(figures, 1)
    ]


def test_no_prediction_before_a_churn_sample() -> None:
    assert predict(deltas((0, 10, 100)), 60, NONE_MEASURED) is None


def test_cost_model_is_a_fixed_part_plus_a_cost_per_changed_object() -> None:
    fixed, per_object = cost_model(deltas((0, 12, 1000), (20, 3, 100), (30, 2, 0)))
    assert fixed == pytest.approx(2, abs=0.3) and per_object == pytest.approx(0.01, abs=0.001)


def test_prediction_from_churn_and_cost() -> None:
    # A bulk copy of 1000 objects in 12 s, then 100 objects changed over 20 s (5/s), then 50 over 10 s (5/s).
    found = predict(deltas((0, 12, 1000), (20, 3, 100), (30, 2.5, 50)), 60, NONE_MEASURED)
    assert found is not None and found.fits
    assert found.churn_objects_per_s == pytest.approx(5)
    low, high = found.spread_s
    assert low <= found.final_delta_s <= high
    # The verification is counted as one more listing (the fixed part), the unmeasured parts as 0 and named.
    assert found.freeze_s == pytest.approx(found.final_delta_s + found.parts["verification"])
    assert "freeze steps, switch phases: not measured yet" in found.text(60)


def test_measured_parts_count_against_the_budget() -> None:
    figures = deltas((0, 12, 1000), (20, 3, 100), (30, 2.5, 50))
    measured = {"freeze steps": 30.0, "verification": 5.0, "switch phases": 40.0}
    found = predict(figures, 60, measured)
    assert found is not None and not found.fits
    assert found.freeze_s == pytest.approx(found.final_delta_s + 75)


def test_never_fits_says_churn_against_copy() -> None:
    found = predict(deltas((0, 10, 100), (10, 20, 200), (30, 40, 400)), 5, NONE_MEASURED)
    assert found is not None and not found.fits
    said = never_fits(found, 5, 3)
    assert "after 3 deltas the freeze window is still predicted at" in said
    assert "churn faster than the copy" in said
