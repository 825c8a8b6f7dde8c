"""What the manifests domain passes around: the rules, source files and their documents, a rendering, findings."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict
from ruamel.yaml.error import YAMLError

from ferry.digest_map import ImageRecord
from ferry.errors import UsageError
from ferry.manifests.roundtrip import dump, masked, plain, plain_documents
from ferry.manifests.splice import splice
from ferry.results import CheckResult

PLAN_LABEL = "ferry.io/plan"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# API groups of Kubernetes itself: their kinds are known by name alone ("Deployment", not "apps/Deployment").
BUILTIN_GROUPS = frozenset(
    {
        "", "apps", "batch", "autoscaling", "policy", "rbac.authorization.k8s.io", "networking.k8s.io",
        "storage.k8s.io", "scheduling.k8s.io", "apiextensions.k8s.io", "admissionregistration.k8s.io",
        "coordination.k8s.io", "discovery.k8s.io", "node.k8s.io", "certificates.k8s.io", "events.k8s.io",
        "flowcontrol.apiserver.k8s.io", "resource.k8s.io",
    }
)  # fmt: skip
# Where pod templates live, by kind ("group/Kind" outside Kubernetes' own groups); "" is the object itself.
BUILTIN_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("",),
    "PodTemplate": ("template",),
    "Deployment": ("spec.template",),
    "StatefulSet": ("spec.template",),
    "DaemonSet": ("spec.template",),
    "ReplicaSet": ("spec.template",),
    "ReplicationController": ("spec.template",),
    "Job": ("spec.template",),
    "CronJob": ("spec.jobTemplate.spec.template",),
    "kubeflow.org/PyTorchJob": ("spec.pytorchReplicaSpecs.*.template",),
}


class ExportRule(BaseModel):
    """What a cluster makes by itself and an export carries beside what people wrote: objects it matches are left
    out of the rendering, listed in the report with why. An object matches when every condition given holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Shown in the report; {owner} is the Kind/name of the controller that owns the object.
    why: str
    # Kind, or group/Kind ("events.k8s.io/Event"); none: any kind.
    kinds: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    # Only objects a controller owns (an ownerReference with controller: true).
    owned: bool = False
    # Labels and annotations the object carries, with that value ("*": any value).
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    # Dotted paths and their value ("*": any value), such as type: kubernetes.io/service-account-token.
    fields: dict[str, str] = {}
    # Dotted paths: an object that has any of them is kept (a person set it).
    unless: tuple[str, ...] = ()


# The default export rules (ferry's own data file); a plan adds its own (phases.manifests.leave_out).
EXPORT_RULES_FILE = Path(__file__).with_name("export_rules.yaml")


def default_export_rules() -> tuple[ExportRule, ...]:
    return tuple(ExportRule(**rule) for rule in yaml.safe_load(EXPORT_RULES_FILE.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Rules:
    """What the transforms do: from the plan's manifests settings, the target profile and the digest map."""

    plan: str
    # Source image prefix -> target prefix.
    images: dict[str, str] = field(default_factory=dict)
    # The images phase's digest map by source reference (empty when it has not run).
    digests: dict[str, ImageRecord] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    rdma_resource: str | None = None
    storage_classes: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)
    # Beyond the built-ins, by kind: dotted paths, `*` any map key, `[]` every list item.
    template_paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # What is left out of the rendering, as made by the source cluster.
    export_rules: tuple[ExportRule, ...] = field(default_factory=default_export_rules)

    def paths_for(self, api_version: str, kind: str) -> tuple[str, ...] | None:
        """Where the kind's pod templates live (the built-in paths, then the plan's), or None for a kind no rule
        knows."""
        group = api_version.rpartition("/")[0]
        names = (f"{group}/{kind}", kind) if group in BUILTIN_GROUPS else (f"{group}/{kind}",)
        found = [
            path for table in (BUILTIN_TEMPLATE_PATHS, self.template_paths) for n in names for path in table.get(n, ())
        ]
        known = any(n in table for table in (BUILTIN_TEMPLATE_PATHS, self.template_paths) for n in names)
        return tuple(dict.fromkeys(found)) if known else None


@dataclass(frozen=True)
class Finding:
    """Something the transforms did not carry over, at file#document, object and path."""

    file: str
    index: int
    obj: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}#{self.index} {self.obj}: {where}{self.message}"


@dataclass
class Document:
    """One YAML document of a source file: its data (round-trip nodes) and its text before any transform."""

    file: SourceFile
    index: int
    data: Any
    original: str = ""
    # An item of a List document (`kubectl get -o yaml` output): its place in the List's items.
    item: int | None = None
    # The objects of a List document, each a Document of its own (their data are the List's own items).
    items: list[Document] | None = None
    # Why the document is left out of the rendering (a Pod its ReplicaSet made): not written, not applied.
    left_out: str | None = None

    @property
    def is_object(self) -> bool:
        return isinstance(self.data, dict) and bool(self.data.get("kind")) and bool(self.data.get("apiVersion"))

    @property
    def is_kustomize(self) -> bool:
        """A kustomization file (kustomize's input, not a Kubernetes object)."""
        return self.api_version.startswith("kustomize.config.k8s.io/")

    @property
    def is_list(self) -> bool:
        """A List of objects (`kind: List`, or a typed one such as `DeploymentList`, with `items`)."""
        return self.kind.endswith("List") and isinstance(self.data.get("items"), list)

    @property
    def applicable(self) -> bool:
        """Whether server-side apply can take it: an object with a name, not a List nor a kustomization."""
        return self.is_object and not self.is_list and not self.is_kustomize and bool(self.name)

    @property
    def kind(self) -> str:
        return str(self.data.get("kind", "")) if isinstance(self.data, dict) else ""

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion", "")) if isinstance(self.data, dict) else ""

    @property
    def name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        return str(meta.get("name", "")) if isinstance(meta, dict) else ""

    @property
    def namespace(self) -> str | None:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        value = meta.get("namespace") if isinstance(meta, dict) else None
        return str(value) if value is not None else None

    @property
    def label(self) -> str:
        """Kind/namespace/name (Kind/name when cluster-wide or unnamespaced)."""
        return "/".join(p for p in (self.kind or "?", self.namespace, self.name or "?") if p)

    @property
    def where(self) -> str:
        return f"{self.file.name}#{self.index}" + (f".items[{self.item}]" if self.item is not None else "")

    def objects(self) -> list[Document]:
        """What the document holds: itself, or a List's items; those left out aside."""
        found = self.items if self.items is not None else [self]
        return [doc for doc in found if doc.left_out is None]

    def plain(self) -> Any:
        """The document as plain JSON-compatible Python (dicts, lists, str, int, float, bool, None)."""
        return plain(self.data)


@dataclass
class SourceFile:
    """One input file: where it came from (its sources entry), where its output goes, its documents."""

    entry: Path
    path: Path
    relative: Path
    # How findings and diffs name the file: its path relative to the plan's folder (else as given).
    name: str = ""
    documents: list[Document] = field(default_factory=list)
    explicit_start: bool = False
    indent: tuple[int, int, int] = (2, 2, 0)
    # The text as read (without its byte-order mark, lines ended by "\n") and ruamel.yaml's writing of it before
    # any transform: text() carries the lines the transforms changed over into the text as read.
    raw: str = ""
    baseline: str = ""
    bom: bool = False
    newline: str = "\n"

    def written(self) -> list[Document]:
        """The documents the rendered file holds: those not left out (a List's left-out items leave its items)."""
        return [d for d in self.documents if d.data is not None and d.left_out is None]

    def text(self) -> str:
        """The file's documents as YAML, in input order: the text as read with only the lines the transforms changed
        rewritten (ruamel.yaml's writing of the whole file where a change has no place in it)."""
        rendered = dump([d.data for d in self.written()], self.indent, self.explicit_start)
        if rendered == self.baseline:
            return self.raw
        spliced = splice(self.raw, self.baseline, rendered)
        if spliced is None:
            return rendered
        # Spliced lines must say what ruamel.yaml wrote, document for document (empty ones aside).
        try:
            same = plain_documents(spliced, self.indent) == plain_documents(rendered, self.indent)
        except YAMLError:
            same = False
        return spliced if same else rendered


@dataclass
class Rendering:
    """The transformed files and what could not be carried over."""

    files: list[SourceFile]
    findings: list[Finding] = field(default_factory=list)
    # Documents of kinds no rule knows: passed through with only namespace and labels mapped.
    untransformed: list[str] = field(default_factory=list)

    @property
    def documents(self) -> list[Document]:
        """Every object rendered: a List's items one by one, what is left out aside."""
        return [o for f in self.files for d in f.documents if d.data is not None for o in d.objects()]

    @property
    def left_out(self) -> list[Document]:
        """What the rendering leaves out (each with why): what the source cluster made by itself."""
        found = [o for f in self.files for d in f.documents if d.data is not None for o in (d.items or [d])]
        return [doc for doc in found if doc.left_out is not None]

    def write(self, out_dir: Path) -> list[Path]:
        """Each file's rendering at its path relative to its sources entry under out_dir; the paths written."""
        seen: dict[Path, Path] = {}
        for file in self.files:
            if file.relative in seen:
                raise UsageError(
                    f"{file.path} and {seen[file.relative]} would both render to {out_dir / file.relative}: "
                    "rename one or list them in different sources entries"
                )
            seen[file.relative] = file.path
        sources = {file.path.resolve() for file in self.files}
        for file in self.files:
            if (out_dir / file.relative).resolve() in sources:
                raise UsageError(
                    f"{out_dir}: rendering there would overwrite the source {out_dir / file.relative}: "
                    "choose an output folder outside the sources"
                )
        if out_dir.exists() and not out_dir.is_dir():
            raise UsageError(f"{out_dir}: not a folder (the rendered files go under it)")
        written = []
        for file in self.files:
            target = out_dir / file.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            text = ("\ufeff" if file.bom else "") + file.text().replace("\n", file.newline)
            target.write_text(text, encoding="utf-8", newline="")
            written.append(target)
        return written

    def bundle(self) -> str:
        """Every rendered document in one multi-document YAML, Secret values masked (for the audit folder)."""
        return dump([masked(d.data) if d.kind == "Secret" else d.data for d in self.documents], (2, 2, 0), True)

    def report(self, target: str, results: list[CheckResult]) -> str:
        """What was rendered for target and how it validated, and what could not be carried over, as Markdown (no
        Secret value)."""
        lines = [
            f"# Manifests for {target}",
            "",
            f"{len(self.documents)} object(s) from {len(self.files)} file(s); "
            + ", ".join(f"{r.name} **{r.status.value}**" for r in results),
            "",
            f"## Not carried over ({len(self.findings)})",
            *(f"- {finding}" for finding in self.findings),
        ]
        if self.left_out:
            lines += [
                "",
                f"## Left out: made by the source cluster ({len(self.left_out)})",
                *(f"- {doc.where} {doc.label} ({doc.left_out})" for doc in self.left_out),
            ]
        return "\n".join(lines) + "\n"

    def diff(self) -> str:
        """A unified diff per resource, input to output, Secret values masked."""
        chunks = []
        for doc in self.documents:
            after = dump([masked(doc.data) if doc.kind == "Secret" else doc.data], doc.file.indent, False)
            chunks += difflib.unified_diff(
                doc.original.splitlines(keepends=True),
                after.splitlines(keepends=True),
                f"{doc.where} {doc.label} (source)",
                f"{doc.where} {doc.label} (rendered)",
            )
        return "".join(chunks)
