"""The price table: the shipped list prices, a negotiated file over them, the ends located, tiers, what is not
priced (None with the reason, never 0)."""

from __future__ import annotations

import pytest

from ferry.errors import UsageError
from ferry.quote.pricing import GB, locate, price_table, requests_usd, tiered


def test_the_shipped_table_names_its_source_and_date_for_every_provider() -> None:
    table = price_table()
    assert table.currency == "USD"
    for name, provider in table.providers.items():
        assert provider.source and provider.source.startswith("https://"), name
        assert provider.taken is not None and provider.exit_waiver, name
        assert provider.regions, name


def test_egress_goes_through_the_tiers_in_order() -> None:
    tiers = [(100, 0.0), (10140, 0.09), (None, 0.05)]
    assert tiered(50 * GB, tiers) == 0.0
    assert tiered(200 * GB, tiers) == pytest.approx(100 * 0.09)
    assert tiered(20240 * GB, tiers) == pytest.approx(10140 * 0.09 + 10000 * 0.05)
    assert tiered(600 * GB, [(100, 0.0), (400, 0.05)]) is None, "past the last tier: not priced"


def test_an_end_is_located_by_its_host_or_by_what_the_plan_names() -> None:
    table = price_table()
    aws = locate(table, "source", "s3.us-west-2.amazonaws.com", None, "us-west-2")
    assert (aws.provider, aws.region, aws.why) == ("aws", "us-west-2", "")
    assert aws.prices is not None and aws.prices.storage_gb_month == 0.023
    unknown = locate(table, "target", "storage.meta.example", None, None)
    assert unknown.prices is None and "pricing.target.provider" in unknown.why
    region = locate(table, "source", "s3.amazonaws.com", None, "ap-nowhere-9")
    assert region.prices is None and "region 'ap-nowhere-9' of aws is not in the price table" in region.why
    named = locate(table, "source", "127.0.0.1", "aws", "us-east-1")
    assert named.prices is aws.prices or named.prices == aws.prices


def test_requests_are_priced_by_class_and_an_uncounted_end_is_not_priced() -> None:
    prices = locate(price_table(), "source", "s3.amazonaws.com", None, "us-east-1").prices
    assert requests_usd({"PUT": 2000, "GET": 10_000}, prices) == pytest.approx(2 * 0.005 + 10 * 0.0004)
    assert requests_usd(None, prices) is None


def test_azure_blob_is_priced_per_10000_operations_by_tier_and_what_is_absent_is_not_priced() -> None:
    table = price_table()
    ops = {"PUT": 20_000, "MULTIPART": 10_000, "LIST": 10_000, "GET": 10_000, "HEAD": 10_000, "DELETE": 7}
    hot = locate(table, "target", "acct.blob.core.windows.net", None, "eastus")
    assert (hot.tier, hot.prices.storage_gb_month) == (None, 0.018)
    # Writes 0.05, lists 0.05, reads 0.004, other 0.004 per 10,000; deletes free.
    assert requests_usd(ops, hot.prices) == pytest.approx(3 * 0.05 + 0.05 + 0.004 + 0.004)
    cold = locate(table, "target", "acct.blob.core.windows.net", None, "eastus", "Cold")
    assert cold.describe()["tier"] == "Cold" and cold.prices.storage_gb_month == 0.0036
    assert requests_usd(ops, cold.prices) == pytest.approx(3 * 0.18 + 0.05 + 0.10 + 0.004)
    assert cold.prices.egress_tiers == hot.prices.egress_tiers, "a tier replaces only what it gives"
    archive = locate(table, "source", None, "azure", "eastus", "Archive").prices
    assert archive.storage_gb_month == 0.00099 and archive.requests["GET"] == 5.0
    frozen = locate(table, "target", None, "azure", "eastus", "Frozen")
    assert frozen.prices is None and "storage tier 'Frozen' of azure eastus is not in the price table" in frozen.why
    # A region whose storage and operations were not transcribed: egress priced, the rest not (never 0).
    west = locate(table, "target", None, "azure", "westeurope").prices
    assert west.egress_tiers and west.storage_gb_month is None and requests_usd({"GET": 1}, west) is None
    assert table.providers["azure"].taken is not None
    assert "pricing/details/storage/blobs" in table.providers["azure"].source


def test_a_negotiated_file_replaces_only_the_figures_it_gives(tmp_path) -> None:
    negotiated = tmp_path / "negotiated.yaml"
    negotiated.write_text(
        "providers:\n  aws:\n    source: contract 2026-17\n    regions:\n"
        "      us-east-1: {egress_tiers: [[null, 0.02]]}\n"
        "  neocloud:\n    source: quote of 2026-11-30\n    taken: 2026-11-30\n"
        "    regions: {dc1: {storage_gb_month: 0.01}}\n"
    )
    table = price_table(negotiated)
    east = table.providers["aws"].regions["us-east-1"]
    assert east.egress_tiers == [(None, 0.02)] and east.storage_gb_month == 0.023
    assert table.providers["aws"].source == "contract 2026-17"
    assert str(table.providers["aws"].taken) == "2025-06-01"
    assert table.providers["aws"].regions["us-west-2"].egress_tiers[1] == (10140, 0.09)
    assert table.providers["neocloud"].regions["dc1"].storage_gb_month == 0.01
    # A negotiated tier replaces that tier's figures only.
    negotiated.write_text(
        "providers:\n  azure:\n    regions:\n      eastus:\n        access_tiers: {Cool: {storage_gb_month: 0.007}}\n"
    )
    tiers = price_table(negotiated).providers["azure"].regions["eastus"].access_tiers
    assert tiers["Cool"].storage_gb_month == 0.007 and tiers["Cool"].requests["PUT"] == 0.10
    assert tiers["Cold"].storage_gb_month == 0.0036


def test_a_bad_prices_file_is_one_line_with_its_line(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers:\n  aws:\n    regions:\n      us-east-1:\n        requests: {FETCH: 0.1}\n")
    with pytest.raises(UsageError, match=r"bad.yaml:5: providers.aws.regions.us-east-1.requests.FETCH"):
        price_table(bad)
