"""Sources read and written back: files and folders in order, the layout and every byte that no rule changes kept,
comments included; input that is not UTF-8 text refused in one line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ferry.errors import UsageError
from ferry.manifests.model import Rules
from ferry.manifests.rules import transform
from ferry.manifests.source import guess_indent, load_sources


def test_comments_keep_their_bytes_and_unchanged_lines_stay(rendered: tuple[dict, Any]) -> None:
    _, rendering = rendered
    for file in rendering.files:
        source = file.path.read_text(encoding="utf-8").splitlines()
        output = file.text().splitlines()
        for line in source:
            if "#" not in line:
                continue
            comment = line[line.index("#") :]
            assert any(out.endswith(comment) for out in output), (file.relative, line)
            if line.lstrip().startswith("#"):
                assert line in output, (file.relative, line)
        # A line whose value no rule touched is written byte for byte.
        untouched = [
            line
            for line in source
            if not re.search(
                r"image:|namespace:|storageClassName:|interconnect|name: ml-train|managed-by: Helm|^---$"
                r"|deployment.kubernetes.io/revision|^  annotations:$",
                line,
            )
        ]
        assert [line for line in untouched if line not in output] == [], file.relative


def test_sources_are_files_and_folders_in_order(tmp_path: Path) -> None:
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "a" / "deep" / "z.yml").write_text("kind: A\n---\nkind: B\n", encoding="utf-8")
    (tmp_path / "a" / "b.yaml").write_text("kind: C\n", encoding="utf-8")
    (tmp_path / "a" / "notes.txt").write_text("not yaml: [", encoding="utf-8")
    (tmp_path / "one.yaml").write_text("kind: D\n", encoding="utf-8")
    files = load_sources([tmp_path / "a", tmp_path / "one.yaml"], tmp_path)
    assert [(str(f.relative), f.name, [d.data["kind"] for d in f.documents]) for f in files] == [
        ("b.yaml", "a/b.yaml", ["C"]),
        ("deep/z.yml", "a/deep/z.yml", ["A", "B"]),
        ("one.yaml", "one.yaml", ["D"]),
    ]
    with pytest.raises(UsageError, match=r"missing\.yaml: no such file or folder"):
        load_sources([tmp_path / "missing.yaml"])
    (tmp_path / "bad.yaml").write_text("kind: A\nmetadata: {name: [\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"bad\.yaml:3: not valid YAML"):
        load_sources([tmp_path / "bad.yaml"])


@pytest.mark.parametrize(
    ("text", "indent"),
    [
        ("a:\n  b:\n  - c: 1\n", (2, 2, 0)),
        ("a:\n  b:\n    - c: 1\n", (2, 4, 2)),
        ("a:\n    b:\n        - c\n", (4, 6, 4)),
    ],
)
def test_output_keeps_the_indentation_of_its_input(text: str, indent: tuple[int, int, int], tmp_path: Path) -> None:
    assert guess_indent(text) == indent
    (tmp_path / "f.yaml").write_text(text, encoding="utf-8")
    assert load_sources([tmp_path / "f.yaml"])[0].text() == text


CM = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ml-train\ndata:\n  k: v\n"
CM_OUT = CM.replace(b"ml-train", b"x").replace(
    b"\ndata:", b"\n  labels:\n    ferry.io/plan: p\n    app.kubernetes.io/managed-by: ferry\ndata:"
)


@pytest.mark.parametrize(
    ("raw", "written"),
    [
        # A Windows editor's file keeps its CRLF line ends, a BOM stays, an empty file stays empty.
        (CM.replace(b"\n", b"\r\n"), CM_OUT.replace(b"\n", b"\r\n")),
        (b"\xef\xbb\xbf" + CM, b"\xef\xbb\xbf" + CM_OUT),
        (b"", b""),
        # A tab between tokens (kubectl reads it; ruamel.yaml alone refuses it) is kept, and so is its line.
        (CM.replace(b"name: c", b"name: c\t# tab"), CM_OUT.replace(b"name: c", b"name: c\t# tab")),
        (CM.replace(b"k: v", b"k:\tv\t\t# tabs"), CM_OUT.replace(b"k: v", b"k:\tv\t\t# tabs")),
        # `labels: null` has no line the new labels can go under: ruamel.yaml's writing of the file is kept.
        (CM.replace(b"\ndata:", b"\n  labels: null\ndata:"), CM_OUT),
        # kubectl get -o yaml's end marker, comment-only and empty documents are written as they were.
        (
            b"# Source: c/templates/x.yaml\n---\n---\n" + CM + b"...\n",
            b"# Source: c/templates/x.yaml\n---\n---\n" + CM_OUT + b"...\n",
        ),
    ],
)
def test_written_files_keep_bytes_no_rule_changes(raw: bytes, written: bytes, tmp_path: Path) -> None:
    (tmp_path / "in" / "f.yaml").parent.mkdir()
    (tmp_path / "in" / "f.yaml").write_bytes(raw)
    rendering = transform(load_sources([tmp_path / "in"]), Rules(plan="p", namespaces={"ml-train": "x"}))
    rendering.write(tmp_path / "out")
    assert (tmp_path / "out" / "f.yaml").read_bytes() == written


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes(b"kind: ConfigMap\nmetadata: {name: caf\xe9}\n")
    with pytest.raises(UsageError, match=r"latin1\.yaml: not readable as UTF-8 text"):
        load_sources([tmp_path / "latin1.yaml"])
