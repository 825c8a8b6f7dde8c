"""ruamel.yaml's round-trip mode as the manifests use it: parse and write in a file's layout; plain, masked views."""

from __future__ import annotations

import base64
import copy
import datetime
import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scanner import ScannerError


def round_trip_yaml(indent: tuple[int, int, int] = (2, 2, 0), explicit_start: bool = False) -> YAML:
    """A round-trip parser and writer with indent (mapping, sequence, dash offset): quotes kept, no line folded."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    # No re-folding of long lines: a rendered line is the line that was read.
    yaml.width = 1 << 16
    yaml.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    yaml.explicit_start = explicit_start
    return yaml


def dump(docs: list[Any], indent: tuple[int, int, int], explicit_start: bool) -> str:
    """docs as one multi-document YAML text in the layout given."""
    out = io.StringIO()
    round_trip_yaml(indent, explicit_start).dump_all(docs, out)
    return out.getvalue()


def parse(text: str, indent: tuple[int, int, int]) -> list[Any]:
    """Every document of text, a tab between tokens read as a space (libyaml, and so kubectl, allows it; ruamel.yaml
    does not). Raises YAMLError."""
    for _ in range(text.count("\t") + 1):
        try:
            return list(round_trip_yaml(indent).load_all(text))
        except ScannerError as exc:
            at = exc.problem_mark.index if exc.problem_mark is not None else -1
            line_start = text.rfind("\n", 0, at) + 1
            # A tab in a line's indentation is an error for every YAML parser: only separating tabs are spaces.
            if not 0 <= at < len(text) or text[at] != "\t" or not text[line_start:at].strip():
                raise
            text = text[:at] + " " + text[at + 1 :]
    raise AssertionError("unreachable: each retry replaces one tab")


def plain_documents(text: str, indent: tuple[int, int, int]) -> list[Any]:
    """Every document of text that is not empty, as plain Python (see plain). Raises YAMLError."""
    return [plain(doc) for doc in parse(text, indent) if doc is not None]


def plain(node: Any) -> Any:
    """Round-trip nodes as plain JSON-compatible Python (a timestamp as the string it was written as, `!!binary`
    as its base64 text)."""
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, (bool, ScalarBoolean)):
        return bool(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        return node.isoformat()
    if isinstance(node, bytes):
        # `!!binary` in a Secret's data or a ConfigMap's binaryData: the base64 text it was written as.
        return base64.b64encode(node).decode("ascii")
    return node


def masked(data: Any) -> Any:
    """A copy of a Secret with every value of data and stringData replaced: what reports may show."""
    copied = copy.deepcopy(data)
    for key in ("data", "stringData"):
        values = copied.get(key)
        if isinstance(values, dict):
            for name in values:
                values[name] = "<masked>"
    return copied
