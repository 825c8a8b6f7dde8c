"""Load a YAML file into a pydantic model; every error is one line: file:line: field.path: problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ferry.errors import UsageError

M = TypeVar("M", bound=BaseModel)
# More values than any plan or profiles file holds once its aliases are expanded, few enough to walk at once: an
# alias bomb (each level ten aliases of the one before) expands ten-fold per level.
MAX_VALUES = 100_000


class Settings(BaseModel):
    """Base of a phase's settings (`phases.<name>`) and gate (`gates.<name>`) models: unknown keys are errors.

    In the base layer, so that a phase's domain package may hold its settings apart from its machinery."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldProblem(ValueError):
    """Raised by a transform: what is wrong, and where (the field path) in the document."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


def _line_of(node: yaml.Node | None, path: tuple) -> int | None:
    """The 1-based YAML line of the deepest node along path that exists."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if found is None:
                key_node = next((k for k, _ in node.value if getattr(k, "value", None) == part), None)
                return key_node.start_mark.line + 1 if key_node is not None else line
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    # Unknown keys are reported at the key itself, which is where the reader should look.
    return line


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def unbuildable(value: str, tag: str, exc: Exception) -> str:
    """Why a scalar cannot be built as its tag says (`!!timestamp 2024-13-01`, `!!bool maybe`, 5000 digits)."""
    shown_value = value if len(value) <= 40 else value[:40] + "..."
    reason = f": {str(exc).split(';')[0]}" if isinstance(exc, ValueError) else ""
    return f"{shown_value!r} is not a valid {tag.rsplit(':', 1)[-1]}{reason}"


def _unbuildable(root: yaml.Node | None) -> tuple[int, str] | None:
    """(line, why) of the first scalar of the document that the YAML loader cannot build, if any."""
    loader = yaml.SafeLoader("")
    seen: set[int] = set()
    todo = [root] if root is not None else []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                loader.construct_object(node)
            except (ValueError, KeyError, AttributeError) as exc:
                return node.start_mark.line + 1, unbuildable(node.value, node.tag, exc)
            except yaml.YAMLError:
                pass
        todo += reversed(_children(node))
    return None


def _structure_problem(root: yaml.Node | None) -> tuple[int, str] | None:
    """(line, problem) when a mapping of the document holds a key twice (YAML forbids it; PyYAML would keep the
    last silently), or its aliases make it recursive or expand it past MAX_VALUES values."""
    sizes: dict[int, int] = {}
    ancestors: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)] if root is not None else []
    while todo:
        node, visited = todo.pop()
        if visited:
            ancestors.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[id(node)] > MAX_VALUES:
                return node.start_mark.line + 1, f"its aliases expand to more than {MAX_VALUES} values"
            continue
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            keys: dict[tuple, int] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if (key.tag, key.value) in keys:
                        first = keys[key.tag, key.value]
                        return key.start_mark.line + 1, f"{shown(key.value)}: given twice (first at line {first})"
                    keys[key.tag, key.value] = key.start_mark.line + 1
        ancestors.add(id(node))
        todo.append((node, True))
        for child in _children(node):
            if id(child) in ancestors:
                return (
                    child.start_mark.line + 1,
                    "an alias in this anchored node refers back to it: a recursive structure",
                )
            todo.append((child, False))
    return None


def shown(field: object) -> str:
    """A field name as a line shows it: as written, or quoted when it holds a line break or another unprintable."""
    text = str(field)
    return text if text.isprintable() else repr(text)


def load_yaml_model(path: Path, model: type[M], transform: Callable[[Any], Any] | None = None) -> M:
    """Parse path and validate it as model (after transform, if given), or raise UsageError with one line."""
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    node = None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:  # a control character: it has a position, not a mark
        line = text.count("\n", 0, exc.position) + 1
        raise UsageError(f"{path}:{line}: not valid YAML: character #x{exc.character:04x} is not allowed") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path}{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise UsageError(f"{path}: not valid YAML: nested too deeply") from None
    except (ValueError, KeyError, AttributeError) as exc:  # a scalar not of its tag: 2024-13-01, !!bool maybe
        line, why = _unbuildable(node) or (None, f"{type(exc).__name__}: {exc}")
        raise UsageError(f"{path}{f':{line}' if line else ''}: not valid YAML: {why}") from None
    if (problem := _structure_problem(node)) is not None:
        raise UsageError(f"{path}:{problem[0]}: {problem[1]}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: (top level): expected a mapping, found {type(data).__name__}")
    try:
        if transform is not None:
            data = transform(data)
        return model.model_validate(data)
    except FieldProblem as exc:
        raise UsageError(field_line(path, node, exc.loc, str(exc))) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise UsageError(field_line(path, node, tuple(err["loc"]), message)) from None


def field_line(path: Path, node: yaml.Node | None, loc: tuple, message: str) -> str:
    """`file:line: field.path: message`, the line being that of the field in the YAML document node."""
    field = ".".join(shown(p) for p in loc) or "(top level)"
    line = _line_of(node, loc)
    return f"{path}{':' + str(line) if line else ''}: {field}: {message}"
