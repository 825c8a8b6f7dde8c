"""What a plan's earlier cut-overs measured, read back: the last one's deltas (its `report.json`) and the durations
of its freeze steps, verification and switch phases; and the churn prediction a quote gives before a cut-over: from
that history, else from the change log's events waiting in SQS, else not measured."""

from __future__ import annotations

import json
from typing import Any

from connectors.registry import open_connector
from ferry.cutover.predict import Delta, Prediction, from_churn, predict
from ferry.plan import LoadedPlan

# The most change-log messages a quote reads to measure the event rate (each handed back at once).
EVENTS_SAMPLED = 1000


def measured(loaded: LoadedPlan) -> dict[str, float | None]:
    """The last cut-over's durations of the freeze steps, the verification and the switch phases (None: never
    measured)."""
    path = loaded.layout.cutover_durations(loaded.plan.name)
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {name: kept.get(name) for name in ("freeze steps", "verification", "switch phases")}


def last_deltas(loaded: LoadedPlan) -> tuple[list[Delta], str | None]:
    """The live deltas of the plan's newest cut-over that ran two or more (a churn sample), and its run id."""
    reports = sorted(loaded.layout.runs.glob("*/cutover/report.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(reports):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("plan") == loaded.plan.name and len(record.get("deltas", [])) >= 2:
            return [Delta(**delta) for delta in record["deltas"]], record["run_id"]
    return [], None


def churn(loaded: LoadedPlan, copy_objects_per_s: float | None, listing_s: float) -> dict[str, Any]:
    """The deltas' prediction for a quote: from the last cut-over's deltas where there are some; else from the
    change log's event rate, a delta costing 1/copy_objects_per_s per changed object (the probe's request rate; no
    listing: it reads the keys the log names) and the verification listing_s (the estimate's own listing of both
    sides) unless a cut-over measured it; else not measured."""
    settings = loaded.plan.cutover
    if settings is None:
        return {"from": None, "text": "not applicable: the plan has no cut-over"}
    budget = settings.freeze_budget
    deltas, run_id = last_deltas(loaded)
    prediction = predict(deltas, budget, measured(loaded)) if deltas else None
    if prediction is not None:
        return _said("history", prediction, budget, f"the {len(deltas)} live deltas of cut-over run {run_id}")
    if settings.change_log is None:
        return {"from": None, "text": "not measured: no earlier cut-over's deltas, and no change log to read"}
    source = open_connector(loaded.storage("source"), loaded.plan.profiles)
    try:
        events, size, received = source.sample_events(settings.change_log.sqs_queue_url, EVENTS_SAMPLED)
    finally:
        source.close()
    span = max(received) - min(received) if len(received) >= 2 else 0.0
    sampled = f"{events} event(s) of the change log over {span:.1f} s"
    if span <= 0:
        return {"from": None, "text": f"not measured: {sampled} (two messages apart in time are needed)"}
    rates = [(events / span, size / span)]
    if not copy_objects_per_s:
        said = f"{events / span:.2f} objects/s from {sampled}; the final delta not measured (no probe rate)"
        return {"from": "change log", "churn_objects_per_s": events / span, "final_delta_s": None, "text": said}
    prediction = from_churn(rates, 0.0, 1 / copy_objects_per_s, settings.delta_interval, budget, measured(loaded),
                            listing_s)  # fmt: skip
    note = f"{sampled} (at most {EVENTS_SAMPLED} messages read), a delta every {settings.delta_interval:g} s"
    return _said("change log", prediction, budget, note)


def _said(source: str, prediction: Prediction, budget: float, basis: str) -> dict[str, Any]:
    return {"from": source, **prediction.to_dict(), "text": f"{prediction.text(budget)}; from {basis}"}
