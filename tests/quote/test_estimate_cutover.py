"""The estimate of a cut-over plan: its source listing as the first delta takes it (the S3 Inventory report, with its
age), and the deltas' churn prediction: from the last cut-over's deltas, else the change log's event rate, else not
measured."""

from __future__ import annotations

import json
import time

import pytest

from ferry.cutover.predict import Delta, predict
from ferry.cutover.report import Record
from ferry.plan import load_plan
from tests.cutover.test_change_log import notifying_queue
from tests.cutover.test_cutover_cli import cutover_plan
from tests.cutover.test_inventory import write_inventory
from tests.support import run_cli


def test_a_cutover_plans_inventory_report_is_the_estimates_source_listing_with_its_age(moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "qinv", "  freeze_budget: 10m\n", objects=12)
    s3 = moto_env.client("s3")
    # A report S3 began an hour ago.
    gone = [["qinv-src", "live/gone", "5", "0" * 32]]
    hour_ago = int((time.time() - 3600) * 1000)
    manifest = write_inventory(s3, "qinv-src", "qinv-reports", gone, created=hour_ago)
    for late in ("live/after-1", "live/after-2"):
        s3.put_object(Bucket="qinv-src", Key=late, Body=b"late")
    with plan.open("a") as file:
        file.write(f"  inventory: {{manifest: '{manifest}'}}\n")

    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")
    assert code == 0, err
    quote = json.loads(out)
    listing = quote["source_listing"]
    assert (listing["source"], listing["inventory"]) == ("inventory report", manifest)
    assert listing["age_s"] == pytest.approx(3600, abs=120)
    # The report's 12 rows and the key gone since; not the 2 written after it.
    assert quote["objects_listed"] == quote["objects_to_copy"] == 13
    assert "LIST" not in quote["requests"]["source"], "the source is not listed: the report is its listing"
    assert quote["gate_requests"]["source"]["LIST"] == 1, "the gate lists the source itself"

    code, out, _ = run_cli("plan", "estimate", str(plan), "--no-probe")
    assert code == 0 and f"the source listed by the inventory report {manifest} (written 1 hour(s) ago" in out


def _estimate(plan, *args: str) -> dict:
    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", *args)
    assert code == 0, err
    return json.loads(out)


def test_without_history_or_change_log_the_deltas_are_not_measured(moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "qnone", "  freeze_budget: 10m\n", objects=3)
    churn = _estimate(plan, "--no-probe")["churn"]
    assert churn == {"from": None, "text": "not measured: no earlier cut-over's deltas, and no change log to read"}
    plan.write_text(plan.read_text().split("cutover:")[0])
    assert _estimate(plan, "--no-probe")["churn"]["text"] == "not applicable: the plan has no cut-over"


def test_the_last_cutovers_deltas_predict_the_next_ones(moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "qhist", "  freeze_budget: 2m\n", objects=3)
    loaded = load_plan(plan)
    # What an earlier cut-over measured, kept as the cut-over keeps it: its record, its durations.
    deltas = [
        Delta(number=1, started=1000.0, seconds=40.0, objects=900, bytes=9_000_000),
        Delta(number=2, started=1060.0, seconds=8.0, objects=60, bytes=600_000),
        Delta(number=3, started=1080.0, seconds=5.0, objects=25, bytes=250_000),
    ]
    Record("cutover-old", "qhist", 120.0, True, deltas=deltas).write(loaded.layout.run("cutover-old") / "cutover")
    durations = loaded.layout.cutover_durations("qhist")
    durations.parent.mkdir(parents=True, exist_ok=True)
    durations.write_text(json.dumps({"freeze steps": 3.0, "verification": 4.0}))
    # Another plan's cut-over in the same state directory is not this one's history.
    Record("cutover-other", "other", 60.0, True, deltas=deltas[:2]).write(loaded.layout.run("z") / "cutover")

    churn = _estimate(plan, "--no-probe")["churn"]
    expected = predict(deltas, 120.0, {"freeze steps": 3.0, "verification": 4.0, "switch phases": None})
    assert churn["from"] == "history" and churn["freeze_s"] == pytest.approx(expected.freeze_s)
    assert churn["final_delta_s"] == pytest.approx(expected.final_delta_s) and churn["fits"] is True
    assert churn["text"].endswith("from the 3 live deltas of cut-over run cutover-old")
    code, out, _ = run_cli("plan", "estimate", str(plan), "--no-probe")
    assert code == 0 and "cut-over deltas: predicted freeze window" in out


def test_the_change_log_event_rate_predicts_the_deltas_and_its_events_stay_queued(moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "qlog", "  freeze_budget: 10m\n  delta_interval: 30s\n", objects=4)
    url = notifying_queue(moto_env, "qlog-src")
    s3, sqs = moto_env.client("s3"), moto_env.client("sqs")
    for n in range(3):
        s3.put_object(Bucket="qlog-src", Key=f"live/new-{n}", Body=b"x" * 100)
        time.sleep(0.4)
    with plan.open("a") as file:
        file.write(f"  change_log: {{sqs_queue_url: '{url}'}}\n")

    quote = _estimate(plan, "--probe-seconds", "5")
    churn = quote["churn"]
    # Every event handed back for the cut-over's deltas, and the rate those under the root make over their span.
    waiting = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["SentTimestamp"])
    assert len(waiting["Messages"]) == 4, "S3's test event and the 3 objects' events"
    stamps = sorted(
        int(m["Attributes"]["SentTimestamp"]) / 1000 for m in waiting["Messages"] if "Records" in json.loads(m["Body"])
    )
    assert len(stamps) == 3
    assert churn["from"] == "change log"
    assert churn["churn_objects_per_s"] == pytest.approx(3 / (stamps[2] - stamps[0]))
    assert churn["churn_bytes_per_s"] == pytest.approx(300 / (stamps[2] - stamps[0]))
    # The final delta: what changes in one delta_interval at the probe's request rate.
    per_object = 1 / quote["probe"]["objects_per_s"]
    assert churn["final_delta_s"] == pytest.approx(churn["churn_objects_per_s"] * 30 * per_object, rel=1e-3)
    assert churn["parts"]["verification"] == pytest.approx(quote["listing_s"], rel=1e-3)
    assert "from 3 event(s) of the change log over" in churn["text"]
