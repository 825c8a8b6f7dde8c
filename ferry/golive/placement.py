"""Placement advice per workload: bare metal or managed Kubernetes, by rules taken in order, edges exact.

1. above 175B parameters on more than one node -> bare metal (RDMA across nodes);
2. virtualisation overhead more than 12% -> bare metal;
3. the overhead's cost above $5/hour for a job longer than long_job_hours (default 72) -> bare metal;
otherwise managed Kubernetes. Each edge is strict: exactly 175B, 12%, $5 or 72 hours does not decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BARE_METAL = "bare-metal"
MANAGED = "managed-kubernetes"
PARAMS_EDGE = 175e9
OVERHEAD_EDGE = 0.12
COST_EDGE = 5.0
LONG_JOB_HOURS = 72.0
_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


@dataclass(frozen=True)
class Workload:
    name: str
    params: float
    nodes: int
    virt_overhead: float
    hourly_cost_delta: float
    # None: the job's length is unknown, so rule 3 cannot decide.
    job_hours: float | None = None
    long_job_hours: float = LONG_JOB_HOURS


@dataclass(frozen=True)
class Advice:
    workload: Workload
    advice: str
    # The rule that decided (1, 2, 3), or None when none did (managed Kubernetes).
    rule: int | None
    # One line per rule: its edge, the workload's numbers, whether it holds.
    reasoning: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The advice first (its first word is the advice), then the reasoning."""
        decided = f"rule {self.rule} decided" if self.rule else "no rule for bare metal holds"
        return [f"{self.advice} ({self.workload.name}: {decided})", *self.reasoning]


def parse_params(text: str) -> float:
    """A parameter count: 405e9, 405000000000 or 405B (K, M, B, T); ValueError naming the text otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([KMBT]?)\s*", str(text), re.IGNORECASE)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a parameter count (examples: 405e9, 405B, 7B)")
    return float(match.group(1)) * _SUFFIX[match.group(2).upper()]


def _billions(params: float) -> str:
    return f"{params / 1e9:g}B"


def advise(w: Workload) -> Advice:
    """The advice for one workload, with every rule's reasoning in order (the first that holds decides)."""
    held = [
        w.params > PARAMS_EDGE and w.nodes > 1,
        w.virt_overhead > OVERHEAD_EDGE,
        w.job_hours is not None and w.hourly_cost_delta > COST_EDGE and w.job_hours > w.long_job_hours,
    ]
    length = "unknown (give the job's hours)" if w.job_hours is None else f"{w.job_hours:g} h"
    texts = [
        f"rule 1, above 175B parameters on more than one node: {_billions(w.params)} parameters on {w.nodes} "
        f"node(s): {'holds' if held[0] else 'does not hold'}",
        f"rule 2, virtualisation overhead more than 12%: {w.virt_overhead:.1%}: "
        f"{'holds' if held[1] else 'does not hold'}",
        f"rule 3, overhead cost above $5/hour for a job longer than {w.long_job_hours:g} h: "
        f"${w.hourly_cost_delta:g}/hour, job {length}: {'holds' if held[2] else 'does not hold'}",
    ]
    rule = next((i + 1 for i, h in enumerate(held) if h), None)
    reasoning = [
        f"{text}{' -> bare metal (decides)' if i + 1 == rule else ''}"
        + (" (not needed: an earlier rule decided)" if rule is not None and i + 1 > rule else "")
        for i, text in enumerate(texts)
    ]
    if rule is None:
        reasoning.append("otherwise -> managed Kubernetes")
    return Advice(w, BARE_METAL if rule else MANAGED, rule, reasoning)
