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
    assert majors == {"9", "10", "11", "12", "13"}
    assert data["toolkit_driver"]["13.0.0"] == "580.65.06"


def test_warn_names_what_minor_compatibility_loses() -> None:
    verdict = check("12.4.1", "535.104.05")
    assert "550.54.15" in verdict.reason and "525.60.13" in verdict.reason
    assert "PTX JIT" in verdict.reason


def test_a_release_missing_from_the_table_is_never_pass() -> None:
    assert check("13.3.0", "595.71.05").status == Status.WARN
    assert check("13.3.0", "575.57.08").status == Status.FAIL
    assert "not in the table" in check("13.3.0", "595.71.05").reason
    # NVIDIA's table has no row for 12.3 Update 2: judged by minor-version compatibility alone.
    assert check("12.3.2", "550.54.15").status == Status.WARN


# Rows read from Table 3 of NVIDIA's CUDA 13.2 Update 2 release notes (the table's source).
@pytest.mark.parametrize(
    ("release", "minimum"),
    [
        ("11.7.0", "515.43.04"),
        ("10.2.0", "440.33"),
        ("11.7.1", "515.48.07"),
        ("12.8.0", "570.26"),
        ("12.8.1", "570.124.06"),
        ("13.0.2", "580.95.05"),
        ("13.1.0", "590.44.01"),
        ("13.1.1", "590.48.01"),
        ("13.2.0", "595.45.04"),
        ("13.2.1", "595.58.03"),
        ("13.2.2", "595.71.05"),
    ],
)
def test_rows_as_nvidia_publishes_them(release: str, minimum: str) -> None:
    assert table()["toolkit_driver"][release] == minimum
    assert check(release, minimum).status == Status.PASS


# CUDA and driver strings as images, nvcc and nvidia-smi print them.
@pytest.mark.parametrize(
    ("cuda", "driver", "status", "needle"),
    [
        ("12.4", "550.54.14", Status.PASS, "CUDA 12.4.0's minimum"),
        ("12.4.1", "550.54.15", Status.PASS, "CUDA 12.4.1's minimum"),
        # NV_CUDA_LIB_VERSION's package revision.
        ("12.4.1-1", "550.54.15", Status.PASS, "CUDA 12.4.1's minimum"),
        # A component build (nvcc, cudart) does not say which 12.4 update it came with: the highest 12.4 minimum.
        ("12.4.131", "550.54.15", Status.PASS, "highest minimum of the CUDA 12.4 releases"),
        ("V12.4.131", "550.54.15", Status.PASS, "12.4.131 is a component build"),
        ("12.4.131", "550.54.14", Status.WARN, "550.54.14 < 550.54.15"),
        ("13.4.92", "595.71.05", Status.WARN, "CUDA 13.4 (build 13.4.92) is not in the table"),
        ("13.0", "550.54.15", Status.FAIL, "13.x needs >= 580"),
        ("11.8.0", "470.256.02", Status.WARN, "11.x needs >= 450.80.02"),
        ("12.4.1", "535.104.05", Status.WARN, "550.54.15"),
        ("12.4.1", "470.256.02", Status.FAIL, "12.x needs >= 525.60.13"),
        ("12.4.1", "580.65.06", Status.PASS, ">= 550.54.15"),
        # Two-part drivers exist (570.26 is 12.8 GA's minimum); surrounding spaces are not part of a version.
        ("12.8.0", "570.26", Status.PASS, "driver 570.26 >= 570.26"),
        (" 12.4.1 ", " 550.54.15 ", Status.PASS, "driver 550.54.15 >= 550.54.15,"),
        # Before CUDA 11 there is no minor-version compatibility: the release's own minimum alone decides.
        ("10.2.89", "440.33", Status.PASS, "highest minimum of the CUDA 10.2 releases"),
        ("10.2", "418.39", Status.FAIL, "CUDA 10.x has no minor-version compatibility"),
        ("9.2.148", "396.26", Status.FAIL, "396.26 < 396.37"),
    ],
)
def test_versions_as_found_in_the_wild(cuda: str, driver: str, status: Status, needle: str) -> None:
    verdict = check(cuda, driver)
    assert verdict.status == status and needle in verdict.reason, verdict.reason


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
    [
        ("12.x", "550.54.15", "CUDA version"),
        ("12.4.1", "latest", "driver version"),
        ("8.0.61", "375.26", "no 8.x release in ferry's table (9.x to 13.x)"),
        ("garbage", "550.54.15", "not a version"),
        ("", "550.54.15", "not a version"),
        # A branch is not one driver: 550.54.14 and 550.54.15 are both r550.
        ("12.4.1", "r550", "driver branch"),
        ("12.4.1", "550", "driver branch"),
        ("12.4.1", "", "driver version"),
    ],
)
def test_cuda_check_bad_input_is_one_line_exit_2(cuda: str, driver: str, needle: str) -> None:
    code, out, err = run_cli("golive", "cuda-check", "--cuda", cuda, "--driver", driver)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
