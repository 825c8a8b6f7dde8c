"""The audit as people act on it: per workload (or accelerator), blockers first, each with its place and the
change; what is ok there as counts by kind; and as JSON for tooling."""

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

    def findings(self, audit: Audit) -> list[tuple[str, Finding]]:
        """(severity here, finding) of every finding that concerns it, blockers first."""
        found = [(f.severities[self.accelerator], f) for f in audit.findings if self.concerns(f)]
        return sorted(found, key=lambda pair: SEVERITIES.index(pair[0]))

    def counts(self, audit: Audit) -> dict[str, int]:
        """Findings by severity here (every severity named)."""
        counted = Counter(severity for severity, _ in self.findings(audit))
        return {severity: counted[severity] for severity in SEVERITIES}


def as_json(audit: Audit, workloads: list[Workload] | None = None) -> list[dict]:
    """The findings as a list (file, line, kind, severity, message, fix, match, severities by accelerator), each
    with the workloads it concerns and its severity for each, when there are workloads."""
    listed = []
    for finding in audit.findings:
        data = finding.to_dict()
        if workloads:
            data["workloads"] = {w.name: finding.severities[w.accelerator] for w in workloads if w.concerns(finding)}
        listed.append(data)
    return listed


def by_kind(pairs: list[tuple[str, Finding]], severity: str) -> dict[str, int]:
    return dict(Counter(f.kind for s, f in pairs if s == severity))


def line(severity: str, finding: Finding) -> str:
    """One finding as a line: severity, place, kind, why, and what to do."""
    fix = f" -> {finding.fix}" if finding.fix and severity != "ok" else ""
    return f"{severity.upper()} {finding.where} {finding.kind}: {finding.message}{fix}"


def text(audit: Audit, workloads: list[Workload], accelerators: dict[str, str]) -> list[str]:
    """The report's lines: a summary, then per workload its counts, its blockers and warnings one a line, and what
    is ok there by kind. accelerators: description by name."""
    lines = [
        f"{audit.files} file(s) read, {len(audit.findings)} finding(s); {audit.agnostic} place(s) already "
        "device-agnostic (torch.accelerator, torch.device from configuration)"
    ]
    for workload in workloads:
        counts, pairs = workload.counts(audit), workload.findings(audit)
        about = accelerators.get(workload.accelerator) or workload.accelerator
        title = workload.name if workload.name == workload.accelerator else f"{workload.name} on {workload.accelerator}"
        lines.append(
            f"{title} ({about}): {counts['blocker']} blocker(s), {counts['warn']} warning(s), {counts['ok']} ok"
        )
        lines += [f"  {line(s, f)}" for s, f in pairs if s != "ok"]
        if counts["ok"]:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind(pairs, "ok").items()))
            lines.append(f"  ok on {workload.accelerator} as it is: {kinds}")
    return lines
