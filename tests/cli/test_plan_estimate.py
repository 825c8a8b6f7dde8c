"""`ferry plan estimate`: the figures of the run's own diff, read-only, and what the run then does, on moto."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from tests.connectors.test_forecast import without_receipt_probe
from tests.connectors.test_s3 import new_bucket
from tests.support import run_cli, run_ferry, write_plan


def _plan(root: Path, moto_env, extra: str = "") -> tuple[Path, str, str]:
    """A plan from one moto bucket to another through ferry (the target by another name of the server), in two
    shards; the target holds a stale copy of one object and one object the source lacks."""
    source, target = new_bucket(moto_env.endpoint), new_bucket(moto_env.endpoint)
    s3 = moto_env.client("s3")
    for n in range(5):
        s3.put_object(Bucket=source, Key=f"p/a/small-{n}", Body=os.urandom(1000 + n))
    s3.put_object(Bucket=source, Key="p/b/large", Body=os.urandom(1100 * 1024))  # 5 parts of 256 KiB
    s3.put_object(Bucket=source, Key="p/b/changed", Body=b"the new version")
    s3.put_object(Bucket=target, Key="p/b/changed", Body=b"old")
    s3.put_object(Bucket=target, Key="p/a/stray", Body=b"only in the target")
    other = moto_env.endpoint.replace("127.0.0.1", "localhost")
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: quoted\nsource: {{storage: 's3://{source}/p'}}\ntarget: {{storage: 'other://{target}/p'}}\n"
        f"profiles: {{other: {{type: s3, endpoint_url: '{other}', min_part_size: 262144}}}}\n"
        "phases:\n  data_sync: {threads: 4, part_size: 256K, multipart_threshold: 512K, delete: true, "
        "shards: [a/, b/]}\nretries: {attempts: 0, delay_s: 0}\n" + extra
    )
    return plan, source, target


def _target(moto_env, bucket: str) -> dict[str, str]:
    listed = moto_env.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])
    return {item["Key"]: item["ETag"] for item in listed}


def test_the_estimate_is_what_the_run_then_does(prefect_api, moto_env, tmp_path) -> None:
    plan, _, target = _plan(tmp_path, moto_env)
    before = _target(moto_env, target)

    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json")
    assert code == 0, err
    estimate = json.loads(out)
    # The probe says what it will read and write before it starts, and leaves nothing behind.
    assert err.startswith("probe: reads at most 7 object(s)") and "(removed afterwards)" in err
    assert "at 4 threads" in err
    assert _target(moto_env, target) == before, "an estimate (its probe too) leaves the target as it was"
    probe = estimate["probe"]
    assert probe["objects"] == 7 and probe["problems"] == [] and probe["cleanup"].startswith("deleted 7 object(s)")
    assert probe["objects_per_s"] > 0 and probe["bytes_per_s"] > 0
    assert 0 < estimate["duration_p50_s"] <= estimate["duration_p90_s"]
    assert (
        estimate["duration_bound"] in ("the request rate", "the measured bandwidth")
        or "CPU" in estimate["duration_bound"]
    )
    assert (estimate["objects_to_copy"], estimate["objects_to_recopy"], estimate["objects_to_delete"]) == (7, 1, 1)
    assert (estimate["multipart_objects"], estimate["multipart_parts"]) == (1, 5)
    assert sum(row["objects"] for row in estimate["size_histogram"]) == 7

    code, _, err = run_ferry("run", str(plan), api=prefect_api)
    assert code == 0, err
    reports = [json.loads(p.read_text()) for p in (tmp_path / ".ferry" / "runs").glob("*/data_sync/sync-*.json")]
    assert len(reports) == 2
    copied = sum(r["summary"]["objects"]["copied"] for r in reports)
    copied_bytes = sum(r["summary"]["bytes"]["copied"] for r in reports)
    deleted = sum(r["summary"]["objects"]["deleted"] for r in reports)
    assert (estimate["objects_to_copy"], estimate["bytes_to_copy"], estimate["objects_to_delete"]) == (
        copied,
        copied_bytes,
        deleted,
    )
    assert estimate["bytes_to_copy"] == 5 * 1000 + 10 + 1100 * 1024 + len(b"the new version")
    # The engine's own counters of the run, class by class, against the estimate of them.
    for side in ("source", "target"):
        sent: dict[str, int] = {}
        for report in reports:
            for kind, n in without_receipt_probe(report["summary"])[side].items():
                sent[kind] = sent.get(kind, 0) + n
        assert estimate["requests"][side] == sent, side
    assert estimate["requests"]["target"]["DELETE"] == 1


def test_csv_names_every_figure_and_says_what_was_not_counted(moto_env, tmp_path) -> None:
    plan, _, _ = _plan(tmp_path, moto_env)
    page = tmp_path / "quote.html"
    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "csv", "--no-probe", "--html", str(page))
    assert code == 0, err
    assert err == "", "no probe, nothing said of one"
    rows = {row["figure"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["objects_to_copy"]["value"] == "7"
    assert rows["bytes_to_copy"]["unit"] == "bytes"
    assert rows["size_histogram.5.up_to"]["value"] == "no limit"
    assert int(rows["requests.target.PUT"]["value"]) == 6 + 5
    assert rows["duration_p50_s"]["value"] == rows["duration_p90_s"]["value"] == "not measured"
    assert rows["duration_bound"]["value"] == "not measured (--no-probe)"
    assert rows["egress_usd"]["value"] == "not priced" and rows["egress_usd"]["unit"] == "USD"
    assert rows["sample"]["value"] == "every key"
    # The page for a change board: the same figures, the sizes as a chart.
    html = page.read_text()
    assert '<img id="sizes"' in html and "data:image/png;base64,iVBOR" in html
    assert '<td>to copy</td><td class="n">7</td>' in html and "not priced" in html
    # The estimate keeps its figures for `plan show`.
    assert json.loads((tmp_path / ".ferry" / "estimates" / "quoted.json").read_text())["objects_to_copy"] == 7


def test_a_sampled_estimate_is_bounded_and_says_it_is_one(moto_env, tmp_path) -> None:
    plan, _, target = _plan(tmp_path, moto_env)
    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe", "--sample", "3")
    assert code == 0, err
    quote = json.loads(out)
    # Shard a/: its first 3 keys (small-0..2; not small-3, small-4 nor the stray); shard b/: its 2 keys.
    assert (quote["sample"], quote["objects_to_copy"], quote["objects_to_delete"]) == (3, 5, 0)
    assert quote["objects_listed"] == 5
    assert "a bounded estimate: the first 3 keys of each shard" in quote["sample_note"]
    code, out, _ = run_cli("plan", "estimate", str(plan), "--no-probe", "--sample", "3")
    assert code == 0 and "SAMPLE: a bounded estimate" in out


def test_a_plan_without_data_sync_is_one_line(tmp_path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(
        "name: nodata\nsource: {storage: ./src}\ntarget: {storage: ./dst}\nphases: {manifests: {sources: [m]}}\n"
    )
    code, _, err = run_cli("plan", "estimate", str(plan))
    assert (
        code == 2
        and err == f"ferry: error: {plan}: phases.data_sync: the plan moves no data, so there is nothing to estimate\n"
    )


def test_the_quote_is_priced_by_the_table_and_says_what_it_cannot_price(moto_env, tmp_path) -> None:
    plan, source, _ = _plan(tmp_path, moto_env, "pricing: {source: {provider: aws, region: us-east-1}}\n")
    cold = 300_000
    moto_env.client("s3").put_object(Bucket=source, Key="p/a/cold", Body=b"c" * cold, StorageClass="GLACIER")
    moto_env.client("s3").put_bucket_encryption(
        Bucket=source,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]
        },
    )
    negotiated = tmp_path / "negotiated.yaml"
    negotiated.write_text("providers:\n  aws:\n    regions:\n      us-east-1: {egress_tiers: [[null, 0.05]]}\n")

    code, out, err = run_cli(
        "plan", "estimate", str(plan), "--format", "json", "--prices", str(negotiated), "--probe-seconds", "5"
    )
    assert code == 0, err
    quote = json.loads(out)
    gb = 1 << 30
    assert quote["currency"] == "USD" and quote["pricing_date"] == "2025-06-01"
    assert quote["egress_bytes"] == quote["bytes_to_copy"], "every byte is streamed out of the source's cloud"
    assert quote["egress_usd"] == pytest.approx(quote["bytes_to_copy"] / gb * 0.05)
    assert quote["egress_usd_with_exit_waiver"] == 0.0 and "AWS Support" in quote["exit_waiver"]
    sent = quote["requests"]["source"]
    by_class = {"LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
    assert quote["requests_usd"]["source"] == pytest.approx(sum(n * by_class[k] for k, n in sent.items()) / 1000)
    # The target (another moto endpoint) is no provider the table knows: not priced, and said.
    assert quote["requests_usd"]["target"] is None and quote["total_usd"] is None
    assert quote["storage_usd_per_month"] is None
    assert any("target: the endpoint localhost is no provider" in note for note in quote["notes"])
    glacier = quote["restore"]["GLACIER"]
    assert (glacier["objects"], glacier["bytes"], glacier["hours"]) == (1, cold, 5)
    assert glacier["usd"] == pytest.approx(cold / gb * 0.01 + 1 / 1000 * 0.05)
    # The source encrypts with KMS by default (no Bucket Key): each GET of it is one KMS Decrypt.
    assert quote["source_default_encryption"] == "aws:kms"
    assert quote["kms"]["decrypt_requests"] == sent["GET"] > 0
    assert quote["kms"]["usd"] == pytest.approx(sent["GET"] / 10_000 * 0.03)
    # The probe's own egress, priced as the copy's.
    assert quote["probe_egress_usd"] == pytest.approx(quote["probe"]["bytes_leaving_source"] / gb * 0.05)
    assert quote["probe"]["bytes_leaving_source"] > 0


def test_a_route_inside_one_region_pays_no_egress_and_an_unknown_region_is_not_priced(moto_env, tmp_path) -> None:
    same = "pricing: {source: {provider: aws, region: us-east-1}, target: {provider: aws, region: us-east-1}}\n"
    plan, _, _ = _plan(tmp_path, moto_env, same)
    quote = json.loads(run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")[1])
    assert (quote["egress_bytes"], quote["egress_usd"]) == (0, 0.0)
    assert quote["total_usd"] is not None and quote["storage_usd_per_month"] > 0
    assert (quote["source_default_encryption"], quote["kms"]) == (None, None)
    plan.write_text(plan.read_text().replace(same, "pricing: {source: {provider: aws, region: mars-north-1}}\n"))
    quote = json.loads(run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")[1])
    assert quote["egress_usd"] is None and quote["egress_usd_with_exit_waiver"] is None
    assert any("region 'mars-north-1' of aws is not in the price table" in note for note in quote["notes"])


def test_plan_show_prints_the_last_estimate_with_its_age_or_reads_the_change_set(tmp_path) -> None:
    plan = write_plan(tmp_path, "shown")
    code, out, err = run_cli("plan", "show", str(plan))
    assert code == 0, err
    assert "data_sync will copy 3 object(s), 1,302 bytes" in out and "requests not priced at the source" in out
    assert not (tmp_path / "dst").exists(), "plan show changes nothing"
    for offline in ("--offline", "--no-preflight"):
        code, out, err = run_cli("plan", "show", str(plan), offline)
        assert code == 0 and "data_sync: not read (--offline or --no-preflight)" in out and "will copy" not in out

    code, _, err = run_cli("plan", "estimate", str(plan), "--no-probe")
    assert code == 0, err
    code, out, err = run_cli("plan", "show", str(plan), "--no-preflight", "--offline")
    assert code == 0, err
    assert "data_sync (the estimate of 0 second(s) ago" in out or "data_sync (the estimate of 1 second(s) ago" in out
    assert "copy 3 object(s), 1,302 bytes (0 again), delete 0" in out and "duration P50 not measured" in out
