"""Reading the sources: files and folders of multi-document YAML as SourceFiles, layout guessed, alias bombs refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from ferry.config import unbuildable
from ferry.errors import UsageError
from ferry.manifests.model import Document, SourceFile
from ferry.manifests.roundtrip import dump, masked, parse, round_trip_yaml

_KEY_LINE = re.compile(r"^( *)[^\s#-][^#]*:\s*(#.*)?$")
_ITEM_LINE = re.compile(r"^( *)- ")
_CONTENT_LINE = re.compile(r"^( *)[^\s#]")


def guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) the file is written with, so output keeps its layout."""
    lines = [line for line in text.splitlines() if _CONTENT_LINE.match(line) and not line.startswith("---")]
    mapping, offset = None, None
    for line, following in zip(lines, lines[1:], strict=False):
        key = _KEY_LINE.match(line)
        if key is None:
            continue
        parent = len(key.group(1)) + (2 if line.lstrip().startswith("- ") else 0)
        item = _ITEM_LINE.match(following)
        child = len(_CONTENT_LINE.match(following).group(1))  # type: ignore[union-attr]
        if item is not None and offset is None and child >= parent:
            offset = child - parent
        elif item is None and mapping is None and child > parent:
            mapping = child - parent
        if mapping is not None and offset is not None:
            break
    mapping = mapping or 2
    offset = offset or 0
    return mapping, offset + 2, offset


def _unbuildable(text: str, indent: tuple[int, int, int]) -> tuple[int, str] | None:
    """(line, why) of the first scalar of text that the YAML loader cannot build as its tag says, if any."""
    yaml = round_trip_yaml(indent)
    seen: set[int] = set()
    try:
        roots = list(yaml.compose_all(text))
    except YAMLError:  # (a tab between tokens, which parse reads as a space)
        return None
    for root in roots:
        todo = [root]
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ScalarNode):
                try:
                    yaml.constructor.construct_object(node, deep=True)
                except (ValueError, KeyError, AttributeError) as exc:
                    return node.start_mark.line + 1, unbuildable(node.value, str(node.tag), exc)
                except YAMLError:
                    pass
            elif isinstance(node, MappingNode):
                todo += reversed([n for pair in node.value for n in pair])
            elif isinstance(node, SequenceNode):
                todo += reversed(node.value)
    return None


# Values that aliases may add to a file (an alias counts as all that it names): far more than a manifest repeats
# this way, far fewer than an alias bomb (each level ten aliases of the one before) expands to.
MAX_ALIASED = 100_000


def _aliased_too_much(docs: list[Any]) -> int | None:
    """The line of the node whose aliases make the documents expand past MAX_ALIASED values more than they hold
    (an alias names the same object as its anchor), else None."""
    sizes: dict[int, int] = {}
    written = 0  # values as written: each mapping and sequence once, with its scalars
    todo: list[tuple[Any, bool]] = [(doc, False) for doc in docs]
    while todo:
        node, visited = todo.pop()
        children = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else []
        if visited:
            sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
            if sizes[id(node)] - written > MAX_ALIASED:
                lc = getattr(node, "lc", None)
                return lc.line + 1 if lc is not None and lc.line is not None else 1
        elif id(node) not in sizes:
            sizes[id(node)] = 1  # until its children are counted (a node inside itself counts once)
            written += 1 + sum(not isinstance(child, dict | list) for child in children)
            todo.append((node, True))
            todo += [(child, False) for child in children if isinstance(child, dict | list)]
    return None


def _files_of(entry: Path) -> list[tuple[Path, Path]]:
    """(file, its path relative to the entry) for a file, or every *.yaml / *.yml under a folder."""
    if entry.is_file():
        return [(entry, Path(entry.name))]
    if entry.is_dir():
        found = [p for p in entry.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")]
        return [(p, p.relative_to(entry)) for p in sorted(found)]
    raise UsageError(f"{entry}: no such file or folder (phases.manifests.sources)")


def _typed(doc: Document) -> None:
    """The items of a typed List as the API answers it (a DeploymentList's items name no kind nor apiVersion)
    given the List's."""
    if doc.kind == "List":
        return
    for item in doc.data["items"]:
        if isinstance(item, dict):
            for position, (key, value) in enumerate((("apiVersion", doc.api_version), ("kind", doc.kind[:-4]))):
                if key not in item:
                    item.insert(position, key, value)


def _original(doc: Document) -> str:
    """The document as written (a Secret's values masked), for the diff."""
    return dump([masked(doc.data) if doc.kind == "Secret" else doc.data], doc.file.indent, False)


def load_sources(entries: list[Path], base: Path | None = None) -> list[SourceFile]:
    """Read every sources entry: files, folders (*.yaml, *.yml, recursively), each multi-document YAML.

    Files are named relative to base (the plan's folder) in findings and diffs.
    """
    files = []
    for entry in entries:
        for path, relative in _files_of(entry):
            try:
                # Bytes, not read_text: its universal newlines would hide a CRLF file.
                text = path.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path}: not readable as UTF-8 text: {exc}") from None
            name = str(path.relative_to(base)) if base and path.is_relative_to(base) else str(path)
            source = SourceFile(entry, path, relative, name, bom=text.startswith("\ufeff"))
            text = text.removeprefix("\ufeff")
            if "\r\n" in text:
                source.newline, text = "\r\n", text.replace("\r\n", "\n")
            source.explicit_start = text.lstrip().startswith("---")
            source.indent = guess_indent(text)
            try:
                loaded = parse(text, source.indent)
            except ReaderError as exc:  # a control character: it has a position, not a mark
                line = text.count("\n", 0, exc.position) + 1
                character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
                raise UsageError(f"{path}:{line}: not valid YAML: character {character} is not allowed") from None
            except YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                line = f":{mark.line + 1}" if mark is not None else ""
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise UsageError(f"{path}{line}: not valid YAML: {problem}") from None
            except RecursionError:
                raise UsageError(f"{path}: not valid YAML: nested too deeply") from None
            except (ValueError, KeyError, AttributeError) as exc:  # a scalar not of its tag: 2024-13-01, !!bool maybe
                line, why = _unbuildable(text, source.indent) or (None, f"{type(exc).__name__}: {exc}")
                raise UsageError(f"{path}{f':{line}' if line else ''}: not valid YAML: {why}") from None
            if (line := _aliased_too_much(loaded)) is not None:
                raise UsageError(f"{path}:{line}: its aliases expand to more than {MAX_ALIASED} values") from None
            for index, data in enumerate(loaded):
                doc = Document(source, index, data)
                if data is not None:
                    doc.original = _original(doc)
                if doc.is_list:
                    _typed(doc)
                    doc.items = [Document(source, index, item, item=i) for i, item in enumerate(data["items"])]
                    for item in doc.items:
                        item.original = _original(item)
                source.documents.append(doc)
            source.raw = text
            source.baseline = dump([d for d in loaded if d is not None], source.indent, source.explicit_start)
            files.append(source)
    return files
