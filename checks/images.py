"""The images gate, asked of the registries: every image at its recorded digest on the target, copies equal to
their sources, rebuilt images annotated with their base, nothing left on the source registry, unmapped bases."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from ferry.digest_map import ImageRecord
from ferry.images.oci import Registry, RegistryError
from ferry.images.reference import Reference
from ferry.results import CheckResult, Status

RegistryOf = Callable[[str], Registry]
BASE_ANNOTATIONS = ("org.opencontainers.image.base.name", "org.opencontainers.image.base.digest")


def _digest(registry_of: RegistryOf, reference: str) -> str | None:
    ref = Reference.parse(reference)
    return registry_of(ref.host).digest(ref.repository, ref.ref)


def check_image_tools(tools: list[str]) -> CheckResult:
    """The build and copy tools the plan needs are installed."""
    missing = [t for t in tools if shutil.which(t) is None]
    status = Status.FAIL if missing else Status.PASS
    evidence = [f"{t} is not installed (apt-get install {t})" for t in missing]
    return CheckResult("images.tools", status, {"missing": len(missing)}, {"tools": tools}, evidence)


def check_images_on_target(planned: list[str], records: list[ImageRecord], registry_of: RegistryOf) -> CheckResult:
    """Every planned image was recorded by the run, and its tag on the target resolves to the recorded digest."""
    recorded = {r.target: r for r in records}
    evidence = [
        f"{target}: the run recorded no image (not built, not copied)" for target in planned if target not in recorded
    ]
    try:
        for r in records:
            found = _digest(registry_of, r.target)
            if found != r.digest:
                evidence.append(f"{r.target}: registry holds {found or 'nothing'}, the run recorded {r.digest}")
    except RegistryError as exc:
        return CheckResult("images.on_target", Status.FAIL, {"planned": len(planned)}, {}, [str(exc)])
    status = Status.FAIL if evidence else Status.PASS
    return CheckResult("images.on_target", status, {"planned": len(planned), "wrong": len(evidence)}, {}, evidence)


def check_copied_digests(records: list[ImageRecord], registry_of: RegistryOf) -> CheckResult:
    """Each copied image's digest on the target equals the source's, and every platform of an index is there."""
    copied = [r for r in records if r.kind == "copied"]
    if not copied:
        return CheckResult("images.copied_digests", Status.SKIP, {}, {}, ["the run copied no image"])
    evidence = []
    try:
        for r in copied:
            source, target = _digest(registry_of, r.source), _digest(registry_of, r.target)
            if source != target:
                evidence.append(f"{r.target}: {target} differs from the source's {source}")
                continue
            ref = Reference.parse(r.target)
            registry = registry_of(ref.host)
            index = registry.manifest(ref.repository, r.digest)
            # Every platform of an index came too (a registry may accept an index whose children it lacks).
            for child in (index.json().get("manifests") or []) if index and index.is_index else []:
                if registry.digest(ref.repository, child["digest"]) != child["digest"]:
                    evidence.append(f"{r.target}: platform {child.get('platform')} ({child['digest']}) is missing")
    except RegistryError as exc:
        return CheckResult("images.copied_digests", Status.FAIL, {"copied": len(copied)}, {}, [str(exc)])
    status = Status.FAIL if evidence else Status.PASS
    return CheckResult("images.copied_digests", status, {"copied": len(copied), "differ": len(evidence)}, {}, evidence)


def check_base_annotations(records: list[ImageRecord], registry_of: RegistryOf) -> CheckResult:
    """Each rebuilt image's manifest names its base (org.opencontainers.image.base.name and .digest)."""
    rebuilt = [r for r in records if r.kind == "rebuilt"]
    if not rebuilt:
        return CheckResult("images.base_annotations", Status.SKIP, {}, {}, ["the run rebuilt no image"])
    evidence = []
    try:
        for r in rebuilt:
            ref = Reference.parse(r.target)
            manifest = registry_of(ref.host).manifest(ref.repository, r.digest)
            annotations = (manifest.json().get("annotations") or {}) if manifest else {}
            missing = [a for a in BASE_ANNOTATIONS if not annotations.get(a)]
            if missing:
                evidence.append(f"{r.target}@{r.digest}: no {', '.join(missing)}")
    except RegistryError as exc:
        return CheckResult("images.base_annotations", Status.FAIL, {"rebuilt": len(rebuilt)}, {}, [str(exc)])
    status = Status.FAIL if evidence else Status.PASS
    measured = {"rebuilt": len(rebuilt), "unannotated": len(evidence)}
    return CheckResult("images.base_annotations", status, measured, {}, evidence)


def check_not_source(records: list[ImageRecord], source_registry: str) -> CheckResult:
    """No planned image still resolves to the source registry."""
    evidence = [
        f"{r.source}: still {r.target}"
        for r in records
        if source_registry and r.target.startswith(source_registry + "/")
    ]
    status = Status.FAIL if evidence else Status.PASS
    return CheckResult("images.not_source", status, {"on_source": len(evidence)}, {}, evidence)


def check_unmapped_bases(unmapped: list[dict], allow: bool, has_rules: bool) -> CheckResult:
    """Bases that no rule maps and that are not the target's: FAIL, or WARN when the plan allows them."""
    if not has_rules:
        return CheckResult("images.unmapped_bases", Status.SKIP, {}, {}, ["the target profile has no rebase rules"])
    evidence = [f"{u['image']}: line {u['line']}: {u['base']}" for u in unmapped]
    status = Status.PASS if not evidence else Status.WARN if allow else Status.FAIL
    return CheckResult(
        "images.unmapped_bases", status, {"unmapped": len(evidence)}, {"allow_unmapped_base": allow}, evidence
    )
