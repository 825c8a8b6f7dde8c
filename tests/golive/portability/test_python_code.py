"""Python read by its parser: CUDA-only calls through aliases, device and backend literals where a device or a
backend goes, CUDA-only imports, extensions; comments, strings and device-agnostic code are no finding."""

from __future__ import annotations

import json
import textwrap

import pytest

from ferry.golive.portability.python_code import read_module, read_notebook
from tests.golive.portability.support import RULES, found


def hits(source: str) -> list[tuple[int, str]]:
    return found(read_module(textwrap.dedent(source).lstrip("\n"), "train.py", RULES).hits)


# (source, expected (line, kind) findings): each a way teams write it (torchrun scripts, DeepSpeed, Megatron, HF).
CASES = {
    "aliased module": (
        """
        import torch as T
        T.cuda.synchronize()
        """,
        [(2, "cuda-call")],
    ),
    "from torch import cuda": (
        """
        from torch import cuda
        cuda.empty_cache()
        """,
        [(2, "cuda-call")],
    ),
    "amp by its own name": (
        """
        from torch.cuda.amp import autocast, GradScaler
        scaler = GradScaler()
        with autocast(dtype=torch.bfloat16):
            pass
        """,
        [(2, "cuda-call"), (3, "cuda-call")],
    ),
    ".cuda() on anything": (
        """
        model = GPT(config).cuda()
        batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
        self.model.half().cuda(local_rank)
        """,
        [(1, "cuda-call"), (2, "cuda-call"), (3, "cuda-call")],
    ),
    "device literals where a device goes": (
        """
        import torch
        x = x.to("cuda")
        y = y.to(device="cuda:0")
        d = torch.device("cuda", local_rank)
        z = torch.zeros(4, device=f"cuda:{rank}")
        state = torch.load(path, map_location="cuda:%d" % rank)
        with torch.autocast("cuda", dtype=torch.float16):
            pass
        """,
        [(2, "cuda-call"), (3, "cuda-call"), (4, "cuda-call"), (5, "cuda-call"), (6, "cuda-call"), (7, "cuda-call")],
    ),
    "a device chosen by availability still names cuda": (
        """
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        """,
        [(2, "cuda-call"), (2, "cuda-call")],
    ),
    "device defaults of functions and options": (
        """
        def evaluate(model, device="cuda:0"):
            pass
        parser.add_argument("--device", type=str, default="cuda")
        parser.add_argument("--lr", type=float, default=3e-4)
        """,
        [(1, "cuda-call"), (3, "cuda-call")],
    ),
    "cudnn and CUDA graphs and streams": (
        """
        import torch
        torch.backends.cudnn.benchmark = True
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        """,
        [(2, "cuda-call"), (3, "cuda-call"), (4, "cuda-call")],
    ),
    "the NCCL backend, positional, keyword and conditional": (
        """
        import torch.distributed as dist
        import deepspeed
        dist.init_process_group("nccl")
        dist.init_process_group(backend="nccl", init_method="env://")
        dist.init_process_group(backend="nccl" if use_gpu else "gloo")
        deepspeed.init_distributed(dist_backend="nccl")
        args = TrainingArguments(output_dir="out", ddp_backend="nccl")
        """,
        [(3, "nccl-backend"), (4, "nccl-backend"), (5, "nccl-backend"), (6, "nccl-backend"), (7, "nccl-backend")],
    ),
    "the NCCL backend by its enum": (
        """
        import torch.distributed as dist
        dist.init_process_group(backend=dist.Backend.NCCL)
        """,
        [(2, "nccl-backend")],
    ),
    "the backend a script's settings name (nanoGPT, Megatron options)": (
        """
        import torch.distributed as dist
        backend = "nccl"  # 'nccl', 'gloo', etc.
        dist.init_process_group(backend=backend)
        parser.add_argument("--dist-backend", default="nccl", choices=["nccl", "gloo"])
        def setup(rank, world_size, backend="nccl"):
            pass
        """,
        [(2, "nccl-backend"), (4, "nccl-backend"), (5, "nccl-backend")],
    ),
    "CUDA-only libraries, each import once": (
        """
        import cupy as cp
        from apex.optimizers import FusedAdam
        from flash_attn import flash_attn_func
        import bitsandbytes as bnb
        import xformers.ops as xops
        import tensorrt as trt
        from numba import cuda
        """,
        [
            (1, "cuda-library"),
            (2, "cuda-library"),
            (3, "cuda-library"),
            (4, "cuda-library"),
            (5, "cuda-library"),
            (6, "cuda-library"),
            (7, "cuda-library"),
        ],
    ),
    "CUDA kernels chosen by keyword (Hugging Face)": (
        """
        model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flash_attention_2")
        args = TrainingArguments(output_dir="o", optim="paged_adamw_8bit_bnb")
        other = AutoModelForCausalLM.from_pretrained(name, attn_implementation="sdpa")
        """,
        [(1, "cuda-library"), (2, "cuda-library")],
    ),
    "a CUDA extension in setup.py": (
        """
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
        setup(
            name="fused_ops",
            ext_modules=[CUDAExtension("fused_ops", ["fused.cpp", "fused_kernel.cu"])],
            install_requires=["torch==2.3.1+cu121", "numpy"],
            cmdclass={"build_ext": BuildExtension},
        )
        """,
        [(5, "cuda-extension"), (6, "cuda-package")],
    ),
    "NVIDIA's tools run from Python": (
        """
        import os, subprocess
        out = subprocess.check_output(["nvidia-smi", "--query-gpu=name", "--format=csv"])
        os.system("nvcc --version")
        subprocess.run(["ls", "-l"])
        """,
        [(2, "cuda-call"), (3, "cuda-call")],
    ),
    "kernels compiled at run time": (
        """
        from torch.utils import cpp_extension
        ops = cpp_extension.load(name="ops", sources=["ops.cpp", "ops_kernel.cu"])
        fused = cpp_extension.load(name="fused", sources=[srcpath / "scaled_softmax.cpp", srcpath / "softmax.cu"])
        """,
        [(2, "cuda-extension"), (3, "cuda-extension")],
    ),
}


@pytest.mark.parametrize(("source", "expected"), CASES.values(), ids=CASES.keys())
def test_python_findings(source: str, expected: list[tuple[int, str]]) -> None:
    assert hits(source) == expected


def test_comments_strings_and_device_agnostic_code_are_no_finding() -> None:
    source = '''
    """Training loop. Previously: model.cuda() and torch.device("cuda")."""
    import torch
    # model = model.cuda()
    def main(cfg):
        print("moving off .cuda(), torch.cuda.synchronize() and init_process_group('nccl')")
        device = torch.device(cfg.device)
        accelerator = torch.accelerator.current_accelerator()
        torch.distributed.init_process_group(backend=cfg.backend, device_id=device)
        model = build(cfg).to(device)
        if device.type == "cuda":
            pass
    '''
    found = read_module(textwrap.dedent(source), "train.py", RULES)
    assert found.hits == [] and found.agnostic == 2


def test_a_triton_kernel_warns_and_a_name_shadowing_nothing_is_no_finding() -> None:
    source = """
    import triton
    import triton.language as tl
    cuda = MyDevice()
    cuda.synchronize()
    """
    result = read_module(textwrap.dedent(source), "k.py", RULES).hits
    assert [(h.line, h.rule.kind, h.rule.severity) for h in result] == [
        (2, "cuda-library", "warn"), (3, "cuda-library", "warn")
    ]  # fmt: skip


def test_environment_set_from_python_is_a_container_of_settings() -> None:
    source = """
    import os
    os.environ["NCCL_SOCKET_IFNAME"] = "ib0"
    os.environ.setdefault("NCCL_IB_HCA", "mlx5_0,mlx5_1")
    """
    container = read_module(textwrap.dedent(source).lstrip("\n"), "launch.py", RULES).container
    assert container is not None
    assert [(s.name, s.value, s.line) for s in container.settings] == [
        ("NCCL_SOCKET_IFNAME", "ib0", 2), ("NCCL_IB_HCA", "mlx5_0,mlx5_1", 3)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("source", "line"), [("def f(:\n    pass\n", 1), ("x = 1\nprint 'python 2'\n", 2), ("a = '\0'\x00", 1)]
)
def test_a_file_that_does_not_parse_is_unreadable_never_skipped(source: str, line: int) -> None:
    (hit,) = read_module(source, "old.py", RULES).hits
    assert hit.rule.kind == "unreadable" and hit.line == line and "not Python" in hit.match


def test_an_expression_nested_past_the_interpreters_recursion_is_unreadable() -> None:
    source = "device = " + " + ".join(['"cuda"'] * 2000) + "\n"
    (hit,) = read_module(source, "generated.py", RULES).hits
    assert hit.rule.kind == "unreadable" and hit.match == "nested too deeply to read"


def notebook(*cells: tuple[str, str]) -> str:
    return json.dumps(
        {"nbformat": 4, "cells": [{"cell_type": kind, "source": text.splitlines(True)} for kind, text in cells]}
    )


def test_a_notebook_is_read_cell_by_cell() -> None:
    text = notebook(
        ("markdown", "Call `model.cuda()` here"),
        ("code", "!pip install -q bitsandbytes flash-attn\nimport torch\n"),
        ("code", "%%time\nmodel = model.cuda()\n"),
        ("code", "def broken(:\n"),
        ("code", "x = torch.randn(3, device='cuda')\n"),
        ("code", "%%bash\nset -e\npip install cupy-cuda12x\n"),
        ("code", "pip install xformers\n!pip install --no-cache-dir \\\n    apex\ny = x.cuda()\n"),
        ("code", "%%writefile train.py\nimport torch\nmodel.cuda()\n"),
        ("code", "%%writefile job.yaml\nkind: Job\n"),
    )
    result = read_notebook(text, "explore.ipynb", RULES).hits
    assert sorted((h.cell, h.line, h.rule.kind) for h in result) == [
        (2, 1, "cuda-package"), (2, 1, "cuda-package"), (3, 2, "cuda-call"), (4, 1, "unreadable"),
        (5, 1, "cuda-call"), (6, 3, "cuda-package"), (7, 1, "cuda-package"), (7, 2, "cuda-package"),
        (7, 4, "cuda-call"), (8, 3, "cuda-call"),
    ]  # fmt: skip


def test_a_file_that_is_no_notebook_is_unreadable() -> None:
    (hit,) = read_notebook("{not json", "x.ipynb", RULES).hits
    assert hit.rule.kind == "unreadable" and "not a notebook" in hit.match
