"""CUDA builds among what a workload installs: requirements files, pyproject.toml, conda environments, lock files,
and the pip, conda and apt lines of Dockerfiles and notebooks."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from urllib.parse import unquote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ferry.golive.portability.model import Hit, quote, unreadable
from ferry.golive.portability.rules import Rule, first, matches

# pip options whose value is an index or a place to find wheels, and those whose value is something else.
_URL_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links"}
_VALUE_OPTIONS = {
    "-r", "--requirement", "-c", "--constraint", "-t", "--target", "--prefix", "--root", "--platform",
    "--python-version", "--implementation", "--abi", "--trusted-host", "--cache-dir", "--progress-bar", "--src",
    "--upgrade-strategy", "--only-binary", "--no-binary", "--config-settings", "-C", "--python", "--log",
    "--channel", "--name", "-n", "-p", "--override", "--index-strategy",
}  # fmt: skip
# Environment variables that name an index for pip (and uv).
INDEX_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL")
_CONDA_SPEC = re.compile(r"^(?:(?P<channel>[^:\s]+)::)?(?P<name>[A-Za-z0-9_.\-]+)(?P<rest>.*)$")
_COMMENT = re.compile(r"(^|\s)#.*$")


def _hit(rule: Rule | None, file: str, line: int, match: str, cell: int | None) -> list[Hit]:
    return [Hit(file, line, rule, quote(match), cell=cell)] if rule else []


def index(url: str, file: str, line: int, rules: tuple[Rule, ...], cell: int | None = None) -> list[Hit]:
    """An index, find-links or direct URL (percent-decoded: %2Bcu121 is +cu121) that serves CUDA builds."""
    return _hit(first(rules, "indexes", lambda p: matches(unquote(url), p)), file, line, url, cell)


def pip_spec(spec: str, file: str, line: int, rules: tuple[Rule, ...], cell: int | None = None) -> list[Hit]:
    """One PEP 508 requirement (torch==2.3.1+cu121, jax[cuda12], cupy-cuda12x, a name @ URL) against the rules."""
    try:
        req = Requirement(spec.strip())
    except InvalidRequirement:
        # A path, a bare URL or a VCS link: where it points, else what it names (#egg=, a wheel's file name, a
        # repository's name).
        named = _named_by_url(spec.strip())
        found = index(spec.strip(), file, line, rules, cell)
        return found or (pip_spec(named, file, line, rules, cell) if named else [])
    name = canonicalize_name(req.name)
    locals_ = [s.version.partition("+")[2] for s in req.specifier if "+" in s.version]
    tests = {
        "indexes": lambda p: bool(req.url) and matches(unquote(req.url), p),
        "versions": lambda p: any(matches(local, p) for local in locals_),
        "extras": lambda p: any(matches(canonicalize_name(e), p) for e in req.extras),
        "packages": lambda p: matches(name, p),
    }
    rule = next((r for r in rules for m, test in tests.items() if getattr(r, m) and test(getattr(r, m))), None)
    return _hit(rule, file, line, spec, cell)


def _named_by_url(url: str) -> str | None:
    """What a URL or VCS link installs, as a requirement: git+https://github.com/NVIDIA/apex.git is apex,
    .../torch-2.1.0%2Bcu121-cp310-cp310-linux_x86_64.whl is torch==2.1.0+cu121; None for a local path."""
    if "://" not in url:
        return None
    address, _, fragment = url.partition("#")
    egg = re.search(r"(?:^|&)egg=([A-Za-z0-9_.\-]+)", fragment)
    if egg:
        return egg.group(1)
    last = unquote(address.rstrip("/").rsplit("/", 1)[-1]).split("@")[0]
    if last.endswith(".whl"):
        try:
            name, version, _, _ = parse_wheel_filename(last)
        except InvalidWheelFilename:
            return None
        return f"{name}=={version}"
    name = re.sub(r"(\.git|\.tar\.gz|\.zip)$", "", last)
    return name if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", name) else None


def conda_spec(spec: str, file: str, line: int, rules: tuple[Rule, ...], cell: int | None = None) -> list[Hit]:
    """One conda match spec (pytorch-cuda=12.1, nvidia::cuda-toolkit, pytorch=2.1.0=py3.10_cuda12.1_cudnn8_0)."""
    found = _CONDA_SPEC.match(spec.strip())
    if not found:
        return []
    name, rest = canonicalize_name(found["name"]), found["rest"]
    tests = {
        "channels": lambda p: bool(found["channel"]) and matches(found["channel"], p),
        "packages": lambda p: matches(name, p),
        # The build string (after the second "="), or a bracketed build=.
        "versions": lambda p: any(matches(part, p) for part in re.split(r"[=\[\]\s,]+", rest) if part),
    }
    rule = next((r for r in rules for m, test in tests.items() if getattr(r, m) and test(getattr(r, m))), None)
    return _hit(rule, file, line, spec, cell)


def channel(name: str, file: str, line: int, rules: tuple[Rule, ...], cell: int | None = None) -> list[Hit]:
    """A conda channel that ships CUDA builds (nvidia)."""
    return _hit(first(rules, "channels", lambda p: matches(name, p)), file, line, f"channel {name}", cell)


def _options(tokens: list[str]) -> Iterator[tuple[str | None, str]]:
    """(option, value) for each option of a pip-style argument list, (None, argument) for the rest."""
    tokens = iter(tokens)
    for token in tokens:
        option, eq, value = token.partition("=")
        if token.startswith("-") and option in _URL_OPTIONS | _VALUE_OPTIONS:
            yield option, value if eq else next(tokens, "")
        elif option in ("-e", "--editable"):
            # An editable install names a requirement (a VCS link, a path).
            yield None, value if eq else next(tokens, "")
        elif token.startswith("-"):
            # A flag (-U, --no-cache-dir); -c of conda names a channel and is in _VALUE_OPTIONS.
            continue
        else:
            yield None, token


def pip_arguments(tokens: list[str], file: str, line: int, rules: tuple[Rule, ...], cell: int | None) -> list[Hit]:
    """What `pip install ARGS` installs, and from which index."""
    hits: list[Hit] = []
    for option, value in _options(tokens):
        if option in _URL_OPTIONS:
            hits += index(value, file, line, rules, cell)
        elif option is None:
            hits += pip_spec(value, file, line, rules, cell)
    return hits


def segments(command: str) -> Iterator[list[str]]:
    """A shell command line as its simple commands (split at &&, ||, ;, |), each as words."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    try:
        for token in lexer:
            if token and set(token) <= set(";&|"):
                yield words
                words = []
            else:
                words.append(token)
    except ValueError:  # an unclosed quote: what was read so far
        pass
    yield words


def _installer(words: list[str]) -> tuple[str, list[str]] | None:
    """(tool, its arguments after `install`) when words install packages: pip, uv pip, conda, mamba, apt, yum."""
    while words and (words[0] in ("sudo", "env", "exec") or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])):
        words = words[1:]
    if len(words) >= 3 and re.fullmatch(r"python[0-9.]*", words[0].rsplit("/", 1)[-1]) and words[1] == "-m":
        words = words[2:]
    if len(words) >= 2 and words[0] == "uv" and words[1] == "pip":
        words = words[1:]
    if not words:
        return None
    tool = words[0].rsplit("/", 1)[-1]
    family = next(
        (f for f, names in _TOOLS.items() if tool in names or re.fullmatch(r"pip[0-9.]*", tool) and f == "pip"), None
    )
    if family is None or "install" not in words[1:]:
        return None
    return family, words[words.index("install", 1) + 1 :]


_TOOLS = {
    "pip": ("pip",),
    "conda": ("conda", "mamba", "micromamba"),
    "apt": ("apt-get", "apt", "yum", "dnf", "microdnf"),
}


def command(text: str, file: str, line: int, rules: tuple[Rule, ...], cell: int | None = None) -> list[Hit]:
    """The packages a shell command line installs (a Dockerfile's RUN, a notebook's !pip), judged."""
    hits: list[Hit] = []
    for words in segments(text):
        found = _installer(words)
        if found is None:
            continue
        tool, arguments = found
        if tool == "pip":
            hits += pip_arguments(arguments, file, line, rules, cell)
            continue
        for option, value in _options(arguments):
            if tool == "conda" and option in ("-c", "--channel"):
                hits += channel(value, file, line, rules, cell)
            elif option is None and tool == "conda":
                hits += conda_spec(value, file, line, rules, cell)
            elif option is None:
                name = value.split("=", 1)[0]
                hits += _hit(first(rules, "packages", lambda p, n=name: matches(n, p)), file, line, value, cell)
    return hits


def requirements(text: str, file: str, rules: tuple[Rule, ...]) -> list[Hit]:
    """A requirements (or constraints) file: its requirement lines and its index options."""
    hits: list[Hit] = []
    for number, line in logical_lines(text):
        line = _COMMENT.sub("", line).strip()
        if not line:
            continue
        if line.startswith("-"):
            hits += pip_arguments(shlex.split(line, comments=False), file, number, rules, None)
        else:
            # A requirement's own options (--hash=...) follow it.
            hits += pip_spec(re.split(r"\s+--?[A-Za-z]", line)[0], file, number, rules)
    return hits


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, text) of each line, backslash continuations joined."""
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def line_of(text: str, needle: str) -> int:
    """The first line of text that holds needle (1 when none does): TOML and JSON parsers give no lines."""
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def pyproject(text: str, file: str, rules: tuple[Rule, ...]) -> list[Hit]:
    """pyproject.toml: PEP 621 dependencies and optional ones, build requirements, dependency groups, Poetry's
    dependencies and the indexes of Poetry, uv and PDM; a Pipfile: its packages and sources."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [unreadable(file, _toml_line(exc), f"not TOML: {exc}")]
    project, tool = _table(data, "project"), _table(data, "tool")
    specs = [*_strings(project.get("dependencies")), *_strings(_table(data, "build-system").get("requires"))]
    for group in (project.get("optional-dependencies"), data.get("dependency-groups")):
        specs += [s for values in _table({"g": group}, "g").values() for s in _strings(values)]
    hits = [h for spec in specs for h in pip_spec(spec, file, line_of(text, spec), rules)]
    poetry = _table(tool, "poetry")
    # Poetry's tables, and a Pipfile's (the same form: name = "version" or a table).
    tables = [
        poetry.get("dependencies"),
        poetry.get("dev-dependencies"),
        data.get("packages"),
        data.get("dev-packages"),
    ]
    tables += [_table(g, "dependencies") for g in _table(poetry, "group").values() if isinstance(g, dict)]
    for table in tables:
        for name, spec in _table({"t": table}, "t").items():
            hits += _poetry_dependency(name, spec, text, file, rules)
    indexes = (
        poetry.get("source"),
        _table(tool, "uv").get("index"),
        _table(tool, "pdm").get("source"),
        data.get("source"),
    )
    for sources in indexes:
        for source in sources if isinstance(sources, list) else []:
            url = source.get("url") if isinstance(source, dict) else None
            if isinstance(url, str):
                hits += index(url, file, line_of(text, url), rules)
    return hits


def _poetry_dependency(name: str, spec, text: str, file: str, rules: tuple[Rule, ...]) -> list[Hit]:
    """One Poetry dependency (name = "2.1.0+cu121", or a table with version, url, extras), as a PEP 508 one."""
    hits = []
    for entry in spec if isinstance(spec, list) else [spec]:
        table = entry if isinstance(entry, dict) else {"version": entry}
        version = str(table.get("version", "")).strip()
        extras = f"[{','.join(map(str, table['extras']))}]" if isinstance(table.get("extras"), list) else ""
        url = table.get("url")
        written = f"{name}{extras} @ {url}" if isinstance(url, str) else f"{name}{extras}"
        # Only an exact version can carry a local label (2.3.1+cu121); ^2.3 and ~2.3 say nothing of the build.
        exact = re.fullmatch(r"=*\s*([0-9][A-Za-z0-9.]*(?:\+[A-Za-z0-9.]+)?)", version)
        if exact and not url:
            written += f"=={exact.group(1)}"
        hits += pip_spec(written, file, line_of(text, f"{name} ="), rules)
    return hits


def _toml_line(exc: tomllib.TOMLDecodeError) -> int:
    found = re.search(r"line (\d+)", str(exc))
    return int(found.group(1)) if found else 1


def _table(data, key: str) -> dict:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def lock(text: str, file: str, rules: tuple[Rule, ...]) -> list[Hit]:
    """A TOML lock file (uv.lock, poetry.lock, pdm.lock): each package's name and version, and where it is from."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [unreadable(file, _toml_line(exc), f"not TOML: {exc}")]
    hits: list[Hit] = []
    for package in data.get("package", []) if isinstance(data.get("package"), list) else []:
        name, version = package.get("name"), package.get("version")
        if not isinstance(name, str):
            continue
        line = line_of(text, f'name = "{name}"')
        written = f"{name}=={version}" if isinstance(version, str) else name
        found = pip_spec(written, file, line, rules)
        source = package.get("source")
        urls = [v for v in source.values() if isinstance(v, str) and "://" in v] if isinstance(source, dict) else []
        hits += found or [h for url in urls for h in index(url, file, line, rules)]
    return hits


def conda_environment(data, file: str, rules: tuple[Rule, ...], line: Callable[[list, int], int]) -> list[Hit]:
    """A conda environment (environment.yml): its channels, conda dependencies and pip section.

    line(sequence, index) is the line of an item of a sequence read from the file."""
    hits: list[Hit] = []
    channels = data.get("channels")
    for i, name in enumerate(channels if isinstance(channels, list) else []):
        if isinstance(name, str):
            hits += channel(name, file, line(channels, i), rules)
    dependencies = data.get("dependencies")
    for i, item in enumerate(dependencies if isinstance(dependencies, list) else []):
        if isinstance(item, str):
            hits += conda_spec(item, file, line(dependencies, i), rules)
        elif isinstance(item, dict) and isinstance(item.get("pip"), list):
            pips = item["pip"]
            for j, spec in enumerate(pips):
                if isinstance(spec, str):
                    hits += requirements_line(spec, file, line(pips, j), rules)
    return hits


def requirements_line(text: str, file: str, line: int, rules: tuple[Rule, ...]) -> list[Hit]:
    """One line of a requirements file, found at line elsewhere (a conda environment's pip section)."""
    return [Hit(h.file, line, h.rule, h.match) for h in requirements(text, file, rules)]
