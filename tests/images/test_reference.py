"""Image references: normalised as registries know them, matched against rules and tag patterns."""

from __future__ import annotations

import pytest

from ferry.images.reference import find_rule, match_tags, normalise

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "normalised"),
    [
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        ("nvidia/cuda:12", "docker.io/nvidia/cuda:12"),
        ("index.docker.io/nvidia/cuda:12", "docker.io/nvidia/cuda:12"),
        ("localhost/x", "localhost/x:latest"),
        ("127.0.0.1:5000/ml/x@" + DIGEST, "127.0.0.1:5000/ml/x@" + DIGEST),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
    ],
)
def test_normalise(reference: str, normalised: str) -> None:
    assert normalise(reference) == normalised


def test_rules_are_normalised_and_first_match_wins() -> None:
    from ferry.plan import BaseImageRule

    rules = [BaseImageRule(match="nvidia/cuda:*", to="a"), BaseImageRule(match="docker.io/nvidia/*", to="b")]
    assert find_rule("docker.io/nvidia/cuda:12", rules).to == "a"
    assert find_rule("nvidia/cudagl:12", rules).to == "b"
    assert find_rule("nvcr.io/nvidia/cuda:12", rules) is None


def test_match_tags() -> None:
    assert match_tags("2024.*", ["2024.06", "2023.12", "2024.07-rc1", "latest"]) == ["2024.06", "2024.07-rc1"]
