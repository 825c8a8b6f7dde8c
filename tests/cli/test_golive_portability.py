"""`ferry golive portability`: the audit without a plan, as a shell runs it: text per accelerator, JSON for tooling,
exit 0 without blockers, 1 with, 2 for bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golive.portability.support import training_repo
from tests.support import run_cli


def test_text_per_accelerator_and_exit_1_for_blockers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(training_repo(tmp_path))
    code, stdout, stderr = run_cli("golive", "portability", "train", "image", "k8s", "--profile", "meta-compute")
    assert code == 1, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("7 file(s) read, 10 finding(s); 1 place(s) already device-agnostic")
    assert "nvidia (NVIDIA H100/H200): 1 blocker(s), 2 warning(s), 7 ok" in lines
    assert "mtia (Meta MTIA): 8 blocker(s), 2 warning(s), 0 ok" in lines
    assert "  BLOCKER train/train.py:9 cuda-call: build(cfg).cuda() moves it to an NVIDIA GPU -> use .to(device) " \
           "with device = torch.device(cfg.device) instead of .cuda()" in lines  # fmt: skip


def test_json_is_a_list_of_findings(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(training_repo(tmp_path))
    code, stdout, stderr = run_cli("golive", "portability", "train", "--accelerator", "nvidia", "--format", "json")
    assert code == 0, stderr
    listed = json.loads(stdout)
    assert {item["severity"] for item in listed} == {"ok"} and len(listed) == 6
    first = listed[0]
    assert set(first) == {"file", "line", "kind", "severity", "message", "fix", "match", "severities"}
    assert (first["file"], first["line"], first["kind"]) == ("train/csrc/fused.cu", 1, "cuda-extension")


def test_device_agnostic_code_has_nothing_to_say(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(training_repo(tmp_path))
    code, stdout, _ = run_cli("golive", "portability", "train/agnostic.py", "--accelerator", "mtia")
    assert code == 0
    assert stdout.splitlines() == [
        "1 file(s) read, 0 finding(s); 1 place(s) already device-agnostic (torch.accelerator, torch.device from "
        "configuration)",
        "mtia (Meta MTIA): 0 blocker(s), 0 warning(s), 0 ok",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--accelerator", "amd"], "ferry: error: --accelerator: profile meta-compute has no accelerator 'amd' "
                                   "(nvidia, mtia)"),
        (["--format", "yaml"], "ferry: error: --format: 'yaml' is not text or json"),
        (["gone/"], "ferry: error: gone: no such file or folder"),
        (["--profile", "nowhere"], "ferry: error: target profile 'nowhere' is not built in (generic-k8s, "
                                   "meta-compute) nor a path"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(tmp_path: Path, monkeypatch, args: list[str], message: str) -> None:
    monkeypatch.chdir(training_repo(tmp_path))
    code, stdout, stderr = run_cli("golive", "portability", "train", *args)
    assert (code, stdout, stderr.strip().splitlines()) == (2, "", [message])
