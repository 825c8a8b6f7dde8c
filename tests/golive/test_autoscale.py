"""Autoscaling under a spike against the in-process Kubernetes API emulator (tests/kube_emulator.py).

No API server can run here and the emulator runs no controllers: a thread in each test plays the Deployment (and
HPA) controller by setting `.status`, so these tests show what ferry asks of the API, how it times the answer and
that it restores what it changed; not how fast a real cluster schedules pods.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ferry import kube
from ferry.errors import NotFoundError, TransientError
from ferry.golive import autoscale
from tests.kube_emulator import KubeEmulator


def deployment(name: str = "llama-serve", replicas: int = 2) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "m", "image": "m:1"}]}},
        },
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }


def hpa(minimum: int = 2, maximum: int = 4) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llama-serve", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-serve"},
            "minReplicas": minimum,
            "maxReplicas": maximum,
        },
    }


class Controller:
    """Plays the controllers: once the wanted count reaches `wanted`, reports that many Ready after `delay_s`."""

    def __init__(self, emulator: KubeEmulator, wanted: int, delay_s: float, via_hpa: bool = False):
        self.emulator, self.wanted, self.delay_s, self.via_hpa = emulator, wanted, delay_s, via_hpa
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _wanted(self) -> int:
        if self.via_hpa:
            return self.emulator.get("autoscaling/v2", "HorizontalPodAutoscaler", "llama-serve", "default")["spec"][
                "minReplicas"
            ]
        return self.emulator.get("apps/v1", "Deployment", "llama-serve", "default")["spec"]["replicas"]

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            if self._wanted() >= self.wanted:
                time.sleep(self.delay_s)
                status = {"replicas": self.wanted, "readyReplicas": self.wanted}
                self.emulator.set_status("apps/v1", "Deployment", "llama-serve", "default", status)
                return

    def __enter__(self) -> Controller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emu:
        yield emu


def test_scale_up_is_timed_and_the_replica_count_restored(emulator: KubeEmulator) -> None:
    emulator.seed(deployment())
    api = emulator.api_client()
    original = autoscale.snapshot(api, "default", "llama-serve", None)
    assert original == {"namespace": "default", "deployment": "llama-serve", "replicas": 2}
    with Controller(emulator, wanted=8, delay_s=0.3):
        result = autoscale.spike(api, original, 8, timeout_s=10, poll_s=0.05)
    assert not result.problems and result.restored
    assert result.seconds >= 0.3, "timed from the patch to the last replica Ready"
    assert emulator.get("apps/v1", "Deployment", "llama-serve", "default")["spec"]["replicas"] == 2
    assert any("8 replica(s) Ready after" in line for line in result.evidence)


def test_not_ready_in_time_is_a_problem_and_still_restored(emulator: KubeEmulator) -> None:
    emulator.seed(deployment())
    api = emulator.api_client()
    original = autoscale.snapshot(api, "default", "llama-serve", None)
    result = autoscale.spike(api, original, 8, timeout_s=0.4, poll_s=0.05)
    assert result.seconds is None and result.problems == ["only 2 of 8 replica(s) Ready after 0.4 s"]
    assert result.restored
    assert emulator.get("apps/v1", "Deployment", "llama-serve", "default")["spec"]["replicas"] == 2


def test_through_the_hpa_its_bounds_are_raised_then_restored(emulator: KubeEmulator) -> None:
    emulator.seed(deployment())
    emulator.seed(hpa(2, 4))
    api = emulator.api_client()
    original = autoscale.snapshot(api, "default", "llama-serve", "llama-serve")
    assert original["hpa"] == {"name": "llama-serve", "minReplicas": 2, "maxReplicas": 4}
    with Controller(emulator, wanted=8, delay_s=0.1, via_hpa=True):
        result = autoscale.spike(api, original, 8, timeout_s=10, poll_s=0.05)
    assert not result.problems and result.seconds >= 0.1
    bounds = emulator.get("autoscaling/v2", "HorizontalPodAutoscaler", "llama-serve", "default")["spec"]
    assert (bounds["minReplicas"], bounds["maxReplicas"]) == (2, 4)
    # The HPA scales the Deployment: ferry did not touch its replicas.
    assert emulator.get("apps/v1", "Deployment", "llama-serve", "default")["spec"]["replicas"] == 2


def test_a_missing_deployment_and_an_absent_cluster(emulator: KubeEmulator, tmp_path) -> None:
    with pytest.raises(NotFoundError, match="404"):
        autoscale.snapshot(emulator.api_client(), "default", "nope", None)
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
    emulator.stop()
    with pytest.raises(TransientError, match="did not answer"):
        autoscale.snapshot(kube.api_client(kubeconfig, "emulator"), "default", "llama-serve", None)


def test_an_interrupt_ends_the_wait_and_still_restores(emulator: KubeEmulator) -> None:
    emulator.seed(deployment())
    api = emulator.api_client()
    stop = threading.Event()
    stop.set()
    result = autoscale.spike(api, autoscale.snapshot(api, "default", "llama-serve", None), 8, 60, stop=stop)
    assert result.problems == ["interrupted with 2 of 8 replica(s) Ready"] and result.restored
    assert emulator.get("apps/v1", "Deployment", "llama-serve", "default")["spec"]["replicas"] == 2
