"""The manifests phase: render the team's manifests for the target, validate them, roll them out in waves.

With no `target.cluster` the phase renders and validates only. With one, it snapshots every object it will
touch (and the ConfigMaps and Secrets the workloads reference), applies with server-side apply (field manager
`ferry`) wave by wave (namespaces, RBAC with the iam phase's published bindings, config and secrets, storage,
workloads), replaces Jobs whose pod template changed, and waits for readiness. Rolling back restores the
snapshot exactly, in reverse wave order, and deletes what the run created. Secret snapshots live in the state
directory (mode 0600), never in the audit folder: reports name Secrets by key only.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import structlog
import yaml

from checks.manifests import (
    check_manifests_applied,
    check_manifests_cluster,
    check_manifests_policy,
    check_manifests_rollout,
    check_manifests_schema,
    check_manifests_sources,
    check_manifests_warnings,
)
from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.errors import FerryError, UsageError
from ferry.files import Journal, write_atomic
from ferry.interrupts import one_by_one
from ferry.kube import ClusterApi, api_client, kubeconfig_path
from ferry.manifests import preview
from ferry.manifests.apply import (
    apply_in_waves,
    changed_since,
    dry_run,
    fingerprint,
    fingerprints,
    foreign_owners,
    keep_fixed,
    live_objects,
    shown,
    take_snapshot,
    to_apply,
    wait_ready,
)
from ferry.manifests.model import Rendering, Rules, default_export_rules
from ferry.manifests.rollout import WAVES
from ferry.manifests.rules import transform
from ferry.manifests.settings import ManifestsGate, ManifestsSettings
from ferry.manifests.source import load_sources
from ferry.manifests.undo import drifted, undo_one, undo_order
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.results import CheckResult, Status

# In the phase's folder of a run: each object journaled before it changes, and each one a rollback undid.
APPLIED, UNDONE = "applied.jsonl", "rollback-undone.jsonl"
# Beside them: who else owned fields of each object the rollout left (a later rollback's drift check).
OWNERS = "owners.json"
log = structlog.get_logger("ferry.phases.manifests")


class ManifestsPhase(Phase):
    """The team's manifests rewritten for the target, validated, and rolled out in waves with an exact rollback."""

    name = "manifests"
    settings_model = ManifestsSettings
    gate_model = ManifestsGate

    @property
    def live_inputs(self) -> bool:
        """A cluster's objects live outside the plan: with one, the phase always runs and compares."""
        return self.loaded.plan.target.cluster is not None

    def files(self) -> dict[tuple, Path]:
        return {
            ("phases", "manifests", "sources", i): self.loaded.resolve(entry)
            for i, entry in enumerate(self.settings.sources)
        }

    def inputs(self) -> dict[str, Any]:
        digests = self.loaded.layout.digest_map(self.loaded.plan.name)
        return {
            "sources": {
                str(path): hashlib.sha256(path.read_bytes()).hexdigest()
                for entry in self.files().values()
                for path in (sorted(entry.rglob("*")) if entry.is_dir() else [entry])
                if path.is_file()
            },
            "digest_map": hashlib.sha256(digests.read_bytes()).hexdigest() if digests.exists() else None,
            "target": self.loaded.target.model_dump(mode="json"),
            "kubernetes_version": self.loaded.plan.target.kubernetes_version,
        }

    def images(self) -> dict[str, str]:
        """Source image prefix -> target prefix: source.registry -> target.registry when both are set, then the
        settings' own."""
        plan = self.loaded.plan
        default = {plan.source.registry: plan.target.registry} if plan.source.registry and plan.target.registry else {}
        return {**default, **self.settings.images}

    def rules(self) -> Rules:
        """The transforms' rules from the settings, the target profile and the images phase's digest map."""
        plan, settings, target = self.loaded.plan, self.settings, self.loaded.target
        return Rules(
            plan=plan.name,
            images=self.images(),
            digests=digest_map.read(self.loaded.layout.digest_map(plan.name)),
            pod_annotations=dict(target.pod_annotations),
            gpu_resource=target.gpu_resource,
            rdma_resource=target.rdma_resource,
            storage_classes={**target.storage_classes, **settings.storage_classes},
            namespaces=dict(settings.namespaces),
            template_paths={kind: tuple(paths) for kind, paths in settings.template_paths.items()},
            export_rules=(*default_export_rules(), *settings.leave_out),
        )

    def render(self) -> Rendering:
        """The sources read and transformed (nothing written)."""
        return transform(load_sources(list(self.files().values()), self.loaded.path.parent.resolve()), self.rules())

    def validate(self, rendering: Rendering) -> list[CheckResult]:
        """Schema, policy and warnings of a rendering: the checks that need no cluster."""
        rules = self.rules()
        return [
            check_manifests_schema(rendering, self.loaded.plan.target.kubernetes_version, rules),
            check_manifests_policy(rendering, rules),
            check_manifests_warnings(rendering, self.gate_settings.max_warnings),
        ]

    def write_render(self, rendering: Rendering, audit: AuditFolder) -> None:
        """The bundle (Secret values masked), the per-resource diff and the findings into the audit folder."""
        audit.write_text(self.name, "bundle.yaml", rendering.bundle())
        audit.write_text(self.name, "diff.patch", rendering.diff())
        audit.write_text(self.name, "findings.txt", "".join(f"{f}\n" for f in rendering.findings))

    def summary(self) -> str:
        plan, gate, settings = self.loaded.plan, self.gate_settings, self.settings
        cluster = plan.target.cluster
        where = (
            f"apply them to context {cluster.context} in waves ({', '.join(WAVES)}) with server-side apply, "
            f"waiting up to {gate.rollout_timeout_s:g} s for readiness"
            if cluster
            else "no target.cluster: render and validate only"
        )
        return (
            f"rewrite the manifests of {', '.join(self.settings.sources)} for {self.loaded.target.name} "
            f"(images {', '.join(f'{a} -> {b}' for a, b in self.images().items()) or 'unchanged'}; "
            f"namespaces {', '.join(f'{a} -> {b}' for a, b in settings.namespaces.items()) or 'unchanged'}; "
            f"pod annotations on GPU workloads: {', '.join(self.loaded.target.pod_annotations) or 'none'}), "
            f"validate them against Kubernetes {plan.target.kubernetes_version or 'latest'} and {where}"
        )

    def preflight(self) -> list[CheckResult]:
        """The sources are readable YAML; with a cluster, its API server answers (at which version)."""
        results = [check_manifests_sources(list(self.files().values()), self.loaded.path.parent.resolve())]
        if self.loaded.plan.target.cluster is not None:
            wanted = self.loaded.plan.target.kubernetes_version
            try:
                results.append(check_manifests_cluster(self.cluster().version(), "", wanted))
            except FerryError as exc:
                results.append(check_manifests_cluster(None, str(exc), wanted))
        return results

    # -- the cluster ------------------------------------------------------------------------------------
    def cluster(self) -> ClusterApi:
        """The official client on the plan's kubeconfig and context."""
        target = self.loaded.plan.target.cluster
        assert target is not None
        path = kubeconfig_path(target.kubeconfig, self.loaded.path.parent.resolve())
        return ClusterApi(
            api_client(path, target.context), self.loaded.layout.discovery_cache
        )

    def objects(self, rendering: Rendering, cluster: ClusterApi) -> list[dict]:
        """What to apply, in wave order: the rendered objects and the iam phase's bindings, each with a namespace
        when its kind is namespaced (the cluster's, when the manifest names none)."""
        target = self.loaded.plan.target.cluster
        assert target is not None
        # A List's items one by one; a kustomization and an object without a name are reported (findings), not applied.
        found = [doc.plain() for doc in rendering.documents if doc.applicable]
        published = self.loaded.layout.bindings(self.loaded.plan.name)
        text = published.read_text(encoding="utf-8") if published.exists() else ""
        bindings = [binding for binding in yaml.safe_load_all(text) if binding]
        return to_apply(cluster, found, bindings, self.loaded.plan.name, target.namespace)

    def changes(self) -> Changes:
        """Object by object: created, changed (with the fields), unchanged, left out; against the cluster by a
        server-side dry run where there is one, else against the last rendered bundle."""
        rendering = self.render()
        left_out = [f"{doc.label} ({doc.left_out})" for doc in rendering.left_out]
        if self.loaded.plan.target.cluster is None:
            last = self.loaded.layout.last_bundle()
            rendered = [obj for obj in yaml.safe_load_all(rendering.bundle()) if obj]
            if last is None:
                said = f"no earlier rendering to compare with: {len(rendered)} object(s) rendered"
            else:
                diff = preview.against_bundle(rendered, last.read_text(encoding="utf-8"))
                said = f"against the rendering of run {last.parent.parent.name}: {preview.in_words(diff, left_out)}"
            text = f"manifests will render {len(rendering.documents)} object(s); no cluster: nothing is applied; {said}"
            return Changes(text, {"rendered": len(rendering.documents)})
        cluster = self.cluster()
        diff = preview.against_cluster(cluster, self.objects(rendering, cluster))
        totals = {"create": len(diff["created"]), "update": sum(len(v) for k, v in diff.items() if k != "created")}
        text = (
            f"manifests will create {totals['create']} and update {totals['update']} object(s) in waves; by a "
            f"server-side dry run: {preview.in_words(diff, left_out)}"
        )
        return Changes(text, totals)

    # -- a run ------------------------------------------------------------------------------------------
    def _secrets_file(self, audit_root: Path) -> Path:
        return self.loaded.layout.secret_snapshot(audit_root.name)

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Render and validate; with a cluster and valid manifests, snapshot, apply in waves, wait for readiness."""
        rendering = self.render()
        self.write_render(rendering, audit)
        results = self.validate(rendering)
        audit.write_json(self.name, "validation.json", [r.to_dict() for r in results])
        for finding in rendering.findings:
            log.warning("not carried over", finding=str(finding))
        reporter.markdown(
            "manifests-report", rendering.report(self.loaded.target.name, results), "Manifests rendered for the target"
        )
        summary: dict[str, Any] = {"rendered": len(rendering.documents), "warnings": len(rendering.findings)}
        if self.loaded.plan.target.cluster is None:
            audit.write_json(self.name, "readiness.json", {"skipped": "no target.cluster: rendered and validated only"})
            return StepResult(changed=False, details={**summary, "applied": 0})
        if any(r.status == Status.FAIL for r in results[:2]):
            audit.write_json(self.name, "readiness.json", {"skipped": "not applied: schema or policy failed"})
            return StepResult(changed=False, details={**summary, "applied": 0})
        cluster = self.cluster()
        objects = self.objects(rendering, cluster)
        self._snapshot(cluster, objects, audit)
        snapshot = {e["key"]: e for e in json.loads(audit.path(self.name, "snapshot.json").read_text(encoding="utf-8"))}
        objects, kept = keep_fixed(objects, snapshot)
        dry_run(cluster, objects)
        journal = Journal(audit.path(self.name, APPLIED))
        applied, notes, took = apply_in_waves(cluster, objects, snapshot, journal, reporter.stopping)
        notes = kept + notes
        waiting = wait_ready(cluster, objects, self.gate_settings.rollout_timeout_s, reporter.stopping)
        readiness = {"objects": len(objects), "waiting": waiting, "notes": notes, "took": took}
        audit.write_json(self.name, "readiness.json", readiness)
        # What the rollout left, read once: its fingerprints, and who else owns fields of it (a later rollback's
        # drift check).
        live = live_objects(cluster, objects)
        left = fingerprints(live)
        audit.write_json(self.name, "fingerprints.json", left)
        audit.write_json(self.name, OWNERS, fingerprints(live, foreign_owners))
        # Changed against the run's snapshot, not by this attempt alone: a retried step's first attempt counts, and
        # an apply of what the cluster holds already changes nothing.
        secrets_file = self._secrets_file(audit.root)
        secrets = json.loads(secrets_file.read_text(encoding="utf-8")) if secrets_file.exists() else {}
        changed = changed_since(snapshot, secrets, left)
        return StepResult(changed=bool(changed), details={**summary, "applied": applied, "changed": len(changed)})

    def _snapshot(self, cluster: ClusterApi, objects: list[dict], audit: AuditFolder) -> None:
        """Every object the run will touch, and every ConfigMap and Secret its workloads reference, as they are.

        Taken once per run: a retried step keeps the first snapshot, not what its first attempt half applied.
        """
        if (audit.root / self.name / "snapshot.json").exists():
            return
        snapshot, secrets = take_snapshot(cluster, objects, self.rules())
        audit.write_json(self.name, "snapshot.json", snapshot)
        write_atomic(self._secrets_file(audit.root), json.dumps(secrets), private=True)

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """Schema, policy and warnings as the run measured them; the rollout's readiness (SKIP without a cluster)."""
        folder = audit.root / self.name
        results = [CheckResult.from_dict(r) for r in json.loads((folder / "validation.json").read_text("utf-8"))]
        ready = json.loads((folder / "readiness.json").read_text(encoding="utf-8"))
        timeout = self.gate_settings.rollout_timeout_s
        if "skipped" in ready:
            skipped = ready["skipped"]
            applied = check_manifests_applied(None, [], skipped)
            return [*results, applied, check_manifests_rollout(None, 0, timeout, skipped)]
        return [
            *results,
            check_manifests_applied(ready.get("notes", []), ready.get("took", [])),
            check_manifests_rollout(ready["waiting"], ready["objects"], timeout),
        ]

    # -- rollback ---------------------------------------------------------------------------------------
    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """Restore every object the run changed as the snapshot has it, delete what it created, in reverse wave
        order; objects someone changed since the rollout stop it (ferry rollback --force goes on)."""
        folder = audit.root / self.name
        journal = Journal(folder / APPLIED)
        if not journal.path.exists():
            return Undo(f"nothing to undo: run {audit.root.name} applied nothing to a cluster")
        applied = list(journal.entries())
        snapshot = {e["key"]: e for e in json.loads((folder / "snapshot.json").read_text(encoding="utf-8"))}
        secrets_file = self._secrets_file(audit.root)
        secrets = json.loads(secrets_file.read_text(encoding="utf-8")) if secrets_file.exists() else {}
        # A rollback stopped between two objects left the ones it undid here: not undone twice, and not taken for
        # drift (they differ from what the rollout left because the rollback put them back).
        undone_journal = Journal(folder / UNDONE)
        undone = undone_journal.keys()
        order = undo_order(applied, undone)
        items = [
            f"{'delete' if a['action'] == 'created' else 'restore'} {shown(a['key'])} ({a['wave']})" for a in order
        ]
        cluster = self.cluster()
        # During the run itself (its gate failed) its own rollback restores without asking; after a commit,
        # someone may have changed what the rollout left: a field manager other than ferry and the control plane
        # changed it (a run of an earlier ferry recorded only whole fingerprints; none before it finished).
        owners, whole = folder / OWNERS, folder / "fingerprints.json"
        recorded, of = (owners, foreign_owners) if owners.exists() else (whole, fingerprint)
        changed = []
        if self._committed(audit.root) and recorded.exists():
            left = json.loads(recorded.read_text(encoding="utf-8"))
            changed = [k for k in drifted(cluster, left, of) if k not in undone]
        if dry_run:
            notes = [f"changed since the rollout: {shown(key)}" for key in changed]
            return Undo(f"restore {len(items)} object(s) of run {audit.root.name} in reverse wave order", notes + items)
        if changed and not force:
            raise UsageError(
                f"{len(changed)} object(s) changed since the rollout of run {audit.root.name} "
                f"({', '.join(shown(k) for k in changed[:3])}): rollback stopped; --force restores anyway"
            )
        kept = []
        for entry in one_by_one(order, stopping):
            snap, secret = snapshot[entry["key"]], secrets.get(entry["key"])
            kept.append(undo_one(cluster, entry, snap, secret, self.loaded.plan.name))
            undone_journal.add({"key": entry["key"]})
        notes = [note for note in kept if note]
        return Undo(f"restored {len(items)} object(s) of run {audit.root.name} in reverse wave order", notes + items)

    def _committed(self, audit_root: Path) -> bool:
        """Whether the run whose audit folder is audit_root is the phase's live commit in the run log."""
        from ferry.runlog import FILE, RunLog

        state = self.loaded.layout.state
        if not (state / FILE).exists():
            return False
        runlog = RunLog(state)
        try:
            live = runlog.live_commit(self.loaded.plan.name, self.name)
        finally:
            runlog.close()
        return live is not None and live[0] == audit_root.name
