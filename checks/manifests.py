"""The manifests gate: every rendered object valid against the target's schemas, the profile's policy kept, what
could not be carried over counted, and the rollout ready in time."""

from __future__ import annotations

from pathlib import Path

from checks.kube_schema import (
    SchemaNotFoundError,
    VersionNotSupportedError,
    schema_errors,
    schema_version,
    unknown_version,
)
from ferry.errors import UsageError
from ferry.manifests.model import Rendering, Rules
from ferry.manifests.paths import containers, is_gpu_workload, leaves, pod_templates, sub_map
from ferry.manifests.rules import rewrite_image
from ferry.manifests.source import load_sources
from ferry.results import CheckResult, Status


def check_manifests_schema(rendering: Rendering, kubernetes_version: str | None, rules: Rules) -> CheckResult:
    """Every object validates strictly, every error listed; a custom resource's pod templates as PodTemplateSpec."""
    name = "manifests.schema"
    try:
        version = schema_version(kubernetes_version)
    except VersionNotSupportedError:
        return unknown_version(name, len(rendering.documents), kubernetes_version)
    errors, unvalidated = [], []
    for doc in rendering.documents:
        if not doc.is_object:
            continue
        where = f"{doc.where} {doc.label}"
        data = doc.plain()
        try:
            errors += [f"{where}: {error}" for error in schema_errors(data, version, hide_values=doc.kind == "Secret")]
            continue
        except SchemaNotFoundError:
            pass
        templates = pod_templates(data, rules)
        for path, template in templates:
            errors += [f"{where}: {path}.{e}" for e in schema_errors(template, version, schema="podtemplatespec-v1")]
        covered = f"its {len(templates)} pod template(s) validated as PodTemplateSpec" if templates else "not validated"
        unvalidated.append(f"{where}: no schema for {doc.api_version} {doc.kind} in Kubernetes {version}: {covered}")
    status = Status.FAIL if errors else Status.WARN if unvalidated else Status.PASS
    measured = {
        "objects": len(rendering.documents),
        "errors": len(errors),
        "without_schema": len(unvalidated),
        "kubernetes": version,
    }
    return CheckResult(name, status, measured, {"errors": 0}, errors + unvalidated)


def check_manifests_policy(rendering: Rendering, rules: Rules) -> CheckResult:
    """The profile's policy: annotations on every GPU workload, no image on the source registry (in any `image`
    field), no :latest, every moved image pinned by digest when the images phase published a digest map."""
    problems = []
    templates = workloads = 0
    targets = tuple(prefix.rstrip("/") + "/" for prefix in rules.images.values())
    for doc in rendering.documents:
        where = f"{doc.where} {doc.label}"
        for path, template in pod_templates(doc.data, rules):
            templates += 1
            if is_gpu_workload(template, rules.gpu_resource):
                workloads += 1
                annotations = sub_map(sub_map(template, "metadata"), "annotations")
                problems += [
                    f"{where}: {path or 'metadata'}: GPU workload without annotation {key}: {value}"
                    for key, value in rules.pod_annotations.items()
                    if annotations.get(key) != value
                ]
            for at, container in containers(template):
                image = container.get("image")
                at = f"{path}.{at}" if path else at
                if not isinstance(image, str) or not image:
                    # The schema lets it be left out; the API server does not.
                    problems.append(f"{where}: {at}.image: no image")
                    continue
                last = image.rsplit("/", 1)[-1]
                if "@" not in last and (":" not in last or last.endswith(":latest")):
                    problems.append(f"{where}: {at}.image: {image} is :latest (name a tag or a digest)")
                if rules.digests and image.startswith(targets) and "@sha256:" not in image:
                    problems.append(f"{where}: {at}.image: {image} is not pinned by digest (not in the digest map)")
        # Any image field, pod template or not (an InferenceService's model, an Argo step, an operator's CR).
        problems += [
            f"{where}: {path}: {value} is still on the source registry"
            for path, value in leaves(doc.data)
            if doc.is_object
            and path.rpartition(".")[2] == "image"
            and isinstance(value, str)
            and rewrite_image(value, rules.images)
        ]
    measured = {"pod_templates": templates, "gpu_workloads": workloads, "violations": len(problems)}
    return CheckResult(
        "manifests.policy", Status.FAIL if problems else Status.PASS, measured, {"violations": 0}, problems
    )


def check_manifests_warnings(rendering: Rendering, max_warnings: int | None) -> CheckResult:
    """What the transforms could not carry over, counted: over max_warnings FAIL, any WARN."""
    findings = [str(f) for f in rendering.findings]
    over = max_warnings is not None and len(findings) > max_warnings
    status = Status.FAIL if over else Status.WARN if findings else Status.PASS
    threshold = {"max_warnings": "unlimited" if max_warnings is None else max_warnings}
    return CheckResult("manifests.warnings", status, {"warnings": len(findings)}, threshold, findings)


def check_manifests_applied(notes: list[str] | None, took: list[str], skipped: str = "") -> CheckResult:
    """The cluster took every object as rendered; WARN with what it kept instead (a field the control plane owns, a
    claim's fixed spec) and what the API server warned of; the fields taken from other managers are listed either
    way. SKIP when nothing was applied."""
    if notes is None:
        return CheckResult("manifests.applied", Status.SKIP, {}, evidence=[skipped])
    measured = {"notes": len(notes), "taken": len(took)}
    return CheckResult("manifests.applied", Status.WARN if notes else Status.PASS, measured, {}, notes + took)


def check_manifests_rollout(
    waiting: list[str] | None, objects: int, timeout_s: float, skipped: str = ""
) -> CheckResult:
    """The applied workloads became ready within the timeout; SKIP (with why) when nothing was rolled out."""
    threshold = {"rollout_timeout_s": timeout_s}
    if waiting is None:
        return CheckResult("manifests.rollout", Status.SKIP, {}, threshold, [skipped])
    measured = {"objects": objects, "not_ready": len(waiting)}
    return CheckResult("manifests.rollout", Status.FAIL if waiting else Status.PASS, measured, threshold, waiting)


def check_manifests_sources(entries: list[Path], base: Path) -> CheckResult:
    """Every sources entry exists and every file in it is YAML (preflight)."""
    try:
        files = load_sources(entries, base)
    except UsageError as exc:
        return CheckResult("preflight.manifests_sources", Status.FAIL, {"entries": len(entries)}, evidence=[str(exc)])
    documents = sum(1 for f in files for d in f.documents if d.data is not None)
    return CheckResult("preflight.manifests_sources", Status.PASS, {"files": len(files), "documents": documents})


def check_manifests_cluster(server: str | None, problem: str, wanted: str | None) -> CheckResult:
    """The target cluster's API server answers (preflight); a version other than target.kubernetes_version WARNs."""
    name, threshold = "preflight.manifests_cluster", {"kubernetes_version": wanted or "any"}
    if server is None:
        return CheckResult(name, Status.FAIL, {}, threshold, [problem])
    measured = {"server": server}
    if wanted and server != wanted:
        evidence = [f"the API server runs Kubernetes {server}; manifests are validated against {wanted}"]
        return CheckResult(name, Status.WARN, measured, threshold, evidence)
    return CheckResult(name, Status.PASS, measured, threshold)
