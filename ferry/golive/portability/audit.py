"""The audit: every file under the paths read by its kind, every match judged for each accelerator by what the
target profile says it runs. Read-only: nothing is written, nothing is run."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ferry.golive.portability import network, packages, python_code
from ferry.golive.portability.model import Container, Hit, unreadable
from ferry.golive.portability.rules import SEVERITIES, Rule, Severity, fill, load_rules, matches, target_values
from ferry.plan import TargetProfile

# Folders that hold no one's own code: tools' caches, virtual environments, VCS data.
SKIPPED = {"node_modules", "__pycache__", "venv", "site-packages", ".ipynb_checkpoints"}
_REQUIREMENTS = (
    "requirements*.txt",
    "requirements*.in",
    "*-requirements.txt",
    "*_requirements.txt",
    "constraints*.txt",
)
_DOCKERFILES = ("Dockerfile", "Dockerfile.*", "*.Dockerfile", "*.dockerfile", "Containerfile")
_SCRIPTS = ("*.sh", "*.bash", "*.slurm", "*.sbatch")
_LOCKS = ("uv.lock", "poetry.lock", "pdm.lock")


@dataclass(frozen=True)
class Finding:
    """One place to look at: where, what kind, how severe (the worst over the accelerators judged), why, and
    what to do; severities: by accelerator."""

    file: str
    line: int
    kind: str
    severity: Severity
    message: str
    fix: str
    match: str
    severities: dict[str, Severity]
    cell: int | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.cell is None:
            del data["cell"]
        return data


@dataclass(frozen=True)
class Audit:
    findings: list[Finding]
    # Files read (of a kind the audit reads), and places already device-agnostic (torch.accelerator,
    # torch.device from configuration).
    files: int
    agnostic: int


def _kind(path: Path) -> str:
    """Which reader a file goes to, by its name ("source": none, not a file the audit reads)."""
    name = path.name

    def named(patterns: tuple[str, ...]) -> bool:
        return matches(name, list(patterns))

    if path.suffix == ".py":
        return "python"
    if path.suffix == ".ipynb":
        return "notebook"
    if named(_REQUIREMENTS) or (path.parent.name == "requirements" and path.suffix in (".txt", ".in")):
        return "requirements"
    if name in ("pyproject.toml", "Pipfile"):
        return "pyproject"
    if name in _LOCKS:
        return "lock"
    if named(_DOCKERFILES):
        return "dockerfile"
    if named(_SCRIPTS):
        return "script"
    if path.suffix in (".yaml", ".yml"):
        return "yaml"
    return "source"


def files_under(paths: list[Path]) -> list[Path]:
    """Each file a path names (one that does not exist too, to be reported), and every file under a folder (not
    following links, hidden folders and SKIPPED left out; one that cannot be listed kept, to be reported), sorted,
    each once."""
    found: list[Path] = []
    for path in paths:
        if path.is_file() or not path.exists():
            found.append(path)
            continue
        unlisted: list[Path] = []
        for folder, dirs, names in os.walk(path, onerror=lambda exc, into=unlisted: into.append(Path(exc.filename))):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED)
            found.extend(Path(folder) / n for n in sorted(names))
        found.extend(unlisted)
    return list(dict.fromkeys(found))


class _Reader:
    """What the files said, gathered before the containers are judged (a ConfigMap may sit in another file)."""

    def __init__(self, rules: tuple[Rule, ...]):
        self.rules = rules
        self.hits: list[Hit] = []
        self.containers: list[Container] = []
        self.objects: list[tuple[str, dict]] = []
        self.agnostic = 0
        self.files = 0

    def read(self, path: Path, name: str) -> None:
        if not path.exists() or path.is_dir():
            self.hits.append(
                unreadable(name, 1, "cannot list this folder" if path.exists() else "no such file or folder")
            )
            return
        kind = _kind(path)
        file_rule = next((r for r in self.rules if r.files and matches(path.name, r.files)), None)
        if file_rule is not None:
            self.files += 1
            self.hits.append(Hit(name, 1, file_rule, path.name))
            return
        if kind == "source":
            return
        self.files += 1
        try:
            text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
        except OSError as exc:
            self.hits.append(unreadable(name, 1, f"cannot read: {exc.strerror or exc}"))
            return
        except UnicodeDecodeError as exc:
            self.hits.append(unreadable(name, 1, f"not UTF-8 text (at byte offset {exc.start})"))
            return
        getattr(self, f"_{kind}")(text, name)

    def _python(self, text: str, name: str) -> None:
        self._code(python_code.read_module(text, name, self.rules))

    def _notebook(self, text: str, name: str) -> None:
        self._code(python_code.read_notebook(text, name, self.rules))

    def _code(self, found: python_code.PythonFindings) -> None:
        self.hits += found.hits
        self.agnostic += found.agnostic
        if found.container is not None:
            self.containers.append(found.container)

    def _requirements(self, text: str, name: str) -> None:
        self.hits += packages.requirements(text, name, self.rules)

    def _pyproject(self, text: str, name: str) -> None:
        self.hits += packages.pyproject(text, name, self.rules)

    def _lock(self, text: str, name: str) -> None:
        self.hits += packages.lock(text, name, self.rules)

    def _dockerfile(self, text: str, name: str) -> None:
        hits, containers = network.read_dockerfile(text, name, self.rules)
        self.hits += hits
        self.containers += containers

    def _script(self, text: str, name: str) -> None:
        hits, container = network.read_script(text, name, self.rules)
        self.hits += hits
        self.containers += [container] if container else []

    def _yaml(self, text: str, name: str) -> None:
        """Kubernetes objects (kind and apiVersion); else a conda environment (dependencies) and the environments
        an Azure ML job or a Compose file sets."""
        objects = network.manifest_documents(text, name)
        if isinstance(objects, Hit):
            self.hits.append(objects)
            return
        for obj in objects:
            if "kind" in obj and "apiVersion" in obj:
                self.objects.append((name, obj))
                continue
            if isinstance(obj.get("dependencies"), list):
                self.hits += packages.conda_environment(obj, name, self.rules, network.yaml_line)
            self.containers += network.environment_blocks(obj, name)

    def containers_judged(self, profile: TargetProfile) -> list[Hit]:
        containers = self.containers + network.workload_containers(self.objects, network.config_maps(self.objects))
        return network.judge(containers, self.rules, profile)


def audit(paths: list[Path], profile: TargetProfile, accelerators: list[str], base: Path) -> Audit:
    """Read every file under paths (named relative to base where they are under it) and judge each match for
    each of the accelerators (names the profile knows). UsageError for a rules file that is not rules."""
    reader = _Reader(load_rules(profile))
    for path in files_under(paths):
        absolute = path.resolve()
        reader.read(path, str(absolute.relative_to(base)) if absolute.is_relative_to(base) else str(path))
    hits = reader.hits + reader.containers_judged(profile)
    unique = {(h.file, h.cell, h.line, h.rule.kind, h.match): h for h in hits if h.rule.kind != "agnostic"}
    findings = [_judged(hit, profile, accelerators) for hit in unique.values()]
    findings.sort(key=lambda f: (SEVERITIES.index(f.severity), f.file, f.cell or 0, f.line, f.kind))
    return Audit(findings, reader.files, reader.agnostic)


def _judged(hit: Hit, profile: TargetProfile, accelerators: list[str]) -> Finding:
    """The hit as a finding: its severity on each accelerator, its words filled for the worst of them."""
    severities = {name: hit.rule.severity_on(profile.accelerators[name]) for name in accelerators}
    worst = min(accelerators, key=lambda name: SEVERITIES.index(severities[name]))
    values = {**target_values(profile, worst, profile.accelerators[worst]), "match": hit.match, **dict(hit.values)}
    return Finding(
        hit.file, hit.line, hit.rule.kind, severities[worst], fill(hit.rule.why, values), fill(hit.rule.fix, values),
        hit.match, severities, hit.cell,
    )  # fmt: skip
