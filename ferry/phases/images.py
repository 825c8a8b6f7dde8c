"""The images phase: rebase Dockerfiles onto the target's bases, rebuild and push them; copy the other images.

One step: builds (rebase, build and push each Dockerfile) and copies (registry to registry with skopeo, digests
kept) in one bounded pool, then, when every image is there, the digest map the manifests and go-live phases
read is published. It is one step because the pipeline runs a phase's steps at once and the map needs them all.
Every tag pushed is journaled in the run's audit folder with the manifest it replaced, so rollback deletes
exactly the tags the run pushed, or puts a moved tag back on its previous manifest.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path

import structlog

from checks.images import (
    check_base_annotations,
    check_copied_digests,
    check_image_tools,
    check_images_on_target,
    check_not_source,
    check_unmapped_bases,
)
from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.digest_map import ImageRecord
from ferry.errors import FerryError, PermanentError, TransientError
from ferry.files import Journal
from ferry.images import build, report
from ferry.images.auth import ECR_HOST, Login, authfile_option, login
from ferry.images.build import BASE_DIGEST, BASE_NAME, HASH_LABEL, SOURCE_LABEL, Build, Prepared, prepare
from ferry.images.copy import Copy, copy_image, expand
from ferry.images.journal import PushJournal, read_journal
from ferry.images.oci import Manifest, Registry
from ferry.images.rebase import read_dockerfile, rebase
from ferry.images.record import image_record
from ferry.images.reference import Reference, slug
from ferry.images.settings import DockerfileEntry, ImagesGate, ImagesSettings
from ferry.images.undo import undo_push
from ferry.interrupts import failpoint, one_by_one
from ferry.net import plain_http
from ferry.phases.base import Changes, Phase, Reporter, StepResult, Undo
from ferry.plan import BaseImageRule, LoadedPlan, Plan
from ferry.profiles import Credentials
from ferry.results import CheckResult

# In the phase's folder of a run: the digest map it published, and each pushed tag a rollback undid.
DIGESTS, UNDONE = "digests.json", "rollback-undone.jsonl"
log = structlog.get_logger("ferry.phases.images")


class ImagesPhase(Phase):
    """Dockerfiles rebased and rebuilt, other images copied registry to registry, the digest map published."""

    name = "images"
    settings_model = ImagesSettings
    gate_model = ImagesGate

    def __init__(self, loaded: LoadedPlan):
        super().__init__(loaded)
        self._registries: dict[str, Registry] = {}
        self._registries_lock = threading.Lock()

    @property
    def live_inputs(self) -> bool:
        """Registries are read on every run: what they hold decides what is built, copied or skipped."""
        return True

    @classmethod
    def check_plan(cls, plan: Plan) -> None:
        settings = plan.phases.images
        if plan.target.registry is None:
            raise ValueError("phases.images needs target.registry, where the images go")
        if settings.copy_images and plan.source.registry is None:
            raise ValueError("phases.images.copy needs source.registry, where the images come from")

    # -- the plan ---------------------------------------------------------------------------------
    def files(self) -> dict[tuple, Path]:
        return {
            ("phases", "images", "dockerfiles", i, "path"): self.loaded.resolve(d.path)
            for i, d in enumerate(self.settings.dockerfiles)
        }

    def rules(self) -> list[BaseImageRule]:
        """The plan's rules, then the profile's."""
        return [*self.settings.base_images, *self.loaded.target.base_images]

    def summary(self) -> str:
        s, target = self.settings, self.loaded.plan.target
        return (
            f"rebase {len(s.dockerfiles)} Dockerfile(s) onto {self.loaded.target.name}'s bases "
            f"({len(self.rules())} rule(s)), build them with {s.builder} for {', '.join(s.platforms)} and push to "
            f"{target.registry}; copy {len(s.copy_images)} image reference(s) from {self.loaded.plan.source.registry}"
            f" with their digests; publish the digest map; gate: images on the target at their digests, base "
            f"annotations, unmapped bases {'reported' if self.gate_settings.allow_unmapped_base else 'fail'}"
        )

    def changes(self) -> Changes:
        """What a run would push: each image rebuilt (a new digest) or unchanged (the target holds its content
        hash), each copy with the source's digest or unchanged, by digest."""
        builds = [(entry, self._prepare(entry, None)) for entry in self.settings.dockerfiles]
        rebuild = [entry.image for entry, prepared in builds if not prepared.up_to_date]
        copies = self._expand_copies()
        digests = {c.name: (self._digest(c.source), self._digest(c.target)) for c in copies}
        to_copy = [c for c in copies if digests[c.name][0] != digests[c.name][1]]
        unmapped = sorted({f"{e.path}: {u.image or u.written}" for e, p in builds for u in p.rebased.unmapped})
        each = [
            f"{entry.image}: unchanged ({self._digest(prepared.target)})" if prepared.up_to_date
            else f"{entry.image}: rebuild (new digest)"
            for entry, prepared in builds
        ]  # fmt: skip
        for c in copies:
            source, target = digests[c.name]
            held = f"the target holds {target}" if target else "not in the target"
            each.append(f"{c.name}: unchanged ({target})" if source == target else f"{c.name}: copy {source} ({held})")
        text = (
            f"images will rebuild {len(rebuild)} of {len(builds)} image(s) "
            f"({', '.join(rebuild) or 'none'}) and copy {len(to_copy)} of {len(copies)}"
            f" ({', '.join(c.name for c in to_copy) or 'none'}); unmapped bases: {', '.join(unmapped) or 'none'}"
            f". Each: {'; '.join(each) or 'none'}."
        )
        return Changes(text, {"rebuild": len(rebuild), "copy": len(to_copy)})

    def preflight(self) -> list[CheckResult]:
        tools = ["skopeo"] if self.settings.copy_images else []
        if self.settings.dockerfiles and self.settings.builder != "kaniko":
            tools.append(self.settings.builder)
        return [check_image_tools(tools)]

    # -- registries -------------------------------------------------------------------------------
    def registry(self, host: str) -> Registry:
        """The API client of a registry host, with its named credentials."""
        with self._registries_lock:
            if host not in self._registries:
                username, password = self._credentials(host)
                self._registries[host] = Registry(
                    host,
                    insecure=plain_http(host, self.settings.insecure_registries),
                    username=username,
                    password=password,
                )
            return self._registries[host]

    def credentials(self) -> dict[tuple, Credentials]:
        return {("phases", "images", "auth", host): auth for host, auth in self.settings.auth.items()}

    def _credentials(self, host: str) -> Login:
        """The username and password for host from what the plan names (None, None: the tools' defaults)."""
        return login(host, self.settings.auth.get(host), self.loaded.resolve)

    def _authfile(self) -> AbstractContextManager[list[str]]:
        """The tools' --authfile option for the plan's credentials: those of the hosts named in `auth`, and of an
        ECR source or target (a private file removed after), or nothing."""
        plan = self.loaded.plan
        ends = [Reference.parse(f"{side.registry}/x").host for side in (plan.source, plan.target) if side.registry]
        hosts = sorted(set(self.settings.auth) | {h for h in ends if ECR_HOST.match(h)})
        return authfile_option({host: self._credentials(host) for host in hosts})

    def _digest(self, reference: str) -> str | None:
        ref = Reference.parse(reference)
        return self.registry(ref.host).digest(ref.repository, ref.ref)

    def _previous(self, target: str) -> Manifest | None:
        ref = Reference.parse(target)
        return None if ref.is_digest else self.registry(ref.host).manifest(ref.repository, ref.ref)

    def _tls(self, *references: str) -> bool:
        return not any(plain_http(Reference.parse(r).host, self.settings.insecure_registries) for r in references)

    def source_ref(self, image: str) -> str:
        registry = self.loaded.plan.source.registry
        return f"{registry}/{image}" if registry else image

    def target_ref(self, image: str) -> str:
        return f"{self.loaded.plan.target.registry}/{image}"

    # -- a run ------------------------------------------------------------------------------------
    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Build and copy every image (one failing fails only itself), then publish the digest map."""
        journal = PushJournal(audit)
        work: list[tuple[str, DockerfileEntry | Copy]] = [(d.image, d) for d in self.settings.dockerfiles]
        work += [(c.name, c) for c in self._expand_copies()]

        def one(item: DockerfileEntry | Copy, authfile: list[str]) -> None:
            if reporter.stopping.is_set():  # interrupted: what is not started is left for the next run
                return
            if isinstance(item, DockerfileEntry):
                self._build_one(item, audit, journal, authfile)
            else:
                self._copy_one(item, journal, authfile, reporter.stopping)

        lasting = False  # a failure another run would meet again
        with self._authfile() as authfile, ThreadPoolExecutor(max_workers=self.settings.parallel) as pool:
            futures = {pool.submit(one, item, authfile): name for name, item in work}
            for future, name in futures.items():
                try:
                    future.result()
                except (FerryError, OSError) as exc:
                    lasting = lasting or not isinstance(exc, TransientError)
                    journal.add("failed", {"image": name, "error": str(exc)})
                    log.error("image failed", image=name, error=str(exc))
        data = journal.data
        if data["failed"]:
            failed = "; ".join(f"{f['image']}: {f['error']}" for f in data["failed"])
            # Only transient failures: Prefect's task retries (the plan's `retries`) run the step again.
            error = PermanentError if lasting else TransientError
            raise error(f"images: {len(data['failed'])} of {len(work)} failed: {failed}")
        done = {"pushed": len(data["pushed"]), "skipped": len(data["skipped"])}
        if reporter.stopping.is_set():
            return StepResult(changed=bool(data["pushed"]), details={**done, "interrupted": True})
        images, published = self._publish(audit)
        reporter.markdown("images-report", report.markdown(data), "Images rebuilt and copied, with their digests")
        return StepResult(changed=bool(data["pushed"]) or published, details={**done, "images": images})

    def _prepare(self, entry: DockerfileEntry, audit: AuditFolder | None) -> Prepared:
        """Rebase one Dockerfile (written to the audit folder when given); its content hash and the target's."""
        path = self.loaded.resolve(entry.path)
        rebased = rebase(
            read_dockerfile(path),
            self.rules(),
            self.loaded.target.sdk_steps,
            name=entry.path,
            target_repositories=[str(self.loaded.plan.target.registry)],
            build_args=entry.build_args,
            target=entry.target,
            # One platform: its TARGETARCH... resolve FROM lines (`FROM base-${TARGETARCH}`); several: each its own.
            platform=self.settings.platforms[0] if len(self.settings.platforms) == 1 else None,
        )
        return prepare(
            rebased,
            path,
            self.loaded.resolve(entry.context) if entry.context else path.parent,
            target=self.target_ref(entry.image),
            build_args=entry.build_args,
            stage=entry.target,
            platforms=self.settings.platforms,
            registry_of=self.registry,
            folder=audit.path("images", "rebased") / slug(entry.image) if audit is not None else None,
        )

    def _build_one(self, entry: DockerfileEntry, audit: AuditFolder, journal: PushJournal, authfile: list[str]) -> None:
        prepared = self._prepare(entry, audit)
        target, source = prepared.target, self.source_ref(entry.image)
        for base in prepared.rebased.unmapped:
            journal.add("unmapped", {"image": entry.image, "line": base.line, "base": base.image or base.written})
        if prepared.base and prepared.base_name is None:
            raise PermanentError(
                f"{entry.image}: its base {prepared.base} cannot be known before the build "
                "(an ARG without a default: give it in the entry's build_args)"
            )
        if prepared.up_to_date:
            digest = self._digest(target)
            assert digest is not None
            journal.add("skipped", {"image": entry.image, "target": target, "digest": digest})
            self._record(journal, source, target, digest, "rebuilt", prepared.base)
            log.info("rebuild skipped: the target holds this content hash", image=entry.image)
            return
        base_name, base_digest = prepared.base_name, prepared.base_digest
        spec = Build(
            entry.image,
            prepared.dockerfile,
            prepared.context,
            target,
            self.settings.platforms,
            entry.build_args,
            entry.target,
            labels={SOURCE_LABEL: source, HASH_LABEL: prepared.content_hash},
            annotations={BASE_NAME: base_name, BASE_DIGEST: base_digest} if base_name and base_digest else {},
        )
        if self.settings.builder == "kaniko":
            # The cluster builds and pushes it; a later run finds its content hash on the target and records it.
            build.kaniko(spec, audit, executor=self.settings.kaniko_image)
            return
        if base_name and base_digest is None:
            raise PermanentError(f"{entry.image}: its base {base_name} is not on its registry")
        previous = self._previous(target)
        if self.settings.builder == "buildah":
            tls = self._tls(target, *([base_name] if base_name else []))
            storage = self.loaded.layout.buildah
            digest = build.buildah(spec, audit, storage=storage, tls=tls, authfile=authfile)
        else:
            digest = build.docker(spec, audit)
        journal.add_push(target, digest, previous)
        if self._digest(target) != digest:
            raise PermanentError(f"{entry.image}: {target} does not hold the pushed digest {digest}")
        self._record(journal, source, target, digest, "rebuilt", prepared.base)

    def _expand_copies(self) -> list[Copy]:
        """Each copy entry as source and target references; a tag pattern expanded from the source's tags."""
        names = [name for item in self.settings.copy_images for name in expand(item, self._source_tags)]
        return [Copy(name, self.source_ref(name), self.target_ref(name)) for name in names]

    def _source_tags(self, repository: str) -> list[str]:
        source = Reference.parse(self.source_ref(f"{repository}:x"))
        return self.registry(source.host).tags(source.repository)

    def _copy_one(self, copy: Copy, journal: PushJournal, authfile: list[str], stopping: threading.Event) -> None:
        source, target = copy.source, copy.target
        source_digest = self._digest(source)
        if source_digest is None:
            # Named by the run's list of failures ("images: 1 of 2 failed: NAME: ..."): not again here.
            raise PermanentError(f"{source} is not on the source registry")
        if self._digest(target) == source_digest:
            journal.add("skipped", {"image": copy.name, "target": target, "digest": source_digest})
            self._record(journal, source, target, source_digest, "copied", None)
            log.info("copy skipped: the target holds this digest", image=copy.name)
            return
        previous = self._previous(target)
        copy_image(
            copy, source_tls=self._tls(source), target_tls=self._tls(target), authfile=authfile, stopping=stopping
        )
        failpoint("images:pushed", stopping)  # the tag is pushed and not yet journalled: the narrowest window
        journal.add_push(target, source_digest, previous)
        landed = self._digest(target)
        if landed is None:
            raise PermanentError(f"{target} is not on the target after the copy (the registry acknowledged the push)")
        if landed != source_digest:
            raise PermanentError(f"the copy's digest changed ({source_digest} became {landed})")
        self._record(journal, source, target, source_digest, "copied", None)

    def _record(self, journal: PushJournal, source: str, target: str, digest: str, kind: str, base: str | None) -> None:
        journal.add("records", asdict(image_record(self.registry, source, target, digest, kind, base)))

    def records(self, audit_root: Path) -> list[ImageRecord]:
        """Every image record the run wrote."""
        return [ImageRecord(**r) for r in read_journal(audit_root).get("records", [])]

    def _publish(self, audit: AuditFolder) -> tuple[int, bool]:
        """Publish the digest map (keeping the one it replaces for rollback): how many images, and whether it
        changed."""
        records = self.records(audit.root)
        published = self.loaded.layout.digest_map(self.loaded.plan.name)
        changed = audit.publish(self.name, DIGESTS, digest_map.render(records), at=published)
        for r in records:
            log.info("image published", source=r.source, target=r.pinned, kind=r.kind, cuda=r.cuda)
        return len(records), changed

    # -- the gate ---------------------------------------------------------------------------------
    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        records = self.records(audit.root)
        unmapped = read_journal(audit.root).get("unmapped", [])
        planned = [self.target_ref(d.image) for d in self.settings.dockerfiles]
        planned += [c.target for c in self._expand_copies()]
        return [
            check_images_on_target(planned, records, self.registry),
            check_copied_digests(records, self.registry),
            check_base_annotations(records, self.registry),
            check_not_source(records, str(self.loaded.plan.source.registry or "")),
            check_unmapped_bases(unmapped, self.gate_settings.allow_unmapped_base, bool(self.rules())),
        ]

    # -- rollback ---------------------------------------------------------------------------------
    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """Delete the tags the run pushed, put the tags it moved back, and restore the digest map it replaced.

        The registry deletes by digest, so a digest is deleted only when no tag but the run's own holds it.
        """
        folder = audit.root / "images"
        unpublished = audit.unpublish(self.name, DIGESTS, "the map", dry_run=dry_run)
        items = [unpublished.item] if unpublished else []
        pushed = read_journal(audit.root).get("pushed", [])
        # Tags this run created may share a digest: deleting it removes them together, and nothing else.
        ours = {e["target"] for e in pushed if not e["previous"]}
        # A rollback stopped between two tags left the ones it undid here; they are not undone twice.
        undone_journal = Journal(folder / UNDONE)
        undone = undone_journal.keys()
        for entry in one_by_one(reversed(pushed), stopping):
            if entry["target"] in undone:
                items.append(f"{entry['target']} is undone already")
                continue
            items.append(undo_push(self.registry, folder, entry, ours, dry_run))
            if not dry_run:
                undone_journal.add({"key": entry["target"]})
        if not items:
            return Undo(f"nothing to undo: run {audit.root.name} pushed and published nothing")
        return Undo(f"{'would undo' if dry_run else 'undid'} {len(items)} change(s) of run {audit.root.name}", items)
