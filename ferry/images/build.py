"""Building an image: a rebased Dockerfile made ready (its content hash, its base), and the three builders' commands.

buildah and docker buildx build and push here; kaniko's build is rendered as a Job for the cluster to run. Each is
told one `Build`, spelled in its own flags by one description (`_options`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ferry.audit import AuditFolder
from ferry.images.oci import RETRIES, Registry, RegistryError
from ferry.images.rebase import Rebased
from ferry.images.reference import Reference, normalise, slug
from ferry.images.tool import run_tool

SOURCE_LABEL = "io.ferry.source"
HASH_LABEL = "io.ferry.content-hash"
BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"


def content_hash(dockerfile_text: str, context: Path, build_args: Mapping[str, str], extra: Sequence[str] = ()) -> str:
    """A digest of what a build's result depends on: the rebased Dockerfile, every file of the context, the args.

    Stored as a label on the image, so a rebuild whose inputs did not change is skipped.
    """
    digest = hashlib.sha256()
    digest.update(dockerfile_text.encode("utf-8") + b"\0")
    for key in sorted(build_args):
        digest.update(f"arg {key}={build_args[key]}\0".encode())
    for item in extra:
        digest.update(f"{item}\0".encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(context).as_posix()
        body = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(f"file {relative} {len(body)}\0".encode() + body)
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Prepared:
    """A rebased Dockerfile made ready to build: what the build reads, its content hash, its base, the target's."""

    rebased: Rebased
    # The file the build reads: the rebased one (in the audit folder), else the original.
    dockerfile: Path
    context: Path
    content_hash: str
    # The final stage's base after the rebase, as written; normalised (None: scratch, or an ARG without a default);
    # its digest on its registry (None: not there, or not reachable).
    base: str | None
    base_name: str | None
    base_digest: str | None
    # Where the image goes, and the content hash on the image there (None: no image, or one ferry did not build).
    target: str
    target_hash: str | None

    @property
    def up_to_date(self) -> bool:
        return self.target_hash == self.content_hash


def prepare(
    rebased: Rebased,
    dockerfile: Path,
    context: Path,
    *,
    target: str,
    build_args: Mapping[str, str],
    stage: str | None,
    platforms: Sequence[str],
    registry_of: Callable[[str], Registry],
    folder: Path | None,
) -> Prepared:
    """The build of a rebased Dockerfile (written with its diff and report.json to folder when given), its content
    hash (of the text, the context, the arguments, stage, platforms and the base's digest) and the target's."""
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        if rebased.rebased:
            dockerfile, _diff = rebased.write(folder, "Dockerfile")
        report = {
            "path": rebased.name,
            "rebased": rebased.rebased,
            "bases": [asdict(b) for b in rebased.bases],
            # Read outside a FROM (COPY --from=, RUN --mount=from=) and left as written: for a person to decide.
            "elsewhere": [
                {"line": line, "how": how, "image": image, "rule_to": to} for line, how, image, to in rebased.elsewhere
            ],
        }
        (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    base = rebased.final_base
    # A base from an ARG without a default stays as written ("$NAME"): no registry to ask about it.
    base_name = normalise(base) if base and "$" not in base else None
    base_digest = None
    if base_name:
        # A base whose tag moved (a platform's "2026-latest") makes a new build; unreachable: left to the build.
        with contextlib.suppress(RegistryError):
            ref = Reference.parse(base_name)
            base_digest = registry_of(ref.host).digest(ref.repository, ref.ref)
    extra = [f"target {stage}", f"platforms {','.join(platforms)}", f"base {base_digest}"]
    ref = Reference.parse(target)
    config = registry_of(ref.host).config(ref.repository, ref.ref)
    labels = ((config or {}).get("config") or {}).get("Labels", {}) or {}
    return Prepared(
        rebased=rebased,
        dockerfile=dockerfile,
        context=context,
        content_hash=content_hash(rebased.text, context, build_args, extra),
        base=base,
        base_name=base_name,
        base_digest=base_digest,
        target=target,
        target_hash=labels.get(HASH_LABEL),
    )


@dataclass(frozen=True)
class Build:
    """One image build, as every builder is told it."""

    # The image's name (repository:tag), for messages and file names.
    image: str
    dockerfile: Path
    context: Path
    # Where the image is pushed.
    destination: str
    platforms: Sequence[str]
    build_args: Mapping[str, str]
    # The stage to build (`--target`); None: the last.
    stage: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class _Spelling:
    """How one builder spells a build's options."""

    platform: str
    dockerfile: str
    destination: str
    # The annotation flag and what each key=value follows in it; None: the builder adds no annotations.
    annotation: tuple[str, str] | None
    # Every platform, joined by "," (one multi-platform build); else the first.
    every_platform: bool = False
    # `--flag=value`; else the flag and its value as two words.
    joined: bool = False


_BUILDAH = _Spelling("--platform", "-f", "-t", ("--annotation", ""))
_DOCKER = _Spelling("--platform", "-f", "-t", ("--annotation", "index,manifest:"), every_platform=True)
_KANIKO = _Spelling("--custom-platform", "--dockerfile", "--destination", None, joined=True)


def _options(build: Build, spelling: _Spelling) -> list[str]:
    """build's options in a builder's spelling, in one order: platform, Dockerfile, destination, build arguments,
    stage, labels, annotations."""
    platform = ",".join(build.platforms) if spelling.every_platform else build.platforms[0]
    pairs = [(spelling.platform, platform), (spelling.dockerfile, str(build.dockerfile))]
    pairs += [(spelling.destination, build.destination)]
    pairs += [("--build-arg", f"{k}={v}") for k, v in build.build_args.items()]
    pairs += [("--target", build.stage)] if build.stage else []
    pairs += [("--label", f"{k}={v}") for k, v in build.labels.items()]
    if spelling.annotation:
        flag, prefix = spelling.annotation
        pairs += [(flag, f"{prefix}{k}={v}") for k, v in build.annotations.items()]
    if spelling.joined:
        return [f"{flag}={value}" for flag, value in pairs]
    return [word for pair in pairs for word in pair]


def buildah(build: Build, audit: AuditFolder, *, storage: Path, tls: bool, authfile: Sequence[str]) -> str:
    """Build with buildah (vfs storage under storage, chroot isolation, OCI format) and push; the pushed digest."""
    buildah = ["buildah", "--root", str(storage / "root"), "--runroot", str(storage / "run"), "--storage-driver", "vfs"]
    verify = f"--tls-verify={str(tls).lower()}"
    argv = [*buildah, "bud", "--isolation", "chroot", "--format", "oci", verify, *authfile, "--pull"]
    run_tool([*argv, *_options(build, _BUILDAH), str(build.context)], f"build {build.image}")
    digest_file = audit.path("images", f"digest-{slug(build.image)}")
    run_tool(
        [*buildah, "push", "--retry", str(RETRIES), verify, *authfile, "--digestfile", str(digest_file)]
        + [build.destination, f"docker://{build.destination}"],
        f"push {build.image}",
    )
    return digest_file.read_text(encoding="utf-8").strip()


def docker(build: Build, audit: AuditFolder) -> str:
    """Build and push with docker buildx (needs an engine; not exercised on machines without one); the digest."""
    metadata = audit.path("images", f"buildx-{slug(build.image)}.json")
    argv = ["docker", "buildx", "build", "--push", "--metadata-file", str(metadata), *_options(build, _DOCKER)]
    run_tool([*argv, str(build.context)], f"build {build.image}")
    return json.loads(metadata.read_text(encoding="utf-8"))["containerimage.digest"]


def kaniko(build: Build, audit: AuditFolder, *, executor: str) -> None:
    """Write a kaniko Job for an in-cluster build; the pod must see the context and the (rebased) Dockerfile at
    these paths (a volume), or the user edits --context to a storage URL the executor reads (s3://...)."""
    args = [*_options(build, _KANIKO), f"--context=dir://{build.context}"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"ferry-build-{slug(build.image).lower().replace('_', '-')}"[:63].rstrip("-")},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "kaniko", "image": executor, "args": args}],
                }
            },
        },
    }
    audit.path("images", "kaniko").mkdir(exist_ok=True)
    audit.write_text("images", f"kaniko/{slug(build.image)}.yaml", yaml.safe_dump(job, sort_keys=False))
