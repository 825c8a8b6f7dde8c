"""CUDA builds among what a workload installs, as teams write requirements, pyproject.toml, conda environments,
lock files and the install lines of Dockerfiles."""

from __future__ import annotations

import textwrap

from ferry.golive.portability import packages
from ferry.golive.portability.network import read_dockerfile, yaml_line
from ferry.manifests.roundtrip import parse
from tests.golive.portability.support import RULES, found


def matched(hits) -> list[tuple[int, str]]:
    return sorted((h.line, h.match) for h in hits)


def test_a_requirements_file_with_a_cuda_index_and_local_versions() -> None:
    text = textwrap.dedent(
        """\
        # training stack
        --extra-index-url https://download.pytorch.org/whl/cu121
        torch==2.3.1+cu121 \\
            --hash=sha256:0123456789abcdef
        torchvision==0.18.1+cu121 ; sys_platform == "linux"
        transformers>=4.41  # cuda 12 wheels come from the index above
        cupy-cuda12x>=13.0
        nvidia-nccl-cu12==2.20.5
        jax[cuda12]==0.4.30
        flash_attn==2.5.8
        -r common.txt
        accelerate
        --extra-index-url https://download.pytorch.org/whl/cpu
        torchaudio==2.3.1+cpu
        """
    )
    assert matched(packages.requirements(text, "requirements.txt", RULES)) == [
        (2, "https://download.pytorch.org/whl/cu121"), (3, "torch==2.3.1+cu121"),
        (5, 'torchvision==0.18.1+cu121 ; sys_platform == "linux"'), (7, "cupy-cuda12x>=13.0"),
        (8, "nvidia-nccl-cu12==2.20.5"), (9, "jax[cuda12]==0.4.30"), (10, "flash_attn==2.5.8"),
    ]  # fmt: skip


def test_an_index_with_credentials_is_quoted_without_them() -> None:
    text = "--extra-index-url https://ci:s3cr3t@pypi.nvidia.com/simple\n"
    (hit,) = packages.requirements(text, "requirements.txt", RULES)
    assert hit.match == "https://***@pypi.nvidia.com/simple" and "s3cr3t" not in repr(hit)


def test_links_judged_by_what_they_install() -> None:
    text = textwrap.dedent(
        """\
        -e git+https://github.com/NVIDIA/apex.git#egg=apex
        git+https://github.com/Dao-AILab/flash-attention.git@v2.5.8
        https://example.com/wheels/torch-2.3.1%2Bcu121-cp311-cp311-linux_x86_64.whl
        git+https://github.com/huggingface/transformers.git
        -e .
        """
    )
    assert found(packages.requirements(text, "requirements.txt", RULES)) == [
        (1, "cuda-package"), (2, "cuda-package"), (3, "cuda-package")
    ]  # fmt: skip


def test_a_direct_wheel_url_percent_encoded() -> None:
    spec = "torch @ https://download.pytorch.org/whl/cu118/torch-2.1.0%2Bcu118-cp310-cp310-linux_x86_64.whl"
    (hit,) = packages.requirements(spec, "requirements.txt", RULES)
    assert hit.rule.kind == "cuda-package" and hit.line == 1


def test_pyproject_dependencies_groups_poetry_and_indexes() -> None:
    text = textwrap.dedent(
        """\
        [project]
        name = "trainer"
        dependencies = ["torch>=2.3", "bitsandbytes>=0.43", "numpy"]

        [project.optional-dependencies]
        gpu = ["xformers==0.0.26.post1"]

        [tool.poetry.dependencies]
        python = "^3.11"
        torchaudio = {version = "2.3.1+cu121", source = "pytorch-cu121"}

        [[tool.poetry.source]]
        name = "pytorch-cu121"
        url = "https://download.pytorch.org/whl/cu121"
        priority = "explicit"

        [[tool.uv.index]]
        name = "nvidia"
        url = "https://pypi.nvidia.com"
        """
    )
    assert matched(packages.pyproject(text, "pyproject.toml", RULES)) == [
        (3, "bitsandbytes>=0.43"), (6, "xformers==0.0.26.post1"), (10, "torchaudio==2.3.1+cu121"),
        (14, "https://download.pytorch.org/whl/cu121"), (19, "https://pypi.nvidia.com"),
    ]  # fmt: skip


def test_a_pipfile() -> None:
    text = textwrap.dedent(
        """\
        [[source]]
        url = "https://download.pytorch.org/whl/cu118"
        name = "pytorch"

        [packages]
        torch = {version = "==2.1.0+cu118", index = "pytorch"}
        requests = "*"
        bitsandbytes = "*"
        """
    )
    assert matched(packages.pyproject(text, "Pipfile", RULES)) == [
        (2, "https://download.pytorch.org/whl/cu118"), (6, "torch==2.1.0+cu118"), (8, "bitsandbytes")
    ]  # fmt: skip


def test_a_pyproject_that_is_no_toml_is_unreadable() -> None:
    (hit,) = packages.pyproject('[project]\nname = "x\n', "pyproject.toml", RULES)
    assert hit.rule.kind == "unreadable" and hit.line == 2


def test_a_conda_environment_with_its_pip_section() -> None:
    text = textwrap.dedent(
        """\
        name: llm
        channels:
          - pytorch
          - nvidia
          - conda-forge
        dependencies:
          - python=3.11
          - pytorch=2.1.0=py3.11_cuda12.1_cudnn8.9.2_0
          - pytorch-cuda=12.1
          - nvidia::cuda-toolkit
          - numpy
          - pip
          - pip:
              - --extra-index-url https://pypi.nvidia.com
              - deepspeed==0.14.2
              - flash-attn==2.5.8
        """
    )
    (data,) = parse(text, (2, 2, 0))
    assert matched(packages.conda_environment(data, "environment.yml", RULES, yaml_line)) == [
        (4, "channel nvidia"), (8, "pytorch=2.1.0=py3.11_cuda12.1_cudnn8.9.2_0"), (9, "pytorch-cuda=12.1"),
        (10, "nvidia::cuda-toolkit"), (14, "https://pypi.nvidia.com"), (16, "flash-attn==2.5.8"),
    ]  # fmt: skip


def test_a_uv_lock_names_the_cuda_wheels_torch_pulls() -> None:
    text = textwrap.dedent(
        """\
        version = 1
        [[package]]
        name = "numpy"
        version = "1.26.4"
        source = { registry = "https://pypi.org/simple" }

        [[package]]
        name = "nvidia-cublas-cu12"
        version = "12.1.3.1"
        source = { registry = "https://pypi.org/simple" }

        [[package]]
        name = "torch"
        version = "2.3.1+cu121"
        source = { registry = "https://download.pytorch.org/whl/cu121" }
        """
    )
    assert matched(packages.lock(text, "uv.lock", RULES)) == [
        (8, "nvidia-cublas-cu12==12.1.3.1"), (13, "torch==2.3.1+cu121")
    ]  # fmt: skip


def test_the_install_lines_of_a_dockerfile() -> None:
    text = textwrap.dedent(
        """\
        FROM nvcr.io/nvidia/pytorch:24.05-py3
        RUN apt-get update && apt-get install -y --no-install-recommends \\
              libnccl2=2.21.5-1+cuda12.4 curl \\
            && rm -rf /var/lib/apt/lists/*
        # RUN pip install cupy-cuda12x (not run)
        RUN python -m pip install --no-cache-dir \\
              --index-url https://download.pytorch.org/whl/cu121 \\
              torch==2.3.1 torchvision
        RUN conda install -y -c pytorch -c nvidia pytorch-cuda=12.1 && conda clean -ya
        RUN ["pip", "install", "bitsandbytes"]
        RUN pip install -r requirements.txt
        """
    )
    hits, _ = read_dockerfile(text, "Dockerfile", RULES)
    assert matched(hits) == [
        (3, "libnccl2=2.21.5-1+cuda12.4"), (7, "https://download.pytorch.org/whl/cu121"), (9, "channel nvidia"),
        (9, "pytorch-cuda=12.1"), (10, "bitsandbytes"),
    ]  # fmt: skip
    assert found(hits) == [(3, "cuda-package"), (7, "cuda-package"), (9, "cuda-package"), (9, "cuda-package"),
                           (10, "cuda-package")]  # fmt: skip
