"""deploy/k8s/ and the work pool's Job template (deploy/work-pool.json) held to what Kubernetes and Dask do with them.

Every object is valid against Kubernetes' strict schemas, at the test control plane's version (a field Kubernetes
does not know fails, as a bad edit would); kustomize builds the folder as an ops team's overlay names it (its
namespace, its image) and the control plane's own kubectl applies it server-side; the API server admits every pod
under Pod Security "restricted", the Deployments become Available on kwok's nodes, the worker's ServiceAccount may do
what prefect-kubernetes does and nothing more, and a flow run's Job rendered from the pool's template runs there with
the labels the NetworkPolicies select. The Dask commands and TLS settings of the manifests run for real on this
machine, with certificates deploy/dask-certs.sh makes: a client with the cluster CA's certificate gets a task run, one
with another CA's, or plain tcp://, does not.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from checks.kube_schema import schema_errors
from tests.controlplane.cluster import ControlPlane
from tests.support import FERRY, ROOT, _wait_port, free_port

K8S = ROOT / "deploy" / "k8s"
WORK_POOL = ROOT / "deploy" / "work-pool.json"
DASK_CERTS = ROOT / "deploy" / "dask-certs.sh"
KUBERNETES = tomllib.loads((ROOT / "tests" / "controlplane" / "sources.toml").read_text())["kubernetes"]["version"]
IMAGE = "127.0.0.1:5000/ml-platform/ferry-worker:test"
# The pool's default image: a placeholder, the deployment's own (`ferry deploy --image`) replaces it.
WORK_POOL_IMAGE = "registry.example.com/ml-platform/ferry-worker:0.1.0"
DASK = str(Path(sys.executable).with_name("dask"))
# The fields prefect-kubernetes demands in a Job template's pod spec (its _get_base_job_manifest), which no pod spec
# has: the API server drops them with a warning. Everything else is held to the strict schema.
PREFECT_KUBERNETES_EXTRAS = ("parallelism", "completions")


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> dict[str, list[dict]]:
    """Each manifest file of deploy/k8s (the kustomization aside) and its objects."""
    return {path.name: documents(path) for path in sorted(K8S.glob("*.yaml")) if path.name != "kustomization.yaml"}


def objects(kind: str) -> list[dict]:
    return [doc for docs in manifests().values() for doc in docs if doc["kind"] == kind]


def flow_run_job(**job_variables: object) -> dict:
    """The Job a worker of the pool renders from deploy/work-pool.json, by Prefect's own templating (the variables'
    defaults, then the deployment's job variables), less the fields prefect-kubernetes demands that no pod has."""
    from prefect.utilities.templating import apply_values
    from prefect.workers.base import BaseJobConfiguration

    template = json.loads(WORK_POOL.read_text())
    values = BaseJobConfiguration._get_base_config_defaults(template["variables"]["properties"])
    values.update(job_variables)
    job = apply_values(template["job_configuration"], values)["job_manifest"]
    pod = job["spec"]["template"]["spec"]
    assert all(pod.pop(field) == 1 for field in PREFECT_KUBERNETES_EXTRAS), pod
    return job


def test_every_manifest_and_the_flow_run_job_are_valid_against_the_strict_schemas() -> None:
    found = manifests()
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(found), "kustomization.yaml lists every manifest, no more"
    kinds = sorted(doc["kind"] for docs in found.values() for doc in docs)
    assert kinds == sorted(["Namespace", "ConfigMap", "ConfigMap", "ServiceAccount", "Role", "RoleBinding",
                            "Deployment", "Deployment", "Deployment", "Service", "PersistentVolumeClaim",
                            "NetworkPolicy", "NetworkPolicy"])  # fmt: skip
    for name, docs in found.items():
        for doc in docs:
            assert schema_errors(doc, KUBERNETES) == [], f"{name}: {doc['kind']} {doc['metadata']['name']}"
    assert schema_errors(flow_run_job(name="migrate-nightly"), KUBERNETES) == []
    # The workers (and a plan's runner address, deploy/README.md) reach the scheduler by its Service.
    (service,) = objects("Service")
    address = f"tls://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert address == "tls://ferry-dask-scheduler:8786"
    assert address in _command("dask-worker.yaml", {})

    # Every pod runs the worker image, as no root, unable to gain privileges, with requests and limits.
    flow_run = flow_run_job()["spec"]["template"]["spec"]
    pods = [doc["spec"]["template"]["spec"] for doc in objects("Deployment")] + [flow_run]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        for container in pod["containers"]:
            assert container["image"] == ("ferry-worker" if pod is not flow_run else WORK_POOL_IMAGE)
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert set(container["resources"]) == {"requests", "limits"}


def test_a_bad_edit_fails_the_strict_validation() -> None:
    (worker,) = [doc for doc in documents(K8S / "dask-worker.yaml") if doc["kind"] == "Deployment"]
    typo = copy.deepcopy(worker)
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")  # a field Kubernetes does not know
    assert schema_errors(typo, KUBERNETES) == [
        "spec.template.spec.containers.0: Additional properties are not allowed ('resource' was unexpected)"
    ]
    wrong = copy.deepcopy(worker)
    wrong["spec"]["replicas"] = "two"
    assert schema_errors(wrong, KUBERNETES) == ["spec.replicas: 'two' is not of type 'integer', 'null'"]


def certificates(folder: Path) -> Path:
    """The Secret ferry-dask-tls's three files as deploy/dask-certs.sh makes them (a CA of its own and a certificate
    it signed), in folder as the Secret's volume shows them; the CA's key kept apart, as the script says."""
    subprocess.run([str(DASK_CERTS), str(folder)], check=True, capture_output=True, timeout=60)
    (folder / "ca.key").rename(folder.with_name(f"{folder.name}-ca.key"))
    return folder


@pytest.fixture
def dask_tls(tmp_path: Path) -> Path:
    return certificates(tmp_path / "dask-tls")


@pytest.fixture
def state_volume(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """A volume for the claim ferry-state of the namespace (the control plane provisions none), removed after."""
    name = f"ferry-state-{namespace}"
    control_plane.seed({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "hostPath": {"path": "/var/lib/ferry"}, "claimRef": {"namespace": namespace, "name": "ferry-state"}},
    })  # fmt: skip
    yield name
    control_plane.resource("v1", "PersistentVolume").delete(name=name)


def _available(plane: ControlPlane, namespace: str, name: str) -> bool:
    deployment = plane.get("apps/v1", "Deployment", name, namespace) or {}
    status = deployment.get("status", {})
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return conditions.get("Available") == "True" and status.get("availableReplicas") == deployment["spec"]["replicas"]


def test_the_manifests_apply_and_run_on_a_cluster(
    control_plane: ControlPlane, namespace: str, state_volume: str, dask_tls: Path, tmp_path: Path
) -> None:
    plane, ns = control_plane, namespace
    # What the operator creates first: the Dask cluster's certificates, the plan.
    plane.seed({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ferry-dask-tls", "namespace": ns},
                "stringData": {p.name: p.read_text() for p in dask_tls.iterdir()}})  # fmt: skip
    plane.seed({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ferry-plan", "namespace": ns},
                "data": {"migration.yaml": "name: nightly\n"}})  # fmt: skip
    # An ops team's overlay: the folder as it is, with their namespace and the image they pushed.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    name, tag = IMAGE.rsplit(":", 1)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(K8S, overlay)], "namespace": ns,
        "images": [{"name": "ferry-worker", "newName": name, "newTag": tag}],
    }))  # fmt: skip
    applied = plane.kubectl("apply", "--server-side", "-k", str(overlay))
    assert applied.count("serverside-applied") == sum(len(docs) for docs in manifests().values()), applied

    for deployment in ("ferry-prefect-worker", "ferry-dask-scheduler", "ferry-dask-worker"):
        plane.wait(f"deployment {deployment} available", lambda d=deployment: _available(plane, ns, d), timeout=90)
    pods = plane.core().list_namespaced_pod(ns, label_selector="app.kubernetes.io/name=ferry").items
    assert sorted(p.metadata.labels["app.kubernetes.io/component"] for p in pods) == [
        "dask-scheduler", "dask-worker", "dask-worker", "prefect-worker"
    ]  # fmt: skip
    assert {c.image for p in pods for c in p.spec.containers} == {IMAGE}
    assert plane.get("v1", "PersistentVolumeClaim", "ferry-state", ns)["status"]["phase"] == "Bound"
    labels = plane.get("v1", "Namespace", ns)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The label is in force: a pod that could run as root is refused in the namespace.
    with pytest.raises(Exception, match="violates PodSecurity"):
        plane.seed({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rooted", "namespace": ns},
                    "spec": {"containers": [{"name": "c", "image": IMAGE}]}})  # fmt: skip

    # The worker's ServiceAccount may do what prefect-kubernetes does, in this namespace only.
    account = f"system:serviceaccount:{ns}:ferry-prefect-worker"

    def may(verb: str, resource: str, where: str = ns) -> bool:
        done = subprocess.run(
            [str(plane.bin / "kubectl"), "--kubeconfig", str(plane.kubeconfig(tmp_path / "admin.kubeconfig")),
             "auth", "can-i", verb, resource, "--as", account, "-n", where],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout.strip() == "yes"

    for verb, resource in [("create", "jobs.batch"), ("watch", "jobs.batch"), ("delete", "jobs.batch"),
                           ("list", "pods"), ("watch", "pods"), ("get", "pods/log"), ("create", "events")]:  # fmt: skip
        assert may(verb, resource), (verb, resource)
    for verb, resource, where in [("get", "secrets", ns), ("create", "pods", ns), ("create", "jobs.batch", "default"),
                                  ("list", "pods", "default"), ("list", "nodes", ns)]:  # fmt: skip
        assert not may(verb, resource, where), (verb, resource, where)

    # A flow run's Job as the pool's worker renders it: admitted under "restricted", run to completion by the Job
    # controller and kwok, its pod labelled as the scheduler's NetworkPolicy lets in.
    job = flow_run_job(namespace=ns, image=IMAGE, name="migrate-nightly")
    job["metadata"]["name"] = job["metadata"].pop("generateName") + "1"
    plane.seed(job)
    plane.wait("the flow run's Job complete", lambda: (plane.get("batch/v1", "Job", job["metadata"]["name"], ns)
                                                       or {}).get("status", {}).get("succeeded") == 1)  # fmt: skip
    policy = plane.get("networking.k8s.io/v1", "NetworkPolicy", "ferry-dask-scheduler", ns)
    admitted = [rule["podSelector"]["matchLabels"] for rule in policy["spec"]["ingress"][0]["from"]]
    selector = ",".join(f"{k}={v}" for k, v in admitted[0].items())
    (flow_run,) = plane.core().list_namespaced_pod(ns, label_selector=f"job-name={job['metadata']['name']}").items
    selected = plane.core().list_namespaced_pod(ns, label_selector=selector).items
    assert [pod.metadata.name for pod in selected] == [flow_run.metadata.name]

    # The API server's own strict field validation refuses the same bad edit the schema check does.
    (worker,) = [d for d in documents(K8S / "dask-worker.yaml") if d["kind"] == "Deployment"]
    worker["metadata"]["namespace"] = ns
    worker["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(worker))
    with pytest.raises(RuntimeError, match=r'containers\[name="dask-worker"\]\.resource: field not declared in schema'):
        plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(bad))


def _command(manifest: str, replace: dict[str, str]) -> list[str]:
    """The Dask container's command of a manifest, with this machine's addresses, ports and folders put in."""
    (deployment,) = [d for d in documents(K8S / manifest) if d["kind"] == "Deployment"]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return [DASK if word == "dask" else replace.get(word, word) for word in command]


def _dask_env(folder: Path, **extra: str) -> dict[str, str]:
    """The ConfigMap ferry-dask-tls's settings, its certificate paths pointing into folder."""
    (config,) = [c for c in objects("ConfigMap") if c["metadata"]["name"] == "ferry-dask-tls"]
    settings = {k: v.replace("/etc/ferry/dask-tls", str(folder)) for k, v in config["data"].items()}
    base = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return {**base, **settings, **extra}


CLIENT = """
import sys
from distributed import Client
with Client(sys.argv[1], timeout="10s") as client:
    client.wait_for_workers(1, timeout=60)
    print(client.submit(sum, [1, 2, 3]).result(), client.scheduler.address.split("://")[0])
"""


def _client(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLIENT, address], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@contextlib.contextmanager
def _dask_cluster(dask_tls: Path, folder: Path, env: dict[str, str], hide: Path | None = None) -> Iterator[int]:
    """The manifests' scheduler (on loopback only: --host) and one worker, as their containers start them, with the
    settings of env; the worker in a mount namespace of its own where `hide` is an empty folder (what a worker on
    another machine sees of the driver's disk). Yields the scheduler's port; both are ended after."""
    port, worker_port, nanny_port = free_port(), free_port(), free_port()
    scheduler = _command("dask-scheduler.yaml", {"8786": str(port)}) + ["--host", "127.0.0.1"]
    worker = _command("dask-worker.yaml", {
        "tls://ferry-dask-scheduler:8786": f"tls://127.0.0.1:{port}", "8788": str(worker_port),
        "8789": str(nanny_port), "$(POD_NAME)": "ferry-dask-worker-test", "/tmp/dask": str(folder / "dask"),
    })  # fmt: skip
    if hide is not None:
        worker = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs hidden "$0" && exec "$@"', str(hide), *worker]
    procs = []
    try:
        for name, command, listens in (("scheduler", scheduler, port), ("worker", worker, worker_port)):
            with open(folder / f"{name}.log", "wb") as log:
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))  # fmt: skip
            _wait_port(listens, procs[-1], f"dask {name}", timeout=60)
        yield port
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_dask_cluster_speaks_mutual_tls_only(dask_tls: Path, tmp_path: Path) -> None:
    env = _dask_env(dask_tls)
    with _dask_cluster(dask_tls, tmp_path, env) as port:
        done = _client(f"tls://127.0.0.1:{port}", env)
        assert done.returncode == 0 and done.stdout.split() == ["6", "tls"], done.stderr[-3000:]

        # A client whose certificate another CA signed (the script run again) is refused by the scheduler.
        rogue = certificates(tmp_path / "another-ca")
        refused = _client(f"tls://127.0.0.1:{port}", _dask_env(
            dask_tls, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT=str(rogue / "tls.crt"),
            DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY=str(rogue / "tls.key"),
        ))  # fmt: skip
        # The handshake fails on the scheduler's side: its alert, or its hanging up, as the client's SSL error.
        assert refused.returncode != 0 and re.search(r"SSL\w*Error", refused.stderr), refused.stderr[-3000:]
        # Plain tcp:// is refused at both ends: by a client under these settings, and by the scheduler to any other.
        plain = _client(f"tcp://127.0.0.1:{port}", env)
        assert plain.returncode != 0 and "encryption required by Dask configuration" in plain.stderr, plain.stderr
        bare = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        unencrypted = _client(f"tcp://127.0.0.1:{port}", {**bare, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"})
        assert unencrypted.returncode != 0 and "CommClosedError" in unencrypted.stderr, unencrypted.stderr[-3000:]


def _ferry(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FERRY, *args], env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def test_a_plan_s_shards_run_on_a_worker_that_sees_none_of_the_driver_s_disk(
    dask_tls: Path, tmp_path: Path, prefect_api: str, moto_env
) -> None:
    """`runner: {dask: {address: tls://...}}` on the manifests' scheduler and worker, the worker in a mount namespace
    where the plan's folder (its state directory, the run's audit folder) is empty, as on another machine: the shards
    keep their state and journals in state_url (a moto bucket), the driver gates the run and rolls it back from
    there."""
    s3 = moto_env.client("s3")
    for bucket in ("remote-src", "remote-dst", "remote-state"):
        s3.create_bucket(Bucket=bucket)
    data = {f"{shard}/{i}.bin": os.urandom(1000 + i) for shard in "ab" for i in range(4)}
    for key, body in data.items():
        s3.put_object(Bucket="remote-src", Key=key, Body=body)
    driver = tmp_path / "driver"
    driver.mkdir()
    plan = driver / "migration.yaml"
    plan.write_text(
        "name: remote\nsource: {storage: 'moto://remote-src'}\ntarget: {storage: 'moto://remote-dst'}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{moto_env.endpoint}'}}}}\n"
        "phases:\n  data_sync:\n    shards: [a/, b/]\n    state_url: 'moto://remote-state/ferry'\n"
        "    runner: {dask: {address: 'tls://127.0.0.1:PORT'}}\nretries: {attempts: 1, delay_s: 0}\n"
    )
    env = _dask_env(dask_tls, PREFECT_API_URL=prefect_api, PYTHONPATH=str(ROOT))
    with _dask_cluster(dask_tls, tmp_path, env, hide=driver) as port:
        plan.write_text(plan.read_text().replace("PORT", str(port)))
        done = _ferry(env, "run", str(plan))
        told = (done.stdout + done.stderr)[-3000:] + (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
        assert done.returncode == 0 and "data_sync PASS" in done.stdout, told
    copied = {o["Key"] for o in s3.list_objects_v2(Bucket="remote-dst")["Contents"]}
    assert copied == set(data)
    (run,) = (driver / ".ferry" / "runs").iterdir()
    summary = json.loads((run / "data_sync" / "summary.json").read_text())
    # Each shard ran on the worker (another process than the driver's), in a folder of its own.
    assert {s["details"]["ran_on"].split(":")[1] for s in summary} != {str(os.getpid())}
    stored = {o["Key"] for o in s3.list_objects_v2(Bucket="remote-state")["Contents"]}
    assert {f"ferry/runs/{run.name}/data_sync/created-{shard}.jsonl" for shard in "ab"} <= stored, stored
    # The worker wrote nothing into the run's audit folder (its shards' progress gauges stayed in its own); the
    # journals came back from state_url, and the rollback deletes what the run created.
    assert not list((run / "data_sync").glob("progress-*")), sorted(p.name for p in (run / "data_sync").iterdir())
    assert (run / "data_sync" / "created-a.jsonl").exists()
    undone = _ferry(env, "rollback", str(plan), "--phase", "data_sync", "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert s3.list_objects_v2(Bucket="remote-dst").get("Contents", []) == []
