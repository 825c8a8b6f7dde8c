"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok managing fake GPU nodes, on free loopback ports, built by tests/controlplane/build.py.

The API server serves TLS and authenticates client certificates, as a real kubeconfig names them (and one static
bearer token), with RBAC authorization on (`Node,RBAC`). `kubeconfig()` writes one for the cluster's administrator
(system:masters) or for any user and groups, whose access is then only what RBAC grants. Controllers are real: a
Deployment gets its ReplicaSet and Pods, the scheduler binds them to the kwok nodes, and kwok turns them Running and
Ready (and a Job's pods Succeeded) without containers. What no component here does: run containers, serve pod logs
or exec, provision volumes (a claim stays Pending), or serve metrics.k8s.io (an HPA reads no utilisation).
"""

from __future__ import annotations

import base64
import datetime
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane import build
from tests.support import free_port

ADMIN = "ferry-admin"
TOKEN_USER = "ferry-token"
# The fake nodes: each with 8 GPUs and the labels NVIDIA's GPU feature discovery puts on such a node.
GPU_NODES = 6
GPUS_PER_NODE = 8
DRIVER = "570.124.06"
_NODE_LABEL = "ferry.test/kwok"


@dataclass
class _Identity:
    cert: bytes
    key: bytes


@dataclass
class _Pki:
    """A cluster CA and what it signs: the API server's serving certificate, client certificates, the service
    account signing key."""

    folder: Path
    ca_cert: bytes = b""
    _ca_key: Any = None
    issued: dict[tuple[str, tuple[str, ...]], _Identity] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import NameOID

        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferry-test-ca")])
        now = datetime.datetime.now(datetime.UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_cert = ca.public_bytes(serialization.Encoding.PEM)
        self._write("ca.crt", self.ca_cert)
        serving = self._sign("kube-apiserver", (), server=True)
        self._write("apiserver.crt", serving.cert)
        self._write("apiserver.key", serving.key)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._write(
            "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def _write(self, name: str, data: bytes) -> None:
        (self.folder / name).write_bytes(data)
        (self.folder / name).chmod(0o600)

    def _sign(self, user: str, groups: tuple[str, ...], *, server: bool = False) -> _Identity:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        )
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferry-test-ca")]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc")]
                    + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.96.0.1")]
                ),
                critical=False,
            )
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return _Identity(
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )

    def identity(self, user: str, groups: tuple[str, ...] = ()) -> _Identity:
        if (user, groups) not in self.issued:
            self.issued[(user, groups)] = self._sign(user, groups)
        return self.issued[(user, groups)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ControlPlane:
    """One control plane, started by `start()` (or as a context manager) and stopped by `stop()`."""

    def __init__(self, gpu_nodes: int = GPU_NODES, *, kubelet_by_test: str = "") -> None:
        """gpu_nodes: how many kwok GPU nodes to make; kubelet_by_test: a label selector of pods whose status kwok
        leaves alone, for the test to write as their kubelet would (how their containers end, what they print)."""
        self.gpu_nodes = gpu_nodes
        self.kubelet_by_test = kubelet_by_test
        self.bin = build.build()
        self.work = Path(
            tempfile.mkdtemp(prefix="ferry-controlplane-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
        )
        self.pki = _Pki(self.work)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.started_s = 0.0
        # A static bearer token the API server also takes, as a kubeconfig from a cloud's console carries one: the
        # cluster's administrator (kubeconfig(token=True)).
        self.token = secrets.token_urlsafe(32)
        (self.work / "tokens.csv").write_text(f'{self.token},{TOKEN_USER},{TOKEN_USER},"system:masters"\n')

    # -- life cycle -------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it until stopped
        proc = subprocess.Popen(
            [str(self.bin / name), *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self._procs.append((name, proc))
        return proc

    def _until(self, what: str, ready: Any, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs:
                if proc.poll() is not None:
                    tail = (self.work / f"{name}.log").read_text(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(f"{name} exited with {proc.returncode}: " + " | ".join(tail))
            try:
                if ready():
                    return
            except Exception:  # noqa: BLE001 - not up yet, whatever it answers
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the control plane's {what} was not ready within {timeout:g} s (logs in {self.work})")

    def start(self) -> None:
        started = time.monotonic()
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            "--data-dir", str(self.work / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        )  # fmt: skip
        self._spawn(
            "kube-apiserver",
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.port),
            "--tls-cert-file", self.pki.path("apiserver.crt"), "--tls-private-key-file", self.pki.path("apiserver.key"),
            "--client-ca-file", self.pki.path("ca.crt"), "--token-auth-file", str(self.work / "tokens.csv"),
            "--service-account-key-file", self.pki.path("sa.pub"),
            "--service-account-signing-key-file", self.pki.path("sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", "10.96.0.0/16",
            "--authorization-mode", "Node,RBAC",
            "--endpoint-reconciler-type", "none",  # (a loopback address cannot be the kubernetes Service's)
            "--allow-privileged", "--profiling=false", "--v=1",
        )  # fmt: skip
        self._until("API server", self._healthy)
        components = self.kubeconfig(
            self.work / "components.kubeconfig", user="system:kube-controller-manager", groups=("system:masters",)
        )
        self._spawn(
            "kube-controller-manager",
            "--kubeconfig", str(components), "--leader-elect=false", "--secure-port", str(free_port()),
            "--bind-address", "127.0.0.1",
            "--service-account-private-key-file", self.pki.path("sa.key"), "--root-ca-file", self.pki.path("ca.crt"),
            "--use-service-account-credentials=false", "--controllers", "*,-nodeipam,-node-ipam-controller",
            "--horizontal-pod-autoscaler-sync-period", "2s", "--profiling=false", "--v=1",
        )  # fmt: skip
        self._spawn(
            "kube-scheduler",
            "--kubeconfig", str(components), "--leader-elect=false", "--secure-port", str(free_port()),
            "--bind-address", "127.0.0.1",
            "--authentication-kubeconfig", str(components), "--authorization-kubeconfig", str(components),
            "--profiling=false", "--v=1",
        )  # fmt: skip
        self._spawn(
            "kwok",
            "--kubeconfig", str(components), "--config", str(self.bin / build.STAGES), "--manage-all-nodes=false",
            "--manage-nodes-with-label-selector", f"{_NODE_LABEL}=true",
            "--cidr", "10.244.0.0/16", "--node-ip", "10.0.0.1", "--server-address", f"127.0.0.1:{free_port()}",
            *(("--disregard-status-with-label-selector", self.kubelet_by_test) if self.kubelet_by_test else ()),
        )  # fmt: skip
        for index in range(self.gpu_nodes):
            self.seed(_gpu_node(f"gpu-node-{index}"))
        self._until("nodes", self._nodes_ready, timeout=120)
        self._until("default service account", lambda: self._default_account("default"))
        self.started_s = time.monotonic() - started

    def stop(self) -> None:
        """Stop every component, by SIGKILL after 2 s: nothing it holds (etcd's data in memory) outlives it."""
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 2
        for _, proc in reversed(self._procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs.clear()
        shutil.rmtree(self.work, ignore_errors=True)

    def _healthy(self) -> bool:
        api = self._admin()
        return api.call_api("GET", f"{api.configuration.host}/readyz").status == 200

    def _nodes_ready(self) -> bool:
        nodes = self.core().list_node(label_selector=f"{_NODE_LABEL}=true").items
        return len(nodes) == self.gpu_nodes and all(
            any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []) for node in nodes
        )

    def _default_account(self, namespace: str) -> bool:
        self.core().read_namespaced_service_account("default", namespace)
        return True

    # -- clients ----------------------------------------------------------------------------------
    def kubeconfig(
        self, path: Path, *, user: str = ADMIN, groups: tuple[str, ...] = ("system:masters",),
        context: str = "test", namespace: str = "default", token: bool = False,
    ) -> Path:  # fmt: skip
        """A kubeconfig whose context talks to this API server over TLS as user (a client certificate naming user
        and groups; system:masters is the cluster's administrator, any other identity has what RBAC grants); with
        token, as the administrator by bearer token instead."""
        if token:
            user, credentials = TOKEN_USER, {"token": self.token}
        else:
            identity = self.pki.identity(user, groups)
            credentials = {"client-certificate-data": _b64(identity.cert), "client-key-data": _b64(identity.key)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.url, "certificate-authority-data": _b64(self.pki.ca_cert)}}
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": context, "context": {"cluster": "test", "user": user, "namespace": namespace}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        path.chmod(0o600)
        return path

    def api_client(self, user: str = ADMIN, groups: tuple[str, ...] = ("system:masters",)) -> Any:
        """An official-client ApiClient as user (the administrator unless named)."""
        from kubernetes import config

        path = self.work / f"client-{uuid.uuid4().hex[:8]}.kubeconfig"
        self.kubeconfig(path, user=user, groups=groups)
        try:
            return config.new_client_from_config(config_file=str(path))
        finally:
            path.unlink()

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self._admin())

    def _admin(self) -> Any:
        if not hasattr(self, "_admin_client"):
            self._admin_client = self.api_client()
        return self._admin_client

    def dynamic(self) -> Any:
        from kubernetes import dynamic

        if not hasattr(self, "_dynamic"):
            self._dynamic = dynamic.DynamicClient(self._admin())
        return self._dynamic

    def resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic().resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def seed(self, obj: dict) -> dict:
        """Create obj as its own author would (the administrator, `kubectl create`)."""
        return (
            self.resource(obj["apiVersion"], obj["kind"])
            .create(body=obj, namespace=obj["metadata"].get("namespace"))
            .to_dict()
        )

    def allowed(self, subject: dict, namespace: str, verb: str, group: str, resource: str) -> bool:
        """Whether the authorizer itself lets subject (an RBAC subject: User, Group or ServiceAccount) do verb on
        group/resource in namespace ("" for cluster-wide), asked with a SubjectAccessReview."""
        from kubernetes import client

        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
        spec: dict = {"resourceAttributes": attributes}
        if subject["kind"] == "User":
            spec["user"] = subject["name"]
        elif subject["kind"] == "Group":
            spec["groups"] = [subject["name"]]
        else:
            spec["user"] = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return bool(client.AuthorizationV1Api(self._admin()).create_subject_access_review(review).status.allowed)

    def kubectl(self, *args: str, user: str = ADMIN, groups: tuple[str, ...] = ("system:masters",)) -> str:
        """kubectl's output (it raises with kubectl's own message on failure)."""
        path = self.kubeconfig(self.work / f"kubectl-{user}.kubeconfig", user=user, groups=groups)
        done = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(path), *args], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace (its default ServiceAccount made, so that pods may be created in it)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self._until(f"namespace {name}", lambda: self._default_account(name), timeout=30)
        return name

    def delete_namespace(self, name: str) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core().delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def wait(self, what: str, ready: Any, timeout: float = 60.0) -> None:
        """Poll ready() until it is true (a controller caught up), else fail naming what."""
        self._until(what, ready, timeout)


def _gpu_node(name: str) -> dict:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                _NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/cuda.driver-version.full": DRIVER,
                "nvidia.com/cuda.driver.major": DRIVER.split(".")[0],
                "nvidia.com/cuda.driver.minor": DRIVER.split(".")[1],
                "nvidia.com/cuda.driver.rev": DRIVER.split(".")[2],
                "nvidia.com/cuda.runtime-version.full": "12.8",
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }
