"""The go-live gate: interconnect latency, checkpoint throughput, scale-up time, CUDA against driver, placement,
portability.

Each check says SKIP with its reason when it could not measure, never PASS; `golive_checks` reads what the steps
recorded in the run's audit folder and ends with a check that WARNs of any SKIP (FAIL under strict): a go-live
that measured nothing is not a PASS.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml

from checks.iam import check_rbac_schema
from ferry.golive.checkpoint import Measurement, significant
from ferry.golive.cuda import check as cuda_verdict
from ferry.golive.placement import Advice, Workload, advise
from ferry.golive.portability.report import by_workload, counts, line
from ferry.results import CheckResult, Status


def check_probe_jobs(docs: list[dict], kubernetes_version: str | None, source: str) -> CheckResult:
    """The rendered probe ConfigMap, Service and Jobs (kept at source) validate strictly against the target's
    Kubernetes schema; a PASS names what was validated, so the report shows evidence for it too."""
    result = check_rbac_schema(docs, kubernetes_version, name="golive.probe_jobs_schema")
    if result.status == Status.PASS:
        objects = ", ".join(f"{d.get('kind')}/{d.get('metadata', {}).get('name')}" for d in docs)
        version = result.measured.get("kubernetes")
        result.evidence.append(f"{objects} ({source}) validate strictly against Kubernetes {version}'s schema")
    return result


def check_latency(name: str, result: dict | None, p99_us: float, reason: str, problems: list[str] = ()) -> CheckResult:
    """The interconnect's p99 round trip against the threshold: FAIL on a problem (the probe Jobs failed), SKIP
    with reason when nothing was measured; WARN when round trips were lost."""
    threshold = {"p99_us": p99_us}
    if problems:
        return CheckResult(name, Status.FAIL, threshold=threshold, evidence=list(problems))
    if result is None:
        return CheckResult(name, Status.SKIP, threshold=threshold, evidence=[reason or "not measured"])
    n = result["samples"]
    measured = {k: result[k] for k in ("p50_us", "p99_us", "p99_9_us", "max_us", "samples", "lost", "protocol")}
    evidence = [
        f"{result['what']} to {result['server']}: nearest-rank percentiles over n={n} samples, "
        f"warm-up {result['warmup_discarded']} discarded, {result['lost']} lost",
        f"p50 {result['p50_us']} us (n={n}), p99 {result['p99_us']} us (n={n}), p99.9 {result['p99_9_us']} us "
        f"(n={n}), max {result['max_us']} us (n={n})",
    ]
    status = Status.FAIL if result["p99_us"] > p99_us else Status.WARN if result["lost"] else Status.PASS
    return CheckResult(name, status, measured, threshold, evidence)


def check_throughput(
    name: str, gb_per_s: float | None, minimum: float, evidence: list[str], problems: list[str]
) -> CheckResult:
    """A measured GB/s (10^9 bytes/s) against its minimum: FAIL on any problem (a failed write, a shard that read
    back different), SKIP (the evidence says why) when nothing was measured."""
    key = name.rsplit(".", 1)[-1]
    threshold = {f"{key}_gb_per_s": minimum}
    measured = {} if gb_per_s is None else {f"{key}_gb_per_s": significant(gb_per_s)}
    if problems:
        return CheckResult(name, Status.FAIL, measured, threshold, [*problems, *evidence])
    if gb_per_s is None:
        return CheckResult(name, Status.SKIP, threshold=threshold, evidence=evidence)
    return CheckResult(name, Status.PASS if gb_per_s >= minimum else Status.FAIL, measured, threshold, evidence)


def check_cuda(images: dict[str, str | None], driver: str | None, source: str, driver_source: str) -> CheckResult:
    """Each image's CUDA toolkit (from the digest map at source) against the nodes' driver (from driver_source):
    the worst verdict decides; SKIP when there is no driver or no image with a toolkit to judge."""
    name, threshold = "golive.cuda_fingerprint", {"table": "NVIDIA minimum driver per toolkit release"}
    if driver is None:
        why = driver_source or "no driver: set phases.golive.nodes.driver"
        return CheckResult(name, Status.SKIP, {"images": len(images)}, threshold, [why])
    if not any(images.values()):
        why = f"no image with a CUDA toolkit in {source}" + ("" if images else " (the images phase has not committed)")
        return CheckResult(name, Status.SKIP, {"images": len(images), "driver": driver}, threshold, [why])
    evidence, statuses = [f"driver {driver}: {driver_source}"], []
    for image, cuda in sorted(images.items()):
        if cuda is None:
            evidence.append(f"{image}: no CUDA toolkit recorded")
            continue
        try:
            verdict = cuda_verdict(cuda, driver)
        except ValueError as exc:
            evidence.append(f"{image}: cannot judge: {exc}")
            statuses.append(Status.WARN)
            continue
        statuses.append(verdict.status)
        evidence.append(f"{image} (CUDA {cuda}): {verdict.line()}")
    worst = Status.FAIL if Status.FAIL in statuses else Status.WARN if Status.WARN in statuses else Status.PASS
    measured = {"driver": driver, "images": len(images), "judged": len(statuses)}
    return CheckResult(name, worst, measured, threshold, evidence)


def check_gpu(probe: dict) -> CheckResult:
    """The GPU probe's figures against the datasheet (>= 80% of HBM bandwidth and bf16 throughput); SKIP without
    torch or a GPU."""
    name, threshold = "golive.gpu", {"of_datasheet": 0.8}
    if probe.get("status") == "SKIP":
        return CheckResult(name, Status.SKIP, threshold=threshold, evidence=[probe.get("reason", "not measured")])
    devices = probe.get("devices", [])
    measured = {"driver": probe.get("driver"), "devices": probe.get("device_count", len(devices))}
    evidence = [
        f"GPU {d['index']} {d['name']}: HBM {d['hbm_gb_per_s']} GB/s"
        + (f" ({d['hbm_ratio']:.0%} of {d['datasheet_hbm_gb_per_s']})" if "hbm_ratio" in d else "")
        + f", bf16 {d['bf16_tflops']} TFLOPS"
        + (f" ({d['bf16_ratio']:.0%} of {d['datasheet_bf16_tflops']})" if "bf16_ratio" in d else "")
        + f": {d['status']}{' ' + d['reason'] if d.get('reason') else ''}"
        for d in devices
    ]
    return CheckResult(name, Status(probe["status"]), measured, threshold, evidence)


def check_placement(advice: list[Advice]) -> CheckResult:
    """Placement advice per workload (informational: PASS with the advice and the rule that decided it)."""
    name, threshold = "golive.placement", {"rules": "175B on >1 node; >12% overhead; >$5/h for >72 h"}
    if not advice:
        return CheckResult(name, Status.SKIP, threshold=threshold, evidence=["no workloads in phases.golive.workloads"])
    measured = {a.workload.name: a.advice for a in advice}
    # The first line names the workload; its reasoning lines are prefixed so that several workloads stay apart.
    evidence = [line if i == 0 else f"{a.workload.name}: {line}" for a in advice for i, line in enumerate(a.lines())]
    return CheckResult(name, Status.PASS, measured, threshold, evidence)


def check_scale_up(
    seconds: float | None, replicas: int, maximum_s: float, evidence: list[str], problems: list[str]
) -> CheckResult:
    """Time until the Deployment had `replicas` Ready against the maximum: FAIL on a problem (not Ready in time,
    the API refused), SKIP (the evidence says why) when nothing was measured."""
    name, threshold = "golive.scale_up", {"scale_up_s": maximum_s, "replicas": replicas}
    measured = {} if seconds is None else {"scale_up_s": round(seconds, 2), "replicas": replicas}
    if problems:
        return CheckResult(name, Status.FAIL, measured, threshold, [*problems, *evidence])
    if seconds is None:
        return CheckResult(name, Status.SKIP, threshold=threshold, evidence=evidence)
    return CheckResult(name, Status.PASS if seconds <= maximum_s else Status.FAIL, measured, threshold, evidence)


# Findings a workload's evidence lists one by one; the rest are counted (all are in portability.json).
PORTABILITY_LINES = 20


def check_portability(record: dict, max_blockers: int) -> CheckResult:
    """The portability audit's findings per workload (each on its accelerator): FAIL when a workload has more
    blockers than max_blockers, WARN for blockers allowed, warnings or unreadable files, SKIP when nothing was
    audited. Measured: blockers and warnings, and their counts by kind."""
    name, threshold = "golive.portability", {"max_portability_blockers": max_blockers}
    findings = record.get("findings")
    if findings is None:
        return CheckResult(
            name, Status.SKIP, threshold=threshold, evidence=[record.get("reason") or "step did not run"]
        )
    evidence, statuses, flagged = [], [], []
    for workload, pairs in by_workload(record):
        counted = counts(pairs)
        status = Status.FAIL if counted["blocker"] > max_blockers else Status.PASS
        if status == Status.PASS and (counted["blocker"] or counted["warn"]):
            status = Status.WARN
        statuses.append(status)
        evidence.append(
            f"{workload['name']} on {workload['accelerator']}: {counted['blocker']} blocker(s) (at most "
            f"{max_blockers}), {counted['warn']} warning(s), {counted['ok']} ok: {status.value}"
        )
        acted = [(s, f) for s, f in pairs if s != "ok"]
        flagged += [f for _, f in acted]
        evidence += [f"{workload['name']}: {line(s, f)}" for s, f in acted[:PORTABILITY_LINES]]
        if len(acted) > PORTABILITY_LINES:
            evidence.append(f"{workload['name']}: {len(acted) - PORTABILITY_LINES} more in portability.json")
    unique = {(f["file"], f.get("cell"), f["line"], f["kind"], f["match"]): f for f in flagged}.values()
    measured = {
        "files": record["files"],
        "blockers": sum(any(s == "blocker" for s in f["workloads"].values()) for f in unique),
        "warnings": sum(all(s != "blocker" for s in f["workloads"].values()) for f in unique),
        **Counter(f["kind"] for f in unique),
    }
    worst = Status.FAIL if Status.FAIL in statuses else Status.WARN if Status.WARN in statuses else Status.PASS
    return CheckResult(name, worst, measured, threshold, evidence)


def check_measured(results: list[CheckResult]) -> CheckResult:
    """WARN when any go-live check was SKIPped (the phase's strict turns it into FAIL): naming each and why."""
    skipped = [r for r in results if r.status == Status.SKIP]
    evidence = [f"{r.name}: {'; '.join(r.evidence) or 'no reason given'}" for r in skipped]
    status = Status.WARN if skipped else Status.PASS
    return CheckResult("golive.everything_measured", status, {"skipped": len(skipped)}, {"skipped": 0}, evidence)


def recorded(folder: Path, step: str) -> dict:
    """What a go-live step recorded in `<folder>/<step>.json` (folder: a run's golive audit folder); {} if none."""
    file = folder / f"{step}.json"
    return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}


def golive_checks(
    folder: Path,
    gate: dict[str, float],
    workloads: list[Workload],
    *,
    server_check: bool,
    replicas: int,
    kubernetes_version: str | None,
) -> list[CheckResult]:
    """Every go-live check from what the steps recorded in folder, against gate (`gates.golive`, by field); the last
    one WARNs if any of them SKIPped. server_check: the plan names a probe server, or no latency at all (that check
    then SKIPs saying so); replicas: the autoscaling spike's (0 without one)."""
    fingerprint = recorded(folder, "fingerprint")
    latency = recorded(folder, "latency")
    scaling = recorded(folder, "autoscaling")
    results = [
        check_cuda(
            fingerprint.get("images", {}),
            fingerprint.get("driver"),
            fingerprint.get("images_source", ""),
            fingerprint.get("driver_source", ""),
        ),  # fmt: skip
        check_gpu(fingerprint.get("gpu") or {"status": "SKIP", "reason": "the fingerprint step did not run"}),
        check_placement([advise(w) for w in workloads]),
    ]
    if server_check:
        results.append(
            check_latency(
                "golive.interconnect_p99",
                latency.get("result"),
                gate["p99_us"],
                latency.get("reason") or "step did not run",
            )
        )
    if latency.get("jobs"):
        docs = [d for d in yaml.safe_load_all(Path(latency["jobs"]).read_text(encoding="utf-8")) if d]
        results.append(check_probe_jobs(docs, kubernetes_version, latency["jobs"]))
        problem = latency.get("jobs_problem")
        results.append(
            check_latency(
                "golive.interconnect_p99_jobs", latency.get("jobs_result"), gate["p99_us"],
                latency.get("jobs_reason") or "", [problem] if problem else [],
            )
        )  # fmt: skip
    results += _throughput(recorded(folder, "checkpoint"), gate)
    results.append(
        check_scale_up(
            scaling.get("seconds"), replicas, gate["scale_up_s"],
            scaling.get("evidence") or [scaling.get("reason") or "step did not run"], scaling.get("problems", []),
        )
    )  # fmt: skip
    results.append(check_portability(recorded(folder, "portability"), int(gate["max_portability_blockers"])))
    return [*results, check_measured(results)]


def _throughput(ckpt: dict, gate: dict[str, float]) -> list[CheckResult]:
    """The checkpoint step's record as the write and the read check."""
    write_min, read_min = gate["checkpoint_write_gb_per_s"], gate["checkpoint_read_gb_per_s"]
    measured = ckpt.get("result")
    if measured is None:
        why = [ckpt.get("reason") or "step did not run"]
        return [
            check_throughput("golive.checkpoint_write", None, write_min, why, []),
            check_throughput("golive.checkpoint_read", None, read_min, why, []),
        ]
    result = Measurement(**measured)
    where = f"{result.bytes:,} bytes in {result.shards} shards to {result.target}"
    cleanup = [f"cleanup: {result.cleanup}"]
    figures = result.write_shard_gb_per_s
    spread = (
        f"{' / '.join(f'{v:.4g}' for v in figures.values())} GB/s ({'/'.join(figures)}; the engine's latencies, "
        "5% buckets)"
        if figures
        else "no per-shard figures"
    )
    write = [
        f"{where} through the transfer engine in {result.write_s and round(result.write_s, 3)} s",
        f"per-shard write: {spread}",
        *cleanup,
    ]
    read = [
        f"read back and SHA-256 verified in {result.read_s and round(result.read_s, 3)} s",
        f"per-shard read: {result.spread(result.read_shard_gb_per_s)}",
        *cleanup,
    ]
    # A failed write leaves nothing to read: both fail; a shard that reads back different fails the read.
    write_problems = result.problems if result.write_gb_per_s is None else []
    return [
        check_throughput("golive.checkpoint_write", result.write_gb_per_s, write_min, write, write_problems),
        check_throughput("golive.checkpoint_read", result.read_gb_per_s, read_min, read, result.problems),
    ]
