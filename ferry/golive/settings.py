"""The go-live phase's settings (`phases.golive`) and gate (`gates.golive`): what to measure, and the bars."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ferry.config import Settings
from ferry.golive import cuda, placement, probe
from ferry.golive import jobs as probe_jobs
from ferry.plan import DNS_LABEL, FilePath, Size


def _server(value: Any) -> Any:
    """host:port or [ipv6]:port, as `ferry probe ping --server` takes it (one parser, one message)."""
    if isinstance(value, str):
        probe.parse_server(value)
        return value.strip()
    return value


class Latency(Settings):
    """The interconnect probe: to a running `ferry probe serve` (server), and/or as a pair of Jobs (jobs)."""

    server: Annotated[str | None, BeforeValidator(_server)] = None
    # The client's own address: which interface the round trips leave from (default: the OS chooses).
    client: str | None = None
    samples: int = Field(default=20000, ge=1, le=10_000_000)
    warmup: int = Field(default=probe.DEFAULT_WARMUP, ge=0)
    protocol: Literal["tcp", "udp"] = "tcp"
    # Render the probe pair as Jobs for target.cluster (validated; run when the cluster answers).
    jobs: bool = False
    image: str = probe_jobs.DEFAULT_IMAGE
    # How long the Jobs may take (image pull and scheduling included), and how often their status is read.
    jobs_timeout_s: float = Field(default=900, gt=0, le=probe_jobs.DEADLINE_S)
    poll_s: float = Field(default=2.0, gt=0, le=60)

    @model_validator(mode="after")
    def _somewhere(self) -> Latency:
        if self.server is None and not self.jobs:
            raise ValueError("name the probe's server (host:port of a `ferry probe serve`) or set jobs: true")
        return self


class Checkpoint(Settings):
    """The synthetic checkpoint written to target.storage under prefix, then removed."""

    size: Size = 8 << 30
    shards: int = Field(default=64, ge=1, le=100_000)
    prefix: str = "golive/ckpt/"
    threads: int = Field(default=16, ge=1, le=1024)

    @model_validator(mode="after")
    def _a_byte_per_shard(self) -> Checkpoint:
        if self.size < self.shards:
            raise ValueError(f"size {self.size} bytes cannot fill {self.shards} shards: give at least a byte a shard")
        return self


class Autoscaling(Settings):
    """The Deployment (and its HPA, if any) raised to replicas; the time until they are Ready is measured."""

    deployment: str = Field(pattern=DNS_LABEL)
    replicas: int = Field(ge=1, le=10_000)
    timeout_s: float = Field(default=600, gt=0, le=7200)
    # Named: its minReplicas is raised (the autoscaler scales the Deployment); else the Deployment is scaled.
    hpa: str | None = Field(default=None, pattern=DNS_LABEL)
    poll_s: float = Field(default=1.0, gt=0, le=60)


def _driver_version(value: Any) -> Any:
    """A driver version as nvidia-smi prints it, stripped; YAML's number (570.26 unquoted) is refused, not guessed."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f'{value!r} was read as a number: quote the driver version ("570.26")')
    if isinstance(value, str):
        cuda.parse_driver(value)
        return value.strip()
    return value


class Nodes(Settings):
    """The target GPU nodes' NVIDIA driver version (e.g. from nvidia-smi or the node's driver label)."""

    driver: Annotated[str | None, BeforeValidator(_driver_version)] = None


class WorkloadSettings(Settings):
    name: str = Field(min_length=1)
    params: Annotated[float, BeforeValidator(placement.parse_params)]
    nodes: int = Field(ge=1)
    # A fraction (0.14) or a percentage ("14%"); a bare 14 is refused, not read as 1400%.
    virt_overhead: Annotated[float, BeforeValidator(placement.parse_overhead)]
    hourly_cost_delta: float = Field(allow_inf_nan=False)
    job_hours: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # The target profile's accelerator it runs on (default: the profile's first): what the portability audit
    # judges its findings for.
    accelerator: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]*$")
    # Its code, requirements, Dockerfiles and manifests, relative to the plan: audited, and what its findings are
    # (none: every file the audit reads concerns it).
    paths: list[FilePath] = Field(default_factory=list)


class GoliveSettings(Settings):
    latency: Latency | None = None
    checkpoint: Checkpoint | None = None
    autoscaling: Autoscaling | None = None
    nodes: Nodes = Field(default_factory=Nodes)
    workloads: list[WorkloadSettings] = Field(default_factory=list)
    # Rule 3 of the placement advice applies to jobs longer than this.
    long_job_hours: float = Field(default=placement.LONG_JOB_HOURS, gt=0, allow_inf_nan=False)
    # Run the GPU probe (torch) where ferry runs; it SKIPs without torch or a GPU.
    gpu_probe: bool = True


class GoliveGate(Settings):
    p99_us: float = Field(default=50.0, gt=0)
    checkpoint_write_gb_per_s: float = Field(default=2.0, gt=0)
    checkpoint_read_gb_per_s: float = Field(default=4.0, gt=0)
    scale_up_s: float = Field(default=300.0, gt=0)
    # Portability blockers a workload may have (each workload on its accelerator) and the gate still pass.
    max_portability_blockers: int = Field(default=0, ge=0)
