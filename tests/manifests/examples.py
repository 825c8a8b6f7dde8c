"""The examples' manifests (examples/manifests) and the rules the tests render them with: the meta-compute profile,
the registries, a digest map of one image, a namespace moved and a JobSet's template path."""

from __future__ import annotations

from pathlib import Path

from ferry.digest_map import ImageRecord
from ferry.manifests.model import Rules, SourceFile
from ferry.manifests.source import load_sources
from ferry.plan import load_target_profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "manifests"
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/"
META = "registry.meta.example/ai-training/"
PINNED = "sha256:" + "c" * 64
NS = "ai-training-v4"


def example_rules() -> Rules:
    profile = load_target_profile("meta-compute", EXAMPLES)
    return Rules(
        plan="llm-train",
        images={ECR: META},
        digests={
            f"{ECR}trainer:2024.06": ImageRecord(f"{ECR}trainer:2024.06", f"{META}trainer:2024.06", PINNED, "copied")
        },
        pod_annotations=profile.pod_annotations,
        gpu_resource=profile.gpu_resource,
        rdma_resource=profile.rdma_resource,
        storage_classes={**profile.storage_classes, "gp3": "meta-flash"},
        namespaces={"ml-train": NS},
        template_paths={"jobset.x-k8s.io/JobSet": ("spec.replicatedJobs[].template.spec.template",)},
    )


def load_examples() -> list[SourceFile]:
    return load_sources([EXAMPLES], EXAMPLES)
