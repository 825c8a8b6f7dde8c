"""The audit folder of a run: `<state>/runs/<run-id>/<phase>/` holds what each phase rendered and measured.

Nothing secret is ever written here: the plan is stored masked, reports carry names of
credentials, never values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ferry.files import write_atomic
from ferry.results import CheckResult

# Where a phase's publish() put its file.
PUBLISHED = "published.json"


@dataclass(frozen=True)
class Unpublished:
    """What unpublish() did (or, in a dry run, would do) to a published file, and the line saying so."""

    action: Literal["restore", "remove", "leave"]
    at: Path
    item: str


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
        return write_atomic(self.path(phase, name), text)

    def publish(self, phase: str, name: str, text: str, at: Path) -> bool:
        """Publish text at `at` (atomically) for other phases and later runs to read, keeping in the phase's folder
        what it published (name), where (`published.json`) and what it replaced (`previous-<name>`), which
        unpublish() puts back. Returns whether the published file changed."""
        previous = at.read_text(encoding="utf-8") if at.exists() else None
        if previous is not None:
            self.write_text(phase, f"previous-{name}", previous)
        self.write_text(phase, name, text)
        self.write_json(phase, PUBLISHED, {"path": str(at)})
        write_atomic(at, text)
        return previous != text

    def unpublish(self, phase: str, name: str, what: str, *, dry_run: bool = False) -> Unpublished | None:
        """Undo publish(): put back what it replaced, or remove the file if it replaced nothing; leave it if it
        was published over since (by a later run: not this run's to undo). None when the run published nothing.
        what names the file's content in the line ("the bindings")."""
        folder = self.root / phase
        if not (folder / PUBLISHED).exists():
            return None
        at = Path(json.loads((folder / PUBLISHED).read_text(encoding="utf-8"))["path"])
        ours, previous = folder / name, folder / f"previous-{name}"
        live = at.read_text(encoding="utf-8") if at.exists() else None
        if ours.exists() and live != ours.read_text(encoding="utf-8"):
            return Unpublished("leave", at, f"leave {at}: it no longer holds {what} run {self.root.name} published")
        if previous.exists():
            if not dry_run:
                write_atomic(at, previous.read_text(encoding="utf-8"))
            return Unpublished("restore", at, f"restore {at} from {previous}")
        if not dry_run:
            at.unlink(missing_ok=True)
        return Unpublished("remove", at, f"remove {at}")

    def write_json(self, phase: str, name: str, data: Any) -> Path:
        return self.write_text(phase, name, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def write_gate(self, phase: str, results: list[CheckResult]) -> str:
        """Write gate.json and gate.md for phase; return the Markdown."""
        self.write_json(phase, "gate.json", [r.to_dict() for r in results])
        markdown = gate_markdown(phase, results)
        self.write_text(phase, "gate.md", markdown)
        return markdown
