"""Placement advice: each rule at, just below and just above its edge, in order."""

from __future__ import annotations

import pytest

from ferry.golive.placement import BARE_METAL, MANAGED, Workload, advise, parse_overhead, parse_params
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
    assert "14%" in result.reasoning[1] and "not needed" in result.reasoning[1]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("405e9", 405e9), ("405B", 405e9), ("7b", 7e9), ("1.5T", 1.5e12), ("4.05e+11", 405e9), ("1.5E11", 150e9),
        ("405 B", 405e9), ("405_000_000_000", 405e9), ("405,000,000,000", 405e9), (405e9, 405e9),
        # Exact at the edge: 0.175 * 10**12 in floating point is not 175e9.
        ("0.175T", 175e9), ("175000M", 175e9),
    ],
)  # fmt: skip
def test_parse_params(text: str, value: float) -> None:
    assert parse_params(text) == value


@pytest.mark.parametrize("text", ["405", "0", "-7e10", "inf", "nan", "lots", "1e", "", "405GB"])
def test_parse_params_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="parameter"):
        parse_params(text)


@pytest.mark.parametrize(
    ("text", "value"), [("0.14", 0.14), ("14%", 0.14), (" 12 % ", 0.12), ("12%", 0.12), (0.12, 0.12), ("0", 0.0)]
)
def test_parse_overhead(text, value: float) -> None:
    assert parse_overhead(text) == value


@pytest.mark.parametrize(("text", "needle"), [("14", "write 14%"), ("1.14", "from 0 to 1"), ("-0.1", "overhead"),
                                              ("-5%", "overhead"), ("nan", "overhead"), ("inf", "overhead"),
                                              ("x%", "percentage")])  # fmt: skip
def test_parse_overhead_refuses(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_overhead(text)


# The CLI as an operator types it, at and around each edge of the Decisions.
BELOW = ["--params", "70B", "--nodes", "1", "--virt-overhead", "0.05", "--hourly-cost-delta", "1"]


def _with(**options: str) -> list[str]:
    args = dict(zip(BELOW[::2], BELOW[1::2], strict=True))
    args.update({f"--{k.replace('_', '-')}": v for k, v in options.items()})
    return [part for pair in args.items() for part in pair]


@pytest.mark.parametrize(
    ("options", "first", "shown"),
    [
        # "above 175B parameters" on "more than one node".
        ({"params": "175B", "nodes": "2"}, "managed-kubernetes", "175B parameters on 2 node(s): does not hold"),
        ({"params": "175e9", "nodes": "32"}, "managed-kubernetes", "175B parameters on 32 node(s): does not hold"),
        ({"params": "0.175T", "nodes": "32"}, "managed-kubernetes", "175B parameters on 32 node(s): does not hold"),
        ({"params": "175000000001", "nodes": "2"}, "bare-metal", "175.000000001B parameters on 2 node(s): holds"),
        ({"params": "405e9", "nodes": "1"}, "managed-kubernetes", "405B parameters on 1 node(s): does not hold"),
        ({"params": "405B", "nodes": "2"}, "bare-metal", "405B parameters on 2 node(s): holds"),
        ({"params": "4.05e+11", "nodes": "2"}, "bare-metal", "405B parameters on 2 node(s): holds"),
        # "more than 12%": a fraction or a percentage, the same edge.
        ({"virt_overhead": "0.12"}, "managed-kubernetes", "more than 12%: 12%: does not hold"),
        ({"virt_overhead": "12%"}, "managed-kubernetes", "more than 12%: 12%: does not hold"),
        ({"virt_overhead": "12.00001%"}, "bare-metal", "more than 12%: 12.00001%: holds"),
        ({"virt_overhead": "0.1200001"}, "bare-metal", "more than 12%: 12.00001%: holds"),
        ({"virt_overhead": "0.14"}, "bare-metal", "more than 12%: 14%: holds"),
        ({"virt_overhead": "14%"}, "bare-metal", "more than 12%: 14%: holds"),
        ({"virt_overhead": "0"}, "managed-kubernetes", "more than 12%: 0%: does not hold"),
        # "$5/h" for a job "longer than 72 h".
        ({"hourly_cost_delta": "5", "job_hours": "100"}, "managed-kubernetes", "$5/hour, job 100 h: does not hold"),
        ({"hourly_cost_delta": "5.01", "job_hours": "72"}, "managed-kubernetes", "$5.01/hour, job 72 h: does not"),
        ({"hourly_cost_delta": "5.01", "job_hours": "72.5"}, "bare-metal", "$5.01/hour, job 72.5 h: holds"),
        ({"hourly_cost_delta": "5.0000001", "job_hours": "72.0000001"}, "bare-metal", "job 72.0000001 h: holds"),
        ({"hourly_cost_delta": "6.5"}, "managed-kubernetes", "job unknown (give the job's hours): does not hold"),
        ({"hourly_cost_delta": "6.5", "job_hours": "30", "long_job_hours": "24"}, "bare-metal", "longer than 24 h"),
        ({"hourly_cost_delta": "-3", "job_hours": "100"}, "managed-kubernetes", "$-3/hour"),
    ],
)  # fmt: skip
def test_placement_command_at_the_edges(options: dict, first: str, shown: str) -> None:
    code, out, err = run_cli("golive", "placement", *_with(**options))
    assert code == 0, err
    assert out.splitlines()[0].startswith(first + " ")
    assert shown in out, out


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"params": "405"}, "--params: '405' is 405 parameters, under a million"),
        ({"params": "0"}, "--params"),
        ({"params": "-7e10"}, "--params"),
        ({"virt_overhead": "14"}, "--virt-overhead: '14' is not a fraction from 0 to 1 (0.14 is 14%)"),
        ({"virt_overhead": "-0.1"}, "--virt-overhead"),
        ({"hourly_cost_delta": "nan"}, "--hourly-cost-delta: nan is not a finite number"),
        ({"job_hours": "inf"}, "--job-hours: inf is not a finite number"),
        ({"job_hours": "-1"}, "--job-hours"),
        ({"nodes": "0"}, "--nodes"),
    ],
)
def test_placement_command_bad_input_is_one_line_exit_2(options: dict, needle: str) -> None:
    code, _, err = run_cli("golive", "placement", *_with(**options))
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_placement_command_missing_option_is_one_line_exit_2() -> None:
    code, _, err = run_cli("golive", "placement", "--params", "70B", "--nodes", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--virt-overhead" in err, err


def test_placement_command() -> None:
    code, out, err = run_cli(
        "golive", "placement", "--params", "405e9", "--nodes", "32", "--virt-overhead", "0.14",
        "--hourly-cost-delta", "6.5",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("bare-metal ") and "rule 1 decided" in lines[0]
    assert any("more than 12%: 14%" in line for line in lines)


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
