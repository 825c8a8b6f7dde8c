"""The migration plan: one YAML file that says what moves where, with which gates and approvals.

Secrets are never inline. Credentials are named (environment variables, an AWS profile, a
connection-string variable) in profiles; any string may reference the environment as ${NAME},
resolved at load time, except a variable named as a secret (`*_TOKEN`, `*PASSWORD*`, ...) and a URL with a
password: plan fields are printed, so those are field errors. Unknown keys are errors, and so are phases this
version of ferry cannot run: no placeholder phase ever reports PASS.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from croniter import croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    create_model,
    field_validator,
    model_validator,
)

from ferry.config import FieldProblem, field_line, load_yaml_model
from ferry.errors import UsageError
from ferry.layout import StateLayout
from ferry.phase_registry import load_phase, phase_names
from ferry.profiles import Credentials, Profile, SecretRef
from ferry.units import parse_duration, parse_size

TARGETS_DIR = Path(__file__).with_name("targets")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


Size = Annotated[int, BeforeValidator(_size)]


# Seconds, written as 90s, 5m, 1h or a number of seconds.
Duration = Annotated[float, BeforeValidator(parse_duration)]


def _path(value: str) -> str:
    """A path a file system can hold; else every call on it fails (a NUL, a name over 255 bytes)."""
    if "\0" in value:
        raise ValueError(f"{value!r}: a path holds no NUL character")
    if len(value.encode()) > 4095 or any(len(part.encode()) > 255 for part in value.split("/")):
        raise ValueError(f"{value[:40]!r}...: too long for a file system (a name over 255 bytes or a path over 4095)")
    return value


# A file or folder the plan names, relative to the plan file unless absolute.
FilePath = Annotated[str, AfterValidator(_path)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class Cluster(_Strict):
    """A Kubernetes cluster: a kubeconfig context and the namespace the workloads live in."""

    context: str = Field(min_length=1)
    namespace: str = Field(pattern=DNS_LABEL)
    # Default: $KUBECONFIG, else ~/.kube/config; relative to the plan file.
    kubeconfig: FilePath | None = None


class Side(_Strict):
    """One end of the migration: its object storage, container registry and cluster."""

    storage: str = Field(min_length=1)
    # host[:port][/path], as image references name it (no scheme), e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml
    registry: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]+(:\d+)?(/[a-z0-9._/-]+)?$")
    cluster: Cluster | None = None

    @field_validator("storage")
    @classmethod
    def _local_path(cls, value: str) -> str:
        return value if "://" in value else _path(value)

    @field_validator("registry", mode="before")
    @classmethod
    def _no_scheme(cls, value: Any) -> Any:
        if isinstance(value, str) and "://" in value:
            raise ValueError(f"{value!r}: name the registry as images do, host[:port]/path, without a scheme")
        return value


class AwsIamSource(_Strict):
    """AWS IAM: the account's live IAM API, or the JSON of `aws iam get-account-authorization-details`."""

    export: FilePath | None = None
    endpoint_url: str | None = None
    region: str = "us-east-1"
    credentials: Credentials = Field(default_factory=Credentials)

    @model_validator(mode="after")
    def _export_or_live(self) -> AwsIamSource:
        if self.export and (self.endpoint_url or self.credentials != Credentials()):
            raise ValueError("export reads a file: endpoint_url and credentials belong to the live IAM API")
        return self


class IamSources(_Strict):
    """Where the source principals come from; export paths are relative to the plan file."""

    aws: AwsIamSource | None = None
    # The JSON of `az role assignment list --all`.
    azure_export: FilePath | None = None
    # The JSON of `az role definition list --custom-role-only true`: what custom roles allow.
    azure_role_definitions: FilePath | None = None
    # A JSON object keyed by group object id or display name, each value what `az ad group member list
    # --group NAME` prints: the members of the groups the assignments name (nested groups expanded).
    azure_group_members: FilePath | None = None
    # LDAP groups as LDIF.
    ldif: FilePath | None = None

    @model_validator(mode="after")
    def _some(self) -> IamSources:
        if not (self.aws or self.azure_export or self.ldif):
            raise ValueError("name at least one of aws, azure_export, ldif")
        if (self.azure_role_definitions or self.azure_group_members) and not self.azure_export:
            raise ValueError("azure_role_definitions and azure_group_members describe azure_export: name it too")
        return self


class SourceSide(Side):
    iam: IamSources | None = None


class TargetSide(Side):
    # A built-in target profile (meta-compute, generic-k8s) or the path of a user's YAML profile.
    profile: FilePath = "generic-k8s"
    # The target's Kubernetes version, one for the whole plan: its schemas validate what the iam and
    # manifests phases render (default: the newest kubernetes-validate knows).
    kubernetes_version: str | None = Field(default=None, pattern=r"^1\.\d+$")


def _sections(kind: str) -> type[BaseModel]:
    """The model of `phases:` (kind "phases") or `gates:` ("gates"): one optional section per known phase.

    Each section is validated by the model of the phase registered under its name, so errors keep
    their place in the file (phases.data_sync.threads at its line), whichever module the phase lives in.
    """
    fields: dict[str, Any] = {}
    for name in phase_names():
        phase = load_phase(name)
        if kind == "phases":
            fields[name] = (phase.settings_model | None, None)
        else:
            fields[name] = (phase.gate_model, Field(default_factory=phase.gate_model))
    return create_model(kind.title(), __base__=_Sections, **fields)


class _Sections(_Strict):
    """The `phases:` or `gates:` section: one optional field per registered phase."""


class Retries(_Strict):
    """Prefect task retries for transient errors only."""

    attempts: int = Field(default=3, ge=0, le=20)
    delay_s: float = Field(default=10.0, ge=0, le=3600)


class PricedEnd(_Strict):
    """Whose prices an end is billed by, where its endpoint does not say it (`ferry plan estimate`)."""

    provider: str | None = Field(default=None, min_length=1)
    region: str | None = Field(default=None, min_length=1)
    # The storage tier the end's objects are billed in where the price table has several (Azure: Cool, Cold,
    # Archive; none: the region's own prices, Azure's Hot).
    tier: str | None = Field(default=None, min_length=1)


class Pricing(_Strict):
    """How `ferry plan estimate` prices the plan: negotiated prices over the shipped list prices (a file of the shape
    of ferry/quote/prices.yaml), and each end's provider and region where its endpoint does not tell them."""

    prices: FilePath | None = None
    source: PricedEnd = Field(default_factory=PricedEnd)
    target: PricedEnd = Field(default_factory=PricedEnd)


class RunStep(_Strict):
    """A freeze step that runs a command line (in the plan's folder); `undo` is the one that reverses it."""

    run: str = Field(min_length=1)
    undo: str | None = Field(default=None, min_length=1)


class BucketPolicyStep(_Strict):
    """A freeze step on the S3 source's bucket policy: deny writes by everyone but ferry's own identity."""

    bucket_policy: Literal["deny_writes"]


class Quiesce(_Strict):
    """Workloads of the source cluster to scale to 0 under the freeze, as Kind/name (Deployment, StatefulSet)."""

    cluster: Literal["source"]
    workloads: list[Annotated[str, Field(pattern=r"^(Deployment|StatefulSet)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]] = (
        Field(min_length=1)
    )


class QuiesceStep(_Strict):
    """A freeze step that scales the source cluster's workloads to 0 and waits for their pods to go."""

    quiesce: Quiesce


FREEZE_STEPS = {"run": RunStep, "bucket_policy": BucketPolicyStep, "quiesce": QuiesceStep}


def _freeze_step(value: Any) -> Any:
    # One of two shapes: say which, not why the value is neither (pydantic's words for each member of a union).
    if isinstance(value, dict):
        for key, model in FREEZE_STEPS.items():
            if key in value:
                return model.model_validate(value)
    raise ValueError(
        "a freeze step is {run: COMMAND, undo: COMMAND}, {bucket_policy: deny_writes} or "
        "{quiesce: {cluster: source, workloads: [Kind/name]}}"
    )


FreezeStep = Annotated[RunStep | BucketPolicyStep | QuiesceStep, BeforeValidator(_freeze_step)]


class MaxDelete(_Strict):
    """The most a delta may delete from the target: both bounds apply."""

    count: int = Field(default=1000, ge=0)
    percent: float = Field(default=1.0, ge=0, le=100)


class ChangeLog(_Strict):
    """Where an S3 source's changes are read between live deltas: its event notifications (s3:ObjectCreated:*,
    s3:ObjectRemoved:*) delivered to an SQS queue, read with the source's profile."""

    sqs_queue_url: str = Field(pattern=r"^https?://")


class Inventory(_Strict):
    """An S3 Inventory report (CSV) of the source bucket: the first delta's listing of a very large bucket."""

    # The report's manifest.json, as a storage URL (s3://inventory-bucket/.../manifest.json, or a profile's alias).
    manifest: str = Field(pattern=r"^[a-z0-9]+://.+/manifest\.json$")


class Cutover(_Strict):
    """`ferry cutover`: live deltas until the final one is predicted to fit freeze_budget, then freeze, final delta,
    switch (docs/cutover.md)."""

    freeze_budget: Duration
    delta_interval: Duration = 60.0
    max_deltas: int = Field(default=20, ge=2, le=1000)
    # The deadline written into the bucket policy's Deny: a killed ferry cannot leave the source frozen past it.
    max_freeze: Duration = 3600.0
    freeze: list[FreezeStep] = Field(default_factory=list)
    switch: list[str] = Field(default_factory=list)
    max_delete: MaxDelete = Field(default_factory=MaxDelete)
    change_log: ChangeLog | None = None
    inventory: Inventory | None = None

    @model_validator(mode="after")
    def _deadline(self) -> Cutover:
        if self.max_freeze < self.freeze_budget:
            raise ValueError("max_freeze must be at least freeze_budget (the policy's deadline would end the freeze)")
        return self


class Plan(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    source: SourceSide
    target: TargetSide
    profiles: dict[str, Profile] = Field(default_factory=dict)
    # Replaced, per load, by models of every registered phase's sections (see _sections).
    phases: _Sections
    gates: _Sections = Field(default_factory=_Sections)
    approve_before: list[str] = Field(default_factory=list)
    # Cron (as Prefect schedules it: five fields, or six with seconds); the deployment runs the plan on it.
    schedule: str | None = None
    # WARN stops the run too, not only FAIL.
    strict: bool = False
    retries: Retries = Field(default_factory=Retries)
    state_dir: FilePath = ".ferry"
    pricing: Pricing = Field(default_factory=Pricing)
    cutover: Cutover | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        # Exactly what Prefect's CronSchedule accepts: croniter's syntax, without random or hashed fields.
        if not croniter.is_valid(value) or any(f.casefold() in ("r", "h") for f in value.split()):
            raise ValueError(f"{value!r} is not a cron expression Prefect can schedule (e.g. '0 2 * * *')")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        enabled = self.enabled_phases()
        if not enabled:
            raise ValueError("no phase is enabled: add one under phases (e.g. data_sync: {})")
        for name in self.approve_before:
            if name not in enabled:
                raise ValueError(f"approve_before names {name!r}, which is not an enabled phase")
        for name in enabled:
            load_phase(name).check_plan(self)
        if self.cutover is not None:
            self._check_cutover(self.cutover, enabled)
        return self

    def _check_cutover(self, cutover: Cutover, enabled: list[str]) -> None:
        if "data_sync" not in enabled:
            raise ValueError("cutover: its deltas are data_sync's: enable phases.data_sync")
        for name in cutover.switch:
            if name not in enabled or name == "data_sync":
                others = [p for p in enabled if p != "data_sync"]
                raise ValueError(
                    f"cutover.switch: {name!r} is not an enabled phase other than data_sync "
                    f"({', '.join(others) or 'none'})"
                )
        if any(isinstance(step, QuiesceStep) for step in cutover.freeze) and self.source.cluster is None:
            raise ValueError("cutover.freeze: quiesce scales the source cluster's workloads: name source.cluster")
        scheme = self.source.storage.split("://", 1)[0] if "://" in self.source.storage else ""
        profile = self.profiles.get(scheme)
        s3 = scheme == "s3" or (profile is not None and profile.type == "s3")
        if any(isinstance(step, BucketPolicyStep) for step in cutover.freeze) and not s3:
            raise ValueError("cutover.freeze: bucket_policy needs an S3 source (source.storage is not S3)")
        if cutover.inventory is not None and not s3:
            raise ValueError("cutover.inventory: an S3 Inventory report needs an S3 source (source.storage is not S3)")
        if cutover.change_log is not None and not s3:
            raise ValueError("cutover.change_log: S3 event notifications need an S3 source (source.storage is not S3)")

    def require_phases(self, option: str, names: list[str] | None) -> None:
        """UsageError naming the option unless every name is an enabled phase (for --only, --force, --phase)."""
        enabled = self.enabled_phases()
        for name in names or []:
            if name not in enabled:
                raise UsageError(f"{option}: {name!r} is not a phase of this plan ({', '.join(enabled)})")

    def enabled_phases(self) -> list[str]:
        """The phases this plan runs, in pipeline order."""
        return [name for name in phase_names() if getattr(self.phases, name, None) is not None]


class BaseImageRule(_Strict):
    """Rebase FROM images matching `match` (`*` spans any characters) onto `to`."""

    match: str = Field(min_length=1)
    to: str = Field(min_length=1)


class Accelerator(_Strict):
    """One kind of accelerator a target offers: what code it runs, which the portability audit judges by."""

    description: str = ""
    # What runs on it as it is: "cuda" (CUDA kernels, calls and libraries), "nccl" (NCCL collectives). A finding
    # whose rule needs one of these is ok here, a blocker (or the rule's severity) elsewhere.
    runs: list[Literal["cuda", "nccl"]] = Field(default_factory=list)
    # Its collective-communication library, named where a finding is about NCCL.
    collectives: str = "NCCL"


def _nvidia() -> dict[str, Accelerator]:
    return {"nvidia": Accelerator(description="NVIDIA GPUs", runs=["cuda", "nccl"])}


class Fabric(_Strict):
    """The target's network for collectives: what its pods see, what RDMA on it needs, what it allows."""

    name: str = Field(min_length=1)
    # The pods' interfaces for socket traffic (NCCL's bootstrap, Gloo), as NCCL_SOCKET_IFNAME would name them.
    interfaces: list[str] = Field(default_factory=list)
    # Settings a container that configures RDMA needs on this fabric (RoCE v2: the GID index).
    rdma_env: dict[str, str] = Field(default_factory=dict)
    # Capabilities a container using RDMA needs (IPC_LOCK to register memory).
    rdma_capabilities: list[str] = Field(default_factory=list)
    # Whether pods may use the node's network namespace.
    host_network: bool = True
    # The capabilities a container may add (None: any).
    capabilities: list[str] | None = None


class TargetProfile(_Strict):
    """What a target platform needs: base images, SDK, annotations, GPU resources, RBAC, storage classes, and
    what its accelerators run and its fabric wants (the portability audit)."""

    name: str
    description: str = ""
    # Which source base images become which of the platform's own (first match wins); none: nothing is rebased.
    base_images: list[BaseImageRule] = Field(default_factory=list)
    # Dockerfile lines added to a rebased image's final stage, right after its FROM.
    sdk_steps: list[str] = Field(default_factory=list)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    rdma_resource: str | None = None
    rbac_roles: list[str] = Field(default_factory=list)
    storage_classes: dict[str, str] = Field(default_factory=dict)
    object_storage: Literal["s3", "azure", "fsspec"] = "s3"
    # By name, the first the default of a workload that names none.
    accelerators: dict[str, Accelerator] = Field(default_factory=_nvidia, min_length=1)
    fabric: Fabric | None = None
    # More portability rules (the form of ferry/golive/portability/rules.yaml), after ferry's; relative to the
    # profile's file.
    portability_rules: FilePath | None = None

    @field_validator("accelerators")
    @classmethod
    def _accelerator_names(cls, value: dict[str, Accelerator]) -> dict[str, Accelerator]:
        for name in value:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                raise ValueError(f"accelerator name {name!r}: lower-case letters, digits and dashes (e.g. mtia)")
        return value


def builtin_targets() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.yaml"))


def load_target_profile(ref: str, relative_to: Path) -> TargetProfile:
    """A built-in target profile by name, or a user's YAML profile by path (relative to the plan)."""
    if "/" not in ref and not ref.endswith((".yaml", ".yml")):
        if ref not in builtin_targets():  # (a name, not a file looked for: it may be no file name at all)
            raise UsageError(f"target profile {ref!r} is not built in ({', '.join(builtin_targets())}) nor a path")
        path = TARGETS_DIR / f"{ref}.yaml"
    else:
        path = Path(ref) if Path(ref).is_absolute() else relative_to / ref
    profile = load_yaml_model(path, TargetProfile)
    rules = profile.portability_rules
    if rules is not None and not Path(rules).is_absolute():
        profile = profile.model_copy(update={"portability_rules": str(path.parent / rules)})
    return profile


def secret_like(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (the words Airflow's secrets masker keys on,
    and Azure's SAS)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) or bool({"sas", "pat"} & set(lowered.split("_")))


_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "api_key", "private_key",
                 "access_key", "account_key", "credential", "connection_string", "authorization")  # fmt: skip
_WHERE_SECRETS_GO = (
    "plan fields are printed (summaries, logs, reports) and passed on command lines; a secret goes in a profile's or "
    "registry's credentials, as `<name>_env` or `<name>_secret`, which are never shown"
)


def _interpolate(node: Any, refs: set[str], loc: tuple = ()) -> Any:
    """Replace ${NAME} in every string with the environment's value; record the names used.

    A secret has no place in a plan field: neither ${NAME} of a variable named as a secret nor a URL with a password.
    """
    if isinstance(node, dict):
        return {k: _interpolate(v, refs, (*loc, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, refs, (*loc, i)) for i, v in enumerate(node)]
    if isinstance(node, str):

        def value(match: re.Match) -> str:
            name = match.group(1)
            refs.add(name)
            if secret_like(name):
                raise FieldProblem(loc, f"${{{name}}} names a secret: {_WHERE_SECRETS_GO}")
            if name not in os.environ:
                raise FieldProblem(loc, f"${{{name}}} is referenced but not set in the environment")
            return os.environ[name]

        resolved = _ENV_REF.sub(value, node)
        if "://" in resolved and _url_password(resolved):
            raise FieldProblem(loc, f"a URL with a password in it: {_WHERE_SECRETS_GO}")
        return resolved
    return node


def _url_password(text: str) -> bool:
    with contextlib.suppress(ValueError):
        return urlsplit(text.strip()).password is not None
    return False


class LoadedPlan:
    """A validated plan with where it came from, its target profile and the environment it used."""

    def __init__(
        self, path: Path, plan: Plan, target: TargetProfile, raw: dict, env_refs: set[str], node: yaml.Node | None
    ):
        self.path = path
        self.plan = plan
        self.target = target
        self.raw = raw
        self.env_refs = env_refs
        self._node = node

    def problem(self, loc: tuple, message: str) -> str:
        """One line naming the plan file, the line of the field at loc and the field: `file:line: a.b: message`."""
        return field_line(self.path, self._node, loc, message)

    def storage(self, role: str) -> str:
        """The storage URL of 'source' or 'target'; a relative local path is relative to the plan file."""
        url = getattr(self.plan, role).storage
        return url if "://" in url else str(self.resolve(url))

    @property
    def layout(self) -> StateLayout:
        """The plan's state directory (`state_dir`, relative to the plan file unless absolute)."""
        return StateLayout(self.resolve(self.plan.state_dir))

    def resolve(self, path: str) -> Path:
        """A path the plan names, relative to the plan file unless absolute."""
        return Path(path) if Path(path).is_absolute() else (self.path.parent / path).resolve()

    def credentials(self) -> dict[tuple, Credentials]:
        """The credentials the plan's own fields name (profiles, live IAM), by the field naming each; a phase's
        settings name more (`Phase.credentials`)."""
        named = {
            ("profiles", alias, "credentials"): profile.credentials for alias, profile in self.plan.profiles.items()
        }
        if self.plan.source.iam and self.plan.source.iam.aws:
            named[("source", "iam", "aws", "credentials")] = self.plan.source.iam.aws.credentials
        return named

    def masked(self) -> str:
        """The plan as written, ${NAME} references kept as references: nothing resolved is shown."""
        return yaml.safe_dump(self.raw, sort_keys=False, allow_unicode=True)


def secret_refs(named: dict[tuple, Credentials]) -> dict[tuple, SecretRef]:
    """Every secret the named credentials take, where it comes from, by the plan field naming it."""
    return {(*loc, ref.field): ref for loc, credentials in named.items() for ref in credentials.refs()}


def load_plan(path: Path) -> LoadedPlan:
    """Read and validate a plan file; every problem is one UsageError line with file, line and field."""
    refs: set[str] = set()
    found: dict[str, Any] = {}

    def prepare(data: dict) -> dict:
        found["raw"] = data
        resolved = _interpolate(data, refs)
        target = resolved.get("target")
        ref = target.get("profile", "generic-k8s") if isinstance(target, dict) else "generic-k8s"
        try:
            found["target"] = load_target_profile(str(ref), path.parent)
        except UsageError as exc:
            raise FieldProblem(("target", "profile"), str(exc)) from None
        return resolved

    gates = _sections("gates")
    model = create_model(
        "Plan", __base__=Plan, phases=(_sections("phases"), ...), gates=(gates, Field(default_factory=gates))
    )
    plan = load_yaml_model(path, model, transform=prepare)
    node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    for name in plan.enabled_phases():
        try:
            load_phase(name).check_target(plan, found["target"])
        except FieldProblem as exc:
            raise UsageError(field_line(path, node, exc.loc, str(exc))) from None
    return LoadedPlan(path, plan, found["target"], found["raw"], refs, node)
