"""Placement advice: each rule at, just below and just above its edge, in order."""

from __future__ import annotations

import pytest

from ferry.golive.placement import BARE_METAL, MANAGED, Workload, advise, parse_params
from tests.support import run_cli


def workload(**changes) -> Workload:
    # Below every edge: managed Kubernetes unless a change crosses one.
    base = {"name": "w", "params": 70e9, "nodes": 4, "virt_overhead": 0.05, "hourly_cost_delta": 1.0}
    return Workload(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "advice", "rule"),
    [
        ({}, MANAGED, None),
        # Rule 1: above 175B (strictly) on more than one node.
        ({"params": 175e9, "nodes": 32}, MANAGED, None),
        ({"params": 175e9 + 1, "nodes": 32}, BARE_METAL, 1),
        ({"params": 405e9, "nodes": 1}, MANAGED, None),
        ({"params": 405e9, "nodes": 2}, BARE_METAL, 1),
        # Rule 2: more than 12% (strictly).
        ({"virt_overhead": 0.12}, MANAGED, None),
        ({"virt_overhead": 0.1201}, BARE_METAL, 2),
        ({"virt_overhead": 0.1199}, MANAGED, None),
        # Rule 3: above $5/hour for a job longer than 72 h (both strict), only when the length is known.
        ({"hourly_cost_delta": 5.0, "job_hours": 100}, MANAGED, None),
        ({"hourly_cost_delta": 5.01, "job_hours": 100}, BARE_METAL, 3),
        ({"hourly_cost_delta": 6.5, "job_hours": 72}, MANAGED, None),
        ({"hourly_cost_delta": 6.5, "job_hours": 72.5}, BARE_METAL, 3),
        ({"hourly_cost_delta": 6.5}, MANAGED, None),
        ({"hourly_cost_delta": 6.5, "job_hours": 30, "long_job_hours": 24}, BARE_METAL, 3),
        # Order: the first rule that holds decides.
        ({"params": 405e9, "nodes": 32, "virt_overhead": 0.14}, BARE_METAL, 1),
        ({"virt_overhead": 0.14, "hourly_cost_delta": 6.5, "job_hours": 100}, BARE_METAL, 2),
    ],
)
def test_rules_at_their_edges(changes: dict, advice: str, rule: int | None) -> None:
    result = advise(workload(**changes))
    assert (result.advice, result.rule) == (advice, rule)
    assert len(result.reasoning) >= 3


def test_reasoning_names_the_numbers_and_the_deciding_rule() -> None:
    result = advise(workload(params=405e9, nodes=32, virt_overhead=0.14, hourly_cost_delta=6.5))
    assert result.lines()[0].startswith("bare-metal")
    assert "405B parameters on 32 node(s): holds -> bare metal (decides)" in result.reasoning[0]
    assert "14.0%" in result.reasoning[1] and "not needed" in result.reasoning[1]


@pytest.mark.parametrize(("text", "value"), [("405e9", 405e9), ("405B", 405e9), ("7b", 7e9), ("1.5T", 1.5e12)])
def test_parse_params(text: str, value: float) -> None:
    assert parse_params(text) == value


def test_placement_command() -> None:
    code, out, err = run_cli(
        "golive", "placement", "--params", "405e9", "--nodes", "32", "--virt-overhead", "0.14",
        "--hourly-cost-delta", "6.5",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("bare-metal ") and "rule 1 decided" in lines[0]
    assert any("more than 12%: 14.0%" in line for line in lines)


def test_placement_command_managed_and_bad_params() -> None:
    code, out, _ = run_cli(
        "golive", "placement", "--params", "7B", "--nodes", "1", "--virt-overhead", "0.05",
        "--hourly-cost-delta", "6.5", "--job-hours", "10",
    )  # fmt: skip
    assert code == 0 and out.startswith("managed-kubernetes ")
    code, _, err = run_cli(
        "golive", "placement", "--params", "lots", "--nodes", "1", "--virt-overhead", "0", "--hourly-cost-delta", "0"
    )
    assert code == 2 and "--params" in err and len(err.strip().splitlines()) == 1
