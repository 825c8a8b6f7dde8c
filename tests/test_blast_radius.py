"""Blast radius: `--delete` and every rollback touch only what this plan created or explicitly names.

Against real servers (moto S3, two docker-registry processes, a real Kubernetes control plane): the target is
seeded with objects outside the plan's prefix, under sibling prefixes that share its string prefix (`data/p2/`,
`data/p-old/`, an object named `data/p` itself), another plan's objects under its own prefix in the same
bucket, and objects inside the prefix that the source also has (overwritten) or lacks (kept unless deleted).
Each test lists everything before and after, with a checksum per object, and holds every object outside what
the plan created or names to be byte for byte what it was. Two plans in one folder share the bucket and the state
directory: each one's rollback leaves the other's objects, and what the other published there, alone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import urllib.request
from pathlib import Path

import pytest

from ferry.audit import AuditFolder
from ferry.errors import PermanentError
from ferry.layout import StateLayout
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from ferry.runlog import RunLog
from tests.support import run_cli

SOURCE = {"a/one.bin": b"1" * 1000, "a/two.bin": b"22", "b/three.bin": b"333" * 100}
# Around the target prefix `data/p`: nothing here is the plan's. `data/p2/` is another plan's prefix in the tests
# that run one; the same relative keys as the source's make a prefix mistake delete or overwrite them.
NEIGHBOURS = {
    "top.bin": b"top of the bucket",
    "data/x.bin": b"beside the prefix",
    "data/p": b"an object named as the prefix itself",
    "data/p2/a/one.bin": b"the sibling prefix p2, same relative key",
    "data/p2/a/stale.bin": b"the sibling prefix p2, a key the source lacks",
    "data/p-old/a/one.bin": b"the sibling prefix p-old",
    "data/p-old/b/three.bin": b"the sibling prefix p-old, b",
    "data/pa.bin": b"shares the string prefix data/p",
    "data/q/a/one.bin": b"another prefix",
    "other/data/p/a/one.bin": b"the same path one level down",
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bucket_listing(s3, bucket: str) -> dict[str, tuple[str, str, str]]:
    """Every object in the bucket: key -> (SHA-256 of its bytes, ETag, last modified): a rewrite of the same
    bytes shows too, unless it lands in the same second."""
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            found[item["Key"]] = (sha(body), item["ETag"], item["LastModified"].isoformat())
    return found


def seed_bucket(s3, bucket: str, objects: dict[str, bytes]) -> None:
    s3.create_bucket(Bucket=bucket)
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def outside(listing: dict, prefix: str) -> dict:
    return {k: v for k, v in listing.items() if not k.startswith(prefix)}


def under(listing: dict, prefix: str) -> dict:
    return {k[len(prefix) :]: v for k, v in listing.items() if k.startswith(prefix)}


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def tree_listing(root: Path) -> dict[str, str]:
    """Every file and link under root, not following links: path -> SHA-256, or -> the link's target."""
    found = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if (Path(dirpath) / d).is_symlink()]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            found[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else sha(path.read_bytes())
    return found


# -- ferry sync --delete ------------------------------------------------------------------------------------


@pytest.mark.parametrize("url_tail", ["data/p", "data/p/"])
def test_sync_delete_on_s3_removes_only_what_the_source_lacks_under_the_prefix(moto_env, tmp_path, url_tail) -> None:
    s3 = moto_env.client("s3")
    bucket = f"blast-sync-{'slash' if url_tail.endswith('/') else 'bare'}"
    inside = {
        "data/p/a/one.bin": b"an older one.bin: overwritten",
        "data/p/a/stale.bin": b"the source lacks it: --delete removes it",
        "data/p/tmp/scratch.bin": b"excluded: not named by this sync, kept",
    }
    seed_bucket(s3, bucket, {**NEIGHBOURS, **inside})
    before = bucket_listing(s3, bucket)
    src = write_tree(tmp_path / "src", {**SOURCE, "tmp/new.bin": b"excluded: not copied"})

    code, out, err = run_cli(
        "sync", str(src), f"s3://{bucket}/{url_tail}", "--delete", "--exclude", "tmp/*",
        "--threads", "4", "--state-dir", str(tmp_path / "state"), "--no-progress",
    )  # fmt: skip
    assert code == 0, err

    after = bucket_listing(s3, bucket)
    assert outside(after, "data/p/") == outside(before, "data/p/")
    assert under(after, "data/p/") == {
        **{key: (sha(data), *after[f"data/p/{key}"][1:]) for key, data in SOURCE.items()},
        "tmp/scratch.bin": before["data/p/tmp/scratch.bin"],
    }


def test_sync_delete_on_a_local_tree_stays_inside_its_directory(tmp_path) -> None:
    root = tmp_path / "store"
    write_tree(root, {
        "x.bin": b"beside the target directory",
        "p.txt": b"a file named like the target",
        "p2/a/one.bin": b"the sibling directory p2",
        "p2/a/stale.bin": b"the sibling directory p2, a key the source lacks",
        "p-old/a/one.bin": b"the sibling directory p-old",
        "elsewhere/c/one.bin": b"behind a link inside the target",
        "elsewhere/outside.bin": b"a file a link inside the target points to",
        "p/a/one.bin": b"an older one.bin: overwritten",
        "p/a/stale.bin": b"the source lacks it: --delete removes it",
        "p/tmp/scratch.bin": b"excluded: kept",
    })  # fmt: skip
    (root / "p" / "c").symlink_to(root / "elsewhere" / "c")  # a linked directory: not the target's to walk
    (root / "p" / "link.bin").symlink_to(root / "elsewhere" / "outside.bin")  # a link the source lacks
    before = tree_listing(root)
    src = write_tree(tmp_path / "src", {**SOURCE, "tmp/new.bin": b"excluded: not copied"})

    code, _, err = run_cli(
        "sync", str(src), str(root / "p"), "--delete", "--exclude", "tmp/*",
        "--threads", "4", "--state-dir", str(tmp_path / "state"), "--no-progress",
    )  # fmt: skip
    assert code == 0, err

    after = tree_listing(root)
    # The link the source lacks is deleted as the link it is, never what it points to; the linked directory is
    # not walked, so nothing behind it is deleted.
    assert outside(after, "p/") == outside(before, "p/")
    assert under(after, "p/") == {
        **{key: sha(data) for key, data in SOURCE.items()},
        "tmp/scratch.bin": before["p/tmp/scratch.bin"],
        "c": before["p/c"],
    }


def test_a_local_target_never_writes_or_deletes_through_a_linked_directory(tmp_path) -> None:
    from tests.support import write_plan

    plan = write_plan(tmp_path, "linked")
    write_tree(tmp_path, {"elsewhere/three.bin": b"not the plan's: outside the target"})
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "b").symlink_to(tmp_path / "elsewhere")
    before = tree_listing(tmp_path / "elsewhere")
    phase = open_phase(load_plan(plan), "data_sync")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "run-1")
    try:
        phase.run("a/", audit, Reporter())
        with pytest.raises(PermanentError, match=r"passes through .*/dst/b, a symbolic link .*: ferry neither"):
            phase.run("b/", audit, Reporter())
    finally:
        phase.rollback(audit)
    assert tree_listing(tmp_path / "elsewhere") == before


# -- the data_sync phase: delete: true, its rollback after a failed gate, `ferry rollback`, two plans --------------

PLAN = """\
name: {name}
source: {{storage: ./{src}}}
target: {{storage: 's3://{bucket}/{prefix}'}}
phases:
  data_sync: {{threads: 4, delete: {delete}, shards: [a/, b/]}}
retries: {{attempts: 0, delay_s: 0}}
"""


def two_plans(root: Path, bucket: str) -> tuple[Path, Path]:
    """plan-a syncs ./src-a into data/p with delete: true, plan-b ./src-b into data/p2 without; one folder, so
    one state directory (.ferry) for both."""
    write_tree(root / "src-a", SOURCE)
    write_tree(root / "src-b", {"a/one.bin": b"plan-b's one.bin", "b/three.bin": b"plan-b's three.bin"})
    plans = []
    for name, src, prefix, delete in (("plan-a", "src-a", "data/p", "true"), ("plan-b", "src-b", "data/p2", "false")):
        plan = root / f"{name}.yaml"
        plan.write_text(PLAN.format(name=name, src=src, bucket=bucket, prefix=prefix, delete=delete))
        plans.append(plan)
    return plans[0], plans[1]


def phase_status(root: Path, plan: str) -> str:
    runlog = RunLog(root / ".ferry" / "state")
    try:
        return runlog.phase(plan, "data_sync").status
    finally:
        runlog.close()


def _state_file(state: Path, target: str, prefix: str) -> Path:
    """The transfer state file of the shard syncing into target under prefix (exactly one)."""
    import sqlite3

    found = []
    for path in sorted((state / "transfers").glob("*.sqlite")):
        with sqlite3.connect(path) as conn:
            if conn.execute("SELECT target, prefix FROM shard").fetchone() == (target, prefix):
                found.append(path)
    assert len(found) == 1, found
    return found[0]


def test_two_plans_in_one_bucket_and_state_dir_undo_only_their_own(moto_env, prefect_api, tmp_path, monkeypatch):
    import checks.data
    from ferry.errors import GateFailed
    from flows.pipeline import migrate

    s3, bucket = moto_env.client("s3"), "blast-plans"
    target_a = f"s3://{bucket}/data/p"
    inside = {
        "data/p/a/one.bin": b"an older one.bin: overwritten by plan-a",
        "data/p/a/stale.bin": b"in shard a/, the source lacks it: delete: true removes it",
        "data/p/c/outside-shards.bin": b"under the prefix but in no shard of the plan: kept",
    }
    seed_bucket(s3, bucket, {**NEIGHBOURS, **inside})
    plan_a, plan_b = two_plans(tmp_path, bucket)

    # plan-b commits first: its objects under data/p2/ are now another plan's, in the same bucket and state dir.
    migrate(plan_path=str(plan_b))
    assert phase_status(tmp_path, "plan-b") == "committed"
    before = bucket_listing(s3, bucket)
    assert under(before, "data/p2/")["b/three.bin"][0] == sha(b"plan-b's three.bin")

    # plan-a's run: while its gate runs, someone rewrites a/two.bin, which the run had created. The gate fails
    # and the pipeline rolls plan-a back: what it created goes (but a/two.bin, changed since), nothing else.
    real_check = checks.data.check_data
    rewritten = []

    def someone_writes_then_check(*args, **kwargs):
        if not rewritten:
            s3.put_object(Bucket=bucket, Key="data/p/a/two.bin", Body=b"written by someone during the gate")
            rewritten.append(True)
        return real_check(*args, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(GateFailed, match="data_sync: gate failed"):
        patched.setattr("ferry.phases.data_sync.check_data", someone_writes_then_check)
        migrate(plan_path=str(plan_a))
    assert rewritten and phase_status(tmp_path, "plan-a") == "rolled_back"
    after = bucket_listing(s3, bucket)
    assert outside(after, "data/p/") == outside(before, "data/p/")
    assert {k: v[0] for k, v in under(after, "data/p/").items()} == {
        "a/one.bin": sha(SOURCE["a/one.bin"]),  # overwritten: nothing can restore it without versioning
        "a/two.bin": sha(b"written by someone during the gate"),
        "c/outside-shards.bin": sha(inside["data/p/c/outside-shards.bin"]),
    }
    assert phase_status(tmp_path, "plan-b") == "committed"

    # The cause fixed, plan-a commits; then a hand `ferry sync` from another source, with the plans' state dir,
    # rewrites a/two.bin, which plan-a's commit created. Its transfer state is named to sort after plan-a's
    # shard a/, so that the newest record of a/two.bin in the state dir is the hand sync's, not plan-a's.
    s3.delete_object(Bucket=bucket, Key="data/p/a/two.bin")
    migrate(plan_path=str(plan_a))
    assert phase_status(tmp_path, "plan-a") == "committed"
    committed = bucket_listing(s3, bucket)
    assert {k: v[0] for k, v in under(committed, "data/p/").items()} == {
        **{key: sha(data) for key, data in SOURCE.items()},
        "c/outside-shards.bin": sha(inside["data/p/c/outside-shards.bin"]),
    }
    state = tmp_path / ".ferry" / "state"
    ours = _state_file(state, target_a, "a/").name
    other = next(
        path
        for i in itertools.count()  # a name sorting after ours: 1/(1 - ours' place in the hash space) tries on average
        if (path := str(tmp_path / f"hand-{i}"))
        and hashlib.sha256(json.dumps([path, target_a, ""]).encode()).hexdigest()[:16] + ".sqlite" > ours
    )
    write_tree(Path(other), {"a/two.bin": b"a hand sync's two.bin"})
    code, _, err = run_cli("sync", other, target_a, "--threads", "2", "--state-dir", str(state), "--no-progress")
    assert code == 0, err
    assert _state_file(state, target_a, "").name > ours  # the order the test means to set up
    handed = bucket_listing(s3, bucket)

    # plan-a's target edited to plan-b's prefix since its commit: its rollback must not undo plan-a's run there,
    # where plan-b's transfer state has recorded the same keys. It refuses, changing nothing.
    text = plan_a.read_text()
    plan_a.write_text(text.replace("/data/p'", "/data/p2'"))
    code, out, err = run_cli("rollback", str(plan_a), "--phase", "data_sync", "--yes")
    assert code == 2 and f"synced into {target_a}, not into {target_a}2" in err, (out, err)
    assert bucket_listing(s3, bucket) == handed and phase_status(tmp_path, "plan-a") == "committed"
    plan_a.write_text(text)

    # plan-a rolled back by hand: only b/three.bin is still what plan-a wrote.
    code, out, err = run_cli("rollback", str(plan_a), "--phase", "data_sync", "--yes")
    assert code == 0, err
    assert "  keep a/two.bin: another sync into this target wrote it too" in out.splitlines(), out
    rolled = bucket_listing(s3, bucket)
    assert {k: v for k, v in rolled.items() if k != "data/p/b/three.bin"} == {
        k: v for k, v in handed.items() if k != "data/p/b/three.bin"
    }
    assert "data/p/b/three.bin" not in rolled and rolled["data/p/a/two.bin"][0] == sha(b"a hand sync's two.bin")
    assert phase_status(tmp_path, "plan-a") == "rolled_back"
    assert phase_status(tmp_path, "plan-b") == "committed"

    # plan-b rolled back by hand: its created b/three.bin goes; a/one.bin it overwrote and stale.bin stay.
    code, out, err = run_cli("rollback", str(plan_b), "--phase", "data_sync", "--yes")
    assert code == 0, err
    final = bucket_listing(s3, bucket)
    assert outside(final, "data/p2/") == outside(rolled, "data/p2/")
    assert {k: v[0] for k, v in under(final, "data/p2/").items()} == {
        "a/one.bin": sha(b"plan-b's one.bin"),
        "a/stale.bin": sha(NEIGHBOURS["data/p2/a/stale.bin"]),
    }


# -- the images phase's rollback: only the tags the run pushed ------------------------------------------------


def registry_listing(host: str) -> dict[str, str]:
    """Every tag of every repository the registry holds: repo:tag -> the digest of its manifest's bytes."""
    from ferry.images.oci import Registry

    registry = Registry(host, insecure=True)
    with urllib.request.urlopen(f"http://{host}/v2/_catalog?n=1000", timeout=30) as answer:
        repositories = json.loads(answer.read())["repositories"]
    found = {}
    for repo in repositories:
        for tag in registry.tags(repo):
            if (manifest := registry.manifest(repo, tag)) is not None:
                found[f"{repo}:{tag}"] = manifest.digest
    return found


def test_images_rollback_deletes_only_the_tags_the_run_pushed(tmp_path) -> None:
    from tests.support import buildah, busybox_image, start_registry

    source, target = start_registry(), start_registry()
    try:
        src, tgt, work = f"127.0.0.1:{source.port}", f"127.0.0.1:{target.port}", tmp_path / "buildah"
        busybox_image(work, "eval-1", "amd64", ["EVAL=1"])
        busybox_image(work, "theirs", "amd64", ["EVAL=theirs"])
        push = ("push", "--tls-verify=false")
        buildah(work, *push, "eval-1", f"docker://{src}/ml/eval:1")
        # On the target before the run: another image in the repository the run pushes to, another repository
        # under the plan's path, and the very digest the run will push, in a repository of its own.
        for image, ref in (("theirs", "ai/eval:old"), ("theirs", "ai/unrelated:1"), ("eval-1", "other/eval:1")):
            buildah(work, *push, image, f"docker://{tgt}/{ref}")
        before = registry_listing(tgt)
        assert before["other/eval:1"] == registry_listing(src)["ml/eval:1"]
        (tmp_path / "src").mkdir()
        plan = tmp_path / "migration.yaml"
        plan.write_text(
            f"name: images-blast\nsource: {{storage: ./src, registry: {src}/ml}}\n"
            f"target: {{storage: ./dst, registry: {tgt}/ai}}\n"
            'phases:\n  images: {copy: ["eval:1"]}\n'
        )
        phase = open_phase(load_plan(plan), "images")
        audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
        for step in phase.steps():
            phase.run(step, audit, Reporter())
        pushed = registry_listing(tgt)
        assert pushed == {**before, "ai/eval:1": before["other/eval:1"]}

        # A second plan in the same folder (so the same state directory) copies the image to a repository of its
        # own: it publishes a map of its own, and the first plan's stays as that plan published it.
        plan_b = tmp_path / "plan-b.yaml"
        plan_b.write_text(plan.read_text().replace("images-blast", "images-b").replace(f"{tgt}/ai", f"{tgt}/b-ai"))
        phase_b = open_phase(load_plan(plan_b), "images")
        for step in phase_b.steps():
            phase_b.run(step, AuditFolder(tmp_path / ".ferry" / "runs" / "b1"), Reporter())
        map_a, map_b = (StateLayout(tmp_path / ".ferry").digest_map(name) for name in ("images-blast", "images-b"))
        published_b = map_b.read_text()
        assert f"{tgt}/b-ai/eval:1" in published_b and f"{tgt}/b-ai/" not in map_a.read_text()
        assert f"{tgt}/ai/eval:1" in map_a.read_text()

        undo = phase.rollback(audit)
        assert f"deleted {tgt}/ai/eval:1 ({before['other/eval:1']})" in undo.items, undo.items
        assert f"remove {map_a}" in undo.items and not map_a.exists(), undo.items
        assert registry_listing(tgt) == {**before, "b-ai/eval:1": before["other/eval:1"]}
        assert map_b.read_text() == published_b
    finally:
        source.stop()
        target.stop()


# -- the manifests phase's rollback: objects without the plan's label, and other namespaces, survive ----------

MANIFESTS = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: trainer, namespace: ml-train}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: trainer-config, namespace: ml-train}
data: {EPOCHS: "10"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml-train}
spec:
  replicas: 1
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      serviceAccountName: trainer
      containers:
      - {name: trainer, image: "registry.meta.example/ai-training/trainer:2024.06"}
"""
_KINDS = (("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("apps/v1", "Deployment"))


def _cluster_before(plane, ns: str, other: str) -> None:
    """The namespace with the plan's older ConfigMap and objects ferry never applied; another namespace with
    objects of the same names, one of them even carrying this plan's label."""

    def obj(api: str, kind: str, name: str, namespace: str | None, labels: dict | None = None, **body) -> dict:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        meta.update({"labels": labels} if labels else {})
        return {"apiVersion": api, "kind": kind, "metadata": meta, **body}

    deployment = {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "x", "image": "x:1"}]}},
    }
    for seeded in (
        obj("v1", "Namespace", ns, None),
        obj("v1", "Namespace", other, None),
        obj("v1", "ConfigMap", "trainer-config", ns, data={"EPOCHS": "5"}),
        obj("v1", "ConfigMap", "theirs", ns, data={"K": "v"}),
        obj("apps/v1", "Deployment", "someone-elses", ns, spec=deployment),
        obj("v1", "ConfigMap", "other-plan", ns, {"ferry.io/plan": "other-plan"}, data={"K": "v"}),
        obj("v1", "ConfigMap", "trainer-config", other, data={"EPOCHS": "1"}),
        obj("apps/v1", "Deployment", "trainer", other, spec=deployment),
        obj("v1", "ServiceAccount", "trainer", other),
        obj("v1", "ConfigMap", "labelled", other, {"ferry.io/plan": "manifests-blast"}, data={"K": "v"}),
    ):
        plane.seed(seeded)
    for namespace in (ns, other):
        plane.wait(f"default ServiceAccount of {namespace}", lambda n=namespace: plane.get("v1", "ServiceAccount",
                                                                                           "default", n))  # fmt: skip


def _objects(plane, namespaces: tuple[str, ...]) -> dict[str, dict]:
    """What people made in the namespaces (not what the cluster made in each), by Kind/namespace/name."""
    found = {f"Namespace//{n}": plane.get("v1", "Namespace", n) for n in namespaces if plane.get("v1", "Namespace", n)}
    for namespace in namespaces:
        for api_version, kind in _KINDS:
            for item in plane.resource(api_version, kind).get(namespace=namespace).to_dict()["items"]:
                if item["metadata"]["name"] not in ("kube-root-ca.crt", "default"):
                    found[f"{kind}/{namespace}/{item['metadata']['name']}"] = {**item, "kind": kind}
    return found


def _written_by_ferry(obj: dict) -> bool:
    return any(entry["manager"] == "ferry" for entry in obj["metadata"].get("managedFields") or [])


def test_manifests_rollback_touches_only_what_the_run_applied(control_plane, tmp_path) -> None:
    import uuid

    from ferry.manifests.apply import restorable

    ns, other = f"blast-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    try:
        _cluster_before(control_plane, ns, other)
        before = _objects(control_plane, (ns, other))
        (tmp_path / "k8s").mkdir()
        (tmp_path / "k8s" / "app.yaml").write_text(MANIFESTS)
        control_plane.kubeconfig(tmp_path / "kubeconfig", context="blast")
        plan = tmp_path / "migration.yaml"
        plan.write_text(
            "name: manifests-blast\nsource: {storage: ./src}\n"
            "target: {storage: ./dst, profile: meta-compute,\n"
            f"  cluster: {{context: blast, namespace: {ns}, kubeconfig: kubeconfig}}}}\n"
            f"phases:\n  manifests: {{sources: [k8s/], namespaces: {{ml-train: {ns}}}}}\n"
            "gates:\n  manifests: {rollout_timeout_s: 60}\n"
        )
        phase = open_phase(load_plan(plan), "manifests")
        audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
        for step in phase.steps():
            phase.run(step, audit, Reporter())
        named = {f"ServiceAccount/{ns}/trainer", f"ConfigMap/{ns}/trainer-config", f"Deployment/{ns}/trainer"}
        applied = _objects(control_plane, (ns, other))
        assert named <= set(applied) and applied[f"ConfigMap/{ns}/trainer-config"]["data"] == {"EPOCHS": "10"}
        # Applying wrote to nothing the plan does not name.
        assert not [k for k, v in applied.items() if k not in named and _written_by_ferry(v)]

        phase.rollback(audit)
        after = _objects(control_plane, (ns, other))
        # What it created is gone, what it changed is as it was, and everything else was never written to.
        assert set(after) == set(before)
        assert {k: restorable(v) for k, v in after.items() if k.startswith(("ConfigMap", "Namespace"))} == {
            k: restorable(v) for k, v in before.items() if k.startswith(("ConfigMap", "Namespace"))
        }
        assert not [k for k, v in after.items() if k not in named and _written_by_ferry(v)]
    finally:
        for namespace in (ns, other):
            control_plane.delete_namespace(namespace)


# -- the go-live checkpoint: written under its own prefix, and only that is cleaned up -----------------------


def test_golive_checkpoint_cleanup_removes_only_its_own_prefix(moto_env, tmp_path) -> None:
    s3, bucket = moto_env.client("s3"), "blast-golive"
    shard = "model-00001-of-00002.bin"
    seed_bucket(s3, bucket, {
        "data/golive/ckpt": b"an object named as the checkpoint prefix",
        f"data/golive/ckpt-old/{shard}": b"a sibling prefix, the same shard name",
        f"data/golive/ckpt/other-run/{shard}": b"another run's folder under the prefix",
        "data/golive/ckptx.bin": b"shares the string prefix",
        "data/a/one.bin": b"the migrated data",
        f"golive/ckpt/r1/{shard}": b"the same path outside target.storage",
    })  # fmt: skip
    (tmp_path / "src").mkdir()
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        f"name: golive-blast\nsource: {{storage: ./src}}\ntarget: {{storage: 's3://{bucket}/data', "
        "profile: meta-compute, kubernetes_version: '1.30'}\n"
        "phases:\n  golive: {gpu_probe: false, checkpoint: {size: 64K, shards: 2, prefix: golive/ckpt/, threads: 2}}\n"
    )
    before = bucket_listing(s3, bucket)
    phase = open_phase(load_plan(plan), "golive")
    audit = AuditFolder(tmp_path / ".ferry" / "runs" / "r1")
    phase.run("checkpoint", audit, Reporter())
    measured = json.loads((audit.root / "golive" / "checkpoint.json").read_text())["result"]
    assert measured["read_gb_per_s"] is not None and "deleted 2 object(s)" in measured["cleanup"], measured
    assert bucket_listing(s3, bucket) == before

    # A crashed run left shards under its journalled folder: rollback removes those, and nothing around them.
    url = json.loads((audit.root / "golive" / "checkpoint-target.json").read_text())["url"]
    folder = url.removeprefix(f"s3://{bucket}/").rstrip("/")
    assert folder.startswith("data/golive/ckpt/r1-"), url
    s3.put_object(Bucket=bucket, Key=f"{folder}/{shard}", Body=b"left by a crash")
    (audit.root / "golive" / "checkpoint-cleaned.json").unlink()  # a crashed run never marks its clean-up done
    for neighbour in (folder, f"{folder}0/{shard}", f"{folder}-old/{shard}"):
        s3.put_object(Bucket=bucket, Key=neighbour, Body=b"not this run's")
    crashed = bucket_listing(s3, bucket)
    assert "deleted 1 object(s)" in phase.rollback(audit).text
    assert bucket_listing(s3, bucket) == {k: v for k, v in crashed.items() if k != f"{folder}/{shard}"}


# -- what a phase publishes in a state directory two plans share ----------------------------------------------


def test_plans_sharing_a_state_directory_publish_their_own_bindings_and_roll_back_only_theirs(tmp_path) -> None:
    from tests.flows.test_iam_phase import write_two_phase_plan

    text = write_two_phase_plan(tmp_path, "plan-a").read_text()
    plans = {"plan-a": tmp_path / "plan-a.yaml", "plan-b": tmp_path / "plan-b.yaml"}
    plans["plan-a"].write_text(text)
    plans["plan-b"].write_text(text.replace("name: plan-a", "name: plan-b").replace("ml-training", "team-b"))
    phases = {name: open_phase(load_plan(path), "iam") for name, path in plans.items()}
    audits = {name: AuditFolder(tmp_path / ".ferry" / "runs" / f"{name}-r1") for name in plans}
    for name in ("plan-a", "plan-b"):
        for step in phases[name].steps():
            phases[name].run(step, audits[name], Reporter())
    published = {name: StateLayout(tmp_path / ".ferry").bindings(name) for name in plans}
    theirs = published["plan-b"].read_text()
    assert "namespace: team-b" in theirs and "ml-training" not in theirs
    assert published["plan-a"].read_text() == (audits["plan-a"].root / "iam" / "rbac.yaml").read_text()

    # plan-a's rollback removes plan-a's bindings (it replaced none) and leaves plan-b's as they are.
    assert phases["plan-a"].rollback(audits["plan-a"]).failed == 0
    assert not published["plan-a"].exists() and published["plan-b"].read_text() == theirs

    # A later run of plan-b publishes over its first: rolling the first back leaves the later one's bindings.
    plans["plan-b"].write_text(plans["plan-b"].read_text().replace("team-b", "team-b2"))
    later = AuditFolder(tmp_path / ".ferry" / "runs" / "plan-b-r2")
    phase = open_phase(load_plan(plans["plan-b"]), "iam")
    for step in phase.steps():
        phase.run(step, later, Reporter())
    newer = published["plan-b"].read_text()
    assert "namespace: team-b2" in newer
    undo = phases["plan-b"].rollback(audits["plan-b"])
    assert undo.items == [f"leave {published['plan-b']}: it no longer holds the bindings run plan-b-r1 published"]
    assert published["plan-b"].read_text() == newer
