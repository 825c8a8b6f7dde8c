"""The go-live gate from what the steps recorded in a run's golive audit folder: each record as its check, every
unmeasured one a SKIP with its reason, and the last check WARNing of them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from checks.golive import check_portability, golive_checks, recorded
from ferry.golive import jobs, probe
from ferry.golive.checkpoint import Measurement
from ferry.golive.placement import Workload
from ferry.results import Status

GATE = {
    "p99_us": 50.0,
    "checkpoint_write_gb_per_s": 2.0,
    "checkpoint_read_gb_per_s": 4.0,
    "scale_up_s": 300.0,
    "max_portability_blockers": 0,
}
NAMES = [
    "golive.cuda_fingerprint",
    "golive.gpu",
    "golive.placement",
    "golive.interconnect_p99",
    "golive.checkpoint_write",
    "golive.checkpoint_read",
    "golive.scale_up",
    "golive.portability",
    "golive.everything_measured",
]


def record(folder: Path, step: str, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{step}.json").write_text(json.dumps(data), encoding="utf-8")


def checks(folder: Path, *, server_check: bool = True, replicas: int = 0, workloads: list[Workload] = ()) -> dict:
    results = golive_checks(
        folder, GATE, list(workloads), server_check=server_check, replicas=replicas, kubernetes_version="1.30"
    )
    return {r.name: r for r in results}


def measured_run(folder: Path) -> None:
    """What a run against a probe server, with the Jobs rendered but no cluster, a checkpoint and a spike records."""
    record(
        folder,
        "fingerprint",
        {
            "images": {"reg.example/ml/a:1": "12.4.1", "reg.example/ml/b:1": "12.2.2", "reg.example/ml/c:1": None},
            "images_source": "/state/golive-check/digest-map.json",
            "driver": "535.104.05",
            "driver_source": "phases.golive.nodes.driver",
            "gpu": {"status": "SKIP", "reason": "no torch where ferry runs"},
        },
    )
    rtts = [20_000 + 10 * i for i in range(400)]
    path = folder / "probe-jobs.yaml"
    path.write_text(yaml.safe_dump_all(jobs.render("default", samples=400), sort_keys=False), encoding="utf-8")
    latency = {
        "result": probe.summarise(rtts, protocol="tcp", server="127.0.0.1:7447", warmup=20),
        "reason": "",
        "jobs": str(path),
        "jobs_result": None,
        "jobs_reason": f"no cluster (target.cluster): the Jobs are rendered in {path}, not run",
    }
    record(folder, "latency", latency)
    ckpt = Measurement("file:///dst/golive/ckpt/r1/", 4 << 20, 4, 2.5, 5.0, 0.0017, 0.0008, cleanup="deleted 4")
    record(folder, "checkpoint", {"result": ckpt.to_dict(), "reason": ""})
    evidence = ["scaled Deployment llama-serve 2 -> 8", "8 replica(s) Ready after 0.25 s", "restored: back to 2"]
    record(folder, "autoscaling", {"seconds": 0.25, "evidence": evidence, "problems": []})
    record(folder, "portability", PORTABILITY)


def finding(file: str, line: int, kind: str, workloads: dict[str, str]) -> dict:
    message = f"{kind} at {file}:{line}"
    severity = max(workloads.values(), key=len)
    return {"file": file, "line": line, "kind": kind, "severity": severity, "match": "m", "message": message,
            "fix": "change it", "severities": {}, "workloads": workloads}  # fmt: skip


# Two workloads, one on MTIA (its code is a blocker there), one on NVIDIA (the same code is ok), a network setting
# that concerns both.
PORTABILITY = {
    "files": 5,
    "agnostic": 1,
    "workloads": [{"name": "llama-mtia", "accelerator": "mtia"}, {"name": "llama-h100", "accelerator": "nvidia"}],
    "findings": [
        finding("train.py", 9, "cuda-call", {"llama-mtia": "blocker", "llama-h100": "ok"}),
        finding("k8s/job.yaml", 5, "ib-setting", {"llama-mtia": "warn", "llama-h100": "warn"}),
        finding("train.py", 7, "nccl-backend", {"llama-mtia": "blocker", "llama-h100": "ok"}),
    ],
}


def test_portability_per_workload_against_its_bar(tmp_path) -> None:
    strict = check_portability(PORTABILITY, 0)
    assert strict.status == Status.FAIL
    assert strict.measured == {"files": 5, "blockers": 2, "warnings": 1, "cuda-call": 1, "ib-setting": 1,
                               "nccl-backend": 1}  # fmt: skip
    assert strict.evidence == [
        "llama-mtia on mtia: 2 blocker(s) (at most 0), 1 warning(s), 0 ok: FAIL",
        "llama-mtia: BLOCKER train.py:9 cuda-call: cuda-call at train.py:9 -> change it",
        "llama-mtia: BLOCKER train.py:7 nccl-backend: nccl-backend at train.py:7 -> change it",
        "llama-mtia: WARN k8s/job.yaml:5 ib-setting: ib-setting at k8s/job.yaml:5 -> change it",
        "llama-h100 on nvidia: 0 blocker(s) (at most 0), 1 warning(s), 2 ok: WARN",
        "llama-h100: WARN k8s/job.yaml:5 ib-setting: ib-setting at k8s/job.yaml:5 -> change it",
    ]
    assert check_portability(PORTABILITY, 2).status == Status.WARN
    clean = {**PORTABILITY, "findings": [f for f in PORTABILITY["findings"] if f["kind"] == "cuda-call"],
             "workloads": PORTABILITY["workloads"][1:]}  # fmt: skip
    assert check_portability(clean, 0).status == Status.PASS
    skipped = check_portability({"findings": None, "reason": "nothing to audit: ..."}, 0)
    assert skipped.status == Status.SKIP and skipped.evidence == ["nothing to audit: ..."]


def test_recorded_steps_become_their_checks(tmp_path) -> None:
    folder = tmp_path / "runs" / "r1" / "golive"
    measured_run(folder)
    workload = Workload("llama-405b-pretrain", 405e9, 32, 0.14, 6.5)
    found = checks(folder, replicas=8, workloads=[workload])
    assert list(found) == [*NAMES[:4], "golive.probe_jobs_schema", "golive.interconnect_p99_jobs", *NAMES[4:]]
    p99 = found["golive.interconnect_p99"]
    assert p99.status == Status.PASS and p99.measured["samples"] == 400 and p99.measured["p99_us"] == 23.95
    assert found["golive.probe_jobs_schema"].status == Status.PASS
    assert str(folder / "probe-jobs.yaml") in found["golive.probe_jobs_schema"].evidence[0]
    jobs_p99 = found["golive.interconnect_p99_jobs"]
    assert jobs_p99.status == Status.SKIP and jobs_p99.evidence[0].startswith("no cluster (target.cluster)")
    write, read = found["golive.checkpoint_write"], found["golive.checkpoint_read"]
    assert write.status == Status.PASS and write.measured == {"checkpoint_write_gb_per_s": 2.5}
    assert read.status == Status.PASS and read.evidence[-1] == "cleanup: deleted 4"
    assert found["golive.placement"].measured == {"llama-405b-pretrain": "bare-metal"}
    # 12.4.1 needs 550.54.15: minor-version compatibility only; 12.2.2's own minimum is met.
    cuda = found["golive.cuda_fingerprint"]
    assert cuda.status == Status.WARN and cuda.measured["judged"] == 2
    assert cuda.evidence[0] == "driver 535.104.05: phases.golive.nodes.driver"
    assert found["golive.gpu"].evidence == ["no torch where ferry runs"]
    scale = found["golive.scale_up"]
    assert scale.status == Status.PASS and scale.measured == {"scale_up_s": 0.25, "replicas": 8}
    assert found["golive.portability"].status == Status.FAIL
    summary = found["golive.everything_measured"]
    assert summary.status == Status.WARN and summary.measured["skipped"] == 2
    assert [line.split(":")[0] for line in summary.evidence] == ["golive.gpu", "golive.interconnect_p99_jobs"]


def test_nothing_recorded_skips_every_check_with_its_reason(tmp_path) -> None:
    *skipped, summary = checks(tmp_path / "golive").values()
    assert [r.name for r in [*skipped, summary]] == NAMES
    assert all(r.status == Status.SKIP and r.evidence and r.threshold for r in skipped)
    assert checks(tmp_path / "golive")["golive.gpu"].evidence == ["the fingerprint step did not run"]
    assert checks(tmp_path / "golive")["golive.scale_up"].evidence == ["step did not run"]
    assert summary.status == Status.WARN and summary.measured["skipped"] == len(skipped)


def test_without_a_named_server_only_the_jobs_judge_the_interconnect(tmp_path) -> None:
    folder = tmp_path / "golive"
    measured_run(folder)
    found = checks(folder, server_check=False)
    assert "golive.interconnect_p99" not in found and "golive.interconnect_p99_jobs" in found


def test_a_checkpoint_that_did_not_verify_fails_what_it_could_not_do(tmp_path) -> None:
    folder = tmp_path / "golive"
    problem = "read-back: model-00001-of-00002.bin: SHA-256 0000... differs from the written 1111..."
    bad_read = Measurement("/dst/ckpt/r1/", 2 << 20, 2, write_gb_per_s=1.0, write_s=0.002, problems=[problem])
    record(folder, "checkpoint", {"result": bad_read.to_dict(), "reason": ""})
    found = checks(folder, workloads=[])
    assert found["golive.checkpoint_write"].status == Status.FAIL, "1.0 GB/s is under the 2.0 asked"
    assert found["golive.checkpoint_write"].evidence[0].startswith("2,097,152 bytes in 2 shards to /dst/ckpt/r1/")
    assert found["golive.checkpoint_read"].status == Status.FAIL
    assert found["golive.checkpoint_read"].evidence[0] == problem
    failed_write = Measurement("/dst/ckpt/r2/", 2 << 20, 2, problems=["write: 1 of 2 shards copied (0 already there)"])
    record(folder, "checkpoint", {"result": failed_write.to_dict(), "reason": ""})
    found = checks(folder)
    # A failed write leaves nothing to read: both say why.
    for name in ("golive.checkpoint_write", "golive.checkpoint_read"):
        assert found[name].status == Status.FAIL and found[name].evidence[0].startswith("write: 1 of 2"), name
    record(folder, "checkpoint", {"result": None, "reason": "not configured (phases.golive.checkpoint)"})
    assert checks(folder)["golive.checkpoint_read"].evidence == ["not configured (phases.golive.checkpoint)"]


def test_recorded_reads_a_step_or_nothing(tmp_path) -> None:
    folder = tmp_path / "golive"
    assert recorded(folder, "latency") == {}
    record(folder, "latency", {"result": None, "reason": "not configured (phases.golive.latency)"})
    assert recorded(folder, "latency") == {"result": None, "reason": "not configured (phases.golive.latency)"}
