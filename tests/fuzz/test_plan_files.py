"""Plan files, mutated: `ferry plan validate --offline` and `ferry plan show --no-preflight` answer every one with
a verdict (valid, exit 0) or one line per problem (exit 2), never a traceback, and write nothing.

The plans mutated are the demo's and the README's snippets (iam, images, manifests, go-live), each valid as it
stands; the mutations are those of tests/fuzz/common.py, on the parsed plan and then on its text.
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

from tests.fuzz.common import TRIED, check_cli, fuzz_settings, mutated, nodes, text_of, write_bytes
from tests.support import ROOT

README_PLANS = {
    "iam": """\
name: readme-iam
source:
  storage: ./src
  iam:
    aws: {export: iam/aws-authorization-details.json}
    azure_export: iam/azure-role-assignments.json
    azure_role_definitions: iam/azure-role-definitions.json
    azure_group_members: iam/azure-group-members.json
    ldif: iam/groups.ldif
target: {storage: ./dst, profile: meta-compute}
phases:
  iam:
    namespace: ml-training
    ldap_groups: {ml-engineers: write, data-readers: read, gpu-oncall: admin}
    assume_conditions: {aws:MultiFactorAuthPresent: true}
    overrides: {aws:role/ci-runner: compute-operator, aws:role/build-bot: none,
                azure:service/platform-automation: compute-viewer}
    subjects: {aws:user/bob: bob@corp.example.com}
gates:
  iam: {min_coverage: 0.9, max_ambiguous: 0, max_escalation: 0, allow_widening: true}
""",
    "images": """\
name: readme-images
source:
  storage: ./src
  registry: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml
target:
  storage: ./dst
  profile: meta-compute
  registry: registry.meta.example/ai-training
phases:
  images:
    dockerfiles:
      - {path: images/trainer/Dockerfile, image: "trainer:2024.06"}
    copy: ["tokenizer:1.0", "eval:*"]
    base_images: [{match: "nvcr.io/nvidia/tritonserver:*", to: "meta-cloud-registry.io/base/triton-meta:2026"}]
    builder: buildah
    platforms: [linux/amd64]
    insecure_registries: ["registry.build.internal:5000"]
    auth:
      registry.meta.example: {username_env: META_REGISTRY_USER, password_secret: meta-registry-password}
gates:
  images: {allow_unmapped_base: false}
""",
    "manifests": """\
name: readme-manifests
source: {storage: ./src}
target:
  storage: ./dst
  profile: meta-compute
  cluster: {context: meta-eu, namespace: ai-training-v4}
  kubernetes_version: "1.30"
phases:
  manifests:
    sources: [manifests/k8s/, manifests/rendered/chart.yaml]
    images: {"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/": "registry.meta.example/ai-training/"}
    storage_classes: {gp3: meta-flash}
    namespaces: {ml-train: ai-training-v4}
    template_paths: {"jobset.x-k8s.io/JobSet": ["spec.replicatedJobs[].template.spec.template"]}
gates:
  manifests: {max_warnings: 40, rollout_timeout_s: 600}
""",
    "golive": """\
name: readme-golive
source: {storage: ./src}
target:
  storage: s3://bucket/ckpt
  cluster: {context: meta-eu, namespace: ai-training-v4, kubeconfig: kube/config}
phases:
  golive:
    latency: {server: "10.0.4.12:7447", samples: 20000, protocol: tcp, jobs: true}
    checkpoint: {size: 8G, shards: 64, prefix: golive/ckpt/}
    autoscaling: {deployment: llama-serve, replicas: 8, timeout_s: 600}
    nodes: {driver: 550.54.15}
    workloads: [{name: llama-405b-pretrain, params: 405e9, nodes: 32, virt_overhead: 0.14, hourly_cost_delta: 6.5}]
gates:
  golive: {p99_us: 50, checkpoint_write_gb_per_s: 2.0, checkpoint_read_gb_per_s: 4.0, scale_up_s: 300}
approve_before: [golive]
""",
    "sync": """\
name: readme-sync
source: {storage: s3://source-bucket/datasets}
target: {storage: "meta://dest-store/datasets", profile: generic-k8s}
profiles:
  meta:
    type: s3
    endpoint_url: https://objectstore.example.internal
    region: eu-frankfurt-1
    credentials: {access_key_id_env: META_KEY_ID, secret_access_key_env: META_SECRET}
phases:
  data_sync: {threads: 8, shards: [a/, b/]}
gates:
  data_sync: {allow_extra: true}
retries: {attempts: 1, delay_s: 0}
schedule: "0 2 * * *"
strict: true
state_dir: .ferry
""",
}
DEMO = (ROOT / "examples" / "demo" / "migration.yaml").read_text(encoding="utf-8")
BASES: dict[str, Any] = {"demo": yaml.safe_load(DEMO), **{k: yaml.safe_load(v) for k, v in README_PLANS.items()}}
# Maps whose keys are the user's (aliases, principals, prefixes...): an unknown key there is no error.
FREE_KEYS = {
    ("profiles",),
    ("phases", "iam", "ldap_groups"),
    ("phases", "iam", "azure_roles"),
    ("phases", "iam", "overrides"),
    ("phases", "iam", "subjects"),
    ("phases", "iam", "assume_conditions"),
    ("phases", "manifests", "images"),
    ("phases", "manifests", "storage_classes"),
    ("phases", "manifests", "namespaces"),
    ("phases", "manifests", "template_paths"),
    ("phases", "images", "auth"),
}
# Text mutations after which no plan is valid: several documents, no mapping, a key the top level does not have.
INVALID_TEXT = (
    "two documents",
    "non-mapping top level",
    "utf-16",
    "empty",
    "recursive alias",
    "alias bomb",
    "merge key",
    "bad merge",
    "anchor and alias",
    "deep flow nesting",
    "deep block nesting",
    "huge scalar",
    "duplicate top-level key",
    "bad timestamp",
)


@pytest.fixture(scope="module")
def workroot(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fuzz-plans")
    with pytest.MonkeyPatch.context() as patch:
        # The demo plan reads its endpoint from the environment; the README's names credential variables.
        patch.setenv("FERRY_DEMO_S3_ENDPOINT", "http://127.0.0.1:9")
        patch.delenv("FERRY_FUZZ_UNSET_VARIABLE", raising=False)
        yield root


def _try_plan(root: Path, data: bytes, what: str, must_fail: bool) -> str:
    """Both read-only commands on the plan, in a folder of its own (nothing may appear there); validate's stderr."""
    work = Path(tempfile.mkdtemp(dir=root))
    said = ""
    try:
        plan = write_bytes(work / "examples" / "demo" / "migration.yaml", data)
        for args in (("plan", "validate", "--offline", str(plan)), ("plan", "show", str(plan), "--no-preflight")):
            validate = args[1] == "validate"  # one line per problem; show says the first
            code, _, err = check_cli(
                "plan",
                args,
                unchanged=(work,),
                must_fail=must_fail,
                problem_lines=validate,
                read_only=True,
                what=what,
                same_input=not validate,
            )
            must_fail = must_fail or code == 2  # show refuses what validate refused
            said = said or err
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return said


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_base_plans_are_valid(workroot: Path, name: str) -> None:
    work = Path(tempfile.mkdtemp(dir=workroot))
    plan = write_bytes(work / "migration.yaml", yaml.safe_dump(BASES[name], sort_keys=False).encode())
    code, out, err = check_cli("plan", ("plan", "validate", "--offline", str(plan)), what=name)
    assert code == 0, err


plans = st.sampled_from(sorted(BASES)).flatmap(lambda name: mutated(BASES[name]).map(lambda tree: (name, tree)))


@st.composite
def plan_texts(draw: st.DrawFn) -> tuple[bytes, str, bool]:
    name, tree = draw(plans)
    data, how = draw(text_of(tree))
    return data, f"{name} mutated, {how}", how.endswith(INVALID_TEXT)


MINIMAL = "name: x\nsource: {storage: ./s}\ntarget: {storage: ./d}\nphases: {data_sync: {}}\n"
BOMB = "".join(f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]\n" for i in range(1, 8))


# Regressions this fuzzing found: (the plan, what the one line says). Each was an internal error (a RecursionError
# of a recursive structure, a ValueError of an integer of 5000 digits or of a date with month 13), a hang (an alias
# bomb), or a plan taken as valid although a key was given twice (PyYAML keeps the last one silently).
REGRESSIONS = [
    (MINIMAL.replace("source: {", "source: &a {x: *a, "), "plan.yaml:2: an alias in this anchored node refers back"),
    (MINIMAL + "loop: &l [*l]\n", "plan.yaml:5: an alias in this anchored node refers back to it"),
    (MINIMAL + "b0: &b0 [x, x, x, x, x, x, x, x, x, x]\n" + BOMB, "its aliases expand to more than 100000 values"),
    (MINIMAL + "name: y\n", "plan.yaml:5: name: given twice (first at line 1)"),
    (MINIMAL.replace("{}}", "{threads: 8, threads: 9}}"), "plan.yaml:4: threads: given twice (first at line 4)"),
    (MINIMAL.replace("data_sync: {}", "data_sync: {threads: " + "9" * 5000 + "}"), "plan.yaml:4: not valid YAML: '99"),
    (MINIMAL + "when: 2024-13-01\n", "plan.yaml:5: not valid YAML: '2024-13-01' is not a valid timestamp: month"),
    (MINIMAL.replace("name: x", "name: !!timestamp x"), "plan.yaml:1: not valid YAML: 'x' is not a valid timestamp"),
    (MINIMAL.replace("name: x", "name: !!bool maybe"), "plan.yaml:1: not valid YAML: 'maybe' is not a valid bool"),
    (MINIMAL.replace("phases:", '"x\\ny": 1\nphases:'), "plan.yaml:4: 'x\\ny': unknown field"),
    # Paths no file system holds: an OSError (file name too long) or a ValueError (embedded null byte) before.
    (MINIMAL.replace("{storage: ./d}", "{storage: ./d, profile: " + "z" * 400 + "}"), "is not built in"),
    (MINIMAL + 'state_dir: "a\\0b"\n', "plan.yaml:5: state_dir: 'a\\x00b': a path holds no NUL character"),
    (MINIMAL + "state_dir: " + "x" * 300 + "\n", "plan.yaml:5: state_dir: 'xxxxxxxxxx"),
    (MINIMAL.replace("./s}", './s, iam: {ldif: "a\\0b"}}'), "plan.yaml:2: source.iam.ldif: 'a\\x00b': a path holds"),
    (MINIMAL.replace("{data_sync: {}}", '{manifests: {sources: ["m\\0"]}}'), "phases.manifests.sources.0: 'm\\x00'"),
]


@pytest.mark.parametrize(("text", "says"), REGRESSIONS, ids=[str(i) for i in range(len(REGRESSIONS))])
def test_what_the_fuzzing_found_is_one_line(workroot: Path, text: str, says: str) -> None:
    plan = write_bytes(Path(tempfile.mkdtemp(dir=workroot)) / "plan.yaml", text.encode())
    for args in (("plan", "validate", "--offline", str(plan)), ("plan", "show", str(plan), "--no-preflight")):
        code, _, err = check_cli("plan", args, must_fail=True, what=text[:300], same_input=args[1] == "show")
        assert says in err, err


@given(case=plan_texts())
@fuzz_settings(180)
def test_mutated_plans_are_one_line_per_problem(workroot: Path, case: tuple[bytes, str, bool]) -> None:
    data, what, must_fail = case
    _try_plan(workroot, data, f"{what}:\n{data[:3000]!r}", must_fail)


@st.composite
def unknown_keys(draw: st.DrawFn) -> tuple[bytes, str]:
    """A base plan with one key added to a mapping whose keys ferry defines (so it is unknown: an error)."""
    name = draw(st.sampled_from(sorted(BASES)))
    tree = BASES[name]
    strict = [p for p in nodes(tree) if isinstance(_at(tree, p), dict) and p not in FREE_KEYS and not _free(p)]
    path = draw(st.sampled_from(strict))
    key = draw(st.sampled_from(["colour", "x\ny", "ünï", "💥", "a" * 300, "${X}", "__class__", "Name", "name "]))
    changed = yaml.safe_load(yaml.safe_dump(tree))
    _at(changed, path)[key] = draw(st.sampled_from([None, 1, "x", [], {}]))
    style = draw(st.sampled_from([False, True]))
    return yaml.safe_dump(changed, sort_keys=False, allow_unicode=True, default_flow_style=style).encode(), name


def _at(tree: Any, path: tuple) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _free(path: tuple) -> bool:
    """Under a map of the user's keys (a profile's own fields are ferry's again)."""
    return any(path[: len(free)] == free and len(path) > len(free) and free != ("profiles",) for free in FREE_KEYS)


@given(case=unknown_keys())
@fuzz_settings(60)
def test_an_unknown_key_is_refused_at_its_line(workroot: Path, case: tuple[bytes, str]) -> None:
    data, name = case
    said = _try_plan(workroot, data, f"{name} with an unknown key:\n{data!r}", must_fail=True)
    assert "unknown field" in said, said


def test_inputs_were_counted() -> None:
    assert TRIED["plan"] > 0
