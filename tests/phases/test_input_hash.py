"""The input hash: what makes a committed phase "done". Hashes computed at commit 4138b9e are pinned byte for
byte, so no user's next run redoes a committed phase because the code moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferry.phases.base import open_phase
from ferry.plan import load_plan

# The hash covers absolute paths of export files: the pins were computed with the plans in this folder. The
# test writes them to its own temporary folder and names the files as if they were there (nothing is written here).
PINNED_AT = "/tmp/ferry-input-hash-pin"

PLANS = {
    "data_sync_defaults": """\
name: pin-defaults
source: {storage: "s3://source-bucket/datasets"}
target: {storage: "s3://target-bucket/datasets"}
phases:
  data_sync: {}
""",
    "data_sync_tuned": """\
name: pin-tuned
source: {storage: "s3://source-bucket/datasets"}
target: {profile: meta-compute, storage: "meta://dest-store/datasets"}
profiles:
  meta:
    type: s3
    endpoint_url: http://127.0.0.1:9
    region: eu-frankfurt-1
    credentials: {access_key_id_env: META_KEY, secret_access_key_env: META_SECRET}
phases:
  data_sync:
    threads: 64
    part_size: 16M
    bwlimit: 50M
    include: ["*.tar"]
    delete: true
    shards: [train/, val/]
gates:
  data_sync: {deep_verify: true, allow_extra: false}
strict: true
""",
    "iam_exports": """\
name: pin-iam
source:
  storage: "s3://source-bucket/datasets"
  iam: {ldif: groups.ldif, azure_export: azure.json}
target:
  profile: meta-compute
  storage: "s3://target-bucket/datasets"
  cluster: {context: meta, namespace: ml-training}
phases:
  iam:
    ldap_groups: {ml-engineers: write}
    overrides: {ldap:group/data-readers: compute-viewer}
gates:
  iam: {min_coverage: 0.8}
""",
}
FILES = {
    "groups.ldif": "dn: cn=ml-engineers,ou=groups,dc=corp\ncn: ml-engineers\nobjectClass: posixGroup\n"
    "memberUid: alice\n",
    "azure.json": "[]\n",
}
# Computed at commit 4138b9e (LoadedPlan.input_hash) from exactly these files. The iam phase's moved
# on purpose when it started evaluating effective permissions (its settings and gate grew): a mapping committed
# under the old rules is mapped again; this pin keeps it from moving by accident from now on.
PINNED = {
    "data_sync_defaults": ("data_sync", "d037ffde67dd6e6d"),
    "data_sync_tuned": ("data_sync", "e616da0a46af52c7"),
    "iam_exports": ("iam", "229fd693971e2f63"),
}


@pytest.fixture
def pinned_dir(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    for name, text in PLANS.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def digest(path: Path, phase: str) -> str:
    return open_phase(load_plan(path), phase).input_hash()


@pytest.mark.parametrize("name", sorted(PINNED))
def test_hashes_of_ferry_0_1_are_kept(pinned_dir: Path, name: str) -> None:
    phase_name, expected = PINNED[name]
    phase = open_phase(load_plan(pinned_dir / f"{name}.yaml"), phase_name)
    here = json.dumps(phase.inputs())
    if phase_name == "iam":
        assert str(pinned_dir) in here, "the export files are named by their absolute paths"
    phase.inputs = lambda: json.loads(here.replace(str(pinned_dir), PINNED_AT))
    assert phase.input_hash() == expected


def test_what_the_phase_depends_on_changes_the_hash_and_nothing_else_does(pinned_dir: Path) -> None:
    plan = pinned_dir / "data_sync_tuned.yaml"
    base = digest(plan, "data_sync")
    text = plan.read_text()
    for old, new, changes in [
        ("threads: 64", "threads: 32", True),  # a setting
        ("deep_verify: true", "deep_verify: false", True),  # its gate
        ("strict: true", "strict: false", True),
        ("dest-store/datasets", "dest-store/other", True),  # where it writes
        ("endpoint_url: http://127.0.0.1:9", "endpoint_url: http://127.0.0.1:10", True),  # a profile
        ("strict: true", "strict: true\nschedule: '0 2 * * *'", False),  # when it runs is not what it does
        ("strict: true", "strict: true\napprove_before: [data_sync]", False),
    ]:
        plan.write_text(text.replace(old, new))
        assert (digest(plan, "data_sync") != base) is changes, (old, new)
    plan.write_text(text)


def test_a_knob_added_since_ferry_0_1_changes_the_hash_only_off_its_default(pinned_dir: Path) -> None:
    plan = pinned_dir / "data_sync_tuned.yaml"
    base = digest(plan, "data_sync")
    text = plan.read_text()
    for value, changes in (("1G", False), ("1024M", False), ("512M", True)):  # copy_threshold's default is 1 GiB
        plan.write_text(text.replace("    threads: 64\n", f"    threads: 64\n    copy_threshold: {value}\n"))
        assert (digest(plan, "data_sync") != base) is changes, value
    plan.write_text(text)


def test_a_changed_export_file_changes_the_iam_hash(pinned_dir: Path) -> None:
    plan = pinned_dir / "iam_exports.yaml"
    before = digest(plan, "iam")
    (pinned_dir / "groups.ldif").write_text(FILES["groups.ldif"] + "memberUid: bob\n")
    assert digest(plan, "iam") != before
