"""The transforms: each rule one named function of a Context, applied in the order RULES (and, per pod template,
POD_TEMPLATE_RULES) lists them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ferry.digest_map import ImageRecord
from ferry.manifests.edit import map_at, metadata, set_as_written
from ferry.manifests.model import (
    BUILTIN_GROUPS,
    MANAGED_BY_LABEL,
    PLAN_LABEL,
    Document,
    ExportRule,
    Finding,
    Rendering,
    Rules,
    SourceFile,
)
from ferry.manifests.paths import (
    containers,
    drop_generated_job_fields,
    is_gpu_workload,
    join,
    leaves,
    pod_templates,
    requested,
    resolve,
    sub_list,
    sub_map,
)

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


@dataclass
class Context:
    """What a rule works on: a document (node is its data, path "") or one of its pod templates (node, at path).

    Findings go to the rendering against the document's file, index and object, at paths below path.
    """

    doc: Document
    rules: Rules
    rendering: Rendering
    # Findings name the object as the source file does (its old namespace).
    label: str
    node: dict
    path: str = ""
    # Set by a rule that leaves the document as it is: no rule after it sees the document.
    left: bool = False

    @property
    def covered(self) -> bool:
        """Whether the rules of known kinds apply: a kind with template paths, or any of Kubernetes' own groups."""
        api_version, kind = self.doc.api_version, self.doc.kind
        return self.rules.paths_for(api_version, kind) is not None or api_version.rpartition("/")[0] in BUILTIN_GROUPS

    def at(self, path: str, template: dict) -> Context:
        """The context of the document's pod template at path."""
        return replace(self, node=template, path=path)

    def warn(self, path: str, message: str) -> None:
        """A finding at path (below this context's path)."""
        doc = self.doc
        self.rendering.findings.append(Finding(doc.file.name, doc.index, self.label, join(self.path, path), message))

    def untransformed(self, path: str, message: str) -> None:
        """The document reported as one the rules do not transform, with a finding at path."""
        self.rendering.untransformed.append(f"{self.doc.where} {self.label}")
        self.warn(path, message)

    def leave(self, path: str, message: str) -> None:
        """The document reported as untransformed and left as it is: no later rule sees it."""
        self.untransformed(path, message)
        self.left = True


Rule = Callable[[Context], None]


def _mapped(value: Any, mapping: dict[str, str]) -> bool:
    return isinstance(value, str) and value in mapping


def _cloud_volume(ctx: Context, volume: dict, path: str) -> None:
    """A pod's volume or a PersistentVolume's spec that only the source cloud serves (its disks, its CSI drivers)."""
    for kind in _CLOUD_VOLUMES:
        if kind in volume:
            ctx.warn(f"{path}.{kind}", "a volume of the source cloud")
    driver = sub_map(volume, "csi").get("driver", "")
    if str(driver).endswith(_CLOUD_CSI):
        ctx.warn(f"{path}.csi.driver", f"CSI driver {driver!r} of the source cloud")


def _storage_class(ctx: Context, spec: Any, path: str) -> None:
    if not isinstance(spec, dict) or spec.get("storageClassName") is None:
        return
    name, mapping = spec["storageClassName"], ctx.rules.storage_classes
    if _mapped(name, mapping):
        set_as_written(spec, "storageClassName", mapping[name])
    elif not isinstance(name, str) or name not in mapping.values():
        ctx.warn(join(path, "storageClassName"), f"storage class {name!r} is not mapped to one of the target")


# -- the rules of a document, in RULES' order -------------------------------------------------------------------


def kustomization(ctx: Context) -> None:
    """A kustomization is left as is and not applied: beside the resources it names (a kustomize folder), kustomize
    build is what renders them."""
    if ctx.doc.is_kustomize:
        ctx.leave("", "a kustomization, not a Kubernetes object: left as is and not applied (render with kustomize)")


def _kind_is(entry: str, doc: Document) -> bool:
    group, _, kind = entry.rpartition("/")
    return kind == doc.kind and (not group or group == doc.api_version.rpartition("/")[0])


def _controller(meta: dict) -> dict | None:
    """The ownerReference that names the object's controller, if any."""
    owners = sub_list(meta, "ownerReferences")
    return next((o for o in owners if isinstance(o, dict) and o.get("controller") is True), None)


def _why_left_out(rule: ExportRule, doc: Document) -> str | None:
    """Why rule leaves doc out (its why, the owner named), or None when doc does not match every condition."""
    data = doc.data
    meta = sub_map(data, "metadata")
    owner = _controller(meta)
    if (rule.kinds and not any(_kind_is(k, doc) for k in rule.kinds)) or (rule.names and doc.name not in rule.names):
        return None
    if rule.owned and owner is None:
        return None
    for table, wanted in ((sub_map(meta, "labels"), rule.labels), (sub_map(meta, "annotations"), rule.annotations)):
        if any(key not in table or value not in ("*", str(table[key])) for key, value in wanted.items()):
            return None
    for path, value in rule.fields.items():
        if not any(value in ("*", str(node)) for _, node in resolve(data, path) if node is not None):
            return None
    if any(next(resolve(data, path), None) is not None for path in rule.unless):
        return None
    named = f"{owner.get('kind')}/{owner.get('name')}" if owner else "its owner"
    return rule.why.replace("{owner}", named)


def made_by_the_cluster(ctx: Context) -> None:
    """An object the source cluster made by itself (a Pod its ReplicaSet made, an Event, the namespace's CA bundle)
    is left out: the export rules (ferry's and the plan's) say which, and why."""
    for rule in ctx.rules.export_rules:
        why = _why_left_out(rule, ctx.doc)
        if why is not None:
            ctx.doc.left_out = why
            ctx.left = True
            return


# What the API server writes into an object's metadata: `kubectl get -o yaml` exports it, and an apply that carries
# it is refused (managedFields) or takes it for a precondition (a stale resourceVersion).
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
# Annotations kubectl and the controllers write: the last applied copy (the source's, with its images and
# namespaces), a rollout's revision, a claim's binding to the source cluster's volume and provisioner.
SERVER_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/selected-node",
)


def server_written(ctx: Context) -> None:
    """What the API server and the source's controllers wrote into an exported object is left out: server-set
    metadata, their annotations, `status`; in an export (it has a status), a Service's allocated cluster IPs (a
    headless `None` stays) and a Pod's node; a claim's volume where the binding annotation says the cluster bound it;
    the selector and uid labels the API server generated for a Job.
    Owner references by uid (the source's objects) are dropped with a finding. A person's manifest has none of these,
    so it is left as written."""
    if not isinstance(ctx.node, dict):
        return
    meta = sub_map(ctx.node, "metadata")
    for key in SERVER_METADATA:
        meta.pop(key, None)
    owners = [o for o in sub_list(meta, "ownerReferences") if isinstance(o, dict) and o.get("uid")]
    if owners:
        named = ", ".join(f"{o.get('kind')}/{o.get('name')}" for o in owners)
        ctx.warn(
            "metadata.ownerReferences",
            f"dropped the owner(s) {named}: they name the source cluster's objects by uid, and the target's garbage "
            "collector deletes what names an owner it does not have",
        )
        del meta["ownerReferences"]
    annotations = sub_map(meta, "annotations")
    bound = "pv.kubernetes.io/bind-completed" in annotations
    written = [key for key in SERVER_ANNOTATIONS if key in annotations]
    for key in written:
        del annotations[key]
    if written and not annotations:  # emptied here: an `annotations: {}` as written stays
        del meta["annotations"]
    exported = ctx.node.pop("status", None) is not None
    spec = sub_map(ctx.node, "spec")
    if exported and ctx.doc.kind == "Service" and spec.get("clusterIP") != "None":
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
    if exported and ctx.doc.kind == "Pod":
        spec.pop("nodeName", None)
    if bound and ctx.doc.kind == "PersistentVolumeClaim":
        spec.pop("volumeName", None)
    if ctx.doc.kind == "Job":
        drop_generated_job_fields(ctx.node)


def service_addresses(ctx: Context) -> None:
    """Strings naming a service of an old namespace by DNS name (in.<ns>.svc, ://host.<ns>/...), by path only:
    the value may be a Secret's."""
    if not ctx.rules.namespaces:
        return
    pattern = re.compile(
        "|".join(rf"\.{re.escape(ns)}\.svc\b|://[\w.-]+\.{re.escape(ns)}(?=[:/]|$)" for ns in ctx.rules.namespaces)
    )

    for path, node in leaves(ctx.node):
        if isinstance(node, str) and (match := pattern.search(node)):
            old = match.group(0).split(".")[1] if match.group(0).startswith(".") else match.group(0).rsplit(".", 1)[1]
            ctx.warn(
                path, f"names the old namespace {old!r} in a service address; it becomes {ctx.rules.namespaces[old]!r}"
            )


def namespaces(ctx: Context) -> None:
    """The object's namespace (a Namespace's name) and its bindings' ServiceAccount subjects, as the plan maps them."""
    data, mapping = ctx.node, ctx.rules.namespaces
    meta = data.get("metadata")
    if isinstance(meta, dict):
        if _mapped(meta.get("namespace"), mapping):
            set_as_written(meta, "namespace", mapping[meta["namespace"]])
        if ctx.doc.kind == "Namespace" and _mapped(meta.get("name"), mapping):
            set_as_written(meta, "name", mapping[meta["name"]])
    if ctx.doc.kind in ("RoleBinding", "ClusterRoleBinding"):
        for subject in sub_list(data, "subjects"):
            is_account = isinstance(subject, dict) and subject.get("kind") == "ServiceAccount"
            if is_account and _mapped(subject.get("namespace"), mapping):
                set_as_written(subject, "namespace", mapping[subject["namespace"]])


def unnamed(ctx: Context) -> None:
    """An object without a name is rendered but not applied (Argo Workflows and Jobs meant for `kubectl create` name
    themselves by generateName)."""
    if not ctx.doc.name:
        what = "generateName without a name" if sub_map(ctx.node, "metadata").get("generateName") else "no name"
        ctx.warn("metadata.name", f"{what}: server-side apply needs a name; rendered but not applied")


def uncovered_kind(ctx: Context) -> None:
    """A kind no rule covers (Argo Workflows, operators' resources) gets only namespace and labels mapped; its
    storage classes and the source cloud's node selectors, which a covered kind would have had mapped or warned
    about, are reported by path."""
    if ctx.covered:
        return
    ctx.untransformed(
        "", f"kind {ctx.doc.api_version} {ctx.doc.kind} has no template path: only namespace and labels mapped"
    )
    for path, value in leaves(ctx.node):
        key = path.rpartition(".")[2]
        if key == "storageClassName" and isinstance(value, str) and value:
            target = ctx.rules.storage_classes.get(value)
            mapped = f"the target's is {target!r}" if target else "nor mapped to one of the target"
            ctx.warn(path, f"storage class {value!r} in a kind no rule covers: not changed ({mapped})")
        elif ".nodeSelector." in f".{path}":
            label = path.split("nodeSelector.", 1)[1]
            if label.startswith(_CLOUD_NODE_LABELS):
                ctx.warn(path, "selects the source cloud's nodes")


def cloud_metadata(ctx: Context) -> None:
    """Annotations and labels that only the source cloud understands, on a covered object or a pod template."""
    meta = ctx.node.get("metadata")
    if not ctx.covered or not isinstance(meta, dict):
        return
    for part in ("annotations", "labels"):
        for key in sub_map(meta, part):
            # The first, most specific, prefix names it.
            what = next((what for prefix, what in _CLOUD_METADATA.items() if str(key).startswith(prefix)), None)
            if what is not None:
                ctx.warn(f"metadata.{part}.{key}", f"{what}: no rule carries it to the target")


def claim_storage_classes(ctx: Context) -> None:
    """The storage classes of a PersistentVolumeClaim (and its legacy annotation) and of volumeClaimTemplates,
    mapped to the target's."""
    if not ctx.covered:
        return
    data, spec = ctx.node, ctx.node.get("spec")
    if ctx.doc.kind == "PersistentVolumeClaim":
        _storage_class(ctx, spec, "spec")
        annotations = sub_map(sub_map(data, "metadata"), "annotations")
        old = "volume.beta.kubernetes.io/storage-class"
        if _mapped(annotations.get(old), ctx.rules.storage_classes):
            set_as_written(annotations, old, ctx.rules.storage_classes[annotations[old]])
    for i, claim in enumerate(sub_list(spec, "volumeClaimTemplates")):
        if isinstance(claim, dict):
            _storage_class(ctx, claim.get("spec"), f"spec.volumeClaimTemplates[{i}].spec")


def ingress_class(ctx: Context) -> None:
    """An Ingress of one of the source cloud's ingress classes (spec.ingressClassName, or the legacy annotation)."""
    if not ctx.covered or ctx.doc.kind != "Ingress":
        return
    spec = ctx.node.get("spec")
    if isinstance(spec, dict) and str(spec.get("ingressClassName")) in _CLOUD_INGRESS_CLASSES:
        ctx.warn("spec.ingressClassName", f"ingress class {spec['ingressClassName']!r} of the source cloud")
    legacy = sub_map(sub_map(ctx.node, "metadata"), "annotations").get("kubernetes.io/ingress.class")
    if str(legacy) in _CLOUD_INGRESS_CLASSES:
        ctx.warn("metadata.annotations.kubernetes.io/ingress.class", f"ingress class {legacy!r} of the source cloud")


def persistent_volume(ctx: Context) -> None:
    """A PersistentVolume that only the source cloud serves."""
    spec = ctx.node.get("spec")
    if ctx.covered and ctx.doc.kind == "PersistentVolume" and isinstance(spec, dict):
        _cloud_volume(ctx, spec, "spec")


def load_balancer_class(ctx: Context) -> None:
    """A Service on a load balancer of the source cloud."""
    spec = ctx.node.get("spec")
    if not ctx.covered or ctx.doc.kind != "Service" or not isinstance(spec, dict):
        return
    if str(spec.get("loadBalancerClass", "")).startswith(("service.k8s.aws/", "eks.amazonaws.com/")):
        ctx.warn("spec.loadBalancerClass", "a load balancer of the source cloud")


def provisioner(ctx: Context) -> None:
    """A StorageClass provisioned by the source cloud."""
    if not ctx.covered or ctx.doc.kind != "StorageClass":
        return
    if str(ctx.node.get("provisioner", "")).endswith(
        (*_CLOUD_CSI, "kubernetes.io/aws-ebs", "kubernetes.io/azure-disk", "kubernetes.io/gce-pd")
    ):
        ctx.warn("provisioner", f"provisioner {ctx.node['provisioner']!r} of the source cloud")


def each_pod_template(ctx: Context) -> None:
    """Every pod template of the object (by its kind's template paths) through POD_TEMPLATE_RULES, one template
    after another."""
    for path, template in pod_templates(ctx.node, ctx.rules):
        at = ctx.at(path, template)
        for rule in POD_TEMPLATE_RULES:
            rule(at)


def plan_labels(ctx: Context) -> None:
    """The plan's label on every object, and ferry's managed-by label where no one claimed the object: another
    manager's (Helm's, whose `helm upgrade` refuses objects that lost it) stays as written. The plan's label is what
    ferry finds its objects by."""
    labels = map_at(metadata(ctx.node), "labels")
    labels[PLAN_LABEL] = ctx.rules.plan
    if MANAGED_BY_LABEL not in labels:
        labels[MANAGED_BY_LABEL] = "ferry"


# -- the rules of a pod template, in POD_TEMPLATE_RULES' order (cloud_metadata is one of them too) ----------------


def unmapped_resources(ctx: Context) -> None:
    """Resources a container asks for that the target may not offer: any but CPU, memory, storage, huge pages and
    the profile's GPU and RDMA resources."""
    rules = ctx.rules
    for where, container in containers(ctx.node):
        for name in sorted(requested(container)):
            if name.startswith(_PLAIN_RESOURCES) or name in (rules.gpu_resource, rules.rdma_resource):
                continue
            ctx.warn(f"{where}.resources", f"resource {name!r} is not mapped: the target may not offer it")


def source_cloud_nodes(ctx: Context) -> None:
    """Node selectors and required node affinity that select the source cloud's machines, zones or pools."""
    spec = sub_map(ctx.node, "spec")
    for key in sub_map(spec, "nodeSelector"):
        if str(key).startswith(_CLOUD_NODE_LABELS):
            ctx.warn(f"spec.nodeSelector.{key}", "selects the source cloud's nodes")
    affinity = sub_map(spec, "affinity")
    for term_path, expression in resolve(
        affinity,
        "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[].matchExpressions[]",
    ):
        if isinstance(expression, dict) and str(expression.get("key", "")).startswith(_CLOUD_NODE_LABELS):
            ctx.warn(f"spec.affinity.{term_path}", f"selects the source cloud's nodes by {expression['key']}")


def images(ctx: Context) -> None:
    """Images moved to the target's registry, pinned by digest when the digest map has theirs; where an image moved,
    the pod template's pull secrets are reported (they were made for the source registry)."""
    rules, moved = ctx.rules, False
    for _, container in containers(ctx.node):
        image = container.get("image")
        if isinstance(image, str):
            rewritten = rewrite_image(image, rules.images)
            if rewritten is not None:
                moved = True
                set_as_written(container, "image", _pinned(image, rewritten, rules.digests) or rewritten)
    if moved:
        for i, secret in enumerate(sub_list(sub_map(ctx.node, "spec"), "imagePullSecrets")):
            name = secret.get("name") if isinstance(secret, dict) else secret
            ctx.warn(
                f"spec.imagePullSecrets[{i}]",
                f"pull secret {name!r} was made for the source registry; the target registry needs its own",
            )


def pod_volumes(ctx: Context) -> None:
    """Volumes that only the source cloud serves, and the storage classes of ephemeral volume claims mapped to the
    target's, volume by volume."""
    for i, volume in enumerate(sub_list(sub_map(ctx.node, "spec"), "volumes")):
        if not isinstance(volume, dict):
            continue
        at = f"spec.volumes[{i}]"
        _cloud_volume(ctx, volume, at)
        ephemeral = sub_map(sub_map(volume, "ephemeral"), "volumeClaimTemplate")
        _storage_class(ctx, ephemeral.get("spec"), f"{at}.ephemeral.volumeClaimTemplate.spec")


def gpu_annotations(ctx: Context) -> None:
    """The target profile's pod annotations on the pod template of a GPU workload (a different value is reported,
    then replaced)."""
    rules = ctx.rules
    if rules.pod_annotations and is_gpu_workload(ctx.node, rules.gpu_resource):
        # A Pod is its own template: its metadata leads; a template's goes before its spec.
        annotations = map_at(metadata(ctx.node, position=0), "annotations")
        for key, value in rules.pod_annotations.items():
            if key in annotations and annotations[key] != value:
                ctx.warn(f"metadata.annotations.{key}", f"was {annotations[key]!r}; the target needs {value!r}")
            set_as_written(annotations, key, value)


# Each pod template's rules, in the order they run (and so report).
POD_TEMPLATE_RULES: tuple[Rule, ...] = (
    unmapped_resources,
    source_cloud_nodes,
    images,
    pod_volumes,
    cloud_metadata,
    gpu_annotations,
)
# Each object's rules, in the order they run (and so report): kustomization leaves a document as it is, and
# made_by_the_cluster leaves it out;
# uncovered_kind reports a kind no rule covers, which the rules after it skip (plan_labels aside).
RULES: tuple[Rule, ...] = (
    kustomization,
    made_by_the_cluster,
    server_written,
    service_addresses,
    namespaces,
    unnamed,
    uncovered_kind,
    cloud_metadata,
    claim_storage_classes,
    ingress_class,
    persistent_volume,
    load_balancer_class,
    provisioner,
    each_pod_template,
    plan_labels,
)


def transform(files: list[SourceFile], rules: Rules) -> Rendering:
    """Rewrite every document (a List's items one by one) in place for the target, rule by rule; return what could not
    be carried over and what was left out."""
    rendering = Rendering(files)
    for doc in rendering.documents:
        if not doc.is_object:
            rendering.findings.append(
                Finding(
                    doc.file.name, doc.index, "?", "", "not a Kubernetes object (no kind or apiVersion): left as is"
                )
            )
            continue
        ctx = Context(doc, rules, rendering, doc.label, doc.data)
        for rule in RULES:
            rule(ctx)
            if ctx.left:
                break
    for file in files:
        for doc in file.documents:
            for item in reversed(doc.items or []):
                if item.left_out is not None:
                    del doc.data["items"][item.item]
    return rendering
