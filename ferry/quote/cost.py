"""The money of a quote: the data figures priced by each end's prices, each figure None (with the reason in
`not_priced`) where a price or a count is missing, never 0 for what is unknown."""

from __future__ import annotations

from typing import Any

from ferry.quote.pricing import GB, End, PriceTable, locate, requests_usd, tiered

SIDES = ("source", "target")


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _egress(leaving: int, source: End, target: End) -> tuple[int, float | None, str]:
    """(bytes leaving the source's cloud, their price, a note) of `leaving` bytes that the target pulls by URL or
    ferry streams; nothing leaves a server-side copy or a route between two ends of one provider's region."""
    if source.provider is not None and (source.provider, source.region) == (target.provider, target.region):
        return 0, 0.0, f"same-region route ({source.provider} {source.region}): no transfer charge"
    if leaving == 0:
        return 0, 0.0, "no byte leaves the source's store (server-side copies)"
    tiers = source.prices.egress_tiers if source.prices else None
    if tiers is None:
        return leaving, None, f"egress not priced: {source.why or 'the source region has no egress tiers'}"
    usd = tiered(leaving, tiers)
    if usd is None:
        return leaving, None, "egress beyond the price table's last tier: not priced"
    return leaving, usd, "priced by the source's monthly tiers, as if the month had no other egress"


def ends(
    table: PriceTable,
    endpoints: dict[str, tuple[str | None, str | None]],
    named: dict[str, tuple[str | None, str | None, str | None]],
) -> dict[str, End]:
    """Each end's prices: by the provider, region and storage tier the plan names (named), else by its endpoint's
    host and the region its connector knows (endpoints)."""
    located = {}
    for side in SIDES:
        host, region = endpoints[side]
        provider, their_region, tier = named[side]
        located[side] = locate(table, side, host, provider, their_region or region, tier)
    return located


def _kms(figures: dict[str, Any], source: End) -> dict[str, Any] | None:
    """The KMS requests a run makes reading an SSE-KMS source without an S3 Bucket Key (one Decrypt per GET of the
    source, and per copy the store makes from it) and their price; None where the source's default encryption is
    not SSE-KMS (or not told: `source_default_encryption` says which)."""
    encryption = figures["source_default_encryption"] or ""
    if not encryption.startswith("aws:kms") or encryption.endswith("bucket-key"):
        return None
    requests = figures["requests"]
    reads = None
    if requests["source"] is not None and requests["target"] is not None:
        copies = requests["target"].get("COPY", 0) if figures["bytes_by_route"]["server"] else 0
        reads = requests["source"].get("GET", 0) + copies
    price = source.prices.kms_per_10000 if source.prices else None
    return {
        "decrypt_requests": reads,
        "usd": None if reads is None or price is None else reads / 10_000 * price,
        "note": "from the source bucket's default encryption: objects written under another setting differ",
    }


def _kms_target(figures: dict[str, Any], target: End) -> dict[str, Any] | None:
    """The KMS requests the target's SSE-KMS writes make (the profile's kms_key_id): one per PutObject, per part
    uploaded or copied, per CopyObject and per multipart upload begun (GenerateDataKey, or Decrypt of the upload's
    data key), and their price; None where the target's writes ask for no KMS key."""
    if not (figures["target_write_encryption"] or "").startswith("aws:kms"):
        return None
    sent = figures["requests"]["target"]
    requests = None if sent is None else sent.get("PUT", 0) + sent.get("COPY", 0) + figures["multipart_objects"]
    price = target.prices.kms_per_10000 if target.prices else None
    return {
        "requests": requests,
        "usd": None if requests is None or price is None else requests / 10_000 * price,
        "note": "an upper bound where the target bucket has an S3 Bucket Key (S3 then asks KMS far less often)",
    }


def _billed_to(figures: dict[str, Any]) -> tuple[str, list[str]]:
    """Whose account the source's requests and egress are billed to, and what to say of it."""
    bucket, profile = figures["source_requester_pays"]["bucket"], figures["source_requester_pays"]["profile"]
    if not (bucket or profile):
        told = "" if bucket is False else " (its request payment not told)"
        return f"the source bucket's owner{told}", []
    note = (
        "requester pays: the source's requests and egress (the estimate's own listing and the probe's too) are billed "
        "to the account ferry reads it with, at the source's prices"
    )
    return "the reader (requester pays)", [note]


def priced(figures: dict[str, Any], source: End, target: End) -> dict[str, Any]:
    """The price figures of a quote's data figures (the keys `ferry plan estimate` adds)."""
    ends = {"source": source, "target": target}
    routes = figures["bytes_by_route"]
    egress_bytes, egress_usd, egress_note = _egress(routes["url"] + routes["stream"], source, target)
    probe = figures["probe"]
    probe_egress_usd = None if probe is None else _egress(probe["bytes_leaving_source"], source, target)[1]
    waiver = source.table.exit_waiver if source.table else None

    def by_side(requests: dict[str, dict[str, int] | None]) -> dict[str, float | None]:
        return {side: requests_usd(requests[side], ends[side].prices) for side in SIDES}

    request_usd = by_side(figures["requests"])
    gate_usd = by_side(figures["gate_requests"])
    restores = {}
    for kind, held in {**figures["archived"], **figures["intelligent_tiering"]["archive_tiers"]}.items():
        price = (source.prices.restore or {}).get(kind) if source.prices else None
        restores[kind] = {
            **held,
            "usd": None
            if price is None
            else held["bytes"] / GB * price.usd_per_gb + held["objects"] / 1000 * price.usd_per_1000,
            "hours": None if price is None else price.hours,
        }
    storage = target.prices.storage_gb_month if target.prices else None
    kms = _kms(figures, source)
    kms_target = _kms_target(figures, target)
    billed_to, billing_notes = _billed_to(figures)
    notes = [egress_note, *billing_notes]
    notes += [f"{side}: {end.why}" for side, end in ends.items() if end.why]
    if figures["intelligent_tiering"]["sample_note"]:
        notes.append(figures["intelligent_tiering"]["sample_note"])
    return {
        "currency": "USD",
        "egress_bytes": egress_bytes,
        "egress_usd": egress_usd,
        # The waiver's figure is shown beside the list price, never assumed: granted case by case.
        "egress_usd_with_exit_waiver": 0.0 if egress_usd == 0 or (waiver and egress_usd is not None) else None,
        "exit_waiver": waiver,
        "requests_usd": request_usd,
        # Whose account pays the source's requests and egress: its owner's, or the reader's (requester pays).
        "source_billed_to": billed_to,
        "restore": restores,
        "storage_usd_per_month": None if storage is None else figures["bytes_listed"] / GB * storage,
        "gate_requests_usd": gate_usd,
        # What the estimate itself costs, apart from the run's: its own listing (and checks), the probe's requests
        # (its sample's listing, its copies, its cleanup) and the probe's egress; the probe's None without a probe.
        "estimate_usd": _sum(list(by_side(figures["estimate_requests"]).values())),
        "probe_requests_usd": None if probe is None else by_side(probe["requests"]),
        "probe_egress_usd": probe_egress_usd,
        "kms": kms,
        "kms_target": kms_target,
        # The run's and its gate's: egress, requests, restores, KMS.
        "total_usd": _sum(
            [
                egress_usd,
                *request_usd.values(),
                *gate_usd.values(),
                *(r["usd"] for r in restores.values()),
                *(k["usd"] for k in (kms, kms_target) if k is not None),
            ]
        ),  # fmt: skip
        "pricing_date": source.describe()["taken"],
        "pricing": {side: end.describe() for side, end in ends.items()},
        "notes": notes,
    }


def _usd(value: float | None) -> str:
    return "not priced" if value is None else f"USD {value:,.2f}"


def in_words(figures: dict[str, Any]) -> str:
    """A quote's money in one sentence (for approvals and `plan show`)."""
    requests = figures["requests_usd"]
    waiver = figures["egress_usd_with_exit_waiver"]
    said = (
        f"{figures['egress_bytes']:,} bytes leave the source: egress {_usd(figures['egress_usd'])}"
        f"{'' if waiver is None else f' ({_usd(waiver)} with the exit waiver, if granted)'}; requests "
        f"{_usd(requests['source'])} at the source, {_usd(requests['target'])} at the target"
    )
    restores = [f"{held['objects']:,} {kind} object(s) to restore first" for kind, held in figures["restore"].items()]
    return said + "".join(f"; {r}" for r in restores) + " (list prices unless the plan names its own)"
