"""The audit folder of a run: `<state>/runs/<run-id>/<phase>/` holds what each phase rendered and measured.

Nothing secret is ever written here: the plan is stored masked, reports carry names of
credentials, never values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ferry.results import CheckResult


def gate_markdown(phase: str, results: list[CheckResult]) -> str:
    """The gate results as a Markdown table, with each result's evidence below it."""
    lines = [f"# Gate: {phase}", "", "| check | status | measured | threshold |", "|---|---|---|---|"]
    for result in results:
        measured = ", ".join(f"{k}={v}" for k, v in result.measured.items())
        threshold = ", ".join(f"{k}={v}" for k, v in result.threshold.items())
        lines.append(f"| {result.name} | **{result.status.value}** | {measured} | {threshold} |")
    for result in results:
        if result.evidence:
            lines += ["", f"## {result.name}", *(f"- {line}" for line in result.evidence)]
    return "\n".join(lines) + "\n"


class AuditFolder:
    """Files of one run, one subfolder per phase."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, phase: str, name: str) -> Path:
        folder = self.root / phase
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def write_text(self, phase: str, name: str, text: str) -> Path:
        """Write the file whole or not at all: a reader (or the run after a crash) never sees half of it."""
        path = self.path(phase, name)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
        return path

    def write_json(self, phase: str, name: str, data: Any) -> Path:
        return self.write_text(phase, name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def write_gate(self, phase: str, results: list[CheckResult]) -> str:
        """Write gate.json and gate.md for phase; return the Markdown."""
        self.write_json(phase, "gate.json", [r.to_dict() for r in results])
        markdown = gate_markdown(phase, results)
        self.write_text(phase, "gate.md", markdown)
        return markdown
