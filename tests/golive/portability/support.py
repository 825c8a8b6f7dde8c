"""What the portability tests share: the meta-compute profile, ferry's rules, and findings as (line, kind)."""

from __future__ import annotations

from pathlib import Path

from ferry.golive.portability.model import Hit
from ferry.golive.portability.rules import load_rules
from ferry.plan import load_target_profile

META = load_target_profile("meta-compute", Path("."))
RULES = load_rules(META)


def found(hits: list[Hit]) -> list[tuple[int, str]]:
    """(line, kind) of each hit, in order of line."""
    return sorted((h.line, h.rule.kind) for h in hits)


# A training repository as a team moving off an InfiniBand cluster has it: a torchrun script, a device-agnostic
# module, a CUDA kernel, requirements on PyTorch's CUDA index, a Dockerfile with the source fabric's settings, a
# PyTorchJob with a ConfigMap mounted as environment, and a chart template no parser reads before rendering.
REPO = {
    "train/train.py": (
        "import os\nimport torch\nimport torch.distributed as dist\n\n\ndef main(cfg):\n"
        '    dist.init_process_group("nccl")\n    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n'
        "    model = build(cfg).cuda()\n    return model\n"
    ),
    "train/agnostic.py": (
        "import torch\n# model.cuda() was here\n\n\ndef main(cfg):\n    device = torch.device(cfg.device)\n"
        '    print("no more .cuda()")\n    return build(cfg).to(device)\n'
    ),
    "train/csrc/fused.cu": "__global__ void fused() {}\n",
    "train/requirements.txt": "--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.3.1+cu121\nnumpy\n",
    "image/Dockerfile": (
        "FROM nvcr.io/nvidia/pytorch:24.05-py3\nENV NCCL_SOCKET_IFNAME=ib0 NCCL_IB_GID_INDEX=3\n"
        "RUN pip install --no-cache-dir cupy-cuda12x\n"
    ),
    "k8s/job.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nccl}\ndata:\n  NCCL_IB_HCA: mlx5_0,mlx5_1\n---\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\nspec:\n  template:\n    spec:\n      containers:\n"
        "        - name: t\n          image: trainer\n          envFrom: [{configMapRef: {name: nccl}}]\n"
        "          env: [{name: NCCL_IB_GID_INDEX, value: '3'}]\n"
    ),
    "k8s/chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
    "k8s/README.md": "Set NCCL_SOCKET_IFNAME=ib0 and call .cuda()\n",
}


def training_repo(root: Path) -> Path:
    """REPO written under root; root."""
    for name, text in REPO.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root
