"""Prices as data: the shipped table of list prices (`prices.yaml`), a negotiated one over it, and the price of each
figure of a quote by the provider and region of the end it concerns; what the table lacks is not priced (None, with
the reason), never 0."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from connectors.base import REQUEST_CLASSES
from ferry.config import Settings, load_yaml_model

SHIPPED = Path(__file__).with_name("prices.yaml")
GB = 1 << 30
RequestClass = Literal[REQUEST_CLASSES]  # type: ignore[valid-type]


class Restore(Settings):
    """What reading an archived object back costs, at the standard retrieval tier, and how long it takes at most."""

    usd_per_gb: float = Field(ge=0)
    usd_per_1000: float = Field(ge=0)
    hours: float = Field(gt=0)


class TierPrices(Settings):
    """A storage tier's own prices in a region (Azure's Cool, Cold, Archive), over the region's."""

    requests: dict[RequestClass, float] | None = None
    storage_gb_month: float | None = Field(default=None, ge=0)


class RegionPrices(Settings):
    """One region's prices; a figure left out is not priced."""

    # [GB in the tier (None: all the rest), USD per GB], per month, in order.
    egress_tiers: list[tuple[float | None, float]] | None = None
    requests_per: int = Field(default=1000, gt=0)
    requests: dict[RequestClass, float] | None = None
    storage_gb_month: float | None = Field(default=None, ge=0)
    # USD per 10,000 KMS requests (a read of an SSE-KMS object without a Bucket Key is one Decrypt).
    kms_per_10000: float | None = Field(default=None, ge=0)
    restore: dict[str, Restore] | None = None
    # Other storage tiers than the one requests and storage_gb_month price, by name (pricing.<side>.tier).
    access_tiers: dict[str, TierPrices] | None = None


class ProviderPrices(Settings):
    """A provider's prices: where they were taken from and when, its exit waiver, its regions."""

    source: str | None = None
    taken: datetime.date | None = None
    # Suffixes of the endpoint host names that are this provider's (a store elsewhere is priced only if the plan
    # names its provider).
    host_suffixes: list[str] | None = None
    exit_waiver: str | None = None
    regions: dict[str, RegionPrices] = Field(default_factory=dict)


class PriceTable(Settings):
    currency: Literal["USD"] = "USD"
    providers: dict[str, ProviderPrices] = Field(default_factory=dict)


def _over(base: Settings, override: Settings) -> Any:
    """base with the fields override gives replaced (field by field, down to each region's)."""
    values = base.model_dump()
    for name in override.model_fields_set:
        mine, theirs = getattr(base, name), getattr(override, name)
        if name in ("providers", "regions", "access_tiers") and theirs is not None:
            merged = dict(mine or {})
            for key, inner in theirs.items():
                merged[key] = _over(mine[key], inner) if key in mine else inner
            values[name] = merged
        else:
            values[name] = theirs
    return type(base).model_validate(values)


def price_table(*overrides: Path) -> PriceTable:
    """The shipped table with each override file's figures over it, in order (UsageError: file:line: field)."""
    table = load_yaml_model(SHIPPED, PriceTable)
    for path in overrides:
        table = _over(table, load_yaml_model(path, PriceTable))
    return table


@dataclass(frozen=True)
class End:
    """One end's prices (None, with why, where the table has none)."""

    provider: str | None
    region: str | None
    prices: RegionPrices | None
    table: ProviderPrices | None
    why: str = ""
    tier: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "region": self.region,
            "tier": self.tier,
            "prices_from": self.table.source if self.table else None,
            "taken": self.table.taken.isoformat() if self.table and self.table.taken else None,
            "not_priced": self.why or None,
        }


def locate(
    table: PriceTable, side: str, host: str | None, provider: str | None, region: str | None, tier: str | None = None
) -> End:
    """The prices of the plan's end `side` reached at host (None: no network), by the provider and region the plan
    names, else the provider its host belongs to and the region its connector knows; tier: the storage tier the
    plan names, whose prices replace the region's."""
    if provider is None and host is not None:
        provider = next(
            (name for name, p in table.providers.items() if any(host.endswith(s) for s in p.host_suffixes or ())),
            None,
        )
    if provider is None:
        where = f"the endpoint {host} is" if host else "a store reached without a network (a folder) has"
        return End(None, region, None, None, f"{where} no provider the price table knows (pricing.{side}.provider)")
    known = table.providers.get(provider)
    if known is None:
        return End(provider, region, None, None, f"provider {provider!r} is not in the price table")
    if region is None:
        return End(provider, None, None, known, f"the {provider} region is not known (pricing.{side}.region)")
    prices = known.regions.get(region)
    if prices is None:
        return End(provider, region, None, known, f"region {region!r} of {provider} is not in the price table")
    if tier is not None:
        own = (prices.access_tiers or {}).get(tier)
        if own is None:
            why = f"storage tier {tier!r} of {provider} {region} is not in the price table (pricing.{side}.tier)"
            return End(provider, region, None, known, why, tier)
        prices = prices.model_copy(update=own.model_dump(exclude_none=True))
    return End(provider, region, prices, known, tier=tier)


def tiered(size: int, tiers: list[tuple[float | None, float]]) -> float | None:
    """The price of size bytes through monthly tiers ([GB in the tier, USD per GB]); None past the last tier."""
    left, usd = size / GB, 0.0
    for span, per_gb in tiers:
        taken = left if span is None else min(left, span)
        usd += taken * per_gb
        left -= taken
        if left <= 0:
            return usd
    return None


def requests_usd(counts: dict[str, int] | None, prices: RegionPrices | None) -> float | None:
    """The price of requests by class; None where they were not counted or a class is not priced."""
    if counts is None or prices is None or prices.requests is None:
        return None
    if any(kind not in prices.requests for kind in counts):
        return None
    return sum(n * prices.requests[kind] for kind, n in counts.items()) / prices.requests_per
