"""The quote as one self-contained HTML page: its tables and the copies by size as a chart (a matplotlib PNG
inlined), for a change board."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from ferry.charts import png
from ferry.files import write_atomic
from ferry.units import format_size

TEMPLATE = Path(__file__).with_name("report.html.j2")


def size_chart(histogram: list[dict[str, Any]]) -> str:
    """Objects and bytes to copy per size bucket, side by side; base64 PNG."""
    from matplotlib.figure import Figure

    labels, low = [], "0"
    for row in histogram:
        labels.append(f"over {low}" if row["up_to"] is None else f"{low}-{format_size(row['up_to'])}")
        low = format_size(row["up_to"]) if row["up_to"] else low
    figure = Figure(figsize=(9, 3.2))
    objects, size = figure.subplots(1, 2)
    objects.bar(labels, [row["objects"] for row in histogram], color="#4C78A8")
    objects.set_title("objects to copy")
    size.bar(labels, [row["bytes"] / 1e9 for row in histogram], color="#F58518")
    size.set_title("GB to copy")
    for axes in (objects, size):
        axes.tick_params(axis="x", labelrotation=30, labelsize=8)
    return png(figure)


def _usd(value: float | None, missing: str = "not priced") -> str:
    return missing if value is None else f"{value:,.4f}"


def write_html(path: Path, figures: dict[str, Any]) -> None:
    """Write the quote's page to path (whole)."""
    requests = [figures["requests"][side] for side in ("source", "target")]
    money = [
        (f"egress ({figures['egress_bytes']:,} bytes leave the source)", _usd(figures["egress_usd"])),
        ("egress with the exit waiver, if granted", _usd(figures["egress_usd_with_exit_waiver"], "no waiver known")),
        ("the source's requests and egress billed to", figures["source_billed_to"]),
        ("requests at the source", _usd(figures["requests_usd"]["source"])),
        ("requests at the target", _usd(figures["requests_usd"]["target"])),
        ("the data gate's listing of the source", _usd(figures["gate_requests_usd"]["source"])),
        ("the data gate's listing of the target", _usd(figures["gate_requests_usd"]["target"])),
        *[
            (f"restore {held['objects']:,} {kind} object(s) first", _usd(held["usd"]))
            for kind, held in figures["restore"].items()
        ],  # fmt: skip
        *([("KMS Decrypt requests reading the SSE-KMS source", _usd(figures["kms"]["usd"]))] if figures["kms"] else []),
        *(
            [("KMS requests of the target's SSE-KMS writes", _usd(figures["kms_target"]["usd"]))]
            if figures["kms_target"]
            else []
        ),
        ("total (egress, requests, the gate, restores, KMS)", _usd(figures["total_usd"])),
        ("target storage per month", _usd(figures["storage_usd_per_month"])),
        ("this estimate's own listing", _usd(figures["estimate_usd"])),
        ("the probe's egress", _usd(figures["probe_egress_usd"], "no probe")),
        ("duration P50 / P90 (s)", _duration(figures)),
        ("bound by", figures["duration_bound"]),
        ("cut-over deltas", figures["churn"]["text"]),
    ]
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    page = environment.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        f=figures,
        chart=size_chart(figures["size_histogram"]),
        kinds=sorted({kind for end in requests if end for kind in end}),
        money=money,
    )
    write_atomic(path, page)


def _duration(figures: dict[str, Any]) -> str:
    if figures["duration_p50_s"] is None:
        return "not measured"
    return f"{figures['duration_p50_s']:,} / {figures['duration_p90_s']:,}"
