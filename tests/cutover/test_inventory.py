"""An S3 Inventory report (CSV, written by the test: moto stores the configuration but writes no report) as the
first delta's source listing, and a newer report's as a later delta's; the other deltas list, and the cut-over ends
with the target equal to the source."""

from __future__ import annotations

import csv
import gzip
import io
import json

from tests.cutover.test_cutover_cli import contents, cutover_plan, report
from tests.support import run_ferry


def write_inventory(
    s3, source: str, reports: str, extra_rows: list[list[str]], folder: str = "2026-12-04T00-00Z", created: int = 1
) -> str:
    """An inventory report of source's objects now (plus extra_rows) in bucket reports, in its configuration's
    folder `inv/<folder>/` with its creationTimestamp; its manifest's URL."""
    s3.create_bucket(Bucket=reports)
    rows = [
        [source, o["Key"].replace(" ", "+"), str(o["Size"]), o["ETag"].strip('"')]
        for o in s3.list_objects_v2(Bucket=source)["Contents"]
    ] + extra_rows
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    data = f"inv/data/{folder}.csv.gz"
    s3.put_object(Bucket=reports, Key=data, Body=gzip.compress(text.getvalue().encode()))
    manifest = {
        "sourceBucket": source,
        "destinationBucket": f"arn:aws:s3:::{reports}",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, Size, ETag",
        "files": [{"key": data, "size": 1, "MD5checksum": "x"}],
        "creationTimestamp": str(created),
    }
    s3.put_object(Bucket=reports, Key=f"inv/{folder}/manifest.json", Body=json.dumps(manifest).encode())
    return f"moto://{reports}/inv/{folder}/manifest.json"


def test_the_first_delta_lists_the_source_by_its_inventory_report(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "co-inv", "  freeze_budget: 10m\n  delta_interval: 0.1s\n", objects=12)
    s3 = moto_env.client("s3")
    # A key the report lists that is gone since, and one written after the report.
    manifest = write_inventory(s3, "co-inv-src", "co-inv-reports", [["co-inv-src", "live/gone", "5", "0" * 32]])
    s3.put_object(Bucket="co-inv-src", Key="live/after-report", Body=b"late")
    with plan.open("a") as file:
        file.write(f"  inventory: {{manifest: '{manifest}'}}\n")
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 0, err
    first, *later = report(plan)["deltas"]
    assert first["by_inventory"] is True and first["listed"] == 13  # the report's 12 rows and the gone key
    assert first["objects"] == 12 and first["changed_during_copy"] == 1
    assert later and not any(d["by_inventory"] for d in later)
    assert contents(s3, "co-inv-src") == contents(s3, "co-inv-dst")
    assert "live/after-report" in contents(s3, "co-inv-dst")


def test_a_newer_report_is_a_later_deltas_listing_and_then_the_listings_again(prefect_api, moto_env, tmp_path) -> None:
    """The plan names the report of day 4; day 5's (created later) appeared since: the second delta reads it, the
    third finds none newer and lists both sides. An older report (day 3) is never read."""
    plan = cutover_plan(
        tmp_path, moto_env, "co-inv2", "  freeze_budget: 0.001s\n  delta_interval: 0.1s\n  max_deltas: 3\n"
        "  max_delete: {percent: 100}\n", objects=6
    )  # fmt: skip
    s3 = moto_env.client("s3")
    gone = ["co-inv2-src", "live/only-in-day-5", "5", "0" * 32]  # listed by day 5's report, not in the bucket
    write_inventory(s3, "co-inv2-src", "co-inv2-reports", [["co-inv2-src", "live/day-3", "1", "0" * 32]],
                    folder="2026-12-03T00-00Z", created=500)  # fmt: skip
    manifest = write_inventory(s3, "co-inv2-src", "co-inv2-reports", [], folder="2026-12-04T00-00Z", created=1000)
    write_inventory(s3, "co-inv2-src", "co-inv2-reports", [gone], folder="2026-12-05T00-00Z", created=2000)
    s3.put_object(Bucket="co-inv2-dst", Key="live/stale", Body=b"only the target holds it")
    with plan.open("a") as file:
        file.write(f"  inventory: {{manifest: '{manifest}'}}\n")
    code, _, err = run_ferry("cutover", str(plan), "--yes", api=prefect_api)
    assert code == 1 and "after 3 deltas" in err, err  # never fits the budget: the three live deltas ran
    first, second, third = report(plan)["deltas"]
    assert first["by_inventory"] and first["listed"] == 6 and first["changed_during_copy"] == 0
    # Day 5's report: its key gone from the bucket is left to the next delta; a delta by a report deletes nothing.
    assert second["by_inventory"] and second["listed"] == 7 and second["changed_during_copy"] == 1
    assert first["deleted"] == second["deleted"] == 0
    assert not third["by_inventory"] and third["deleted"] == 1
    assert contents(s3, "co-inv2-src") == contents(s3, "co-inv2-dst")
