"""The probe rendered as Kubernetes objects: strictly valid, the script carried whole, the ends kept apart."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator

import pytest

from checks.golive import check_probe_jobs
from ferry.errors import PermanentError
from ferry.golive import jobs, probe
from ferry.results import Status
from tests.golive.test_probe import start_server
from tests.kube_emulator import KubeEmulator


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emu:
        yield emu


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


class JobController:
    """Plays the Job controller and kubelet on the emulator: when the client Job appears, runs the real probe on
    loopback, records a client pod whose termination message is the summary, and marks the Job finished."""

    def __init__(self, emulator: KubeEmulator, succeed: bool = True):
        self.emulator, self.succeed = emulator, succeed
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            if self.emulator.get("batch/v1", "Job", "ferry-probe-client", "ml") is None:
                continue
            status: dict = {"failed": 1}
            if self.succeed:
                server, port = start_server("tcp")
                summary = probe.compact(probe.ping(f"127.0.0.1:{port}", "tcp", 200, warmup=5))
                server.join(5)
                terminated = {"exitCode": 0, "message": json.dumps(summary)}
                pod = {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "ferry-probe-client-x1", "namespace": "ml",
                                 "labels": {"job-name": "ferry-probe-client"}},
                    "spec": {"containers": [{"name": "client", "image": jobs.DEFAULT_IMAGE}]},
                    "status": {"containerStatuses": [{"name": "client", "ready": False, "restartCount": 0,
                                                      "image": jobs.DEFAULT_IMAGE, "imageID": "",
                                                      "state": {"terminated": terminated}}]},
                }  # fmt: skip
                self.emulator.seed(pod)
                status = {"succeeded": 1}
            self.emulator.set_status("batch/v1", "Job", "ferry-probe-client", "ml", status)
            return

    def __enter__(self) -> JobController:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _probe_objects(emulator: KubeEmulator) -> list[str]:
    return [o["metadata"]["name"] for o in emulator.objects() if o["metadata"].get("namespace") == "ml"]


def test_the_jobs_run_on_a_cluster_and_are_removed(emulator: KubeEmulator) -> None:
    emulator.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    docs = jobs.render("ml", samples=200)
    # A leftover of a crashed run, with the same name: replaced, not a 409.
    emulator.seed(copy.deepcopy(docs[0]))
    with JobController(emulator):
        summary = jobs.run(emulator.api_client(), docs, timeout_s=20, poll_s=0.05)
    assert summary["samples"] == 200 and summary["percentiles"] == "nearest-rank" and "rtt_ns" not in summary
    assert len(json.dumps(summary)) < 4096, "a termination message holds at most 4 KiB"
    assert _probe_objects(emulator) == ["ferry-probe-client-x1"], "the pod goes with its Job on a real cluster"


def test_a_failed_or_slow_client_job_is_a_problem_and_still_removed(emulator: KubeEmulator) -> None:
    emulator.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    with JobController(emulator, succeed=False), pytest.raises(PermanentError, match="client Job failed"):
        jobs.run(emulator.api_client(), jobs.render("ml"), timeout_s=20, poll_s=0.05)
    assert _probe_objects(emulator) == []
    with pytest.raises(PermanentError, match="did not finish within 0.3 s"):
        jobs.run(emulator.api_client(), jobs.render("ml"), timeout_s=0.3, poll_s=0.05)
    assert _probe_objects(emulator) == []
