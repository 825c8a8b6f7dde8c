"""The GPU probe: without torch (this machine) it SKIPs and says why; its verdict against the datasheet.

No GPU machine was lent to this work: the measuring path has not run on a GPU here.
"""

from __future__ import annotations

import json
import subprocess
import sys

from checks.golive import check_gpu
from ferry.golive import gpu_probe
from ferry.results import Status


def test_the_standalone_script_skips_without_torch_or_a_gpu() -> None:
    done = subprocess.run(
        [sys.executable, "-I", gpu_probe.__file__], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(done.stdout)
    assert result["status"] == "SKIP" and ("torch" in result["reason"] or "CUDA device" in result["reason"])
    check = check_gpu(result)
    assert check.status == Status.SKIP and check.evidence == [result["reason"]]


def test_datasheet_lookup_prefers_the_specific_name() -> None:
    assert gpu_probe.datasheet("NVIDIA H100 PCIe") == (2000.0, 756.0)
    assert gpu_probe.datasheet("NVIDIA H100 80GB HBM3") == (3350.0, 989.0)
    assert gpu_probe.datasheet("NVIDIA H200") == (4800.0, 989.0)
    assert gpu_probe.datasheet("Tesla T4") is None


def test_check_gpu_reports_each_device_against_its_datasheet() -> None:
    probe = {
        "status": "FAIL",
        "driver": "550.54.15",
        "device_count": 2,
        "devices": [
            {"index": 0, "name": "NVIDIA H200", "hbm_gb_per_s": 4100.0, "bf16_tflops": 800.0, "status": "PASS",
             "datasheet_hbm_gb_per_s": 4800.0, "datasheet_bf16_tflops": 989.0, "hbm_ratio": 0.854, "bf16_ratio": 0.809},
            {"index": 1, "name": "NVIDIA H200", "hbm_gb_per_s": 3000.0, "bf16_tflops": 800.0, "status": "FAIL",
             "datasheet_hbm_gb_per_s": 4800.0, "datasheet_bf16_tflops": 989.0, "hbm_ratio": 0.625, "bf16_ratio": 0.809},
        ],
    }  # fmt: skip
    result = check_gpu(probe)
    assert result.status == Status.FAIL and result.measured == {"driver": "550.54.15", "devices": 2}
    assert "HBM 3000.0 GB/s (62% of 4800.0)" in result.evidence[1] and result.evidence[1].endswith("FAIL")
