"""The estimate's source listing as the run takes it: a cut-over plan's S3 Inventory report, with its age."""

from __future__ import annotations

import json
import time

import pytest

from tests.cutover.test_cutover_cli import cutover_plan
from tests.cutover.test_inventory import write_inventory
from tests.support import run_cli


def test_a_cutover_plans_inventory_report_is_the_estimates_source_listing_with_its_age(moto_env, tmp_path) -> None:
    plan = cutover_plan(tmp_path, moto_env, "qinv", "  freeze_budget: 10m\n", objects=12)
    s3 = moto_env.client("s3")
    manifest = write_inventory(s3, "qinv-src", "qinv-reports", [["qinv-src", "live/gone", "5", "0" * 32]])
    # S3 says when it wrote the report: an hour ago.
    key = manifest.split("qinv-reports/", 1)[1]
    written = json.loads(s3.get_object(Bucket="qinv-reports", Key=key)["Body"].read())
    written["creationTimestamp"] = str(int((time.time() - 3600) * 1000))
    s3.put_object(Bucket="qinv-reports", Key=key, Body=json.dumps(written).encode())
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
