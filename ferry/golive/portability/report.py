"""The audit as people act on it: per workload (or accelerator), blockers first, each with its place and the
change; what is ok there as counts by kind; and as JSON for tooling. Everything here reads the audit's record (the
go-live step keeps it in portability.json), so the CLI, the gate and the HTML page say the same."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ferry.golive.portability.audit import Audit, Finding
from ferry.golive.portability.rules import SEVERITIES


@dataclass(frozen=True)
class Workload:
    """Whom findings concern: a name, the accelerator it runs on, and its files (relative names as findings give
    them; none: every file audited)."""

    name: str
    accelerator: str
    paths: tuple[str, ...] = ()

    def concerns(self, finding: Finding) -> bool:
        return not self.paths or any(
            finding.file == p or finding.file.startswith(p.rstrip("/") + "/") for p in self.paths
        )


def as_json(audit: Audit, workloads: list[Workload] | None = None) -> list[dict]:
    """The findings as a list (file, line, kind, severity, message, fix, match, severities by accelerator); with
    workloads, each names those it concerns and its severity for each."""
    listed = []
    for finding in audit.findings:
        data = finding.to_dict()
        if workloads is not None:
            data["workloads"] = {w.name: finding.severities[w.accelerator] for w in workloads if w.concerns(finding)}
        listed.append(data)
    return listed


def record(audit: Audit, workloads: list[Workload]) -> dict:
    """The audit as JSON: files read, device-agnostic places, the workloads and the findings."""
    return {
        "files": audit.files,
        "agnostic": audit.agnostic,
        "workloads": [{"name": w.name, "accelerator": w.accelerator} for w in workloads],
        "findings": as_json(audit, workloads),
    }


def by_workload(recorded: dict) -> list[tuple[dict, list[tuple[str, dict]]]]:
    """Each workload of a record with (its severity, finding) for every finding that concerns it, blockers first."""
    found = []
    for workload in recorded["workloads"]:
        name = workload["name"]
        mine = [(f["workloads"][name], f) for f in recorded["findings"] if name in f["workloads"]]
        found.append((workload, sorted(mine, key=lambda pair: SEVERITIES.index(pair[0]))))
    return found


def counts(pairs: list[tuple[str, dict]]) -> dict[str, int]:
    """Findings by severity (every severity named)."""
    counted = Counter(severity for severity, _ in pairs)
    return {severity: counted[severity] for severity in SEVERITIES}


def line(severity: str, finding: dict) -> str:
    """One finding as a line: severity, place, kind, why, and what to do."""
    where = f"{finding['file']}:{finding['line']}" + (f" (cell {finding['cell']})" if "cell" in finding else "")
    fix = f" -> {finding['fix']}" if finding["fix"] and severity != "ok" else ""
    return f"{severity.upper()} {where} {finding['kind']}: {finding['message']}{fix}"


def text(recorded: dict, accelerators: dict[str, str]) -> list[str]:
    """The report's lines: a summary, then per workload its counts, its blockers and warnings one a line, and what
    is ok there by kind. accelerators: description by name."""
    lines = [
        f"{recorded['files']} file(s) read, {len(recorded['findings'])} finding(s); {recorded['agnostic']} place(s) "
        "already device-agnostic (torch.accelerator, torch.device from configuration)"
    ]
    for workload, pairs in by_workload(recorded):
        name, accelerator, counted = workload["name"], workload["accelerator"], counts(pairs)
        title = name if name == accelerator else f"{name} on {accelerator}"
        about = accelerators.get(accelerator) or accelerator
        lines.append(
            f"{title} ({about}): {counted['blocker']} blocker(s), {counted['warn']} warning(s), {counted['ok']} ok"
        )
        lines += [f"  {line(s, f)}" for s, f in pairs if s != "ok"]
        if counted["ok"]:
            kinds = Counter(f["kind"] for s, f in pairs if s == "ok")
            lines.append(f"  ok on {accelerator} as it is: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}")
    return lines
