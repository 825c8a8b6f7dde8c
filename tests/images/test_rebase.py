"""The Dockerfile rebase: Dockerfile shapes teams really have, each checked byte for byte."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ferry.images.rebase import RebaseError, expand, rebase
from ferry.plan import load_target_profile

META = load_target_profile("meta-compute", Path("."))
PYTORCH = "meta-cloud-registry.io/base/pytorch-meta:2026-latest"
RUNTIME = "meta-cloud-registry.io/base/cuda-meta:2026-runtime"
DEVEL = "meta-cloud-registry.io/base/cuda-meta:2026-devel"
SDK = "RUN pip install meta-compute-sdk --upgrade"
DIGEST = "sha256:" + "ab" * 32

# (shape, Dockerfile, the rebased text expected byte for byte; None: not rebased, the text is unchanged)
SHAPES = [
    (
        "single stage with RUN, ENV and CMD",
        "FROM nvcr.io/nvidia/pytorch:24.01-py3\nENV PYTHONUNBUFFERED=1\nRUN pip install -r req.txt\n"
        'CMD ["python", "train.py"]\n',
        f'FROM {PYTORCH}\n{SDK}\nENV PYTHONUNBUFFERED=1\nRUN pip install -r req.txt\nCMD ["python", "train.py"]\n',
    ),
    (
        "multi-stage devel build, runtime final",
        "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nRUN make\n\n"
        "FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04\nCOPY --from=build /out /app\n",
        f"FROM {DEVEL} AS build\nRUN make\n\nFROM {RUNTIME}\n{SDK}\nCOPY --from=build /out /app\n",
    ),
    (
        "ARG naming the whole base: the default is rewritten, the FROM kept",
        "ARG BASE=nvcr.io/nvidia/pytorch:24.01-py3\nFROM ${BASE}\nRUN x\n",
        f"ARG BASE={PYTORCH}\nFROM ${{BASE}}\n{SDK}\nRUN x\n",
    ),
    (
        "quoted ARG default, $BASE without braces, two ARGs on one line",
        'ARG PY=3.11 BASE="nvcr.io/nvidia/cuda:12.2.0-devel-ubuntu22.04"\nFROM $BASE AS build\n',
        f'ARG PY=3.11 BASE="{DEVEL}"\nFROM $BASE AS build\n{SDK}\n',
    ),
    (
        "ARG inside the tag: expanded for matching, the reference replaced",
        "ARG CUDA=12.4.1\nFROM nvcr.io/nvidia/cuda:${CUDA}-runtime-ubuntu22.04\nARG CUDA\n",
        f"ARG CUDA=12.4.1\nFROM {RUNTIME}\n{SDK}\nARG CUDA\n",
    ),
    (
        "--platform=$BUILDPLATFORM and AS kept",
        "FROM --platform=$BUILDPLATFORM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nRUN make\n"
        "FROM --platform=linux/amd64 nvcr.io/nvidia/pytorch:24.01-py3 AS final\n",
        f"FROM --platform=$BUILDPLATFORM {DEVEL} AS build\nRUN make\nFROM --platform=linux/amd64 {PYTORCH} AS final\n"
        f"{SDK}\n",
    ),
    (
        "heredoc whose body holds a FROM line",
        "# syntax=docker/dockerfile:1.7\nFROM nvcr.io/nvidia/pytorch:24.01-py3\nCOPY <<EOF /app/Dockerfile\n"
        "FROM nvcr.io/nvidia/pytorch:23.01-py3\nEOF\nRUN <<-SH\n\techo hi\n\tSH\n",
        f"# syntax=docker/dockerfile:1.7\nFROM {PYTORCH}\n{SDK}\nCOPY <<EOF /app/Dockerfile\n"
        "FROM nvcr.io/nvidia/pytorch:23.01-py3\nEOF\nRUN <<-SH\n\techo hi\n\tSH\n",
    ),
    (
        "lower-case instructions and as",
        "from nvcr.io/nvidia/pytorch:24.01-py3 as base\nrun echo hi\n",
        f"from {PYTORCH} as base\n{SDK}\nrun echo hi\n",
    ),
    (
        "CRLF with a BOM: the SDK line ends in CRLF too",
        "\ufeff# syntax=docker/dockerfile:1\r\nFROM nvcr.io/nvidia/pytorch:24.01-py3\r\nRUN a \\\r\n  b\r\n",
        f"\ufeff# syntax=docker/dockerfile:1\r\nFROM {PYTORCH}\r\n{SDK}\r\nRUN a \\\r\n  b\r\n",
    ),
    (
        "escape directive with a backtick continuation inside the FROM",
        "# escape=`\nFROM `\n  nvcr.io/nvidia/pytorch:24.01-py3\nRUN dir c:\\ `\n  /w\n",
        f"# escape=`\nFROM `\n  {PYTORCH}\n{SDK}\nRUN dir c:\\ `\n  /w\n",
    ),
    (
        "digest-pinned base: the source digest is dropped",
        f"FROM nvcr.io/nvidia/pytorch:24.01-py3@{DIGEST}\nRUN x\n",
        f"FROM {PYTORCH}\n{SDK}\nRUN x\n",
    ),
    (
        "ONBUILD image: the SDK is a plain step, never a trigger",
        "FROM nvcr.io/nvidia/pytorch:24.01-py3\nONBUILD COPY . /app\nONBUILD RUN pip install /app\n",
        f"FROM {PYTORCH}\n{SDK}\nONBUILD COPY . /app\nONBUILD RUN pip install /app\n",
    ),
    (
        "ONBUILD FROM-like trigger is not a base",
        "FROM nvcr.io/nvidia/pytorch:24.01-py3\nonbuild RUN echo FROM nvcr.io/nvidia/pytorch:1\n",
        f"FROM {PYTORCH}\n{SDK}\nonbuild RUN echo FROM nvcr.io/nvidia/pytorch:1\n",
    ),
    (
        "scratch export stage: no SDK step",
        "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nRUN make\nFROM scratch AS export\n"
        "COPY --from=build /out /\n",
        f"FROM {DEVEL} AS build\nRUN make\nFROM scratch AS export\nCOPY --from=build /out /\n",
    ),
    (
        "final stage built on an earlier stage (a stage name is not an image)",
        "FROM nvcr.io/nvidia/pytorch:24.01-py3 AS base\nRUN x\nFROM base AS final\nRUN y\n",
        f"FROM {PYTORCH} AS base\nRUN x\nFROM base AS final\n{SDK}\nRUN y\n",
    ),
    (
        "comments that look like FROM lines stay",
        "# FROM nvcr.io/nvidia/pytorch:23.01-py3\n#FROM nvcr.io/nvidia/cuda:12-runtime-x\n"
        "FROM nvcr.io/nvidia/pytorch:24.01-py3\n",
        f"# FROM nvcr.io/nvidia/pytorch:23.01-py3\n#FROM nvcr.io/nvidia/cuda:12-runtime-x\nFROM {PYTORCH}\n{SDK}\n",
    ),
    (
        "continuation with a comment line inside the FROM",
        "FROM \\\n# the base the team tested\n  nvcr.io/nvidia/pytorch:24.01-py3 \\\n  AS base\nRUN a\n",
        f"FROM \\\n# the base the team tested\n  {PYTORCH} \\\n  AS base\n{SDK}\nRUN a\n",
    ),
    (
        "blank lines, tabs and trailing spaces kept",
        "\n\n\tFROM   nvcr.io/nvidia/pytorch:24.01-py3   \n\n\tRUN x  \n",
        f"\n\n\tFROM   {PYTORCH}   \n{SDK}\n\n\tRUN x  \n",
    ),
    (
        "pinned by digest alone: a rule for any tag maps it",
        f"FROM nvcr.io/nvidia/pytorch@{DIGEST} AS train\n",
        f"FROM {PYTORCH} AS train\n{SDK}\n",
    ),
    (
        "CUDA pinned by digest alone: no tag to tell runtime from devel, not rebased",
        f"FROM nvcr.io/nvidia/cuda@{DIGEST}\n",
        None,
    ),
    (
        "no final newline",
        "FROM nvcr.io/nvidia/pytorch:24.01-py3",
        f"FROM {PYTORCH}\n{SDK}\n",
    ),
    (
        "Docker Hub look-alike nvidia/cuda is docker.io, not NGC: not rebased",
        "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nRUN x\n",
        None,
    ),
    ("Docker Hub pytorch/pytorch: not rebased", "FROM pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime\n", None),
    ("NGC cuda base flavour no rule names: not rebased", "FROM nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04\n", None),
    ("already on the target's base", f"FROM {PYTORCH}\n{SDK}\n", None),
    ("ARG without a default cannot be resolved: not rebased", "ARG BASE\nFROM ${BASE}\n", None),
    (
        "one ARG base used by two stages: rewritten once",
        "ARG BASE=nvcr.io/nvidia/pytorch:24.01-py3\nFROM ${BASE} AS build\nRUN make\n"
        "FROM $BASE\nCOPY --from=build /o /o\n",
        f"ARG BASE={PYTORCH}\nFROM ${{BASE}} AS build\nRUN make\nFROM $BASE\n{SDK}\nCOPY --from=build /o /o\n",
    ),
    (
        "inline default in the FROM: the reference replaced",
        "ARG BASE\nFROM ${BASE:-nvcr.io/nvidia/pytorch:24.01-py3}\n",
        f"ARG BASE\nFROM {PYTORCH}\n{SDK}\n",
    ),
    (
        "ARG continued over two lines",
        "ARG PY=3.11 \\\n    BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04\nFROM ${BASE}\n",
        f"ARG PY=3.11 \\\n    BASE={DEVEL}\nFROM ${{BASE}}\n{SDK}\n",
    ),
    (
        "rebased build stage, unmapped final stage: the SDK still goes into the final stage",
        "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nFROM ubuntu:22.04\nCOPY --from=build /o /o\n",
        f"FROM {DEVEL} AS build\nFROM ubuntu:22.04\n{SDK}\nCOPY --from=build /o /o\n",
    ),
    # Shapes from a trial on Dockerfiles as teams write them, each a defect it found.
    (
        "ARG default built from an earlier ARG (a registry mirror): expanded, the default rewritten",
        "ARG REGISTRY=nvcr.io/nvidia\nARG BASE_IMAGE=${REGISTRY}/pytorch:24.05-py3\nFROM ${BASE_IMAGE}\nRUN x\n",
        f"ARG REGISTRY=nvcr.io/nvidia\nARG BASE_IMAGE={PYTORCH}\nFROM ${{BASE_IMAGE}}\n{SDK}\nRUN x\n",
    ),
    (
        "the final stage already installs the SDK: not added twice",
        "FROM nvcr.io/nvidia/pytorch:24.05-py3\nRUN  pip install meta-compute-sdk --upgrade\nCOPY . /app\n",
        f"FROM {PYTORCH}\nRUN  pip install meta-compute-sdk --upgrade\nCOPY . /app\n",
    ),
    (
        "registry host in capitals is the same host",
        "FROM NVCR.IO/nvidia/pytorch:24.05-py3\n",
        f"FROM {PYTORCH}\n{SDK}\n",
    ),
    (
        "ARG whose name ends another's, same default: only its own default rewritten",
        "ARG CUDA_BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04\n"
        "FROM $BASE\nRUN echo $CUDA_BASE\n",
        f"ARG CUDA_BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 BASE={DEVEL}\nFROM $BASE\n{SDK}\n"
        "RUN echo $CUDA_BASE\n",
    ),
    (
        "LF directive line, CRLF below it: the SDK line takes its FROM line's ending",
        "# syntax=docker/dockerfile:1.7\nFROM nvcr.io/nvidia/pytorch:24.05-py3\r\nRUN x\r\n",
        f"# syntax=docker/dockerfile:1.7\nFROM {PYTORCH}\r\n{SDK}\r\nRUN x\r\n",
    ),
    (
        "an expansion form not evaluated (${VAR/from/to}): that FROM left as written, the SDK still in the final stage",
        "ARG BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04\nFROM ${BASE} AS build\nFROM ${BASE/devel/runtime}\n",
        f"ARG BASE={DEVEL}\nFROM ${{BASE}} AS build\nFROM ${{BASE/devel/runtime}}\n{SDK}\n",
    ),
    (
        "a comment pasted from a web page, holding U+2028 (a line break to str.splitlines, not to BuildKit)",
        "# see the wiki:\u2028build notes\nFROM nvcr.io/nvidia/pytorch:24.05-py3\r\n",
        f"# see the wiki:\u2028build notes\nFROM {PYTORCH}\r\n{SDK}\r\n",
    ),
    (
        "a comment inside the FROM's continuation naming the same image: the image changes, the comment stays",
        "FROM \\\n# nvcr.io/nvidia/pytorch:24.05-py3 is what CI tests with\n"
        "  nvcr.io/nvidia/pytorch:24.05-py3 AS train\n",
        f"FROM \\\n# nvcr.io/nvidia/pytorch:24.05-py3 is what CI tests with\n  {PYTORCH} AS train\n{SDK}\n",
    ),
    (
        "a comment inside the ARG's continuation naming the same default",
        "ARG PY=3.11 \\\n  # BASE=nvcr.io/nvidia/pytorch:24.05-py3 until the 25.01 upgrade\n"
        "  BASE=nvcr.io/nvidia/pytorch:24.05-py3\nFROM $BASE\n",
        "ARG PY=3.11 \\\n  # BASE=nvcr.io/nvidia/pytorch:24.05-py3 until the 25.01 upgrade\n"
        f"  BASE={PYTORCH}\nFROM $BASE\n{SDK}\n",
    ),
    (
        "a stray backslash as the last line (an empty node to the parser)",
        "FROM nvcr.io/nvidia/pytorch:24.05-py3\nRUN x\n\\\n",
        f"FROM {PYTORCH}\n{SDK}\nRUN x\n\\\n",
    ),
]


@pytest.mark.parametrize(("shape", "text", "expected"), SHAPES, ids=[s[0] for s in SHAPES])
def test_rebase_shapes_byte_for_byte(shape: str, text: str, expected: str | None) -> None:
    result = rebase(text, META.base_images, META.sdk_steps, target_repositories=["registry.meta.example/ai"])
    assert result.text == (text if expected is None else expected)
    assert result.rebased == (expected is not None)
    added = expected is not None and "FROM scratch AS export" not in text and "meta-compute-sdk" not in text
    assert result.text.count(SDK) == text.count(SDK) + added


@pytest.mark.parametrize(
    ("shape", "text", "expected"), [s for s in SHAPES if s[2] is not None], ids=[s[0] for s in SHAPES if s[2]]
)
def test_the_diff_applies_with_patch_byte_for_byte(shape: str, text: str, expected: str, tmp_path: Path) -> None:
    # The audit folder's diff is for people and for `patch`: a last line without a newline must say so.
    result = rebase(text, META.base_images, META.sdk_steps)
    (tmp_path / "Dockerfile").write_bytes(text.encode())
    (tmp_path / "Dockerfile.diff").write_bytes(result.diff().encode())
    done = subprocess.run(
        ["patch", "-s", "--fuzz=0", "-p1", "-i", "Dockerfile.diff", "Dockerfile"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "Dockerfile").read_bytes() == expected.encode()


def test_shape_count() -> None:
    assert len(SHAPES) >= 20


def test_report_names_what_changed_and_what_is_unmapped() -> None:
    text = "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nFROM build AS mid\nFROM ubuntu:22.04\n"
    result = rebase(text, META.base_images, META.sdk_steps)
    assert [(b.line, b.kind) for b in result.bases] == [(1, "rebased"), (2, "stage"), (3, "unmapped")]
    assert [b.image for b in result.unmapped] == ["ubuntu:22.04"]
    diff = result.diff()
    assert diff.startswith("--- a/Dockerfile\n+++ b/Dockerfile\n")
    assert f"+FROM {DEVEL} AS build\n" in diff and f"+{SDK}\n" in diff


def test_scratch_final_stage_is_reported() -> None:
    result = rebase(SHAPES[13][1], META.base_images, META.sdk_steps)
    assert result.sdk_skipped == "line 3: the final stage starts from scratch"


def test_without_rules_nothing_is_rebased_or_unmapped() -> None:
    result = rebase("FROM nvcr.io/nvidia/pytorch:24.01-py3\nFROM ubuntu\n", [], [SDK])
    assert not result.rebased and result.unmapped == []


def test_a_broad_rule_matching_its_own_target_leaves_a_rebased_file_alone() -> None:
    from ferry.plan import BaseImageRule

    rules = [BaseImageRule(match="*/pytorch*", to=PYTORCH)]
    once = rebase("FROM nvcr.io/nvidia/pytorch:24.05-py3 AS train\nRUN x\n", rules, [SDK])
    assert once.text == f"FROM {PYTORCH} AS train\n{SDK}\nRUN x\n"
    again = rebase(once.text, rules, [SDK])
    assert (again.rebased, again.text, [b.kind for b in again.bases]) == (False, once.text, ["target"])


def test_build_args_override_defaults_for_matching() -> None:
    text = "ARG CUDA=12.4.1-base\nFROM nvcr.io/nvidia/cuda:${CUDA}-ubuntu22.04\n"
    assert not rebase(text, META.base_images).rebased
    assert (
        rebase(text, META.base_images, build_args={"CUDA": "12.4.1-runtime"}).text
        == f"ARG CUDA=12.4.1-base\nFROM {RUNTIME}\n"
    )


def test_an_unresolvable_from_is_reported_as_such() -> None:
    text = "ARG BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04\nFROM ${BASE} AS build\nFROM ${BASE/devel/runtime}\n"
    assert rebase(text, META.base_images, META.sdk_steps).report()[1] == (
        "line 3: ${BASE/devel/runtime}: cannot be known before the build (an ARG without a default?)"
    )


def test_images_read_outside_a_from_are_reported_and_left() -> None:
    text = (
        "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nFROM python:3.11-slim\n"
        "COPY --from=nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04 /usr/local/cuda /usr/local/cuda\n"
        "COPY --from=ghcr.io/astral-sh/uv:0.4 /uv /bin/uv\nCOPY --from=build /o /o\nCOPY --from=0 /o /p\n"
        "RUN --mount=type=bind,from=nvcr.io/nvidia/pytorch:24.05-py3,source=/opt,target=/mnt true\n"
    )
    result = rebase(text, META.base_images, META.sdk_steps)
    assert result.report()[2:] == [
        "line 3: COPY --from=nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04: an image outside a FROM, left as it is "
        f"(a rule maps it to {RUNTIME})",
        "line 4: COPY --from=ghcr.io/astral-sh/uv:0.4: an image outside a FROM, left as it is",
        f"line 7: RUN --mount=from=nvcr.io/nvidia/pytorch:24.05-py3: an image outside a FROM, left as it is "
        f"(a rule maps it to {PYTORCH})",
    ]
    assert "COPY --from=nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04 " in result.text


# A final stage to test, a runtime one to ship: the build's --target gets the SDK, not the last stage.
TARGETED = (
    "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nRUN make\n"
    "FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS runtime\nCOPY --from=build /o /o\n"
    "FROM runtime AS test\nRUN pytest\n"
)


def test_the_build_target_stage_gets_the_sdk() -> None:
    result = rebase(TARGETED, META.base_images, META.sdk_steps, target="Runtime")
    assert result.text == (
        f"FROM {DEVEL} AS build\nRUN make\nFROM {RUNTIME} AS runtime\n{SDK}\nCOPY --from=build /o /o\n"
        "FROM runtime AS test\nRUN pytest\n"
    )
    assert result.final_base == RUNTIME
    with pytest.raises(RebaseError, match="^Dockerfile: no stage is named 'prod' \\(the build's target\\)$"):
        rebase(TARGETED, META.base_images, META.sdk_steps, target="prod")


def test_an_unmapped_base_of_a_stage_the_build_does_not_use_is_no_base_of_the_image() -> None:
    # vLLM's and TGI's shape: a docs or test stage beside the one shipped, which --target picks.
    text = (
        "FROM nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 AS build\nRUN make\n"
        "FROM python:3.11-slim AS docs\nRUN mkdocs build\nFROM golang:1.22 AS tools\n"
        "FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS runtime\nCOPY --from=build /o /o\n"
        "RUN --mount=type=bind,from=tools,target=/t true\nFROM runtime AS test\nRUN pytest\n"
    )
    result = rebase(text, META.base_images, META.sdk_steps, target="runtime")
    assert [(b.line, b.used) for b in result.bases] == [(1, True), (3, False), (5, True), (6, True), (9, False)]
    assert [b.image for b in result.unmapped] == ["golang:1.22"]
    assert "line 3: python:3.11-slim: no rule maps it (a stage this build does not use)" in result.report()
    assert "line 5: golang:1.22: no rule maps it" in result.report()
    # Without a target the last stage is built: it needs runtime (its FROM), which needs build and tools.
    assert [b.used for b in rebase(text, META.base_images).bases] == [True, False, True, True, True]
    # A stage read by its index.
    by_index = rebase(text + "FROM busybox\nCOPY --from=2 /t /t\n", META.base_images).bases
    assert [b.used for b in by_index] == [False, False, True, False, False, True]


# One Dockerfile for two architectures: the stage is picked by BuildKit's automatic TARGETARCH.
PER_ARCH = (
    "ARG TARGETARCH\nFROM nvcr.io/nvidia/pytorch:24.05-py3 AS base-amd64\nFROM arm64v8/ubuntu:22.04 AS base-arm64\n"
    "FROM base-${TARGETARCH}\nRUN x\n"
)


@pytest.mark.parametrize(
    ("platform", "final_base", "unknown"),
    [
        ("linux/amd64", PYTORCH, []),
        ("linux/arm64/v8", "arm64v8/ubuntu:22.04", []),
        (
            None,
            "base-${TARGETARCH}",
            ["line 4: base-${TARGETARCH}: cannot be known before the build (an ARG without a default?)"],
        ),
    ],
)
def test_the_platform_built_for_resolves_targetarch(platform, final_base, unknown) -> None:
    result = rebase(PER_ARCH, META.base_images, META.sdk_steps, platform=platform)
    assert result.final_base == final_base
    assert result.report()[2:] == unknown
    assert result.text == PER_ARCH.replace("RUN x\n", f"{SDK}\nRUN x\n").replace(
        "nvcr.io/nvidia/pytorch:24.05-py3", PYTORCH
    )


def test_a_profile_step_that_is_no_whole_instruction_is_one_error() -> None:
    with pytest.raises(RebaseError) as raised:
        rebase("FROM nvcr.io/nvidia/pytorch:24.05-py3\n", META.base_images, ["RUN <<EOF"])
    assert str(raised.value) == (
        "Dockerfile: the rebased file does not parse: unterminated heredoc (the profile's sdk_steps?)"
    )


def test_a_continuation_at_the_end_of_the_file_is_refused_not_swallowing_the_sdk() -> None:
    # As written, BuildKit would read the added step as more words of the FROM.
    with pytest.raises(RebaseError, match="^Dockerfile:2: the rebased file would not read as the original"):
        rebase("# base\nFROM nvcr.io/nvidia/pytorch:24.05-py3 \\\n", META.base_images, META.sdk_steps)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("FROM x\nRUN <<EOF\nabc\n", "Dockerfile: not a Dockerfile BuildKit can parse: unterminated heredoc"),
        ("# only a comment\n", "Dockerfile: not a Dockerfile BuildKit can parse: file with no instructions"),
        # A Jinja template handed over as it is, and a half-typed stage name.
        ("FROM {{ base_image }}\nRUN x\n", "Dockerfile:1: FROM takes an image, then optionally AS and a stage name"),
        (
            "# syntax=docker/dockerfile:1\nFROM nvcr.io/nvidia/pytorch:24.05-py3 AS\n",
            "Dockerfile:2: FROM takes an image, then optionally AS and a stage name",
        ),
        ("FROM --platform=linux/amd64\n", "Dockerfile:1: FROM takes an image, then optionally AS and a stage name"),
        (
            "ARG BASE=${OVERRIDE:-nvcr.io/nvidia/pytorch:24.05-py\\\n3}\nFROM $BASE\n",
            "Dockerfile:1: cannot place the rewrite of 'BASE=${OVERRIDE:-nvcr.io/nvidia/pytorch:24.05-py3}' "
            "(split across lines?)",
        ),
    ],
)
def test_bad_dockerfiles_are_one_error(text: str, error: str) -> None:
    with pytest.raises(RebaseError) as raised:
        rebase(text, META.base_images, META.sdk_steps)
    assert str(raised.value) == error


def test_expand() -> None:
    args = {"A": "x", "B": None}
    assert expand("$A-${A}-${B:-d}-${A:+p}-${C:-e}", args) == "x-x-d-p-e"
    assert expand("${B}", args) is None
    # With the colon an empty value counts as unset, as BuildKit's shell expansion does; ${X:?...} needs a value.
    empty = {"E": ""}
    assert [expand(t, empty) for t in ("${E:-d}", "${E-d}", "${E:+p}", "${E+p}", "${E?m}")] == ["d", "", "", "p", ""]
    assert expand("${E:?m}", empty) is None and expand("${A:?m}", args) == "x"
    assert expand("${A#x}", args) is None and expand("${A%%x}", args) is None
