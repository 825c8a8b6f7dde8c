"""The byte-exact splice: the lines ruamel.yaml's writing changed, carried into the text as it was read."""

from __future__ import annotations

import difflib
from collections.abc import Iterator


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _shifted(line: str, shift: int) -> str | None:
    depth = _indent_of(line) + shift
    return None if depth < 0 else (" " * depth + line.lstrip(" ") if line.strip() else line)


def _changes(old: list[str], new: list[str]) -> Iterator[tuple[int, int, int, int]]:
    """The ranges of difflib's opcodes, equal ones left out, between two writings of the same documents, matched
    document by document: one matcher over a whole rendered chart of thousands of alike lines takes minutes."""
    starts_old = [i for i, line in enumerate(old) if line == "---"]
    starts_new = [j for j, line in enumerate(new) if line == "---"]
    if len(starts_old) != len(starts_new):
        starts_old, starts_new = [], []
    bounds = zip([0, *starts_old], [*starts_old, len(old)], [0, *starts_new], [*starts_new, len(new)], strict=True)
    for a, b, c, d in bounds:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old[a:b], new[c:d], False).get_opcodes():
            if tag != "equal":
                yield a + i1, a + i2, c + j1, c + j2


def splice(raw: str, before: str, after: str) -> str | None:
    """raw with the line changes that turn before into after (both ruamel.yaml's writing), each placed at the raw
    line that before's line came from and indented as raw is there; None where a change has no such line.

    ruamel.yaml writes every sequence of a file with one indentation, drops comment-only documents and end
    markers and moves a comment after `---`: splicing leaves all of that as the team wrote it.
    """
    ours = (raw if raw.endswith("\n") else raw + "\n").split("\n")
    old, new = before.split("\n"), after.split("\n")
    where: dict[int, int] = {}
    shapes = difflib.SequenceMatcher(
        None, [" ".join(s.split()) for s in ours], [" ".join(s.split()) for s in old], False
    )
    for tag, i1, i2, j1, _ in shapes.get_opcodes():
        if tag == "equal":
            where.update({j1 + k: i1 + k for k in range(i2 - i1)})
    edits: list[tuple[int, int, list[str]]] = []
    for i1, i2, j1, j2 in _changes(old, new):
        lines: list[str | None]
        if i1 < i2:
            spots = [where.get(i) for i in range(i1, i2)]
            if spots[0] is None or spots != list(range(spots[0], spots[0] + len(spots))):
                return None
            start, end = spots[0], spots[0] + len(spots)
            if j2 - j1 == i2 - i1:
                lines = [
                    _shifted(new[j1 + k], _indent_of(ours[start + k]) - _indent_of(old[i1 + k])) for k in range(i2 - i1)
                ]
            else:
                lines = [_shifted(line, _indent_of(ours[start]) - _indent_of(old[i1])) for line in new[j1:j2]]
        else:
            # Inserted lines go after the raw line of the one before them (else before the raw line of the one after
            # them), shifted as the nearest raw line above them that is no deeper (their parent or a sibling) is.
            depth = _indent_of(new[j1])
            parent = next(
                (k for k in range(i1 - 1, -1, -1) if k in where and old[k].strip() and _indent_of(old[k]) <= depth),
                None,
            )
            if i1 - 1 in where:
                start = end = where[i1 - 1] + 1
            elif i1 in where:
                start = end = where[i1]
            else:
                return None
            if parent is None:
                return None
            lines = [_shifted(line, _indent_of(ours[where[parent]]) - _indent_of(old[parent])) for line in new[j1:j2]]
        if None in lines:
            return None
        edits.append((start, end, [line for line in lines if line is not None]))
    for start, end, lines in reversed(edits):
        ours[start:end] = lines
    return "\n".join(ours)
