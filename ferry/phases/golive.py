"""The go-live phase: measure that the target is ready, and say so in a report people read.

Steps: the fingerprint (each image's CUDA toolkit against the nodes' driver, a GPU probe where a GPU is, placement
advice per workload), the interconnect latency (a probe to a named server and/or the probe pair rendered as Jobs),
checkpoint write and read speed on the target storage, autoscaling under a replica spike, then the report. It
reads live state (storage, cluster, network), so it is never skipped on the plan's hash. What it creates is
temporary and removed in a `finally` (the checkpoint, the probe Jobs, the raised replica count); its rollback is
that cleanup again for anything a crashed run left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
import yaml
from pydantic import BeforeValidator, Field, model_validator

from checks.golive import (
    check_cuda,
    check_gpu,
    check_latency,
    check_measured,
    check_placement,
    check_probe_jobs,
    check_scale_up,
    check_throughput,
)
from connectors.transfer import TransferSettings
from ferry import digest_map, kube
from ferry.audit import AuditFolder
from ferry.errors import FerryError, PermanentError, TransientError, UsageError
from ferry.golive import autoscale, checkpoint, cuda, gpu_probe, placement, probe, report

# The module, not the `jobs` setting of Latency.
from ferry.golive import jobs as probe_jobs
from ferry.phases.base import Changes, Phase, Reporter, Settings, Undo
from ferry.plan import DNS_LABEL, Size
from ferry.results import CheckResult, gate_status

log = structlog.get_logger("ferry.phases.golive")


def _server(value: Any) -> Any:
    """host:port or [ipv6]:port, as `ferry probe ping --server` takes it (one parser, one message)."""
    if isinstance(value, str):
        probe.parse_server(value)
        return value.strip()
    return value


class Latency(Settings):
    """The interconnect probe: to a running `ferry probe serve` (server), and/or as a pair of Jobs (jobs)."""

    server: Annotated[str | None, BeforeValidator(_server)] = None
    # The client's own address: which interface the round trips leave from (default: the OS chooses).
    client: str | None = None
    samples: int = Field(default=20000, ge=1, le=10_000_000)
    warmup: int = Field(default=probe.DEFAULT_WARMUP, ge=0)
    protocol: Literal["tcp", "udp"] = "tcp"
    # Render the probe pair as Jobs for target.cluster (validated; run when the cluster answers).
    jobs: bool = False
    image: str = probe_jobs.DEFAULT_IMAGE
    # How long the Jobs may take (image pull and scheduling included), and how often their status is read.
    jobs_timeout_s: float = Field(default=900, gt=0, le=probe_jobs.DEADLINE_S)
    poll_s: float = Field(default=2.0, gt=0, le=60)

    @model_validator(mode="after")
    def _somewhere(self) -> Latency:
        if self.server is None and not self.jobs:
            raise ValueError("name the probe's server (host:port of a `ferry probe serve`) or set jobs: true")
        return self


class Checkpoint(Settings):
    """The synthetic checkpoint written to target.storage under prefix, then removed."""

    size: Size = 8 << 30
    shards: int = Field(default=64, ge=1, le=100_000)
    prefix: str = "golive/ckpt/"
    threads: int = Field(default=16, ge=1, le=1024)

    @model_validator(mode="after")
    def _a_byte_per_shard(self) -> Checkpoint:
        if self.size < self.shards:
            raise ValueError(f"size {self.size} bytes cannot fill {self.shards} shards: give at least a byte a shard")
        return self


class Autoscaling(Settings):
    """The Deployment (and its HPA, if any) raised to replicas; the time until they are Ready is measured."""

    deployment: str = Field(pattern=DNS_LABEL)
    replicas: int = Field(ge=1, le=10_000)
    timeout_s: float = Field(default=600, gt=0, le=7200)
    # Named: its minReplicas is raised (the autoscaler scales the Deployment); else the Deployment is scaled.
    hpa: str | None = Field(default=None, pattern=DNS_LABEL)
    poll_s: float = Field(default=1.0, gt=0, le=60)


def _driver_version(value: Any) -> Any:
    """A driver version as nvidia-smi prints it, stripped; YAML's number (570.26 unquoted) is refused, not guessed."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f'{value!r} was read as a number: quote the driver version ("570.26")')
    if isinstance(value, str):
        cuda.parse_driver(value)
        return value.strip()
    return value


class Nodes(Settings):
    """The target GPU nodes' NVIDIA driver version (e.g. from nvidia-smi or the node's driver label)."""

    driver: Annotated[str | None, BeforeValidator(_driver_version)] = None


class WorkloadSettings(Settings):
    name: str = Field(min_length=1)
    params: Annotated[float, BeforeValidator(placement.parse_params)]
    nodes: int = Field(ge=1)
    # A fraction (0.14) or a percentage ("14%"); a bare 14 is refused, not read as 1400%.
    virt_overhead: Annotated[float, BeforeValidator(placement.parse_overhead)]
    hourly_cost_delta: float = Field(allow_inf_nan=False)
    job_hours: float | None = Field(default=None, ge=0, allow_inf_nan=False)


def _version_order(driver: str) -> tuple[int, ...]:
    """A node label's driver for ordering; one that is not a version sorts first, so that it is judged (and said)."""
    try:
        return cuda.parse_driver(driver)
    except ValueError:
        return ()


class GoliveSettings(Settings):
    latency: Latency | None = None
    checkpoint: Checkpoint | None = None
    autoscaling: Autoscaling | None = None
    nodes: Nodes = Field(default_factory=Nodes)
    workloads: list[WorkloadSettings] = Field(default_factory=list)
    # Rule 3 of the placement advice applies to jobs longer than this.
    long_job_hours: float = Field(default=placement.LONG_JOB_HOURS, gt=0, allow_inf_nan=False)
    # Run the GPU probe (torch) where ferry runs; it SKIPs without torch or a GPU.
    gpu_probe: bool = True


class GoliveGate(Settings):
    p99_us: float = Field(default=50.0, gt=0)
    checkpoint_write_gb_per_s: float = Field(default=2.0, gt=0)
    checkpoint_read_gb_per_s: float = Field(default=4.0, gt=0)
    scale_up_s: float = Field(default=300.0, gt=0)


STEPS = ["fingerprint", "latency", "checkpoint", "autoscaling", "report"]
# In a run's audit folder: where its checkpoint writes (journalled first), and that it was cleaned up.
CHECKPOINT_TARGET, CHECKPOINT_CLEANED = "checkpoint-target.json", "checkpoint-cleaned.json"


class GolivePhase(Phase):
    """Go-live readiness: CUDA against driver, GPU, placement, interconnect P99, checkpoint speed, scale-up."""

    name = "golive"
    settings_model = GoliveSettings
    gate_model = GoliveGate
    # Each measurement alone (a checkpoint write would load the network the latency probe times), and the report
    # after every one of them.
    concurrent_steps = False

    @property
    def live_inputs(self) -> bool:
        """Storage, network and cluster are measured live on every run."""
        return True

    def steps(self) -> list[str]:
        return list(STEPS)

    def workloads(self) -> list[placement.Workload]:
        return [
            placement.Workload(
                w.name,
                w.params,
                w.nodes,
                w.virt_overhead,
                w.hourly_cost_delta,
                w.job_hours,
                self.settings.long_job_hours,
            )
            for w in self.settings.workloads
        ]

    def inputs(self) -> dict[str, Any]:
        return {"target": self.loaded.storage("target"), "cluster": self._cluster_name()}

    def _cluster_name(self) -> str | None:
        cluster = self.loaded.plan.target.cluster
        return f"{cluster.context}/{cluster.namespace}" if cluster else None

    def summary(self) -> str:
        s, gate = self.settings, self.gate_settings
        parts = [f"check each image's CUDA toolkit against driver {s.nodes.driver or '(not given)'}"]
        if s.workloads:
            parts.append(f"advise placement for {len(s.workloads)} workload(s)")
        if s.latency:
            where = " and ".join(
                x for x in (s.latency.server and f"to {s.latency.server}", s.latency.jobs and "as a Job pair") if x
            )
            parts.append(f"probe {s.latency.protocol.upper()} round trips {where} (p99 <= {gate.p99_us} us)")
        if s.checkpoint:
            parts.append(
                f"write and read back a {s.checkpoint.size:,}-byte checkpoint in {s.checkpoint.shards} shards under "
                f"{checkpoint.run_url(self.loaded.storage('target'), s.checkpoint.prefix, '<run>')} "
                f"(>= {gate.checkpoint_write_gb_per_s} GB/s write, >= {gate.checkpoint_read_gb_per_s} GB/s read)"
            )
        if s.autoscaling:
            parts.append(
                f"scale {s.autoscaling.deployment} to {s.autoscaling.replicas} replicas (Ready within "
                f"{gate.scale_up_s} s), then restore it"
            )
        return "; ".join(parts) + "; then the go-live report (Markdown and HTML). A SKIP counts as WARN."

    def changes(self) -> Changes:
        """What the run creates for a while (and removes): checkpoint bytes, probe Jobs, extra replicas."""
        s = self.settings
        totals = {
            "checkpoint_bytes": s.checkpoint.size if s.checkpoint else 0,
            "probe_jobs": 2 if s.latency and s.latency.jobs and self.loaded.plan.target.cluster else 0,
            "replicas": s.autoscaling.replicas if s.autoscaling and self.loaded.plan.target.cluster else 0,
        }
        text = (
            f"golive will write and then delete {totals['checkpoint_bytes']:,} bytes on "
            f"{self.loaded.storage('target')}, run {totals['probe_jobs']} probe Job(s) and scale "
            f"{s.autoscaling.deployment if s.autoscaling else 'no Deployment'} to {totals['replicas']} replica(s), "
            "restoring it afterwards."
        )
        return Changes(text, totals)

    # -- the steps ----------------------------------------------------------------------------------
    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> dict[str, Any]:
        """One step: measure, and write what it measured to `<audit>/golive/<step>.json`."""
        data = getattr(self, f"_{step}")(audit, reporter)
        if data is not None:
            audit.write_json(self.name, f"{step}.json", data)
        return {"step": step}

    def changed(self, summaries: list[dict[str, Any]]) -> bool:
        """Go-live leaves nothing behind in the target: it measures."""
        return False

    def _fingerprint(self, audit: AuditFolder, reporter: Reporter) -> dict:
        published = digest_map.path(self.loaded.state_dir, self.loaded.plan.name)
        images = {r.target: r.cuda for r in digest_map.read(published).values()}
        gpu = self._gpu() if self.settings.gpu_probe else {"status": "SKIP", "reason": "gpu_probe: false"}
        driver, driver_source = self._driver()
        return {
            "images": images,
            "images_source": str(published),
            "driver": driver,
            "driver_source": driver_source,
            "gpu": gpu,
        }

    def _driver(self) -> tuple[str | None, str]:
        """The driver to judge against and where it came from: the plan's, else the oldest the nodes' labels say."""
        if self.settings.nodes.driver:
            return self.settings.nodes.driver, "phases.golive.nodes.driver"
        if self.loaded.plan.target.cluster is None:
            return None, "no driver: set phases.golive.nodes.driver (or target.cluster, to read the node labels)"
        try:
            api = self._api()
            try:
                drivers = kube.node_drivers(api)
            finally:
                api.close()
        except FerryError as exc:
            return (
                None,
                f"no driver: phases.golive.nodes.driver is not set and the node labels could not be read: {exc}",
            )
        if not drivers:
            return None, "no driver: no node carries GPU feature discovery's driver labels (nvidia.com/cuda.driver*)"
        oldest = min(drivers.values(), key=_version_order)
        shown = ", ".join(f"{node} {version}" for node, version in sorted(drivers.items()))
        return oldest, f"the oldest driver on the labelled nodes ({shown})"

    def _gpu(self) -> dict:
        """The standalone GPU probe run as its own process (torch stays out of ferry's)."""
        try:
            done = subprocess.run(
                [sys.executable, gpu_probe.__file__], capture_output=True, text=True, timeout=600, check=False
            )
        except subprocess.TimeoutExpired:
            return {"status": "SKIP", "reason": "the GPU probe did not finish within 600 s"}
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return {"status": "SKIP", "reason": f"the GPU probe failed: {done.stderr.strip()[-300:] or 'no output'}"}

    def _latency(self, audit: AuditFolder, reporter: Reporter) -> dict:
        """Round trips to the named server, and/or through the probe Jobs on target.cluster."""
        s = self.settings.latency
        if s is None:
            return {"result": None, "reason": "not configured (phases.golive.latency)"}
        data: dict[str, Any] = {"result": None, "reason": ""}
        if s.server:
            try:
                data["result"] = probe.ping(
                    s.server, s.protocol, s.samples, warmup=s.warmup, source=s.client, wait_s=5.0
                )
            except OSError as exc:
                data["reason"] = f"no round trip to {s.server}: {exc}"
        if s.jobs:
            data.update(self._probe_jobs(audit, s))
        return data

    def _probe_jobs(self, audit: AuditFolder, s: Latency) -> dict:
        """Render the probe pair (kept in the audit folder for the schema check); run it when a cluster answers."""
        cluster = self.loaded.plan.target.cluster
        docs = probe_jobs.render(
            cluster.namespace if cluster else "default", protocol=s.protocol, samples=s.samples, image=s.image
        )
        path = audit.write_text(self.name, "probe-jobs.yaml", yaml.safe_dump_all(docs, sort_keys=False))
        found: dict[str, Any] = {"jobs": str(path), "jobs_result": None, "jobs_reason": ""}
        if cluster is None:
            found["jobs_reason"] = f"no cluster (target.cluster): the Jobs are rendered in {path}, not run"
            return found
        try:
            api = self._api()
        except UsageError as exc:
            found["jobs_reason"] = f"no cluster: {exc}; the Jobs are rendered in {path}, not run"
            return found
        try:
            found["jobs_result"] = probe_jobs.run(api, docs, s.jobs_timeout_s, poll_s=s.poll_s)
        except TransientError as exc:
            found["jobs_reason"] = str(exc)
        except PermanentError as exc:
            found["jobs_problem"] = str(exc)
        finally:
            api.close()
        return found

    def _checkpoint(self, audit: AuditFolder, reporter: Reporter) -> dict:
        s = self.settings.checkpoint
        if s is None:
            return {"result": None, "reason": "not configured (phases.golive.checkpoint)"}
        self._clean_crashed(audit)
        url = checkpoint.run_url(self.loaded.storage("target"), s.prefix, f"{audit.root.name}-{time.time_ns()}")
        # Journalled before anything is written: a crashed run's leftovers are found and removed (by the next
        # measurement, or a rollback).
        audit.write_json(self.name, CHECKPOINT_TARGET, {"url": url})
        source = checkpoint.synthetic(self.loaded.state_dir / "golive" / "synthetic", s.size, s.shards)
        settings = TransferSettings(threads=s.threads)
        result = checkpoint.measure(
            source, url, profiles=self.loaded.plan.profiles, settings=settings, stop=reporter.stopping
        )
        log.info("checkpoint measured", write=result.write_gb_per_s, read=result.read_gb_per_s)
        if result.cleanup and not any(p.startswith("cleanup of") for p in result.problems):
            audit.write_json(self.name, CHECKPOINT_CLEANED, {"cleanup": result.cleanup})
        return {"result": result.to_dict(), "reason": ""}

    def _clean_crashed(self, audit: AuditFolder) -> None:
        """Remove what the checkpoints of earlier runs left on the target: a run killed mid-write (kill -9, a lost
        machine) never reached its own clean-up. Only under a place a run journalled as its own."""
        for journal in sorted(audit.root.parent.glob(f"*/{self.name}/{CHECKPOINT_TARGET}")):
            folder = journal.parent
            if folder == audit.root / self.name or (folder / CHECKPOINT_CLEANED).exists():
                continue
            url = json.loads(journal.read_text(encoding="utf-8"))["url"]
            try:
                done = self._clean(folder, url)
            except FerryError as exc:
                log.warning("could not remove what an earlier checkpoint left", url=url, error=str(exc))
                continue
            log.info("removed what an earlier run's checkpoint left", run=folder.parent.name, cleanup=done)

    def _clean(self, folder: Path, url: str) -> str:
        """Delete everything under a run's journalled checkpoint place and mark that run's folder cleaned."""
        done = checkpoint.cleanup(url, self.loaded.plan.profiles)
        (folder / CHECKPOINT_CLEANED).write_text(json.dumps({"cleanup": done}) + "\n", encoding="utf-8")
        return done

    def _autoscaling(self, audit: AuditFolder, reporter: Reporter) -> dict:
        s, cluster = self.settings.autoscaling, self.loaded.plan.target.cluster
        if s is None:
            return {"seconds": None, "reason": "not configured (phases.golive.autoscaling)"}
        if cluster is None:
            return {"seconds": None, "reason": "no cluster: target.cluster is not set"}
        try:
            api = self._api()
        except UsageError as exc:
            return {"seconds": None, "reason": f"no cluster: {exc}"}
        try:
            original = autoscale.snapshot(api, cluster.namespace, s.deployment, s.hpa)
            # Journalled before anything changes: rollback restores it if this run dies before its finally.
            audit.write_json(self.name, "autoscaling-original.json", original)
            result = autoscale.spike(api, original, s.replicas, s.timeout_s, poll_s=s.poll_s, stop=reporter.stopping)
            if result.restored:
                audit.write_json(self.name, "autoscaling-restored.json", {"restored": True})
            return {"seconds": result.seconds, "evidence": result.evidence, "problems": result.problems}
        except TransientError as exc:
            return {"seconds": None, "reason": str(exc)}
        except PermanentError as exc:
            return {"seconds": None, "evidence": [], "problems": [str(exc)]}
        finally:
            api.close()

    def _report(self, audit: AuditFolder, reporter: Reporter) -> None:
        results = self.checks(audit)
        verdict = gate_status(results, self.loaded.plan.strict)
        title = f"Go-live report: {self.loaded.plan.name}"
        page = audit.path(self.name, "report.html")
        measured = self._read(audit, "latency")
        latency = measured.get("result") or measured.get("jobs_result")
        ckpt = self._read(audit, "checkpoint").get("result")
        page.write_text(
            report.html(
                title, verdict, results, latency=latency, checkpoint=ckpt, gate=self.gate_settings.model_dump(),
                generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            ),
            encoding="utf-8",
        )  # fmt: skip
        text = report.markdown(title, verdict, results, page)
        audit.write_text(self.name, "report.md", text)
        reporter.markdown("golive-report", text, f"Go-live report ({verdict.value}); the page: {page}")
        return None

    # -- the gate -----------------------------------------------------------------------------------
    def _read(self, audit: AuditFolder, step: str) -> dict:
        file = audit.root / self.name / f"{step}.json"
        return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}

    def checks(self, audit: AuditFolder) -> list[CheckResult]:
        """Every go-live check from what the steps wrote; the last one WARNs if any of them SKIPped."""
        gate = self.gate_settings
        fingerprint = self._read(audit, "fingerprint")
        latency = self._read(audit, "latency")
        ckpt = self._read(audit, "checkpoint")
        scaling = self._read(audit, "autoscaling")
        results = [
            check_cuda(
                fingerprint.get("images", {}),
                fingerprint.get("driver"),
                fingerprint.get("images_source", ""),
                fingerprint.get("driver_source", ""),
            ),  # fmt: skip
            check_gpu(fingerprint.get("gpu") or {"status": "SKIP", "reason": "the fingerprint step did not run"}),
            check_placement([placement.advise(w) for w in self.workloads()]),
        ]
        settings = self.settings.latency
        if settings is None or settings.server:
            results.append(
                check_latency(
                    "golive.interconnect_p99",
                    latency.get("result"),
                    gate.p99_us,
                    latency.get("reason") or "step did not run",
                )
            )
        if latency.get("jobs"):
            docs = [d for d in yaml.safe_load_all(Path(latency["jobs"]).read_text(encoding="utf-8")) if d]
            results.append(check_probe_jobs(docs, self.loaded.plan.target.kubernetes_version, latency["jobs"]))
            problem = latency.get("jobs_problem")
            results.append(
                check_latency(
                    "golive.interconnect_p99_jobs", latency.get("jobs_result"), gate.p99_us,
                    latency.get("jobs_reason") or "", [problem] if problem else [],
                )
            )  # fmt: skip
        results += self._throughput(ckpt)
        autoscaling = self.settings.autoscaling
        results.append(
            check_scale_up(
                scaling.get("seconds"), autoscaling.replicas if autoscaling else 0, gate.scale_up_s,
                scaling.get("evidence") or [scaling.get("reason") or "step did not run"], scaling.get("problems", []),
            )
        )  # fmt: skip
        return [*results, check_measured(results)]

    def _throughput(self, ckpt: dict) -> list[CheckResult]:
        gate, measured = self.gate_settings, ckpt.get("result")
        if measured is None:
            why = [ckpt.get("reason") or "step did not run"]
            return [
                check_throughput("golive.checkpoint_write", None, gate.checkpoint_write_gb_per_s, why, []),
                check_throughput("golive.checkpoint_read", None, gate.checkpoint_read_gb_per_s, why, []),
            ]
        result = checkpoint.Measurement(**measured)
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
            check_throughput(
                "golive.checkpoint_write", result.write_gb_per_s, gate.checkpoint_write_gb_per_s, write, write_problems
            ),
            check_throughput(
                "golive.checkpoint_read", result.read_gb_per_s, gate.checkpoint_read_gb_per_s, read, result.problems
            ),
        ]

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        return self.checks(audit)

    def rollback(
        self, audit_root: Path, *, dry_run: bool = False, force: bool = False, stopping: threading.Event | None = None
    ) -> Undo:
        """Undo what a crashed run left: objects under its checkpoint prefix, a replica count it did not restore."""
        folder = audit_root / self.name
        items, done = [], []
        journal = folder / CHECKPOINT_TARGET
        if journal.exists() and not (folder / CHECKPOINT_CLEANED).exists():
            url = json.loads(journal.read_text(encoding="utf-8"))["url"]
            items.append(f"delete every object under {url}")
            if not dry_run:
                try:
                    done.append(self._clean(folder, url))
                except FerryError as exc:
                    done.append(f"could not clean {url}: {exc}")
        original_file = folder / "autoscaling-original.json"
        if original_file.exists() and not (folder / "autoscaling-restored.json").exists():
            original = json.loads(original_file.read_text(encoding="utf-8"))
            items.append(f"restore {original['namespace']}/{original['deployment']} as snapshot before the spike")
            if not dry_run:
                done.append(self._restore(original, folder))
        if not items:
            return Undo(f"nothing to undo: run {audit_root.name} left nothing behind")
        # A clean-up or a restore that could not be done leaves the rollback unfinished: the next one tries again.
        failed = sum(line.startswith("could not") for line in done)
        return Undo("; ".join(items) if dry_run else "; ".join(done), items, failed)

    def _api(self):
        """A client of target.cluster (which must be set); UsageError when its kubeconfig cannot give one."""
        cluster = self.loaded.plan.target.cluster
        assert cluster is not None
        kubeconfig = kube.kubeconfig_path(cluster.kubeconfig, self.loaded.path.parent)
        return kube.api_client(kubeconfig, cluster.context)

    def _restore(self, original: dict, folder: Path) -> str:
        if self.loaded.plan.target.cluster is None:
            return "could not restore the replica count: target.cluster is no longer set"
        try:
            api = self._api()
            try:
                text = autoscale.restore(api, original)
            finally:
                api.close()
        except FerryError as exc:
            return f"could not restore the replica count: {exc}"
        (folder / "autoscaling-restored.json").write_text(json.dumps({"restored": True}) + "\n", encoding="utf-8")
        return f"restored {text}"
