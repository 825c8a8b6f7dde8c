"""The audit's rules as data (`rules.yaml`, then a target profile's own file): what each matches, why, what to do,
and how severe a match is on an accelerator, by what the target profile says that accelerator runs."""

from __future__ import annotations

import fnmatch
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ferry.config import load_yaml_model
from ferry.plan import Accelerator, TargetProfile

RULES = Path(__file__).with_name("rules.yaml")
Severity = Literal["blocker", "warn", "ok"]
# Worst first: how findings sort and which severity a finding shows when several accelerators judge it.
SEVERITIES: tuple[Severity, ...] = ("blocker", "warn", "ok")
# What a rule matches: exactly one of these per rule.
MATCHERS = (
    "names", "methods", "device", "backend", "keywords", "imports", "commands", "files", "indexes", "versions",
    "extras", "packages", "channels", "variable", "resources", "check",
)  # fmt: skip


class Rule(BaseModel):
    """One rule: a kind, one matcher, why a match matters, what to do, and its severity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    why: str = Field(min_length=1)
    fix: str = ""
    # What an accelerator must run for a match to be ok there (TargetProfile.accelerators[].runs).
    needs: Literal["cuda", "nccl"] | None = None
    severity: Literal["blocker", "warn"] = "blocker"
    # Python: qualified names (globs, aliases resolved); x.<method>() on anything but a module; a device type or a
    # collective backend as a literal where a device or a backend goes; keyword=literal (globs, "*": any value).
    names: list[str] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)
    device: str | None = None
    backend: str | None = None
    keywords: dict[str, str] = Field(default_factory=dict)
    # Python: modules imported (and their submodules); commands run (subprocess, os.system: globs over the
    # command line as written).
    imports: list[str] = Field(default_factory=list)
    commands: list[str] = Field(default_factory=list)
    # File names (globs).
    files: list[str] = Field(default_factory=list)
    # Packages: index and direct URLs, local versions and conda builds, extras, names (normalised), channels.
    indexes: list[str] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    extras: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)
    # Network: an environment variable (glob) and its values (globs over the items of a comma list; none: any);
    # interfaces: a value naming none of the fabric's interfaces matches too.
    variable: str | None = None
    values: list[str] = Field(default_factory=list)
    interfaces: bool = False
    # Network: resources a container requests (globs).
    resources: list[str] = Field(default_factory=list)
    # Network: one of the checks of a container against the fabric; `variables` say which settings configure RDMA.
    check: Literal["rdma-env", "rdma-capabilities", "host-network", "capabilities"] | None = None
    variables: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_matcher(self) -> Rule:
        given = [m for m in MATCHERS if getattr(self, m)]
        if len(given) != 1:
            raise ValueError(f"a rule matches by exactly one of {', '.join(MATCHERS)} (this one: {given or 'none'})")
        return self

    def severity_on(self, accelerator: Accelerator) -> Severity:
        """ok where the accelerator runs what the rule needs, else the rule's severity."""
        return "ok" if self.needs is not None and self.needs in accelerator.runs else self.severity


class RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule]


@cache
def _read(path: Path) -> tuple[Rule, ...]:
    return tuple(load_yaml_model(path, RulesFile).rules)


def load_rules(profile: TargetProfile) -> tuple[Rule, ...]:
    """ferry's rules, then the profile's own (its `portability_rules` file); UsageError (file:line: field) for a
    file that is not rules."""
    extra = _read(Path(profile.portability_rules)) if profile.portability_rules else ()
    return _read(RULES) + extra


def matches(text: str, patterns: list[str]) -> bool:
    """Whether text matches one of the globs, case-sensitively (torch.cuda is not torch.CUDA)."""
    return any(fnmatch.fnmatchcase(text, pattern) for pattern in patterns)


def first(rules: tuple[Rule, ...], matcher: str, test) -> Rule | None:
    """The first rule that has matcher and whose value passes test."""
    return next((r for r in rules if getattr(r, matcher) and test(getattr(r, matcher))), None)


class _Kept(dict):
    """A placeholder the values lack stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(text: str, values: dict[str, str]) -> str:
    """text with its {placeholders} filled from values (unknown ones kept)."""
    return text.format_map(_Kept(values))


def target_values(profile: TargetProfile, name: str, accelerator: Accelerator) -> dict[str, str]:
    """What the rules' placeholders name on the target, for one accelerator."""
    fabric = profile.fabric
    return {
        "accelerator": name,
        "collectives": accelerator.collectives,
        "fabric": fabric.name if fabric else f"{profile.name}'s fabric",
        "interfaces": ", ".join(fabric.interfaces) if fabric and fabric.interfaces else "(the profile names none)",
        "rdma_resource": profile.rdma_resource or "the target's RDMA resource (the profile names none)",
        "rdma_env": " ".join(f"{k}={v}" for k, v in fabric.rdma_env.items()) if fabric else "",
    }
