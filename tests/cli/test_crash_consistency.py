"""Crash consistency: `ferry run` of a whole pipeline (iam, data_sync, images, manifests, golive) killed with
SIGKILL at 20 points spread over it, each the process's own event (a failpoint), each rerun taking over the dead
run's lock and resuming; the final state equals an uninterrupted run's: the same target objects and checksums,
the same published bindings, the same digest map, the same rendered manifests (digests masked), nothing left
behind (no extra object, no open upload).

The points, in pipeline order (each run arms the next; a rerun redoes what did not commit, so the next point is
reached): see POINTS.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
from pathlib import Path

from ferry.images.oci import Registry
from ferry.images.reference import Reference
from ferry.layout import StateLayout
from tests.support import Watched, buildah, busybox_image, run_ferry, start_registry

POINTS = [
    "iam:published", "iam:step", "iam:gate", "iam:commit",
    "transfer:part", "transfer:state-write", "data_sync:step", "data_sync:gate", "data_sync:commit",
    "images:pushed", "images:step", "images:gate", "images:commit",
    "manifests:mid-wave", "manifests:step", "manifests:gate", "manifests:commit",
    "golive:checkpoint", "golive:step", "golive:gate",
]  # fmt: skip
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "iam"
PLAN = """\
name: crash
source:
  storage: ./src
  registry: 127.0.0.1:{src}/ml
  iam:
    aws: {{export: iam/aws-authorization-details.json}}
    azure_export: iam/azure-role-assignments.json
    azure_role_definitions: iam/azure-role-definitions.json
    ldif: iam/groups.ldif
target:
  storage: "moto://{bucket}/p"
  registry: 127.0.0.1:{tgt}/ai
  profile: meta-compute
  kubernetes_version: "1.30"
  cluster: {{context: meta-eu, namespace: {ns}, kubeconfig: kubeconfig}}
profiles:
  moto: {{type: s3, endpoint_url: "{endpoint}", min_part_size: 262144}}
phases:
  iam:
    namespace: {ns}
    ldap_groups: {{ml-engineers: write, data-readers: read, gpu-oncall: admin}}
    overrides:
      {{aws:role/ci-runner: compute-operator, aws:role/build-bot: none, azure:service/platform-automation: none}}
  data_sync: {{threads: 4, part_size: 256K, multipart_threshold: 1M}}
  images: {{copy: ["tool:1", "eval:*"]}}
  manifests:
    sources: [k8s/]
    namespaces: {{ml-train: {ns}}}
  golive:
    checkpoint: {{size: 1M, shards: 2, threads: 2, prefix: golive/ckpt/}}
    gpu_probe: false
gates:
  golive: {{checkpoint_write_gb_per_s: 1e-9, checkpoint_read_gb_per_s: 1e-9}}
retries: {{attempts: 0, delay_s: 0}}
"""
MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: trainer-config, namespace: ml-train}
data: {EPOCHS: "10"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: trainer, namespace: ml-train}
---
apiVersion: v1
kind: Service
metadata: {name: trainer, namespace: ml-train}
spec:
  selector: {app: trainer}
  ports: [{port: 8080}]
"""


def setup(root: Path, moto_env, plane, bucket: str) -> tuple[Path, dict]:
    """A plan of all five phases under root, against a fresh bucket, two fresh registries and a fresh namespace of
    the control plane."""
    source, target = start_registry(), start_registry()
    busybox_image(root / "buildah", "tool", "amd64", ["CUDA_VERSION=12.2.0"])
    for ref in ("ml/tool:1", "ml/eval:1", "ml/eval:2"):
        buildah(root / "buildah", "push", "--tls-verify=false", "tool", f"docker://127.0.0.1:{source.port}/{ref}")
    shutil.copytree(EXAMPLES, root / "iam")
    (root / "k8s").mkdir()
    (root / "k8s" / "app.yaml").write_text(MANIFESTS)
    ns = plane.namespace("crash")
    plane.kubeconfig(root / "kubeconfig", context="meta-eu")
    for i in range(12):
        (root / "src" / "small" / f"{i:02d}.bin").parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / "small" / f"{i:02d}.bin").write_bytes(hashlib.sha256(b"%d" % i).digest() * (40 * i + 1))
    (root / "src" / "model.pt").write_bytes(hashlib.sha256(b"model").digest() * (3 << 15))  # 3 MiB: 12 parts
    moto_env.client("s3").create_bucket(Bucket=bucket)
    plan = root / "migration.yaml"
    plan.write_text(PLAN.format(src=source.port, tgt=target.port, bucket=bucket, endpoint=moto_env.endpoint, ns=ns))
    hosts = {"source": f"127.0.0.1:{source.port}", "target": f"127.0.0.1:{target.port}", "ns": ns}
    return plan, {"servers": (source, target), "bucket": bucket, "registries": hosts, "namespace": ns}


# What the run applies (the manifests and the iam phase's bindings), and what the cluster makes in every namespace.
_APPLIED = (("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("v1", "Service"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"))  # fmt: skip
_EVERY_NAMESPACE = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}


def final_state(root: Path, moto_env, ends: dict, plane) -> dict:
    """What a run leaves, with what differs between two setups by construction (ports, run ids) masked."""
    client = moto_env.client("s3")
    bucket = ends["bucket"]
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads"), "an upload was left open"
    objects = {
        o["Key"]: hashlib.md5(client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()).hexdigest()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    }
    state = root / ".ferry"

    def mask(text: str) -> str:
        for role, host in ends["registries"].items():
            text = text.replace(host, f"<{role}>")
        text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<digest>", text)
        return re.sub(r"migration-\d{8}-\d{6}-\d{3}", "<run>", text)

    # The images were built for each setup (their digests differ between setups); within one, each copy holds
    # its source's digest, on both registries.
    digests = json.loads(StateLayout(state).digest_map("crash").read_text())
    for record in digests["images"]:
        for ref in (record["source"], record["target"]):
            parsed = Reference.parse(ref)
            assert Registry(parsed.host, insecure=True).digest(parsed.repository, parsed.ref) == record["digest"], ref
    bundle = sorted((state / "runs").glob("*/manifests/bundle.yaml"))[-1]  # what the newest run rendered
    cluster = sorted(
        (kind, item["metadata"]["name"])
        for api_version, kind in _APPLIED
        for item in plane.resource(api_version, kind).get(namespace=ends["namespace"]).to_dict()["items"]
        if (kind, item["metadata"]["name"]) not in _EVERY_NAMESPACE
    )
    return {
        "objects": objects,
        "bindings": mask(StateLayout(state).bindings("crash").read_text()),
        "digest map": json.loads(mask(json.dumps(digests, sort_keys=True))),
        "rendered": mask(bundle.read_text()),
        "cluster": cluster,
    }


def test_kill_9_at_20_points_then_the_reruns_end_where_an_uninterrupted_run_does(
    prefect_api, moto_env, control_plane, tmp_path
) -> None:
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    plan, ends = setup(reference, moto_env, control_plane, "crash-reference")
    try:
        code, _, err = run_ferry("run", str(plan), api=prefect_api)
        assert code == 0, err[-3000:]
        expected = final_state(reference, moto_env, ends, control_plane)
    finally:
        for server in ends["servers"]:
            server.stop()
        control_plane.delete_namespace(ends["namespace"])

    killed = []
    plan, ends = setup(crashed, moto_env, control_plane, "crash-killed")
    try:
        for point in POINTS:
            run = Watched("run", str(plan), api=prefect_api, env={"FERRY_FAILPOINTS": point})
            reached = run.wait_for(f"ferry failpoint: {point}")
            code, _, err = run.finish(signal.SIGKILL if reached else None)
            assert reached and code == -signal.SIGKILL, (point, code, err[-3000:])
            killed.append(point)
        code, out, err = run_ferry("run", str(plan), api=prefect_api)
        assert code == 0, err[-3000:]
        assert "took over the lock of run migration-" in err, "the last kill's lock was stale, and said so"
        assert final_state(crashed, moto_env, ends, control_plane) == expected
    finally:
        for server in ends["servers"]:
            server.stop()
        control_plane.delete_namespace(ends["namespace"])
