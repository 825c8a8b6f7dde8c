"""The CUDA fingerprint against NVIDIA's table: known-good, minor-compatible-only and known-bad pairs."""

from __future__ import annotations

import pytest

from ferry.golive.cuda import check, table
from ferry.results import Status
from tests.support import run_cli


@pytest.mark.parametrize(
    ("cuda", "driver", "status"),
    [
        # Exactly the release's own minimum, and one build below it.
        ("12.4.1", "550.54.15", Status.PASS),
        ("12.4.1", "550.54.14", Status.WARN),
        ("12.4.0", "550.54.14", Status.PASS),
        ("12.4", "550.54.14", Status.PASS),
        # The pair: 535 is a 12.x driver (>= 525.60.13) but older than 12.4 Update 1 needs.
        ("12.4.1", "535.104.05", Status.WARN),
        ("12.2.2", "535.104.05", Status.PASS),
        # The 12.x minor-compatibility floor, exactly and one build below.
        ("12.9.1", "525.60.13", Status.WARN),
        ("12.9.1", "525.60.12", Status.FAIL),
        # Known-bad: an 11.x driver under a 12.x toolkit; a 12.x driver under 13.x.
        ("12.4.1", "470.82.01", Status.FAIL),
        ("13.0.0", "575.57.08", Status.FAIL),
        ("13.0.2", "580.65.06", Status.WARN),
        ("13.0.0", "580.65.06", Status.PASS),
        # 11.x: minor compatibility needs 450.80.02, newer than 11.0's own GA minimum.
        ("11.0.2", "450.51.05", Status.PASS),
        ("11.8.0", "450.51.06", Status.FAIL),
        ("11.8.0", "450.80.02", Status.WARN),
        # A newer family's driver runs older toolkits (backward compatibility).
        ("11.8.0", "580.95.05", Status.PASS),
    ],
)
def test_table_pairs(cuda: str, driver: str, status: Status) -> None:
    assert check(cuda, driver).status == status


def test_the_table_has_every_family_and_cuda_13_rows() -> None:
    data = table()
    assert set(data["minor_version_compatibility"]) == {"11", "12", "13"}
    majors = {key.split(".")[0] for key in data["toolkit_driver"]}
    assert majors == {"11", "12", "13"}
    assert data["toolkit_driver"]["13.0.0"] == "580.65.06"


def test_warn_names_what_minor_compatibility_loses() -> None:
    verdict = check("12.4.1", "535.104.05")
    assert "550.54.15" in verdict.reason and "525.60.13" in verdict.reason
    assert "PTX JIT" in verdict.reason


def test_a_release_missing_from_the_table_is_never_pass() -> None:
    assert check("13.1.0", "590.44.01").status == Status.WARN
    assert check("13.1.0", "575.57.08").status == Status.FAIL
    assert "not in the table" in check("13.1.0", "590.44.01").reason


@pytest.mark.parametrize(
    ("args", "code", "first"),
    [
        (["--cuda", "12.4.1", "--driver", "535.104.05"], 0, "WARN"),
        (["--cuda", "12.4.1", "--driver", "550.54.15"], 0, "PASS"),
        (["--cuda", "12.4.1", "--driver", "470.82.01"], 1, "FAIL"),
    ],
)
def test_cuda_check_command(args: list[str], code: int, first: str) -> None:
    exit_code, out, err = run_cli("golive", "cuda-check", *args)
    assert exit_code == code, err
    assert len(out.strip().splitlines()) == 1
    assert out.startswith(first + " ")


@pytest.mark.parametrize(
    ("cuda", "driver", "needle"),
    [("12.x", "550.54.15", "CUDA version"), ("12.4.1", "latest", "driver version"), ("10.2", "440.33", "10.x")],
)
def test_cuda_check_bad_input_is_one_line_exit_2(cuda: str, driver: str, needle: str) -> None:
    code, out, err = run_cli("golive", "cuda-check", "--cuda", cuda, "--driver", driver)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
