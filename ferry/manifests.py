"""Kubernetes manifests rewritten for the target: images, pod annotations, storage classes, namespaces, labels.

Sources are files and folders of multi-document YAML (a team's own, rendered Helm charts, kustomize output),
read and written with ruamel.yaml's round-trip mode, so everything no rule changes stays as written: comments,
key order, quoting and string types, Secret data. What no rule covers and will not work on the target (EFA
resources, instance-type node selectors, cloud load-balancer and workload-identity annotations, pull secrets,
URLs naming the old namespace) is reported as a Finding naming its file, document and path, never with a
Secret's value.
"""

from __future__ import annotations

import base64
import collections
import copy
import datetime
import difflib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scalarstring import ScalarString
from ruamel.yaml.scanner import ScannerError

from ferry.config import unbuildable
from ferry.digest_map import ImageRecord
from ferry.errors import UsageError

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
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# Resources every cluster knows; any other (vpc.amazonaws.com/efa, another vendor's GPU) is warned about.
_PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-")
# Node labels that name the source cloud's machines, zones or pools.
_CLOUD_NODE_LABELS = (
    "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/", "eks.amazonaws.com/", "karpenter.sh/",
    "karpenter.k8s.aws/", "alpha.eksctl.io/", "kubernetes.azure.com/", "agentpool", "cloud.google.com/",
)  # fmt: skip
# Annotations and labels that only the source cloud understands: load balancers, workload identity.
_CLOUD_METADATA = {
    "service.beta.kubernetes.io/aws-load-balancer": "an AWS load-balancer setting",
    "service.beta.kubernetes.io/azure-": "an Azure load-balancer setting",
    "alb.ingress.kubernetes.io/": "an AWS ALB ingress setting",
    "networking.gke.io/": "a GKE networking setting",
    "cloud.google.com/": "a Google Cloud setting",
    "eks.amazonaws.com/role-arn": "an IRSA role (AWS workload identity)",
    "eks.amazonaws.com/": "an EKS setting",
    "azure.workload.identity/": "Azure workload identity",
    "iam.gke.io/": "GKE workload identity",
}
_CLOUD_INGRESS_CLASSES = ("alb", "azure-application-gateway", "gce", "gce-internal")
_CLOUD_VOLUMES = ("awsElasticBlockStore", "azureDisk", "azureFile", "gcePersistentDisk")
_CLOUD_CSI = (".csi.aws.com", ".csi.azure.com", ".csi.storage.gke.io")


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

    @property
    def is_object(self) -> bool:
        return isinstance(self.data, dict) and bool(self.data.get("kind")) and bool(self.data.get("apiVersion"))

    @property
    def is_kustomize(self) -> bool:
        """A kustomization file (kustomize's input, not a Kubernetes object)."""
        return self.api_version.startswith("kustomize.config.k8s.io/")

    @property
    def applicable(self) -> bool:
        """Whether server-side apply can take it: an object with a name, not a v1 List nor a kustomization."""
        is_list = self.kind == "List" and self.api_version == "v1"
        return self.is_object and not is_list and not self.is_kustomize and bool(self.name)

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
        return f"{self.file.name}#{self.index}"

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

    def text(self) -> str:
        """The file's documents as YAML, in input order: the text as read with only the lines the transforms changed
        rewritten (ruamel.yaml's writing of the whole file where a change has no place in it)."""
        rendered = _dump([d.data for d in self.documents if d.data is not None], self.indent, self.explicit_start)
        if rendered == self.baseline:
            return self.raw
        spliced = _splice(self.raw, self.baseline, rendered)
        if spliced is None:
            return rendered
        # Spliced lines must say what ruamel.yaml wrote, document for document (empty ones aside).
        try:
            same = _objects(spliced, self.indent) == _objects(rendered, self.indent)
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
        return [d for f in self.files for d in f.documents if d.data is not None]

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
        return _dump([masked(d.data) if d.kind == "Secret" else d.data for d in self.documents], (2, 2, 0), True)

    def diff(self) -> str:
        """A unified diff per resource, input to output, Secret values masked."""
        chunks = []
        for doc in self.documents:
            after = _dump([masked(doc.data) if doc.kind == "Secret" else doc.data], doc.file.indent, False)
            chunks += difflib.unified_diff(
                doc.original.splitlines(keepends=True),
                after.splitlines(keepends=True),
                f"{doc.where} {doc.label} (source)",
                f"{doc.where} {doc.label} (rendered)",
            )
        return "".join(chunks)


# -- reading and writing ----------------------------------------------------------------------------------


def _yaml(indent: tuple[int, int, int] = (2, 2, 0), explicit_start: bool = False) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    # No re-folding of long lines: a rendered line is the line that was read.
    yaml.width = 1 << 16
    yaml.indent(mapping=indent[0], sequence=indent[1], offset=indent[2])
    yaml.explicit_start = explicit_start
    return yaml


def _dump(docs: list[Any], indent: tuple[int, int, int], explicit_start: bool) -> str:
    out = io.StringIO()
    _yaml(indent, explicit_start).dump_all(docs, out)
    return out.getvalue()


def _parse(text: str, indent: tuple[int, int, int]) -> list[Any]:
    """Every document of text, a tab between tokens read as a space (libyaml, and so kubectl, allows it; ruamel.yaml
    does not). Raises YAMLError."""
    for _ in range(text.count("\t") + 1):
        try:
            return list(_yaml(indent).load_all(text))
        except ScannerError as exc:
            at = exc.problem_mark.index if exc.problem_mark is not None else -1
            line_start = text.rfind("\n", 0, at) + 1
            # A tab in a line's indentation is an error for every YAML parser: only separating tabs are spaces.
            if not 0 <= at < len(text) or text[at] != "\t" or not text[line_start:at].strip():
                raise
            text = text[:at] + " " + text[at + 1 :]
    raise AssertionError("unreachable: each retry replaces one tab")


def _objects(text: str, indent: tuple[int, int, int]) -> list[Any]:
    return [plain(doc) for doc in _parse(text, indent) if doc is not None]


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _shifted(line: str, shift: int) -> str | None:
    depth = _indent_of(line) + shift
    return None if depth < 0 else (" " * depth + line.lstrip(" ") if line.strip() else line)


def _changes(old: list[str], new: list[str]) -> Iterator[tuple[int, int, int, int]]:
    """The ranges of difflib's opcodes, equal ones left out, between two writings of the same documents, matched
    document by document: one matcher over a whole rendered chart of thousands of alike lines takes minutes."""
    starts_old = [i for i, line in enumerate(old) if line == "---"]
    starts_new = [j for j, line in enumerate(new) if line == "---"]
    if len(starts_old) != len(starts_new):
        starts_old, starts_new = [], []
    bounds = zip([0, *starts_old], [*starts_old, len(old)], [0, *starts_new], [*starts_new, len(new)], strict=True)
    for a, b, c, d in bounds:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old[a:b], new[c:d], False).get_opcodes():
            if tag != "equal":
                yield a + i1, a + i2, c + j1, c + j2


def _splice(raw: str, before: str, after: str) -> str | None:
    """raw with the line changes that turn before into after (both ruamel.yaml's writing), each placed at the raw
    line that before's line came from and indented as raw is there; None where a change has no such line.

    ruamel.yaml writes every sequence of a file with one indentation, drops comment-only documents and end
    markers and moves a comment after `---`: splicing leaves all of that as the team wrote it.
    """
    ours = (raw if raw.endswith("\n") else raw + "\n").split("\n")
    old, new = before.split("\n"), after.split("\n")
    where: dict[int, int] = {}
    shapes = difflib.SequenceMatcher(
        None, [" ".join(s.split()) for s in ours], [" ".join(s.split()) for s in old], False
    )
    for tag, i1, i2, j1, _ in shapes.get_opcodes():
        if tag == "equal":
            where.update({j1 + k: i1 + k for k in range(i2 - i1)})
    edits: list[tuple[int, int, list[str]]] = []
    for i1, i2, j1, j2 in _changes(old, new):
        lines: list[str | None]
        if i1 < i2:
            spots = [where.get(i) for i in range(i1, i2)]
            if spots[0] is None or spots != list(range(spots[0], spots[0] + len(spots))):
                return None
            start, end = spots[0], spots[0] + len(spots)
            if j2 - j1 == i2 - i1:
                lines = [
                    _shifted(new[j1 + k], _indent_of(ours[start + k]) - _indent_of(old[i1 + k])) for k in range(i2 - i1)
                ]
            else:
                lines = [_shifted(line, _indent_of(ours[start]) - _indent_of(old[i1])) for line in new[j1:j2]]
        else:
            # Inserted lines go after the raw line of the one before them (else before the raw line of the one after
            # them), shifted as the nearest raw line above them that is no deeper (their parent or a sibling) is.
            depth = _indent_of(new[j1])
            parent = next(
                (k for k in range(i1 - 1, -1, -1) if k in where and old[k].strip() and _indent_of(old[k]) <= depth),
                None,
            )
            if i1 - 1 in where:
                start = end = where[i1 - 1] + 1
            elif i1 in where:
                start = end = where[i1]
            else:
                return None
            if parent is None:
                return None
            lines = [_shifted(line, _indent_of(ours[where[parent]]) - _indent_of(old[parent])) for line in new[j1:j2]]
        if None in lines:
            return None
        edits.append((start, end, [line for line in lines if line is not None]))
    for start, end, lines in reversed(edits):
        ours[start:end] = lines
    return "\n".join(ours)


_KEY_LINE = re.compile(r"^( *)[^\s#-][^#]*:\s*(#.*)?$")
_ITEM_LINE = re.compile(r"^( *)- ")
_CONTENT_LINE = re.compile(r"^( *)[^\s#]")


def guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) the file is written with, so output keeps its layout."""
    lines = [line for line in text.splitlines() if _CONTENT_LINE.match(line) and not line.startswith("---")]
    mapping, offset = None, None
    for line, following in zip(lines, lines[1:], strict=False):
        key = _KEY_LINE.match(line)
        if key is None:
            continue
        parent = len(key.group(1)) + (2 if line.lstrip().startswith("- ") else 0)
        item = _ITEM_LINE.match(following)
        child = len(_CONTENT_LINE.match(following).group(1))  # type: ignore[union-attr]
        if item is not None and offset is None and child >= parent:
            offset = child - parent
        elif item is None and mapping is None and child > parent:
            mapping = child - parent
        if mapping is not None and offset is not None:
            break
    mapping = mapping or 2
    offset = offset or 0
    return mapping, offset + 2, offset


def _unbuildable(text: str, indent: tuple[int, int, int]) -> tuple[int, str] | None:
    """(line, why) of the first scalar of text that the YAML loader cannot build as its tag says, if any."""
    yaml = _yaml(indent)
    seen: set[int] = set()
    try:
        roots = list(yaml.compose_all(text))
    except YAMLError:  # (a tab between tokens, which _parse reads as a space)
        return None
    for root in roots:
        todo = [root]
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ScalarNode):
                try:
                    yaml.constructor.construct_object(node, deep=True)
                except (ValueError, KeyError, AttributeError) as exc:
                    return node.start_mark.line + 1, unbuildable(node.value, str(node.tag), exc)
                except YAMLError:
                    pass
            elif isinstance(node, MappingNode):
                todo += reversed([n for pair in node.value for n in pair])
            elif isinstance(node, SequenceNode):
                todo += reversed(node.value)
    return None


# Values that aliases may add to a file (an alias counts as all that it names): far more than a manifest repeats
# this way, far fewer than an alias bomb (each level ten aliases of the one before) expands to.
MAX_ALIASED = 100_000


def _aliased_too_much(docs: list[Any]) -> int | None:
    """The line of the node whose aliases make the documents expand past MAX_ALIASED values more than they hold
    (an alias names the same object as its anchor), else None."""
    sizes: dict[int, int] = {}
    written = 0  # values as written: each mapping and sequence once, with its scalars
    todo: list[tuple[Any, bool]] = [(doc, False) for doc in docs]
    while todo:
        node, visited = todo.pop()
        children = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else []
        if visited:
            sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
            if sizes[id(node)] - written > MAX_ALIASED:
                lc = getattr(node, "lc", None)
                return lc.line + 1 if lc is not None and lc.line is not None else 1
        elif id(node) not in sizes:
            sizes[id(node)] = 1  # until its children are counted (a node inside itself counts once)
            written += 1 + sum(not isinstance(child, dict | list) for child in children)
            todo.append((node, True))
            todo += [(child, False) for child in children if isinstance(child, dict | list)]
    return None


def _files_of(entry: Path) -> list[tuple[Path, Path]]:
    """(file, its path relative to the entry) for a file, or every *.yaml / *.yml under a folder."""
    if entry.is_file():
        return [(entry, Path(entry.name))]
    if entry.is_dir():
        found = [p for p in entry.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")]
        return [(p, p.relative_to(entry)) for p in sorted(found)]
    raise UsageError(f"{entry}: no such file or folder (phases.manifests.sources)")


def load_sources(entries: list[Path], base: Path | None = None) -> list[SourceFile]:
    """Read every sources entry: files, folders (*.yaml, *.yml, recursively), each multi-document YAML.

    Files are named relative to base (the plan's folder) in findings and diffs.
    """
    files = []
    for entry in entries:
        for path, relative in _files_of(entry):
            try:
                # Bytes, not read_text: its universal newlines would hide a CRLF file.
                text = path.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path}: not readable as UTF-8 text: {exc}") from None
            name = str(path.relative_to(base)) if base and path.is_relative_to(base) else str(path)
            source = SourceFile(entry, path, relative, name, bom=text.startswith("\ufeff"))
            text = text.removeprefix("\ufeff")
            if "\r\n" in text:
                source.newline, text = "\r\n", text.replace("\r\n", "\n")
            source.explicit_start = text.lstrip().startswith("---")
            source.indent = guess_indent(text)
            try:
                loaded = _parse(text, source.indent)
            except ReaderError as exc:  # a control character: it has a position, not a mark
                line = text.count("\n", 0, exc.position) + 1
                character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
                raise UsageError(f"{path}:{line}: not valid YAML: character {character} is not allowed") from None
            except YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                line = f":{mark.line + 1}" if mark is not None else ""
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise UsageError(f"{path}{line}: not valid YAML: {problem}") from None
            except RecursionError:
                raise UsageError(f"{path}: not valid YAML: nested too deeply") from None
            except (ValueError, KeyError, AttributeError) as exc:  # a scalar not of its tag: 2024-13-01, !!bool maybe
                line, why = _unbuildable(text, source.indent) or (None, f"{type(exc).__name__}: {exc}")
                raise UsageError(f"{path}{f':{line}' if line else ''}: not valid YAML: {why}") from None
            if (line := _aliased_too_much(loaded)) is not None:
                raise UsageError(f"{path}:{line}: its aliases expand to more than {MAX_ALIASED} values") from None
            for index, data in enumerate(loaded):
                doc = Document(source, index, data)
                if data is not None:
                    doc.original = _dump([masked(data) if doc.kind == "Secret" else data], source.indent, False)
                source.documents.append(doc)
            source.raw = text
            source.baseline = _dump([d for d in loaded if d is not None], source.indent, source.explicit_start)
            files.append(source)
    return files


def plain(node: Any) -> Any:
    """Round-trip nodes as plain JSON-compatible Python (a timestamp as the string it was written as, `!!binary`
    as its base64 text)."""
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, (bool, ScalarBoolean)):
        return bool(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        return node.isoformat()
    if isinstance(node, bytes):
        # `!!binary` in a Secret's data or a ConfigMap's binaryData: the base64 text it was written as.
        return base64.b64encode(node).decode("ascii")
    return node


def masked(data: Any) -> Any:
    """A copy of a Secret with every value of data and stringData replaced: what reports may show."""
    copied = copy.deepcopy(data)
    for key in ("data", "stringData"):
        values = copied.get(key)
        if isinstance(values, dict):
            for name in values:
                values[name] = "<masked>"
    return copied


# -- finding things ---------------------------------------------------------------------------------------


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def sub_map(node: Any, key: str) -> dict:
    """node[key] when both are maps, else an empty map: a field of the wrong type is the schema check's to name,
    never a crash of the transforms."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def sub_list(node: Any, key: str) -> list:
    """node[key] when node is a map and it a list, else an empty list (see sub_map)."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, list) else []


def leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every scalar in a document (`a.b[0].c`), in document order."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, _join(path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, node


def resolve(node: Any, dotted: str) -> Iterator[tuple[str, Any]]:
    """(concrete path, node) for each match of a dotted path: `*` any map key, `name[]` every list item."""
    segments = dotted.split(".") if dotted else []

    def walk(current: Any, i: int, path: str) -> Iterator[tuple[str, Any]]:
        if i == len(segments):
            yield path, current
            return
        segment = segments[i]
        if segment == "*":
            if isinstance(current, dict):
                for key, value in current.items():
                    yield from walk(value, i + 1, _join(path, str(key)))
            return
        each = segment.endswith("[]")
        key = segment[:-2] if each else segment
        if not isinstance(current, dict) or key not in current:
            return
        child, path = current[key], _join(path, key)
        if not each:
            yield from walk(child, i + 1, path)
        elif isinstance(child, list):
            for j, item in enumerate(child):
                yield from walk(item, i + 1, f"{path}[{j}]")

    yield from walk(node, 0, "")


def pod_templates(data: Any, rules: Rules) -> list[tuple[str, dict]]:
    """(path, pod template) of every pod template in an object, by its kind's template paths."""
    if not isinstance(data, dict):
        return []
    paths = rules.paths_for(str(data.get("apiVersion", "")), str(data.get("kind", ""))) or ()
    return [(path, node) for dotted in paths for path, node in resolve(data, dotted) if isinstance(node, dict)]


def containers(template: dict) -> Iterator[tuple[str, dict]]:
    """(path below the template, container) of every container, init container and ephemeral container."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    for kind in CONTAINER_LISTS:
        for i, container in enumerate(sub_list(spec, kind)):
            if isinstance(container, dict):
                yield f"spec.{kind}[{i}]", container


def _none(quantity: Any) -> bool:
    try:
        return float(str(quantity)) == 0
    except ValueError:
        return False


def _requests(container: dict) -> set[str]:
    """The resources a container asks for: in its limits or requests, with a quantity other than zero (a chart's
    CPU flavour renders `nvidia.com/gpu: 0`)."""
    resources = sub_map(container, "resources")
    return {
        str(name)
        for part in ("limits", "requests")
        for name, quantity in sub_map(resources, part).items()
        if not _none(quantity)
    }


def is_gpu_workload(template: dict, gpu_resource: str) -> bool:
    """Whether a container or init container of the pod template requests the GPU resource."""
    return any(
        gpu_resource in _requests(c) for path, c in containers(template) if not path.startswith("spec.ephemeral")
    )


def rewrite_image(image: str, prefixes: dict[str, str]) -> str | None:
    """image moved from the longest source prefix that owns it to its target prefix; None when none owns it.

    A prefix owns a reference only up to a path boundary, so `host/ml` does not own `host/ml-other/x`, and
    another account's or region's registry, public.ecr.aws and Docker Hub are never touched.
    """
    for source in sorted(prefixes, key=len, reverse=True):
        base = source.rstrip("/")
        if not image.startswith(base):
            continue
        rest = image[len(base) :]
        # After a repository path, ":tag" and "@digest" end the name too; after a bare host they would be a port.
        if rest == "" or rest[0] == "/" or ("/" in base and rest[0] in ":@"):
            return prefixes[source].rstrip("/") + rest
    return None


def _pinned(source: str, rewritten: str, digests: dict[str, ImageRecord]) -> str | None:
    record = digests.get(source)
    if record is None:
        record = next((r for r in digests.values() if r.target == rewritten), None)
    return record.pinned if record else None


# -- the transforms ---------------------------------------------------------------------------------------


class _Context:
    """One document being transformed: records findings against its file, index and object."""

    def __init__(self, doc: Document, rules: Rules, findings: list[Finding]):
        self.doc, self.rules, self.findings = doc, rules, findings
        # Findings name the object as the source file does (its old namespace).
        self.label = doc.label

    def warn(self, path: str, message: str) -> None:
        self.findings.append(Finding(self.doc.file.name, self.doc.index, self.label, path, message))


def _metadata(node: dict, position: int | None = None) -> dict:
    """node's metadata map, created (at position, when given) if absent."""
    meta = node.get("metadata")
    if not isinstance(meta, dict):
        meta = CommentedMap()
        if position is not None and isinstance(node, CommentedMap):
            node.insert(position, "metadata", meta)
        else:
            node["metadata"] = meta
    return meta


def _set(node: dict, key: str, value: str) -> None:
    """node[key] = value, quoted as the old value was (a double-quoted image stays double-quoted), and where the
    old value was written when it came in by a `<<: *anchor` merge (so the merge stays a merge)."""
    if isinstance(node, CommentedMap) and node.merge and key not in dict(node.non_merged_items()):
        source = next((merged for merged in node.merge if key in merged), None)
        if source is not None:
            _set(source, key, value)
            # The merged-in copy the map holds, refreshed without making the key its own (ruamel.yaml 0.19's
            # update_key_value fails on its own merge list).
            collections.OrderedDict.__setitem__(node, key, source[key])
            return
    old = node.get(key)
    node[key] = type(old)(value) if isinstance(old, ScalarString) else value


def _map(meta: dict, key: str) -> dict:
    found = meta.get(key)
    if not isinstance(found, dict):
        found = CommentedMap()
        meta[key] = found
    return found


def _mapped(value: Any, mapping: dict[str, str]) -> bool:
    return isinstance(value, str) and value in mapping


def _namespaces(ctx: _Context) -> None:
    data, mapping = ctx.doc.data, ctx.rules.namespaces
    meta = data.get("metadata")
    if isinstance(meta, dict):
        if _mapped(meta.get("namespace"), mapping):
            _set(meta, "namespace", mapping[meta["namespace"]])
        if ctx.doc.kind == "Namespace" and _mapped(meta.get("name"), mapping):
            _set(meta, "name", mapping[meta["name"]])
    if ctx.doc.kind in ("RoleBinding", "ClusterRoleBinding"):
        for subject in sub_list(data, "subjects"):
            is_account = isinstance(subject, dict) and subject.get("kind") == "ServiceAccount"
            if is_account and _mapped(subject.get("namespace"), mapping):
                _set(subject, "namespace", mapping[subject["namespace"]])


def _labels(ctx: _Context) -> None:
    labels = _map(_metadata(ctx.doc.data), "labels")
    managed = labels.get(MANAGED_BY_LABEL)
    if managed not in (None, "ferry"):
        ctx.warn(f"metadata.labels.{MANAGED_BY_LABEL}", f"was {managed!r}; ferry manages the object now")
    labels[PLAN_LABEL] = ctx.rules.plan
    labels[MANAGED_BY_LABEL] = "ferry"


def _cloud_metadata(ctx: _Context, meta: Any, path: str) -> None:
    if not isinstance(meta, dict):
        return
    for part in ("annotations", "labels"):
        for key in sub_map(meta, part):
            # The first, most specific, prefix names it.
            what = next((what for prefix, what in _CLOUD_METADATA.items() if str(key).startswith(prefix)), None)
            if what is not None:
                ctx.warn(_join(path, f"metadata.{part}.{key}"), f"{what}: no rule carries it to the target")


def _cloud_volume(ctx: _Context, volume: dict, path: str) -> None:
    """A pod's volume or a PersistentVolume's spec that only the source cloud serves (its disks, its CSI drivers)."""
    for kind in _CLOUD_VOLUMES:
        if kind in volume:
            ctx.warn(f"{path}.{kind}", "a volume of the source cloud")
    driver = sub_map(volume, "csi").get("driver", "")
    if str(driver).endswith(_CLOUD_CSI):
        ctx.warn(f"{path}.csi.driver", f"CSI driver {driver!r} of the source cloud")


def _storage_class(ctx: _Context, spec: Any, path: str) -> None:
    if not isinstance(spec, dict) or spec.get("storageClassName") is None:
        return
    name, mapping = spec["storageClassName"], ctx.rules.storage_classes
    if _mapped(name, mapping):
        _set(spec, "storageClassName", mapping[name])
    elif not isinstance(name, str) or name not in mapping.values():
        ctx.warn(_join(path, "storageClassName"), f"storage class {name!r} is not mapped to one of the target")


def _template(ctx: _Context, path: str, template: dict) -> None:
    rules = ctx.rules
    moved = False
    for where, container in containers(template):
        at = _join(path, where)
        image = container.get("image")
        if isinstance(image, str):
            rewritten = rewrite_image(image, rules.images)
            if rewritten is not None:
                moved = True
                _set(container, "image", _pinned(image, rewritten, rules.digests) or rewritten)
        for name in sorted(_requests(container)):
            if name.startswith(_PLAIN_RESOURCES) or name in (rules.gpu_resource, rules.rdma_resource):
                continue
            ctx.warn(f"{at}.resources", f"resource {name!r} is not mapped: the target may not offer it")
    spec = template.get("spec")
    if isinstance(spec, dict):
        for key in sub_map(spec, "nodeSelector"):
            if str(key).startswith(_CLOUD_NODE_LABELS):
                ctx.warn(_join(path, f"spec.nodeSelector.{key}"), "selects the source cloud's nodes")
        affinity = sub_map(spec, "affinity")
        for term_path, expression in resolve(
            affinity,
            "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions[]",
        ):
            if isinstance(expression, dict) and str(expression.get("key", "")).startswith(_CLOUD_NODE_LABELS):
                ctx.warn(
                    _join(path, f"spec.affinity.{term_path}"),
                    f"selects the source cloud's nodes by {expression['key']}",
                )
        if moved:
            for i, secret in enumerate(sub_list(spec, "imagePullSecrets")):
                name = secret.get("name") if isinstance(secret, dict) else secret
                ctx.warn(
                    _join(path, f"spec.imagePullSecrets[{i}]"),
                    f"pull secret {name!r} was made for the source registry; the target registry needs its own",
                )
        for i, volume in enumerate(sub_list(spec, "volumes")):
            if not isinstance(volume, dict):
                continue
            at = _join(path, f"spec.volumes[{i}]")
            _cloud_volume(ctx, volume, at)
            ephemeral = sub_map(sub_map(volume, "ephemeral"), "volumeClaimTemplate")
            _storage_class(ctx, ephemeral.get("spec"), f"{at}.ephemeral.volumeClaimTemplate.spec")
    _cloud_metadata(ctx, template.get("metadata"), path)
    if rules.pod_annotations and is_gpu_workload(template, rules.gpu_resource):
        # A Pod is its own template: its metadata leads; a template's goes before its spec.
        annotations = _map(_metadata(template, position=0), "annotations")
        for key, value in rules.pod_annotations.items():
            if key in annotations and annotations[key] != value:
                ctx.warn(
                    _join(path, f"metadata.annotations.{key}"), f"was {annotations[key]!r}; the target needs {value!r}"
                )
            _set(annotations, key, value)


def _urls(ctx: _Context) -> None:
    """Strings naming a service of an old namespace by DNS name (in.<ns>.svc, ://host.<ns>/...), by path only:
    the value may be a Secret's."""
    if not ctx.rules.namespaces:
        return
    pattern = re.compile(
        "|".join(rf"\.{re.escape(ns)}\.svc\b|://[\w.-]+\.{re.escape(ns)}(?=[:/]|$)" for ns in ctx.rules.namespaces)
    )

    for path, node in leaves(ctx.doc.data):
        if isinstance(node, str) and (match := pattern.search(node)):
            old = match.group(0).split(".")[1] if match.group(0).startswith(".") else match.group(0).rsplit(".", 1)[1]
            ctx.warn(
                path, f"names the old namespace {old!r} in a service address; it becomes {ctx.rules.namespaces[old]!r}"
            )


def _object_rules(ctx: _Context) -> None:
    data, kind = ctx.doc.data, ctx.doc.kind
    _cloud_metadata(ctx, data.get("metadata"), "")
    spec = data.get("spec")
    if kind == "PersistentVolumeClaim":
        _storage_class(ctx, spec, "spec")
        annotations = sub_map(sub_map(data, "metadata"), "annotations")
        old = "volume.beta.kubernetes.io/storage-class"
        if _mapped(annotations.get(old), ctx.rules.storage_classes):
            _set(annotations, old, ctx.rules.storage_classes[annotations[old]])
    if isinstance(spec, dict):
        for i, claim in enumerate(sub_list(spec, "volumeClaimTemplates")):
            if isinstance(claim, dict):
                _storage_class(ctx, claim.get("spec"), f"spec.volumeClaimTemplates[{i}].spec")
        if kind == "Ingress" and str(spec.get("ingressClassName")) in _CLOUD_INGRESS_CLASSES:
            ctx.warn("spec.ingressClassName", f"ingress class {spec['ingressClassName']!r} of the source cloud")
        if kind == "PersistentVolume":
            _cloud_volume(ctx, spec, "spec")
        if kind == "Service" and str(spec.get("loadBalancerClass", "")).startswith(
            ("service.k8s.aws/", "eks.amazonaws.com/")
        ):
            ctx.warn("spec.loadBalancerClass", "a load balancer of the source cloud")
    legacy = sub_map(sub_map(data, "metadata"), "annotations").get("kubernetes.io/ingress.class")
    if kind == "Ingress" and str(legacy) in _CLOUD_INGRESS_CLASSES:
        ctx.warn("metadata.annotations.kubernetes.io/ingress.class", f"ingress class {legacy!r} of the source cloud")
    if kind == "StorageClass" and str(data.get("provisioner", "")).endswith(
        (*_CLOUD_CSI, "kubernetes.io/aws-ebs", "kubernetes.io/azure-disk", "kubernetes.io/gce-pd")
    ):
        ctx.warn("provisioner", f"provisioner {data['provisioner']!r} of the source cloud")


def _uncovered(ctx: _Context) -> None:
    """In a kind no rule covers (Argo Workflows, operators' resources), the storage classes and the source cloud's
    node selectors that a covered kind would have had mapped or warned about, by path."""
    for path, value in leaves(ctx.doc.data):
        key = path.rpartition(".")[2]
        if key == "storageClassName" and isinstance(value, str) and value:
            target = ctx.rules.storage_classes.get(value)
            mapped = f"the target's is {target!r}" if target else "nor mapped to one of the target"
            ctx.warn(path, f"storage class {value!r} in a kind no rule covers: not changed ({mapped})")
        elif ".nodeSelector." in f".{path}":
            label = path.split("nodeSelector.", 1)[1]
            if label.startswith(_CLOUD_NODE_LABELS):
                ctx.warn(path, "selects the source cloud's nodes")


def transform(files: list[SourceFile], rules: Rules) -> Rendering:
    """Rewrite every document in place for the target; return what could not be carried over."""
    rendering = Rendering(files)
    for doc in rendering.documents:
        if not doc.is_object:
            rendering.findings.append(
                Finding(
                    doc.file.name,
                    doc.index,
                    "?",
                    "",
                    "not a Kubernetes object (no kind or apiVersion): left as is",
                )
            )
            continue
        ctx = _Context(doc, rules, rendering.findings)
        if doc.is_kustomize:
            # Beside the resources it names (a kustomize folder): kustomize build is what renders them.
            rendering.untransformed.append(f"{doc.where} {ctx.label}")
            ctx.warn("", "a kustomization, not a Kubernetes object: left as is and not applied (render with kustomize)")
            continue
        _urls(ctx)
        _namespaces(ctx)
        known = rules.paths_for(doc.api_version, doc.kind) is not None
        if doc.kind == "List" and doc.api_version == "v1":
            # `kubectl get -o yaml` output: the items would need transforming and applying one by one.
            rendering.untransformed.append(f"{doc.where} {ctx.label}")
            ctx.warn("items", "a v1 List is not transformed nor applicable: split it into one document per object")
            continue
        if not doc.name:
            # Argo Workflows and Jobs meant for `kubectl create` name themselves by generateName.
            what = "generateName without a name" if sub_map(doc.data, "metadata").get("generateName") else "no name"
            ctx.warn("metadata.name", f"{what}: server-side apply needs a name; rendered but not applied")
        if not known and doc.api_version.rpartition("/")[0] not in BUILTIN_GROUPS:
            rendering.untransformed.append(f"{doc.where} {ctx.label}")
            ctx.warn("", f"kind {doc.api_version} {doc.kind} has no template path: only namespace and labels mapped")
            _uncovered(ctx)
        else:
            _object_rules(ctx)
            for path, template in pod_templates(doc.data, rules):
                _template(ctx, path, template)
        _labels(ctx)
    return rendering


# -- rollout: waves, references, readiness ----------------------------------------------------------------

# The order objects are applied in; rollback undoes them in reverse.
WAVES = ("namespaces", "rbac", "config", "storage", "workloads")
_WAVE_OF = {
    "Namespace": "namespaces",
    "CustomResourceDefinition": "namespaces",
    "PriorityClass": "namespaces",
    "ServiceAccount": "rbac",
    "Role": "rbac",
    "RoleBinding": "rbac",
    "ClusterRole": "rbac",
    "ClusterRoleBinding": "rbac",
    "ConfigMap": "config",
    "Secret": "config",
    "PersistentVolumeClaim": "storage",
    "PersistentVolume": "storage",
    "StorageClass": "storage",
}


def wave_of(kind: str) -> str:
    """The rollout wave of a kind: definitions and namespaces, RBAC, config and secrets, storage, workloads."""
    return _WAVE_OF.get(kind, "workloads")


def references(data: Any, rules: Rules) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the object's pod templates reference."""
    found: set[tuple[str, str]] = set()
    for _, template in pod_templates(data, rules):
        spec = sub_map(template, "spec")
        found |= {
            ("Secret", str(s["name"]))
            for s in sub_list(spec, "imagePullSecrets")
            if isinstance(s, dict) and s.get("name")
        }
        for volume in sub_list(spec, "volumes"):
            if sub_map(volume, "configMap").get("name"):
                found.add(("ConfigMap", str(volume["configMap"]["name"])))
            if sub_map(volume, "secret").get("secretName"):
                found.add(("Secret", str(volume["secret"]["secretName"])))
            for source in sub_list(sub_map(volume, "projected"), "sources"):
                for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                    if sub_map(source, key).get("name"):
                        found.add((kind, str(source[key]["name"])))
        for _, container in containers(template):
            for ref in sub_list(container, "envFrom"):
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if sub_map(ref, key).get("name"):
                        found.add((kind, str(ref[key]["name"])))
            for env in sub_list(container, "env"):
                for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                    if sub_map(sub_map(env, "valueFrom"), key).get("name"):
                        found.add((kind, str(env["valueFrom"][key]["name"])))
    return found


def _condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def readiness(obj: dict) -> tuple[str, str]:
    """("ready" | "waiting" | "failed", why) of a live object: rollout done, DaemonSet scheduled, Job started,
    Pod Ready; objects with nothing to wait for are ready."""
    kind, status = obj.get("kind"), obj.get("status") or {}
    spec, generation = obj.get("spec") or {}, (obj.get("metadata") or {}).get("generation")
    if (
        kind in ("Deployment", "StatefulSet", "DaemonSet")
        and generation
        and status.get("observedGeneration", 0) < generation
    ):
        return "waiting", f"generation {generation} not observed yet"
    if kind == "Deployment":
        progressing = _condition(obj, "Progressing")
        if progressing.get("reason") == "ProgressDeadlineExceeded":
            return "failed", f"progress deadline exceeded: {progressing.get('message', '')}".rstrip(": ")
    if kind in ("Deployment", "StatefulSet"):
        want = spec.get("replicas", 1)
        for field_name in ("updatedReplicas", "readyReplicas"):
            if status.get(field_name, 0) < want:
                return "waiting", f"{field_name} {status.get(field_name, 0)} of {want}"
        if kind == "Deployment" and status.get("availableReplicas", 0) < want:
            return "waiting", f"availableReplicas {status.get('availableReplicas', 0)} of {want}"
    if kind == "DaemonSet":
        desired = status.get("desiredNumberScheduled")
        if desired is None or status.get("currentNumberScheduled", 0) < desired:
            return (
                "waiting",
                f"scheduled {status.get('currentNumberScheduled', 0)} of {desired if desired is not None else '?'}",
            )
    if kind == "Job":
        if _condition(obj, "Failed").get("status") == "True":
            return "failed", f"job failed: {_condition(obj, 'Failed').get('reason', '')}"
        if not (status.get("startTime") or status.get("active") or status.get("succeeded")):
            return "waiting", "not started"
    if kind == "Pod":
        if status.get("phase") == "Failed":
            return "failed", f"pod failed: {status.get('reason', '')}"
        if _condition(obj, "Ready").get("status") != "True":
            return "waiting", "not Ready"
    return "ready", ""
