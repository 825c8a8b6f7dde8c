"""The audit over a repository: every file read by its kind, each finding judged per accelerator (ok for NVIDIA,
a blocker for MTIA), unreadable files listed, nothing written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ferry.errors import UsageError
from ferry.golive.portability import report
from ferry.golive.portability.audit import audit
from tests.golive.portability.support import META, training_repo


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path).encode() + (path.read_bytes() if path.is_file() else b"/"))
    return digest.hexdigest()


def test_a_repository_judged_for_both_accelerators(tmp_path: Path) -> None:
    root = training_repo(tmp_path)
    before = tree_digest(root)
    result = audit([root / "train", root / "image", root / "k8s"], META, ["nvidia", "mtia"], root)
    assert tree_digest(root) == before, "read-only"
    table = {(f.file, f.line, f.kind): f.severities for f in result.findings}
    code = {"nvidia": "ok", "mtia": "blocker"}
    assert table == {
        ("train/train.py", 7, "nccl-backend"): code,
        ("train/train.py", 8, "cuda-call"): code,
        ("train/train.py", 9, "cuda-call"): code,
        ("train/csrc/fused.cu", 1, "cuda-extension"): code,
        ("train/requirements.txt", 1, "cuda-package"): code,
        ("train/requirements.txt", 2, "cuda-package"): code,
        ("image/Dockerfile", 2, "ib-setting"): {"nvidia": "blocker", "mtia": "blocker"},
        ("image/Dockerfile", 3, "cuda-package"): code,
        ("k8s/job.yaml", 5, "ib-setting"): {"nvidia": "warn", "mtia": "warn"},
        ("k8s/chart/templates/cm.yaml", 1, "unreadable"): {"nvidia": "warn", "mtia": "warn"},
    }
    # Blockers first; the README is no file the audit reads; the device-agnostic module is counted, not found.
    assert [f.severity for f in result.findings] == ["blocker"] * 8 + ["warn"] * 2
    assert result.files == 7 and result.agnostic == 1
    (ib0,) = [f for f in result.findings if f.kind == "ib-setting" and f.file == "image/Dockerfile"]
    assert ib0.fix == "drop NCCL_SOCKET_IFNAME=ib0; the target's interfaces are eth0"
    (nccl,) = [f for f in result.findings if f.kind == "nccl-backend"]
    assert "mtia uses the platform SDK's collective library" in nccl.message


def test_the_report_per_workload_puts_blockers_first_and_counts_what_is_ok(tmp_path: Path) -> None:
    root = training_repo(tmp_path)
    result = audit([root], META, ["nvidia", "mtia"], root)
    workloads = [
        report.Workload("llama-mtia", "mtia", ("train",)),
        report.Workload("llama-h100", "nvidia"),
    ]
    recorded = report.record(result, workloads)
    lines = report.text(recorded, {"nvidia": "NVIDIA H100/H200", "mtia": "Meta MTIA"})
    assert lines[1] == "llama-mtia on mtia (Meta MTIA): 6 blocker(s), 0 warning(s), 0 ok"
    assert lines[2].startswith("  BLOCKER train/csrc/fused.cu:1 cuda-extension: fused.cu is CUDA C++ source -> ")
    h100 = lines.index("llama-h100 on nvidia (NVIDIA H100/H200): 1 blocker(s), 2 warning(s), 7 ok")
    assert lines[h100 + 1].startswith("  BLOCKER image/Dockerfile:2 ib-setting: NCCL_SOCKET_IFNAME=ib0")
    assert lines[-1] == "  ok on nvidia as it is: cuda-call 2, cuda-extension 1, cuda-package 3, nccl-backend 1"
    listed = recorded["findings"]
    cu = next(item for item in listed if item["file"] == "train/csrc/fused.cu")
    assert cu["workloads"] == {"llama-mtia": "blocker", "llama-h100": "ok"}
    docker = next(item for item in listed if item["file"] == "image/Dockerfile" and item["kind"] == "ib-setting")
    assert docker["workloads"] == {"llama-h100": "blocker"}


def test_a_folder_that_cannot_be_listed_is_listed(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "train.py").write_text("model.cuda()\n")
    scandir = os.scandir

    def refusing(path):
        if Path(path).name == "locked":  # as a folder of another user's with mode 0700 answers
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    result = audit([tmp_path], META, ["nvidia"], tmp_path)
    assert [(f.file, f.kind, f.message) for f in result.findings] == [
        ("locked", "unreadable", "cannot list this folder")
    ]


def test_what_cannot_be_read_is_listed(tmp_path: Path) -> None:
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nimport torch\n")
    (tmp_path / "py2.py").write_text("print 'hello'\n")
    result = audit([tmp_path, tmp_path / "gone"], META, ["nvidia"], tmp_path)
    assert sorted((f.file, f.kind, f.severity) for f in result.findings) == [
        ("gone", "unreadable", "warn"), ("latin1.py", "unreadable", "warn"), ("py2.py", "unreadable", "warn")
    ]  # fmt: skip


def test_a_profile_adds_rules_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(
        "rules:\n  - kind: cuda-library\n    imports: [my_cuda_ops]\n    needs: cuda\n    why: '{match} is ours'\n"
    )
    (tmp_path / "m.py").write_text("import my_cuda_ops\n")
    profile = META.model_copy(update={"portability_rules": str(tmp_path / "rules.yaml")})
    (finding,) = audit([tmp_path / "m.py"], profile, ["mtia"], tmp_path).findings
    assert (finding.kind, finding.severity, finding.message) == (
        "cuda-library",
        "blocker",
        "import my_cuda_ops is ours",
    )
    (tmp_path / "bad.yaml").write_text("rules:\n  - kind: cuda-library\n    why: no matcher\n")
    with pytest.raises(UsageError, match=r"bad.yaml:2: rules.0: a rule matches by exactly one of"):
        audit([tmp_path / "m.py"], profile.model_copy(update={"portability_rules": str(tmp_path / "bad.yaml")}),
              ["mtia"], tmp_path)  # fmt: skip
