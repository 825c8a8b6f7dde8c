"""Image references: normalised as registries know them, split into their parts, matched against rules and tags."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ferry.plan import BaseImageRule


def normalise(reference: str) -> str:
    """reference as the registry knows it: Docker Hub short names get docker.io (and library/), no tag: latest."""
    name, at, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first.lower() == "localhost"):
        # A registry host is case-insensitive (NVCR.IO is nvcr.io); the repository path is not.
        first = first.lower()
        name = f"{first}/{rest}"
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    elif first == "index.docker.io":
        name = f"docker.io/{rest}"
    has_tag = name.rfind(":") > name.rfind("/")
    if not has_tag and not at:
        name += ":latest"
    return f"{name}{at}{digest}"


def _pattern(match: str) -> re.Pattern[str]:
    head, slash, _ = match.partition("/")
    if match == "*" or (slash and "*" in head):
        # A `*` in the registry part could stand for any registry: such a rule is taken as written.
        text = match
    else:
        text = normalise(match)
        name = match.partition("@")[0]
        if "*" in match and name.rfind(":") <= name.rfind("/"):
            text = text.removesuffix(":latest")  # `*` already spans the tag
    return re.compile(".*".join(re.escape(part) for part in text.split("*")))


def _match_key(normalised: str) -> str:
    """What rules match: name:tag (a source digest does not count), or name@digest when there is no tag."""
    name, _, _digest = normalised.partition("@")
    return name if name.rfind(":") > name.rfind("/") else normalised


def find_rule(reference: str, rules: Sequence[BaseImageRule]) -> BaseImageRule | None:
    """The first rule whose `match` (`*` spans any characters) matches the normalised reference.

    A reference pinned by digest alone has no tag: a rule for any tag of its repository (`name:*`) matches it.
    """
    normalised = normalise(reference)
    keys = [_match_key(normalised)]
    name = normalised.partition("@")[0]
    if name.rfind(":") <= name.rfind("/"):
        keys.append(f"{name}:")
    return next((rule for rule in rules if any(_pattern(rule.match).fullmatch(key) for key in keys)), None)


def repository(reference: str) -> str:
    """The normalised repository of reference (no tag, no digest)."""
    name = normalise(reference).partition("@")[0]
    return name[: name.rfind(":")] if name.rfind(":") > name.rfind("/") else name


@dataclass(frozen=True)
class Reference:
    """An image reference split into its registry host, repository and tag or digest."""

    host: str
    repository: str
    # A tag, or a digest "sha256:..."
    ref: str

    @classmethod
    def parse(cls, reference: str) -> Reference:
        """host/repo[:tag][@digest] (the host is required: callers normalise first); a digest wins over a tag."""
        name, _, digest = reference.partition("@")
        host, _, path = name.partition("/")
        tag = ""
        if path.rfind(":") > path.rfind("/"):
            path, _, tag = path.rpartition(":")
        return cls(host, path, digest or tag or "latest")

    @property
    def is_digest(self) -> bool:
        return self.ref.startswith("sha256:")

    def __str__(self) -> str:
        return f"{self.host}/{self.repository}{'@' if self.is_digest else ':'}{self.ref}"


def match_tags(pattern: str, tags: Sequence[str]) -> list[str]:
    """The tags that pattern (`*` spanning any characters) matches, sorted."""
    regex = re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
    return sorted(t for t in tags if regex.fullmatch(t))


def slug(image: str) -> str:
    """image as a file name (its "/", ":" and "@" made "_")."""
    return image.replace("/", "_").replace(":", "_").replace("@", "_")
