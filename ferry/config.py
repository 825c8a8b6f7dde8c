"""Load a YAML file into a pydantic model; every error is one line: file:line: field.path: problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ferry.errors import UsageError

M = TypeVar("M", bound=BaseModel)


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
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = _line_of(node, loc)
    return f"{path}{':' + str(line) if line else ''}: {field}: {message}"
