"""The go-live report: Markdown (for the run's artifact) and one self-contained HTML page (charts embedded).

Every item shows PASS/WARN/FAIL/SKIP, the measured value against its threshold, and its evidence; the latency
histogram and the checkpoint throughput chart are matplotlib PNGs inlined as base64, so the page is one file.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import jinja2

from ferry.audit import AuditFolder, gate_markdown
from ferry.results import CheckResult, Status

TEMPLATE = Path(__file__).with_name("report.html.j2")
RDMA_NOTE = "TCP/UDP round trips over the pod network, not RDMA verbs"


def _figures(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items()) or "-"


def markdown(title: str, verdict: Status, results: list[CheckResult], page: Path) -> str:
    """The report as Markdown: the verdict, where the page with charts is, then the gate's table and evidence."""
    head = [
        f"# {title}",
        "",
        f"Gate: **{verdict.value}** (a SKIP counts as WARN; under strict, as FAIL). Interconnect latency: "
        f"{RDMA_NOTE}. The page with the charts: `{page}`.",
        "",
    ]
    return "\n".join(head) + gate_markdown("golive", results)


def png_base64(figure) -> str:
    """A matplotlib figure as a base64 PNG, for a data: URI in a self-contained page."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def latency_chart(latency: dict, p99_us: float) -> str:
    """The round-trip histogram (log scale) with p50, p99, p99.9 and the threshold marked; base64 PNG."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 3.4))
    axes = figure.subplots()
    bins = latency["histogram_us"]
    lefts, widths = [low for low, _, _ in bins], [max(high - low, 1e-3) for low, high, _ in bins]
    axes.bar(lefts, [count for _, _, count in bins], width=widths, align="edge", color="#4C78A8")
    axes.set_xscale("log")
    marks = (("p50_us", "p50", "#54A24B"), ("p99_us", "p99", "#E45756"), ("p99_9_us", "p99.9", "#B279A2"))
    for key, label, colour in marks:
        axes.axvline(latency[key], color=colour, linestyle="--", label=f"{label} {latency[key]} us")
    axes.axvline(p99_us, color="black", linewidth=2, label=f"p99 threshold {p99_us} us")
    axes.set_xlabel("round trip (us, log scale)")
    axes.set_ylabel("samples")
    axes.set_title(f"{latency['protocol'].upper()} round trips, n={latency['samples']} (nearest-rank)")
    axes.legend(fontsize=8)
    return png_base64(figure)


def throughput_chart(checkpoint: dict, write_min: float, read_min: float) -> str:
    """Write and read GB/s against their thresholds, with each shard's read GB/s as points; base64 PNG."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 3.4))
    axes = figure.subplots()
    values = [checkpoint.get("write_gb_per_s") or 0.0, checkpoint.get("read_gb_per_s") or 0.0]
    axes.bar([0, 1], values, color=["#4C78A8", "#F58518"], width=0.5)
    for x, minimum in ((0, write_min), (1, read_min)):
        axes.hlines(minimum, x - 0.35, x + 0.35, colors="black", linewidth=2)
        axes.annotate(f"min {minimum}", (x + 0.36, minimum), fontsize=8, va="center")
    shards = list(checkpoint.get("read_shard_gb_per_s", {}).values())
    if shards:
        axes.scatter(
            [1.0 + 0.3 * ((i % 7) / 6 - 0.5) for i in range(len(shards))], shards, s=10, color="#333", zorder=3
        )
    axes.set_xticks([0, 1], ["write", "read (dots: per shard)"])
    axes.set_ylabel("GB/s (10^9 bytes/s)")
    axes.set_title(f"checkpoint {checkpoint['bytes'] / 1e9:.3g} GB in {checkpoint['shards']} shards")
    return png_base64(figure)


def html(
    title: str,
    verdict: Status,
    results: list[CheckResult],
    *,
    latency: dict | None,
    checkpoint: dict | None,
    gate: dict[str, float],
    generated: str,
) -> str:
    """The whole page, self-contained: styles inline, charts as data: URIs."""
    charts = {}
    if latency:
        charts["latency"] = latency_chart(latency, gate["p99_us"])
    if checkpoint and (checkpoint.get("write_gb_per_s") or checkpoint.get("read_gb_per_s")):
        charts["throughput"] = throughput_chart(
            checkpoint, gate["checkpoint_write_gb_per_s"], gate["checkpoint_read_gb_per_s"]
        )
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    template = environment.from_string(TEMPLATE.read_text(encoding="utf-8"))
    return template.render(
        title=title,
        verdict=verdict.value,
        results=results,
        figures=_figures,
        charts=charts,
        rdma_note=RDMA_NOTE,
        generated=generated,
    )


def write(audit: AuditFolder, title: str, verdict: Status, results: list[CheckResult], page: str) -> tuple[Path, str]:
    """Write the page (report.html, from html()) and the Markdown (report.md) into the run's golive audit folder,
    each whole; return the page's path and the Markdown."""
    path = audit.write_text("golive", "report.html", page)
    text = markdown(title, verdict, results, path)
    audit.write_text("golive", "report.md", text)
    return path, text
