"""The plan file: a valid plan loads; each malformed one gives one clear line and exit code 2."""

from __future__ import annotations

import pytest

from ferry.phases.iam import namespace
from ferry.plan import load_plan
from tests.support import run_cli

VALID = """\
name: demo-migration
source:
  storage: ./data
target:
  profile: meta-compute
  storage: meta://dest-store/datasets
profiles:
  meta:
    type: s3
    endpoint_url: http://127.0.0.1:9
    credentials: {access_key_id_env: META_KEY, secret_access_key_env: META_SECRET}
phases:
  data_sync:
    threads: 64
    part_size: 16M
    shards: [train/, val/]
gates:
  data_sync: {deep_verify: false}
approve_before: [data_sync]
schedule: "0 2 * * *"
retries: {attempts: 2, delay_s: 5}
"""


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # VALID names these variables; `plan validate` checks they are set.
    monkeypatch.setenv("META_KEY", "key-id")
    monkeypatch.setenv("META_SECRET", "secret")


def test_valid_plan_loads_and_validates(tmp_path) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(VALID)
    loaded = load_plan(path)
    assert loaded.plan.enabled_phases() == ["data_sync"]
    assert loaded.plan.phases.data_sync.part_size == 16 << 20
    assert loaded.target.pod_annotations == {
        "compute.meta.com/rdma-fabric": "high-throughput",
        "compute.meta.com/interconnect": "roce-v2",
    }
    assert loaded.storage("source") == str(tmp_path / "data")
    code, out, _ = run_cli("plan", "validate", str(path))
    assert code == 0 and "valid plan 'demo-migration'" in out


def test_env_references_resolve_and_stay_masked(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("META_ENDPOINT", "http://10.1.2.3:9000")
    monkeypatch.delenv("META_SECRET")
    path = tmp_path / "migration.yaml"
    path.write_text(VALID.replace("http://127.0.0.1:9", "${META_ENDPOINT}"))
    loaded = load_plan(path)
    assert loaded.plan.profiles["meta"].endpoint_url == "http://10.1.2.3:9000"
    code, out, _ = run_cli("plan", "show", str(path), "--no-preflight")
    assert code == 0
    assert "${META_ENDPOINT}" in out and "10.1.2.3" not in out
    assert "META_ENDPOINT: set" in out and "META_SECRET: NOT SET" in out


def test_registry_cluster_and_the_iam_namespace_from_the_target_cluster(tmp_path) -> None:
    path = tmp_path / "migration.yaml"
    text = VALID.replace(
        "storage: ./data\n",
        "storage: ./data\n  registry: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml\n  iam: {ldif: groups.ldif}\n",
    )
    text = text.replace(
        "  storage: meta://",
        "  registry: 10.0.0.5:5000/ml\n  cluster: {context: meta-prod, namespace: ml-training}\n  storage: meta://",
    )
    path.write_text(text.replace("phases:\n", "phases:\n  iam: {}\n"))
    loaded = load_plan(path)
    assert loaded.plan.target.registry == "10.0.0.5:5000/ml"
    assert namespace(loaded.plan) == "ml-training"
    assert loaded.plan.enabled_phases() == ["iam", "data_sync"]


def test_user_target_profile_by_path(tmp_path) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\ngpu_resource: amd.com/gpu\n")
    path = tmp_path / "migration.yaml"
    path.write_text(VALID.replace("profile: meta-compute", "profile: ./mine.yaml"))
    assert load_plan(path).target.gpu_resource == "amd.com/gpu"


def test_meta_compute_profile_carries_the_platform_guidance(tmp_path) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(VALID)
    target = load_plan(path).target
    assert [(r.match, r.to) for r in target.base_images][0] == (
        "nvcr.io/nvidia/pytorch:*",
        "meta-cloud-registry.io/base/pytorch-meta:2026-latest",
    )
    assert target.sdk_steps == ["RUN pip install meta-compute-sdk --upgrade"]


def swap(old: str, new: str) -> str:
    assert old in VALID
    return VALID.replace(old, new)


MALFORMED = [
    ("unknown top-level key", VALID + "colour: blue\n", ":22:", "colour: unknown field"),
    (
        "inline secret",
        swap("credentials: {", "credentials: {secret_access_key: hunter2, "),
        ":11:",
        "secret_access_key",
    ),
    ("missing name", swap("name: demo-migration\n", ""), None, "name: Field required"),
    ("bad name", swap("name: demo-migration", "name: Demo Migration!"), ":1:", "name: String should match"),
    ("missing source", swap("source:\n  storage: ./data\n", ""), None, "source: Field required"),
    ("empty storage", swap("storage: ./data", "storage: ''"), ":3:", "source.storage"),
    (
        "unknown target profile",
        swap("profile: meta-compute", "profile: moon-base"),
        ":5:",
        "'moon-base' is not built in",
    ),
    (
        "target profile file missing",
        swap("profile: meta-compute", "profile: ./nope.yaml"),
        ":5:",
        "nope.yaml: cannot read",
    ),
    ("unknown connector type", swap("type: s3", "type: ftp"), ":9:", "profiles.meta.type"),
    (
        "key ranges of a source that cannot seek",
        swap("shards: [train/, val/]", "shards: auto"),
        None,
        "phases.data_sync.shards: auto splits a source whose listing starts at a key (S3) into key ranges",
    ),
    (
        "shards neither prefixes nor auto",
        swap("shards: [train/, val/]", "shards: train/"),
        ":16:",
        "phases.data_sync.shards: give a list of key prefixes ([train/, val/]) or auto",
    ),
    (
        "phase without a required setting",
        swap("phases:\n", "phases:\n  manifests: {}\n"),
        ":13:",
        "phases.manifests.sources: Field required",
    ),
    (
        "iam phase without IAM sources",
        swap("phases:\n", "phases:\n  iam: {namespace: ml}\n"),
        None,
        "phases.iam needs source.iam",
    ),
    (
        "iam source naming nothing",
        swap("storage: ./data\n", "storage: ./data\n  iam: {}\n"),
        ":4:",
        "source.iam: name at least one of aws, azure_export, ldif",
    ),
    (
        "iam export with credentials",
        swap("storage: ./data\n", "storage: ./data\n  iam:\n    aws: {export: a.json, endpoint_url: http://x}\n"),
        ":5:",
        "export reads a file",
    ),
    ("bad namespace", swap("phases:\n", "phases:\n  iam: {namespace: ML_Team}\n"), ":13:", "phases.iam.namespace"),
    (
        "unknown LDAP group level",
        swap("phases:\n", "phases:\n  iam: {namespace: ml, ldap_groups: {admins: root}}\n"),
        ":13:",
        "phases.iam.ldap_groups.admins",
    ),
    (
        "registry with a scheme",
        swap("storage: ./data\n", "storage: ./data\n  registry: https://ecr.example.com/ml\n"),
        ":4:",
        "without a scheme",
    ),
    (
        "cluster without a context",
        swap("  storage: meta://", "  cluster: {namespace: ml}\n  storage: meta://"),
        ":6:",
        "target.cluster.context: Field required",
    ),
    (
        "iam with no namespace anywhere",
        swap("storage: ./data\n", "storage: ./data\n  iam: {ldif: g.ldif}\n").replace(
            "phases:\n", "phases:\n  iam: {}\n"
        ),
        None,
        "phases.iam needs a namespace",
    ),
    ("coverage above 1", swap("gates:\n", "gates:\n  iam: {min_coverage: 2}\n"), ":18:", "gates.iam.min_coverage"),
    (
        "iam gate kubernetes_version moved",
        swap("gates:\n", 'gates:\n  iam: {kubernetes_version: "1.30"}\n'),
        ":18:",
        "target.kubernetes_version",
    ),
    ("unknown phase", swap("phases:\n", "phases:\n  teleport: {}\n"), ":13:", "phases.teleport: unknown field"),
    (
        "no phase",
        swap("  data_sync:\n    threads: 64\n    part_size: 16M\n    shards: [train/, val/]\n", "  {}\n"),
        None,
        "no phase is enabled",
    ),
    ("threads zero", swap("threads: 64", "threads: 0"), ":14:", "phases.data_sync.threads"),
    ("threads not a number", swap("threads: 64", "threads: many"), ":14:", "phases.data_sync.threads"),
    ("bad size", swap("part_size: 16M", "part_size: huge"), ":15:", "'huge' is not a size"),
    ("overlapping shards", swap("shards: [train/, val/]", "shards: [train/, train/a/]"), ":16:", "overlaps"),
    ("unknown phase setting", swap("threads: 64", "threads: 64\n    turbo: true"), ":15:", "turbo: unknown field"),
    (
        "approval of a phase not enabled",
        swap("approve_before: [data_sync]", "approve_before: [manifests]"),
        None,
        "approve_before names 'manifests'",
    ),
    ("bad cron", swap('schedule: "0 2 * * *"', 'schedule: "every night"'), ":20:", "not a cron expression"),
    ("cron hour out of range", swap('schedule: "0 2 * * *"', 'schedule: "0 25 * * *"'), ":20:", "'0 25 * * *'"),
    ("cron weekday out of range", swap('schedule: "0 2 * * *"', 'schedule: "0 2 * * 8"'), ":20:", "schedule"),
    ("hashed cron", swap('schedule: "0 2 * * *"', 'schedule: "H 2 * * *"'), ":20:", "not a cron expression"),
    ("undefined scheme alias", swap("storage: meta://", "storage: mta://"), ":6:", "unknown scheme 'mta'"),
    ("negative retries", swap("attempts: 2", "attempts: -1"), ":21:", "retries.attempts"),
    ("unknown gate setting", swap("deep_verify: false", "deep_verify: false, paranoid: true"), ":18:", "paranoid"),
    ("gate for unknown phase", swap("gates:\n", "gates:\n  warp: {}\n"), ":18:", "gates.warp: unknown field"),
    ("unset env reference", swap("http://127.0.0.1:9", "${FERRY_TEST_UNSET_VAR}"), ":10:", "FERRY_TEST_UNSET_VAR"),
    ("not YAML", "name: [unclosed\n", None, "not valid YAML"),
    ("not a mapping", "- a\n- b\n", ":1:", "expected a mapping"),
    ("bad addressing style", swap("type: s3", "type: s3\n    addressing_style: sideways"), ":10:", "addressing_style"),
]


@pytest.mark.parametrize(("case", "text", "line", "needle"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_plan_is_one_line_and_exit_2(tmp_path, case, text, line, needle) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(text)
    code, out, err = run_cli("plan", "validate", str(path))
    assert code == 2, (case, out, err)
    lines = [entry for entry in err.splitlines() if entry.strip()]
    assert len(lines) == 1, err
    assert str(path) in lines[0]
    if line:
        assert f"{path}{line}" in lines[0], lines[0]
    assert needle in lines[0], lines[0]
    assert "hunter2" not in err and "Traceback" not in err


def test_plan_validate_refuses_what_cannot_run_here_unless_offline(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("META_KEY", raising=False)
    monkeypatch.setenv("META_SECRET", "s3cr3t-value")
    path = tmp_path / "migration.yaml"
    path.write_text(
        swap("storage: ./data\n", "storage: ./data\n  iam: {ldif: groups.ldif}\n").replace(
            "phases:\n", "phases:\n  iam: {namespace: ml}\n"
        )
    )
    code, _, err = run_cli("plan", "validate", str(path))
    lines = err.splitlines()
    assert code == 2 and len(lines) == 2, err
    assert f"{path}:4: source.iam.ldif: {tmp_path / 'groups.ldif'}: no such readable file" in lines[0]
    assert f"{path}:12: profiles.meta.credentials.access_key_id_env: META_KEY is not set" in lines[1]
    assert "s3cr3t" not in err
    # Structure only, for a plan deployed to workers whose environment holds the secrets.
    code, out, err = run_cli("plan", "validate", str(path), "--offline")
    assert code == 0 and "valid plan" in out, err
    (tmp_path / "groups.ldif").write_text("dn: cn=ml,dc=corp\ncn: ml\n")
    monkeypatch.setenv("META_KEY", "key-id")
    code, out, err = run_cli("plan", "validate", str(path))
    assert code == 0 and "valid plan" in out, err


def test_plan_validate_and_show_see_the_registry_logins_the_images_phase_names(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("REG_PASS", raising=False)
    monkeypatch.setenv("REG_USER", "robot")
    path = tmp_path / "migration.yaml"
    path.write_text(
        "name: logins\nsource: {storage: ./src, registry: registry.corp/ml}\n"
        "target: {storage: ./dst, registry: registry.meta.example/ai}\n"
        "phases:\n  images:\n    copy: [tool:1]\n    auth:\n"
        "      registry.meta.example: {username_env: REG_USER, password_env: REG_PASS}\n"
    )
    (tmp_path / "src").mkdir()
    code, _, err = run_cli("plan", "validate", str(path))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{path}:8: phases.images.auth.registry.meta.example.password_env: REG_PASS is not set" in err
    code, out, _ = run_cli("plan", "show", str(path), "--no-preflight")
    assert "REG_PASS: NOT SET" in out and "REG_USER: set" in out and "robot" not in out


def test_plan_show_lists_the_prefect_secret_blocks_a_plan_names_and_never_a_value(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REG_USER", "robot")
    path = tmp_path / "migration.yaml"
    path.write_text(
        "name: blocks\nsource: {storage: ./src, registry: registry.corp/ml}\n"
        "target: {storage: ./dst, registry: registry.meta.example/ai}\n"
        "profiles:\n  meta: {type: s3, credentials: {secret_access_key_secret: meta-s3-key}}\n"
        "phases:\n  images:\n    copy: [tool:1]\n    auth:\n"
        "      registry.meta.example: {username_env: REG_USER, password_secret: meta-registry-password}\n"
    )
    (tmp_path / "src").mkdir()
    code, out, err = run_cli("plan", "show", str(path), "--no-preflight")
    assert code == 0, err
    blocks = out.split("Prefect Secret blocks it reads")[1].splitlines()
    assert [line for line in blocks if ": read by the run" in line] == [
        "meta-registry-password: read by the run that needs it",
        "meta-s3-key: read by the run that needs it",
    ]
    assert "REG_USER: set" in out and "robot" not in out


def test_a_misspelt_phase_stops_before_any_run_or_audit_folder(tmp_path) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(VALID)
    for option in ("--only", "--force"):
        code, _, err = run_cli("run", str(path), option, "data_snyc")
        assert code == 2 and f"{option}: 'data_snyc' is not a phase of this plan (data_sync)" in err
    code, _, err = run_cli("rollback", str(path), "--phase", "imagse")
    assert code == 2 and "--phase: 'imagse' is not a phase of this plan" in err
    assert not (tmp_path / ".ferry").exists()


# How teams name the variables they put in plans: secrets (refused) and the rest (read).
SECRET_NAMES = ["HF_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD", "REGISTRY_PASSWD", "AWS_SECRET_ACCESS_KEY", "AZURE_SAS",
                "AZURE_STORAGE_CONNECTION_STRING", "OPENAI_API_KEY", "GITLAB_PAT", "SSH_PRIVATE_KEY",
                "gcp_credentials"]  # fmt: skip
PLAIN_NAMES = ["BUCKET", "S3_ENDPOINT", "AWS_REGION", "KEY_PREFIX", "PASSENGER_LIST", "SASKATOON_SITE", "PATH_ROOT"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_a_variable_named_as_a_secret_is_refused_in_a_plan_field_without_showing_it(tmp_path, monkeypatch, name):
    monkeypatch.setenv(name, "hunter2-value")
    path = tmp_path / "migration.yaml"
    path.write_text(VALID.replace("shards: [train/, val/]", f'shards: ["${{{name}}}/"]'))
    code, _, err = run_cli("plan", "validate", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}:16: phases.data_sync.shards.0: ${{{name}}} names a secret" in err and "_env" in err
    assert "hunter2" not in err


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_other_variables_are_read(tmp_path, monkeypatch, name) -> None:
    monkeypatch.setenv(name, "from-env")
    path = tmp_path / "migration.yaml"
    path.write_text(VALID.replace("shards: [train/, val/]", f'shards: ["${{{name}}}/"]'))
    assert load_plan(path).plan.phases.data_sync.shards == ["from-env/"]


@pytest.mark.parametrize(
    ("url", "refused"),
    [("http://ferry:hunter2@10.1.2.3:9000", True), ("http://ferry:@10.1.2.3:9000", True),
     ("http://ferry@10.1.2.3:9000", False), ("http://10.1.2.3:9000/a:b@c", False)],
)  # fmt: skip
def test_a_url_with_a_password_is_refused(tmp_path, url: str, refused: bool) -> None:
    path = tmp_path / "migration.yaml"
    path.write_text(VALID.replace("http://127.0.0.1:9", url))
    code, _, err = run_cli("plan", "validate", str(path))
    if refused:
        assert code == 2 and f"{path}:10: profiles.meta.endpoint_url: a URL with a password in it" in err, err
        assert "hunter2" not in err
    else:
        assert "a URL with a password" not in err, err
