"""An S3 Inventory report (CSV, written by the test: moto stores the configuration but writes no report) as the
first delta's source listing; the later deltas list, and the cut-over ends with the target equal to the source."""

from __future__ import annotations

import csv
import gzip
import io
import json

from tests.cutover.test_cutover_cli import contents, cutover_plan, report
from tests.support import run_ferry


def write_inventory(s3, source: str, reports: str, extra_rows: list[list[str]]) -> str:
    """An inventory report of source's objects now (plus extra_rows) in bucket reports; its manifest's URL."""
    s3.create_bucket(Bucket=reports)
    rows = [
        [source, o["Key"].replace(" ", "+"), str(o["Size"]), o["ETag"].strip('"')]
        for o in s3.list_objects_v2(Bucket=source)["Contents"]
    ] + extra_rows
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
    s3.put_object(Bucket=reports, Key="inv/data/part-1.csv.gz", Body=gzip.compress(text.getvalue().encode()))
    manifest = {
        "sourceBucket": source,
        "destinationBucket": f"arn:aws:s3:::{reports}",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, Size, ETag",
        "files": [{"key": "inv/data/part-1.csv.gz", "size": 1, "MD5checksum": "x"}],
    }
    s3.put_object(Bucket=reports, Key="inv/2026-12-04T00-00Z/manifest.json", Body=json.dumps(manifest).encode())
    return f"moto://{reports}/inv/2026-12-04T00-00Z/manifest.json"


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
