"""The images phase: rebase Dockerfiles onto the target's bases, rebuild and push them; copy the other images.

One step: builds (rebase, build and push each Dockerfile) and copies (registry to registry with skopeo, digests
kept) in one bounded pool, then, when every image is there, the digest map the manifests and go-live phases
read is published. It is one step because the pipeline runs a phase's steps at once and the map needs them all.
Every tag pushed is journaled in the run's audit folder with the manifest it replaced, so rollback deletes
exactly the tags the run pushed, or puts a moved tag back on its previous manifest.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import structlog
import yaml
from pydantic import Field, field_validator, model_validator

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
from ferry.errors import FerryError, PermanentError, TransientError, UsageError
from ferry.images import Rebased, content_hash, cuda_version, match_tags, normalise, read_dockerfile, rebase
from ferry.interrupts import failpoint, one_by_one
from ferry.net import may_pass_again, plain_http, registry_failure
from ferry.oci import RETRIES, Manifest, Reference, Registry, RegistryError
from ferry.phases.base import Changes, Phase, Reporter, Settings, Undo
from ferry.plan import BaseImageRule, FilePath, LoadedPlan, Plan
from ferry.profiles import Credentials
from ferry.results import CheckResult

log = structlog.get_logger("ferry.phases.images")

SOURCE_LABEL = "io.ferry.source"
HASH_LABEL = "io.ferry.content-hash"
BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"
_TOOL_TIMEOUT_S = 3600


_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class DockerfileEntry(Settings):
    """A Dockerfile to rebase and rebuild; `image` names it under both source.registry and target.registry."""

    path: FilePath = Field(min_length=1)
    image: str
    # The build context; default: the Dockerfile's folder.
    context: FilePath | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    # The stage to build; default: the last.
    target: str | None = None

    @field_validator("image")
    @classmethod
    def _name_tag(cls, value: str) -> str:
        if not _IMAGE.fullmatch(value):
            raise ValueError(
                f"{value!r}: name it repository:tag, lower-case, as under a registry (e.g. trainer:2024.06)"
            )
        return value


# An ECR registry host: its region is the API's.
ECR_HOST = re.compile(r"^\d{12}\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


class RegistryAuth(Credentials):
    """A registry's credentials, named: a username and password (variables or Prefect Secret blocks), an auth
    file (auth.json, docker config), or for ECR the AWS credentials its token is asked with (default: boto3's)."""

    # The login, each named by an environment variable or a Prefect Secret block (resolved as Credentials does).
    username_env: str | None = None
    username_secret: str | None = None
    password_env: str | None = None
    password_secret: str | None = None
    auth_file: str | None = None
    # ECR only: the ECR API's endpoint (default: AWS's, in the registry's region).
    ecr_endpoint_url: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> RegistryAuth:
        for name in ("username", "password"):
            if getattr(self, f"{name}_env") and getattr(self, f"{name}_secret"):
                raise ValueError(f"{name}: name an environment variable or a Prefect Secret block, not both")
        if self.named("username") != self.named("password"):
            raise ValueError("name both a username and a password")
        if self.named("username") and self.auth_file:
            raise ValueError("name either a username and password or an auth_file")
        return self


class ImagesSettings(Settings):
    """Settings of the images phase."""

    dockerfiles: list[DockerfileEntry] = Field(default_factory=list)
    # name:tag, name@sha256:..., or name:pattern (`*` spans any characters, expanded from the source's tags).
    copy_images: list[str] = Field(default_factory=list, alias="copy")
    # Rebase rules before the target profile's (first match wins).
    base_images: list[BaseImageRule] = Field(default_factory=list)
    builder: Literal["buildah", "docker", "kaniko"] = "buildah"
    platforms: list[str] = Field(default_factory=lambda: ["linux/amd64"], min_length=1)
    # Builds and copies at once.
    parallel: int = Field(default=4, ge=1, le=64)
    # Credentials by registry host (e.g. registry.meta.example); default: the tools' own auth file, and for an
    # ECR host a token from boto3's credential chain.
    auth: dict[str, RegistryAuth] = Field(default_factory=dict)
    # Hosts (host:port, or a host for every port) spoken to over plain HTTP, without TLS verification; a loopback
    # registry always is (`ferry.net.plain_http`, the rule preflight follows too).
    insecure_registries: list[str] = Field(default_factory=list)
    # The kaniko executor image the rendered Jobs run.
    kaniko_image: str = "gcr.io/kaniko-project/executor:v1.23.2"

    @model_validator(mode="after")
    def _something(self) -> ImagesSettings:
        if not self.dockerfiles and not self.copy_images:
            raise ValueError("name dockerfiles to rebuild or images to copy")
        if self.builder == "buildah" and len(self.platforms) > 1:
            raise ValueError("buildah builds one platform here (RUN steps of others need emulation): use docker")
        images = [d.image for d in self.dockerfiles]
        if len(set(images)) != len(images):
            raise ValueError("two dockerfiles build the same image")
        if clash := set(images) & set(self.copy_images):
            raise ValueError(f"{', '.join(sorted(clash))}: both rebuilt from a Dockerfile and copied")
        return self


class ImagesGate(Settings):
    # A base that no rule maps and that is not the target's: WARN when allowed, else FAIL.
    allow_unmapped_base: bool = False


def _slug(image: str) -> str:
    return image.replace("/", "_").replace(":", "_").replace("@", "_")


def _ecr_login(region: str, auth: RegistryAuth | None) -> tuple[str, str]:
    """ECR's registry login: a 12-hour token from GetAuthorizationToken, asked with the named AWS credentials."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.Session(**(auth.boto3_session_args() if auth else {}))
    try:
        client = session.client("ecr", region_name=region, endpoint_url=auth.ecr_endpoint_url if auth else None)
        token = client.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    except (BotoCoreError, ClientError) as exc:
        raise PermanentError(f"ECR in {region}: no registry token: {type(exc).__name__}") from None
    username, _, password = base64.b64decode(token).decode().partition(":")
    return username, password


def _run_tool(argv: list[str], what: str) -> str:
    """Run a build or copy tool; its stdout, or with the last lines it printed a TransientError where its fatal line
    may not recur (a reset, a refused connection, 429, 5xx), else a PermanentError."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise PermanentError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise PermanentError(f"{what}: {argv[0]} ran past {_TOOL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        tail = " | ".join(lines[-3:])
        # The tools name the registry they failed at in the URL they asked ("https://host/v2/"). The cause is the
        # last line's: the lines before may be attempts that failed otherwise and were retried.
        host = re.search(r"https?://([^/\"'\s]+)/v2/", done.stderr)
        fatal = lines[-1] if lines else ""
        cause = registry_failure(fatal, host.group(1) if host else "the registry")
        error = TransientError if may_pass_again(fatal) else PermanentError
        raise error(f"{what}: {cause + '; ' if cause else ''}{argv[0]} exited {done.returncode}: {tail}")
    return done.stdout


JOURNAL = "journal.json"
# The digest map the run published, in its audit folder.
DIGESTS = "digests.json"


class _Journal:
    """The tags a run pushed (each with its digest and the manifest it replaced), its records, skips, failures
    and unmapped bases; rewritten on every change, so a crash keeps what rollback needs (thread-safe)."""

    def __init__(self, audit: AuditFolder):
        self._file = audit.path("images", JOURNAL)
        self._kept = audit.path("images", "kept")
        self._kept.mkdir(exist_ok=True)
        self._lock = threading.Lock()
        self.data: dict[str, list[dict[str, Any]]] = {
            key: [] for key in ("pushed", "records", "failed", "skipped", "unmapped")
        }
        if self._file.exists():  # the step again in the same run (a task retry): what it pushed stays undoable
            self.data["pushed"] = json.loads(self._file.read_text(encoding="utf-8"))["pushed"]

    def add(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self.data[key].append(entry)
            self._file.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def keep(self, previous: Manifest) -> str:
        """Keep the bytes of a manifest a push replaces; the file name, in the audit folder."""
        name = f"kept/{previous.digest.removeprefix('sha256:')}"
        (self._kept.parent / name).write_bytes(previous.body)
        return name


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
        builds = [self._prepare(entry, None) for entry in self.settings.dockerfiles]
        rebuild = [b for b in builds if b["existing"] != b["hash"]]
        copies = self._expand_copies()
        to_copy = [c for c in copies if self._digest(c["target"]) != self._digest(c["source"])]
        unmapped = sorted({f"{b['entry'].path}: {u.image or u.written}" for b in builds for u in b["rebased"].unmapped})
        text = (
            f"images will rebuild {len(rebuild)} of {len(builds)} image(s) "
            f"({', '.join(b['entry'].image for b in rebuild) or 'none'}) and copy {len(to_copy)} of {len(copies)}"
            f" ({', '.join(c['name'] for c in to_copy) or 'none'}); unmapped bases: {', '.join(unmapped) or 'none'}"
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

    def _credentials(self, host: str) -> tuple[str | None, str | None]:
        """The username and password for host from what the plan names (None, None: the tools' defaults)."""
        auth = self.settings.auth.get(host)
        if auth is not None and auth.named("username"):
            return auth.resolve("username"), auth.resolve("password")
        if auth is not None and auth.auth_file:
            path = self.loaded.resolve(auth.auth_file)
            try:
                entry = json.loads(path.read_text(encoding="utf-8")).get("auths", {}).get(host, {})
            except (OSError, ValueError) as exc:
                raise UsageError(f"phases.images.auth.{host}.auth_file: cannot read {path}: {exc}") from None
            username, _, password = base64.b64decode(entry.get("auth", "")).decode().partition(":")
            return username or None, password or None
        if ecr := ECR_HOST.match(host):
            return _ecr_login(ecr.group("region"), auth)
        return None, None

    def _login_hosts(self) -> list[str]:
        """The hosts whose credentials the build and copy tools are given."""
        plan = self.loaded.plan
        ends = [Reference.parse(f"{side.registry}/x").host for side in (plan.source, plan.target) if side.registry]
        return sorted(set(self.settings.auth) | {h for h in ends if ECR_HOST.match(h)})

    @contextlib.contextmanager
    def _authfile(self) -> Iterator[list[str]]:
        """The tools' --authfile option for the plan's credentials (a private file removed after), or nothing."""
        auths = {}
        for host in self._login_hosts():
            username, password = self._credentials(host)
            if username and password:
                auths[host] = {"auth": base64.b64encode(f"{username}:{password}".encode()).decode()}
        if not auths:
            yield []
            return
        folder = Path(tempfile.mkdtemp(prefix="ferry-auth-"))
        try:
            file = folder / "auth.json"
            file.touch(mode=0o600)
            file.write_text(json.dumps({"auths": auths}), encoding="utf-8")
            yield ["--authfile", str(file)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _digest(self, reference: str) -> str | None:
        ref = Reference.parse(reference)
        return self.registry(ref.host).digest(ref.repository, ref.ref)

    def _tls(self, *references: str) -> bool:
        return not any(plain_http(Reference.parse(r).host, self.settings.insecure_registries) for r in references)

    def source_ref(self, image: str) -> str:
        registry = self.loaded.plan.source.registry
        return f"{registry}/{image}" if registry else image

    def target_ref(self, image: str) -> str:
        return f"{self.loaded.plan.target.registry}/{image}"

    # -- a run ------------------------------------------------------------------------------------
    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> dict[str, Any]:
        """Build and copy every image (one failing fails only itself), then publish the digest map."""
        journal = _Journal(audit)
        work: list[tuple[str, Any]] = [(d.image, d) for d in self.settings.dockerfiles]
        work += [(c["name"], c) for c in self._expand_copies()]

        def one(item: Any, authfile: list[str]) -> None:
            if reporter.stopping.is_set():  # interrupted: what is not started is left for the next run
                return
            if isinstance(item, DockerfileEntry):
                self._build_one(item, audit, journal, authfile)
            else:
                self._copy_one(item, audit, journal, authfile, reporter.stopping)

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
        if reporter.stopping.is_set():
            return {"pushed": len(data["pushed"]), "skipped": len(data["skipped"]), "interrupted": True}
        published = self._publish(audit)
        reporter.markdown("images-report", self._report(data), "Images rebuilt and copied, with their digests")
        return {"pushed": len(data["pushed"]), "skipped": len(data["skipped"]), **published}

    @staticmethod
    def _report(data: dict[str, list[dict[str, Any]]]) -> str:
        """The run as Markdown: each image's source, target digest, kind and CUDA; the unmapped bases."""
        skipped = {s["target"] for s in data["skipped"]}
        lines = ["# Images", "", "| source | target | kind | CUDA | pushed |", "|---|---|---|---|---|"]
        for r in sorted(data["records"], key=lambda r: r["source"]):
            pushed = "no (unchanged)" if r["target"] in skipped else "yes"
            lines.append(
                f"| {r['source']} | {r['target']}@{r['digest']} | {r['kind']} | {r['cuda'] or '-'} | {pushed} |"
            )
        unmapped = [f"- {u['image']}: line {u['line']}: {u['base']}" for u in data["unmapped"]]
        return "\n".join(lines + (["", "## Bases no rule maps", *unmapped] if unmapped else [])) + "\n"

    def changed(self, summaries: list[dict[str, Any]]) -> bool:
        return any(s.get("pushed") or s.get("changed") for s in summaries)

    def _prepare(self, entry: DockerfileEntry, audit: AuditFolder | None) -> dict[str, Any]:
        """Rebase one Dockerfile (written to the audit folder when given); its content hash and the target's."""
        path = self.loaded.resolve(entry.path)
        context = self.loaded.resolve(entry.context) if entry.context else path.parent
        result: Rebased = rebase(
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
        dockerfile = path
        if audit is not None:
            folder = audit.path("images", "rebased") / _slug(entry.image)
            folder.mkdir(parents=True, exist_ok=True)
            if result.rebased:
                dockerfile, _diff = result.write(folder, "Dockerfile")
            report = {
                "path": entry.path,
                "rebased": result.rebased,
                "bases": [asdict(b) for b in result.bases],
                # Read outside a FROM (COPY --from=, RUN --mount=from=) and left as written: for a person to decide.
                "elsewhere": [
                    {"line": line, "how": how, "image": image, "rule_to": to}
                    for line, how, image, to in result.elsewhere
                ],
            }
            (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        base = result.final_base
        # A base from an ARG without a default stays as written ("$NAME"): no registry to ask about it.
        base_name = normalise(base) if base and "$" not in base else None
        base_digest = None
        if base_name:
            # A base whose tag moved (a platform's "2026-latest") makes a new build; unreachable: left to the build.
            with contextlib.suppress(RegistryError):
                base_digest = self._digest(base_name)
        extra = [f"target {entry.target}", f"platforms {','.join(self.settings.platforms)}", f"base {base_digest}"]
        digest = content_hash(result.text, context, entry.build_args, extra)
        target = self.target_ref(entry.image)
        ref = Reference.parse(target)
        config = self.registry(ref.host).config(ref.repository, ref.ref)
        existing = ((config or {}).get("config") or {}).get("Labels", {}) or {}
        return {
            "entry": entry,
            "rebased": result,
            "dockerfile": dockerfile,
            "context": context,
            "hash": digest,
            "base": base,
            "base_name": base_name,
            "base_digest": base_digest,
            "existing": existing.get(HASH_LABEL),
            "target": target,
        }

    def _build_one(self, entry: DockerfileEntry, audit: AuditFolder, journal: _Journal, authfile: list[str]) -> None:
        prepared = self._prepare(entry, audit)
        result: Rebased = prepared["rebased"]
        target, source = prepared["target"], self.source_ref(entry.image)
        for base in result.unmapped:
            journal.add("unmapped", {"image": entry.image, "line": base.line, "base": base.image or base.written})
        if prepared["base"] and prepared["base_name"] is None:
            raise PermanentError(
                f"{entry.image}: its base {prepared['base']} cannot be known before the build "
                "(an ARG without a default: give it in the entry's build_args)"
            )
        if prepared["existing"] == prepared["hash"]:
            digest = self._digest(target)
            assert digest is not None
            journal.add("skipped", {"image": entry.image, "target": target, "digest": digest})
            self._record(journal, source, target, digest, "rebuilt", prepared["base"])
            log.info("rebuild skipped: the target holds this content hash", image=entry.image)
            return
        labels = {SOURCE_LABEL: source, HASH_LABEL: prepared["hash"]}
        if self.settings.builder == "kaniko":
            # The cluster builds and pushes it; a later run finds its content hash on the target and records it.
            self._render_kaniko(entry, prepared, labels, audit)
            return
        base_name, base_digest = prepared["base_name"], prepared["base_digest"]
        if base_name and base_digest is None:
            raise PermanentError(f"{entry.image}: its base {base_name} is not on its registry")
        annotations = {BASE_NAME: base_name, BASE_DIGEST: base_digest} if base_name else {}
        previous = self._previous(target)
        if self.settings.builder == "buildah":
            digest = self._buildah(entry, prepared, labels, annotations, audit, authfile)
        else:
            digest = self._docker(entry, prepared, labels, annotations, audit)
        self._journal_push(journal, target, digest, previous)
        if self._digest(target) != digest:
            raise PermanentError(f"{entry.image}: {target} does not hold the pushed digest {digest}")
        self._record(journal, source, target, digest, "rebuilt", prepared["base"])

    def _buildah(
        self,
        entry: DockerfileEntry,
        prepared: dict[str, Any],
        labels: dict[str, str],
        annotations: dict[str, str | None],
        audit: AuditFolder,
        authfile: list[str],
    ) -> str:
        """Build with buildah (vfs storage under the state dir, chroot isolation, OCI format) and push; the digest."""
        state = self.loaded.layout.buildah
        buildah = ["buildah", "--root", str(state / "root"), "--runroot", str(state / "run"), "--storage-driver", "vfs"]
        target = prepared["target"]
        pulled = [prepared["base_name"]] if prepared["base_name"] else []
        tls = f"--tls-verify={str(self._tls(target, *pulled)).lower()}"
        argv = [*buildah, "bud", "--isolation", "chroot", "--format", "oci", tls, *authfile, "--pull"]
        argv += ["--platform", self.settings.platforms[0], "-f", str(prepared["dockerfile"]), "-t", target]
        argv += [x for k, v in entry.build_args.items() for x in ("--build-arg", f"{k}={v}")]
        argv += ["--target", entry.target] if entry.target else []
        argv += [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
        argv += [x for k, v in annotations.items() for x in ("--annotation", f"{k}={v}")]
        _run_tool([*argv, str(prepared["context"])], f"build {entry.image}")
        digest_file = audit.path("images", f"digest-{_slug(entry.image)}")
        _run_tool(
            [*buildah, "push", "--retry", str(RETRIES), tls, *authfile, "--digestfile", str(digest_file)]
            + [target, f"docker://{target}"],
            f"push {entry.image}",
        )
        return digest_file.read_text(encoding="utf-8").strip()

    def _docker(
        self,
        entry: DockerfileEntry,
        prepared: dict[str, Any],
        labels: dict[str, str],
        annotations: dict[str, str | None],
        audit: AuditFolder,
    ) -> str:
        """Build and push with docker buildx (needs an engine; not exercised on machines without one)."""
        metadata = audit.path("images", f"buildx-{_slug(entry.image)}.json")
        argv = ["docker", "buildx", "build", "--push", "--platform", ",".join(self.settings.platforms)]
        argv += ["-f", str(prepared["dockerfile"]), "-t", prepared["target"], "--metadata-file", str(metadata)]
        argv += [x for k, v in entry.build_args.items() for x in ("--build-arg", f"{k}={v}")]
        argv += ["--target", entry.target] if entry.target else []
        argv += [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
        argv += [x for k, v in annotations.items() for x in ("--annotation", f"index,manifest:{k}={v}")]
        _run_tool([*argv, str(prepared["context"])], f"build {entry.image}")
        return json.loads(metadata.read_text(encoding="utf-8"))["containerimage.digest"]

    def _render_kaniko(
        self, entry: DockerfileEntry, prepared: dict[str, Any], labels: dict[str, str], audit: AuditFolder
    ) -> None:
        """Write a kaniko Job for an in-cluster build; the pod must see the context and the (rebased) Dockerfile at
        these paths (a volume), or the user edits --context to a storage URL the executor reads (s3://...)."""
        args = [
            f"--dockerfile={prepared['dockerfile']}",
            f"--context=dir://{prepared['context']}",
            f"--destination={prepared['target']}",
            *(f"--build-arg={k}={v}" for k, v in entry.build_args.items()),
            *([f"--target={entry.target}"] if entry.target else []),
            *(f"--label={k}={v}" for k, v in labels.items()),
            f"--custom-platform={self.settings.platforms[0]}",
        ]
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"ferry-build-{_slug(entry.image).lower().replace('_', '-')}"[:63].rstrip("-")},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "kaniko", "image": self.settings.kaniko_image, "args": args}],
                    }
                },
            },
        }
        audit.path("images", "kaniko").mkdir(exist_ok=True)
        audit.write_text("images", f"kaniko/{_slug(entry.image)}.yaml", yaml.safe_dump(job, sort_keys=False))

    def _expand_copies(self) -> list[dict[str, str]]:
        """Each copy entry as source and target references; a tag pattern expanded from the source's tags."""
        copies = []
        for item in self.settings.copy_images:
            name, at, digest = item.partition("@")
            repo, colon, tag = name.rpartition(":") if name.rfind(":") > name.rfind("/") else (name, "", "latest")
            if at:
                refs = [f"{name}@{digest}"]
            elif "*" in tag:
                source = Reference.parse(self.source_ref(f"{repo}:x"))
                tags = self.registry(source.host).tags(source.repository)
                refs = [f"{repo}:{t}" for t in match_tags(tag, tags)]
            else:
                refs = [f"{repo}:{tag}"]
            copies += [{"name": r, "source": self.source_ref(r), "target": self.target_ref(r)} for r in refs]
        return copies

    def _copy_one(
        self,
        copy: dict[str, str],
        audit: AuditFolder,
        journal: _Journal,
        authfile: list[str],
        stopping: threading.Event,
    ) -> None:
        source, target = copy["source"], copy["target"]
        source_digest = self._digest(source)
        if source_digest is None:
            # Named by the run's list of failures ("images: 1 of 2 failed: NAME: ..."): not again here.
            raise PermanentError(f"{source} is not on the source registry")
        if self._digest(target) == source_digest:
            journal.add("skipped", {"image": copy["name"], "target": target, "digest": source_digest})
            self._record(journal, source, target, source_digest, "copied", None)
            log.info("copy skipped: the target holds this digest", image=copy["name"])
            return
        previous = self._previous(target)
        src_tls, dst_tls = str(self._tls(source)).lower(), str(self._tls(target)).lower()
        argv = ["skopeo", "copy", "--all", "--preserve-digests", "--retry-times", str(RETRIES)]
        argv += [f"--src-tls-verify={src_tls}", f"--dest-tls-verify={dst_tls}", *authfile]
        # skopeo retries some requests itself, not a 5xx or reset where an upload starts or a manifest is put; a
        # copy again skips the blobs that arrived.
        for attempt in range(RETRIES + 1):
            try:
                _run_tool([*argv, f"docker://{source}", f"docker://{target}"], f"copy {copy['name']}")
                break
            except TransientError as exc:
                if attempt == RETRIES or stopping.is_set():
                    raise
                log.warning("image copy failed, trying again", image=copy["name"], attempt=attempt + 1, error=str(exc))
                stopping.wait(min(2.0 * 2**attempt, 30.0))
        failpoint("images:pushed", stopping)  # the tag is pushed and not yet journalled: the narrowest window
        self._journal_push(journal, target, source_digest, previous)
        landed = self._digest(target)
        if landed is None:
            raise PermanentError(f"{target} is not on the target after the copy (the registry acknowledged the push)")
        if landed != source_digest:
            raise PermanentError(f"the copy's digest changed ({source_digest} became {landed})")
        self._record(journal, source, target, source_digest, "copied", None)

    def _previous(self, target: str) -> Manifest | None:
        ref = Reference.parse(target)
        return None if ref.is_digest else self.registry(ref.host).manifest(ref.repository, ref.ref)

    def _journal_push(self, journal: _Journal, target: str, digest: str, previous: Manifest | None) -> None:
        journal.add(
            "pushed",
            {
                "target": target,
                "digest": digest,
                "previous": previous.digest if previous else None,
                "previous_media_type": previous.media_type if previous else None,
                "previous_file": journal.keep(previous) if previous else None,
            },
        )

    def _record(self, journal: _Journal, source: str, target: str, digest: str, kind: str, base: str | None) -> None:
        """The digest map's record of an image, with its CUDA toolkit (from its config, else its base's)."""
        ref = Reference.parse(target)
        cuda = cuda_version(self.registry(ref.host).config(ref.repository, digest))
        if cuda is None and base:
            base_ref = Reference.parse(normalise(base))
            with contextlib.suppress(RegistryError):
                cuda = cuda_version(self.registry(base_ref.host).config(base_ref.repository, base_ref.ref))
        record = ImageRecord(source, target, digest, kind, cuda)  # type: ignore[arg-type]
        journal.add("records", asdict(record))

    @staticmethod
    def journal(audit_root: Path) -> dict[str, list[dict[str, Any]]]:
        """What the run journaled (empty when it pushed and recorded nothing)."""
        file = audit_root / "images" / JOURNAL
        return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}

    def records(self, audit_root: Path) -> list[ImageRecord]:
        """Every image record the run wrote."""
        return [ImageRecord(**r) for r in self.journal(audit_root).get("records", [])]

    def _publish(self, audit: AuditFolder) -> dict[str, bool | int]:
        """Publish the digest map (keeping the one it replaces for rollback)."""
        records = self.records(audit.root)
        published = self.loaded.layout.digest_map(self.loaded.plan.name)
        changed = audit.publish(self.name, DIGESTS, digest_map.render(records), at=published)
        for r in records:
            log.info("image published", source=r.source, target=r.pinned, kind=r.kind, cuda=r.cuda)
        return {"images": len(records), "changed": changed}

    # -- the gate ---------------------------------------------------------------------------------
    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        records = self.records(audit.root)
        unmapped = self.journal(audit.root).get("unmapped", [])
        planned = [self.target_ref(d.image) for d in self.settings.dockerfiles]
        planned += [c["target"] for c in self._expand_copies()]
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
        pushed = self.journal(audit.root).get("pushed", [])
        # Tags this run created may share a digest: deleting it removes them together, and nothing else.
        ours = {e["target"] for e in pushed if not e["previous"]}
        # A rollback stopped between two tags left the ones it undid here; they are not undone twice.
        undone_file = folder / "rollback-undone.jsonl"
        undone = set(undone_file.read_text(encoding="utf-8").splitlines()) if undone_file.exists() else set()
        for entry in one_by_one(reversed(pushed), stopping):
            if entry["target"] in undone:
                items.append(f"{entry['target']} is undone already")
                continue
            items.append(self._undo_push(folder, entry, ours, dry_run))
            if not dry_run:
                with undone_file.open("a", encoding="utf-8") as journal:
                    journal.write(entry["target"] + "\n")
        if not items:
            return Undo(f"nothing to undo: run {audit.root.name} pushed and published nothing")
        return Undo(f"{'would undo' if dry_run else 'undid'} {len(items)} change(s) of run {audit.root.name}", items)

    def _undo_push(self, folder: Path, entry: dict[str, Any], ours: set[str], dry_run: bool) -> str:
        """Undo one pushed tag: put its previous manifest back, or delete its digest if no other tag holds it."""
        target, digest = entry["target"], entry["digest"]
        ref = Reference.parse(target)
        registry = self.registry(ref.host)
        now = registry.digest(ref.repository, ref.ref)
        if now is None:
            return f"{target} is gone already (deleted with its digest)"
        if now != digest:
            return f"leave {target}: it moved since the run (now {now})"
        if entry["previous"]:
            if not dry_run:
                body = (folder / entry["previous_file"]).read_bytes()
                registry.put_manifest(
                    ref.repository, ref.ref, Manifest(entry["previous"], entry["previous_media_type"], body)
                )
            return f"restore {target} to its previous digest {entry['previous']}"
        others = [
            t
            for t in registry.tags(ref.repository)
            if t != ref.ref
            and f"{ref.host}/{ref.repository}:{t}" not in ours
            and registry.digest(ref.repository, t) == digest
        ]
        if others:
            return f"keep {target}: the registry deletes by digest and {digest} is also tagged {', '.join(others)}"
        if dry_run:
            return f"delete {target} ({digest})"
        if not registry.delete(ref.repository, digest):
            return f"{target} remains: the registry does not allow deletes (storage.delete.enabled)"
        return f"deleted {target} ({digest})"
