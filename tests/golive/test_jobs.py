"""The probe rendered as Kubernetes objects: strictly valid, the script carried whole, the ends kept apart."""

from __future__ import annotations

import copy
import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from checks.golive import check_probe_jobs
from ferry.errors import PermanentError
from ferry.golive import jobs, probe
from ferry.results import Status
from tests.controlplane.cluster import ControlPlane
from tests.golive.test_probe import start_server

# The label the probe's pods carry (server or client); the session's control plane leaves them to ProbeKubelet.
_PROBE_POD = "ferry.io/probe-end"


def test_the_rendered_pair_validates_strictly() -> None:
    docs = jobs.render("ml-prod", protocol="udp", samples=5000, image="registry.example/python:3.12")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job", "Job"]
    result = check_probe_jobs(docs, "1.30", "probe-jobs.yaml")
    assert result.status == Status.PASS, result.evidence
    assert result.name == "golive.probe_jobs_schema" and result.measured["objects"] == 4
    # A PASS shows its evidence in the report too: what was validated, from where, against which schema.
    assert result.evidence == [
        "ConfigMap/ferry-probe, Service/ferry-probe-server, Job/ferry-probe-server, Job/ferry-probe-client "
        "(probe-jobs.yaml) validate strictly against Kubernetes 1.30.0's schema"
    ]


def test_the_jobs_run_the_configmaps_script_apart_and_through_the_headless_service() -> None:
    config_map, service, server, client = jobs.render("ml-prod")
    assert config_map["data"]["probe.py"] == jobs.script() and "import ferry" not in jobs.script()
    assert service["spec"]["clusterIP"] == "None"
    client_pod = client["spec"]["template"]["spec"]
    command = client_pod["containers"][0]["command"]
    assert command[:4] == ["python3", "-I", "-B", "/probe/probe.py"]
    assert "ferry-probe-server.ml-prod.svc:7447" in command
    assert client_pod["containers"][0]["image"] == jobs.DEFAULT_IMAGE
    rule = client_pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert rule["labelSelector"]["matchLabels"] == server["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == server["spec"]["template"]["metadata"]["labels"]


def test_an_invalid_object_fails_the_schema_check() -> None:
    docs = copy.deepcopy(jobs.render("ml-prod"))
    docs[3]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    docs[2]["spec"]["backofLimit"] = 0  # a typo: strict validation refuses unknown fields
    result = check_probe_jobs(docs, None, "probe-jobs.yaml")
    assert result.status == Status.FAIL and len(result.evidence) == 2


class ProbeKubelet:
    """Plays the kubelet of the probe's pods on the real control plane (kwok leaves them to the test, see
    tests/conftest.py): the server pod runs, Ready, with a pod IP; the client pod ends as `end` says: "succeed" runs the
    real probe on loopback and ends with its summary as the termination message, "fail" exits 1, "hang" never starts.
    Pods being deleted are finalised, as a kubelet does. The scheduler, the Job controller, the endpoint slices and
    the garbage collector are the control plane's own."""

    def __init__(self, plane: ControlPlane, namespace: str, end: str = "succeed"):
        self.plane, self.namespace, self.end = plane, namespace, end
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.nodes: dict[str, str] = {}
        self.error: Exception | None = None

    def _run(self) -> None:
        from kubernetes.client.rest import ApiException

        core = self.plane.core()
        try:
            while not self.stop.wait(0.05):
                for pod in core.list_namespaced_pod(self.namespace, label_selector=_PROBE_POD).items:
                    try:
                        self._tend(core, pod)
                    except ApiException as exc:
                        if exc.status != 404:  # gone since the listing (the garbage collector, the API server)
                            raise
        except Exception as exc:  # noqa: BLE001 - raised in the test by __exit__, not lost in the thread
            self.error = exc

    def _tend(self, core: Any, pod: Any) -> None:
        name, which = pod.metadata.name, pod.metadata.labels[_PROBE_POD]
        if pod.metadata.deletion_timestamp is not None:
            core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        elif pod.spec.node_name and not (pod.status and pod.status.phase in ("Running", "Succeeded", "Failed")):
            self.nodes[which] = pod.spec.node_name
            status = self._status(which, pod.spec.containers[0])
            if status:
                core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def _status(self, which: str, container: Any) -> dict | None:
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        base = {"name": container.name, "image": container.image, "imageID": "", "restartCount": 0}
        ready = [{"type": t, "status": "True"} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
        if which == "server":
            state = {"running": {"startedAt": now}}
            container_status = {**base, "ready": True, "started": True, "state": state}
            ip = f"10.244.7.{len(self.nodes) + 10}"
            return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1", "startTime": now,
                    "conditions": ready, "containerStatuses": [container_status]}  # fmt: skip
        if self.end == "hang":
            return None
        if self.end == "succeed":
            server, port = start_server("tcp")
            summary = probe.compact(probe.ping(f"127.0.0.1:{port}", "tcp", 200, warmup=5))
            server.join(5)
            terminated = {"exitCode": 0, "reason": "Completed", "message": json.dumps(summary)}
        else:
            terminated = {"exitCode": 1, "reason": "Error"}
        terminated.update(startedAt=now, finishedAt=now)
        container_status = {**base, "ready": False, "started": False, "state": {"terminated": terminated}}
        phase = "Succeeded" if self.end == "succeed" else "Failed"
        return {"phase": phase, "startTime": now, "containerStatuses": [container_status]}

    def __enter__(self) -> ProbeKubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        if self.error is not None:
            raise RuntimeError(f"the probe's test kubelet stopped: {self.error}") from self.error


def _probe_objects(plane: ControlPlane, namespace: str) -> list[str]:
    """What of the probe is still in namespace (its pods included)."""
    names = []
    for kind in ("ConfigMap", "Service", "Pod"):
        selector = _PROBE_POD if kind == "Pod" else f"app.kubernetes.io/name={jobs.NAME}"
        items = plane.resource("v1", kind).get(namespace=namespace, label_selector=selector).items
        names += [f"{kind}/{item.metadata.name}" for item in items]
    found = plane.resource("batch/v1", "Job").get(namespace=namespace).items
    return names + [f"Job/{item.metadata.name}" for item in found]


def _gone(plane: ControlPlane, namespace: str) -> None:
    """Wait for the garbage collector to remove the deleted Jobs' pods; then nothing of the probe is left."""
    plane.wait("the probe's pods removed", lambda: _probe_objects(plane, namespace) == [], timeout=60)


def _endpoints(plane: ControlPlane, namespace: str) -> list[str]:
    """The addresses the endpoint slice controller gives the probe's headless Service."""
    slices = plane.resource("discovery.k8s.io/v1", "EndpointSlice").get(
        namespace=namespace, label_selector=f"kubernetes.io/service-name={jobs.NAME}-server"
    )
    return [address for piece in slices.items for end in piece.endpoints or [] for address in end.addresses]


def test_the_jobs_run_on_a_cluster_and_are_removed(control_plane: ControlPlane, namespace: str) -> None:
    docs = jobs.render(namespace, samples=200)
    # A leftover of a crashed run, with the same name: replaced, not a 409.
    control_plane.seed(copy.deepcopy(docs[0]))
    found: dict = {}
    with ProbeKubelet(control_plane, namespace, end="hang") as kubelet:
        running = threading.Thread(
            target=lambda: found.update(jobs.run(control_plane.api_client(), docs, timeout_s=60, poll_s=0.05))
        )
        running.start()
        control_plane.wait("the headless Service's endpoints", lambda: _endpoints(control_plane, namespace) != [])
        server = control_plane.core().list_namespaced_pod(namespace, label_selector=f"{_PROBE_POD}=server").items[0]
        assert _endpoints(control_plane, namespace) == [server.status.pod_ip], "pod to pod, no NAT: the server pod"
        kubelet.end = "succeed"
        running.join(60)
        assert found["samples"] == 200 and found["percentiles"] == "nearest-rank" and "rtt_ns" not in found
        assert len(json.dumps(found)) < 4096, "a termination message holds at most 4 KiB"
        # The real scheduler kept the ends apart, by the client's pod anti-affinity.
        assert kubelet.nodes["server"] != kubelet.nodes["client"], kubelet.nodes
        _gone(control_plane, namespace)


def test_a_failed_or_slow_client_job_is_a_problem_and_still_removed(
    control_plane: ControlPlane, namespace: str
) -> None:
    with ProbeKubelet(control_plane, namespace, end="fail") as kubelet:
        with pytest.raises(PermanentError, match="client Job failed"):
            jobs.run(control_plane.api_client(), jobs.render(namespace), timeout_s=60, poll_s=0.05)
        _gone(control_plane, namespace)
        kubelet.end = "hang"
        with pytest.raises(PermanentError, match="did not finish within 0.5 s"):
            jobs.run(control_plane.api_client(), jobs.render(namespace), timeout_s=0.5, poll_s=0.05)
        _gone(control_plane, namespace)
