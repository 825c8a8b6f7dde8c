"""The go-live phase: measure that the target is ready, and say so in a report people read.

Steps: the fingerprint (each image's CUDA toolkit against the nodes' driver, a GPU probe where a GPU is, placement
advice per workload), the interconnect latency (a probe to a named server and/or the probe pair rendered as Jobs),
checkpoint write and read speed on the target storage, autoscaling under a replica spike, then the report. It
reads live state (storage, cluster, network), so it is never skipped on the plan's hash. What it creates is
temporary and removed in a `finally` (the checkpoint, the probe Jobs, the raised replica count); its rollback is
that cleanup again for anything a crashed run left behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import yaml

from checks.golive import golive_checks, recorded
from connectors.transfer import TransferSettings
from ferry import kube
from ferry.audit import AuditFolder
from ferry.config import FieldProblem
from ferry.errors import FerryError
from ferry.golive import autoscale, checkpoint, placement, probe, report

# The module, not the `jobs` setting of Latency.
from ferry.golive import jobs as probe_jobs
from ferry.golive.fingerprint import fingerprint
from ferry.golive.portability import report as portability_report
from ferry.golive.portability.audit import audit as portability_audit
from ferry.golive.portability.rules import load_rules
from ferry.golive.settings import GoliveGate, GoliveSettings, Latency
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.plan import Plan, TargetProfile
from ferry.results import CheckResult, gate_status

log = structlog.get_logger("ferry.phases.golive")


STEPS = ["fingerprint", "latency", "checkpoint", "autoscaling", "portability", "report"]


def _relative(path: Path, base: Path) -> str:
    """path as the audit names files: relative to base when under it."""
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


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

    @classmethod
    def check_target(cls, plan: Plan, target: TargetProfile) -> None:
        """Each workload's accelerator is one the target profile names; the profile's own portability rules read."""
        load_rules(target)
        for i, workload in enumerate(plan.phases.golive.workloads):
            if workload.accelerator is not None and workload.accelerator not in target.accelerators:
                raise FieldProblem(
                    ("phases", "golive", "workloads", i, "accelerator"),
                    f"target profile {target.name} has no accelerator {workload.accelerator!r} "
                    f"({', '.join(target.accelerators)})",
                )

    def files(self) -> dict[tuple, Path]:
        return {
            ("phases", "golive", "workloads", i, "paths", j): self.loaded.resolve(path)
            for i, w in enumerate(self.settings.workloads)
            for j, path in enumerate(w.paths)
        }

    def steps(self) -> list[str]:
        return list(STEPS)

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
        if paths := self.audited_paths():
            parts.append(
                f"audit {len(paths)} path(s) for portability to {self.loaded.target.name} (at most "
                f"{gate.max_portability_blockers} blocker(s) a workload)"
            )
        return "; ".join(parts) + "; then the go-live report (Markdown and HTML). A SKIP counts as WARN."

    def changes(self) -> Changes:
        """What the run measures, and what it creates for a while (and removes): the checkpoint bytes under their
        prefix, the probe Jobs, the Deployment (or autoscaler) it scales, by name."""
        s = self.settings
        cluster = self.loaded.plan.target.cluster
        totals = {
            "checkpoint_bytes": s.checkpoint.size if s.checkpoint else 0,
            "probe_jobs": 2 if s.latency and s.latency.jobs and cluster else 0,
            "replicas": s.autoscaling.replicas if s.autoscaling and cluster else 0,
        }
        measured = ["each image's CUDA toolkit against the driver"]
        touched = []
        if s.latency:
            measured.append(f"{s.latency.protocol.upper()} round trips ({s.latency.samples:,} samples)")
        if s.checkpoint:
            place = checkpoint.run_url(self.loaded.storage("target"), s.checkpoint.prefix, "<run>")
            measured.append("checkpoint write and read speed")
            touched.append(f"writes {totals['checkpoint_bytes']:,} bytes under {place}, then deletes them")
        if totals["probe_jobs"]:
            touched.append(f"runs a probe Job pair in namespace {cluster.namespace}, then deletes it")
        if totals["replicas"]:
            a = s.autoscaling
            what = (
                f"raises HorizontalPodAutoscaler {a.hpa}'s minReplicas"
                if a.hpa
                else f"scales Deployment {a.deployment}"
            )
            measured.append(f"scale-up of {a.deployment}")
            touched.append(f"{what} in namespace {cluster.namespace} to {a.replicas}, then restores it")
        text = (
            f"golive measures {'; '.join(measured)}; it {'; '.join(touched) or 'touches nothing'}; nothing else "
            "changes."
        )
        return Changes(text, totals)

    # -- the steps ----------------------------------------------------------------------------------
    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """One step: measure, and write what it measured to `<audit>/golive/<step>.json`."""
        data = getattr(self, f"_{step}")(audit, reporter)
        if data is not None:
            audit.write_json(self.name, f"{step}.json", data)
        # Go-live leaves nothing behind in the target: it measures.
        return StepResult(changed=False, details={"step": step})

    def _fingerprint(self, audit: AuditFolder, reporter: Reporter) -> dict:
        published = self.loaded.layout.digest_map(self.loaded.plan.name)
        return fingerprint(published, self.settings.nodes.driver, self._connect(), gpu=self.settings.gpu_probe)

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
        return probe_jobs.measure(docs, path, self._connect(), s.jobs_timeout_s, poll_s=s.poll_s)

    def _checkpoint(self, audit: AuditFolder, reporter: Reporter) -> dict:
        s = self.settings.checkpoint
        if s is None:
            return {"result": None, "reason": "not configured (phases.golive.checkpoint)"}
        self._clean_crashed(audit.root / self.name)
        url = checkpoint.run_url(self.loaded.storage("target"), s.prefix, f"{audit.root.name}-{time.time_ns()}")
        # Journalled before anything is written: a crashed run's leftovers are found and removed (by the next
        # measurement, or a rollback).
        audit.write_json(self.name, checkpoint.JOURNAL, {"url": url})
        source = checkpoint.synthetic(self.loaded.layout.synthetic_checkpoint, s.size, s.shards)
        settings = TransferSettings(threads=s.threads)
        result = checkpoint.measure(
            source, url, profiles=self.loaded.plan.profiles, settings=settings, stop=reporter.stopping
        )
        log.info("checkpoint measured", write=result.write_gb_per_s, read=result.read_gb_per_s)
        if result.cleanup and not any(p.startswith("cleanup of") for p in result.problems):
            audit.write_json(self.name, checkpoint.CLEANED, {"cleanup": result.cleanup})
        return {"result": result.to_dict(), "reason": ""}

    def _clean_crashed(self, folder: Path) -> None:
        """Remove what the checkpoints of earlier runs left on the target (only under a place a run journalled)."""
        for crashed, url in checkpoint.crashed(folder):
            try:
                done = checkpoint.clean_journalled(crashed, url, self.loaded.plan.profiles)
            except FerryError as exc:
                log.warning("could not remove what an earlier checkpoint left", url=url, error=str(exc))
                continue
            log.info("removed what an earlier run's checkpoint left", run=crashed.parent.name, cleanup=done)

    def _autoscaling(self, audit: AuditFolder, reporter: Reporter) -> dict:
        s, cluster = self.settings.autoscaling, self.loaded.plan.target.cluster
        if s is None:
            return {"seconds": None, "reason": "not configured (phases.golive.autoscaling)"}
        if cluster is None:
            return {"seconds": None, "reason": "no cluster: target.cluster is not set"}
        return autoscale.measure(
            self._api, cluster.namespace, s.deployment, s.hpa, s.replicas, s.timeout_s, poll_s=s.poll_s,
            stop=reporter.stopping, journal=lambda name, data: audit.write_json(self.name, name, data),
        )  # fmt: skip

    def audited_paths(self) -> list[Path]:
        """What the portability audit reads: each image's Dockerfile and build context, the manifests phase's
        sources, the workloads' paths."""
        phases = self.loaded.plan.phases
        images, manifests = getattr(phases, "images", None), getattr(phases, "manifests", None)
        named = [p for d in (images.dockerfiles if images else []) for p in (d.path, d.context) if p]
        named += [str(Path(d.path).parent) for d in (images.dockerfiles if images else []) if not d.context]
        named += manifests.sources if manifests else []
        named += [p for w in self.settings.workloads for p in w.paths]
        return list(dict.fromkeys(self.loaded.resolve(p) for p in named))

    def workloads(self) -> list[portability_report.Workload]:
        """Whom the audit's findings concern: each workload on its accelerator; without workloads, the profile's
        first accelerator."""
        target, base = self.loaded.target, self.loaded.path.parent.resolve()
        default = next(iter(target.accelerators))
        return [
            portability_report.Workload(
                w.name, w.accelerator or default, tuple(_relative(self.loaded.resolve(p), base) for p in w.paths)
            )
            for w in self.settings.workloads
        ] or [portability_report.Workload(default, default)]

    def _portability(self, audit: AuditFolder, reporter: Reporter) -> dict:
        paths = self.audited_paths()
        if not paths:
            reason = (
                "nothing to audit: no phases.images.dockerfiles, phases.manifests.sources nor "
                "phases.golive.workloads[].paths"
            )
            return {"findings": None, "reason": reason}
        workloads = self.workloads()
        target = self.loaded.target
        accelerators = sorted({w.accelerator for w in workloads}, key=list(target.accelerators).index)
        result = portability_audit(paths, target, accelerators, self.loaded.path.parent.resolve())
        log.info("portability audited", files=result.files, findings=len(result.findings))
        return {"paths": [str(p) for p in paths], **portability_report.record(result, workloads)}

    def _report(self, audit: AuditFolder, reporter: Reporter) -> None:
        results = self.gate(audit)
        verdict = gate_status(results, self.loaded.plan.strict)
        measured = recorded(audit.root / self.name, "latency")
        title = f"Go-live report: {self.loaded.plan.name}"
        page = report.html(
            title, verdict, results,
            latency=measured.get("result") or measured.get("jobs_result"),
            checkpoint=recorded(audit.root / self.name, "checkpoint").get("result"),
            gate=self.gate_settings.model_dump(),
            portability=recorded(audit.root / self.name, "portability"),
            generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        )  # fmt: skip
        page_path, text = report.write(audit, title, verdict, results, page)
        reporter.markdown("golive-report", text, f"Go-live report ({verdict.value}); the page: {page_path}")
        return None

    # -- the gate -----------------------------------------------------------------------------------
    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """Every go-live check from what the steps recorded; the last one WARNs if any of them SKIPped."""
        s = self.settings
        latency, autoscaling = s.latency, s.autoscaling
        return golive_checks(
            audit.root / self.name,
            self.gate_settings.model_dump(),
            [
                placement.Workload(**w.model_dump(exclude={"accelerator", "paths"}), long_job_hours=s.long_job_hours)
                for w in s.workloads
            ],
            server_check=latency is None or bool(latency.server),
            replicas=autoscaling.replicas if autoscaling else 0,
            kubernetes_version=self.loaded.plan.target.kubernetes_version,
        )

    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """Undo what a crashed run left: objects under its checkpoint prefix, a replica count it did not restore."""
        folder = audit.root / self.name
        items, done = [], []
        url = checkpoint.journalled(folder)
        if url is not None:
            items.append(f"delete every object under {url}")
            if not dry_run:
                try:
                    done.append(checkpoint.clean_journalled(folder, url, self.loaded.plan.profiles))
                except FerryError as exc:
                    done.append(f"could not clean {url}: {exc}")
        original = autoscale.unrestored(folder)
        if original is not None:
            items.append(f"restore {original['namespace']}/{original['deployment']} as snapshot before the spike")
            if not dry_run:
                done.append(autoscale.restore_journalled(folder, original, self._connect()))
        if not items:
            return Undo(f"nothing to undo: run {audit.root.name} left nothing behind")
        # A clean-up or a restore that could not be done leaves the rollback unfinished: the next one tries again.
        failed = sum(line.startswith("could not") for line in done)
        return Undo("; ".join(items) if dry_run else "; ".join(done), items, failed)

    def _api(self):
        """A client of target.cluster (which must be set); UsageError when its kubeconfig cannot give one."""
        cluster = self.loaded.plan.target.cluster
        assert cluster is not None
        kubeconfig = kube.kubeconfig_path(cluster.kubeconfig, self.loaded.path.parent)
        return kube.api_client(kubeconfig, cluster.context)

    def _connect(self) -> Callable[[], Any] | None:
        """How a domain function opens a client of target.cluster; None when the plan names no cluster."""
        return self._api if self.loaded.plan.target.cluster else None
