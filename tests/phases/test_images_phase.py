"""The images phase against two real docker-registry processes, with buildah and skopeo (no network).

The registry pair and the images on its source are tests.support's `start_registry_pair` (the `registries`
fixture of tests/phases/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.errors import PermanentError
from ferry.images.journal import read_journal
from ferry.images.oci import Registry
from ferry.layout import StateLayout
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from ferry.results import Status
from tests.support import Registries, start_registry

TRAINER = """\
# the trainer, as the team wrote it
FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04
ENV APP=trainer
RUN echo trained > /model
CMD ["cat", "/model"]
"""


def _plan(tmp: Path, regs: Registries, dockerfiles: dict[str, str], copy: list[str]) -> Path:
    (tmp / "test-profile.yaml").write_text(
        "name: test-meta\n"
        f'base_images: [{{match: "nvcr.io/nvidia/cuda:*-runtime-*", to: "{regs.src}/base/busy-meta:1"}}]\n'
        # The platform's SDK step, offline: what pip would do, written by a shell.
        'sdk_steps: ["RUN echo meta-compute-sdk > /etc/meta-sdk"]\n'
    )
    entries = []
    for image, text in dockerfiles.items():
        folder = tmp / image.split(":")[0]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(text)
        entries.append(f'{{path: {folder.name}/Dockerfile, image: "{image}"}}')
    plan = tmp / "migration.yaml"
    plan.write_text(
        "name: images-test\n"
        f"source: {{storage: ./src, registry: {regs.src}/ml}}\n"
        f"target: {{storage: ./dst, registry: {regs.tgt}/ai, profile: ./test-profile.yaml}}\n"
        "phases:\n  images:\n"
        f"    dockerfiles: [{', '.join(entries)}]\n"
        f"    copy: {json.dumps(copy)}\n"
        "    parallel: 2\n"
    )
    return plan


def _run_all(plan: Path, run: str) -> tuple[object, AuditFolder, list[dict]]:
    phase = open_phase(load_plan(plan), "images")
    audit = AuditFolder(plan.parent / ".ferry" / "runs" / run)
    summaries = [phase.run(step, audit, Reporter()) for step in phase.steps()]
    return phase, audit, summaries


def test_rebuild_copy_publish_gate_then_skip(registries: Registries, tmp_path: Path) -> None:
    regs = registries
    plan = _plan(tmp_path, regs, {"trainer:2024.06": TRAINER}, ["tokenizer:1.0", "eval:*"])
    before = open_phase(load_plan(plan), "images").changes()
    assert before.totals == {"rebuild": 1, "copy": 3}
    assert "rebuild 1 of 1 image(s) (trainer:2024.06)" in before.text
    assert "trainer:2024.06: rebuild (new digest)" in before.text
    assert "tokenizer:1.0: copy sha256:" in before.text and "(not in the target)" in before.text
    phase, audit, summaries = _run_all(plan, "r1")
    assert [(s.details["pushed"], s.details["skipped"], s.details["images"], s.changed) for s in summaries] == [
        (4, 0, 4, True)
    ]
    after = phase.changes()
    assert after.empty
    assert "trainer:2024.06: unchanged (sha256:" in after.text and "tokenizer:1.0: unchanged (sha256:" in after.text

    # The rebuilt image, read back from the target registry.
    target = Registry(regs.tgt, insecure=True)
    manifest = target.manifest("ai/trainer", "2024.06")
    assert manifest is not None
    annotations = manifest.json()["annotations"]
    assert annotations["org.opencontainers.image.base.name"] == f"{regs.src}/base/busy-meta:1"
    assert annotations["org.opencontainers.image.base.digest"] == regs.digest(f"{regs.src}/base/busy-meta:1")
    config = target.config("ai/trainer", "2024.06")
    assert {"APP=trainer", "CUDA_VERSION=12.4.1"} <= set(config["config"]["Env"])
    assert config["config"]["Cmd"] == ["cat", "/model"]
    assert config["config"]["Labels"]["io.ferry.source"] == f"{regs.src}/ml/trainer:2024.06"
    history = " ".join(h.get("created_by", "") for h in config["history"])
    assert "echo meta-compute-sdk" in history and "echo trained" in history
    rebased = (audit.root / "images" / "rebased" / "trainer_2024.06" / "Dockerfile").read_text()
    assert rebased == TRAINER.replace(
        "FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
        f"FROM {regs.src}/base/busy-meta:1\nRUN echo meta-compute-sdk > /etc/meta-sdk",
    )

    # The two-platform index copied with its digest, every platform with it; the glob expanded.
    index = target.manifest("ai/tokenizer", "1.0")
    assert index is not None and index.is_index
    assert index.digest == regs.digest(f"{regs.src}/ml/tokenizer:1.0")
    assert sorted(m["platform"]["architecture"] for m in index.json()["manifests"]) == ["amd64", "arm64"]
    assert all(target.digest("ai/tokenizer", m["digest"]) for m in index.json()["manifests"])
    assert sorted(target.tags("ai/eval")) == ["1", "2"]

    # The digest map, published and in the audit folder, with the CUDA fingerprint of the rebuilt image.
    records = digest_map.read(StateLayout(tmp_path / ".ferry").digest_map("images-test"))
    trainer = records[f"{regs.src}/ml/trainer:2024.06"]
    assert (trainer.kind, trainer.cuda, trainer.digest) == ("rebuilt", "12.4.1", manifest.digest)
    assert records[f"{regs.src}/ml/tokenizer:1.0"].digest == index.digest
    assert len(records) == 4
    assert json.loads((audit.root / "images" / "digests.json").read_text())["images"][0]["source"]

    results = {r.name: r for r in phase.gate(audit)}
    assert {n: r.status for n, r in results.items()} == {
        "images.on_target": Status.PASS,
        "images.copied_digests": Status.PASS,
        "images.base_annotations": Status.PASS,
        "images.not_source": Status.PASS,
        "images.unmapped_bases": Status.PASS,
    }

    # A second run: nothing rebuilt (same content hash), nothing copied (the target holds the digests).
    phase2, audit2, summaries2 = _run_all(plan, "r2")
    assert [(s.details["pushed"], s.details["skipped"], s.changed) for s in summaries2] == [(0, 4, False)]
    assert target.digest("ai/trainer", "2024.06") == manifest.digest

    # Rolling the second run back pushes nothing back and puts the first run's map back in place.
    map_file = StateLayout(tmp_path / ".ferry").digest_map("images-test")
    first_map = map_file.read_text()
    assert phase2.rollback(audit2).items == [
        f"restore {map_file} from {audit2.root / 'images' / 'previous-digests.json'}"
    ]
    assert map_file.read_text() == first_map

    # Rolling the first run back: its tags go; eval:1 and eval:2, both its own, go with their one digest.
    undo = phase.rollback(audit)
    eval_items = sorted(i.split(" ", 1)[1] if i.startswith("deleted") else i for i in undo.items if "/ai/eval:" in i)
    assert len(eval_items) == 2 and any("is gone already" in i for i in eval_items), undo.items
    assert f"deleted {regs.tgt}/ai/trainer:2024.06 ({manifest.digest})" in undo.items
    assert [
        target.digest(repo, tag) for repo, tag in (("ai/trainer", "2024.06"), ("ai/eval", "1"), ("ai/eval", "2"))
    ] == [None] * 3
    assert f"remove {StateLayout(tmp_path / '.ferry').digest_map('images-test')}" in undo.items

    # The gate asks the registries, not the journal: after the rollback the same run's gate fails.
    after = {r.name: r for r in phase.gate(audit)}
    for name in ("images.on_target", "images.copied_digests", "images.base_annotations"):
        assert after[name].status == Status.FAIL, after[name]
    assert f"{regs.tgt}/ai/trainer:2024.06: registry holds nothing, the run recorded {manifest.digest}" in (
        after["images.on_target"].evidence
    )


def test_failed_build_fails_its_image_and_rolls_back(registries: Registries, tmp_path: Path) -> None:
    regs = registries
    broken = "FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04\nRUN false\n"
    good = TRAINER.replace("trained", "evaluated")
    plan = _plan(tmp_path, regs, {"good:1": good, "broken:1": broken}, [])
    phase = open_phase(load_plan(plan), "images")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
    with pytest.raises(PermanentError, match=r"images: 1 of 2 failed: broken:1: build broken:1: buildah exited"):
        phase.run("run", audit, Reporter())
    pushed = regs.digest(f"{regs.tgt}/ai/good:1")
    assert pushed is not None  # the other image was built and pushed
    assert regs.digest(f"{regs.tgt}/ai/broken:1") is None

    preview = phase.rollback(audit, dry_run=True)
    assert preview.items == [f"delete {regs.tgt}/ai/good:1 ({pushed})"]
    assert regs.digest(f"{regs.tgt}/ai/good:1") == pushed
    undo = phase.rollback(audit)
    assert undo.items == [f"deleted {regs.tgt}/ai/good:1 ({pushed})"]
    assert regs.digest(f"{regs.tgt}/ai/good:1") is None
    assert phase.rollback(audit).text.startswith("nothing to undo")


def test_rollback_puts_a_moved_tag_back_and_keeps_a_shared_digest(registries: Registries, tmp_path: Path) -> None:
    regs = registries
    base = Registry(regs.src, insecure=True).manifest("base/busy-meta", "1")
    assert base is not None
    # Before the run: the target's tokenizer:1.0 is another image, and keep:1 shares the digest eval:* will get.
    for source, target in (
        (f"{regs.src}/base/busy-meta:1", "moved/tokenizer:1.0"),
        (f"{regs.src}/ml/eval:1", "moved/eval:keep"),
    ):
        subprocess.run(
            ["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--preserve-digests"]
            + [f"docker://{source}", f"docker://{regs.tgt}/{target}"],
            check=True,
            capture_output=True,
        )
    plan = _plan(tmp_path, regs, {}, ["tokenizer:1.0", "eval:*"])
    text = plan.read_text().replace(f"registry: {regs.tgt}/ai", f"registry: {regs.tgt}/moved")
    plan.write_text(text.replace("    dockerfiles: []\n", ""))
    phase, audit, _ = _run_all(plan, "r1")
    moved = f"{regs.tgt}/moved/tokenizer:1.0"
    assert regs.digest(moved) == regs.digest(f"{regs.src}/ml/tokenizer:1.0")
    eval_digest = regs.digest(f"{regs.src}/ml/eval:1")

    undo = phase.rollback(audit)
    assert sorted(undo.items) == sorted(
        [
            f"remove {StateLayout(tmp_path / '.ferry').digest_map('images-test')}",
            f"restore {moved} to its previous digest {base.digest}",
            *(
                f"keep {regs.tgt}/moved/eval:{t}: the registry deletes by digest and {eval_digest} is also tagged keep"
                for t in ("1", "2")
            ),
        ]
    )
    assert regs.digest(moved) == base.digest
    assert regs.digest(f"{regs.tgt}/moved/eval:keep") == eval_digest


def test_a_run_journaled_in_the_earlier_format_rolls_back(registries: Registries, tmp_path: Path) -> None:
    """A run committed before the one journal format (journal.json, one document) is rolled back from it."""
    plan = _plan(tmp_path, registries, {}, ["tokenizer:1.0"])
    phase, audit, _ = _run_all(plan, "r1")
    pushed = registries.digest(f"{registries.tgt}/ai/tokenizer:1.0")
    assert pushed is not None
    # The audit folder as the images phase wrote it before: every kind in one JSON document.
    folder = audit.root / "images"
    earlier = read_journal(audit.root)
    (folder / "journal.json").write_text(json.dumps(earlier, indent=2, sort_keys=True) + "\n")
    (folder / "journal.jsonl").unlink()
    undo = phase.rollback(audit)
    assert f"deleted {registries.tgt}/ai/tokenizer:1.0 ({pushed})" in undo.items, undo.items
    assert registries.digest(f"{registries.tgt}/ai/tokenizer:1.0") is None


def test_kaniko_renders_a_valid_job_and_the_gate_says_what_is_missing(
    registries: Registries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes_validate
    import yaml

    regs = registries
    monkeypatch.setenv("KANIKO_USER", "robot")
    monkeypatch.setenv("KANIKO_PASS", "kaniko-s3cr3t-4711")
    plan = _plan(tmp_path, regs, {"trainer:k1": TRAINER, "plain:1": "FROM python:3.11-slim\nRUN true\n"}, [])
    auth = f"    auth:\n      {regs.tgt}: {{username_env: KANIKO_USER, password_env: KANIKO_PASS}}\n"
    plan.write_text(plan.read_text() + "    builder: kaniko\n" + auth)
    phase = open_phase(load_plan(plan), "images")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
    assert phase.run("run", audit, Reporter()).details["pushed"] == 0
    job = yaml.safe_load((audit.root / "images" / "kaniko" / "trainer_k1.yaml").read_text())
    kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--destination={regs.tgt}/ai/trainer:k1" in args
    assert any(a.startswith("--label=io.ferry.content-hash=sha256:") for a in args)
    # The rendered Jobs carry no login of the plan's (the executor's push credentials are the cluster's to mount).
    assert not [p for p in audit.root.rglob("*") if p.is_file() and b"kaniko-s3cr3t-4711" in p.read_bytes()]

    results = {r.name: r for r in phase.gate(audit)}
    assert results["images.on_target"].status == Status.FAIL
    assert f"{regs.tgt}/ai/trainer:k1: the run recorded no image (not built, not copied)" in (
        results["images.on_target"].evidence
    )
    unmapped = results["images.unmapped_bases"]
    assert (unmapped.status, unmapped.evidence) == (Status.FAIL, ["plain:1: line 1: python:3.11-slim"])


def test_registry_credentials_are_named_and_reach_the_tools_in_a_private_file(moto_env, tmp_path, monkeypatch) -> None:
    import base64
    import stat

    from ferry.errors import UsageError

    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    (tmp_path / "other-auth.json").write_text(json.dumps({"auths": {"other.example": {"auth": "b3RoZXI6czNjcmV0"}}}))
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        "name: creds\n"
        f"source: {{storage: ./src, registry: {ecr}/ml}}\n"
        "target: {storage: ./dst, registry: registry.meta.example/ai}\n"
        "phases:\n  images:\n    copy: [tool:1]\n    auth:\n"
        "      registry.meta.example: {username_env: REG_USER, password_env: REG_PASS}\n"
        "      other.example: {auth_file: other-auth.json}\n"
        f"      {ecr}: {{ecr_endpoint_url: '{moto_env.endpoint}'}}\n"
    )
    monkeypatch.setenv("REG_USER", "robot")
    monkeypatch.setenv("REG_PASS", "hunter2")
    phase = open_phase(load_plan(plan), "images")
    with phase._authfile() as option:
        file = Path(option[1])
        assert option[0] == "--authfile" and stat.S_IMODE(file.stat().st_mode) == 0o600
        auths = {h: base64.b64decode(a["auth"]).decode() for h, a in json.loads(file.read_text())["auths"].items()}
    assert not file.exists()
    assert auths["registry.meta.example"] == "robot:hunter2"
    assert auths["other.example"] == "other:s3cret"
    assert auths[ecr].startswith("AWS:")  # the token moto's GetAuthorizationToken gave

    monkeypatch.delenv("REG_PASS")
    with pytest.raises(UsageError, match=r"credentials.password_env names \$REG_PASS, which is not set"):
        open_phase(load_plan(plan), "images")._credentials("registry.meta.example")


def test_an_interrupted_run_starts_nothing_more_and_publishes_no_map(registries: Registries, tmp_path: Path) -> None:
    import threading

    plan = _plan(tmp_path, registries, {}, ["tokenizer:1.0"])
    plan.write_text(plan.read_text().replace("    dockerfiles: []\n", ""))
    stopping = threading.Event()
    stopping.set()
    phase = open_phase(load_plan(plan), "images")
    summary = phase.run("run", AuditFolder(tmp_path / ".ferry" / "runs" / "r1"), Reporter(stopping))
    assert summary.details == {"pushed": 0, "skipped": 0, "interrupted": True} and not summary.changed
    assert not StateLayout(tmp_path / ".ferry").digest_map("images-test").exists()


def test_where_the_registry_refuses_deletes_the_rollback_says_which_tags_remain(
    registries: Registries, tmp_path: Path
) -> None:
    no_deletes = start_registry(deletes=False)
    try:
        tgt = f"127.0.0.1:{no_deletes.port}"
        plan = _plan(tmp_path, registries, {}, ["eval:1"])
        text = plan.read_text().replace("    dockerfiles: []\n", "").replace(registries.tgt, tgt)
        plan.write_text(text)
        phase, audit, _ = _run_all(plan, "r1")
        digest = registries.digest(f"{tgt}/ai/eval:1")
        assert digest is not None
        undo = phase.rollback(audit)
        assert f"{tgt}/ai/eval:1 remains: the registry does not allow deletes (storage.delete.enabled)" in undo.items
        assert registries.digest(f"{tgt}/ai/eval:1") == digest
    finally:
        no_deletes.stop()


BAD_SETTINGS = [
    ('dockerfiles: [{path: D, image: "Trainer"}]', ":6: phases.images.dockerfiles.0.image: 'Trainer': name it"),
    ('dockerfiles: [{path: D, image: "t:1"}]\n    copy: ["t:1"]', "t:1: both rebuilt from a Dockerfile and copied"),
    ("copy: [a:1]\n    platforms: [linux/amd64, linux/arm64]", "buildah builds one platform here"),
    ("copy: [a:1]\n    auth: {r.example: {username_env: U}}", "name both a username and a password"),
    ("copy: [a:1]\n    auth: {r.example: {username_env: U, password_env: P, auth_file: a.json}}", "or an auth_file"),
    ("{}", "name dockerfiles to rebuild or images to copy"),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
def test_bad_settings_are_one_line_naming_the_field(tmp_path: Path, settings: str, message: str) -> None:
    from ferry.errors import UsageError

    plan = tmp_path / "migration.yaml"
    plan.write_text(
        "name: bad\nsource: {storage: ./src, registry: r.example/ml}\n"
        "target: {storage: ./dst, registry: t.example/ai}\n"
        f"phases:\n  images:\n    {settings}\n".replace("images:\n    {}", "images: {}")
    )
    with pytest.raises(UsageError) as err:
        load_plan(plan)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_copy_needs_a_source_registry(tmp_path: Path) -> None:
    from ferry.errors import UsageError

    plan = tmp_path / "migration.yaml"
    plan.write_text(
        "name: bad\nsource: {storage: ./s}\ntarget: {storage: ./d, registry: t.example/ai}\n"
        "phases:\n  images: {copy: [a:1]}\n"
    )
    with pytest.raises(UsageError, match="phases.images.copy needs source.registry"):
        load_plan(plan)


def test_the_entrys_target_stage_gets_the_sdk_and_an_unknowable_base_fails_saying_so(
    registries: Registries, tmp_path: Path
) -> None:
    regs = registries
    staged = (
        'FROM nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04 AS runtime\nCMD ["serve"]\n'
        "FROM runtime AS test\nCOPY --from=ghcr.io/astral-sh/uv:0.4 /uv /bin/uv\nRUN pytest\n"
    )
    plan = _plan(tmp_path, regs, {"staged:1": staged, "megatron:1": "ARG FROM_IMAGE_NAME\nFROM $FROM_IMAGE_NAME\n"}, [])
    plan.write_text(plan.read_text().replace('image: "staged:1"}', 'image: "staged:1", target: runtime}'))
    plan.write_text(plan.read_text() + "    builder: kaniko\n")
    phase = open_phase(load_plan(plan), "images")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
    # Megatron-LM's shape: the base is a build argument; without it nothing can be built, nor asked of a registry.
    with pytest.raises(PermanentError, match=r"megatron:1: its base \$FROM_IMAGE_NAME cannot be known before the"):
        phase.run("run", audit, Reporter())
    rebased = (audit.root / "images" / "rebased" / "staged_1" / "Dockerfile").read_text()
    assert rebased == (
        f'FROM {regs.src}/base/busy-meta:1 AS runtime\nRUN echo meta-compute-sdk > /etc/meta-sdk\nCMD ["serve"]\n'
        "FROM runtime AS test\nCOPY --from=ghcr.io/astral-sh/uv:0.4 /uv /bin/uv\nRUN pytest\n"
    )
    report = json.loads((audit.root / "images" / "rebased" / "staged_1" / "report.json").read_text())
    assert report["elsewhere"] == [
        {"line": 4, "how": "COPY --from=", "image": "ghcr.io/astral-sh/uv:0.4", "rule_to": None}
    ]


def test_a_copy_that_keeps_meeting_503s_fails_transiently_and_the_retried_step_can_undo_both_attempts(
    registries: Registries, tmp_path: Path
) -> None:
    """skopeo does not retry a 503 on a manifest PUT: ferry copies again, then the step fails as transient (so
    Prefect's task retry runs it again in the same run), and what the first attempt pushed stays undoable."""
    from ferry.errors import TransientError
    from ferry.images.oci import RETRIES
    from tests.faults.proxy import FaultProxy

    with FaultProxy(registries.target.port, unavailable="/v2/retry/eval/manifests/2") as proxy:
        plan = _plan(tmp_path, registries, {}, ["eval:*"])
        text = plan.read_text().replace("    dockerfiles: []\n", "")
        plan.write_text(text.replace(f"registry: {registries.tgt}/ai", f"registry: 127.0.0.1:{proxy.port}/retry"))
        phase = open_phase(load_plan(plan), "images")
        audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
        with pytest.raises(TransientError, match=r"images: 1 of 2 failed: eval:2: copy eval:2: .*503"):
            phase.run("run", audit, Reporter())
        assert proxy.refused == RETRIES + 1, "copied again, RETRIES times"
        proxy.unavailable = None
        summary = phase.run("run", audit, Reporter())  # the task retried: the same step in the same run
        assert (summary.details["pushed"], summary.details["skipped"]) == (2, 1), summary
        targets = sorted(r.target for r in phase.records(audit.root))
        assert targets == [f"127.0.0.1:{proxy.port}/retry/eval:{t}" for t in "12"]
        undo = phase.rollback(audit)
    assert undo.failed == 0, undo.items
    assert [registries.digest(f"{registries.tgt}/retry/eval:{t}") for t in "12"] == [None, None], undo.items
