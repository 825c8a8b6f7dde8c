"""The manifests phase: render the team's manifests for the target, validate them, roll them out in waves.

With no `target.cluster` the phase renders and validates only. With one, it snapshots every object it will
touch (and the ConfigMaps and Secrets the workloads reference), applies with server-side apply (field manager
`ferry`) wave by wave (namespaces, RBAC with the iam phase's published bindings, config and secrets, storage,
workloads), replaces Jobs whose pod template changed, and waits for readiness. Rolling back restores the
snapshot exactly, in reverse wave order, and deletes what the run created. Secret snapshots live in the state
directory (mode 0600), never in the audit folder: reports name Secrets by key only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import Field, field_validator

from checks.manifests import (
    check_manifests_cluster,
    check_manifests_policy,
    check_manifests_rollout,
    check_manifests_schema,
    check_manifests_sources,
    check_manifests_warnings,
)
from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.errors import FerryError, PermanentError, TransientError, UsageError
from ferry.golive import kube
from ferry.interrupts import failpoint, one_by_one
from ferry.manifests import (
    MANAGED_BY_LABEL,
    PLAN_LABEL,
    WAVES,
    Rendering,
    Rules,
    load_sources,
    readiness,
    references,
    transform,
    wave_of,
)
from ferry.phases.base import Changes, Phase, Reporter, Settings, StepResult, Undo
from ferry.plan import FilePath
from ferry.results import CheckResult, Status

log = structlog.get_logger("ferry.phases.manifests")
FIELD_MANAGER = "ferry"
# Server-set metadata: never part of what is restored or compared.
_SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink")


class ManifestsSettings(Settings):
    """Settings of the manifests phase: where the manifests are and what moves where."""

    # Files and folders (*.yaml, *.yml), relative to the plan.
    sources: list[FilePath] = Field(min_length=1)
    # Image prefix on the source -> on the target; source.registry -> target.registry is added by default.
    images: dict[str, str] = Field(default_factory=dict)
    # Added to (and overriding) the target profile's storage class map.
    storage_classes: dict[str, str] = Field(default_factory=dict)
    namespaces: dict[str, str] = Field(default_factory=dict)
    # Where pod templates live in kinds beyond the built-ins ("group/Kind": dotted paths, `*`, `[]`).
    template_paths: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("template_paths")
    @classmethod
    def _paths(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for kind, paths in value.items():
            for path in paths:
                for segment in path.split("."):
                    if not segment or (segment != "*" and not segment.removesuffix("[]").replace("-", "").isalnum()):
                        raise ValueError(f"{kind}: {path!r} is not a dotted path (segments: key, key[], *)")
        return value


class ManifestsGate(Settings):
    # What the transforms could not carry over; more FAILs (None: unlimited, each is still reported).
    max_warnings: int | None = Field(default=None, ge=0)
    # How long the rollout may take to become ready.
    rollout_timeout_s: float = Field(default=600, gt=0, le=24 * 3600)


def key_of(obj: dict) -> str:
    """An object's identity in journals: apiVersion/kind/namespace/name (namespace empty when cluster-wide)."""
    meta = obj.get("metadata") or {}
    return "|".join((obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"]))


def shown(key: str) -> str:
    """A journal key as reports show it: apiVersion kind [namespace] name."""
    return " ".join(part for part in key.split("|") if part)


def _restorable(obj: dict) -> dict:
    """obj without status and server-set metadata: what a restore writes back."""
    clean = copy.deepcopy(obj)
    clean.pop("status", None)
    for field_name in _SERVER_FIELDS:
        clean.get("metadata", {}).pop(field_name, None)
    return clean


def fingerprint(obj: dict) -> str:
    """A digest of what a person or tool may change (status and server-set metadata left out)."""
    return hashlib.sha256(json.dumps(_restorable(obj), sort_keys=True).encode()).hexdigest()[:16]


def _write_private(path: Path, data: Any) -> None:
    """Write JSON readable by the owner only (Secret snapshots), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = path.with_name(path.name + ".staging")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(data, file)
    os.replace(staging, path)


class ClusterApi:
    """The target cluster through the official client's dynamic API: get, apply, replace, delete by object."""

    def __init__(self, api_client: Any, discovery_cache: Path):
        from kubernetes import dynamic

        # Discovered afresh each time (the client would reuse a file in /tmp shared by every process, however
        # old): what the cluster serves, and at which version, may have changed since the last call.
        discovery_cache.parent.mkdir(parents=True, exist_ok=True)
        discovery_cache.unlink(missing_ok=True)
        with kube.translated("discovery"):
            self.client = dynamic.DynamicClient(api_client, cache_file=str(discovery_cache))

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with kube.translated(f"discovery of {api_version} {kind}"):
            try:
                return self.client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # A CustomResourceDefinition applied in an earlier wave: discovery must look again.
                self.client.resources.invalidate_cache()
            try:
                return self.client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                raise PermanentError(f"the cluster does not serve {api_version} {kind}") from None

    # Kinds looked for in a namespace before deleting it; what a controller owns (pods of a Deployment) is not asked.
    _NAMESPACED = (
        ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "PersistentVolumeClaim"), ("v1", "Service"), ("v1", "Pod"),
        ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
    )  # fmt: skip

    def strangers(self, namespace: str, plan: str) -> list[str]:
        """Objects in namespace that the plan did not apply and no controller owns (kind/name each)."""
        found = []
        for api_version, kind in self._NAMESPACED:
            resource = self._resource(api_version, kind)
            with kube.translated(f"list {kind} in {namespace}"):
                items = resource.get(namespace=namespace, label_selector=f"{PLAN_LABEL}!={plan}").to_dict()["items"]
            for item in items:
                meta = item["metadata"]
                # Every namespace gets the cluster's CA bundle ConfigMap: it is no one's.
                if not meta.get("ownerReferences") and meta["name"] != "kube-root-ca.crt":
                    found.append(f"{kind}/{meta['name']}")
        return found

    def version(self) -> str:
        """The API server's Kubernetes version, major.minor (from discovery)."""
        found = self.client.version["kubernetes"]
        return f"{found['major']}.{str(found['minor']).rstrip('+')}"

    def namespaced(self, api_version: str, kind: str) -> bool:
        return bool(self._resource(api_version, kind).namespaced)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None) -> dict | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        resource = self._resource(api_version, kind)
        with kube.translated(f"get {kind} {name}"):
            try:
                return resource.get(name=name, namespace=namespace).to_dict()
            except NotFoundError:
                return None

    def apply(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with kube.translated(f"apply {obj['kind']} {obj['metadata']['name']}"):
            return resource.server_side_apply(
                body=obj, namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER, force_conflicts=True
            ).to_dict()

    def create(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with kube.translated(f"create {obj['kind']} {obj['metadata']['name']}"):
            return resource.create(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def replace(self, obj: dict) -> dict:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        with kube.translated(f"replace {obj['kind']} {obj['metadata']['name']}"):
            return resource.replace(body=obj, namespace=obj["metadata"].get("namespace")).to_dict()

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None, wait_s: float = 300) -> bool:
        """Delete (foreground: a Job's pods go with it) and wait until it is gone, so that the name can be created
        again; False when it was already gone."""
        from kubernetes.dynamic.exceptions import NotFoundError

        resource = self._resource(api_version, kind)
        with kube.translated(f"delete {kind} {name}"):
            try:
                resource.delete(name=name, namespace=namespace, body={"propagationPolicy": "Foreground"})
            except NotFoundError:
                return False
        deadline = time.monotonic() + wait_s
        while self.get(api_version, kind, name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TransientError(f"delete {kind} {name}: still there after {wait_s:g} s (finalizers?)")
            time.sleep(0.5)
        return True


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

    def report(self, rendering: Rendering, results: list[CheckResult]) -> str:
        """What was rendered and validated, and what could not be carried over, as Markdown (no Secret value)."""
        lines = [
            f"# Manifests for {self.loaded.target.name}",
            "",
            f"{len(rendering.documents)} object(s) from {len(rendering.files)} file(s); "
            + ", ".join(f"{r.name} **{r.status.value}**" for r in results),
            "",
            f"## Not carried over ({len(rendering.findings)})",
            *(f"- {finding}" for finding in rendering.findings),
        ]
        return "\n".join(lines) + "\n"

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
        path = kube.kubeconfig_path(target.kubeconfig, self.loaded.path.parent.resolve())
        return ClusterApi(
            kube.api_client(path, target.context), self.loaded.layout.discovery_cache
        )

    def objects(self, rendering: Rendering, cluster: ClusterApi) -> list[dict]:
        """What to apply, in wave order: the rendered objects and the iam phase's bindings, each with a namespace
        when its kind is namespaced (the cluster's, when the manifest names none)."""
        target = self.loaded.plan.target.cluster
        assert target is not None
        # A v1 List, a kustomization and an object without a name are reported (findings), not applied.
        found = [doc.plain() for doc in rendering.documents if doc.applicable]
        published = self.loaded.layout.bindings(self.loaded.plan.name)
        if published.exists():
            for binding in yaml.safe_load_all(published.read_text(encoding="utf-8")):
                if binding:
                    labels = binding.setdefault("metadata", {}).setdefault("labels", {})
                    labels.update({PLAN_LABEL: self.loaded.plan.name, MANAGED_BY_LABEL: "ferry"})
                    found.append(binding)
        for obj in found:
            if cluster.namespaced(obj["apiVersion"], obj["kind"]):
                obj["metadata"].setdefault("namespace", target.namespace)
        return sorted(found, key=lambda o: WAVES.index(wave_of(o["kind"])))

    def changes(self) -> Changes:
        rendering = self.render()
        if self.loaded.plan.target.cluster is None:
            text = f"manifests will render {len(rendering.documents)} object(s); no cluster: nothing is applied"
            return Changes(text, {"rendered": len(rendering.documents)})
        cluster = self.cluster()
        totals = {"create": 0, "update": 0}
        for obj in self.objects(rendering, cluster):
            meta = obj["metadata"]
            exists = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            totals["update" if exists else "create"] += 1
        text = f"manifests will create {totals['create']} and update {totals['update']} object(s) in waves"
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
        reporter.markdown("manifests-report", self.report(rendering, results), "Manifests rendered for the target")
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
        applied = self._apply(cluster, objects, audit, reporter.stopping)
        waiting = self._wait(cluster, objects, reporter)
        audit.write_json(self.name, "readiness.json", {"objects": len(objects), "waiting": waiting})
        # What the rollout left, to tell later what someone changed since.
        audit.write_json(self.name, "fingerprints.json", self._fingerprints(cluster, objects))
        return StepResult(changed=applied > 0, details={**summary, "applied": applied})

    def _snapshot(self, cluster: ClusterApi, objects: list[dict], audit: AuditFolder) -> None:
        """Every object the run will touch, and every ConfigMap and Secret its workloads reference, as they are.

        Taken once per run: a retried step keeps the first snapshot, not what its first attempt half applied.
        """
        if (audit.root / self.name / "snapshot.json").exists():
            return
        rules = self.rules()
        wanted = {key_of(o): o for o in objects}
        for obj in objects:
            namespace = obj["metadata"].get("namespace")
            for kind, name in references(obj, rules):
                ref = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}
                wanted.setdefault(key_of(ref), ref)
        snapshot, secrets = [], {}
        for key, obj in wanted.items():
            meta = obj["metadata"]
            live = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            entry = {"key": key, "existed": live is not None, "applied": key in {key_of(o) for o in objects}}
            if obj["kind"] == "Secret":
                entry["keys"] = sorted({**(live or {}).get("data", {})}) if live else []
                if live is not None:
                    secrets[key] = live
            else:
                entry["object"] = live
            snapshot.append(entry)
        audit.write_json(self.name, "snapshot.json", snapshot)
        _write_private(self._secrets_file(audit.root), secrets)

    def _apply(self, cluster: ClusterApi, objects: list[dict], audit: AuditFolder, stopping: threading.Event) -> int:
        """Apply wave by wave, journaling each object before it is changed; a Job whose pod template changed (the
        API server refuses the apply: immutable) is replaced."""
        snapshot = {e["key"]: e for e in json.loads(audit.path(self.name, "snapshot.json").read_text(encoding="utf-8"))}
        journal = audit.path(self.name, "applied.jsonl")

        def record(key: str, kind: str, action: str) -> None:
            with journal.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"key": key, "wave": wave_of(kind), "action": action}) + "\n")

        for obj in objects:
            key, meta = key_of(obj), obj["metadata"]
            action = "updated" if snapshot[key]["existed"] else "created"
            record(key, obj["kind"], action)
            try:
                cluster.apply(obj)
            except PermanentError as exc:
                if obj["kind"] != "Job" or exc.code != "422":
                    raise
                action = "replaced"
                record(key, obj["kind"], action)
                cluster.delete(obj["apiVersion"], "Job", meta["name"], meta.get("namespace"))
                cluster.create(obj)
            log.info("applied", object=key, action=action)
            failpoint("manifests:mid-wave", stopping)
        return len(objects)

    def _wait(self, cluster: ClusterApi, objects: list[dict], reporter: Reporter) -> list[str]:
        """Poll until every object is ready, one fails, or the timeout passes; what is not ready, and why."""
        deadline = time.monotonic() + self.gate_settings.rollout_timeout_s
        pending = {key_of(o): o for o in objects}
        why: dict[str, str] = {}
        while pending:
            for key, obj in list(pending.items()):
                meta = obj["metadata"]
                live = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
                state, reason = readiness(live) if live else ("waiting", "not found")
                if state == "ready":
                    del pending[key]
                elif state == "failed":
                    return [f"{key}: {reason}"]
                else:
                    why[key] = reason
            if not pending or time.monotonic() >= deadline or reporter.stopping.is_set():
                break
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
        return [f"{key}: {why.get(key, 'not ready')}" for key in pending]

    def _fingerprints(self, cluster: ClusterApi, objects: list[dict]) -> dict[str, str | None]:
        live = {}
        for obj in objects:
            meta = obj["metadata"]
            found = cluster.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            live[key_of(obj)] = fingerprint(found) if found else None
        return live

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """Schema, policy and warnings as the run measured them; the rollout's readiness (SKIP without a cluster)."""
        folder = audit.root / self.name
        results = [CheckResult.from_dict(r) for r in json.loads((folder / "validation.json").read_text("utf-8"))]
        ready = json.loads((folder / "readiness.json").read_text(encoding="utf-8"))
        timeout = self.gate_settings.rollout_timeout_s
        if "skipped" in ready:
            return [*results, check_manifests_rollout(None, 0, timeout, ready["skipped"])]
        return [*results, check_manifests_rollout(ready["waiting"], ready["objects"], timeout)]

    # -- rollback ---------------------------------------------------------------------------------------
    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """Restore every object the run changed as the snapshot has it, delete what it created, in reverse wave
        order; objects someone changed since the rollout stop it (ferry rollback --force goes on)."""
        folder = audit.root / self.name
        journal = folder / "applied.jsonl"
        if not journal.exists():
            return Undo(f"nothing to undo: run {audit.root.name} applied nothing to a cluster")
        applied = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line]
        snapshot = {e["key"]: e for e in json.loads((folder / "snapshot.json").read_text(encoding="utf-8"))}
        secrets_file = self._secrets_file(audit.root)
        secrets = json.loads(secrets_file.read_text(encoding="utf-8")) if secrets_file.exists() else {}
        # One undo per object, in exactly the reverse order of application; a Job replaced after its apply was
        # refused is undone as replaced (a retried step may have journaled an object twice).
        merged: dict[str, dict] = {}
        for entry in applied:
            first = merged.setdefault(entry["key"], dict(entry))
            if entry["action"] == "replaced" and first["action"] != "created":
                first["action"] = "replaced"
        # A rollback stopped between two objects left the ones it undid here: not undone twice, and not taken for
        # drift (they differ from what the rollout left because the rollback put them back).
        undone_file = folder / "rollback-undone.jsonl"
        undone = set(undone_file.read_text(encoding="utf-8").splitlines()) if undone_file.exists() else set()
        order = [a for a in list(merged.values())[::-1] if a["key"] not in undone]
        items = [
            f"{'delete' if a['action'] == 'created' else 'restore'} {shown(a['key'])} ({a['wave']})" for a in order
        ]
        cluster = self.cluster()
        # During the run itself (its gate failed) its own rollback restores without asking; after a commit,
        # someone may have changed what the rollout left.
        drifted = [k for k in self._drifted(cluster, folder) if k not in undone] if self._committed(audit.root) else []
        if dry_run:
            notes = [f"changed since the rollout: {shown(key)}" for key in drifted]
            return Undo(f"restore {len(items)} object(s) of run {audit.root.name} in reverse wave order", notes + items)
        if drifted and not force:
            raise UsageError(
                f"{len(drifted)} object(s) changed since the rollout of run {audit.root.name} "
                f"({', '.join(shown(k) for k in drifted[:3])}): rollback stopped; --force restores anyway"
            )
        kept = []
        with undone_file.open("a", encoding="utf-8") as journal:
            for entry in one_by_one(order, stopping):
                kept.append(self._undo_one(cluster, entry, snapshot[entry["key"]], secrets.get(entry["key"])))
                journal.write(entry["key"] + "\n")
                journal.flush()
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

    def _drifted(self, cluster: ClusterApi, folder: Path) -> list[str]:
        """Keys of objects whose live state differs from what the rollout left (none before it finished)."""
        recorded = folder / "fingerprints.json"
        if not recorded.exists():
            return []
        drifted = []
        for key, before in json.loads(recorded.read_text(encoding="utf-8")).items():
            api_version, kind, namespace, name = key.split("|")
            live = cluster.get(api_version, kind, name, namespace or None)
            if (fingerprint(live) if live else None) != before:
                drifted.append(key)
        return drifted

    def _undo_one(self, cluster: ClusterApi, entry: dict, snap: dict, secret: dict | None) -> str | None:
        """Undo one journaled change; a note when something is kept instead (it is not ferry's to delete)."""
        api_version, kind, namespace, name = entry["key"].split("|")
        ns = namespace or None
        if entry["action"] == "created":
            live = cluster.get(api_version, kind, name, ns)
            if live is None:
                return None
            labels = (live.get("metadata") or {}).get("labels") or {}
            if labels.get(PLAN_LABEL) != self.loaded.plan.name:
                return f"kept {kind} {name}: it does not carry {PLAN_LABEL}={self.loaded.plan.name} (not ferry's)"
            if kind == "Namespace":
                strangers = cluster.strangers(name, self.loaded.plan.name)
                if strangers:
                    return f"kept Namespace {name}: it holds objects ferry did not apply ({', '.join(strangers[:3])})"
            cluster.delete(api_version, kind, name, ns)
            return None
        previous = secret if kind == "Secret" else snap.get("object")
        if previous is None:
            return None
        restored = _restorable(previous)
        live = cluster.get(api_version, kind, name, ns)
        if entry["action"] == "replaced" or live is None:
            if live is not None:
                cluster.delete(api_version, kind, name, ns)
            cluster.create(_without_generated_job_fields(restored) if kind == "Job" else restored)
            return None
        restored["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        cluster.replace(restored)
        return None


def _without_generated_job_fields(job: dict) -> dict:
    """A Job as it can be created again: the selector and controller-uid labels the API server generated removed."""
    job = copy.deepcopy(job)
    spec = job.get("spec", {})
    if not spec.get("manualSelector"):
        spec.pop("selector", None)
        labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
        for label in (
            "controller-uid",
            "batch.kubernetes.io/controller-uid",
            "job-name",
            "batch.kubernetes.io/job-name",
        ):
            labels.pop(label, None)
    return job
