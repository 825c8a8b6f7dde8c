"""The GPU probe: driver, device count, HBM bandwidth and bf16 matmul throughput against the device's datasheet.

Standalone (stdlib, and torch when installed): run on a GPU node as `python3 gpu_probe.py`; it prints one JSON
object. Without torch or without a CUDA device it says SKIP and why, and measures nothing. "Against the
datasheet" means at least 80% of the datasheet's HBM bandwidth and dense bf16 throughput.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

RATIO = 0.8
# Datasheet figures by device name fragment (most specific first): HBM GB/s, dense bf16 TFLOPS (no sparsity).
DATASHEETS = (
    ("H200", 4800.0, 989.0),
    ("H100 PCIe", 2000.0, 756.0),
    ("H100 NVL", 3900.0, 835.0),
    ("H100", 3350.0, 989.0),
    ("B200", 8000.0, 2250.0),
    ("A100-SXM4-80GB", 2039.0, 312.0),
    ("A100 80GB PCIe", 1935.0, 312.0),
    ("A100", 1555.0, 312.0),
    ("L40S", 864.0, 362.0),
)


def datasheet(name: str) -> tuple[float, float] | None:
    """(HBM GB/s, bf16 TFLOPS) of the device called name, or None when no figure is known."""
    for fragment, bandwidth, tflops in DATASHEETS:
        if fragment.lower() in name.lower():
            return bandwidth, tflops
    return None


def _driver() -> str | None:
    """The NVIDIA driver version nvidia-smi reports, or None without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run(
        [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, check=False
    )
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout.strip() else None


def _timed(torch, fn, repeats: int) -> float:
    """Seconds per call of fn on the GPU (CUDA events), after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def _measure(torch) -> tuple[float, float]:
    """(HBM GB/s, bf16 TFLOPS) of the current device."""
    size = 1 << 30
    src = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    # A device-to-device copy reads and writes every byte: 2 x size through HBM.
    bandwidth = 2 * size / _timed(torch, lambda: dst.copy_(src), 20) / 1e9
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    return bandwidth, 2 * n**3 / _timed(torch, lambda: a @ b, 20) / 1e12


def probe() -> dict:
    """The probe's JSON: status SKIP with reason, or figures per device with PASS/FAIL/WARN against the datasheet."""
    try:
        import torch
    except ImportError:
        return {"status": "SKIP", "reason": "torch is not installed: nothing measured"}
    if not torch.cuda.is_available():
        return {"status": "SKIP", "reason": "no CUDA device visible to torch: nothing measured"}
    devices = []
    for index in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(index)
        with torch.cuda.device(index):
            bandwidth, tflops = _measure(torch)
        torch.cuda.empty_cache()
        sheet = datasheet(name)
        entry = {"index": index, "name": name, "hbm_gb_per_s": round(bandwidth, 1), "bf16_tflops": round(tflops, 1)}
        if sheet is None:
            entry.update(status="WARN", reason=f"no datasheet figures for {name!r}")
        else:
            entry.update(
                datasheet_hbm_gb_per_s=sheet[0],
                datasheet_bf16_tflops=sheet[1],
                hbm_ratio=round(bandwidth / sheet[0], 3),
                bf16_ratio=round(tflops / sheet[1], 3),
                status="PASS" if bandwidth >= RATIO * sheet[0] and tflops >= RATIO * sheet[1] else "FAIL",
            )
        devices.append(entry)
    worst = next((s for s in ("FAIL", "WARN") if any(d["status"] == s for d in devices)), "PASS")
    return {
        "status": worst,
        "driver": _driver(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device_count": len(devices),
        "devices": devices,
    }


if __name__ == "__main__":
    print(json.dumps(probe()), flush=True)
    sys.exit(0)
