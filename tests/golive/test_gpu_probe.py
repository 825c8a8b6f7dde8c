"""The GPU probe: it measures where torch sees a CUDA device, and SKIPs saying why where not; its verdict against
the datasheet.

The measuring path runs only on a machine with a GPU and torch; no GPU machine was lent to this work yet.
"""

from __future__ import annotations

import json
import subprocess
import sys

from checks.golive import check_gpu
from ferry.golive import gpu_probe
from ferry.results import Status


def _cuda_devices_torch_sees() -> int | None:
    """How many CUDA devices torch sees in the interpreter the probe runs in (None: torch is not installed)."""
    count = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    done = subprocess.run([sys.executable, "-I", "-c", count], capture_output=True, text=True, timeout=120, check=False)
    return int(done.stdout) if done.returncode == 0 else None


def test_the_standalone_script_measures_each_gpu_or_says_why_not() -> None:
    seen = _cuda_devices_torch_sees()
    done = subprocess.run(
        [sys.executable, "-I", gpu_probe.__file__], capture_output=True, text=True, timeout=600, check=True
    )
    result = json.loads(done.stdout)
    check = check_gpu(result)
    if not seen:
        why = "torch is not installed" if seen is None else "no CUDA device visible to torch"
        assert result["status"] == "SKIP" and result["reason"].startswith(why)
        assert check.status == Status.SKIP and check.evidence == [result["reason"]]
        return
    assert result["status"] in ("PASS", "FAIL", "WARN") and result["device_count"] == seen
    for device in result["devices"]:
        assert device["hbm_gb_per_s"] > 0 and device["bf16_tflops"] > 0, device
    assert check.status.value == result["status"] and len(check.evidence) == seen


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
