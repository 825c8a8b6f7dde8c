"""Placement advice per workload: bare metal or managed Kubernetes, by rules taken in order, edges exact.

1. above 175B parameters on more than one node -> bare metal (RDMA across nodes);
2. virtualisation overhead more than 12% -> bare metal;
3. the overhead's cost above $5/hour for a job longer than long_job_hours (default 72) -> bare metal;
otherwise managed Kubernetes. Each edge is strict: exactly 175B, 12%, $5 or 72 hours does not decide.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

BARE_METAL = "bare-metal"
MANAGED = "managed-kubernetes"
PARAMS_EDGE = 175e9
OVERHEAD_EDGE = 0.12
COST_EDGE = 5.0
LONG_JOB_HOURS = 72.0
_SUFFIX = {"": 0, "K": 3, "M": 6, "B": 9, "T": 12}
# Below this a count is a slip (405 written for 405B), not a model.
MIN_PARAMS = 1e6
_COUNT = re.compile(r"\s*([0-9][0-9_,]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*([KMBT]?)\s*", re.IGNORECASE)


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


def parse_params(text: str | float) -> float:
    """A parameter count: 405e9, 4.05e+11, 405_000_000_000 or 405B (K, M, B, T), exact at the edges (0.175T is
    175B); ValueError naming the text for anything else, and for counts under a million (405 meant as 405B)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _COUNT.fullmatch(str(text))
        try:
            number = Decimal(match.group(1).replace("_", "").replace(",", "")) if match else None
        except InvalidOperation:
            number = None
        if number is None:
            raise ValueError(f"{text!r} is not a parameter count (examples: 405e9, 405B, 7B)")
        # Decimal, so that 0.175T is exactly 175B and not a hair above the rule's edge.
        value = float(number.scaleb(_SUFFIX[match.group(2).upper()]))
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a parameter count (examples: 405e9, 405B, 7B)")
    if value < MIN_PARAMS:
        raise ValueError(f"{text!r} is {value:g} parameters, under a million: write 405B or 405e9 for 405 billion")
    return value


def parse_overhead(text: str | float) -> float:
    """A virtualisation overhead: a fraction (0.14) or a percentage ('14%'), exact at the 12% edge; ValueError for
    a bare number above 1 (14 meant as 14%?), a negative or non-finite one."""
    if isinstance(text, str) and text.strip().endswith("%"):
        try:
            value = float(Decimal(text.strip()[:-1].strip()) / 100)
        except InvalidOperation:
            raise ValueError(f"{text!r} is not a percentage (e.g. 14%)") from None
    else:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise ValueError(f"{text!r} is not an overhead (a fraction such as 0.14, or 14%)") from None
        if math.isfinite(value) and value > 1:
            raise ValueError(f"{text!r} is not a fraction from 0 to 1 (0.14 is 14%): write {text}% for a percentage")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not an overhead (a fraction from 0 to 1, or a percentage)")
    return value


def _exact(value: float, scale: int = 0) -> str:
    """value * 10**scale in plain digits, every one that decides an edge (12.00000000001% must not read as 12%)."""
    return format(Decimal(repr(float(value))).scaleb(scale).normalize(), "f")


def advise(w: Workload) -> Advice:
    """The advice for one workload, with every rule's reasoning in order (the first that holds decides)."""
    held = [
        w.params > PARAMS_EDGE and w.nodes > 1,
        w.virt_overhead > OVERHEAD_EDGE,
        w.job_hours is not None and w.hourly_cost_delta > COST_EDGE and w.job_hours > w.long_job_hours,
    ]
    length = "unknown (give the job's hours)" if w.job_hours is None else f"{_exact(w.job_hours)} h"
    texts = [
        f"rule 1, above 175B parameters on more than one node: {_exact(w.params, -9)}B parameters on {w.nodes} "
        f"node(s): {'holds' if held[0] else 'does not hold'}",
        f"rule 2, virtualisation overhead more than 12%: {_exact(w.virt_overhead, 2)}%: "
        f"{'holds' if held[1] else 'does not hold'}",
        f"rule 3, overhead cost above $5/hour for a job longer than {_exact(w.long_job_hours)} h: "
        f"${_exact(w.hourly_cost_delta)}/hour, job {length}: {'holds' if held[2] else 'does not hold'}",
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
