"""The probe rendered as Kubernetes objects: strictly valid, the script carried whole, the ends kept apart."""

from __future__ import annotations

import copy

from checks.golive import check_probe_jobs
from ferry.golive import jobs
from ferry.results import Status


def test_the_rendered_pair_validates_strictly() -> None:
    docs = jobs.render("ml-prod", protocol="udp", samples=5000, image="registry.example/python:3.12")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "Job", "Job"]
    result = check_probe_jobs(docs, "1.30")
    assert result.status == Status.PASS, result.evidence
    assert result.name == "golive.probe_jobs_schema" and result.measured["objects"] == 4


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
    result = check_probe_jobs(docs, None)
    assert result.status == Status.FAIL and len(result.evidence) == 2
