"""`ferry images rebase`: Dockerfiles rebased without a plan; what changed and what is unmapped, in one line each."""

from __future__ import annotations

from pathlib import Path

from tests.support import run_cli

TRAINER = "# trainer\r\nFROM nvcr.io/nvidia/pytorch:24.01-py3\r\nRUN pip install -r req.txt\r\n"
TOOLS = "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nFROM ubuntu:22.04\n"
PLAIN = "FROM python:3.11-slim\n"


def test_rebase_writes_files_and_diffs_and_reports(tmp_path: Path, monkeypatch) -> None:
    for folder, text in (("trainer", TRAINER), ("tools", TOOLS), ("plain", PLAIN)):
        (tmp_path / "images" / folder).mkdir(parents=True)
        (tmp_path / "images" / folder / "Dockerfile").write_bytes(text.encode())
    monkeypatch.chdir(tmp_path)
    files = [f"images/{name}/Dockerfile" for name in ("trainer", "tools", "plain")]
    code, stdout, stderr = run_cli("images", "rebase", *files, "--out", "out")
    assert code == 0, stderr
    out = tmp_path / "out"
    assert (out / "trainer" / "Dockerfile").read_bytes() == (
        b"# trainer\r\nFROM meta-cloud-registry.io/base/pytorch-meta:2026-latest\r\n"
        b"RUN pip install meta-compute-sdk --upgrade\r\nRUN pip install -r req.txt\r\n"
    )
    assert b"+RUN pip install meta-compute-sdk --upgrade" in (out / "trainer" / "Dockerfile.diff").read_bytes()
    assert not (out / "plain").exists()
    lines = stdout.splitlines()
    assert "images/trainer/Dockerfile: rebased -> out/trainer/Dockerfile (diff out/trainer/Dockerfile.diff)" in lines
    assert (
        "  line 1: nvcr.io/nvidia/pytorch:24.01-py3 -> meta-cloud-registry.io/base/pytorch-meta:2026-latest"
        not in lines
    )
    assert "  line 2: nvcr.io/nvidia/pytorch:24.01-py3 -> meta-cloud-registry.io/base/pytorch-meta:2026-latest" in lines
    assert "  line 2: ubuntu:22.04: no rule maps it" in lines
    assert "images/plain/Dockerfile: not rebased: no FROM matches a rule of meta-compute" in lines
    assert "  line 1: python:3.11-slim: no rule maps it" in lines


def test_rebase_with_a_profile_by_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "mine.yaml").write_text(
        'name: mine\nbase_images: [{match: "python:*", to: "registry.local/py:3"}]\nsdk_steps: ["RUN true"]\n'
    )
    (tmp_path / "Dockerfile").write_text(PLAIN)
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--profile", "./mine.yaml", "--out", "o")
    assert code == 0, stderr
    assert (tmp_path / "o" / "Dockerfile").read_text() == "FROM registry.local/py:3\nRUN true\n"


def test_unparseable_dockerfile_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\nRUN <<EOF\nnever closed\n")
    monkeypatch.chdir(tmp_path)
    code, _stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--out", "o")
    assert code == 2
    assert stderr.strip().splitlines() == [
        "ferry: error: Dockerfile: not a Dockerfile BuildKit can parse: unterminated heredoc"
    ]


def test_a_file_already_on_the_profiles_base_is_not_reported_unmapped(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM meta-cloud-registry.io/base/pytorch-meta:2026-latest\nRUN pip install meta-compute-sdk --upgrade\n"
    )
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--out", "o")
    assert code == 0, stderr
    assert stdout.splitlines() == ["Dockerfile: not rebased: no FROM matches a rule of meta-compute"]


def test_an_out_folder_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "Dockerfile").write_text(TRAINER)
    (tmp_path / "taken").write_text("a file, not a folder\n")
    monkeypatch.chdir(tmp_path)
    code, _stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--out", "taken")
    assert code == 2
    assert stderr.strip().splitlines() == ["ferry: error: taken: cannot write: File exists"]


def test_build_args_and_target_as_the_build_will_pass_them(tmp_path: Path, monkeypatch) -> None:
    # Megatron-LM's shape: the base is a build argument without a default.
    (tmp_path / "Dockerfile").write_text(
        "ARG FROM_IMAGE_NAME\nFROM $FROM_IMAGE_NAME AS train\nRUN pip install einops\nFROM train AS test\n"
    )
    monkeypatch.chdir(tmp_path)
    code, stdout, _stderr = run_cli("images", "rebase", "Dockerfile", "--out", "o")
    assert (code, stdout.splitlines()[1:]) == (
        0,
        ["  line 2: $FROM_IMAGE_NAME: cannot be known before the build (an ARG without a default?)"],
    )
    ngc = "FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:24.05-py3"
    code, _stdout, stderr = run_cli(
        "images", "rebase", "Dockerfile", "--build-arg", ngc, "--target", "train", "--out", "o"
    )
    assert code == 0, stderr
    assert (tmp_path / "o" / "Dockerfile").read_text() == (
        "ARG FROM_IMAGE_NAME\nFROM meta-cloud-registry.io/base/pytorch-meta:2026-latest AS train\n"
        "RUN pip install meta-compute-sdk --upgrade\nRUN pip install einops\nFROM train AS test\n"
    )
    # A stage per architecture, picked by BuildKit's automatic TARGETARCH.
    (tmp_path / "Dockerfile").write_text(
        "FROM nvcr.io/nvidia/pytorch:24.05-py3 AS base-amd64\nFROM ubuntu AS base-arm64\nFROM base-$TARGETARCH\n"
    )
    code, stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--platform", "linux/amd64", "--out", "o")
    assert code == 0 and "cannot be known" not in stdout, stderr
    code, _stdout, stderr = run_cli("images", "rebase", "Dockerfile", "--build-arg", "FROM_IMAGE_NAME", "--out", "o")
    assert (code, stderr.strip()) == (2, "ferry: error: --build-arg FROM_IMAGE_NAME: write NAME=VALUE")


def test_an_out_folder_over_the_inputs_is_refused_before_anything_is_written(tmp_path: Path, monkeypatch) -> None:
    for folder, text in (("trainer", TRAINER), ("tools", TOOLS)):
        (tmp_path / "images" / folder).mkdir(parents=True)
        (tmp_path / "images" / folder / "Dockerfile").write_bytes(text.encode())
    monkeypatch.chdir(tmp_path)
    files = ["images/trainer/Dockerfile", "images/tools/Dockerfile"]
    code, _stdout, stderr = run_cli("images", "rebase", *files, "--out", "images")
    assert code == 2
    assert stderr.strip() == (
        "ferry: error: --out images: would write over images/trainer/Dockerfile, an input: choose another folder"
    )
    assert (tmp_path / "images" / "trainer" / "Dockerfile").read_bytes() == TRAINER.encode()
    # One file that cannot be rebased: nothing written for the others either.
    (tmp_path / "images" / "tools" / "Dockerfile").write_text("FROM {{ base }}\n")
    code, _stdout, stderr = run_cli("images", "rebase", *files, "--out", "out")
    assert code == 2 and not (tmp_path / "out").exists(), stderr


def test_unreadable_inputs_are_one_line_each(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "latin1").write_bytes("# café\nFROM ubuntu\n".encode("latin-1"))
    # What PowerShell's `>` writes.
    (tmp_path / "utf16").write_bytes("FROM ubuntu\r\n".encode("utf-16"))
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    for name, error in (
        ("latin1", "latin1: not UTF-8 text (at byte offset 5)"),
        ("utf16", "utf16: not UTF-8 text (at byte offset 0) (UTF-16: save it as UTF-8)"),
        ("folder", "folder: cannot read: Is a directory"),
        ("missing", "missing: cannot read: No such file or directory"),
    ):
        code, _stdout, stderr = run_cli("images", "rebase", name, "--out", "o")
        assert (code, stderr.strip()) == (2, f"ferry: error: {error}")
    code, _stdout, stderr = run_cli("images", "rebase", "latin1", "--profile", "nowhere", "--out", "o")
    assert code == 2 and stderr.strip().startswith("ferry: error: target profile 'nowhere' is not built in")
