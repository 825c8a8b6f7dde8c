"""Kubernetes manifests, mutated: `ferry manifests render PLAN --out OUT` renders and validates them (exit 0, or 1
when a check FAILs, the files written) or refuses the input in one line (exit 2, nothing written anywhere).

The documents are the examples' (workloads, CRDs, rendered Helm and kustomize output), one to three per file in
one or two files, mutated as trees (tests/fuzz/common.py) and reshaped as Kubernetes allows and forbids: `kind: List`
wrappers, another apiVersion, documents that are no mapping, huge documents; then as text (anchors, tabs, document
markers, garbage...).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import TEXT_MUTATIONS, TRIED, check_cli, dump_yaml, fuzz_settings, listing, mutated, write_bytes
from tests.support import ROOT

PLAN = """\
name: fuzz-manifests
source: {storage: ./src, registry: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml}
target:
  storage: ./dst
  profile: meta-compute
  registry: registry.meta.example/ai-training
  kubernetes_version: "1.30"
phases:
  manifests:
    sources: [manifests/]
    namespaces: {ml-train: ai-training-v4}
    storage_classes: {gp3: meta-flash}
    template_paths: {"jobset.x-k8s.io/JobSet": ["spec.replicatedJobs[].template.spec.template"]}
"""
DOCS: list[Any] = [
    doc
    for path in sorted((ROOT / "examples" / "manifests").rglob("*.y*ml"))
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
    if doc
]


def _reshaped(doc: Any, how: str) -> Any:
    if how == "list":
        return {"apiVersion": "v1", "kind": "List", "items": [doc, doc]}
    if how == "apiVersion" and isinstance(doc, dict):
        return {**doc, "apiVersion": "apps/v9"}
    if how == "no kind" and isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k != "kind"}
    if how == "huge":
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "huge", "namespace": "ml-train"},
            "data": {f"key-{i}": "v" * 100 for i in range(1000)},
        }
    if how == "scalar":
        return "just a string"
    if how == "sequence":
        return [doc]
    return doc


@st.composite
def manifest_files(draw: st.DrawFn) -> tuple[list[bytes], str]:
    files, hows = [], []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
        docs = [draw(st.sampled_from(DOCS)) for _ in range(draw(st.integers(1, 3)))]
        at = draw(st.integers(0, len(docs) - 1))
        docs[at] = draw(mutated(docs[at], max_mutations=2)) if draw(st.booleans()) else docs[at]
        shape = draw(st.sampled_from(["as is"] * 6 + ["list", "apiVersion", "no kind", "huge", "scalar", "sequence"]))
        docs[at] = _reshaped(docs[at], shape)
        style = draw(st.sampled_from(["block", "block", "flow", "json"]))
        text = "---\n".join(dump_yaml(doc, style).rstrip("\n") + "\n" for doc in docs)
        mutation = draw(st.sampled_from(["none"] * 8 + list(TEXT_MUTATIONS)))
        data = TEXT_MUTATIONS[mutation](text, draw)
        files.append(data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data)
        hows.append(f"{shape}, {style}, {mutation}")
    return files, "; ".join(hows)


@pytest.fixture(scope="module")
def workroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-manifests")


def _render(root: Path, files: list[bytes], what: str) -> tuple[int, str, str]:
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        for i, data in enumerate(files):
            write_bytes(work / "manifests" / f"file-{i}.yaml", data)
        plan = write_bytes(work / "migration.yaml", PLAN.encode())
        inputs = listing(work / "manifests")
        out = work / "out"
        code, stdout, stderr = check_cli(
            "manifests",
            ("manifests", "render", str(plan), "--out", str(out)),
            unchanged=(work,),
            ok_codes=(0, 1),
            what=what,
        )
        assert listing(work / "manifests") == inputs, f"an input changed: {what}"
        if code in (0, 1):
            assert sorted(p.name for p in out.iterdir()) == [f"file-{i}.yaml" for i in range(len(files))], what
        if code == 1:
            assert ": FAIL" in stdout, what
        return code, stdout, stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_examples_render(workroot: Path) -> None:
    text = "---\n".join(yaml.safe_dump(doc) for doc in DOCS[:5])
    assert _render(workroot, [text.encode()], "the first examples")[0] in (0, 1)


CONFIG_MAP = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
BOMB = b"".join(b"b%d: &b%d [%s]\n" % (i, i, b", ".join([b"*b%d" % (i - 1)] * 10)) for i in range(1, 8))


# Regressions this fuzzing found: (the file, what the one line says). Each was an internal error (a control
# character's message over two lines, an IndexError for a string the file ends in, a RecursionError, a ValueError of
# an integer of 5000 digits, a kind with a "/" taken for a Kubernetes version the schemas lack) or a hang (an alias
# bomb).
REGRESSIONS = [
    (CONFIG_MAP + b"data: {a: \x07}\n", "file-0.yaml:4: not valid YAML: character #x0007 is not allowed"),
    (CONFIG_MAP + b'data: {a: "x', "file-0.yaml:4: not valid YAML: found unexpected end of stream"),
    (CONFIG_MAP + b"data: " + b"[" * 1000 + b"]" * 1000 + b"\n", "file-0.yaml: not valid YAML: nested too deeply"),
    (CONFIG_MAP + b"data: {a: " + b"9" * 5000 + b"}\n", "file-0.yaml:4: not valid YAML: '9999"),
    (
        CONFIG_MAP + b"data: {a: !!timestamp x}\n",
        'file-0.yaml:4: not valid YAML: failed to construct timestamp from "x"',
    ),
    (CONFIG_MAP + b"data: {a: !!bool maybe}\n", "file-0.yaml:4: not valid YAML: 'maybe' is not a valid bool"),
    (CONFIG_MAP + b"data: !!set 5\n", "file-0.yaml:4: not valid YAML: '5' is not a valid set"),
    (CONFIG_MAP + b"b0: &b0 [x, x, x, x, x, x, x, x, x, x]\n" + BOMB, "aliases expand to more than 100000 values"),
]


@pytest.mark.parametrize(("data", "says"), REGRESSIONS, ids=[str(i) for i in range(len(REGRESSIONS))])
def test_what_the_fuzzing_found_is_one_line(workroot: Path, data: bytes, says: str) -> None:
    code, _, err = _render(workroot, [data], f"{data[:300]!r}")
    assert code == 2 and says in err, err


def test_a_kind_with_a_slash_is_a_kind_without_a_schema(workroot: Path) -> None:
    code, out, err = _render(workroot, [CONFIG_MAP.replace(b"ConfigMap", b"a/b")], "kind a/b")
    assert code == 0 and "manifests.schema: WARN" in out, out + err


@given(case=manifest_files())
@fuzz_settings(120)
def test_mutated_manifests_render_or_are_one_line(workroot: Path, case: tuple[list[bytes], str]) -> None:
    files, how = case
    _render(workroot, files, f"{how}:\n" + "\n".join(f"{data[:2000]!r}" for data in files))


def test_inputs_were_counted() -> None:
    assert TRIED["manifests"] > 0
