"""The README and docs/ run as written: each plan snippet in them, merged into the demo plan, is a valid plan,
the iam example passes its own gate on the shipped example exports, and the manifests example renders valid
objects."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from ferry.audit import AuditFolder
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from ferry.results import Status, gate_status
from tests.support import ROOT

DEMO = ROOT / "examples" / "demo" / "migration.yaml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPETS = [
    yaml.safe_load(block)
    for page in PAGES
    for block in re.findall(r"^ *```yaml\n(.*?)^ *```", page.read_text(), re.S | re.M)
]


def merged(base: dict[str, Any], snippet: dict[str, Any]) -> dict[str, Any]:
    """base with each of the snippet's sections (phases.iam, source.iam, gates.iam, profiles.meta...) as written."""
    out = dict(base)
    for key, sections in snippet.items():
        out[key] = {**out.get(key, {}), **sections} if isinstance(sections, dict) else sections
    return out


def demo_plan(folder: Path) -> dict[str, Any]:
    """The demo plan, its paths made absolute, beside a copy of the example exports (the README's paths)."""
    shutil.copytree(ROOT / "examples" / "iam", folder / "iam")
    shutil.copytree(ROOT / "examples" / "manifests", folder / "manifests")
    plan = yaml.safe_load(DEMO.read_text())
    plan["source"]["storage"] = str(folder / "data")
    plan["state_dir"] = str(folder / ".ferry")
    return plan


def test_the_readme_has_its_plan_snippets() -> None:
    assert len(SNIPPETS) >= 2 and all(isinstance(s, dict) for s in SNIPPETS)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[",".join(s) for s in SNIPPETS])
def test_each_readme_snippet_is_part_of_a_valid_plan(snippet, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FERRY_DEMO_S3_ENDPOINT", "http://127.0.0.1:9")
    path = tmp_path / "migration.yaml"
    path.write_text(yaml.safe_dump(merged(demo_plan(tmp_path), snippet), sort_keys=False))
    loaded = load_plan(path)
    if "iam" in snippet.get("phases", {}):
        # The example as shipped passes its own gate (a WARN is allowed: widening is reported, not refused).
        phase = open_phase(loaded, "iam")
        audit = AuditFolder(tmp_path / "audit")
        phase.run("run", audit, Reporter())
        results = phase.gate(audit)
        assert gate_status(results, loaded.plan.strict) != Status.FAIL, [r.to_dict() for r in results]
    if "manifests" in snippet.get("phases", {}):
        # The example manifests render, and every object is valid for the plan's Kubernetes version.
        phase = open_phase(loaded, "manifests")
        schema, _, warnings = phase.validate(phase.render())
        assert schema.status == Status.WARN and schema.measured["errors"] == 0, schema.evidence
        assert warnings.status == Status.WARN
