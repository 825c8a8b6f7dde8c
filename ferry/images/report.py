"""The images run as Markdown: each image's source, target digest, kind and CUDA toolkit; the unmapped bases."""

from __future__ import annotations

from typing import Any


def markdown(journal: dict[str, list[dict[str, Any]]]) -> str:
    """The report of a run's journal (its records, skips and unmapped bases)."""
    skipped = {s["target"] for s in journal["skipped"]}
    lines = ["# Images", "", "| source | target | kind | CUDA | pushed |", "|---|---|---|---|---|"]
    for r in sorted(journal["records"], key=lambda r: r["source"]):
        pushed = "no (unchanged)" if r["target"] in skipped else "yes"
        lines.append(f"| {r['source']} | {r['target']}@{r['digest']} | {r['kind']} | {r['cuda'] or '-'} | {pushed} |")
    unmapped = [f"- {u['image']}: line {u['line']}: {u['base']}" for u in journal["unmapped"]]
    return "\n".join(lines + (["", "## Bases no rule maps", *unmapped] if unmapped else [])) + "\n"
