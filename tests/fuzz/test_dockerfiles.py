"""Dockerfiles, generated in the shapes real ones have and mutated: `ferry images rebase` rebases them (exit 0,
files under --out) or refuses one in one line (exit 2, --out as it was), never changing an input.

The generator writes parser directives, ARGs before FROM, multi-stage builds, heredocs, line continuations (with
comments inside), escape directives, JSON-form instructions and the flags BuildKit reads (--from, --mount,
--platform); the mutations are those of text (CRLF, a BOM, truncation, garbage...). Build arguments, the target
stage and the platform come from the same kind of draw, and so, for some, does the target profile.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.common import TRIED, check_cli, fuzz_settings, listing, mutated, text_of, write_bytes

IMAGES = [
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
    "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "NVCR.IO/nvidia/pytorch:24.05-py3",
    "nvidia/cuda:12.4.1-base-ubuntu22.04",
    "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
    "nvcr.io/nvidia/tritonserver:24.01-py3",
    "python:3.11-slim",
    "ubuntu",
    "docker.io/library/ubuntu:22.04",
    "meta-cloud-registry.io/base/pytorch-meta:2026-latest",
    "localhost:5000/x/y:z",
    "scratch",
]
ODD_IMAGES = [
    "${BASE}",
    "$BASE",
    "${BASE:-nvcr.io/nvidia/pytorch:24.01-py3}",
    "${BASE:+x}",
    "${BASE?required}",
    "${BASE#nvcr.io/}",
    "${BASE/a/b}",
    "nvcr.io/nvidia/cuda:${CUDA}-devel-ubuntu22.04",
    "base-${TARGETARCH}",
    "base-$TARGETARCH",
    "${UNSET}",
    "$",
    "${",
    "{{ base }}",
    '"quoted"',
    "build",
    "0",
    "ünï:cödé",
    "a" * 300,
]
STAGES = ["build", "Build", "base-amd64", "base-arm64", "final", "0", "x y", "ünï"]
ARGS = [
    "ARG BASE=nvcr.io/nvidia/pytorch:24.01-py3",
    'ARG BASE="nvcr.io/nvidia/pytorch:24.01-py3"',
    "ARG BASE='python:3.11-slim'",
    "ARG BASE",
    "ARG CUDA=12.4.1",
    "ARG CUDA_BASE=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 BASE=${CUDA_BASE}",
    "ARG TARGETARCH",
    "ARG BASE=${UNSET:-ubuntu}",
]
ODD_ARGS = [
    "ARG =nothing",
    "ARG BASE=",
    "arg base=ubuntu",
]
STEPS = [
    "RUN pip install -r requirements.txt",
    "RUN pip install meta-compute-sdk --upgrade",
    "RUN apt-get update && \\\n    apt-get install -y curl \\\n    # a comment inside the continuation\n"
    "    && rm -rf /var/lib/apt/lists/*",
    "RUN <<EOF\nset -e\necho hello\nEOF",
    "RUN <<-EOT bash\n\techo tabs\n\tEOT",
    "COPY <<EOF /etc/config\nkey=value\nEOF",
    'RUN ["python", "-c", "print(1)"]',
    'CMD ["python", "train.py"]',
    'ENTRYPOINT ["/bin/sh", "-c"]',
    "CMD python train.py",
    "COPY --from=build /out /app",
    "COPY --from=0 /out /app",
    "COPY --from=nvcr.io/nvidia/pytorch:24.01-py3 /opt /opt",
    "COPY --from=${BASE} /x /y",
    "COPY --from= /x /y",
    "COPY --chown=1000:1000 --link . /src",
    "RUN --mount=type=cache,target=/root/.cache pip install x",
    "RUN --mount=type=bind,from=build,source=/x,target=/y true",
    "RUN --mount=from=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04,target=/cuda true",
    "RUN --network=none --security=insecure true",
    'ENV A=1 B="2 3" C=${A}',
    "ENV LEGACY value with spaces",
    'LABEL org.opencontainers.image.title="x" maintainer=me',
    "WORKDIR /app",
    "USER 1000:1000",
    "EXPOSE 8080/tcp 9090",
    'VOLUME ["/data"]',
    "HEALTHCHECK --interval=30s CMD curl -f http://localhost/ || exit 1",
    "HEALTHCHECK NONE",
    "ONBUILD RUN echo onbuild",
    'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
    "STOPSIGNAL SIGTERM",
    "MAINTAINER someone",
    "ADD https://example.com/x.tar.gz /tmp/",
    "ADD --checksum=sha256:abc file /x",
    "# a comment",
    "#",
    "",
    "RUN echo ${A:-b} $B",
]
ODD_STEPS = [
    "COPY --from=bu\u00e9ild /a /b",
    "COPY --\u0800from=build /out /app",
    "RUN --mount=type=cache,target=/\u00e9 true",
    "RUN <<EOF\nnever closed",
    'CMD ["unterminated',
    "RUN --mount=,,,=, true",
    "   ",
    "\t",
    "BOGUS instruction",
    "RUN",
    "FROM",
    "FROM a b c d",
    "FROM --platform=$BUILDPLATFORM nvcr.io/nvidia/pytorch:24.01-py3 AS xbuild",
    "FROM --platform=linux/arm64 ubuntu",
    "RUN echo \\",
    "\\",
    "RUN echo `backtick` \\\\",
]
DIRECTIVES = [
    "# syntax=docker/dockerfile:1",
    "# syntax=docker/dockerfile:1.7-labs",
    "# escape=`",
    "# escape=\\",
    "# escape=x",
    "#escape=`",
    "# check=skip=all",
    "# syntax = docker/dockerfile:1",
    "# directive=unknown",
]


@st.composite
def dockerfiles(draw: st.DrawFn) -> str:
    lines: list[str] = draw(st.lists(st.sampled_from(DIRECTIVES), max_size=draw(st.sampled_from([1, 1, 1, 2]))))
    lines += draw(st.lists(_mostly(ARGS, ODD_ARGS), max_size=3))
    for _ in range(draw(st.sampled_from([1, 1, 2, 2, 3, 4, 0]))):
        image = draw(_mostly(IMAGES, ODD_IMAGES))
        keyword = draw(st.sampled_from(["FROM", "FROM", "from", "From"]))
        flags = draw(
            _mostly(
                ["", "", "--platform=$BUILDPLATFORM ", "--platform=linux/amd64 "], ["--bogus ", "--platform=\u00e9 "]
            )
        )
        alias = draw(_mostly(["", "", " AS build", " as build", " AS final"], [f" AS {s}" for s in STAGES] + [" AS"]))
        lines.append(f"{keyword} {flags}{image}{alias}")
        lines += draw(st.lists(_mostly(STEPS, ODD_STEPS), max_size=4))
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))
    if "# escape=`" in text or "#escape=`" in text:
        text = text.replace("\\\n", "`\n")
    return text


def _mostly(usual: list[str], odd: list[str]) -> st.SearchStrategy[str]:
    """One of usual, or now and then (one in five) one of odd."""
    return st.sampled_from(usual * 4 + odd)


def _mutated_text(text: str, draw: st.DrawFn) -> bytes:
    how = draw(
        st.sampled_from(
            ["none"] * 12
            + [
                "crlf",
                "mixed endings",
                "bom",
                "utf-16",
                "truncated",
                "garbage",
                "nul",
                "long",
                "many lines",
                "unicode",
                "tab indent",
                "cr only",
            ]
        )
    )
    if how == "crlf":
        text = text.replace("\n", "\r\n")
    elif how == "mixed endings":
        text = text.replace("\n", "\r\n", 1)
    elif how == "cr only":
        text = text.replace("\n", "\r")
    elif how == "bom":
        text = "\ufeff" + text
    elif how == "utf-16":
        return text.encode("utf-16")
    elif how == "truncated":
        text = text[: int(len(text) * draw(st.floats(0, 1)))]
    elif how == "garbage":
        data = text.encode()
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=32)) + data[at:]
    elif how == "nul":
        text = text.replace(" ", "\0", 1)
    elif how == "long":
        text = text.replace("install", "install " + "x" * 100_000, 1)
    elif how == "many lines":
        text = text + "RUN true\n" * 3000
    elif how == "unicode":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(min_size=1, max_size=8)) + text[at:]
    elif how == "tab indent":
        text = text.replace("\n", "\n\t")
    return text.encode("utf-8", errors="surrogatepass")


OPTIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("--build-arg"),
            _mostly(
                ["BASE=nvcr.io/nvidia/pytorch:24.05-py3", "BASE=", "CUDA=12.4.1", "UNSET=ubuntu", "TARGETARCH=arm64"],
                ["BASE", "=x", "BASE=${BASE}", "A=b=c", "ünï=x"],
            ),
        ),
        st.tuples(st.just("--target"), _mostly(["build", "Build"], STAGES + ["", "nosuch"])),
        st.tuples(st.just("--platform"), _mostly(["linux/amd64", "linux/arm64/v8"], ["linux", "/", "", "a/b/c/d"])),
    ),
    max_size=2,
)
PROFILE = {
    "name": "mine",
    "base_images": [{"match": "nvcr.io/nvidia/pytorch:*", "to": "registry.local/pytorch:1"}, {"match": "*", "to": "x"}],
    "sdk_steps": ["RUN pip install sdk", "ENV SDK=1"],
}


@pytest.fixture(scope="module")
def workroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-dockerfiles")


def _rebase(root: Path, files: list[bytes], options: list[tuple[str, str]], profile: bytes | None, what: str) -> int:
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        paths = [write_bytes(work / "images" / str(i) / "Dockerfile", data) for i, data in enumerate(files)]
        extra = [x for option in options for x in option]
        if profile is not None:
            extra += ["--profile", str(write_bytes(work / "profile.yaml", profile))]
        inputs = listing(work / "images")
        out = work / "out"
        args = ("images", "rebase", *map(str, paths), "--out", str(out), *extra)
        code, _, _ = check_cli("dockerfiles", args, unchanged=(out,), what=what)
        assert listing(work / "images") == inputs, f"an input changed: {what}"
        if code == 0:
            written = listing(out)
            assert all(name.endswith((".diff", "Dockerfile")) or kind == "dir" for name, kind in written.items())
        return code
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_plain_dockerfile_is_rebased(workroot: Path) -> None:
    assert _rebase(workroot, [b"FROM nvcr.io/nvidia/pytorch:24.01-py3\nRUN true\n"], [], None, "plain") == 0


# Regressions this fuzzing found: (the Dockerfile, what the one line says). The parser's bindings cut a flag's
# non-ASCII character in two, which was an internal error (UnicodeDecodeError).
REGRESSIONS = [
    ("FROM nvcr.io/nvidia/pytorch:24.01-py3\nCOPY --\u0800from=build /out /app\n", "Dockerfile:2: a flag holds a"),
]


@pytest.mark.parametrize(("text", "says"), REGRESSIONS, ids=[str(i) for i in range(len(REGRESSIONS))])
def test_what_the_fuzzing_found_is_one_line(workroot: Path, text: str, says: str) -> None:
    work = Path(tempfile.mkdtemp(dir=workroot))
    path = write_bytes(work / "Dockerfile", text.encode())
    code, _, err = check_cli("dockerfiles", ("images", "rebase", str(path), "--out", str(work / "out")), what=text)
    assert code == 2 and says in err and not (work / "out").exists(), err


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[str, str]], bytes | None]:
    files = [_mutated_text(draw(dockerfiles()), draw) for _ in range(draw(st.sampled_from([1, 1, 1, 1, 2, 3])))]
    profile = None
    if draw(st.sampled_from([False] * 9 + [True])):  # now and then, a target profile of one's own, mutated
        profile, _ = draw(text_of(draw(mutated(PROFILE))))
    return files, draw(OPTIONS), profile


@example(case=([b"FROM x\nRUN <<EOF\nnever closed\n"], [], None))
@given(case=cases())
@fuzz_settings(300)
def test_generated_dockerfiles_are_rebased_or_one_line(workroot: Path, case) -> None:
    files, options, profile = case
    what = f"options {options}, profile {profile!r}\n" + "\n".join(f"{data[:2000]!r}" for data in files)
    _rebase(workroot, files, options, profile, what)


def test_inputs_were_counted() -> None:
    assert TRIED["dockerfiles"] > 0
