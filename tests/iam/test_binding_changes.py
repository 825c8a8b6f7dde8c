"""iam's change set: per subject, the bindings a run would add, change and remove against those published."""

from __future__ import annotations

import yaml

from ferry.iam.model import binding_changes
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from tests.flows.test_iam_phase import write_two_phase_plan


def _binding(role: str, *subjects: tuple[str, str]) -> dict:
    return {
        "kind": "RoleBinding",
        "roleRef": {"name": role},
        "subjects": [{"kind": kind, "name": name} for kind, name in subjects],
    }


def test_each_subject_is_added_changed_or_removed() -> None:
    published = [_binding("view", ("Group", "analysts"), ("User", "ana")), _binding("edit", ("User", "bo"))]
    rendered = [
        _binding("view", ("Group", "analysts")),
        _binding("admin", ("User", "bo")),
        _binding("edit", ("User", "cy")),
    ]
    assert binding_changes(rendered, published) == {
        "add": ["User/cy (edit)"],
        "change": ["User/bo (edit -> admin)"],
        "remove": ["User/ana (view)"],
    }
    assert binding_changes(rendered, rendered) == {"add": [], "change": [], "remove": []}


def test_the_phase_says_them_against_what_it_published_and_publishes_nothing(tmp_path) -> None:
    plan = write_two_phase_plan(tmp_path, "previewed")
    phase = open_phase(load_plan(plan), "iam")
    first = phase.changes().text
    assert "Bindings nothing published yet: add " in first
    assert not phase.published().exists(), "a preview publishes nothing"
    added = first.split("add ", 1)[1].split(": ", 1)[1].rstrip(".").split(", ")
    subject = added[0].split(" (")[0]
    kind, name = subject.split("/")
    phase.published().parent.mkdir(parents=True)
    earlier = [_binding("cluster-admin", (kind, name)), _binding("view", ("User", "gone"))]
    phase.published().write_text(yaml.safe_dump_all(earlier))
    said = phase.changes().text
    assert f"change 1: {subject} (cluster-admin -> " in said and "remove 1: User/gone (view)" in said
