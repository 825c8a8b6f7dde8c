"""`ferry plan estimate`: the figures of the run's own diff, read-only, and what the run then does, on moto."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest

from connectors import s3 as s3_connector
from ferry.audit import AuditFolder
from ferry.phases import data_sync
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from ferry.quote.estimate import gate_pages
from ferry.results import Status
from ferry.sync import run_sync
from tests.connectors.test_forecast import without_receipt_probe
from tests.connectors.test_s3 import new_bucket
from tests.faults.proxy import FaultProxy
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


def test_the_estimate_is_what_the_run_then_does(prefect_api, moto_env, tmp_path, monkeypatch) -> None:
    plan, _, target = _plan(tmp_path, moto_env)
    before = _target(moto_env, target)
    monkeypatch.setattr(s3_connector, "_LEARNED", {})  # the estimate runs in this process: as a new one would

    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json")
    assert code == 0, err
    estimate = json.loads(out)
    # The probe says what it will read and write before it starts, and leaves nothing behind.
    assert err.startswith("probe: reads at most 7 object(s)") and "(removed afterwards)" in err
    assert "at 4 threads" in err
    assert _target(moto_env, target) == before, "an estimate (its probe too) leaves the target as it was"
    probe = estimate["probe"]
    assert probe["objects"] == 7 and probe["problems"] == [] and probe["cleanup"].startswith("deleted 7 object(s)")
    # The probe's own requests, counted apart from the run's (which the run's counters match below): its sample's
    # listing, 6 whole PUTs and 5 parts, one multipart upload begun and completed, its cleanup's deletes; and the
    # receipt probe of its first write (moto takes a wrong CRC32C: a PUT, then a DELETE).
    assert probe["requests"]["target"]["PUT"] == 6 + 5 + 1 and probe["requests"]["target"]["MULTIPART"] == 2
    assert probe["requests"]["target"]["DELETE"] == 7 + 1 and probe["requests"]["source"]["LIST"] >= 1
    assert estimate["probe_requests_usd"] == {"source": None, "target": None}, "moto is no provider the table knows"
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
    # Every money figure carries the currency, the gate's and the estimate's own too.
    money = [name for name in rows if "usd" in name]
    assert "gate_requests_usd.target" in money and "estimate_usd" in money
    assert all(rows[name]["unit"] == "USD" for name in money if name != "currency"), money
    assert rows["gate_requests.target.LIST"]["value"] == "2" and rows["intelligent_tiering.sample_note"]["value"] == (
        "every one asked"
    )
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
    assert "duration not measured (no estimate kept: `ferry plan estimate` probes it)" in out
    assert not (tmp_path / "dst").exists(), "plan show changes nothing"
    for offline in ("--offline", "--no-preflight"):
        code, out, err = run_cli("plan", "show", str(plan), offline)
        assert code == 0 and "data_sync: not read (--offline or --no-preflight)" in out and "will copy" not in out

    code, _, err = run_cli("plan", "estimate", str(plan), "--no-probe")
    assert code == 0, err
    code, out, err = run_cli("plan", "show", str(plan), "--no-preflight", "--offline")
    assert code == 0, err
    assert "data_sync (the estimate of 0 second(s) ago" in out or "data_sync (the estimate of 1 second(s) ago" in out
    assert "copy 3 object(s), 1,302 bytes (0 again), delete 0" in out
    assert "duration not measured by the estimate of" in out and "(not measured (--no-probe))" in out


def test_an_approval_says_the_duration_the_last_estimate_measured_with_its_age(tmp_path) -> None:
    plan = write_plan(tmp_path, "approved")
    loaded = load_plan(plan)
    phase = open_phase(loaded, "data_sync")
    assert phase.changes().text.endswith("duration not measured (no estimate kept: `ferry plan estimate` probes it).")
    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json")
    assert code == 0, err
    quote = json.loads(out)
    kept = loaded.layout.estimate("approved")
    two_hours_ago = time.time() - 7200
    os.utime(kept, (two_hours_ago, two_hours_ago))
    before = sorted((tmp_path / "dst").rglob("*"))
    text = phase.changes().text
    said = (
        f"duration P50 {quote['duration_p50_s']:,} s, P90 {quote['duration_p90_s']:,} s (the estimate of 2 hour(s) ago)"
    )
    assert text.endswith(said + "."), text
    assert sorted((tmp_path / "dst").rglob("*")) == before, "no probe inside an approval: the target as it was"


def test_the_gates_listings_and_the_targets_kms_writes_are_what_a_run_then_sends(
    moto_env, tmp_path, monkeypatch
) -> None:
    plan, _, _ = _plan(tmp_path, moto_env, "pricing: {target: {provider: aws, region: us-east-1}}\n")
    plan.write_text(plan.read_text().replace("min_part_size: 262144}", "min_part_size: 262144, kms_key_id: alias/q}"))
    code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")
    assert code == 0, err
    quote = json.loads(out)
    # SSE-KMS writes: one KMS request per PutObject (6), per part (5) and per multipart upload begun (1).
    sent = quote["requests"]["target"]
    assert quote["target_write_encryption"] == "aws:kms" and quote["kms"] is None
    assert quote["kms_target"]["requests"] == sent["PUT"] + quote["multipart_objects"] == 6 + 5 + 1
    assert quote["kms_target"]["usd"] == pytest.approx(12 / 10_000 * 0.03)
    gate_sent = quote["gate_requests"]["target"]
    by_class = {"LIST": 0.005, "HEAD": 0.0004}
    assert quote["gate_requests_usd"]["target"] == pytest.approx(
        sum(n * by_class[k] for k, n in gate_sent.items()) / 1000
    )

    # The run, then the phase's own gate, its requests counted by the connectors it opens.
    loaded = load_plan(plan)
    phase = open_phase(loaded, "data_sync")
    for shard in phase.steps():
        result = run_sync(
            loaded.storage("source"), loaded.storage("target"), phase.transfer_settings(shard),
            profiles=loaded.plan.profiles, state_dir=loaded.layout.state, verify=False,
        )  # fmt: skip
        assert result.stats.failed == 0
    opened = []
    real = data_sync.open_connector
    monkeypatch.setattr(data_sync, "open_connector", lambda *args: opened.append(real(*args)) or opened[-1])
    assert all(r.status == Status.PASS for r in phase.gate(AuditFolder(tmp_path / "audit")))
    gate: dict[str, dict[str, int]] = {"source": {}, "target": {}}
    for n, connector in enumerate(opened):  # the gate opens the source, then the target, per shard
        for kind, count in connector.requests_sent().items():
            side = gate["source" if n % 2 == 0 else "target"]
            side[kind] = side.get(kind, 0) + count
    assert quote["gate_requests"] == gate and gate["target"]["LIST"] == 2


def test_the_gates_listing_takes_a_page_more_or_fewer_as_the_run_adds_or_removes_objects() -> None:
    assert gate_pages(3, 2500, 2500, 1000) == 3
    assert gate_pages(1, 999, 1001, 1000) == 2
    assert gate_pages(2, 1001, 0, 1000) == 1, "an empty listing is one request"
    assert gate_pages(0, 0, 4200, 1000) == 5, "a source the run did not list (an inventory report)"
    assert gate_pages(None, 0, 5, 1000) is None and gate_pages(1, 0, 5, None) is None


def test_a_requester_pays_source_is_billed_to_the_reader_and_said(moto_env, tmp_path) -> None:
    plan, source, _ = _plan(tmp_path, moto_env, "pricing: {source: {provider: aws, region: us-east-1}}\n")
    owner = json.loads(run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")[1])
    # moto does not implement GetBucketRequestPayment: not told.
    assert owner["source_requester_pays"] == {"bucket": None, "profile": False}
    assert owner["source_billed_to"] == "the source bucket's owner (its request payment not told)"
    # The source through a proxy that keeps it Requester Pays, as S3 does.
    with FaultProxy(moto_env.port, requester_pays=source) as proxy:
        text = plan.read_text().replace(f"s3://{source}/p", f"payer://{source}/p")
        payer = f"payer: {{type: s3, endpoint_url: '{proxy.endpoint}'}}, "
        plan.write_text(text.replace("profiles: {", "profiles: {" + payer))
        code, _, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")
        assert code == 2 and err == (
            f"ferry: error: {plan}:2: source.storage: a Requester Pays bucket: its profile needs requester_pays: "
            "true (S3 refuses its reads otherwise)\n"
        )
        plan.write_text(
            plan.read_text().replace(f"'{proxy.endpoint}'}}", f"'{proxy.endpoint}', requester_pays: true}}")
        )
        code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")
        assert code == 0, err
        paid = json.loads(out)
        code, table, _ = run_cli("plan", "estimate", str(plan), "--no-probe")
    assert paid["source_requester_pays"] == {"bucket": True, "profile": True}
    assert paid["source_billed_to"] == "the reader (requester pays)"
    # The same requests, at the same prices, on the reader's account.
    assert paid["requests"]["source"] == owner["requests"]["source"]
    assert paid["requests_usd"]["source"] == pytest.approx(owner["requests_usd"]["source"])
    assert any(n.startswith("requester pays: the source's requests and egress") for n in paid["notes"])
    assert paid["estimate_requests"]["source"]["OTHER"] >= 1, "its GetBucketRequestPayment, the estimate's own"
    assert code == 0 and "requests and egress are billed to the reader (requester pays)" in table


def test_intelligent_tiering_objects_in_an_archive_tier_are_asked_counted_priced_and_timed(
    moto_env, tmp_path, monkeypatch
) -> None:
    plan, source, _ = _plan(tmp_path, moto_env, "pricing: {source: {provider: aws, region: us-east-1}}\n")
    s3 = moto_env.client("s3")
    for name, size in (("frequent", 100), ("archived", 2000), ("deep-1", 3000), ("deep-2", 4000)):
        s3.put_object(Bucket=source, Key=f"p/a/it-{name}", Body=b"t" * size, StorageClass="INTELLIGENT_TIERING")
    # S3 says where an Intelligent-Tiering object sits on a HEAD of it (moto does not: the proxy does).
    tiers = {"it-archived": "ARCHIVE_ACCESS", "it-deep-": "DEEP_ARCHIVE_ACCESS"}
    with FaultProxy(moto_env.port, archive_status=tiers) as proxy:
        text = plan.read_text().replace(f"s3://{source}/p", f"tiers://{source}/p")
        plan.write_text(
            text.replace("profiles: {", f"profiles: {{tiers: {{type: s3, endpoint_url: '{proxy.endpoint}'}}, ")
        )
        quote = json.loads(run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")[1])
        heads = proxy.headers[("HEAD", "host")]
        # At most TIERING_KEYS asked: said as a sample.
        monkeypatch.setattr("connectors.transfer.forecast.TIERING_KEYS", 2)
        code, out, err = run_cli("plan", "estimate", str(plan), "--format", "json", "--no-probe")
    assert code == 0, err
    sampled = json.loads(out)
    assert quote["intelligent_tiering_objects"] == 4
    tiering = quote["intelligent_tiering"]
    assert (tiering["asked"], tiering["sample_note"]) == (4, None)
    assert tiering["archive_tiers"] == {
        "INTELLIGENT_TIERING/ARCHIVE_ACCESS": {"objects": 1, "bytes": 2000},
        "INTELLIGENT_TIERING/DEEP_ARCHIVE_ACCESS": {"objects": 2, "bytes": 7000},
    }
    assert quote["estimate_requests"]["source"]["HEAD"] >= 4 and heads >= 4
    deep = quote["restore"]["INTELLIGENT_TIERING/DEEP_ARCHIVE_ACCESS"]
    assert (deep["objects"], deep["bytes"], deep["hours"], deep["usd"]) == (2, 7000, 12, 0.0)
    assert quote["restore"]["INTELLIGENT_TIERING/ARCHIVE_ACCESS"]["hours"] == 5
    assert sampled["intelligent_tiering"]["asked"] == 2
    assert "the first 2 in key order were asked" in sampled["intelligent_tiering"]["sample_note"]
    assert sampled["intelligent_tiering"]["sample_note"] in sampled["notes"]
    assert sampled["intelligent_tiering"]["archive_tiers"] == {  # it-archived and it-deep-1, in key order
        "INTELLIGENT_TIERING/ARCHIVE_ACCESS": {"objects": 1, "bytes": 2000},
        "INTELLIGENT_TIERING/DEEP_ARCHIVE_ACCESS": {"objects": 1, "bytes": 3000},
    }
