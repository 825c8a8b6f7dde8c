"""What the readers pass on: a Hit (a rule matched at a place), the settings and resources of one container, and
an unreadable file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ferry.golive.portability.rules import Rule

# A file (or a notebook cell, a template) no parser could read: reported, never skipped.
UNREADABLE = Rule(
    kind="unreadable",
    files=["*"],
    severity="warn",
    why="{match}",
    fix="make it readable to its parser (a template: render it first), or leave it out of what is audited",
)
# How much of a match a finding quotes.
QUOTE = 80


# The credentials a URL may carry (https://user:token@host/simple): never quoted.
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def quote(text: str) -> str:
    """text on one line, a URL's credentials masked, cut to QUOTE characters."""
    flat = _USERINFO.sub("***@", " ".join(text.split()))
    return flat if len(flat) <= QUOTE else flat[: QUOTE - 3] + "..."


@dataclass(frozen=True)
class Hit:
    """A rule matched: at file:line (a notebook's cell too), what matched as written, and placeholder values."""

    file: str
    line: int
    rule: Rule
    match: str
    values: tuple[tuple[str, str], ...] = ()
    cell: int | None = None


def unreadable(file: str, line: int, why: str, cell: int | None = None) -> Hit:
    return Hit(file, line, UNREADABLE, " ".join(why.split()), cell=cell)


@dataclass(frozen=True)
class Setting:
    """An environment variable as set somewhere (a manifest's env or a ConfigMap it mounts, ENV, os.environ)."""

    name: str
    value: str
    file: str
    line: int
    # Where it came from when not the container's own env (a ConfigMap's name).
    via: str = ""


@dataclass
class Container:
    """What one container (a Dockerfile's stage, a script) runs with: its settings, resources and capabilities."""

    label: str
    file: str
    line: int
    settings: list[Setting] = field(default_factory=list)
    # Resource name -> the line asking for it.
    resources: dict[str, int] = field(default_factory=dict)
    capabilities: dict[str, int] = field(default_factory=dict)
    # The line of hostNetwork: true (None: not set).
    host_network: int | None = None
